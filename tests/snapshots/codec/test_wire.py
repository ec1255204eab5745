"""The state records' hand-written wire form (snapshots/codec/wire.py) against cattrs' own hooks.

Snapshots written before the hooks were written by hand came from cattrs' generated hooks, and
another tool may write plain msgpack: the hand-written hooks must write the very dicts cattrs
writes and read what cattrs reads, only more strictly typed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from tarry.engine.errors import SnapshotError
from tarry.engine.state.records import (
    ContainerFrame,
    ErrorInfo,
    OutOfLine,
    PauseState,
    SessionState,
)
from tarry.snapshots.codec import wire
from tarry.snapshots.codec.converter import converter
from tarry.snapshots.codec.pack import dumps, loads
from tarry.snapshots.records import FORMAT, decode_state, encode_state

from .test_envelope import rich_state, states


def cattrs_converter() -> Any:
    """cattrs' generated hooks, configured as the one converter is but without wire.py."""
    from cattrs.preconf.msgpack import make_converter

    conv = make_converter()
    conv.register_unstructure_hook_func(lambda t: t is Any, lambda v: v)
    conv.register_structure_hook_func(lambda t: t is Any, lambda v, _: v)
    conv.register_unstructure_hook(dt.datetime, lambda v: v)
    conv.register_structure_hook(dt.datetime, lambda v, _: v)
    # The fields a frame gained for concurrent containers are written only when set (a
    # sequential frame reads and writes as it always did): cattrs' hook without them.
    from cattrs.gen import make_dict_unstructure_fn, override

    lane_fields = ("lanes", "parked", "stack", "pause", "resume_values", "retries")
    conv.register_unstructure_hook(
        ContainerFrame,
        make_dict_unstructure_fn(
            ContainerFrame, conv, **{name: override(omit=True) for name in lane_fields}
        ),
    )
    # Likewise the fields a state gained for deadlines and cleanups (written only when set).
    conv.register_unstructure_hook(
        SessionState,
        make_dict_unstructure_fn(
            SessionState, conv, **{name: override(omit=True) for name in ENDING_FIELDS}
        ),
    )
    return conv


ENDING_FIELDS = ("deadline", "cleanup", "ending", "ending_data", "cleaned", "cleanup_error")


def test_deadline_and_cleanup_fields_round_trip_and_are_left_out_when_unset() -> None:
    at = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    error = ErrorInfo("ValueError", "boom", ("@cleanup", "close"), True, 1, "tb")
    state = SessionState(
        session_id="s",
        deadline=at,
        cleanup=True,
        ending="failed",
        ending_data={"error": {"type": "E", "message": "m"}},
        cleaned=True,
        cleanup_error=error,
    )
    back = decode_state(encode_state(state))
    assert back == state
    plain = wire.state_to_data(SessionState(session_id="s"))
    assert not set(ENDING_FIELDS) & set(plain)  # an old reader's snapshot, byte for byte
    # a snapshot written before the fields existed reads with their defaults
    old = wire.state_from_data({"session_id": "s"})
    assert (old.deadline, old.cleanup, old.ending, old.ending_data) == (None, False, None, {})
    assert (old.cleaned, old.cleanup_error) == (False, None)


def test_the_converter_uses_the_hand_written_hooks() -> None:
    state = rich_state()
    assert converter().unstructure(state) == wire.state_to_data(state)
    for cls, write, _read in wire.HOOKS:
        assert converter().get_unstructure_hook(cls) is write


def test_writes_what_cattrs_writes_for_a_rich_state() -> None:
    state = rich_state()
    ours = wire.state_to_data(state)
    theirs = cattrs_converter().unstructure(state)
    assert ours == theirs
    assert list(ours) == list(theirs)  # the same keys in the same order: the same bytes
    assert dumps(ours) == dumps(theirs)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states)
def test_any_state_is_written_as_cattrs_writes_it_and_read_back_by_both(
    state: SessionState,
) -> None:
    conv = cattrs_converter()
    data = wire.state_to_data(state)
    assert dumps(data) == dumps(conv.unstructure(state))
    decoded = loads(dumps(data))  # as a resume reads it: fresh lists and dicts
    assert wire.state_from_data(decoded) == state
    assert conv.structure(loads(dumps(data)), SessionState) == state


def test_a_state_read_by_hand_is_a_normal_record() -> None:
    back = decode_state(encode_state(rich_state()))
    assert type(back) is SessionState and type(back.container_stack[0]) is ContainerFrame
    assert attrs_fields(back) == attrs_fields(rich_state())
    # frozen to everyone but the reducer, like any other state
    with pytest.raises(AttributeError):
        back.status = "running"  # type: ignore[misc]
    assert back == SessionState(**attrs_fields(back))


