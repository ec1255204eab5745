"""Retention through the public API: `Runtime.prune`, `Runtime(retention=)` in a worker round,
`tarry prune`, and a SQLite file that gives the space of pruned sessions back."""

from __future__ import annotations

import datetime as dt
import json
import os
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import tarry
from tarry import Flow, Gate, ManualClock, Runtime
from tarry.drivers.worker import Worker
from tarry.snapshots import MemoryStore

TARRY = str(Path(sys.executable).parent / "tarry")
HOUR = timedelta(hours=1)


def boom(ctx: Any) -> None:
    raise RuntimeError("no luck")


ONE = Flow("one", [lambda ctx: "done"])
BROKEN = Flow("broken", [boom])
GATED = Flow("gated", [Gate("ok"), lambda ctx: "approved"])


def every_kind(rt: Runtime) -> dict[str, tarry.Outcome]:
    """A session of each status: completed, failed, cancelled, paused."""
    cancelled = rt.run(GATED)
    rt.cancel(cancelled.token)
    return {
        "completed": rt.run(ONE),
        "failed": rt.run(BROKEN),
        "cancelled": cancelled,
        "paused": rt.run(GATED),
    }


def ids(rt: Runtime) -> set[str]:
    return {s.session_id for s in rt.sessions(limit=1000)}


# -- Runtime.prune --------------------------------------------------------------------------------


def test_prune_deletes_sessions_that_ended_before_the_cutoff(store: Any) -> None:
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock, flows=[GATED])
    old = every_kind(rt)
    clock.advance(3 * 3600)
    recent = rt.run(ONE)
    assert rt.prune(older_than=HOUR, dry_run=True) == 3
    assert len(ids(rt)) == 5  # a dry run deletes nothing
    assert rt.prune(older_than=HOUR) == 3
    assert ids(rt) == {old["paused"].session_id, recent.session_id}
    for kind in ("completed", "failed", "cancelled"):
        with pytest.raises(tarry.UnknownSession):
            rt.session(old[kind].session_id)
    with pytest.raises(tarry.UnknownToken):  # the failed session's token went with it
        rt.resume(old["failed"].token)
    # What is left works as before.
    assert rt.resume(old["paused"].token, True).ok
    assert rt.prune(older_than=HOUR) == 0
    assert rt.stats().by_status == {"completed": 2}


def test_prune_only_the_statuses_named(store: Any) -> None:
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock)
    old = every_kind(rt)
    clock.advance(3 * 3600)
    assert rt.prune(older_than=HOUR, status="failed") == 1
    assert rt.prune(older_than=HOUR, status=["cancelled", "completed"], dry_run=True) == 2
    assert rt.prune(older_than=timedelta(hours=4)) == 0  # not that old yet
    assert ids(rt) == {old[k].session_id for k in ("completed", "cancelled", "paused")}


def test_prune_of_many_sessions_goes_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    from tarry.drivers.rounds import pruning

    monkeypatch.setattr(pruning, "BATCH", 7)
    calls: list[int] = []
    store = MemoryStore()
    prune = store.prune

    def counted(**kw: Any) -> int:
        deleted = prune(**kw)
        calls.append(deleted)
        return deleted

    store.prune = counted  # type: ignore[method-assign]
    clock = ManualClock()
    rt = Runtime(store=store, clock=clock)
    for _ in range(20):
        rt.run(ONE)
    clock.advance(7200)
    assert rt.prune(older_than=HOUR) == 20
    assert calls == [7, 7, 6]
    assert ids(rt) == set()


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"older_than": timedelta(seconds=-1)}, "older_than"),
        ({"older_than": 3600}, "older_than"),
        ({"older_than": "7d"}, "older_than"),
        ({"older_than": HOUR, "status": "paused"}, "'paused'"),
        ({"older_than": HOUR, "status": ("running",)}, "'running'"),
        ({"older_than": HOUR, "status": ("completed", "paused")}, "'paused'"),
        ({"older_than": HOUR, "status": ()}, "status"),
        ({"older_than": HOUR, "status": "done"}, "'done'"),
        ({"older_than": HOUR, "status": 5}, "status"),
        ({"older_than": HOUR, "status": None}, "status"),
    ],
)
def test_bad_prune_arguments_are_refused_and_delete_nothing(
    kwargs: dict[str, Any], word: str
) -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    every_kind(rt)
    clock.advance(3 * 3600)
    with pytest.raises(tarry.InvalidArgument, match=word):
        rt.prune(**kwargs)
    assert len(ids(rt)) == 4


def test_prune_older_than_zero_deletes_every_ended_session() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    every_kind(rt)  # three ended this very instant, and a paused one
    assert rt.prune(older_than=timedelta(0), dry_run=True) == 3
    assert rt.prune(older_than=timedelta(0)) == 3
    assert len(ids(rt)) == 1


