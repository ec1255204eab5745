"""The one pure reducer: `apply(state, event) -> state`, and `derive_state(events)`.

The live run and `derive_state` use this same function, so the derived state equals the live
one by construction. Every branch costs O(depth of the container stack), never O(history): no
list of iterations, results or events is ever copied here. The live run (`owned=True`) changes
its state in place, so an event costs a few dict writes and no copy at all.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from itertools import repeat
from typing import Any

from tarry.engine.state import events as ev
from tarry.engine.state.events import Event, new_event
from tarry.engine.state.records import (  # noqa: F401 - imported from here too
    CONTAINER_KINDS,
    LANE,
    ContainerFrame,
    ErrorInfo,
    OutOfLine,
    PauseState,
    SessionState,
    error_from_data,
    error_to_data,
    from_fields,
    new_frame,
    pause_from_data,
)

# The records are frozen to everyone else. The reducer writes their fields through `__dict__`
# (they keep their fields in one, see engine/state/records.py): on a copy it just made, or, when its
# caller owns the state, on the state itself.
#
# Each record it changes gets a field dict of its own (`dict(...)`, assigned as `__dict__`).
# The dict that attrs' `__init__` leaves shares its keys with the class, and CPython 3.11
# reads attributes from such a dict through its slow generic lookup, ten times the cost.

Fields = dict[str, Any]


def _copy(inst: Any) -> Any:
    """A shallow copy of a record (SessionState, ContainerFrame): one C-level dict copy."""
    return from_fields(type(inst), dict(inst.__dict__))


def own(state: SessionState, copy: Callable[[Any], Any] | None = None) -> SessionState:
    """A copy of `state` for a run to change in place (`apply(..., owned=True)`): its frames and
    the dicts the reducer writes into (outputs, `ctx.state`, metrics, each frame's outputs) are
    its own, so `state` itself is never changed and may be shared (the driver keeps the state
    of the snapshot it wrote, for the next resume). Costs O(depth of the container stack plus
    the entries of those dicts): what decoding the snapshot costs, far less.

    With `copy`, the resume values are copied with it too: they are the caller's objects (see
    values.py), the rest of a state handed to a run is the run's own or cannot change."""
    live = _copy(state)
    fields = live.__dict__
    fields["container_stack"] = tuple(map(_own_frame, fields["container_stack"], repeat(copy)))
    fields["outputs"] = dict(fields["outputs"])
    fields["shared"] = dict(fields["shared"])
    fields["metrics"] = dict(fields["metrics"])
    if copy is not None and fields["resume_values"]:
        fields["resume_values"] = tuple(map(copy, fields["resume_values"]))
    return live


def _own_frame(frame: ContainerFrame, copy: Callable[[Any], Any] | None) -> ContainerFrame:
    mine = _copy(frame)
    fields = mine.__dict__
    fields["child_outputs"] = dict(frame.child_outputs)
    lanes = frame.lanes
    if lanes is not None:
        fields["lanes"] = {name: _own_frame(lane, copy) for name, lane in lanes.items()}
    if frame.stack:
        fields["stack"] = tuple(_own_frame(f, copy) for f in frame.stack)
    if copy is not None and frame.resume_values:
        fields["resume_values"] = tuple(map(copy, frame.resume_values))
    return mine


def _scope(fields: Fields, path: tuple[Any, ...], owned: bool) -> tuple[Fields, str]:
    """The fields of the scope that records the events at `path`, and the name of its stack
    field: the state's own (`container_stack`), or, when `path` lies in an iteration of a
    concurrent container, the innermost such lane's (`stack`; see engine/state/lanes.py). Not
    `owned`: the frames and lane dicts on the way are copied first (the state is a copy)."""
    key = "container_stack"
    scope = fields
    while True:
        stack = scope[key]
        if not stack:
            return scope, key
        top = stack[-1]
        lanes = top.lanes
        if lanes is None:
            return scope, key
        n = len(top.path)
        if len(path) <= n:
            return scope, key
        lane = lanes.get(path[n])
        if lane is None:
            return scope, key
        if not owned:
            top = _copy(top)
            scope[key] = stack[:-1] + (top,)
            lanes = top.__dict__["lanes"] = dict(lanes)
            lane = lanes[path[n]] = _copy(lane)
        scope, key = lane.__dict__, "stack"


