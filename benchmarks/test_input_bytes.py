"""A ForEach over the flow's input: 10,000 prompts of 200 characters (about 2 MB), a Gate per
prompt, after a 100 KB top-level output; one pause -> resume round trip at item k (10 and
9,000) on SQLite, and the bytes it writes and reads.

The input and the large output are stored once, with the events that bring them in, and the
state refers to them (docs/durability.md): a pause writes the same ~2 KB at item 10 as at item
9,000. Before they were kept out of line, every pause wrote (and every resume read) the input
and the output again: 2,121,690 bytes per pause on this workload.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench_support import Sizes, label
from tarry import Flow, ForEach, Gate, Runtime, step
from tarry.snapshots import SQLiteStore

BIG = "y" * 100_000


def prompts(n: int) -> list[str]:
    return [f"prompt {i:05d} " + "x" * 187 for i in range(n)]  # 200 characters each


def flow() -> Flow:
    return Flow(
        "prompts",
        [
            step(lambda ctx: BIG, "big"),
            ForEach("each", lambda ctx: ctx.input["prompts"], [lambda ctx: ctx.item, Gate("g")]),
        ],
    )


@pytest.mark.parametrize("at", [0, 1], ids=["k_early", "k_late"])
def test_tarry_pause_bytes_with_a_large_input(
    benchmark: Any, sizes: Sizes, tmp_path: Path, at: int
) -> None:
    k = sizes.ks[at]
    store = SQLiteStore(tmp_path / "input.db")
    rt = Runtime(store=store)
    out = rt.run(flow(), input={"prompts": prompts(sizes.loop)})
    for _ in range(k):
        out = rt.resume(out.token, True)
    assert out.pause.path == ("each", k, "g")
    last = {"out": out}

    def trip() -> None:
        last["out"] = rt.resume(last["out"].token, True)

    benchmark.pedantic(trip, rounds=sizes.rounds, warmup_rounds=0)
    written, read = store.bytes_written, store.bytes_read
    trip()
    out = last["out"]
    assert out.paused
    label(
        benchmark,
        "input_pause_sqlite",
        "tarry",
        k=k,
        prompts=sizes.loop,
        bytes_written=store.bytes_written - written,
        bytes_read=store.bytes_read - read,
        snapshot_bytes=len(store.load(out.session_id).state),
    )
    if sizes.full:
        assert store.bytes_written - written <= 2_000
