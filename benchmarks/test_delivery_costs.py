"""What a delivery costs (issue 24), as ratios measured in one run.

- **Trickle**: one session whose `ForEach(concurrency=None)` has N branches waiting on their own
  keys, their results delivered one `deliver` at a time. CPU seconds for N = small and N = 10 ×
  small, and their ratio: the promise is that it follows what moves (ratio ≤ 12 for 10 × the
  branches); today each resume of one branch decodes and re-encodes the lanes of all the waiting
  ones, so the ratio shows the O(N²) that waits-as-rows removes.
- **Queued messages**: N messages delivered before their waits, then taken one by one by the
  Waits of a sequential ForEach: CPU per message at N and 10 × N (flat: each take is an index
  look-up and the write that records it).
- **SQLite WAL bytes per delivery**: one keyed wait per session, one `deliver` each; the WAL's
  growth (checkpoints off) divided by the deliveries, beside the floor of one commit (two 4 KB
  pages).
- **SQLite WAL bytes per pause** (issue 28): the pause -> resume round trip of the loop of
  test_pause_resume.py (a resume, the step run again, the pause at the next item), early and
  late in the loop: the WAL's growth (checkpoints off) per round trip, its frames, the
  statements and commits it took, beside the payload bytes (snapshot, events, values).
- **SQLite bytes of a wide start**: one session whose `ForEach(concurrency=None)` over 10,000
  items pauses every branch at a keyed Wait, in one save: the bytes written (the process's
  write calls, on Linux, so that WAL frames written twice and statement journals count;
  elsewhere the WAL's growth) beside its data (the snapshot, the wait rows, the events).

Numbers land in `extra_info`; docs/performance.md quotes them. `make test` runs each once at a
tiny size (--benchmark-disable).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from tarry import Flow, ForEach, Runtime, Wait
from tarry.snapshots import MemoryStore, SQLiteStore, dumps


def _fan(n: int) -> Flow:
    return Flow(
        f"fan{n}",
        [
            ForEach(
                "items",
                list(range(n)),
                [Wait("w", key=lambda ctx: f"t{n}/{ctx.item}")],
                concurrency=None,
            )
        ],
    )


def _trickle(n: int) -> float:
    """CPU seconds to deliver the results of n waiting branches one by one."""
    rt = Runtime()
    out = rt.run(_fan(n))
    assert out.paused and len(out.pauses) == n
    start = time.process_time()
    for i in range(n):
        [done] = rt.deliver(f"t{n}/{i}", i)
    spent = time.process_time() - start
    assert done.ok and done.output == list(range(n))
    return spent


def test_trickling_results_to_one_wide_session(benchmark: Any, sizes: Any) -> None:
    small = 1_000 if sizes.full else 10
    timings: dict[str, float] = {}

    def run() -> None:
        timings["small"] = _trickle(small)
        timings["large"] = _trickle(small * 10)

    benchmark.pedantic(run, rounds=1, iterations=1)
    ratio = timings["large"] / max(timings["small"], 1e-9)
    benchmark.extra_info.update(
        branches=(small, small * 10),
        cpu_seconds=(round(timings["small"], 4), round(timings["large"], 4)),
        ratio=round(ratio, 1),
        target_ratio=12,
    )
    if sizes.full:  # waiting branches are rows: each resume costs the same at any width
        assert ratio <= 12


class _Counting(MemoryStore):
    """A MemoryStore that counts the bytes it hands out (snapshots, parked lanes, events) and
    is given (snapshots, wait rows, events): what a durable store would read and write."""

    def __init__(self) -> None:
        super().__init__()
        self.read = self.written = 0

    def load(self, session_id: str) -> Any:
        record = super().load(session_id)
        self.read += 0 if record is None else len(record.state)
        return record

    def wait(self, token: str) -> Any:
        found = super().wait(token)
        self.read += 0 if found is None else len(found.lane) + len(found.payload)
        return found

    def waits(self, session_id: str, *, limit: int | None = None) -> Any:
        found = super().waits(session_id, limit=limit)
        self.read += sum(len(w.lane) + len(w.payload) for w in found)
        return found

    def save(self, record: Any, expected_version: int, **parts: Any) -> int:
        self.written += len(record.state) + _sizes(parts)
        return super().save(record, expected_version, **parts)

    def consume_token(self, token: str, **parts: Any) -> bool:
        self.written += _sizes(parts)
        return super().consume_token(token, **parts)


def _sizes(parts: dict[str, Any]) -> int:
    events = parts.get("events") or ()
    waits = parts.get("waits") or ()
    return sum(len(dumps(e.data)) for e in events) + sum(len(w.lane) + 64 for w in waits)


def _one_resume(n: int) -> tuple[int, int, int]:
    """(bytes read, bytes written, SQLite WAL bytes) of delivering to one branch of a session
    where n branches wait."""
    store = _Counting()
    rt = Runtime(store=store)
    assert rt.run(_fan(n)).paused
    store.read = store.written = 0
    [out] = rt.deliver(f"t{n}/{n // 2}", 1)
    assert out.paused
    read, written = store.read, store.written
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.db"
        sqlite = SQLiteStore(path)
        rt = Runtime(store=sqlite)
        assert rt.run(_fan(n)).paused
        with sqlite._lock:
            sqlite._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            sqlite._db.execute("PRAGMA wal_autocheckpoint = 0")
        wal = Path(f"{path}-wal")
        before = wal.stat().st_size if wal.exists() else 0
        [out] = rt.deliver(f"t{n}/{n // 2}", 1)
        assert out.paused
        wal_bytes = wal.stat().st_size - before
        sqlite.close()
    return read, written, wal_bytes


def test_a_resume_of_one_branch_costs_the_same_at_any_width(benchmark: Any, sizes: Any) -> None:
    small, large = (100, 10_000) if sizes.full else (10, 200)
    found: dict[str, tuple[int, int, int]] = {}

    def run() -> None:
        found["small"] = _one_resume(small)
        found["large"] = _one_resume(large)

    benchmark.pedantic(run, rounds=1, iterations=1)
    (r1, w1, s1), (r2, w2, s2) = found["small"], found["large"]
    ratios = (round(r2 / r1, 2), round(w2 / w1, 2), round(s2 / max(s1, 1), 2))
    benchmark.extra_info.update(
        branches=(small, large),
        bytes_read=(r1, r2),
        bytes_written=(w1, w2),
        sqlite_wal_bytes=(s1, s2),
        ratios=ratios,
        target_ratio=1.5,
    )
    # Reads and writes follow what moves: the head, one wait row, the events of the resume.
    assert ratios[0] <= 1.5 and ratios[1] <= 1.5


def _queued(n: int) -> float:
    """CPU seconds per message: n messages queued before their Waits, then taken in turn."""
    rt = Runtime()
    flow = Flow(
        f"seq{n}",
        [ForEach("items", list(range(n)), [Wait("w", key=lambda ctx: f"q{n}/{ctx.item}")])],
    )
    for i in range(n):
        assert rt.deliver(f"q{n}/{i}", i) == []
    start = time.process_time()
    out = rt.run(flow)
    spent = time.process_time() - start
    assert out.ok and out.output == list(range(n))
    return spent / n


def test_queued_messages_are_taken_at_a_flat_cost(benchmark: Any, sizes: Any) -> None:
    small = 1_000 if sizes.full else 20
    per: dict[str, float] = {}

    def run() -> None:
        per["small"] = _queued(small)
        per["large"] = _queued(small * 10)

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(
        messages=(small, small * 10),
        cpu_us_per_message=(round(per["small"] * 1e6, 1), round(per["large"] * 1e6, 1)),
        ratio=round(per["large"] / max(per["small"], 1e-12), 2),
    )


def test_sqlite_wal_bytes_per_delivery(benchmark: Any, sizes: Any, tmp_path: Path) -> None:
    n = 200 if sizes.full else 10
    path = tmp_path / "d.db"
    store = SQLiteStore(path)
    with store._lock:  # checkpoints off: the WAL keeps every page written
        store._db.execute("PRAGMA wal_autocheckpoint = 0")
    rt = Runtime(store=store)
    flow = Flow("one", [Wait("w", key=lambda ctx: f"d/{ctx.input}")])
    for i in range(n):
        assert rt.run(flow, i).paused
    wal = Path(f"{path}-wal")
    before = wal.stat().st_size
    done: list[Any] = []
    statements = _Statements(store)

    def run() -> None:
        for i in range(n):
            done.extend(rt.deliver(f"d/{i}", {"score": i}))

    benchmark.pedantic(run, rounds=1, iterations=1)
    statements.stop()
    assert len(done) == n and all(o.ok for o in done)
    per = (wal.stat().st_size - before) / n
    benchmark.extra_info.update(
        deliveries=n,
        wal_bytes_per_delivery=round(per),
        statements_per_delivery=round(statements.count / n, 1),
        commits_per_delivery=round(statements.commits / n, 1),
        floor_bytes=_FLOOR,
        ratio_to_floor=round(per / _FLOOR, 1),
        target_bytes=24 * 1024,
    )
    store.close()
    # 108 KB before schema 6, 80 KB with it, 74 KB with the event log clustered on its key;
    # 65 KB with schema 7's listing by phase, which a pause and a resume leave alone: two
    # commits of eight to ten 4 KB pages each. 23 KB with 1 KB pages (new files since
    # store.PAGE_SIZE): the same two commits, some twenty-two pages (see docs/durability.md).
    if sizes.full:
        assert per <= 24 * 1024


#: One commit's floor as the issue put it: two 4 KB pages (a table's and an index's).
_FLOOR = 8192


def _frame(wal: Path) -> int:
    """The bytes of one WAL frame: a page (its size is in the WAL's header) and 24 bytes."""
    with wal.open("rb") as f:
        return int.from_bytes(f.read(12)[8:12], "big") + 24


class _Statements:
    """Counts the statements a SQLiteStore's connection runs (its trace callback), and the
    commits among them, until `stop`."""

    def __init__(self, store: SQLiteStore) -> None:
        self.count = self.commits = 0
        self._store = store
        store._db.set_trace_callback(self._seen)

    def _seen(self, sql: str) -> None:
        self.count += 1
        self.commits += sql == "COMMIT"

    def stop(self) -> None:
        self._store._db.set_trace_callback(None)


def _pause_round_trips(loop: int, k: int, trips: int, path: Path) -> dict[str, float]:
    """WAL bytes, frames, statements, commits and payload bytes per pause -> resume round trip
    of the paused loop (bench_tarry.paused_loop) from item k on, averaged over `trips`."""
    import bench_tarry

    store = SQLiteStore(path)
    with store._lock:  # checkpoints off: the WAL keeps every page written
        store._db.execute("PRAGMA wal_autocheckpoint = 0")
    rt = Runtime(store=store)
    out = rt.run(bench_tarry.paused_loop(loop, k))
    out = rt.resume(out.token, True)  # the first round trip reads what `run` left
    wal = Path(f"{path}-wal")
    before, payload = wal.stat().st_size, store.bytes_written
    statements = _Statements(store)
    for _ in range(trips):
        out = rt.resume(out.token, True)
    statements.stop()
    assert out.paused and out.pause.path[1] == k + trips + 1
    grown = wal.stat().st_size - before
    found = {
        "wal_bytes": grown / trips,
        "frames": grown / _frame(wal) / trips,
        "statements": statements.count / trips,
        "commits": statements.commits / trips,
        "payload_bytes": (store.bytes_written - payload) / trips,
    }
    store.close()
    return found


def test_sqlite_wal_bytes_per_pause(benchmark: Any, sizes: Any, tmp_path: Path) -> None:
    trips = 200 if sizes.full else 5
    found: dict[int, dict[str, float]] = {}

    def run() -> None:
        for k in sizes.ks:
            found[k] = _pause_round_trips(sizes.loop, k, trips, tmp_path / f"p{k}.db")

    benchmark.pedantic(run, rounds=1, iterations=1)
    per = {name: [round(found[k][name], 1) for k in sizes.ks] for name in found[sizes.ks[0]]}
    worst = max(found[k]["wal_bytes"] for k in sizes.ks)
    benchmark.extra_info.update(
        ks=list(sizes.ks),
        round_trips=trips,
        wal_bytes_per_pause=[round(v) for v in per["wal_bytes"]],
        frames_per_pause=per["frames"],
        statements_per_pause=per["statements"],
        commits_per_pause=per["commits"],
        payload_bytes_per_pause=[round(v) for v in per["payload_bytes"]],
        ratio_to_floor=round(worst / _FLOOR, 1),
        target_bytes=24 * 1024,
    )
    if sizes.full:
        # The WAL a round trip writes does not grow with where the loop is (k = 10 or 9,000).
        assert max(per["frames"]) <= min(per["frames"]) + 2
        # 92 KB at both ks with 4 KB pages: 22 frames in two commits (the token's use, the
        # lease and the `run.resumed` event; then the save of the pause), 18 statements, for
        # about 1 KB of payload. With 1 KB pages (store.PAGE_SIZE), 27 to 28 KB: some 26
        # frames. 23.5 to 23.9 KB (some 23 frames) since SQLite schema 8 keeps a waiting
        # branch's token in its wait row and an event's row has no type column: the target
        # of 24 KB is met, with a margin of a frame; this bound allows two more.
        assert worst <= 26 * 1024


def _written() -> int | None:
    """Bytes this process has passed to write calls so far (Linux), else None."""
    try:
        with open("/proc/self/io") as io:
            return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))
    except (OSError, StopIteration):
        return None


