"""Parallel: run named bodies at once."""

from __future__ import annotations

from collections.abc import Generator, Iterable
from typing import Any

from tarry.engine.bounds import frame_bytes, list_header
from tarry.engine.containers.concurrent import STOP, Lane, check_concurrency, lanes_of, multiplex
from tarry.engine.context import Scope
from tarry.engine.elements.body import as_body
from tarry.engine.elements.element import Element, Signal, check_name, resume_body, run_body, unwrap
from tarry.engine.errors import InvalidFlow
from tarry.engine.execution import Execution
from tarry.engine.failure import admit, check_gathered, completed
from tarry.engine.state import events as ev


class Parallel(Element):
    """Run each body of `branches` (a dict name -> body) once, up to `concurrency` at once
    (`None`: all); the output is a dict branch name -> that branch's output, in the order of
    `branches`, whatever order they complete in.

    Each branch is a lane of its own (see containers/concurrent.py): its async steps overlap,
    its sync steps run on the driver's thread pool, and a branch that waits lets the others
    go on. Its elements' paths are `(..., parallel, branch, element)`.
    """

    kind = "parallel"
    labelled = True

    def __init__(
        self, name: str, branches: dict[str, Any], *, concurrency: int | None = None
    ) -> None:
        self.name = check_name(name, "Parallel")
        if not isinstance(branches, dict) or not branches:
            msg = f"Parallel {name!r}: branches must be a non-empty dict name -> body (got {branches!r})"
            raise InvalidFlow(msg)
        for key in branches:
            if not isinstance(key, str) or not key:
                msg = f"Parallel {name!r}: branch names must be non-empty str (got {key!r})"
                raise InvalidFlow(msg)
        self.branches = {key: as_body(body, f"{name}/{key}") for key, body in branches.items()}
        self.concurrency = check_concurrency(concurrency, f"Parallel {name!r}")

    def _bodies(self) -> Iterable[tuple[str, tuple[Element, ...]]]:
        return tuple(self.branches.items())

    def _describe(self) -> tuple[Any, ...]:
        return super()._describe() + (("concurrency", self.concurrency),)

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        frame = ex.take_frame(path)
        names = list(self.branches)
        if frame is None:
            ex.room -= frame_bytes(path)
            ex.emit(ev.NODE_STARTED, path, {"kind": "parallel", "size": len(names)})
            next_index = 0
            outputs: dict[str, Any] = {}
        else:
            next_index = frame.iteration
            outputs = dict(frame.child_outputs)
        gathered = [sum(ex.size_of(v) for v in outputs.values())] if outputs else [0]
        limit = ex.bounds.value

        def start() -> Lane | object | None:
            nonlocal next_index
            if next_index >= len(names):
                return None
            name = names[next_index]
            bpath = path + (name,)
            if ex.checkpoint(bpath):
                return STOP
            ex.room -= frame_bytes(bpath)
            ex.emit(ev.ITERATION_STARTED, path, {"index": next_index, "item": name})
            next_index += 1
            return name, run_body(ex, self.branches[name], bpath, 0, prev, scope)

        def done(name: str, result: Any) -> None:
            out = unwrap(result)
            n = ex.out_size if out is ex.out_value else ex.size_of(out)
            data = {"index": names.index(name), "item": name, "output": out}
            admit(ex, ev.ITERATION_COMPLETED, path, data, n + len(name))
            ex.emit(ev.ITERATION_COMPLETED, path, data)
            outputs[name] = out
            gathered[0] += n
            if gathered[0] > limit:
                check_gathered(ex, path, gathered[0], f" (the outputs of {len(outputs)} branches)")

        restored: list[Lane] = []
        waiting = 0
        if frame is not None:
            going, waiting = lanes_of(frame)
            for name, lane in going:
                body = self.branches[name]
                restored.append((name, resume_body(ex, body, path + (name,), lane, prev, scope)))
        yield from multiplex(ex, path, self.concurrency, start, done, restored, waiting)
        output = {name: outputs[name] for name in names}
        n = gathered[0] + list_header(len(output)) + sum(len(k) + 1 for k in output)
        check_gathered(ex, path, n)
        completed(ex, path, output, n)
        return output
