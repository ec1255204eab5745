"""One drive of a session: the pump, the drive and what it writes, its ledger and its outcome."""