def _top(scope: Fields, key: str, owned: bool) -> Fields:
    """The fields of the scope's innermost frame, to change: those of the frame itself when
    `owned`, else of a copy that replaces it in the scope (itself a copy)."""
    stack = scope[key]
    top = stack[-1]
    if not owned:
        top = _copy(top)
        scope[key] = stack[:-1] + (top,)
    return top.__dict__


# One function per event type, changing `fields` (the state's `__dict__`, `last_seq` set) with
# the event's (seq, path, data); not `owned`: the state is a fresh copy, copied further first.


def node_completed(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    """An element finished: close its frame if it is a container, record its effects, and
    record its output in the innermost open scope.

    Public, unlike the other reducers: a sync step's completion (`Step._call`) emits its event
    inline and folds it with this, the one event the engine folds without `Execution.emit`."""
    stack = fields["container_stack"]
    if stack and stack[-1].lanes is not None:
        scope, key = _scope(fields, path, owned)
        stack = scope[key]
    else:  # no concurrent container in progress: the state records it (inlined: every step)
        scope, key = fields, "container_stack"
    if stack and stack[-1].path == path:
        stack = scope[key] = stack[:-1]
    if "state" in data or "metrics" in data or "state_deleted" in data:
        _merge_effects(fields, data, owned)
    if stack:
        # _top(scope, key, owned), inlined when owned: every step in a container.
        top = stack[-1].__dict__ if owned else _top(scope, key, owned)
        outs = top["child_outputs"]
        if not owned:
            outs = top["child_outputs"] = dict(outs)
        outs[path[-1]] = data.get("output")
        top["child"] += 1
        if top["kind"] == "graph":
            top["action"] = data.get("action", "default")
    elif scope is fields:
        outs = fields["outputs"]
        if not owned:
            outs = fields["outputs"] = dict(outs)
        # A large output kept out of line (see state.OutOfLine): a reference to this event.
        outs[path[-1]] = OutOfLine(seq) if "out_of_line" in data else data.get("output")
    else:  # a lane's own body: the lane records it
        outs = scope["child_outputs"]
        if not owned:
            outs = scope["child_outputs"] = dict(outs)
        outs[path[-1]] = data.get("output")
        scope["child"] += 1
    if scope["resume_values"]:
        scope["resume_values"] = ()  # the values were for this element
    if scope["retries"]:
        scope["retries"] = 0


def step_output(fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any]) -> None:
    """`node_completed(fields, seq, path, data, True)` of a step whose `data` is its output
    alone (`{"output": ...}`: no route, no `ctx.state`, no metric, kept in line), in a state
    its caller owns, while no concurrent container is in progress (`Execution.lanes == 0`,
    so the innermost frame, if any, is the state's own and has no lanes): the completion of
    most steps (`Step._call` folds it with this).

    The same changes as `node_completed`'s, without the tests that cannot hold for such a
    step: a step has no frame to close, no effects to merge, no lane to record it, and the
    frame it completes in is not a Graph's (see below)."""
    stack = fields["container_stack"]
    if stack:
        # Never a Graph's frame (whose completions record an action): a Graph runs its nodes
        # through `_run`, never `_call`, so none of its steps completes through here.
        top = stack[-1].__dict__
        top["child_outputs"][path[-1]] = data["output"]
        top["child"] += 1
    else:
        fields["outputs"][path[-1]] = data["output"]
    if fields["resume_values"]:
        fields["resume_values"] = ()  # the values were for this element
    if fields["retries"]:
        fields["retries"] = 0


def _merge_effects(fields: Fields, data: dict[str, Any], owned: bool) -> None:
    """Fold a node's `ctx.state` changes and metrics into the state's `fields`."""
    deleted = data.get("state_deleted")
    changed = data.get("state")
    if changed or deleted:
        shared = fields["shared"] if owned else dict(fields["shared"])
        for key in deleted or ():
            shared.pop(key, None)
        shared.update(changed or {})
        fields["shared"] = shared
    metrics = data.get("metrics")
    if metrics:
        totals = fields["metrics"] if owned else dict(fields["metrics"])
        for name, value in metrics.items():
            totals[name] = totals.get(name, 0) + value
        fields["metrics"] = totals


