"""A pause's one shape: the `Pause` signal is a PauseState, and its `run.paused` event data is
made and read back in one place each (engine/state/records.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import attrs
from hypothesis import given
from hypothesis import strategies as st
from tarry.engine.signals import Pause
from tarry.engine.state.records import PauseState, pause_from_data, pause_to_data

AT = datetime(2030, 1, 1, tzinfo=UTC)


def test_the_signal_declares_no_field_of_its_own() -> None:
    assert issubclass(Pause, PauseState)

    # (By name and default: `attrs.resolve_types`, which another test may have run on one of
    # the two classes, turns the annotations' strings into types in place.)
    def declared(cls: Any) -> list[tuple[str, Any]]:
        return [(f.name, f.default) for f in attrs.fields(cls)]

    assert declared(Pause) == declared(PauseState)


def test_the_event_data_keeps_its_keys_and_their_order() -> None:
    # Events already written hold these maps: the keys left out and their order stay so.
    assert list(pause_to_data(Pause("human", "", ("g",))).items()) == [
        ("kind", "human"),
        ("reason", ""),
    ]
    full = Pause("external", "why", ("w",), {"n": 1}, AT, AT, False, "k", {"value": 0})
    assert list(pause_to_data(full)) == [
        "kind",
        "reason",
        "payload",
        "wake_at",
        "expires_at",
        "awaits_value",
        "key",
        "on_timeout",
    ]
    assert pause_to_data(full)["awaits_value"] is False
    retry = Pause("system", "retry", ("s",), None, AT, None, awaits_value=False)
    assert pause_to_data(retry) == {
        "kind": "system",
        "reason": "retry",
        "wake_at": AT,
        "awaits_value": False,
    }


def test_an_old_event_with_only_a_kind_reads() -> None:
    assert pause_from_data(("g",), {"kind": "human"}) == PauseState("human", "", ("g",))


@given(
    payload=st.none() | st.integers() | st.text(max_size=5),
    wake_at=st.none() | st.just(AT),
    expires_at=st.none() | st.just(AT),
    awaits_value=st.booleans(),
    key=st.none() | st.text(max_size=5),
    on_timeout=st.none() | st.sampled_from(["approve", "reject", "fail"]),
)
def test_the_event_data_reads_back_as_the_pause(**fields: Any) -> None:
    signal = Pause("human", "r", ("a", 1), **fields)
    data = {**pause_to_data(signal), "actor": "ann"}  # an abort's actor is left to the log
    assert pause_from_data(signal.path, data) == PauseState("human", "r", ("a", 1), **fields)


def test_new_pause_is_the_pause_the_class_makes() -> None:
    # The pause a step's ctx.interrupt yields is made with its slots set directly: every field
    # is set, each other than the four given at its default, and it is a Pause like any other.
    from tarry.engine.signals import new_pause

    made = new_pause("human", "review", ("items", 3, "work"), {"n": 1})
    assert type(made) is Pause
    assert made == Pause("human", "review", ("items", 3, "work"), {"n": 1})
    for field in attrs.fields(PauseState):
        getattr(made, field.name)  # every slot is set
        assert not isinstance(field.default, attrs.Factory)  # (new_pause sets defaults as is)
