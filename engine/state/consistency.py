"""Whether a session's state fits a flow: every position it holds names something the flow has.

A resume builds the generator tree from the flow and lets each container fast-forward to its
frame (`Execution.take_frame`). A frame that names no container, a child index past the end of
its body, an iteration past a ForEach's items or a Graph node that does not exist would fail
there — after the session's token was used — or, worse, be ignored and run the container again
from its start. `inconsistency` finds such a state first, reading only the state and the flow:
O(depth of the container stack).
"""

from __future__ import annotations

from typing import Any

from tarry.engine.containers import Branch, ForEach, Graph, Loop, Parallel
from tarry.engine.elements.element import Element
from tarry.engine.elements.flow import Flow
from tarry.engine.elements.waits import _Waiting
from tarry.engine.errors import InvalidResumeValue
from tarry.engine.state.records import ENDINGS, STATUSES, ContainerFrame, SessionState

Path = tuple[Any, ...]


def inconsistency(flow: Flow, state: SessionState) -> str | None:
    """What in `state` does not fit `flow`, as a phrase for an error message; None if it fits.

    It fits when its completed top-level elements are the first ones of the flow's body; each
    frame of its container stack is the container in progress in the body of the frame before
    it (of that kind, at that path); every index of a frame lies within what it counts (a child
    within its body, an iteration within a ForEach's items); a Branch's side and a Graph's node
    exist; and the run waits or failed where it stands.
    """
    if state.flow != flow.name:
        return f"it holds a session of flow {state.flow!r}, not of {flow.name!r}"
    if state.status not in STATUSES:
        return f"its status {state.status!r} is none of {', '.join(STATUSES)}"
    if state.retries < 0:
        return f"it counts {state.retries} failed attempts"
    body = flow.body
    outputs = state.outputs
    done = len(outputs)
    if done > len(body) or any(element.name not in outputs for element in body[:done]):
        names = [element.name for element in body]
        return (
            f"its completed top-level elements {sorted(outputs)} are not the first {done} "
            f"of the flow's {names}"
        )
    # Walk down the stack: `base` is the path of the body being walked, `current` the element
    # in progress in it (None when none is: the body is done, or its iteration has not begun).
    # Paths are compared with ==, never hashed: a tampered one may hold anything.
    base: Path = ()
    current: Element | None = body[done] if done < len(body) else None
    if state.ending is not None:
        # The body ended and its cleanup runs (or ran): the only element in progress is the
        # cleanup, a Flow of its own at ("@cleanup",).
        current = None if state.cleaned else flow.cleanup
        if state.ending not in ENDINGS:
            return f"its body ended as {state.ending!r}, none of {', '.join(ENDINGS)}"
        if current is None and not state.cleaned:
            return "its body's cleanup runs, but the flow has no cleanup"
    problem, base, current, last = _walk(state.container_stack, base, current, None)
    if problem is not None:
        return problem
    # A Gate, Wait or Sleep in progress completes with the first value it was resumed with.
    values = state.resume_values
    if values and isinstance(current, _Waiting):
        if len(values) > 1:
            return f"it holds {len(values)} resume values for {current.kind} {current.name!r}"
        try:
            current.accept(values[0])
        except InvalidResumeValue as exc:
            return f"the value it was resumed with is refused: {exc}"
    # Where the run waits or failed: at the element in progress, at the checkpoint of an
    # iteration not begun, at the innermost container itself (its `until`, its route), or at
    # the flow's root.
    places = [()]
    if current is not None:
        places.append(base + (current.name,))
    if last is not None:
        places.append(last.path)
        if not last.started:
            places.append(base)
    inside = last.path if last is not None and last.lanes is not None else None
    for what, record in (("waits", state.pause), ("failed", state.error)):
        if record is None or record.path in places:  # by ==: nothing is hashed
            continue
        if inside is not None and _is_path(record.path) and record.path[: len(inside)] == inside:
            continue  # in a lane of the concurrent container in progress (checked above)
        at = record.path
        if not _is_path(at):
            return f"the run {what} at {at!r}, not a tuple of names and indexes"
        stands = " or ".join(sorted(_show(p) for p in places if p))
        return f"the run {what} at {_show(at)}, but stands at {stands or 'the root'}"
    return None


def _walk(
    stack: tuple[ContainerFrame, ...],
    base: Path,
    current: Element | None,
    last: ContainerFrame | None,
) -> tuple[str | None, Path, Element | None, ContainerFrame | None]:
    """Check each frame of `stack` in turn (see `inconsistency`); a concurrent container's frame
    has its lanes checked, each against its body, with the lane's own stack."""
    for frame in stack:
        problem = _misplaced(frame, base, current, last)
        if problem is None and frame.lanes is not None:
            problem = _lanes(current, frame)  # type: ignore[arg-type]
            if problem is None:
                return None, frame.path, None, frame
        if problem is None:
            problem, base, current = _inside(current, frame)  # type: ignore[arg-type]
        if problem is not None:
            return f"the {frame.kind} frame at {_show(frame.path)}: {problem}", (), None, None
        last = frame
    return None, base, current, last


