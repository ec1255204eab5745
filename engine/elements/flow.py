"""Flow: the root element, its fingerprint, lookup of elements by path; and a flow nested in
another flow's body, which runs inline as a container."""

from __future__ import annotations

import math
from collections.abc import Generator, Iterable
from datetime import timedelta
from typing import Any

from tarry.engine.bounds import frame_bytes
from tarry.engine.context import ROOT, Scope
from tarry.engine.elements.body import as_body
from tarry.engine.elements.element import (
    Element,
    Route,
    Signal,
    body_paths,
    check_name,
    resume_prev,
    run_body,
    unwrap,
)
from tarry.engine.errors import InvalidFlow
from tarry.engine.execution import Execution
from tarry.engine.failure import completed
from tarry.engine.short_hash import short_hash
from tarry.engine.state import events as ev

_STARTED = {"kind": "flow"}

#: The name the cleanup body of a session's flow runs under: its elements' paths begin with it
#: (`("@cleanup", "release")`). A flow with a cleanup may not name a top-level element so.
CLEANUP = "@cleanup"


def structural(path: tuple[Any, ...]) -> tuple[str, ...]:
    """A run path without its iteration indexes: `("tickets", 47, "triage")` -> names only."""
    return tuple(filter(_is_str, path))  # C-level: no generator per lookup


_is_str = str.__instancecheck__  # isinstance(p, str)