@pytest.mark.parametrize("bad", [timedelta(0), timedelta(days=-1), 86400, "7d"])
def test_a_bad_retention_is_refused(bad: Any) -> None:
    with pytest.raises(tarry.InvalidArgument, match="retention"):
        Runtime(retention=bad)


# -- retention in a worker round ------------------------------------------------------------------


def test_a_worker_prunes_by_retention_at_most_once_a_minute(store: Any) -> None:
    start = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    # Sessions that ended long ago, written by a process whose clock is in the past.
    past = Runtime(store=store, clock=ManualClock(start - timedelta(days=3)), flows=[GATED])
    old = every_kind(past)
    clock = ManualClock(start)
    rt = Runtime(store=store, clock=clock, retention=timedelta(days=1))
    assert rt.retention == timedelta(days=1)
    recent = rt.run(ONE)
    worker = Worker(rt)
    worker.run_once()
    assert ids(rt) == {old["paused"].session_id, recent.session_id}
    # Within the minute the next rounds do not prune again, even with something to prune.
    late = past.run(ONE)
    clock.advance(30)
    worker.run_once()
    assert late.session_id in ids(rt)
    clock.advance(31)
    worker.run_once()
    assert ids(rt) == {old["paused"].session_id, recent.session_id}


def test_without_retention_a_worker_prunes_nothing() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    rt.run(ONE)
    clock.advance(10 * 365 * 86400)
    Worker(rt).run_once()
    assert rt.retain() == 0
    assert len(ids(rt)) == 1


# -- SQLite gives the space back ------------------------------------------------------------------


def _file_size(path: Path) -> int:
    wal = Path(f"{path}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def test_sqlite_file_shrinks_after_a_prune(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    clock = ManualClock()
    rt = Runtime(store=f"sqlite:///{path}", clock=clock)
    flow = Flow("fat", [lambda ctx: "x" * 4000, lambda ctx: ctx.prev.upper()])
    for _ in range(300):
        assert rt.run(flow).ok
    kept = rt.run(GATED)
    rt.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    full = _file_size(path)
    clock.advance(7200)
    assert rt.prune(older_than=HOUR) == 300
    shrunk = _file_size(path)
    assert shrunk < full / 4, (full, shrunk)
    assert ids(rt) == {kept.session_id}
    assert rt.resume(kept.token, True).ok
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # incremental
    finally:
        db.close()


def test_an_older_sqlite_file_is_converted_to_incremental_vacuum(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    rt = Runtime(store=f"sqlite:///{path}", flows=[GATED])
    out = rt.run(GATED)
    rt.store.close()
    # As a tarry before retention left it: no auto-vacuum.
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA auto_vacuum = NONE")
    db.execute("VACUUM")
    assert db.execute("PRAGMA auto_vacuum").fetchone() == (0,)
    db.close()
    again = Runtime(store=f"sqlite:///{path}", flows=[GATED])
    assert again.store._db.execute("PRAGMA auto_vacuum").fetchone() == (2,)
    assert again.resume(out.token, True).ok  # everything it held is still there


# -- tarry prune ----------------------------------------------------------------------------------


def tarry_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TARRY_STORE", "TARRY_SECRET")}
    return subprocess.run(
        [TARRY, *args], cwd=cwd, capture_output=True, text=True, timeout=60, env=env
    )


def test_tarry_prune(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    long_ago = Runtime(store=url, clock=ManualClock(dt.datetime(2020, 1, 1, tzinfo=dt.UTC)))
    old = every_kind(long_ago)
    recent = Runtime(store=url).run(ONE)
    dry = tarry_cli("prune", "--older-than", "7d", "--dry-run", "--store", url, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "would prune 3 sessions" in dry.stdout
    only = tarry_cli(
        "prune", "--older-than", "12h", "--status", "failed", "--json", "--store", url, cwd=tmp_path
    )
    assert only.returncode == 0, only.stderr
    assert json.loads(only.stdout) == {
        "sessions": 1,
        "dry_run": False,
        "older_than_seconds": 43200.0,
        "status": ["failed"],
    }
    done = tarry_cli("--store", url, "prune", "--older-than", "30s", cwd=tmp_path)
    assert done.returncode == 0 and "pruned 2 sessions" in done.stdout
    left = Runtime(store=url)
    assert ids(left) == {old["paused"].session_id, recent.session_id}


@pytest.mark.parametrize("given", ["7x", "7", "d", "0d", "-1d", "1.5h", "99999999999999d"])
def test_tarry_prune_refuses_a_bad_duration(tmp_path: Path, given: str, capsys: Any) -> None:
    from tarry.drivers.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["prune", f"--older-than={given}", "--store", "memory://"])
    assert exited.value.code == 2
    assert "invalid duration" in capsys.readouterr().err


def test_tarry_worker_takes_a_retention(tmp_path: Path) -> None:
    from tarry.drivers.cli.common import runtime_of
    from tarry.drivers.cli.parser import build_parser

    args = build_parser().parse_args(["worker", "--retention", "15m", "--store", "memory://"])
    assert runtime_of(args).retention == timedelta(minutes=15)
