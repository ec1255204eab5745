"""The one pure reducer: `apply(state, event) -> state`, and `derive_state(events)`.

The live run and `derive_state` use this same function, so the derived state equals the live
one by construction. Every branch costs O(depth of the container stack), never O(history): no
list of iterations, results or events is ever copied here, and the live run (`owned=True`)
does not copy the outputs recorded so far either.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from . import events as ev
from .events import Event
from .state import CONTAINER_KINDS, ContainerFrame, ErrorInfo, PauseState, SessionState


def _evolve(inst: Any, **changes: Any) -> Any:
    """A copy of a frozen record (SessionState, ContainerFrame) with `changes`.

    The reducer makes a new state for every event, so this is the hottest function in tarry.
    `attrs.evolve` re-runs `__init__` through keyword plumbing; these records keep their
    fields in a `__dict__`, so a copy is one C-level dict copy and update.
    """
    new = object.__new__(type(inst))
    fields = new.__dict__
    fields.update(inst.__dict__)
    fields.update(changes)
    return new


def _replace_top(state: SessionState, seq: int, **changes: Any) -> SessionState:
    stack = state.container_stack
    top = _evolve(stack[-1], **changes)
    return _evolve(state, container_stack=stack[:-1] + (top,), last_seq=seq)


def _record_child(
    state: SessionState,
    seq: int,
    name: str,
    data: dict[str, Any],
    extra: dict[str, Any],
    owned: bool,
) -> SessionState:
    """A child finished: record its output in the innermost open scope."""
    output = data.get("output")
    stack = state.container_stack
    if stack:
        top = stack[-1]
        outs = top.child_outputs if owned else dict(top.child_outputs)
        outs[name] = output
        if top.kind == "graph":
            action = data.get("action", "default")
            top = _evolve(top, child_outputs=outs, child=top.child + 1, action=action)
        else:
            top = _evolve(top, child_outputs=outs, child=top.child + 1)
        extra["container_stack"] = stack[:-1] + (top,)
    else:
        outs = state.outputs if owned else dict(state.outputs)
        outs[name] = output
        extra["outputs"] = outs
    extra["last_seq"] = seq
    extra["resume_values"] = ()
    if state.retries:
        extra["retries"] = 0
    return _evolve(state, **extra)


def _merge_effects(
    state: SessionState, data: dict[str, Any], extra: dict[str, Any], owned: bool
) -> None:
    """Fold a node's `ctx.state` changes and metrics into `extra` (the fields to change)."""
    deleted = data.get("state_deleted")
    changed = data.get("state")
    if changed or deleted:
        shared = state.shared if owned else dict(state.shared)
        for key in deleted or ():
            shared.pop(key, None)
        shared.update(changed or {})
        extra["shared"] = shared
    metrics = data.get("metrics")
    if metrics:
        totals = state.metrics if owned else dict(state.metrics)
        for name, value in metrics.items():
            totals[name] = totals.get(name, 0) + value
        extra["metrics"] = totals


def apply(state: SessionState, event: Event, owned: bool = False) -> SessionState:
    """Return the state after `event`. Pure by default: `state` is never modified.

    `owned=True` is for a caller that owns `state` and drops it for the result (the live
    Execution): the dicts of outputs, `ctx.state` and metrics are then updated in place rather
    than copied, so recording an output costs O(1) however many came before. The result is
    equal either way; only the old state, which nobody reads again, is changed.
    """
    t = event.type
    data = event.data
    seq = event.seq

    if t == ev.NODE_COMPLETED:
        path = event.path
        stack = state.container_stack
        extra: dict[str, Any] = {}
        if stack and stack[-1].path == path:
            state = _evolve(state, container_stack=stack[:-1])
        if "state" in data or "metrics" in data or "state_deleted" in data:
            _merge_effects(state, data, extra, owned)
        return _record_child(state, seq, path[-1], data, extra, owned)

    if t == ev.NODE_STARTED:
        kind = data.get("kind")
        if kind in CONTAINER_KINDS:
            frame = ContainerFrame(
                node=event.path[-1], kind=kind, path=event.path, size=data.get("size")
            )
            return _evolve(state, container_stack=state.container_stack + (frame,), last_seq=seq)
        return _evolve(state, last_seq=seq)

    if t == ev.ITERATION_STARTED:
        top = state.container_stack[-1]
        changes: dict[str, Any] = {"iteration": data["index"], "child": 0, "started": True}
        if top.kind in ("branch", "graph"):
            changes["selected"] = data.get("item")
            changes["action"] = None
        if top.kind != "graph" and top.kind != "loop":
            changes["child_outputs"] = {}
        return _replace_top(state, seq, **changes)

    if t == ev.ITERATION_COMPLETED:
        top = state.container_stack[-1]
        changes = {
            "iteration": data["index"] + 1,
            "completed_iterations": top.completed_iterations + 1,
            "child": 0,
            "started": False,
            "last_output": data.get("output"),
        }
        if top.kind == "graph":
            changes["selected"] = data.get("next")
        elif top.kind == "foreach":
            changes["child_outputs"] = {}
        return _replace_top(state, seq, **changes)

    if t == ev.NODE_FAILED:
        extra = {"last_seq": seq}
        if "metrics" in data:
            _merge_effects(state, {"metrics": data["metrics"]}, extra, owned)
        return _evolve(state, **extra)

    if t == ev.RUN_STARTED:
        return _evolve(
            state,
            flow=data.get("flow", state.flow),
            input=data.get("input"),
            shared=dict(data.get("state") or {}),
            status="running",
            last_seq=seq,
        )

    if t == ev.RUN_PAUSED:
        pause = PauseState(
            kind=data["kind"],
            reason=data.get("reason", ""),
            path=event.path,
            payload=data.get("payload"),
            wake_at=data.get("wake_at"),
            expires_at=data.get("expires_at"),
            awaits_value=data.get("awaits_value", True),
        )
        return _evolve(state, status="paused", pause=pause, last_seq=seq)

    if t == ev.RUN_RESUMED:
        values = state.resume_values
        if "value" in data:
            values = values + (data["value"],)
        return _evolve(
            state, status="running", pause=None, error=None, resume_values=values, last_seq=seq
        )

    if t == ev.RUN_COMPLETED:
        return _evolve(
            state,
            status="completed",
            output=data.get("output"),
            container_stack=(),
            pause=None,
            last_seq=seq,
        )

    if t == ev.RUN_FAILED:
        # A resume of the failed session starts the failed step's attempts afresh.
        return _evolve(
            state,
            status="failed",
            error=error_from_data(data["error"]),
            pause=None,
            retries=0,
            last_seq=seq,
        )

    if t == ev.NODE_RETRYING:
        return _evolve(state, retries=data["attempt"], last_seq=seq)

    if t == ev.RUN_CANCELLED:
        return _evolve(state, status="cancelled", pause=None, last_seq=seq)

    # node.skipped: recorded in the log, no change of position.
    return _evolve(state, last_seq=seq)


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


def derive_state(events: Iterable[Event], initial: SessionState | None = None) -> SessionState:
    """Fold `events` through `apply`. With no `initial`, the session id comes from the first."""
    events = list(events)
    if initial is None:
        if not events:
            msg = "derive_state needs an initial state or at least one event"
            raise ValueError(msg)
        initial = SessionState(session_id=events[0].session_id)
    return functools.reduce(apply, events, initial)
