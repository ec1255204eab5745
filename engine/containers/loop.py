"""Loop: run a body again until a condition holds."""

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
from tarry.engine.signals import Checkpoint
from tarry.engine.state import events as ev


class Loop(Element):
    """Run `body`, then `until(ctx)` (with `ctx.prev` = the iteration's output); repeat while it
    is false, at most `max_iterations` times. The output is the last iteration's output.

    Outputs of the body stay visible by name (`ctx.outputs`) in the next iteration, and the first
    element of an iteration gets the previous iteration's output as `ctx.prev`.
    """

    kind = "loop"

    def __init__(
        self, name: str, body: Any, *, until: Callable[[Context], Any], max_iterations: int
    ) -> None:
        self.name = check_name(name, "Loop")
        self.body = as_body(body, name)
        self.until = check_callable(until, f"Loop {name!r}: until")
        if (
            not isinstance(max_iterations, int)
            or isinstance(max_iterations, bool)
            or max_iterations < 1
        ):
            msg = f"Loop {name!r}: max_iterations must be an int >= 1 (got {max_iterations!r})"
            raise InvalidFlow(msg)
        self.max_iterations = max_iterations

    def _bodies(self) -> Iterable[tuple[str, tuple[Element, ...]]]:
        return (("body", self.body),)

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        frame = ex.take_frame(path)
        body = self.body
        if frame is None:
            ex.room -= frame_bytes(path)  # checked with what the container adds next
            ex.emit(ev.NODE_STARTED, path, {"kind": "loop"})
            index, last = 0, prev
        else:
            index = frame.iteration
            last = frame.last_output if frame.completed_iterations else prev
        while True:
            ipath = path + (index,)
            if frame is not None and frame.started:
                child = frame.child
                first = resume_prev(body, child, frame.child_outputs, last)
            else:
                if ex.checkpoint(ipath):
                    yield Checkpoint(ipath)
                ex.emit(ev.ITERATION_STARTED, path, {"index": index, "item": None})
                child, first = 0, last
            frame = None
            inner = Scope(scope.item, scope.index, index)
            last = unwrap((yield from run_body(ex, body, ipath, child, first, inner)))
            size = ex.size_of(last)
            data = {"index": index, "output": last}
            admit(ex, ev.ITERATION_COMPLETED, path, data, size)  # kept as the last output
            ex.emit(ev.ITERATION_COMPLETED, path, data)
            done = yield from evaluate(ex, path, self.until, last, inner)
            if done or index + 1 >= self.max_iterations:
                break
            index += 1
        completed(ex, path, last, size)
        return last
