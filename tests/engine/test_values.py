"""Which values are copied, and a bare Execution's own copies (the driver hands in the codec's)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from tarry.engine import Flow
from tarry.engine.elements.step import step
from tarry.engine.execution import Execution
from tarry.engine.state.records import SessionState
from tarry.engine.values import deep_copy, immutable


@pytest.mark.parametrize(
    "value",
    [None, True, 1, 1.5, "s", b"b", (1, ("a", b"")), frozenset({1, "x"}), dt.date(2030, 1, 1)],
    ids=repr,
)
def test_values_that_cannot_change_are_their_own_copy(value: Any) -> None:
    assert immutable(value) and deep_copy(value) is value


@pytest.mark.parametrize("value", [[1], {"a": 1}, {1, 2}, (1, [2]), ((1,), {"a": [2]})], ids=repr)
def test_values_that_can_change_are_copied_deeply(value: Any) -> None:
    assert not immutable(value)
    copied = deep_copy(value)
    assert copied == value and copied is not value


def test_a_bare_execution_hands_steps_copies_too() -> None:
    def make(ctx):
        return {"xs": [1]}

    def tamper(ctx):
        ctx.prev["xs"].append(2)
        ctx.outputs["make"]["xs"].append(3)

    flow = Flow(
        "bare",
        [step(make, "make"), step(tamper, "tamper"), step(lambda ctx: ctx.outputs["make"], "read")],
    )
    ex = Execution(
        SessionState("s", flow="bare"),
        now=lambda: dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
        ledger=None,
    )  # type: ignore[arg-type]
    gen = flow._run(ex)
    with pytest.raises(StopIteration) as done:
        gen.send(None)
    assert done.value.value == {"xs": [1]}
