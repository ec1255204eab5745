"""ForEach: run a body once per item, one at a time or up to `concurrency` at once.

Iteration and resume are written once, for both: opening the container (`_start`), starting
an iteration (`_begin`), resuming one from its frame (`element.resume_body`), completing one
(`_complete`) and gathering the output (`_gather`). Only the scheduling differs:
`_run_sequential` loops over the iterations in place, `_run_concurrent` hands them to the
multiplexer (containers/concurrent.py) as lanes.

The sequential case is not the multiplexer with a bound of 1, although it could be: that costs
two thirds more instructions per item (a body generator and a lane per iteration, the lanes'
bookkeeping in the state; `benchmarks/instructions.py foreach`, measured before issue 28's
in-place item path: 72,000 -> 120,000), and it
would change what a sequential ForEach records (a frame without lanes; its wait is the
session's own).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from time import monotonic
from typing import Any

from tarry.engine.bounds import frame_bytes, list_header
from tarry.engine.containers._callables import evaluate
from tarry.engine.containers.concurrent import STOP, Lane, check_concurrency, lanes_of, multiplex
from tarry.engine.context import Outputs, Scope
from tarry.engine.elements.body import as_body
from tarry.engine.elements.element import (
    Detour,
    Element,
    Route,
    Signal,
    check_name,
    resume_body,
    run_body,
    unwrap,
)
from tarry.engine.errors import InvalidFlow, NotSerializable, SnapshotError
from tarry.engine.execution import Execution, items_of, result_sink
from tarry.engine.failure import admit, check_gathered, completed, fail
from tarry.engine.signals import Checkpoint
from tarry.engine.state import events as ev
from tarry.engine.state.records import ContainerFrame

_ITEM_STARTED = ev.ITEM_STARTED  # see events.ITEM_STARTED
_new = object.__new__
_ITERATION_COMPLETED = ev.ITERATION_COMPLETED


class ForEach(Element):
    """Run `body` once per item; the output is the list of each iteration's output.

    `items` is a list, the name of an earlier output (str), or `fn(ctx) -> iterable` evaluated
    once when the container starts. The items are stored once, out of line, and read back by
    index on resume, so a paused ForEach costs the same at item 10 as at item 9,000.

    `concurrency` (default 1: one iteration at a time) keeps up to that many iterations in
    flight, or any number with None: their async steps overlap on one event loop, their sync
    steps run on a pool of at most `concurrency` threads, an iteration that waits lets the
    others go on (each wait gets its own token), and the output is still in item order. See
    containers/concurrent.py.
    """

    kind = "foreach"

    def __init__(
        self,
        name: str,
        items: list[Any] | str | Callable[..., Iterable[Any]],
        body: Any,
        *,
        concurrency: int | None = 1,
    ):
        self.name = check_name(name, "ForEach")
        self.concurrency = check_concurrency(concurrency, f"ForEach {name!r}")
        if not (isinstance(items, list | tuple | str) or callable(items)):
            msg = f"ForEach {name!r}: items must be a list, an output name or a callable (got {items!r})"
            raise InvalidFlow(msg)
        self.items = items
        self.body = as_body(body, name)

    def _bodies(self) -> Iterable[tuple[str, tuple[Element, ...]]]:
        return (("body", self.body),)

    def _start(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, list[Any]]:
        """Resolve the items, open the container's frame and store the items (once, out of
        line); the items."""
        source = self.items
        if isinstance(source, str):
            try:
                value = Outputs(ex, path).lookup(source)
            except KeyError:
                exc = InvalidFlow(f"ForEach {self.name!r}: no completed output named {source!r}")
                raise fail(ex, path, exc) from None
        elif callable(source):
            value = yield from evaluate(ex, path, source, prev, scope)
        else:
            value = source
        try:
            iterator = iter(value)
        except TypeError:
            what = f"{type(value).__name__} {value!r}"[:200]
            exc = InvalidFlow(f"ForEach {self.name!r}: the items must be iterable (got {what})")
            raise fail(ex, path, exc) from None
        try:
            items: list[Any] = list(iterator)
        except TypeError as exc:
            raise fail(ex, path, exc) from exc
        try:
            # The session's own copy: the list (or the flow's definition) may change later.
            items, _ = ex.take(items, "/".join(map(str, path)) + ".items")
        except NotSerializable as exc:
            raise fail(ex, path, exc) from exc
        ex.room -= frame_bytes(path)  # checked with what the container adds next
        data: dict[str, Any] = {"kind": "foreach", "size": len(items)}
        if self.concurrency != 1:  # the frame holds a lane per iteration (see the reducer)
            data["concurrency"] = self.concurrency
        ex.emit(ev.NODE_STARTED, path, data)
        ex.ledger.put_items(path, items)
        return items

    def _describe(self) -> tuple[Any, ...]:
        described = super()._describe()
        # A sequential ForEach keeps the fingerprint it always had.
        return (
            described if self.concurrency == 1 else described + (("concurrency", self.concurrency),)
        )

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        # Not a generator itself: the generator of the iterations is returned as it is (its
        # callers `yield from` it at once), a level less to enter, and at a pause to close.
        frame = ex.take_frame(path)
        if frame is None:
            return self._fresh(ex, path, prev, scope)
        # Resumed: the items are read by index from the store.
        size, start = frame.size or 0, frame.iteration
        if self.concurrency == 1:
            return self._run_sequential(ex, path, frame, None, size, start)
        return self._run_concurrent(ex, path, frame, None, size, start)

    def _fresh(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        """The container's run from its start: its items resolved, then its iterations."""
        items = yield from self._start(ex, path, prev, scope)
        if self.concurrency == 1:
            return (yield from self._run_sequential(ex, path, None, items, len(items), 0))
        return (yield from self._run_concurrent(ex, path, None, items, len(items), 0))

    def _run_sequential(
        self,
        ex: Execution,
        path: tuple[Any, ...],
        frame: ContainerFrame | None,
        items: list[Any] | None,
        size: int,
        start: int,
    ) -> Generator[Signal, Any, list[Any]]:
        """The iterations from `start` on, one after the other."""
        body = self.body
        # The iteration in progress when the run stopped, if any: it goes on where it was.
        resumed = frame if frame is not None and frame.started else None
        # A body of one sync step is called directly (see run_body).
        single = body[0] if len(body) == 1 and body[0].direct else None
        results: list[Any] = []
        # The encoded size of the results gathered by this run: each was measured when it was
        # checked, so bounding the output costs an addition per iteration, never a re-encoding.
        gathered = 0
        limit = ex.bounds.value
        # A body of one sync step in a sequential ForEach that nobody watches event by event
        # (no subscriber, no concurrent container around it): the iteration's events are
        # recorded in place, each folded by the reducer's own per-item function (the
        # ForEach's frame is the state's innermost one). Events, state and results are those
        # of the general way below, event for event.
        fast = single is not None and not ex.lanes and not ex.pooled and ex.listener is None
        key = (single.name,) if single is not None else ()
        name = single.name if single is not None else None
        fields = ex.fields
        # The ForEach's frame's fields (the live state's own, changed in place): the innermost
        # frame while an item of the fast path runs. Restored, the frame found on resume.
        top: Any = None
        if fast:
            top = (frame if frame is not None else fields["container_stack"][-1]).__dict__
        put_result = result_sink(ex.ledger)
        for index in range(start, size):
            if resumed is not None:
                ipath = path + (index,)
                item = _stored(ex, path, ex.ledger.item, index)
                sc = Scope(item, index, index)
                out = yield from resume_body(ex, body, ipath, resumed, item, sc)
                resumed = None
            elif fast:
                # ex.checkpoint(path + (index,)), inlined: a call less per item, and the
                # iteration's path made only if the driver is asked.
                if (ex.watch or len(ex.rows) >= ex.flush_at or monotonic() >= ex.due) and ex.stop(
                    path + (index,)
                ):
                    yield Checkpoint(path + (index,))
                item = (
                    items[index] if items is not None else _stored(ex, path, ex.ledger.item, index)
                )
                # _begin, inlined.
                seq = fields["last_seq"] = fields["last_seq"] + 1
                at = ex.at
                if at is None:
                    at = ex.at = ex.ns()
                data = {"index": index, "item": item}
                # The reducer's _iteration_started of a sequential container, inlined (the frame is
                # the state's innermost, its fields `top`).
                top["iteration"] = index
                top["child"] = 0
                top["started"] = True
                if top["child_outputs"]:
                    top["child_outputs"] = {}
                ex.rows.append((seq, _ITEM_STARTED, at, path, data))
                ex.items = True
                cpath = path + (index, name)
                # ex.checkpoint(cpath), inlined, without its clock read: the iteration's
                # checkpoint read it a moment ago (a tick due since is asked at the next one).
                if (ex.watch or len(ex.rows) >= ex.flush_at) and ex.stop(cpath):
                    yield Checkpoint(cpath)
                # Scope(item, index, index), its __init__ inlined (see Step._call's ctx).
                sc = _new(Scope)
                sc.item = item
                sc.index = sc.iteration = index
                sc.view = None
                # Not folded into the frame: the iteration's completion, folded right after it
                # with nothing between (no user code, no subscriber), leaves it as both would.
                out = single._call(ex, cpath, item, sc, False)  # type: ignore[union-attr]
                if type(out) is Detour:
                    out = yield from single._detour(ex, cpath, item, sc, out)  # type: ignore[union-attr]
                # _complete, inlined.
                if type(out) is Route:
                    out = out.value
                n = ex.out_size if out is ex.out_value else ex.size_of(out)
                data = {"index": index, "output": out}
                if n <= ex.room:
                    ex.room -= n
                else:
                    if not top["child"]:  # fold the step's completion first: a failure here
                        top["child_outputs"][name] = out  # leaves the state the fold's, and a
                        top["child"] = 1  # resume completes the item without running it again
                    admit(ex, _ITERATION_COMPLETED, path, data, n)
                seq = fields["last_seq"] = fields["last_seq"] + 1
                at = ex.at
                if at is None:
                    at = ex.at = ex.ns()
                # The reducer's _iteration_completed, inlined likewise.
                top["iteration"] = index + 1
                top["completed_iterations"] += 1
                top["child"] = 0
                top["started"] = False
                top["last_output"] = out
                if top["child_outputs"]:
                    top["child_outputs"] = {}
                ex.rows.append((seq, _ITERATION_COMPLETED, at, path, data))
                put_result((path, index, out))
                results.append(out)
                gathered += n
                if gathered > limit:  # already too large: no use running the rest
                    check_gathered(ex, path, gathered, f" (the results of items {start}..{index})")
                continue
            else:
                ipath = path + (index,)
                # ex.checkpoint(ipath), inlined: a call less per item.
                if (ex.watch or len(ex.rows) >= ex.flush_at or monotonic() >= ex.due) and ex.stop(
                    ipath
                ):
                    yield Checkpoint(ipath)
                item = _begin(ex, path, items, index)
                if single is not None and not ex.pooled:
                    # run_body of a body of one sync step, inlined: no generator per item.
                    cpath = ipath + key
                    if (
                        ex.watch or len(ex.rows) >= ex.flush_at or monotonic() >= ex.due
                    ) and ex.stop(cpath):
                        yield Checkpoint(cpath)
                    sc = Scope(item, index, index)
                    out = single._call(ex, cpath, item, sc)
                    if type(out) is Detour:
                        out = yield from single._detour(ex, cpath, item, sc, out)
                else:
                    out = yield from run_body(ex, body, ipath, 0, item, Scope(item, index, index))
            out, n = _complete(ex, path, index, out)
            results.append(out)
            gathered += n
            if gathered > limit:  # already too large: no use running the rest
                check_gathered(ex, path, gathered, f" (the results of items {start}..{index})")
        return _gather(ex, path, start, results, gathered)

    def _run_concurrent(
        self,
        ex: Execution,
        path: tuple[Any, ...],
        frame: ContainerFrame | None,
        items: list[Any] | None,
        size: int,
        start: int,
    ) -> Generator[Signal, Any, list[Any]]:
        """The iterations up to `concurrency` at once, through the multiplexer; the output is
        in item order. The frame holds a lane per iteration in flight or waiting."""
        body = self.body
        next_index = start
        results: dict[int, Any] = {}
        gathered = 0
        limit = ex.bounds.value

        def begin() -> Lane | object | None:
            nonlocal next_index
            index = next_index
            if index >= size:
                return None
            ipath = path + (index,)
            if ex.checkpoint(ipath):
                return STOP
            item = _begin(ex, path, items, index)
            next_index += 1
            ex.room -= frame_bytes(ipath)  # the iteration's lane
            return index, run_body(ex, body, ipath, 0, item, Scope(item, index, index))

        def done(index: int, result: Any) -> None:
            nonlocal gathered
            out, n = _complete(ex, path, index, result)
            results[index] = out
            gathered += n
            if gathered > limit:
                check_gathered(ex, path, gathered, f" (the results of {len(results)} items)")

        restored: list[Lane] = []
        waiting = 0
        if frame is not None:
            going, waiting = lanes_of(frame)
            try:  # read at once: a resume_many may restore thousands of branches
                found = items_of(ex.ledger, path, [index for index, _ in going]) if going else {}
            except SnapshotError as exc:
                raise fail(ex, path, exc) from exc
            for index, lane in going:
                item = found[index]
                sc = Scope(item, index, index)
                restored.append((index, resume_body(ex, body, path + (index,), lane, item, sc)))
        yield from multiplex(ex, path, self.concurrency, begin, done, restored, waiting)
        if len(results) == size:
            return _gather(ex, path, 0, [results[i] for i in range(size)], gathered)
        return _gather(ex, path, size, [], 0)  # some completed in an earlier drive


