"""The items of an open ForEach, a page at a time, each with its status by index: what the
monitor's per-item grid shows.

It costs what the page shows, not the whole ForEach: a frame never holds a ForEach's items or
results (those live out of line), only where it stands — the next index to start
(`iteration`), how many completed, the lanes in flight or waiting (at most its concurrency) —
so each index's status follows from the frame alone. Waiting lanes the snapshot left out
(parked, `ContainerFrame.parked`) are wait rows: they are read, without their lanes being
decoded, only when the frame has some.
"""

from __future__ import annotations

from typing import Any

import attrs
from tarry.drivers.reading.views import SessionView, state_of
from tarry.engine.errors import InvalidArgument
from tarry.engine.state.lanes import frames
from tarry.engine.state.records import ContainerFrame, SessionState

#: An item's status: its iteration completed; runs now; waits (a pause inside it); failed (the
#: session's error is inside it); has not started.
DONE, RUNNING, WAITING, FAILED, NOT_STARTED = "done", "running", "waiting", "failed", "not_started"
STATUSES = (DONE, RUNNING, WAITING, FAILED, NOT_STARTED)


@attrs.frozen
class ItemsPage:
    """Items `offset` .. `offset + len(items) - 1` of the ForEach at `path`: `items` are
    `{"index", "status"}`; `size` the item count (None when not known yet); `counts` the items
    of each status over the whole ForEach (from the frame's figures, not by reading items)."""

    session_id: str
    path: str
    size: int | None
    offset: int
    limit: int
    items: list[dict[str, Any]]
    counts: dict[str, int]


def path_text(path: tuple[Any, ...]) -> str:
    """A frame's path as the API spells it: its parts joined by "/" (`outer/2/items`)."""
    return "/".join(str(part) for part in path)


def foreach_paths(state: SessionState) -> list[str]:
    """The paths of the open ForEach frames of `state`, outermost first."""
    return [path_text(f.path) for f in frames(state.container_stack) if f.kind == "foreach"]


def _find(state: SessionState, path: str) -> ContainerFrame | None:
    for frame in frames(state.container_stack):
        if frame.kind == "foreach" and path_text(frame.path) == path:
            return frame
    return None


def _pauses_within(lane: ContainerFrame) -> bool:
    return lane.pause is not None or any(f.pause is not None for f in frames(lane.stack))


def items_page(view: SessionView, path: str, offset: int = 0, limit: int = 200) -> ItemsPage:
    """The page of the open ForEach at `path` (as `path_text` spells it) of the session of
    `view`. InvalidArgument when no ForEach is open there (a finished one, or none at all), or
    for an offset < 0 or a limit < 1."""
    if type(offset) is not int or offset < 0 or type(limit) is not int or limit < 1:
        raise InvalidArgument("offset must be an int >= 0 and limit an int >= 1")
    # The snapshot (or the live state of a run in this process), parked lanes left parked.
    live = view._state  # noqa: SLF001 - the view's own state, before it unparks anything
    state = live if live is not None else state_of(view._record)  # noqa: SLF001
    frame = _find(state, path)
    if frame is None:
        # A ForEach inside a parked lane is not in the snapshot: the whole state has it.
        frame = _find(view.state, path) if path not in foreach_paths(state) else None
        if frame is None:
            open_ = ", ".join(foreach_paths(state)) or "none"
            raise InvalidArgument(f"no ForEach is open at {path!r} (open ones: {open_})")
    depth = len(frame.path)
    running = view.status == "running"
    lanes = frame.lanes
    parked: set[int] = set()
    stop = offset + limit
    if frame.parked:  # waiting lanes kept in the store's wait rows: their paths say the index
        for wait in view._store.waits(view.session_id):  # noqa: SLF001
            where = wait.path
            if len(where) > depth and tuple(where[:depth]) == tuple(frame.path):
                index = where[depth]
                if type(index) is int and offset <= index < stop:
                    parked.add(index)
    failed_at = None
    error = state.error
    if error is not None and len(error.path) > depth and tuple(error.path[:depth]) == frame.path:
        failed_at = error.path[depth]
    pause = state.pause
    paused_at = (
        pause.path[depth]
        if pause is not None and len(pause.path) > depth and pause.path[:depth] == frame.path
        else None
    )

    def status(i: int) -> str:
        if i == failed_at:
            return FAILED
        if lanes is not None:  # concurrent: iterations finish out of order
            lane = lanes.get(i)
            if lane is not None:
                return WAITING if _pauses_within(lane) or not running else RUNNING
            if i in parked:
                return WAITING
            return DONE if i < frame.iteration else NOT_STARTED
        if i < frame.iteration:
            return DONE
        if i == frame.iteration:
            if i == paused_at or (not running and frame.started):
                return WAITING
            return RUNNING if frame.started else NOT_STARTED
        return NOT_STARTED

    size = frame.size
    end = stop if size is None else min(stop, size)
    if size is None:  # not known yet: what has started is all that is known
        end = min(end, frame.iteration + (1 if lanes is None and frame.started else 0))
    items = [{"index": i, "status": status(i)} for i in range(offset, max(offset, end))]
    in_lanes = list((lanes or {}).values())
    waiting = sum(1 for lane in in_lanes if _pauses_within(lane) or not running) + frame.parked
    counts = dict.fromkeys(STATUSES, 0)
    counts[DONE] = frame.completed_iterations
    counts[FAILED] = 1 if failed_at is not None else 0
    if lanes is not None:
        counts[WAITING] = waiting - (1 if failed_at in (lanes or {}) else 0)
        counts[RUNNING] = len(in_lanes) + frame.parked - waiting
        started = frame.iteration
    else:
        current = status(frame.iteration) if frame.started else NOT_STARTED
        if current in (RUNNING, WAITING):
            counts[current] = 1
        started = frame.iteration + (1 if frame.started else 0)
    if size is not None:
        counts[NOT_STARTED] = max(0, size - started)
    return ItemsPage(
        session_id=view.session_id,
        path=path,
        size=size,
        offset=offset,
        limit=limit,
        items=items,
        counts=counts,
    )
