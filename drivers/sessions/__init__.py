"""What a caller does to one session: start it, resume it, resume many waits, stop it."""
