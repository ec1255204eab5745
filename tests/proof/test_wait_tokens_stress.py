"""Stress: 8 threads and 4 processes race `consume_token` and `consume_tokens` over the 50
waiting branches' tokens of ONE session, on SQLite and PostgreSQL. Every token must be won
exactly once, and a batch is won whole or not at all (a half-applied batch would leave a token
used that nobody won, or won twice)."""

from __future__ import annotations

import multiprocessing
import random
import sys
import threading
from pathlib import Path
from typing import Any

import pgserver
import pytest
import support
from tarry.snapshots import SQLiteStore, TokenInfo, WaitRecord

BRANCHES = 50
THREADS = 8
PROCESSES = 4
ATTEMPTS = 40  # per actor: far more than 50 tokens need, so most attempts lose a race


def _open(where: dict[str, Any]) -> Any:
    if where["kind"] == "sqlite":
        return SQLiteStore(where["path"])
    from tarry.snapshots import PostgresStore

    return PostgresStore(where["dsn"], schema=where["schema"])


def _attempts(store: Any, seed: int) -> list[list[str]]:
    """What one actor won: a list per attempt that succeeded (one token, or a whole batch)."""
    rng = random.Random(seed)
    tokens = [f"tk_{i:02}" for i in range(BRANCHES)]
    won: list[list[str]] = []
    for _ in range(ATTEMPTS):
        if rng.random() < 0.5:
            token = rng.choice(tokens)
            if store.consume_token(token):
                won.append([token])
        else:
            batch = rng.sample(tokens, rng.randint(2, 5))
            refused = store.consume_tokens(batch, owner=f"w{seed}", until=support.at(60))
            if refused == {}:
                won.append(batch)
            else:
                assert set(refused) <= set(batch) and set(refused.values()) <= {"used"}, refused
    return won


def _child(where: dict[str, Any], seed: int, barrier: Any, results: Any) -> None:
    store = _open(where)
    try:
        barrier.wait(timeout=60)
        results.put(_attempts(store, seed))
    finally:
        store.close()


def _race(where: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    store = _open(where)
    sid = "one"
    store.create(support.rec(sid))
    waits = [WaitRecord(f"tk_{i:02}", sid, ("items", i, "w"), "external") for i in range(BRANCHES)]
    store.save(support.rec(sid, status="paused", token=waits[0].token), 0, waits=waits)
    # Spawned children import this module by name: make the repository root importable.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(PROCESSES + THREADS), ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(where, 100 + i, barrier, results))
        for i in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    won: list[list[str]] = []
    lock = threading.Lock()

    def thread(seed: int) -> None:
        barrier.wait(timeout=60)
        mine = _attempts(store, seed)
        with lock:
            won.extend(mine)

    threads = [threading.Thread(target=thread, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for _ in procs:
        won.extend(results.get(timeout=120))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    # Tokens nobody drew are won now, one at a time.
    drawn = {t for batch in won for t in batch}
    won.extend([t] for t in sorted({f"tk_{i:02}" for i in range(BRANCHES)} - drawn)
               if store.consume_token(t))  # fmt: skip
    tokens = sorted(t for batch in won for t in batch)
    assert tokens == [f"tk_{i:02}" for i in range(BRANCHES)]  # each once: none lost, none twice
    assert len(drawn) > BRANCHES // 2  # the race did the work, not the clean-up
    assert store.waits(sid) == [] and store.waiting() == []
    assert all(store.find_token(t) == TokenInfo(sid, True) for t in tokens)
    assert store.load(sid).status == "running"
    store.close()


def test_sqlite_tokens_of_one_session_are_won_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _race({"kind": "sqlite", "path": str(tmp_path / "s.db")}, monkeypatch)


def test_postgres_tokens_of_one_session_are_won_once(monkeypatch: pytest.MonkeyPatch) -> None:
    store = pgserver.scratch_store()  # a fresh migrated schema, skipped without a server
    schema = store.schema
    try:
        _race({"kind": "postgres", "dsn": pgserver.server_dsn(), "schema": schema}, monkeypatch)
    finally:
        store.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
