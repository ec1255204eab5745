"""Where the sync steps of concurrent lanes run: the Runtime's executor (`Runtime(executor=...)`,
or a thread pool of `Runtime(max_threads=...)` threads), and how a step is sent to one that
runs it in another process.

The engine asks for a lane's sync step to start (`Offload`); `Executors.start` answers with a
`concurrent.futures.Future` of its result, which the pump waits for beside the lane's siblings.
The executor only computes: the step's events, its retries and the container's concurrency
bound stay with the drive, in this process, whatever the executor.

- A `ThreadPoolExecutor` (the default, or one given) runs the step here, with its live `ctx`.
- Any other executor is taken to run it elsewhere (a `ProcessPoolExecutor`, a Dask cluster's
  `Client.get_executor()`): tarry pickles the step's function with a `RemoteContext` (see
  engine/remote_context.py) itself, before submitting, so that a step that cannot be sent (a
  lambda, a closure) fails at once with `NotSendable`, never retried, whichever executor it is;
  the executor carries bytes there and back. In the worker, the step's result, or its
  exception with its traceback's text, and what it did to its `ctx` are pickled back the same
  way. Its `logging` records stay in the worker's process.

  Calls to such an executor that says how many workers it has (a ProcessPoolExecutor's
  `_max_workers`) go several to a submission (`Batch`): a drive holds the calls its
  lanes start until it next waits, then sends them in a few submissions (`run_chunk`), each
  carrying about 1/(2 x workers) of the calls in flight (at most `CHUNK_MAX`), so that every
  worker has one to run and one queued. A submission's round trip (the executor's queues,
  its threads' wake-ups, pickling, the drive's wake-up) is then paid once for its calls, and a
  result waits at most for the few calls beside it. Each call keeps its own outcome: one that
  raises fails alone (and is retried alone); only the executor's own failure of a submission
  (a broken pool, a cancel) is every one of its calls'.
"""

from __future__ import annotations

import sys
import threading
from contextvars import copy_context
from functools import partial
from typing import Any

from tarry.engine.context import Interrupted
from tarry.engine.describe import describe
from tarry.engine.errors import InvalidArgument, NotSendable
from tarry.engine.observed import WATCHER, call_in_lane
from tarry.engine.signals import Offload

#: Threads of a Runtime's default pool (as many as asyncio's default executor may have). A
#: container never has more calls on it than its `concurrency`; the pool bounds what all the
#: Runtime's containers run at once. Steps that wait on I/O by the hundred are better written
#: `async def`: they then all overlap on the event loop, with no thread each.
MAX_THREADS = 32

#: The most calls one submission carries to an executor of other processes (see `Batch`).
CHUNK_MAX = 16

#: Submissions in flight per worker of such an executor: one it runs, one queued behind it
#: (see `Batch.flush`).
SPREAD = 2

# What the worker sends back (`run_sent`): the step returned, raised or interrupted; or the
# worker could not load the step it was sent (its function is not found there).
_RETURNED, _RAISED, _INTERRUPTED, _UNLOADED = 0, 1, 2, 3


