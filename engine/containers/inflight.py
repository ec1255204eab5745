"""`ForEach(concurrency=N)`: up to N iterations in flight, through the multiplexer."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from tarry.engine.bounds import frame_bytes, list_header
from tarry.engine.containers.concurrent import STOP, Lane, multiplex
from tarry.engine.context import Scope
from tarry.engine.element import Signal, resume_prev, run_body, unwrap
from tarry.engine.errors import InvalidFlow, SnapshotError
from tarry.engine.execution import Execution, items_of
from tarry.engine.failure import admit, check_gathered, completed, fail
from tarry.engine.state import events as ev

if TYPE_CHECKING:
    from tarry.engine.containers.foreach import ForEach


def check_concurrency(value: Any, owner: str) -> int | None:
    """`concurrency` as given: a positive int, or None for no bound; else InvalidFlow."""
    if value is None or (type(value) is int and value >= 1):
        return value
    msg = f"{owner}: concurrency must be an int >= 1 or None (got {value!r})"
    raise InvalidFlow(msg)


def run_concurrently(
    foreach: ForEach, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
) -> Generator[Signal, Any, Any]:
    """Run the ForEach's iterations up to `concurrency` at once; the output is in item order.
    The frame holds a lane per iteration in flight or waiting; results go out of line as each
    iteration completes and are gathered once, when the last one has."""
    body = foreach.body
    frame = ex.take_frame(path)
    items: list[Any] | None
    if frame is None:
        items = yield from foreach._resolve(ex, path, prev, scope)
        size = len(items)
        ex.room -= frame_bytes(path)
        data = {"kind": "foreach", "size": size, "concurrency": foreach.concurrency}
        ex.emit(ev.NODE_STARTED, path, data)
        ex.ledger.put_items(path, items)
        next_index = 0
    else:
        items, size, next_index = None, frame.size or 0, frame.iteration
    results: dict[int, Any] = {}
    gathered = [0]
    limit = ex.bounds.value

    def item_at(index: int) -> Any:
        if items is not None:
            return items[index]
        try:
            return ex.ledger.item(path, index)
        except SnapshotError as exc:
            raise fail(ex, path, exc) from exc

    def start() -> Lane | object | None:
        nonlocal next_index
        index = next_index
        if index >= size:
            return None
        ipath = path + (index,)
        if ex.checkpoint(ipath):
            return STOP
        item = item_at(index)
        next_index += 1
        ex.room -= frame_bytes(ipath)
        ex.emit(ev.ITERATION_STARTED, path, {"index": index, "item": item})
        return index, run_body(ex, body, ipath, 0, item, Scope(item, index, index))

    def done(index: int, result: Any) -> None:
        out = unwrap(result)
        n = ex.out_size if out is ex.out_value else ex.size_of(out)
        data = {"index": index, "output": out}
        admit(ex, ev.ITERATION_COMPLETED, path, data, n)
        ex.emit(ev.ITERATION_COMPLETED, path, data)
        ex.ledger.put_result(path, index, out)
        results[index] = out
        gathered[0] += n
        if gathered[0] > limit:
            check_gathered(ex, path, gathered[0], f" (the results of {len(results)} items)")

    restored: list[Lane] = []
    waiting: list[Any] = []
    if frame is not None:
        lanes = frame.lanes or {}
        resumed = [index for index, lane in lanes.items() if lane.pause is None]
        try:  # read at once: a resume_many may restore thousands of branches
            found = items_of(ex.ledger, path, resumed) if resumed else {}
        except SnapshotError as exc:
            raise fail(ex, path, exc) from exc
        for index, lane in lanes.items():
            if lane.pause is not None:
                waiting.append(index)
                continue
            item = found[index]
            first = resume_prev(body, lane.child, lane.child_outputs, item)
            gen = run_body(ex, body, path + (index,), lane.child, first, Scope(item, index, index))
            restored.append((index, gen))
    yield from multiplex(ex, path, foreach.concurrency, start, done, restored, waiting)
    if len(results) == size:
        output = [results[i] for i in range(size)]
        total = gathered[0]
    else:  # some completed in an earlier drive: gathered once, from the store
        try:
            output = ex.ledger.results(path, size)
        except SnapshotError as exc:
            raise fail(ex, path, exc) from exc
        total = ex.size_of(output) - list_header(size)
    n = total + list_header(size)
    check_gathered(ex, path, n)
    completed(ex, path, output, n)
    return output