def test_sqlite_bytes_written_by_a_wide_start(benchmark: Any, sizes: Any, tmp_path: Path) -> None:
    n = 10_000 if sizes.full else 200
    path = tmp_path / "w.db"
    store = SQLiteStore(path)
    with store._lock:  # checkpoints off: the WAL keeps every page written
        store._db.execute("PRAGMA wal_autocheckpoint = 0")
    rt = Runtime(store=store)
    branches = [Wait("w", key=lambda ctx: f"w/{ctx.item}")]
    flow = Flow("wide", [ForEach("items", list(range(n)), branches, concurrency=None)])
    wal = Path(f"{path}-wal")
    grown = wal.stat().st_size
    written = _written()
    outs: list[Any] = []
    benchmark.pedantic(lambda: outs.append(rt.run(flow)), rounds=1, iterations=1)
    after = _written()
    grown = wal.stat().st_size - grown
    assert outs[0].paused
    with store._lock:
        data = sum(
            store._db.execute(sql).fetchone()[0] or 0
            for sql in (
                "SELECT sum(length(state)) FROM sessions",
                "SELECT sum(length(token) + length(session_id) + length(path) + length(kind) "
                "+ coalesce(length(key), 0) + length(reason) + length(payload) + length(lane)) "
                "FROM waits",
                "SELECT sum(length(blob)) FROM events",
            )
        )
    store.close()
    total = grown if written is None or after is None else max(after - written, grown)
    ratio = total / data
    benchmark.extra_info.update(
        branches=n,
        data_bytes=data,
        bytes_written=total,
        wal_growth_bytes=grown,
        ratio=round(ratio, 2),
        target_ratio=3,
    )
    # Before schema 6: 313 MB written (WAL frames spilled and written again, and statement
    # journals) for 4.2 MB of data; 3.3 to 3.5 times the data with it, 2.93 since the event log
    # and the values are clustered on their keys (a file made before keeps its layout): 12.3 MB.
    # 11.8 MB with 1 KB pages and the parked lanes' pauses in short (records.encode_lane),
    # which also shrank the data to 3.3 MB: 3.6 times it. 9.4 MB, 2.85 times, since SQLite
    # schema 8 keeps each token in its wait row (three b-trees fewer per wait) and leaves the
    # events' type column out: the target of 3 is met. The tokens are random, so the pages a
    # start fills vary by about 1% from run to run.
    if sizes.full:
        assert ratio <= 3
