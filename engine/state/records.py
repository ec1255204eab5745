"""The session's state records. Only the reducer (`engine.reducer.apply`) changes them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import attrs

CONTAINER_KINDS = frozenset({"foreach", "loop", "branch", "graph", "parallel", "flow"})
#: The kind of the frame of one in-flight iteration (or branch) of a concurrent container.
LANE = "lane"
STATUSES = ("running", "paused", "completed", "failed", "cancelled")
#: How a flow's body ended, as its cleanup sees it (`ctx.ending`, `SessionState.ending`).
ENDINGS = ("completed", "failed", "cancelled", "deadline_exceeded")
#: The error type of a session that its deadline ended (`Flow(deadline=)`, `run(deadline=)`).
DEADLINE_EXCEEDED = "deadline_exceeded"


# The two records the reducer changes on every event keep their fields in a __dict__ (not
# slots): the reducer writes a field as one dict store (the live run, in place) and copies a
# record as one C-level dict copy (a pure fold), both far cheaper than slot writes through
# `object.__setattr__`.
@attrs.frozen(slots=False)
class ContainerFrame:
    """Where one entered, unfinished container stands.

    `iteration` is the index of the iteration in progress (`started`) or next; `child` the index,
    in the body, of the element in progress or next. `size` is a ForEach's item count,
    `last_output` the previous iteration's output, `action` the route a Graph node returned. A frame never holds a ForEach's items or
    results: those live out of line in the store, so a frame stays small however long the loop.

    A concurrent container (`ForEach(concurrency=N)` with N != 1, `Parallel`) has `lanes`: one
    frame of kind "lane" per in-flight or waiting iteration (by index) or branch (by name);
    `iteration` is then the next index to start. A lane keeps its own position (`child`,
    `child_outputs`, `started`), the frames of the containers in progress inside it (`stack`,
    outermost first), the wait it is in (`pause`), and the `resume_values` and `retries` of
    its node in progress — what the session's own fields hold for a sequential run. Lanes end
    when their iteration completes: `lanes` holds what is in flight or waiting, never more.

    `parked` counts the container's waiting lanes that are not in `lanes` but in the store,
    each in the wait row of its token (engine/state/lanes.py): a session in which many lanes
    wait keeps only what is in flight in its snapshot. A state folded from events never parks
    (`parked` 0); `lanes.unpark` puts a parked lane back.
    """

    node: str
    kind: str
    path: tuple[Any, ...]
    iteration: int = 0
    child: int = 0
    completed_iterations: int = 0
    child_outputs: dict[str, Any] = attrs.field(factory=dict)
    selected: Any = None
    started: bool = False
    size: int | None = None
    last_output: Any = None
    action: str | None = None
    lanes: dict[Any, ContainerFrame] | None = None
    parked: int = 0
    stack: tuple[ContainerFrame, ...] = ()
    pause: PauseState | None = None
    resume_values: tuple[Any, ...] = ()
    retries: int = 0


@attrs.frozen(slots=True)
class PauseState:
    """Why and where a session waits. `awaits_value`: a node waits for the resume value.

    The one shape of a pause: the `Pause` signal a node yields is this record (a subclass with
    no field of its own), and each other form of it is made in one place: the `run.paused`
    event's data by `pause_to_data` and read back by `pause_from_data` (the reducer's), both
    below; the public PauseInfo by `drivers/drive/outcome.pause_info`; a store's wait row by
    `snapshots/records.wait_record`; the snapshot's form by `snapshots/codec/wire.py`. A field
    is declared here only: events and the state carry a new one with no other change; the
    snapshot's form names each (a test compares it with cattrs' on random states), PauseInfo
    shows what it declares too."""

    kind: str
    reason: str
    path: tuple[Any, ...]
    payload: Any = None
    wake_at: datetime | None = None
    expires_at: datetime | None = None
    #: False when the node does not take the resume value (a retry back-off, say).
    awaits_value: bool = True
    #: The name a keyed Wait may be resumed by (`Runtime.deliver`); what a Gate or Wait with a
    #: timeout does when it passes: "approve" or "reject" (a Gate), "fail" or {"value": the
    #: output} (a Wait), recorded so that any process can time it out. A snapshot written
    #: before they existed: None.
    key: str | None = None
    on_timeout: Any = None


#: The fields of a pause that its `run.paused` event's data carries only when they differ from
#: their default, with that default, in the order written (`kind` and `reason` always come
#: first; `path` is the event's own).
_OPTIONAL: tuple[tuple[str, Any], ...] = tuple(
    (field.name, field.default)
    for field in attrs.fields(PauseState)
    if field.name not in ("kind", "reason", "path")
)


def pause_to_data(pause: PauseState) -> dict[str, Any]:
    """The data of the `run.paused` event of `pause` (a Pause signal or a PauseState): `kind`,
    `reason`, then each other field that is not at its default. Events already written hold
    these bytes, so the order and the fields left out stay as they are."""
    data = {"kind": pause.kind, "reason": pause.reason}
    for name, default in _OPTIONAL:
        value = getattr(pause, name)
        if value is not default:
            data[name] = value
    return data


def pause_from_data(path: tuple[Any, ...], data: dict[str, Any]) -> PauseState:
    """The PauseState a `run.paused` event at `path` records (keys it does not know, such as
    the `actor` of an abort, are left to the log)."""
    get = data.get
    # Its slots set here, not through the class's call: attrs' frozen `__init__` costs some
    # 10,000 instructions, and every pause and resume folds one of these.
    pause = _new(PauseState)
    _set_kind(pause, data["kind"])
    _set_reason(pause, get("reason", ""))
    _set_path(pause, path)
    for name, default, set_field in _READ_OPTIONAL:
        set_field(pause, get(name, default))
    return pause


_new = object.__new__
_set_kind, _set_reason, _set_path, *_SET_OPTIONAL = (
    PauseState.__dict__[field.name].__set__ for field in attrs.fields(PauseState)
)
#: (name, default, slot setter) of each optional field, zipped once here rather than per call
#: (a strict zip parses its keyword on every call).
_READ_OPTIONAL = tuple(
    (name, default, set_field)
    for (name, default), set_field in zip(_OPTIONAL, _SET_OPTIONAL, strict=True)
)


@attrs.frozen(slots=True)
class OutOfLine:
    """A value the state refers to instead of holding it: the one that the session's event
    number `seq` carries (the flow's input in `run.started`, a top-level element's output in
    `node.completed`), stored once with that event. It stands for a large input or top-level
    output (over `bounds.INLINE` bytes encoded), so that every snapshot written after it does
    not carry it again. The reducer puts it where the event says `"out_of_line": True`, in the
    live state and in a derived one alike; the engine reads the value back through
    `Execution.value`, a view through the store."""

    seq: int


@attrs.frozen(slots=True)
class ErrorInfo:
    """What went wrong, where, and whether resuming may help."""

    type: str
    message: str
    path: tuple[Any, ...] = ()
    retryable: bool = False
    attempts: int = 0
    traceback: str | None = None


@attrs.frozen(slots=False)
class SessionState:
    """Everything needed to continue a session: a pure fold of its events.

    `resume_values` are the values the session was resumed with while the node now in progress
    waited; they are handed to that node's interrupts in order and cleared when it completes.
    `retries` counts the failed attempts of the step in progress (so a back-off that paused the
    session, and was resumed in another process, goes on with the right attempt number).

    `deadline`: when the session fails with "deadline_exceeded" if still not ended (recorded
    by `run.started`, so any process enforces it). `cleanup`: its flow has a `cleanup=` body
    (recorded by `run.started`, so a process that cancels it knows it needs the flow).
    `ending`: how the flow's body ended, once its cleanup began (`cleanup.started`), with
    `ending_data` the data of the event that ends the run when the cleanup is over (the
    body's output, its error, who cancelled); `cleaned`: the cleanup is over
    (`cleanup.ended`), with `cleanup_error` if it failed. None/False/{} until then, so a
    snapshot written before these fields existed reads the same.
    """

    session_id: str
    flow: str = ""
    status: str = "running"
    input: Any = None
    shared: dict[str, Any] = attrs.field(factory=dict)
    outputs: dict[str, Any] = attrs.field(factory=dict)
    container_stack: tuple[ContainerFrame, ...] = ()
    pause: PauseState | None = None
    error: ErrorInfo | None = None
    output: Any = None
    last_seq: int = 0
    metrics: dict[str, float] = attrs.field(factory=dict)
    resume_values: tuple[Any, ...] = ()
    retries: int = 0
    deadline: datetime | None = None
    cleanup: bool = False
    ending: str | None = None
    ending_data: dict[str, Any] = attrs.field(factory=dict)
    cleaned: bool = False
    cleanup_error: ErrorInfo | None = None


def from_fields(cls: type[Any], fields: dict[str, Any]) -> Any:
    """A SessionState or ContainerFrame whose `__dict__` is `fields` (every field, by name),
    made without `__init__`: the classes have no validators or converters for it to run, and
    a dict of the record's own is read faster than the key-sharing one `__init__` leaves. The
    reducer copies records this way and the snapshot reader builds them so."""
    record = object.__new__(cls)
    object.__setattr__(record, "__dict__", fields)
    return record


def new_frame(
    node: str, kind: str, path: tuple[Any, ...], size: int | None = None, started: bool = False
) -> ContainerFrame:
    """`ContainerFrame(node=node, kind=kind, path=path, size=size, started=started)` with a
    field dict of its own (as `from_fields` makes, which the reducer writes), made without
    calling the class: attrs' `__init__` and the copy that gave the frame its own dict cost
    about 3,000 instructions per container entered (a nested Flow in a ForEach's item enters
    one per item). A test checks it equals what the class makes, field for field."""
    frame: ContainerFrame = from_fields(
        ContainerFrame,
        {
            "node": node,
            "kind": kind,
            "path": path,
            "iteration": 0,
            "child": 0,
            "completed_iterations": 0,
            "child_outputs": {},
            "selected": None,
            "started": started,
            "size": size,
            "last_output": None,
            "action": None,
            "lanes": None,
            "parked": 0,
            "stack": (),
            "pause": None,
            "resume_values": (),
            "retries": 0,
        },
    )
    return frame


def error_from_data(data: dict[str, Any]) -> ErrorInfo:
    """Rebuild an ErrorInfo from the dict form it has in event data."""
    return ErrorInfo(
        type=data["type"],
        message=data.get("message", ""),
        path=tuple(data.get("path", ())),
        retryable=data.get("retryable", False),
        attempts=data.get("attempts", 0),
        traceback=data.get("traceback"),
    )


def error_to_data(error: ErrorInfo) -> dict[str, Any]:
    """The dict form of an ErrorInfo, as carried in event data."""
    return {
        "type": error.type,
        "message": error.message,
        "path": error.path,
        "retryable": error.retryable,
        "attempts": error.attempts,
        "traceback": error.traceback,
    }
