"""Finding one's way through the lanes of concurrent containers, read-only.

A sequential run keeps one stack of frames (`SessionState.container_stack`) and one node in
progress, whose resume values and retry count the state holds itself. A concurrent container
runs several iterations at once: its frame holds a *lane* (a frame of kind "lane") per
iteration in flight or waiting, and each lane holds what the state holds for a sequential run
— its own stack, node position, pause, resume values and retry count. A path leads through
them: the scope of a path is the lane it lies in (the innermost), or the state itself. Finding
it costs O(depth): one dict lookup per concurrent container on the way.

The reducer has its own copy-on-write walk (it changes what it finds); these only read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tarry.engine.state.records import ContainerFrame, PauseState, SessionState

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
    return any(frame.lanes is not None for frame in state.container_stack)
