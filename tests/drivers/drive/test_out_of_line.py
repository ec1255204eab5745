"""A large flow input and large top-level outputs are stored once, with the event that brings them
in, and the state refers to them: every snapshot after stays small, and whatever reads them
(`ctx.input`, `ctx.outputs`, `ctx.prev`, `Outcome.pause.partial`, `SessionView.state`) reads
them back, in this process or any other."""

from __future__ import annotations

from typing import Any

import pytest
import tarry
from support import Crash
from tarry import Flow, ForEach, Gate, ManualClock, Runtime, step
from tarry.engine import bounds
from tarry.snapshots.records import decode_state

PROMPTS = [f"{i:04d} " + "p" * 195 for i in range(200)]  # ~40 KB
BIG = "o" * 20_000


def snapshot_size(store: Any, sid: str) -> int:
    return len(store.load(sid).state)


def flow() -> Flow:
    return Flow(
        "big",
        [
            step(lambda ctx: BIG, "big"),
            ForEach(
                "fe",
                lambda ctx: ctx.input["prompts"][:3],
                [
                    lambda ctx: (ctx.item[:4], len(ctx.outputs["big"]), len(ctx.input["prompts"])),
                    Gate("ok"),
                ],
            ),
            step(lambda ctx: [len(ctx.prev), ctx.outputs["big"][:2], ctx.input["tag"]], "last"),
        ],
    )


