"""A Runtime resumes a session it paused without reading it first (drivers/drive/statecache.py,
RecordCache): the token is used only while the store still holds the version it wrote. A
session that moved on meanwhile is read and resumed as the store has it."""

from __future__ import annotations

from typing import Any

import pytest
from tarry import Flow, Gate, InvalidResumeValue, Parallel, Runtime, TokenAlreadyUsed, step


def both(ctx: Any) -> dict[str, Any]:
    return ctx.outputs["gates"]


FLOW = Flow("two_gates", [Parallel("gates", {"a": Gate("a"), "b": Gate("b")}), step(both, "both")])


def reads(store: Any) -> list[str]:
    """Count the store's reads of tokens and sessions (what the record spares)."""
    seen: list[str] = []
    for name in ("find_token", "load"):
        real = getattr(store, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            seen.append(_name)
            return _real(*args, **kwargs)

        setattr(store, name, counted)
    return seen


def test_a_resume_by_the_runtime_that_paused_reads_nothing_first(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(Flow("one", [Gate("g"), step(lambda ctx: ctx.prev, "after")]))
    seen = reads(store)
    done = rt.resume(out.token, {"approved": True, "by": "ann"})
    assert done.ok
    assert seen == []


def test_a_session_another_runtime_moved_on_is_read_and_resumed_as_stored(store: Any) -> None:
    first = Runtime(store=store)
    out = first.run(FLOW)
    [a, b] = out.pauses
    assert a.token == out.token  # the token the first runtime's record is kept under
    other = Runtime(store=store, flows=[FLOW])
    after = other.resume(b.token, True)  # saves the session again: a new version
    assert after.paused and [p.token for p in after.pauses] == [a.token]
    seen = reads(store)
    done = first.resume(a.token, {"approved": False, "by": "bo"})
    # The record it kept was stale: it read the session, and kept b's decision.
    assert "load" in seen
    assert done.ok
    assert done.output == {"a": {"approved": False, "by": "bo"}, "b": {"approved": True}}


def test_a_refusal_is_the_stored_sessions_even_with_a_record_kept(store: Any) -> None:
    first = Runtime(store=store)
    out = first.run(Flow("one", [Gate("g")]))
    # Used elsewhere (resume_many does not go through the record): a bad value is still
    # TokenAlreadyUsed, as the store says, not InvalidResumeValue.
    first.resume_many({out.token: True})
    with pytest.raises(TokenAlreadyUsed):
        first.resume(out.token, "not a decision")


def test_a_refused_value_leaves_the_session_resumable(store: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(Flow("one", [Gate("g")]))
    with pytest.raises(InvalidResumeValue):
        rt.resume(out.token, "not a decision")
    assert rt.session(out.session_id).status == "paused"
    assert rt.resume(out.token, True).ok
