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

Numbers land in `extra_info`; docs/performance.md quotes them. `make test` runs each once at a
tiny size (--benchmark-disable).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tarry import Flow, ForEach, Runtime, Wait
from tarry.snapshots import SQLiteStore


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
    small = 100 if sizes.full else 10
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

    def run() -> None:
        for i in range(n):
            done.extend(rt.deliver(f"d/{i}", {"score": i}))

    benchmark.pedantic(run, rounds=1, iterations=1)
    assert len(done) == n and all(o.ok for o in done)
    per = (wal.stat().st_size - before) / n
    benchmark.extra_info.update(
        deliveries=n, wal_bytes_per_delivery=round(per), floor_bytes=8192, target_bytes=24 * 1024
    )
    store.close()