def test_the_snapshot_refers_to_a_large_input_and_output(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(flow(), input={"prompts": PROMPTS, "tag": "t"})
    assert out.paused
    assert snapshot_size(store, out.session_id) < 1_000  # not 40 KB + 20 KB
    held = decode_state(store.load(out.session_id).state)
    assert type(held.input).__name__ == "OutOfLine"
    assert type(held.outputs["big"]).__name__ == "OutOfLine"
    assert out.pause.partial == {"big": BIG}
    assert dict(out.pause.partial) == {"big": BIG} and len(out.pause.partial) == 1

    view = rt.session(out.session_id)
    assert view.state.input == {"prompts": PROMPTS, "tag": "t"}
    assert view.state.outputs == {"big": BIG}
    assert view.derive_state() == view.state


def test_another_process_reads_them_back(store: Any) -> None:
    out = Runtime(store=store).run(flow(), input={"prompts": PROMPTS, "tag": "t"})
    for _ in range(3):
        rt = Runtime(store=store, flows=[flow()])  # a fresh process each time
        out = rt.resume(out.token, True)
        if out.paused:
            assert out.pause.partial["big"] == BIG
            assert snapshot_size(store, out.session_id) < 1_000
    assert out.ok
    assert out.output == [3, "oo", "t"]
    view = Runtime(store=store).session(out.session_id)
    items = [
        e.data["output"]
        for e in view.events()
        if e.type == "node.completed" and e.path[-1] == "<lambda>"
    ]
    assert items == [(p[:4], len(BIG), len(PROMPTS)) for p in PROMPTS[:3]]
    assert view.derive_state() == view.state
    assert view.state.input["tag"] == "t"


def test_a_small_input_and_small_outputs_stay_in_the_state(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(Flow("small", [lambda ctx: [1, 2], Gate("g")]), input={"n": 1})
    held = decode_state(store.load(out.session_id).state)
    assert held.input == {"n": 1} and held.outputs == {"<lambda>": [1, 2]}
    assert type(out.pause.partial) is dict


def test_prev_of_a_resumed_element_is_read_back() -> None:
    rt = Runtime()
    flow = Flow(
        "f",
        [
            lambda ctx: BIG,
            Gate("g", lambda ctx: f"{len(ctx.prev)} chars"),
            lambda ctx: ctx.outputs["<lambda>"][:3],
        ],
    )
    out = rt.run(flow)
    assert out.pause.reason == "20000 chars"
    assert rt.resume(out.token, True).output == "ooo"
    # The big output as the Flow's prev: a flow whose last element is the big one.
    out = rt.run(Flow("g", [Gate("g"), lambda ctx: BIG]))
    assert rt.resume(out.token, True).output == BIG


def test_reading_them_changes_nothing(store: Any) -> None:
    data = {"prompts": list(PROMPTS), "tag": "t"}

    def spoil(ctx: Any) -> int:
        # Large values are read-only views (engine/read_only_views.py): changes are refused.
        for change in (
            ctx.input["prompts"].clear,
            ctx.outputs["first"]["rows"].clear,
            ctx.prev["rows"].clear,
        ):
            with pytest.raises(TypeError, match="read-only"):
                change()
        return len(ctx.prev["rows"])

    flow = Flow(
        "f",
        [
            step(lambda ctx: {"rows": list(range(300))}, "first"),
            step(spoil, "spoil"),
            Gate("g"),
            step(
                lambda ctx: (len(ctx.input["prompts"]), len(ctx.outputs["first"]["rows"])), "read"
            ),
        ],
    )
    rt = Runtime(store=store)
    out = rt.run(flow, input=data)
    data["prompts"].clear()  # the caller's copy: not the session's
    assert out.pause.partial["spoil"] == 300
    done = rt.resume(out.token, True)
    assert done.output == (200, 300)


def test_bounds_a_large_input_counts_as_a_value_not_in_the_snapshot() -> None:
    rt = Runtime(max_snapshot_bytes=4_096, max_value_bytes=100_000)
    out = rt.run(Flow("f", [Gate("g"), lambda ctx: len(ctx.input)]), input="x" * 50_000)
    assert out.paused  # the 50 KB input is not in the 4 KB snapshot
    assert rt.resume(out.token, True).output == 50_000
    with pytest.raises(tarry.PayloadTooLarge):
        rt.run(Flow("f", [Gate("g")]), input="x" * 200_000)
    big = rt.run(Flow("f", [lambda ctx: "y" * 50_000, Gate("g")]))
    assert big.paused and big.pause.partial["<lambda>"] == "y" * 50_000


def test_step_durability_recovers_with_them(store: Any) -> None:
    clock = ManualClock()
    crashed: list[int] = []

    def work(ctx: Any) -> int:
        if ctx.item == 2 and not crashed:
            crashed.append(1)
            raise Crash
        return len(ctx.outputs["big"]) + len(ctx.input["prompts"])

    def make() -> Flow:
        return Flow("rec", [step(lambda ctx: BIG, "big"), ForEach("fe", [0, 1, 2, 3], work)])

    rt = Runtime(store=store, durability="step", clock=clock, lease=30)
    with pytest.raises(Crash):
        rt.run(make(), input={"prompts": PROMPTS})
    other = Runtime(store=store, durability="step", clock=clock, flows=[make()])
    clock.advance(31)
    [out] = other.recover()
    assert out.ok and out.output == [len(BIG) + len(PROMPTS)] * 4
    view = other.session(out.session_id)
    assert view.derive_state() == view.state


def test_a_session_written_with_them_in_line_still_resumes(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    for name in (
        "tarry.drivers.sessions.starting",
        "tarry.engine.failure",
        "tarry.engine.elements.step",
    ):
        module = importlib.import_module(name)
        monkeypatch.setattr(module, "INLINE", bounds.UNLIMITED)  # as tarry wrote them before
    out = Runtime(store=store).run(flow(), input={"prompts": PROMPTS, "tag": "t"})
    held = decode_state(store.load(out.session_id).state)
    assert held.input["tag"] == "t" and held.outputs["big"] == BIG
    monkeypatch.undo()
    rt = Runtime(store=store, flows=[flow()])
    out = rt.resume(out.token, True)
    assert out.pause.partial == {"big": BIG}
    out = rt.resume(rt.resume(out.token, True).token, True)
    assert out.ok and out.output == [3, "oo", "t"]


def test_a_missing_value_fails_the_step_with_a_snapshot_error(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that lost the event holding the input: the step reading it fails, typed and
    resumable, instead of crashing the process that resumed the session."""
    from tarry.drivers.drive import ledger
    from tarry.drivers.drive import values_out_of_line as held

    reads = Flow("f", [Gate("g"), lambda ctx: ctx.input["tag"]])
    out = Runtime(store=store).run(reads, input={"prompts": PROMPTS, "tag": "t"})

    def lost(store: Any, sid: str, seq: int, unwritten: Any = ()) -> Any:
        return held._value(None, sid, seq)

    monkeypatch.setattr(ledger, "fetch", lost)
    failed = Runtime(store=store, flows=[reads]).resume(out.token, True)
    assert failed.failed and failed.error.type == "SnapshotError" and failed.token
    assert "refers to the value of event 1, and the store has no such event" in failed.error.message
