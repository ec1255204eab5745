"""A Runtime keeps the states of the snapshots it wrote, and resumes them without decoding, only
where that cannot change what the resume gets (drivers/drive/statecache.py)."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import tarry.drivers.reading.views as views_module
from tarry import Flow, ForEach, Gate, InvalidResumeValue, Runtime, Sleep, step
from tarry.drivers.drive.statecache import StateCache
from tarry.engine.state.records import ContainerFrame, PauseState, SessionState
from tarry.snapshots import SQLiteStore
from tarry.snapshots.records import decode_state


@pytest.fixture
def decodes(monkeypatch) -> list[str]:
    """The session ids whose snapshot a resume decoded."""
    seen: list[str] = []
    real = views_module.state_of

    def counting(record: Any) -> SessionState:
        seen.append(record.session_id)
        return real(record)

    monkeypatch.setattr(views_module, "state_of", counting)
    return seen


def gated(first: Any) -> Flow:
    return Flow(
        "gated",
        [
            step(lambda ctx: first() if callable(first) else first, "load"),
            Gate("approve"),
            step(lambda ctx: (ctx.outputs["load"], ctx.outputs["approve"]), "finish"),
        ],
    )


def test_a_resume_in_the_runtime_that_paused_skips_decoding(decodes) -> None:
    rt = Runtime()
    out = rt.run(gated((1, "a", None)))
    done = rt.resume(out.token, {"approved": True})
    assert done.ok and done.output == ((1, "a", None), {"approved": True})
    assert decodes == []


def test_the_same_over_sqlite(decodes, tmp_path) -> None:
    rt = Runtime(SQLiteStore(tmp_path / "s.db"))
    out = rt.run(gated(7))
    assert rt.resume(out.token, {"approved": True}).output == (7, {"approved": True})
    assert decodes == []


def test_a_mutable_value_is_decoded_and_changes_after_the_pause_do_not_reach_the_resume(
    decodes,
) -> None:
    rt = Runtime()
    out = rt.run(gated(lambda: [1, 2]))
    out.pause.partial["load"].append(99)  # the caller changes what it was shown
    done = rt.resume(out.token, {"approved": True})
    assert done.output == ([1, 2], {"approved": True})  # the snapshot, as it was written
    assert decodes == [out.session_id]


def test_another_runtime_over_the_same_store_takes_the_kept_state(decodes) -> None:
    first = Runtime()
    flow = Flow("loop", [ForEach("items", ["a", "b", "c"], step(asks, "ask"))])
    out = first.run(flow)
    second = Runtime(first.store, flows=[flow])  # a worker sharing the MemoryStore
    out = second.resume(out.token, "x")
    out = first.resume(out.token, "y")
    assert second.resume(out.token, "z").output == ["x", "y", "z"]
    assert decodes == []  # neither decoded what the other wrote


def test_a_runtime_over_another_store_object_decodes(decodes, tmp_path) -> None:
    flow = Flow("two", [Gate("a"), Gate("b"), step(lambda ctx: "done", "end")])
    first = Runtime(SQLiteStore(tmp_path / "s.db"))
    out = first.run(flow)
    second = Runtime(SQLiteStore(tmp_path / "s.db"), flows=[flow])  # as another process would
    out = second.resume(out.token, {"approved": True})
    assert decodes == [out.session_id]
    assert first.resume(out.token, {"approved": True}).output == "done"
    assert decodes == [out.session_id] * 2


def asks(ctx: Any) -> str:
    return ctx.interrupt(f"item {ctx.index}")


def test_a_refused_resume_keeps_the_state_and_a_used_token_drops_it(decodes) -> None:
    rt = Runtime()
    flow = Flow("loop", [Gate("first"), ForEach("items", ["a", "b", "c"], step(asks, "ask"))])
    out = rt.run(flow)
    with pytest.raises(InvalidResumeValue):
        rt.resume(out.token, "not a decision")
    assert len(rt._core.states) == 1
    out = rt.resume(out.token, {"approved": True})
    # The Gate's decision (a dict the caller may still hold) is an output now: not kept.
    assert len(rt._core.states) == 0 and decodes == []
    rt2 = Runtime()
    out = rt2.run(Flow("loop", [ForEach("items", ["a", "b", "c"], step(asks, "ask"))]))
    for answer in ("x", "y"):
        out = rt2.resume(out.token, answer)
        assert len(rt2._core.states) == 1  # the used snapshot's state is gone, the new one kept
    assert rt2.resume(out.token, "z").output == ["x", "y", "z"]
    assert len(rt2._core.states) == 0 and decodes == []


def test_the_kept_state_is_never_changed_by_the_run_that_resumes_it() -> None:
    rt = Runtime()
    out = rt.run(gated(3))
    blob = rt.store.load(out.session_id).state
    kept = rt._core.states.get(blob)
    assert kept is not None and kept == decode_state(blob)
    before = copy.deepcopy(kept)
    rt.resume(out.token, {"approved": True})
    assert kept == before == decode_state(blob)


def state(**fields: Any) -> SessionState:
    return SessionState(session_id="s", **fields)


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (None, True),
        ((1, 2.5, "x", b"y", True), True),
        (frozenset({1, 2}), True),
        (dt.datetime(2026, 1, 1, tzinfo=dt.UTC), True),
        (dt.datetime(2026, 1, 1), True),
        (dt.datetime(2026, 1, 1, tzinfo=ZoneInfo("Europe/Paris")), False),  # read back: an offset
        ([1, 2], False),
        ({"a": 1}, False),
        ((1, [2]), False),
        (dt.date(2026, 1, 1), False),  # decodes as itself, but only the plainest types are kept
    ],
)
def test_only_states_whose_values_decode_as_themselves_are_kept(value: Any, kept: bool) -> None:
    for where in (
        state(input=value),
        state(output=value),
        state(outputs={"a": value}),
        state(shared={"a": value}),
        state(resume_values=(value,)),
        state(container_stack=(ContainerFrame("n", "loop", ("n",), last_output=value),)),
        state(container_stack=(ContainerFrame("n", "graph", ("n",), selected=value),)),
        state(container_stack=(ContainerFrame("n", "loop", ("n",), child_outputs={"a": value}),)),
        state(pause=PauseState("human", "", ("g",), wake_at=value)),
    ):
        cache = StateCache()
        cache.keep(b"blob", where)
        assert (cache.get(b"blob") is where) is kept, where


def test_the_pause_payload_is_not_looked_at_as_a_resume_never_reads_it() -> None:
    cache = StateCache()
    kept = state(pause=PauseState("human", "", ("g",), payload={"message": "", "items": [1]}))
    cache.keep(b"gate", kept)
    assert cache.get(b"gate") is kept


def test_integer_metric_totals_are_not_kept_since_they_read_back_as_floats() -> None:
    cache = StateCache()
    cache.keep(b"ints", state(metrics={"calls": 3}))
    cache.keep(b"floats", state(metrics={"cost": 0.5}))
    assert cache.get(b"ints") is None and cache.get(b"floats") is not None


def test_the_cache_is_bounded_in_entries_and_snapshot_size() -> None:
    cache = StateCache(max_entries=2, max_snapshot=8)
    for blob in (b"one", b"two", b"three"):
        cache.keep(blob, state())
    assert len(cache) == 2 and cache.get(b"one") is None and cache.get(b"three") is not None
    cache.keep(b"123456789", state())
    assert cache.get(b"123456789") is None


def test_a_cancel_drops_the_kept_state() -> None:
    rt = Runtime()
    out = rt.run(gated(1))
    assert len(rt._core.states) == 1
    rt.cancel(out.token)
    assert len(rt._core.states) == 0


def test_a_timer_resume_uses_the_kept_state_too(decodes) -> None:
    from tarry import ManualClock

    clock = ManualClock()
    rt = Runtime(clock=clock)
    flow = rt.register(Flow("nap", [Sleep("nap", seconds=60), step(lambda ctx: "up", "after")]))
    assert rt.run(flow).paused
    clock.advance(61)
    [done] = rt.resume_due()
    assert done.output == "up"
    assert decodes == []  # neither to see that it is due nor to resume it
