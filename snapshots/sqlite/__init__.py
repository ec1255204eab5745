"""SQLiteStore: sessions in one SQLite file shared by threads and processes (see store.py)."""
