"""PostgresStore: sessions in PostgreSQL shared by many workers (see store.py)."""