def attrs_fields(state: SessionState) -> dict[str, Any]:
    import attrs

    return attrs.asdict(state, recurse=False)


def test_defaults_fill_fields_a_writer_left_out() -> None:
    # another tool's minimal envelope: everything but the required fields is left out
    data = {"session_id": "s", "container_stack": [{"node": "n", "kind": "loop", "path": ["a", 1]}]}
    back = wire.state_from_data(data)
    assert back == SessionState(
        session_id="s", container_stack=(ContainerFrame(node="n", kind="loop", path=("a", 1)),)
    )
    pause = wire.pause_from_data({"kind": "human", "reason": "", "path": []})
    assert pause == PauseState(kind="human", reason="", path=())
    assert wire.error_from_data({"type": "t", "message": "m"}) == ErrorInfo("t", "m")


def test_metric_totals_are_read_as_floats_as_cattrs_did() -> None:
    back = wire.state_from_data({"session_id": "s", "metrics": {"calls": 3, "cost": 0.5}})
    assert back.metrics == {"calls": 3.0, "cost": 0.5}
    assert type(back.metrics["calls"]) is float


def envelope_with(change: Any) -> bytes:
    envelope = loads(encode_state(rich_state()))
    change(envelope["state"])
    return dumps(envelope)


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def change(state: dict[str, Any]) -> None:
        target = state
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _drop(path: tuple[Any, ...]) -> Any:
    def change(state: dict[str, Any]) -> None:
        target = state
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return change


@pytest.mark.parametrize(
    "change",
    [
        _drop(("session_id",)),
        _set(("session_id",), 5),
        _set(("status",), None),
        _set(("last_seq",), "5"),
        _set(("last_seq",), True),
        _set(("retries",), 1.0),
        _set(("shared",), []),
        _set(("outputs",), {1: "x"}),
        _set(("metrics",), {"cost": "0.5"}),
        _set(("container_stack",), {"a": 1}),
        _set(("container_stack", 0), ["tickets"]),
        _drop(("container_stack", 0, "path")),
        _set(("container_stack", 0, "path"), "tickets"),
        _set(("container_stack", 0, "iteration"), None),
        _set(("container_stack", 0, "started"), 1),
        _set(("container_stack", 0, "size"), "100"),
        _set(("container_stack", 0, "action"), 3),
        _set(("container_stack", 0, "child_outputs"), None),
        _set(("pause",), "human"),
        _drop(("pause", "reason")),
        _set(("pause", "wake_at"), "2024-05-01"),
        _set(("pause", "awaits_value"), None),
        _set(("error",), []),
        _drop(("error", "message")),
        _set(("error", "attempts"), "3"),
        _set(("error", "traceback"), b"tb"),
        _set(("resume_values",), None),
    ],
)
def test_a_field_of_the_wrong_type_is_a_snapshot_error(change: Any) -> None:
    with pytest.raises(SnapshotError, match="snapshot state is malformed"):
        decode_state(envelope_with(change))


def test_the_envelope_format_is_unchanged() -> None:
    envelope = loads(encode_state(rich_state(), fingerprint="fp"))
    assert envelope["format"] == FORMAT
    assert envelope["state"] == cattrs_converter().unstructure(rich_state())


def test_references_to_values_kept_out_of_line_round_trip() -> None:
    state = SessionState(
        session_id="s",
        input=OutOfLine(1),
        outputs={"a": [1], "big": OutOfLine(7), "c": "x"},
    )
    data = wire.state_to_data(state)
    assert data["input"] is None and data["input_at"] == 1
    assert data["outputs"] == {"a": [1], "big": None, "c": "x"}
    assert data["outputs_at"] == {"big": 7}
    back = decode_state(encode_state(state))
    assert back == state
    assert list(back.outputs) == ["a", "big", "c"]  # the outputs' order is kept
    plain = SessionState(session_id="s", input={"n": 1}, outputs={"a": 1})
    assert "input_at" not in wire.state_to_data(plain)
    assert "outputs_at" not in wire.state_to_data(plain)


@pytest.mark.parametrize(
    "change",
    [
        _set(("input_at",), "1"),
        _set(("outputs_at",), {"nope": 3}),
        _set(("outputs_at",), {"big": "7"}),
        _set(("outputs_at",), [7]),
    ],
)
def test_a_malformed_reference_is_a_snapshot_error(change: Any) -> None:
    state = SessionState(session_id="s", outputs={"big": OutOfLine(7)})
    envelope = loads(encode_state(state))
    change(envelope["state"])
    with pytest.raises(SnapshotError, match="snapshot state is malformed"):
        decode_state(dumps(envelope))