def _node_started(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    """A step starts: nothing moves. A container (a nested Flow included) starts: open its
    frame (with lanes when it runs its iterations concurrently)."""
    kind = data.get("kind")
    if kind in CONTAINER_KINDS:
        scope, key = _scope(fields, path, owned)
        # A nested Flow's one body begins as it starts: no iteration event says so.
        frame = new_frame(path[-1], kind, path, data.get("size"), kind == "flow")
        if kind == "parallel" or data.get("concurrency", 1) != 1:
            frame.__dict__["lanes"] = {}
        scope[key] = scope[key] + (frame,)


def _iteration_started(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    stack = fields["container_stack"]
    if stack[-1].lanes is not None:  # else the state records it (inlined: every iteration)
        scope, key = _scope(fields, path, owned)
    else:
        scope, key = fields, "container_stack"
    top = _top(scope, key, owned)
    kind = top["kind"]
    lanes = top["lanes"]
    if lanes is not None:  # a concurrent container: the iteration gets a lane of its own
        index = data["index"]
        name = data["item"] if kind == "parallel" else index
        if not owned:
            lanes = top["lanes"] = dict(lanes)
        path = path + (name,)
        lanes[name] = new_frame(str(name), LANE, path, None, True)
        if index >= top["iteration"]:
            top["iteration"] = index + 1
        return
    top["iteration"] = data["index"]
    top["child"] = 0
    top["started"] = True
    if kind == "branch" or kind == "graph":
        top["selected"] = data.get("item")
        top["action"] = None
    if kind != "graph" and kind != "loop":
        top["child_outputs"] = {}


def _iteration_completed(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    stack = fields["container_stack"]
    if stack[-1].lanes is not None:  # else the state records it (inlined: every iteration)
        scope, key = _scope(fields, path, owned)
    else:
        scope, key = fields, "container_stack"
    top = _top(scope, key, owned)
    kind = top["kind"]
    lanes = top["lanes"]
    if lanes is not None:  # its lane ends; a Parallel keeps the branch's output by name
        name = data["item"] if kind == "parallel" else data["index"]
        if not owned:
            lanes = top["lanes"] = dict(lanes)
        lanes.pop(name, None)
        top["completed_iterations"] += 1
        if kind == "parallel":
            outs = top["child_outputs"]
            if not owned:
                outs = top["child_outputs"] = dict(outs)
            outs[name] = data.get("output")
        return
    top["iteration"] = data["index"] + 1
    top["completed_iterations"] += 1
    top["child"] = 0
    top["started"] = False
    top["last_output"] = data.get("output")
    if kind == "graph":
        top["selected"] = data.get("next")
    elif kind == "foreach":
        top["child_outputs"] = {}


def _node_failed(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    if "metrics" in data:
        _merge_effects(fields, {"metrics": data["metrics"]}, owned)


def _node_retrying(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    scope, _ = _scope(fields, path, owned)
    scope["retries"] = data["attempt"]
    if data.get("spent"):  # the element's resume values were its failed attempt's
        scope["resume_values"] = ()


def _run_started(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    fields["flow"] = data.get("flow", fields["flow"])
    # A large input kept out of line (see state.OutOfLine): a reference to this event.
    fields["input"] = OutOfLine(seq) if "out_of_line" in data else data.get("input")
    fields["shared"] = dict(data.get("state") or {})
    fields["status"] = "running"
    if "deadline" in data:
        fields["deadline"] = data["deadline"]
    if data.get("cleanup"):
        fields["cleanup"] = True


def _run_paused(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    """The session waits (or, for a lane of a concurrent container, one more of its waits is
    recorded: in that lane)."""
    fields["status"] = "paused"
    if _parked(fields, path):
        return  # a lane parked in the store: its row holds its wait (engine/state/lanes.py)
    scope, _ = _scope(fields, path, owned)
    scope["pause"] = pause_from_data(path, data)


def _parked(fields: Fields, path: tuple[Any, ...]) -> bool:
    """Whether `path` lies in a lane that its container parked (not in `lanes`)."""
    stack = fields["container_stack"]
    while stack:
        top = stack[-1]
        lanes = top.lanes
        n = len(top.path)
        if lanes is None or len(path) <= n:
            return False
        lane = lanes.get(path[n])
        if lane is None:
            return top.parked > 0
        stack = lane.stack
    return False


def _run_resumed(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    """The session runs again: the wait at the event's path (the state's own, or a lane's)
    ends, and its node gets the value."""
    scope, _ = _scope(fields, path, owned)
    if "value" in data:
        scope["resume_values"] = scope["resume_values"] + (data["value"],)
    if scope is not fields:
        scope["pause"] = None
    fields["status"] = "running"
    fields["pause"] = None
    fields["error"] = None


def _run_completed(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    if fields["ending_data"]:  # its cleanup kept what this event says: no longer needed
        fields["ending_data"] = {}
    fields["status"] = "completed"
    fields["output"] = data.get("output")
    fields["container_stack"] = ()
    fields["pause"] = None


def _run_failed(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    if fields["ending_data"]:  # its cleanup kept what this event says: no longer needed
        fields["ending_data"] = {}
    fields["status"] = "failed"
    fields["error"] = error_from_data(data["error"])
    fields["pause"] = None
    # A resume of the failed session starts the failed step's attempts afresh.
    fields["retries"] = 0
    scope, _ = _scope(fields, fields["error"].path, owned)
    scope["retries"] = 0


def _run_cancelled(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    if fields["ending_data"]:  # its cleanup kept what this event says: no longer needed
        fields["ending_data"] = {}
    fields["status"] = "cancelled"
    fields["pause"] = None


def _cleanup_started(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    """The flow's body ended (`ending`) and its cleanup runs: the body's frames and wait are
    dropped (nothing of the body runs again), and what ends the run afterwards is kept."""
    fields["ending"] = data["ending"]
    fields["ending_data"] = data.get("end") or {}
    fields["container_stack"] = ()
    fields["pause"] = None
    fields["resume_values"] = ()
    fields["retries"] = 0
    fields["status"] = "running"


def _cleanup_ended(
    fields: Fields, seq: int, path: tuple[Any, ...], data: dict[str, Any], owned: bool
) -> None:
    fields["cleaned"] = True
    fields["container_stack"] = ()
    fields["resume_values"] = ()
    fields["retries"] = 0
    if "error" in data:
        fields["cleanup_error"] = error_from_data(data["error"])


#: The reducer of each type that changes the state (the live run calls them: no Event built).
REDUCERS = {
    ev.NODE_COMPLETED: node_completed,
    ev.NODE_STARTED: _node_started,
    ev.ITERATION_STARTED: _iteration_started,
    ev.ITERATION_COMPLETED: _iteration_completed,
    ev.NODE_FAILED: _node_failed,
    ev.NODE_RETRYING: _node_retrying,
    ev.RUN_STARTED: _run_started,
    ev.RUN_PAUSED: _run_paused,
    ev.RUN_RESUMED: _run_resumed,
    ev.RUN_COMPLETED: _run_completed,
    ev.RUN_FAILED: _run_failed,
    ev.RUN_CANCELLED: _run_cancelled,
    ev.CLEANUP_STARTED: _cleanup_started,
    ev.CLEANUP_ENDED: _cleanup_ended,
    # node.skipped is only recorded in the log.
}


def apply(state: SessionState, event: Event, owned: bool = False) -> SessionState:
    """Return the state after `event`. Pure by default: `state` is never modified.

    `owned=True` is for a caller that owns `state` and drops it for the result (the live
    Execution, see `own`): the state, its innermost frame and its dicts of outputs,
    `ctx.state` and metrics are then changed in place and `state` itself is returned, so an
    event costs O(1) however many came before. The result is equal either way.
    """
    if not owned:
        state = _copy(state)
    fields = state.__dict__
    fields["last_seq"] = event.seq
    try:
        reduce = REDUCERS[event.type]
    except KeyError:
        return state  # node.skipped, or a type this version does not know: no change
    reduce(fields, event.seq, event.path, event.data, owned)
    return state


def derive_state(events: Iterable[Event], initial: SessionState | None = None) -> SessionState:
    """Fold `events` through `apply`. With no `initial`, the session id comes from the first."""
    events = list(events)
    if initial is None:
        if not events:
            msg = "derive_state needs an initial state or at least one event"
            raise ValueError(msg)
        initial = SessionState(session_id=events[0].session_id)
    return functools.reduce(apply, events, initial)


def fold(
    state: SessionState,
    now: datetime,
    specs: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]],
    owned: bool = False,
) -> tuple[SessionState, list[Event]]:
    """Events for `specs` (type, path, data) that follow `state`, and the state after them:
    for writing events in the same transaction as something else (create, token use).
    `owned`: `state` is the caller's own (see `reducer.own`) and is changed in place."""
    events = []
    for type_, path, data in specs:
        event = new_event(state.last_seq + 1, type_, state.session_id, now, path, data)
        state = apply(state, event, owned)
        events.append(event)
    return state, events
