"""ForEach: run a body once per item."""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from time import monotonic
from typing import Any

from tarry.engine.body import as_body
from tarry.engine.bounds import frame_bytes, list_header
from tarry.engine.containers._callables import evaluate
from tarry.engine.containers.inflight import check_concurrency, run_concurrently
from tarry.engine.context import Outputs, Scope
from tarry.engine.element import (
    Detour,
    Element,
    Signal,
    check_name,
    resume_prev,
    run_body,
    unwrap,
)
from tarry.engine.errors import InvalidFlow, NotSerializable, SnapshotError
from tarry.engine.execution import Execution
from tarry.engine.failure import admit, check_gathered, completed, fail
from tarry.engine.signals import Checkpoint
from tarry.engine.state import events as ev


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

    def _resolve(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, list[Any]]:
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
            items: list[Any] = list(value)
        except TypeError as exc:
            raise fail(ex, path, exc) from exc
        try:
            # The session's own copy: the list (or the flow's definition) may change later.
            items, _ = ex.take(items, "/".join(map(str, path)) + ".items")
        except NotSerializable as exc:
            raise fail(ex, path, exc) from exc
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
        if self.concurrency != 1:
            return (yield from run_concurrently(self, ex, path, prev, scope))
        frame = ex.take_frame(path)
        body = self.body
        items: list[Any] | None
        if frame is None:
            items = yield from self._resolve(ex, path, prev, scope)
            size = len(items)
            ex.room -= frame_bytes(path)  # checked with what the container adds next
            ex.emit(ev.NODE_STARTED, path, {"kind": "foreach", "size": size})
            ex.ledger.put_items(path, items)
            start = 0
        else:
            items, size, start = None, frame.size or 0, frame.iteration
        # A body of one sync step is called directly (see run_body).
        single = body[0] if len(body) == 1 and body[0].direct else None
        results: list[Any] = []
        # The encoded size of the results gathered by this run: each was measured when it was
        # checked, so bounding the output costs an addition per iteration, never a re-encoding.
        gathered = 0
        limit = ex.bounds.value
        for index in range(start, size):
            ipath = path + (index,)
            if frame is not None and frame.started:
                item = _stored(ex, path, ex.ledger.item, index)
                child = frame.child
                first = resume_prev(body, child, frame.child_outputs, item)
            else:
                # ex.checkpoint(ipath), inlined: a call less per item.
                if (ex.watch or len(ex.rows) >= ex.flush_at or monotonic() >= ex.due) and ex.stop(
                    ipath
                ):
                    yield Checkpoint(ipath)
                if items is not None:
                    item = items[index]
                else:  # resumed: read by index (a try costs nothing until it catches)
                    try:
                        item = ex.ledger.item(path, index)
                    except SnapshotError as exc:
                        raise fail(ex, path, exc) from exc
                ex.emit(ev.ITERATION_STARTED, path, {"index": index, "item": item})
                child, first = 0, item
            frame = None
            if child == 0 and single is not None and not ex.pooled:
                # run_body of a body of one sync step, inlined: no generator per item.
                cpath = ipath + (single.name,)
                if (ex.watch or len(ex.rows) >= ex.flush_at or monotonic() >= ex.due) and ex.stop(
                    cpath
                ):
                    yield Checkpoint(cpath)
                sc = Scope(item, index, index)
                out = single._call(ex, cpath, first, sc)
                if type(out) is Detour:
                    out = yield from single._detour(ex, cpath, first, sc, out)
            else:
                out = yield from run_body(ex, body, ipath, child, first, Scope(item, index, index))
            out = unwrap(out)
            n = ex.out_size if out is ex.out_value else ex.size_of(out)
            data = {"index": index, "output": out}
            if n <= ex.room:  # the frame keeps it as the last iteration's output
                ex.room -= n
            else:
                admit(ex, ev.ITERATION_COMPLETED, path, data, n)
            ex.emit(ev.ITERATION_COMPLETED, path, data)
            ex.ledger.put_result(path, index, out)
            results.append(out)
            gathered += n
            if gathered > limit:  # already too large: no use running the rest
                check_gathered(ex, path, gathered, f" (the results of items {start}..{index})")
        if start:
            # Gathered once, when the container completes: never on the per-iteration path.
            restored = _stored(ex, path, ex.ledger.results, start)
            gathered += ex.size_of(restored) - list_header(len(restored))
            results = restored + results
        n = gathered + list_header(len(results))
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
