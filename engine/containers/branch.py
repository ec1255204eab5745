"""Branch: run one of two bodies."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any

from tarry.engine.bounds import frame_bytes
from tarry.engine.containers._callables import check_callable, evaluate
from tarry.engine.context import Context, Scope
from tarry.engine.elements.body import as_body
from tarry.engine.elements.element import Element, Signal, check_name, resume_prev, run_body, unwrap
from tarry.engine.errors import InvalidFlow
from tarry.engine.execution import Execution
from tarry.engine.failure import admit, completed
from tarry.engine.state import events as ev

_SKIPPED = {"reason": "branch_not_taken"}
_UNREACHABLE = {"reason": "upstream_unreachable"}


def skip(ex: Execution, path: tuple[Any, ...], side: tuple[Element, ...]) -> None:
    """Record `node.skipped` for every element of the side not taken: `"branch_not_taken"` for
    its top elements, `"upstream_unreachable"` for every step and container nested below them
    (in the order a run would have met them). A nested path has no iteration index (a ForEach
    body's step is `(..., "fe", "step")`): none of its iterations ever existed."""
    for element in side:
        where = path + (element.name,)
        ex.emit(ev.NODE_SKIPPED, where, _SKIPPED)
        _unreachable(ex, where, element)


def _unreachable(ex: Execution, path: tuple[Any, ...], element: Element) -> None:
    for label, body in element._bodies():
        base = path + (label,) if element.labelled else path  # a Parallel's branch name
        for child in body:
            where = base + (child.name,)
            ex.emit(ev.NODE_SKIPPED, where, _UNREACHABLE)
            _unreachable(ex, where, child)


class Branch(Element):
    """`when(ctx)` picks `then` (true) or `otherwise`; the other side's elements, and every
    element nested in them, are recorded as skipped (see `skip`). The output is the output of the side taken (`None` when it has no elements).

    A Branch is a container of one iteration whose item is the side taken ("then" or
    "otherwise"); the choice is kept in its frame (`selected`), so a resume never asks again.
    """

    kind = "branch"

    def __init__(
        self, name: str, when: Callable[[Context], Any], then: Any, otherwise: Any = None
    ) -> None:
        self.name = check_name(name, "Branch")
        self.when = check_callable(when, f"Branch {name!r}: when")
        self.then = as_body(then, name)
        self.otherwise = as_body(otherwise, name) if otherwise is not None else ()
        clash = {e.name for e in self.then} & {e.name for e in self.otherwise}
        if clash:
            msg = f"Branch {name!r}: names must be unique across both sides ({sorted(clash)!r})"
            raise InvalidFlow(msg)

    def _bodies(self) -> Iterable[tuple[str, tuple[Element, ...]]]:
        return (("then", self.then), ("otherwise", self.otherwise))

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        frame = ex.take_frame(path)
        if frame is None:
            taken = yield from evaluate(ex, path, self.when, prev, scope)
            side = "then" if taken else "otherwise"
            ex.room -= frame_bytes(path)  # checked with what the container adds next
            ex.emit(ev.NODE_STARTED, path, {"kind": "branch"})
            ex.emit(ev.ITERATION_STARTED, path, {"index": 0, "item": side})
            skip(ex, path, self.otherwise if side == "then" else self.then)
            child, first = 0, prev
        else:
            side = frame.selected
            child = frame.child
            body = self.then if side == "then" else self.otherwise
            first = resume_prev(body, child, frame.child_outputs, prev)
        body = self.then if side == "then" else self.otherwise
        out = unwrap((yield from run_body(ex, body, path, child, first, scope)))
        if not body:
            out = None
        size = ex.size_of(out)
        data = {"index": 0, "output": out}
        admit(ex, ev.ITERATION_COMPLETED, path, data, size)  # kept as the iteration's output
        ex.emit(ev.ITERATION_COMPLETED, path, data)
        completed(ex, path, out, size, {"selected": side})
        return out