class Executors:
    """One Runtime's executor for the sync steps of concurrent lanes. Its default thread pool
    is started at the first such step and ends with the Runtime (its idle threads exit when the
    pool is collected); an executor given is the caller's, never shut down by tarry."""

    __slots__ = ("max_threads", "executor", "remote", "workers", "_lock", "_names")

    def __init__(self, max_threads: int | None = None, executor: Any = None) -> None:
        if max_threads is not None and executor is not None:
            msg = (
                "give Runtime either max_threads= (the size of its own thread pool) or "
                f"executor= (one of yours), not both (got max_threads={max_threads!r} and "
                f"executor={executor!r})"
            )
            raise InvalidArgument(msg)
        if max_threads is not None and (type(max_threads) is not int or max_threads < 1):
            msg = f"max_threads must be an int >= 1 (got {describe(max_threads)})"
            raise InvalidArgument(msg)
        #: The default pool's size.
        self.max_threads = MAX_THREADS if max_threads is None else max_threads
        #: The executor steps run on: the one given, or the default pool once started.
        self.executor = executor
        #: Whether it runs steps in other processes (anything but a thread pool).
        self.remote = False
        if executor is not None:
            self.remote = not _is_thread_pool(executor)
        #: How many calls the executor runs at once (its `_max_workers`, as a
        #: ProcessPoolExecutor's says), which sizes a `Batch`'s submissions; None when it does
        #: not say (a Dask cluster may have far more workers than this machine has CPUs):
        #: its calls then go one to a submission.
        self.workers = _workers(executor) if self.remote else None
        self._lock = threading.Lock()
        #: What to pickle for a step's function, by function (see `_sendable`).
        self._names: dict[Any, Any] = {}

    def starter(self) -> Any:
        """How one drive starts its sync steps: `start`, or, on an executor of other processes
        that says how many workers it has, a `Batch` of the drive's own (called as `start` is;
        the pump calls its `flush` before it waits)."""
        return Batch(self.executor, self.workers, self.pack) if self.workers else self.start

    def start(self, offload: Offload) -> Any:
        """Start a lane's sync step on the executor; a `concurrent.futures.Future` of its
        result (already failed with `NotSendable` when it cannot be sent)."""
        executor = self.executor
        if executor is None:
            executor = self._pool()
        if self.remote:
            return self._send(executor, offload)
        if WATCHER.get() is None:
            return executor.submit(timed, offload.fn, offload.ctx)
        # Logs are captured: the call runs in a copy of the drive's context, and says whose it is.
        return executor.submit(
            copy_context().run, call_in_lane, partial(timed, offload.fn), offload.ctx
        )

    def _pool(self) -> Any:
        with self._lock:  # two drives of one Runtime may start their first lanes at once
            if self.executor is None:
                from concurrent.futures import ThreadPoolExecutor  # only concurrent lanes need it

                self.executor = ThreadPoolExecutor(
                    max_workers=self.max_threads, thread_name_prefix="tarry"
                )
            return self.executor

    def _send(self, executor: Any, offload: Offload) -> Any:
        """Pickle the step and its `RemoteContext` and submit them to `executor`; a future
        that gets the step's result, or its exception, once its effects are on its `ctx`."""
        call = self.pack(offload)
        if type(call) is tuple:
            _submit(executor, [call])
            return call[1]
        return call

    def pack(self, offload: Offload) -> Any:
        """The step pickled with its `RemoteContext`, as (blob, its future, its ctx); or, when
        it cannot be sent, a future already failed with `NotSendable`."""
        import pickle
        from concurrent.futures import Future

        from tarry.engine.remote_context import remote_context

        ctx = offload.ctx
        answer: Future[Any] = Future()
        try:
            fn = self._sendable(offload.fn)
            blob = pickle.dumps((fn, remote_context(ctx)), pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            answer.set_exception(_not_sendable(ctx.path, offload.fn, exc))
            return answer
        return (blob, answer, ctx)

    def _sendable(self, fn: Any) -> Any:
        """What to pickle for `fn`: `fn`, or the step that a module-level `@step` made of it
        (pickle finds a function by its module and name, and there it finds the Step)."""
        try:
            found = self._names.get(fn, _MISSING)
        except TypeError:  # an unhashable callable object: pickled as it is
            return fn
        if found is _MISSING:
            found = fn
            owner = _by_name(fn)
            if owner is not fn and getattr(owner, "fn", None) is fn:
                found = _Named(fn.__module__, fn.__qualname__)
            self._names[fn] = found
        return found


_MISSING = object()


class Batch:
    """One drive's calls to an executor of other processes: each is pickled when its lane
    starts it (one that cannot be sent fails at once) and held until the drive next waits
    (`flush`), which sends what it holds several to a submission. Its futures are the
    calls' own: each gets its call's result or exception."""

    __slots__ = ("executor", "workers", "pack", "held", "flight")

    def __init__(self, executor: Any, workers: int, pack: Any) -> None:
        self.executor = executor
        self.workers = workers
        #: `Executors.pack`: a call pickled, or its future failed with `NotSendable`.
        self.pack = pack
        #: The calls started since the last flush: (blob, future, ctx).
        self.held: list[tuple[bytes, Any, Any]] = []
        #: The futures of the calls sent and not yet finished, as of the last flush (at most
        #: as many as the drive's lanes).
        self.flight: list[Any] = []

    def __call__(self, offload: Offload) -> Any:
        call = self.pack(offload)
        if type(call) is not tuple:
            return call  # failed already: nothing to send
        self.held.append(call)
        return call[1]

    def flush(self) -> None:
        """Send the calls held: in submissions of about 1/(2 x workers) of the calls in
        flight (this flush's included), at most CHUNK_MAX each, as even as they divide."""
        held = self.held
        if not held:
            return
        self.held = []
        flight = [answer for answer in self.flight if not answer.done()]
        ready = len(held)
        size = min(CHUNK_MAX, -(-(len(flight) + ready) // (SPREAD * self.workers)))
        parts = -(-ready // size)
        executor = self.executor
        for k in range(parts):
            _submit(executor, held[k * ready // parts : (k + 1) * ready // parts])
        flight.extend(call[1] for call in held)
        self.flight = flight


def _submit(executor: Any, calls: list[tuple[bytes, Any, Any]]) -> None:
    """One submission of `calls` to `executor`; its failure to take them is theirs."""
    try:
        if len(calls) == 1:
            blob, answer, ctx = calls[0]
            sent = executor.submit(run_sent, blob)
            sent.add_done_callback(lambda done: _received(done, answer, ctx))
        else:
            sent = executor.submit(run_chunk, [call[0] for call in calls])
            sent.add_done_callback(lambda done: _received_chunk(done, calls))
    except Exception as exc:  # a pool shut down or broken: each call fails with its error
        _fail_all(calls, exc)


def _workers(executor: Any) -> int | None:
    """How many calls `executor` runs at once: its `_max_workers` (a ProcessPoolExecutor's,
    loky's); None when it does not say."""
    workers = getattr(executor, "_max_workers", None)
    if type(workers) is int and workers >= 1:
        return workers
    return None


def timed(fn: Any, ctx: Any) -> Any:
    """`fn(ctx)` on a pool thread, noting on `ctx` when it began (the Runtime's clock, in ns):
    the step's completion records it (`began`), and stats time the step from there, not from
    its `node.started`, which a lane emits before the call may wait for a free thread."""
    ctx._began = ctx._ex.ns()
    return fn(ctx)


def _is_thread_pool(executor: Any) -> bool:
    """Whether `executor` runs steps in this process: a `ThreadPoolExecutor` (or a subclass).
    Anything else must be a `concurrent.futures.Executor`, and is taken to run them elsewhere."""
    from concurrent.futures import Executor, ThreadPoolExecutor  # only when one is given

    if isinstance(executor, ThreadPoolExecutor):
        return True
    if not isinstance(executor, Executor):
        msg = (
            f"executor must be a concurrent.futures.Executor, e.g. a ProcessPoolExecutor or a "
            f"Dask client's get_executor() (got {describe(executor)})"
        )
        raise InvalidArgument(msg)
    return False


def _by_name(fn: Any) -> Any:
    """What `fn`'s module holds under `fn`'s qualified name (None if nothing)."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    qualname = getattr(fn, "__qualname__", None)
    if module is None or not isinstance(qualname, str) or "<" in qualname:
        return None
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


class _Named:
    """A module-level step, pickled by its module and name: the worker imports it from there."""

    __slots__ = ("module", "qualname")

    def __init__(self, module: str, qualname: str) -> None:
        self.module = module
        self.qualname = qualname

    def __reduce__(self) -> Any:
        return (_named, (self.module, self.qualname))


def _named(module: str, qualname: str) -> Any:
    """In the worker: what `module` holds under `qualname` (the Step, called as its function)."""
    import importlib

    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _not_sendable(path: tuple[Any, ...], fn: Any, exc: Exception) -> NotSendable:
    """Why a step could not be pickled: its function, or what its `ctx` holds."""
    import pickle

    why = f"({type(exc).__name__}: {exc})"
    try:
        pickle.dumps(fn)
    except Exception:
        name = getattr(fn, "__qualname__", None) or repr(fn)
        return NotSendable(
            path,
            f"its function {name!r}",
            f"does not pickle {why}; make it a function defined at the top level of a "
            f"module, or run the step on a thread pool (Runtime(executor=None))",
        )
    return NotSendable(path, "its ctx", f"does not pickle {why}")


def run_sent(blob: bytes) -> bytes:
    """In the executor's process: run the step pickled in `blob` with its `RemoteContext`;
    what happened, pickled (see `_received`)."""
    import pickle

    try:
        fn, ctx = pickle.loads(blob)
    except Exception as exc:  # e.g. a function of __main__ defined after the worker started
        return pickle.dumps((_UNLOADED, f"{type(exc).__name__}: {exc}"), pickle.HIGHEST_PROTOCOL)
    try:
        result = fn(ctx)
    except Interrupted as signal:
        reply: tuple[Any, ...] = (
            _INTERRUPTED,
            (signal.kind, signal.reason, signal.payload),
            ctx.effects(),
        )
    except Exception as exc:
        reply = (_RAISED, exc, _traceback(exc), ctx.effects())
    else:
        reply = (_RETURNED, result, ctx.effects())
    try:
        return pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        kind = reply[0]
        if kind == _RAISED:  # the exception itself does not pickle: its text does
            error = reply[1]
            substitute = RemoteError(
                f"{type(error).__qualname__}: {error} (the exception itself could not be "
                f"sent back: {type(exc).__name__}: {exc})"
            )
            reply = (_RAISED, substitute, reply[2], reply[3])
        else:
            what = "its output" if kind == _RETURNED else "its interrupt's payload"
            reply = (
                _RAISED,
                NotSendable(ctx.path, what, f"does not pickle ({type(exc).__name__}: {exc})"),
                "",
                {},
            )
        return pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)


def run_chunk(blobs: list[bytes]) -> list[bytes]:
    """In the executor's process: `run_sent` of each blob, in turn; their replies. A call
    that raises past `run_sent` (a BaseException) is that call's outcome only, as the
    executor would have sent it back for a call of its own."""
    replies = []
    for blob in blobs:
        try:
            replies.append(run_sent(blob))
        except BaseException as exc:  # noqa: BLE001 - the call's outcome, sent back
            replies.append(_raised_reply(exc))
    return replies


def _raised_reply(exc: BaseException) -> bytes:
    """A reply that the call raised `exc` (its text when it does not pickle)."""
    import pickle

    try:
        return pickle.dumps((_RAISED, exc, _traceback(exc), {}), pickle.HIGHEST_PROTOCOL)
    except Exception as why:
        substitute = RemoteError(
            f"{type(exc).__qualname__}: {exc} (the exception itself could not be sent back: "
            f"{type(why).__name__}: {why})"
        )
        return pickle.dumps((_RAISED, substitute, _traceback(exc), {}), pickle.HIGHEST_PROTOCOL)


def _traceback(exc: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(exc))


def _received(done: Any, answer: Any, ctx: Any) -> None:
    """The step's reply arrived (or the executor failed it): apply what it did to its live
    `ctx` and settle `answer` with its result or exception. Never raises: it runs as a
    future's callback, whose errors would be logged and lost, leaving `answer` unsettled."""
    try:
        error = done.exception()
        if error is not None:  # the executor's own failure (a broken pool, a cancel)
            answer.set_exception(error)
            return
        _settle(done.result(), answer, ctx)
    except BaseException as exc:  # noqa: BLE001 - any failure here is the step's
        if not answer.done():
            answer.set_exception(exc)


def _received_chunk(done: Any, calls: list[tuple[bytes, Any, Any]]) -> None:
    """A submission of several calls came back: settle each call's future with its own reply;
    the executor's failure of the submission (a broken pool, a cancel) is each call's. Never
    raises (see `_received`)."""
    try:
        error = done.exception()
        if error is None:
            replies = done.result()
    except BaseException as exc:  # noqa: BLE001 - a cancelled submission raises here
        error = exc
    if error is not None:
        _fail_all(calls, error)
        return
    for reply, (_, answer, ctx) in zip(replies, calls, strict=True):
        try:
            _settle(reply, answer, ctx)
        except BaseException as exc:  # noqa: BLE001 - any failure here is the step's
            if not answer.done():
                answer.set_exception(exc)


def _fail_all(calls: list[tuple[bytes, Any, Any]], error: BaseException) -> None:
    """Each call's future fails with `error` (a copy each but the first: each step raises its
    own, whose traceback is that step's)."""
    import copy

    for k, (_, answer, _) in enumerate(calls):
        mine = error
        if k:
            try:
                mine = copy.copy(error)
            except Exception:  # noqa: BLE001 - an exception that does not copy is shared
                mine = error
        if not answer.done():
            answer.set_exception(mine)


def _settle(sent: bytes, answer: Any, ctx: Any) -> None:
    """Apply the worker's reply `sent` to the call's live `ctx`; settle `answer` with it."""
    import pickle

    from tarry.engine.remote_context import apply_effects

    reply = pickle.loads(sent)
    kind = reply[0]
    if kind == _UNLOADED:
        answer.set_exception(
            NotSendable(
                ctx.path,
                "its function",
                f"could not be loaded in the process that runs it ({reply[1]}); define it at "
                f"the top level of a module that process can import (a function of __main__ "
                f"defined after the pool's workers started is not there)",
            )
        )
        return
    apply_effects(ctx, reply[-1])
    if kind == _RETURNED:
        answer.set_result(reply[1])
    elif kind == _INTERRUPTED:
        answer.set_exception(Interrupted(*reply[1]))
    else:
        exc = reply[1]
        if reply[2]:  # the worker's traceback, as the cause: kept in the step's error
            exc.__cause__ = RemoteTraceback(reply[2])
        answer.set_exception(exc)


class RemoteTraceback(Exception):  # noqa: N818 - shown as the cause, as concurrent.futures does
    """The traceback of a step's exception in the process that ran it."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(text)

    def __str__(self) -> str:
        return f'\n"""\n{self.text}"""'


class RemoteError(Exception):
    """A step's exception that could not be pickled back from the process that ran it: its
    type and message, as text."""