def _begin(ex: Execution, path: tuple[Any, ...], items: list[Any] | None, index: int) -> Any:
    """Start iteration `index` of the ForEach at `path`; its item: from `items`, or read by
    index from the store when the container was resumed."""
    item = items[index] if items is not None else _stored(ex, path, ex.ledger.item, index)
    ex.emit(ev.ITERATION_STARTED, path, {"index": index, "item": item})
    return item


def _complete(ex: Execution, path: tuple[Any, ...], index: int, result: Any) -> tuple[Any, int]:
    """Record that iteration `index` completed with `result`, and store its output out of line;
    the output and its encoded size (known from the check that took it: no re-encoding)."""
    out = unwrap(result)
    n = ex.out_size if out is ex.out_value else ex.size_of(out)
    data = {"index": index, "output": out}
    if n <= ex.room:  # admit(), inlined: kept in the frame (or the lane) until the next one
        ex.room -= n
    else:
        admit(ex, ev.ITERATION_COMPLETED, path, data, n)
    ex.emit(ev.ITERATION_COMPLETED, path, data)
    ex.ledger.put_result(path, index, out)
    return out, n


def _gather(
    ex: Execution, path: tuple[Any, ...], stored: int, results: list[Any], size: int
) -> list[Any]:
    """Complete the ForEach at `path`; its output: the results of its first `stored` items,
    read from the store, then `results` (this run's, `size` bytes encoded). Gathered once, when
    the container completes: never on the per-iteration path."""
    if stored:
        earlier = _stored(ex, path, ex.ledger.results, stored)
        size += ex.size_of(earlier) - list_header(len(earlier))
        results = earlier + results
    n = size + list_header(len(results))
    check_gathered(ex, path, n)
    completed(ex, path, results, n)
    return results


def _stored(ex: Execution, path: tuple[Any, ...], read: Callable[..., Any], index: int) -> Any:
    """What `read` (the ledger's item or results) finds in the store for the ForEach at `path`.
    One that is missing (a store that lost values, a snapshot counting more than was stored)
    fails the ForEach with SnapshotError: the session ends failed, resumable and cancellable,
    rather than crashing the process that resumed it."""
    try:
        return read(path, index)
    except SnapshotError as exc:
        raise fail(ex, path, exc) from exc
