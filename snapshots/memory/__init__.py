"""MemoryStore: sessions held in this process (see store.py)."""