def _lanes(element: Element, frame: ContainerFrame) -> str | None:
    """Why the lanes of a concurrent container's `frame` do not fit `element`, or None."""
    # A Parallel always runs its branches in lanes, even with concurrency=1; a ForEach only
    # when its concurrency is not 1.
    if not isinstance(element, Parallel) and not (
        isinstance(element, ForEach) and element.concurrency != 1
    ):
        return "the flow has no concurrent container there"
    if type(frame.lanes) is not dict:
        return f"its lanes are {frame.lanes!r}, not a map"
    size = frame.size or 0
    for name, lane in frame.lanes.items():
        if isinstance(element, Parallel):
            if name not in element.branches:
                return f"its lane {name!r} names no branch of {sorted(element.branches)}"
            body = element.branches[name]
        else:
            if type(name) is not int or not 0 <= name < min(size, frame.iteration):
                return f"its lane {name!r} is no iteration begun of its {size} items"
            body = element.body
        if type(lane) is not ContainerFrame or lane.path != frame.path + (name,):
            return f"its lane {name!r} is not a lane at {_show(frame.path + (name,))}"
        if not 0 <= lane.child <= len(body):
            return f"lane {name!r}: child {lane.child} is past the end of its body"
        current = body[lane.child] if lane.child < len(body) else None
        problem, *_ = _walk(lane.stack, lane.path, current, None)
        if problem is not None:
            return f"lane {name!r}: {problem}"
    return None


def _misplaced(
    frame: ContainerFrame, base: Path, current: Element | None, last: ContainerFrame | None
) -> str | None:
    """Why `frame` is not the frame of `current`, the element in progress in the body at
    `base` (inside `last`, the frame before it), or None."""
    path = frame.path
    if last is not None and not last.started and last.kind != "branch":
        return f"it lies inside {_show(last.path)}, which has no iteration in progress"
    if current is None:
        return f"it lies where no element is in progress ({_show(base)})"
    expected = base + (current.name,)
    if path != expected or frame.node != current.name:
        if not _is_path(path):
            return f"its path {path!r} is not a tuple of names and indexes"
        return f"it is not the element in progress there ({_show(expected)})"
    if frame.kind != current.kind:
        return f"the flow has a {current.kind} there"
    return None


def _inside(element: Element, frame: ContainerFrame) -> tuple[str | None, Path, Element | None]:
    """A problem with `frame` (of `element`), else the path of the body it is in and the element
    in progress there."""
    iteration, child = frame.iteration, frame.child
    if iteration < 0 or child < 0 or frame.completed_iterations < 0:
        counts = f"{iteration}, {child}, {frame.completed_iterations}"
        return f"iteration, child or completed_iterations is negative ({counts})", (), None
    base = frame.path + (iteration,)
    if isinstance(element, Graph):
        node = frame.selected
        if node is None:
            if frame.started:
                return "its iteration in progress is at no node", (), None
            return None, base, None  # stopped before a node began
        if type(node) is not str or node not in element.nodes:
            return f"its node {node!r} is none of {sorted(element.nodes)}", (), None
        if child > 1:
            return f"child {child} is past its node (a Graph iteration has one)", (), None
        running = frame.started and child == 0
        return None, base, element.nodes[node] if running else None
    if isinstance(element, Branch):
        side = frame.selected
        if side == "then":
            body = element.then
        elif side == "otherwise":
            body = element.otherwise
        else:
            return f"its side {side!r} is neither 'then' nor 'otherwise'", (), None
        base, started = frame.path, True  # a Branch's one iteration begins as it starts
    elif isinstance(element, Flow):
        body, base, started = element.body, frame.path, True  # its one body, no iterations
    elif isinstance(element, ForEach):
        body, started = element.body, frame.started
        size = frame.size or 0
        if size < 0 or iteration > size or (started and iteration == size):
            return f"iteration {iteration} is past its {size} items", (), None
    elif isinstance(element, Loop):
        body, started = element.body, frame.started
    else:
        return f"a {type(element).__name__} keeps no frame", (), None
    if child > len(body):
        return f"child {child} is past the end of its body ({len(body)} elements)", (), None
    return None, base, body[child] if started and child < len(body) else None


def _is_path(path: Any) -> bool:
    return type(path) is tuple and all(type(p) is str or type(p) is int for p in path)


def _show(path: Path) -> str:
    return "/".join(map(str, path)) if path else "the root"