class Flow(Element):
    """The root of a workflow: runs `body` in order; its output is the last element's output.

    `version` is part of the fingerprint: bump it to mark a change of meaning that keeps the
    same structure, so that sessions started by the old flow refuse to resume on the new one.

    **A flow inside a flow.** A Flow may appear in another flow's body (or a container's) like
    any container: it runs inline, in the same session, under its own name, which prefixes the
    paths of its elements (`("inner", "s1")`, `("items", 3, "inner", "ok")`). Its first element
    gets the element before it as `ctx.prev`, as a container's body does; `ctx.input` inside it
    stays the session's input, and `ctx.item`, `ctx.index` and `ctx.iteration` those of the
    enclosing containers. Its output is its last element's output (a `Route` its last element
    returns is passed on, so a Flow used as a Graph node routes like a step). It is recorded as
    a container of kind "flow" (`node.started`, then `node.completed` with its output), and its
    pauses, failures, aborts and resumes are those of any container. Only the outermost flow
    is a session's flow: an inner one is not registered, and its `version` only counts in the
    outer flow's fingerprint (bump it to refuse sessions started before its meaning changed).
    A body is fixed when its flow is built; a flow that contains itself (a body changed
    afterwards to close a cycle) raises InvalidFlow when a flow around it is built.

    **Deadline.** `deadline=seconds` (a positive number or a timedelta): a session of this flow
    still not ended that long after it started fails with `error.type == "deadline_exceeded"`
    (`Runtime.run(deadline=)` overrides it per session). It is recorded in the session's
    `run.started` event, so whichever process holds the session enforces it: a running drive
    at its next checkpoint, a waiting session by the timers (`resume_due`, workers). It is
    not part of the fingerprint: changing it changes only the sessions started afterwards.

    **Cleanup.** `cleanup=body` (an element, a callable, or a list of them, like `body`) runs
    once after the body ended in any way — completed, failed, cancelled, deadline exceeded —
    with `ctx.ending` saying which, under the path `("@cleanup", ...)`. Its first element gets
    the body's output as `ctx.prev` when the body completed (else None). It may pause and be
    resumed like any body; then the session ends as the body did (a completed body's output,
    a failed body's error, cancelled). Its own failure is recorded as the session's
    `cleanup_error` and changes nothing else. It is part of the fingerprint. Only the
    session's flow takes `cleanup=` and `deadline=`: a nested Flow given either raises
    InvalidFlow when the flow around it is built.
    """

    kind = "flow"

    def __init__(
        self,
        name: str,
        body: Any,
        *,
        version: str | int | None = None,
        deadline: float | timedelta | None = None,
        cleanup: Any = None,
    ) -> None:
        self.name = check_name(name, "Flow")
        self.body = as_body(body, name)
        self.version = version
        #: The seconds a session of it may take (None: no deadline).
        self.deadline = _seconds(deadline)
        #: The cleanup body, run as a Flow of its own named CLEANUP (None: no cleanup).
        self.cleanup: Flow | None = None
        if cleanup is not None:
            if any(e.name == CLEANUP for e in self.body):
                msg = f"flow {name!r} has a cleanup, so no element of its body may be named {CLEANUP!r}"
                raise InvalidFlow(msg)
            self.cleanup = Flow(CLEANUP, cleanup)
        #: The paths of its body's elements, by the base they run under (see body_paths).
        self._paths: dict[tuple[Any, ...], tuple[tuple[Any, ...], ...]] = {}
        self._index: dict[tuple[str, ...], Element] = {}
        #: Each element's (and each Parallel branch's) place in the tree, in order.
        self._places: dict[tuple[str, ...], int] = {}
        self._build_index(self.body, (), (self,))
        if self.cleanup is not None:
            self._build_index((self.cleanup,), (), (self,))
        self.fingerprint = short_hash(repr(self._describe()))

    def _build_index(
        self, body: tuple[Element, ...], base: tuple[str, ...], within: tuple[Element, ...]
    ) -> None:
        """Index `body` (at `base`, inside the containers `within`, outermost first), refusing
        a container found inside itself: the walk would never end."""
        for element in body:
            key = base + (element.name,)
            self._index[key] = element
            self._places[key] = len(self._places)
            bodies = element._bodies()
            if not bodies:
                continue
            if (
                type(element) is Flow
                and element.name != CLEANUP
                and (element.cleanup is not None or element.deadline is not None)
            ):
                msg = (
                    f"flow {element.name!r} inside {within[0].name!r} has a cleanup or a "
                    "deadline; only a session's own flow takes them"
                )
                raise InvalidFlow(msg)
            if any(element is outer for outer in within):
                names = "/".join(e.name for e in within + (element,))
                msg = f"{element.kind} {element.name!r} contains itself ({names})"
                raise InvalidFlow(msg)
            for label, child_body in bodies:
                # A Parallel's branch name is part of its elements' paths.
                inner = key + (label,) if element.labelled else key
                self._places.setdefault(inner, len(self._places))
                self._build_index(child_body, inner, within + (element,))

    def _bodies(self) -> Iterable[tuple[str, tuple[Element, ...]]]:
        return (("body", self.body),)

    def _describe(self) -> tuple[Any, ...]:
        # The root's description, unchanged since before flows nested: the fingerprints of
        # existing sessions' flows stay what they were (a cleanup adds to it, when given).
        described = ("flow", self.name, self.version, tuple(e._describe() for e in self.body))
        if self.cleanup is not None:
            return described + (("cleanup", self.cleanup._describe()),)
        return described

    def elements(self) -> list[Element]:
        """Every element of the flow's tree, in the order of the tree."""
        return list(self._index.values())

    def find(self, path: tuple[Any, ...]) -> Element | None:
        """The element at a run path (iteration indexes are ignored), or None."""
        return self._index.get(structural(path))

    def order(self, path: tuple[Any, ...]) -> tuple[int, ...]:
        """A key that sorts run paths in the order of the tree: elements and Parallel branches
        as declared, iterations by index (the order their lanes start in)."""
        names: tuple[str, ...] = ()
        key = []
        for part in path:
            if isinstance(part, str):
                names += (part,)
                key.append(self._places.get(names, -1))
            else:
                key.append(part)
        return tuple(key)

    def _run(
        self,
        ex: Execution,
        path: tuple[Any, ...] = (),
        prev: Any = None,
        scope: Scope = ROOT,
    ) -> Generator[Signal, Any, Any]:
        """The session's generator tree when this is its flow (`path` empty: the driver calls
        `flow._run(execution)`), else this flow's run as an element of another one."""
        if path:
            return self._inline(ex, path, prev, scope)
        return self._root(ex)

    def _root(self, ex: Execution) -> Generator[Signal, Any, Any]:
        state = ex.state
        if state.ending is not None:  # the body ended: the drive runs the cleanup now
            return (yield from self._clean(ex))
        start = len(state.outputs)
        # A large input or output kept out of line (state.OutOfLine) is handed on as its
        # reference, and read only where it is used: by `ctx.prev` (CopyingContext), or when a
        # body that runs nothing returns it (run_body). A resume never reads it for nothing.
        prev = resume_prev(self.body, start, state.outputs, state.input)
        paths = body_paths(self._paths, self.body, ())
        result = yield from run_body(ex, self.body, (), start, prev, ROOT, paths)
        return unwrap(result)

    def _clean(self, ex: Execution) -> Generator[Signal, Any, Any]:
        """Run the cleanup body (under CLEANUP), from where its frame stands on a resume; its
        result. Nothing when it ran already (`cleaned`: a recovery after `cleanup.ended`).
        The drive records its end (`cleanup.ended`), not a `node.completed`: its output is
        nobody's, and the state keeps no entry for it."""
        cleanup = self.cleanup
        state = ex.state
        if cleanup is None or state.cleaned:
            return None
        path = (CLEANUP,)
        body = cleanup.body
        prev = state.ending_data.get("output") if state.ending == "completed" else None
        frame = ex.take_frame(path)
        if frame is None:
            ex.room -= frame_bytes(path)
            ex.emit(ev.NODE_STARTED, path, _STARTED)
            child, first = 0, prev
        else:
            child = frame.child
            first = resume_prev(body, child, frame.child_outputs, prev)
        result = yield from run_body(ex, body, path, child, first, ROOT)
        return unwrap(result)

    def _inline(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        """Run as a container of one body: its frame (kind "flow") holds its position and the
        outputs of its elements, so a resume fast-forwards into it as into a Branch's side."""
        body = self.body
        frame = ex.take_frame(path)
        if frame is None:
            ex.room -= frame_bytes(path)  # checked with what the container adds next
            ex.emit(ev.NODE_STARTED, path, _STARTED)
            child, first = 0, prev
        else:
            child = frame.child
            first = resume_prev(body, child, frame.child_outputs, prev)
        paths = body_paths(self._paths, body, path)
        # Its frame's fields, for its steps to record their outputs in (see Step._call): the
        # innermost frame while they run (the state's own: in no lane), and changed in place.
        if ex.lanes:
            top: Any = True
        elif frame is None:  # just opened: the innermost
            top = ex.fields["container_stack"][-1].__dict__
        else:  # the live state's own (see Execution.restoring), whatever is still above it
            top = frame.__dict__
        result = yield from run_body(ex, body, path, child, first, scope, paths, top)
        if type(result) is Route:  # a Graph routes by it (see graph.py)
            out = result.value
            completed(ex, path, out, ex.size_of(out), {"action": result.action})
            return result
        completed(ex, path, result, ex.size_of(result))
        return result

    def __repr__(self) -> str:
        return f"Flow({self.name!r}, version={self.version!r})"


def _seconds(deadline: Any) -> float | None:
    """A Flow's `deadline=` as seconds; InvalidFlow unless a positive number or timedelta."""
    if deadline is None:
        return None
    if isinstance(deadline, timedelta):
        seconds = deadline.total_seconds()
    elif isinstance(deadline, int | float) and not isinstance(deadline, bool):
        seconds = float(deadline)
    else:
        msg = f"Flow deadline= must be seconds (a number) or a timedelta (got {deadline!r})"
        raise InvalidFlow(msg)
    if not math.isfinite(seconds) or seconds <= 0:
        msg = f"Flow deadline= must be positive and finite (got {deadline!r})"
        raise InvalidFlow(msg)
    return seconds
