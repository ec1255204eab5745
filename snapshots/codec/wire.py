"""The state records' wire form, written out by hand and registered in the one converter.

A snapshot is decoded on every resume and encoded on every pause. The hooks cattrs generates
call a hook of their own per field (to convert an int with `int()`, a str with `str()`, a
tuple item by item) and build each record through its `__init__`; for a small state that was
half the cost of decoding it. These functions write the same dicts cattrs' hooks write (a test
compares them on random states) and read them back with plain type checks: a snapshot written
by either reads with either. `encode_state`/`decode_state` call them directly, so a process
that only resumes never imports cattrs.

Reading is strict where cattrs converted: an int field takes an int (not a bool, not "5"), a
text field a str. A snapshot only tarry writes holds exactly those, so the difference shows only
on a tampered or corrupt blob, which `decode_state` then refuses with SnapshotError.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tarry.engine.state import reducer
from tarry.engine.state.records import (
    LANE,
    ContainerFrame,
    ErrorInfo,
    OutOfLine,
    PauseState,
    SessionState,
    from_fields,
)

Data = dict[str, Any]


# --- writing -------------------------------------------------------------------------------------


def state_to_data(state: SessionState) -> Data:
    f = state.__dict__
    pause = f["pause"]
    error = f["error"]
    inp = f["input"]
    outputs = f["outputs"]
    held = _held(inp, outputs)
    data = {
        "session_id": f["session_id"],
        "flow": f["flow"],
        "status": f["status"],
        "input": None if held else inp,
        "shared": f["shared"],
        "outputs": outputs,
        "container_stack": list(map(frame_to_data, f["container_stack"])),
        "pause": None if pause is None else pause_to_data(pause),
        "error": None if error is None else error_to_data(error),
        "output": f["output"],
        "last_seq": f["last_seq"],
        "metrics": f["metrics"],
        "resume_values": list(f["resume_values"]),
        "retries": f["retries"],
    }
    if held:
        _write_held(data, inp, outputs)
    # A deadline and a cleanup's progress: written only when set, so a state without them
    # is what it always was and a snapshot written before them reads as it did.
    if f["deadline"] is not None:
        data["deadline"] = f["deadline"]
    if f["cleanup"]:
        data["cleanup"] = True
    if f["ending"] is not None:
        data["ending"] = f["ending"]
        data["ending_data"] = f["ending_data"]
    if f["cleaned"]:
        data["cleaned"] = True
    if f["cleanup_error"] is not None:
        data["cleanup_error"] = error_to_data(f["cleanup_error"])
    return data


# A state that refers to values kept out of line (engine.state.OutOfLine: a large input or
# top-level output) says so in two fields of its own, written only then: "input_at", the seq of
# the event holding the input, and "outputs_at", the seqs of the outputs so kept, by name (their
# entries in "outputs" are None, keeping the outputs' order). No user value can be taken for a
# reference, and a snapshot written before reads as it always did.


def _held(inp: Any, outputs: Data) -> bool:
    return type(inp) is OutOfLine or OutOfLine in map(type, outputs.values())


def _write_held(data: Data, inp: Any, outputs: Data) -> None:
    if type(inp) is OutOfLine:
        data["input"] = None
        data["input_at"] = inp.seq
    else:
        data["input"] = inp
    at = {name: v.seq for name, v in outputs.items() if type(v) is OutOfLine}
    if at:
        data["outputs"] = {name: None if name in at else v for name, v in outputs.items()}
        data["outputs_at"] = at


def _read_held(o: Data, fields: Data) -> None:
    """Put the references of "input_at" and "outputs_at" (see _write_held) in their places."""
    if "input_at" in o:
        fields["input"] = OutOfLine(_int(o, "input_at"))
    if "outputs_at" in o:
        outputs = fields["outputs"]
        for name, seq in _names(o, "outputs_at").items():
            if type(seq) is not int or name not in outputs:
                raise _bad(f"outputs_at[{name!r}]", "the seq of one of the outputs", seq)
            outputs[name] = OutOfLine(seq)


def frame_to_data(frame: ContainerFrame) -> Data:
    f = frame.__dict__
    data = {
        "node": f["node"],
        "kind": f["kind"],
        "path": list(f["path"]),
        "iteration": f["iteration"],
        "child": f["child"],
        "completed_iterations": f["completed_iterations"],
        "child_outputs": f["child_outputs"],
        "selected": f["selected"],
        "started": f["started"],
        "size": f["size"],
        "last_output": f["last_output"],
        "action": f["action"],
    }
    # A concurrent container's lanes, and what a lane holds: written only when there is some,
    # so the frame of a sequential container is what it always was.
    lanes = f.get("lanes")
    if lanes is not None:
        data["lanes"] = [[name, lane_to_data(lane)] for name, lane in lanes.items()]
    if f.get("parked"):
        data["parked"] = f["parked"]
    if f.get("stack"):
        data["stack"] = [frame_to_data(frame) for frame in f["stack"]]
    if f.get("pause") is not None:
        data["pause"] = pause_to_data(f["pause"])
    if f.get("resume_values"):
        data["resume_values"] = list(f["resume_values"])
    if f.get("retries"):
        data["retries"] = f["retries"]
    return data


def lane_to_data(lane: ContainerFrame) -> Data:
    """A lane in short: it is written once per iteration in flight or waiting, and its name,
    kind and `started` follow from where it is. Only what it holds besides its position."""
    f = lane.__dict__
    data: Data = {"child": f["child"]}
    if f["child_outputs"]:
        data["child_outputs"] = f["child_outputs"]
    if f["stack"]:
        data["stack"] = [frame_to_data(frame) for frame in f["stack"]]
    if f["pause"] is not None:
        data["pause"] = pause_to_data(f["pause"])
    if f["resume_values"]:
        data["resume_values"] = list(f["resume_values"])
    if f["retries"]:
        data["retries"] = f["retries"]
    return data


def pause_to_data(pause: PauseState) -> Data:
    return {
        "kind": pause.kind,
        "reason": pause.reason,
        "path": list(pause.path),
        "payload": pause.payload,
        "wake_at": pause.wake_at,
        "expires_at": pause.expires_at,
        "awaits_value": pause.awaits_value,
        "key": pause.key,
        "on_timeout": pause.on_timeout,
    }


def error_to_data(error: ErrorInfo) -> Data:
    data = reducer.error_to_data(error)  # the form events carry, with the path as a tuple
    data["path"] = list(error.path)
    return data


# --- reading -------------------------------------------------------------------------------------


def _bad(field: str, kind: str, value: Any) -> TypeError:
    return TypeError(f"{field} must be {kind} (got a {type(value).__name__})")


def _map(value: Any) -> Data:
    if type(value) is not dict:
        raise _bad("the record", "a map", value)
    return value


def _text(o: Data, field: str, default: Any = ...) -> Any:
    value = o[field] if default is ... else o.get(field, default)
    if type(value) is not str and value is not default:
        raise _bad(field, "text", value)
    return value


def _int(o: Data, field: str, default: Any = 0) -> Any:
    value = o.get(field, default)
    if type(value) is not int and value is not default:
        raise _bad(field, "an int", value)
    return value


def _bool(o: Data, field: str, default: bool) -> bool:
    value = o.get(field, default)
    if type(value) is not bool:
        raise _bad(field, "a bool", value)
    return value


def _time(o: Data, field: str) -> datetime | None:
    value = o.get(field)
    if value is not None and type(value) is not datetime:
        raise _bad(field, "a time", value)
    return value


def _number(name: str, value: Any) -> float:
    if type(value) is not float and type(value) is not int:
        raise _bad(f"metric {name!r}", "a number", value)
    return float(value)


def _path(o: Data, *, required: bool = True) -> tuple[Any, ...]:
    value = o["path"] if required else o.get("path", ())
    if type(value) is not list and type(value) is not tuple:
        raise _bad("path", "an array", value)
    return tuple(value)


def _names(o: Data, field: str) -> Data:
    """A dict[str, Any] field: the decoded map itself (msgpack made it for this state alone)."""
    value = o.get(field)
    if value is None and field not in o:
        return {}
    if type(value) is not dict:
        raise _bad(field, "a map", value)
    for key in value:
        if type(key) is not str:
            raise _bad(f"a key of {field}", "text", key)
    return value


def _array(o: Data, field: str) -> list[Any] | tuple[Any, ...]:
    value = o.get(field, ())
    if type(value) is not list and type(value) is not tuple:
        raise _bad(field, "an array", value)
    return value


def state_from_data(o: Any) -> SessionState:
    o = _map(o)
    pause = o.get("pause")
    error = o.get("error")
    metrics = _names(o, "metrics")
    fields = {
        "session_id": _text(o, "session_id"),
        "flow": _text(o, "flow", ""),
        "status": _text(o, "status", "running"),
        "input": o.get("input"),
        "shared": _names(o, "shared"),
        "outputs": _names(o, "outputs"),
        "container_stack": tuple(frame_from_data(f) for f in _array(o, "container_stack")),
        "pause": None if pause is None else pause_from_data(pause),
        "error": None if error is None else error_from_data(error),
        "output": o.get("output"),
        "last_seq": _int(o, "last_seq"),
        "metrics": {name: _number(name, value) for name, value in metrics.items()},
        "resume_values": tuple(_array(o, "resume_values")),
        "retries": _int(o, "retries"),
    }
    if "input_at" in o or "outputs_at" in o:
        _read_held(o, fields)
    cleanup_error = o.get("cleanup_error")
    fields["deadline"] = _time(o, "deadline")
    fields["cleanup"] = _bool(o, "cleanup", False)
    fields["ending"] = _text(o, "ending", None)
    fields["ending_data"] = _names(o, "ending_data")
    fields["cleaned"] = _bool(o, "cleaned", False)
    fields["cleanup_error"] = None if cleanup_error is None else error_from_data(cleanup_error)
    return from_fields(SessionState, fields)


def frame_from_data(o: Any) -> ContainerFrame:
    o = _map(o)
    fields = {
        "node": _text(o, "node"),
        "kind": _text(o, "kind"),
        "path": _path(o),
        "iteration": _int(o, "iteration"),
        "child": _int(o, "child"),
        "completed_iterations": _int(o, "completed_iterations"),
        "child_outputs": _names(o, "child_outputs"),
        "selected": o.get("selected"),
        "started": _bool(o, "started", False),
        "size": _int(o, "size", None),
        "last_output": o.get("last_output"),
        "action": _text(o, "action", None),
        "lanes": None,
        "parked": _int(o, "parked"),
        "stack": (),
        "pause": None,
        "resume_values": (),
        "retries": 0,
    }
    if "lanes" in o:
        lanes = {}
        for entry in _array(o, "lanes"):
            if (type(entry) is not list and type(entry) is not tuple) or len(entry) != 2:
                raise _bad("a lane", "a [name, frame] pair", entry)
            name = entry[0]
            if type(name) is not int and type(name) is not str:
                raise _bad("a lane's name", "an int or text", name)
            lanes[name] = lane_from_data(entry[1], fields["path"] + (name,))
        fields["lanes"] = lanes
    if "stack" in o:
        fields["stack"] = tuple(frame_from_data(f) for f in _array(o, "stack"))
    if o.get("pause") is not None:
        fields["pause"] = pause_from_data(o["pause"])
    if "resume_values" in o:
        fields["resume_values"] = tuple(_array(o, "resume_values"))
    if "retries" in o:
        fields["retries"] = _int(o, "retries")
    return from_fields(ContainerFrame, fields)


def lane_from_data(o: Any, path: tuple[Any, ...]) -> ContainerFrame:
    o = _map(o)
    pause = o.get("pause")
    fields = {
        "node": str(path[-1]),
        "kind": LANE,
        "path": path,
        "iteration": 0,
        "child": _int(o, "child"),
        "completed_iterations": 0,
        "child_outputs": _names(o, "child_outputs"),
        "selected": None,
        "started": True,
        "size": None,
        "last_output": None,
        "action": None,
        "lanes": None,
        "parked": 0,
        "stack": tuple(frame_from_data(f) for f in _array(o, "stack")),
        "pause": None if pause is None else pause_from_data(pause),
        "resume_values": tuple(_array(o, "resume_values")),
        "retries": _int(o, "retries"),
    }
    return from_fields(ContainerFrame, fields)


def pause_from_data(o: Any) -> PauseState:
    o = _map(o)
    return PauseState(
        kind=_text(o, "kind"),
        reason=_text(o, "reason"),
        path=_path(o),
        payload=o.get("payload"),
        wake_at=_time(o, "wake_at"),
        expires_at=_time(o, "expires_at"),
        awaits_value=_bool(o, "awaits_value", True),
        key=_text(o, "key", None),
        on_timeout=o.get("on_timeout"),
    )


def error_from_data(o: Any) -> ErrorInfo:
    o = _map(o)
    return ErrorInfo(
        type=_text(o, "type"),
        message=_text(o, "message"),
        path=_path(o, required=False),
        retryable=_bool(o, "retryable", False),
        attempts=_int(o, "attempts"),
        traceback=_text(o, "traceback", None),
    )


#: (record class, writer, reader) for the converter to register.
HOOKS = (
    (SessionState, state_to_data, state_from_data),
    (ContainerFrame, frame_to_data, frame_from_data),
    (PauseState, pause_to_data, pause_from_data),
    (ErrorInfo, error_to_data, error_from_data),
)
