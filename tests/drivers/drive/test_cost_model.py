"""The cost model of ARCHITECTURE.md, checked on bytes the stores count (timings are benchmarks).

A ForEach over the flow's input (10,000 prompts of 200 characters, about 2 MB) with a Gate in
every iteration, after a large top-level output: the bytes one pause writes and one resume
reads are the same at iteration 10 as at iteration 9,000 (within 10%) and under 2 KB, the
input, the large output and the items are written once, and each result is written once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tarry import Flow, ForEach, Gate, Runtime, step
from tarry.snapshots import MemoryStore, SQLiteStore

N = 10_000
PROMPTS = [f"prompt {i:05d} " + "x" * 187 for i in range(N)]  # 200 characters each
BIG = "y" * 100_000


def flow() -> Flow:
    return Flow(
        "cost",
        [
            step(lambda ctx: BIG, "big"),
            ForEach("items", lambda ctx: ctx.input["prompts"], [lambda ctx: ctx.item, Gate("g")]),
        ],
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_pause_and_resume_bytes_do_not_grow_with_the_iteration(kind: str, tmp_path: Path) -> None:
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "cost.db")
    rt = Runtime(store=store)
    out = rt.run(flow(), input={"prompts": PROMPTS})
    first_write = store.bytes_written
    measured: dict[int, tuple[int, int]] = {}
    for k in range(1, 9_001):
        written, read = store.bytes_written, store.bytes_read
        out = rt.resume(out.token, True)
        assert out.paused
        if k in (10, 9_000):  # resume of iteration k-1 + pause at iteration k
            measured[k] = (store.bytes_written - written, store.bytes_read - read)
    (w10, r10), (w9000, r9000) = measured[10], measured[9_000]
    assert abs(w9000 - w10) <= 0.10 * w10, (w10, w9000)
    assert abs(r9000 - r10) <= 0.10 * r10, (r10, r9000)
    # The input, the big output and the items went out once, before or with the first pause:
    # far more than any later pause writes.
    assert first_write > 2_000_000
    assert w10 <= 2_000 and w9000 <= 2_000 and r10 < 1_500
    assert len(store.load(out.session_id).state) < 1_000  # the snapshot refers to the input

    view = rt.session(out.session_id)
    frame = view.state.container_stack[0]
    assert frame.iteration == 9_000 and frame.size == N
    assert len(repr(frame)) < 1_000  # a frame holds no items and no results
    assert view.state.input == {"prompts": PROMPTS}
