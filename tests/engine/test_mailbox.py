"""The engine's side of keyed delivery: a keyed Wait asks `Execution.mailbox` when reached and,
given a value, completes with it instead of pausing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tarry.engine import Flow, ForEach, Gate, Wait, derive_state
from tarry.engine.execution import Execution
from tarry.engine.signals import NO_MAIL, Pause
from tarry.engine.state.records import SessionState

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Ledger:
    def __init__(self) -> None:
        self.items: dict[Any, list[Any]] = {}
        self.values: dict[Any, Any] = {}

    def put_items(self, path: tuple[Any, ...], items: list[Any]) -> None:
        self.items[path] = list(items)

    def item(self, path: tuple[Any, ...], index: int) -> Any:
        return self.items[path][index]

    def put_result(self, path: tuple[Any, ...], index: int, value: Any) -> None:
        self.values[path, index] = value

    def results(self, path: tuple[Any, ...], stop: int) -> list[Any]:
        return [self.values[path, i] for i in range(stop)]


def execute(flow: Flow, mail: dict[str, Any] | None) -> tuple[Execution, Any]:
    box = None if mail is None else (lambda key: mail.get(key, NO_MAIL))
    ex = Execution(SessionState("s", flow=flow.name), now=lambda: T0, ledger=Ledger(), mailbox=box)
    gen = flow._run(ex)
    try:
        return ex, gen.send(None)
    except StopIteration as done:
        return ex, done.value


def keyed() -> Flow:
    return Flow(
        "f",
        [
            ForEach(
                "each",
                ["a", "b", "c"],
                [
                    Wait("w", key=lambda ctx: f"job/{ctx.item}"),
                ],
            )
        ],
    )


def test_a_delivered_value_completes_the_wait_without_a_pause() -> None:
    ex, out = execute(keyed(), {"job/a": 1, "job/b": None, "job/c": {"x": [3]}})
    assert out == [1, None, {"x": [3]}]
    assert ex.mail_taken == ["job/a", "job/b", "job/c"]
    done = [e for e in ex.log if e.type == "node.completed" and e.path[-1] == "w"]
    assert [e.data for e in done] == [
        {"output": 1, "delivered": True},
        {"output": None, "delivered": True},
        {"output": {"x": [3]}, "delivered": True},
    ]
    assert derive_state(ex.log, SessionState("s", flow="f")) == ex.state


def test_the_first_key_without_mail_pauses_with_its_key() -> None:
    ex, signal = execute(keyed(), {"job/a": 1})
    assert type(signal) is Pause
    assert signal.key == "job/b" and signal.path == ("each", 1, "w")
    assert ex.mail_taken == ["job/a"]


def test_without_a_mailbox_a_keyed_wait_pauses() -> None:
    ex, signal = execute(keyed(), None)
    assert type(signal) is Pause and signal.key == "job/a"
    assert ex.mail_taken == []


def test_a_gate_and_an_unkeyed_wait_never_ask_the_mailbox() -> None:
    asked: list[str] = []

    def box(key: str) -> Any:
        asked.append(key)
        return 1

    for element in (Gate("g"), Wait("w")):
        flow = Flow("f", [element])
        ex = Execution(SessionState("s", flow="f"), now=lambda: T0, ledger=Ledger(), mailbox=box)
        assert type(flow._run(ex).send(None)) is Pause
    assert asked == []
