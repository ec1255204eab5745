"""Finding one's way through the lanes of concurrent containers, read-only.

A sequential run keeps one stack of frames (`SessionState.container_stack`) and one node in
progress, whose resume values and retry count the state holds itself. A concurrent container
runs several iterations at once: its frame holds a *lane* (a frame of kind "lane") per
iteration in flight or waiting, and each lane holds what the state holds for a sequential run
— its own stack, node position, pause, resume values and retry count. A path leads through
them: the scope of a path is the lane it lies in (the innermost), or the state itself. Finding
it costs O(depth): one dict lookup per concurrent container on the way.

The reducer has its own copy-on-write walk (it changes what it finds); these only read, but
for `park` and `unpark`.

**Parked lanes.** When a session pauses, each lane that waits leaves the snapshot: the driver
`park`s it and stores it in the wait row of its token, and its container counts it
(`ContainerFrame.parked`). The snapshot then holds what is in flight, whatever the number of
waiting branches, and resuming one branch reads the session's head and that one row, and
`unpark`s the lane into the head before the resume is recorded. A state folded from events
holds every lane (`parked` 0): the stored head and its parked lanes together are that state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from tarry.engine.errors import SnapshotError
from tarry.engine.state.records import ContainerFrame, PauseState, SessionState, from_fields

Scope = SessionState | ContainerFrame


def stack_of(scope: Scope) -> tuple[ContainerFrame, ...]:
    return scope.container_stack if type(scope) is SessionState else scope.stack


def scope_of(state: SessionState, path: tuple[Any, ...]) -> Scope:
    """The state, or the innermost lane whose iteration `path` lies in."""
    scope: Scope = state
    stack = state.container_stack
    while stack:
        top = stack[-1]
        lanes = top.lanes
        if lanes is None:
            break
        n = len(top.path)
        if len(path) <= n:
            break
        lane = lanes.get(path[n])
        if lane is None:
            break
        scope = lane
        stack = lane.stack
    return scope


def chain_of(state: SessionState, path: tuple[Any, ...]) -> list[Scope]:
    """The scopes `path` passes through, the state first and its own scope last."""
    chain: list[Scope] = [state]
    stack = state.container_stack
    while stack:
        top = stack[-1]
        lanes = top.lanes
        if lanes is None:
            break
        n = len(top.path)
        lane = lanes.get(path[n]) if len(path) > n else None
        if lane is None:
            break
        chain.append(lane)
        stack = lane.stack
    return chain


def frames(stack: tuple[ContainerFrame, ...]) -> Iterator[ContainerFrame]:
    """Every frame of `stack`, and of the lanes inside it, outermost first."""
    for frame in stack:
        yield frame
        if frame.lanes:
            for lane in frame.lanes.values():
                yield lane
                yield from frames(lane.stack)


def pauses(state: SessionState) -> list[PauseState]:
    """Every wait of the session: the state's own first, then each waiting lane's, in the order
    of the tree (lanes by the order they started in)."""
    found = [] if state.pause is None else [state.pause]
    for frame in frames(state.container_stack):
        if frame.pause is not None:
            found.append(frame.pause)
    return found


def concurrent(state: SessionState) -> bool:
    """Whether a concurrent container is in progress."""
    for frame in state.container_stack:  # noqa: SIM110 - not any(genexpr): asked per resume
        if frame.lanes is not None:
            return True
    return False


def parked(state: SessionState) -> int:
    """How many lanes of the session wait parked in the store (none: a state folded from
    events, or a session with no concurrent container in progress)."""
    stack = state.container_stack
    n = 0
    for frame in stack:
        if frame.lanes is not None:
            return sum(frame.parked for frame in frames(stack))
        n += frame.parked
    return n  # no lanes: the frames of the stack are all there are (no generator walks them)


def park(state: SessionState, path: tuple[Any, ...]) -> ContainerFrame | None:
    """Take out of `state` (a run's own, changed in place) the lane whose own wait is at
    `path`, counting it as parked in its container; None when the wait at `path` is not a
    lane's (the session's own wait, or a lane that holds a waiting lane of its own)."""
    chain = chain_of(state, path)
    lane = chain[-1]
    if len(chain) < 2 or lane.pause is None or lane.pause.path != path:
        return None
    container = stack_of(chain[-2])[-1]
    del container.lanes[lane.path[-1]]  # type: ignore[union-attr]
    container.__dict__["parked"] += 1
    return lane  # type: ignore[return-value]


def pause_at(state: SessionState, path: tuple[Any, ...]) -> PauseState | None:
    """The wait the state holds at `path` (its innermost lane's, or its own), or None."""
    scope = scope_of(state, path)
    pause = scope.pause
    return pause if pause is not None and pause.path == path else None


def unpark(state: SessionState, lane: ContainerFrame) -> SessionState:
    """`state` with `lane` (read from its wait row) back in its container, one fewer parked
    there: a copy, sharing what it does not change (the state given may be a kept one).
    SnapshotError when no container in progress has parked such a lane."""
    at = lane.path[:-1]
    copy = from_fields(SessionState, dict(state.__dict__))
    scope, key = copy.__dict__, "container_stack"
    while True:
        stack = scope[key]
        top = stack[-1] if stack else None
        if top is None or top.lanes is None or len(top.path) > len(at):
            break
        top = from_fields(ContainerFrame, dict(top.__dict__))
        scope[key] = stack[:-1] + (top,)
        fields = top.__dict__
        if top.path == at:
            if fields["parked"] < 1 or lane.path[-1] in fields["lanes"]:
                break
            fields["lanes"] = {**fields["lanes"], lane.path[-1]: lane}
            fields["parked"] -= 1
            return copy
        inner = fields["lanes"].get(at[len(top.path)])
        if inner is None:
            break
        inner = from_fields(ContainerFrame, dict(inner.__dict__))
        fields["lanes"] = {**fields["lanes"], inner.path[-1]: inner}
        scope, key = inner.__dict__, "stack"
    msg = f"session {state.session_id!r} has no parked lane at {list(lane.path)!r}"
    raise SnapshotError(msg)


def restore(state: SessionState, lanes: Iterable[ContainerFrame]) -> SessionState:
    """`state` (its owner's, changed in place: see reducer.own) with every lane of `lanes`
    (read from its wait rows) back in its container: the whole state, as a fold of the events
    would make it, when `lanes` are all the parked ones. SnapshotError for a lane that no
    container parked."""
    for lane in lanes:
        at = lane.path[:-1]
        scope = scope_of(state, at)
        stack = stack_of(scope)
        container = stack[-1] if stack and stack[-1].path == at else None
        if container is None or container.parked < 1 or lane.path[-1] in container.lanes:
            msg = f"session {state.session_id!r} has no parked lane at {list(lane.path)!r}"
            raise SnapshotError(msg)
        container.lanes[lane.path[-1]] = lane  # type: ignore[index]
        container.__dict__["parked"] -= 1
    return state
