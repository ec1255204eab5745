"""Steps: user callables, sync or async, wrapped as generators."""

from __future__ import annotations

from collections.abc import Callable, Generator
from datetime import timedelta
from typing import Any, overload

from tarry.engine.bounds import ENTRY_BYTES, INLINE
from tarry.engine.context import Context, CopyingContext, Interrupted, Scope
from tarry.engine.elements.element import Detour, Element, Route, Signal, check_name
from tarry.engine.errors import InvalidFlow, NotSerializable
from tarry.engine.execution import Execution
from tarry.engine.failure import admit, fail, hold
from tarry.engine.is_awaitable import is_awaitable
from tarry.engine.retry import Retry
from tarry.engine.signals import Await, Backoff, Offload, Pause, Select, new_pause
from tarry.engine.state import events as ev
from tarry.engine.state.events import event_of
from tarry.engine.state.reducer import step_output
from tarry.engine.values import IMMUTABLE

_STARTED = ev.STEP_STARTED_DATA
_NODE_STARTED = ev.NODE_STARTED
_new = object.__new__
_NODE_COMPLETED = ev.NODE_COMPLETED
# Outputs of these types are never awaitable: the common case skips the attribute lookup.
_PLAIN = frozenset({type(None), bool, int, float, str, bytes, list, dict, tuple})


class Step(Element):
    """A callable `fn(ctx) -> output` with options. Calling the step calls `fn`."""

    kind = "step"

    def __init__(
        self,
        fn: Callable[[Context], Any],
        name: str | None = None,
        *,
        retry: Retry | None = None,
        timeout: float | None = None,
    ) -> None:
        if not callable(fn):
            msg = f"a step must wrap a callable (got {fn!r})"
            raise InvalidFlow(msg)
        self.fn = fn
        self.name = check_name(name if name is not None else getattr(fn, "__name__", None), "step")
        if retry is not None and not isinstance(retry, Retry):
            msg = f"step retry= must be a tarry.Retry (got {retry!r})"
            raise InvalidFlow(msg)
        self.retry = retry
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            msg = f"step timeout must be a positive number of seconds (got {timeout!r})"
            raise InvalidFlow(msg)
        self.timeout = timeout
        #: An `async def` (or a callable object whose `__call__` is one): called in place even
        #: in a concurrent lane, and awaited; a sync step of a lane runs on the pool.
        self.is_async = _is_async(fn)
        #: What an output's entry takes in the state besides the output (see bounds.py).
        self._entry = ENTRY_BYTES + len(self.name)
        self.direct = not self.is_async

    def __call__(self, ctx: Context) -> Any:
        return self.fn(ctx)

    def _call(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope, fold: Any = True
    ) -> Any:
        """The step's first attempt, called in place (a body's common case, see run_body): its
        result, or a Detour when the call raised, interrupted or returned an awaitable.

        `fold`: how a plain completion (no route, no `ctx.state` or metric, in line) records
        the output in the state, as `reducer.step_output` would: True, by calling it; the
        fields of the innermost frame (a nested Flow's, handed by `run_body`, which knows it):
        in them, without looking for them; False (a sequential ForEach's item, see
        foreach.py): not in the innermost frame, which stays as it is (`child` 0, no child
        outputs), as the caller folds the iteration's completion at once, which leaves the
        frame as both folds would. A completion through the reducer (`_complete`, `_record`)
        records it in the frame as usual: the frame's `child` then says so."""
        # ex.step_started(path, _STARTED), inlined.
        fields = ex.fields
        seq = fields["last_seq"] = fields["last_seq"] + 1
        at = ex.at
        if at is None:
            at = ex.at = ex.ns()
        rows = ex.rows
        rows.append((seq, _NODE_STARTED, at, path, _STARTED))
        listener = ex.listener
        if listener is not None:
            listener(event_of(rows[-1], ex.session_id))
            ex.at = None
        # Failed attempts so far: non-zero when a back-off paused the session and it resumed.
        lanes = ex.lanes
        attempt = (ex.scope(path).retries if lanes else fields["retries"]) + 1
        # Context(ex, path, prev, scope, attempt), its __init__ inlined: calling a class with
        # a Python __init__ goes through slot_tp_init, about 800 instructions more per step
        # than setting the same slots here (callgrind). Context.__init__ sets the same fields.
        ctx = _new(Context if type(prev) in IMMUTABLE else CopyingContext)
        ctx._ex = ex
        ctx.path = path
        ctx.prev = prev
        ctx._scope = scope
        ctx.attempt = attempt
        ctx._state = None
        ctx._metrics = None
        ctx._interrupts = 0
        try:
            result = self.fn(ctx)
        except (Exception, Interrupted) as exc:
            return Detour(ctx, attempt, None, exc)
        kind = type(result)
        if kind not in _PLAIN:
            if is_awaitable(result):
                return Detour(ctx, attempt, result, None)
            if kind is Route:
                return self._complete(ex, path, ctx, result)
        if lanes or ctx._state is not None or ctx._metrics:
            return self._complete(ex, path, ctx, result)
        # `_complete` of a plain output (no route, no ctx.state or metric, no concurrent
        # container), inlined: the completion of most steps.
        try:
            output, size = ex.take(result, (path, "output"))
        except NotSerializable as exc:
            raise fail(ex, path, exc) from exc
        total = size + self._entry
        if total > ex.room or (size > INLINE and len(path) == 1):  # to measure, or to hold
            ex.at = None
            return self._record(ex, path, {"output": output}, output, size, total, None)
        ex.room -= total
        ex.out_value = output
        ex.out_size = size
        data = {"output": output}
        # ex.emit(NODE_COMPLETED, path, data), inlined; the step ran: the clock is read again.
        seq = fields["last_seq"] = fields["last_seq"] + 1
        at = ex.at = ex.ns()
        if fold is True:
            step_output(fields, seq, path, data)
        else:  # step_output's changes, the frame's (when given) found without a look-up
            if fold is not False:
                fold["child_outputs"][path[-1]] = output
                fold["child"] += 1
            if fields["resume_values"]:
                fields["resume_values"] = ()
            if fields["retries"]:
                fields["retries"] = 0
        rows.append((seq, _NODE_COMPLETED, at, path, data))
        if listener is not None:
            listener(event_of(rows[-1], ex.session_id))
            ex.at = None
        return output

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        ex.step_started(path, _STARTED)
        attempt = (ex.scope(path) if ex.lanes else ex.state).retries + 1
        return (yield from self._attempts(ex, path, prev, scope, attempt, None))

    def _detour(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope, detour: Detour
    ) -> Generator[Signal, Any, Any]:
        # The attempts' own generator, not one that delegates to it: a level less for every
        # send, throw and close of a step that waits (its pause and its resume).
        return self._attempts(ex, path, prev, scope, detour.attempt, detour)

    def _attempts(
        self,
        ex: Execution,
        path: tuple[Any, ...],
        prev: Any,
        scope: Scope,
        attempt: int,
        detour: Detour | None,
    ) -> Generator[Signal, Any, Any]:
        """The step's attempts from `attempt` on (the first one begun by `_call` when
        `detour` is given), until one completes; its result."""
        make = Context if type(prev) in IMMUTABLE else CopyingContext  # see CopyingContext
        while True:
            try:
                if detour is not None:  # the attempt `_call` made in place
                    ctx, result, error = detour.ctx, detour.result, detour.exc
                    # The body's frame holds the detour: no cycle through the error either.
                    detour.exc = detour.result = None
                    detour = None
                    if error is not None:
                        try:
                            raise error
                        finally:  # no cycle: this frame -> the error -> its traceback
                            error = None
                else:
                    ctx = make(ex, path, prev, scope, attempt)
                    if ex.pooled and not self.is_async:
                        # A concurrent lane: the call starts on the driver's thread pool at
                        # once, and the lane waits for it beside its siblings' steps.
                        call = yield Offload(self.fn, ctx)
                        ((_, ok, result),) = yield Select((call,), (path,))
                        call = None  # it holds the outcome: no cycle through an error below
                        if not ok:
                            try:
                                raise result
                            finally:  # no cycle: this frame -> the error -> its traceback
                                result = None
                        if type(result) not in _PLAIN and is_awaitable(result):
                            _close(result)
                            msg = (
                                f"step {self.name!r} is sync but returned an awaitable from a "
                                f"pool thread of a concurrent container; make it `async def`"
                            )
                            raise InvalidFlow(msg)
                    else:
                        result = self.fn(ctx)
                if type(result) not in _PLAIN and is_awaitable(result):
                    try:
                        result = yield Await(result, self.timeout)
                    except TimeoutError as exc:
                        if self.timeout is None or exc.args:
                            raise  # the step's own, with its own message
                        # The driver's wait ran out; asyncio's TimeoutError says nothing.
                        msg = f"step {self.name!r} timed out after {self.timeout:g} seconds"
                        raise TimeoutError(msg) from exc
            except Interrupted as signal:
                ex.at = None  # user code ran: the next event reads the clock
                yield new_pause(signal.kind, signal.reason, path, signal.payload)
                msg = "a paused step was sent a value; resume builds a new run instead"
                raise RuntimeError(msg) from None
            except Exception as exc:
                ex.at = None
                # Raises the NodeFailure, or returns when the next attempt may begin.
                began = getattr(ctx, "_began", None) if ex.pooled else None
                yield from self._retry(ex, path, exc, attempt, ctx._metrics, began)
                attempt += 1
            else:
                break
        return self._complete(ex, path, ctx, result)

    def _complete(self, ex: Execution, path: tuple[Any, ...], ctx: Context, result: Any) -> Any:
        """Record the step's completion with `result`; its result."""
        ex.at = None  # the step ran: its completion reads the clock
        route = type(result) is Route
        # What the step completes with becomes the session's own (a private copy: the step may
        # keep and change what it returned), checked and measured on the way. Each value on
        # its own: most outputs are scalars, which the check passes at once.
        take = ex.take
        try:
            output, out_size = take(result.value if route else result, (path, "output"))
            data = {"output": output}
            size = out_size + self._entry
            if route or ctx._state is not None or ctx._metrics:  # ctx.state or ctx.metric used
                if route:
                    data["action"] = result.action
                ctx.effects(data)
                for key, value in data.items():
                    if key != "output":
                        data[key], n = take(value, (path, key))
                        size += n
        except NotSerializable as exc:
            raise fail(ex, path, exc, metrics=ctx._metrics) from exc
        if ex.pooled:
            # A lane's sync step ran on the pool: when its call began (it may have waited for a
            # thread after `node.started`), for stats to time the execution, not the queue.
            began = getattr(ctx, "_began", None)
            if began is not None:
                data["began"] = began
        return self._record(ex, path, data, output, out_size, size, ctx._metrics, route, result)

    def _record(
        self,
        ex: Execution,
        path: tuple[Any, ...],
        data: dict[str, Any],
        output: Any,
        out_size: int,
        size: int,
        metrics: dict[str, float] | None,
        route: bool = False,
        result: Any = None,
    ) -> Any:
        """Record the completion `data` (`size` bytes in the state; the output alone
        `out_size`): held out of line if large, admitted if the state must be measured."""
        held = out_size > INLINE and len(path) == 1  # a large top-level output
        if held:
            size -= hold(data, out_size)
        if size <= ex.room:
            ex.room -= size
        else:
            admit(ex, ev.NODE_COMPLETED, path, data, size, metrics)
        ex.out_value = output
        ex.out_size = out_size
        seq = ex.emit(ev.NODE_COMPLETED, path, data)
        if held:
            ex.held[seq] = output
        if route:
            return result if output is result.value else Route(result.action, output)
        return output

    def _retry(
        self,
        ex: Execution,
        path: tuple[Any, ...],
        exc: Exception,
        attempt: int,
        metrics: dict[str, float] | None,
        began: int | None = None,
    ) -> Generator[Signal, Any, None]:
        """After failed attempt number `attempt`: record it, and raise the NodeFailure that
        fails the run unless the retry policy gives it another attempt; then wait the back-off
        (in place, or paused until it is due) and return."""
        policy = self.retry if self.retry is not None else ex.retry
        if policy is None:
            raise fail(ex, path, exc, attempt=attempt, metrics=metrics, began=began) from exc
        matches = policy.retries(exc)
        if not matches or attempt >= policy.attempts:
            raise fail(
                ex, path, exc, attempt=attempt, metrics=metrics, retryable=matches, began=began
            ) from exc
        fail(ex, path, exc, attempt=attempt, metrics=metrics, retryable=True, began=began)
        delay = policy.delay(attempt)
        ex.emit(ev.NODE_RETRYING, path, {"attempt": attempt, "delay": delay})
        if delay >= policy.durable_after:
            # Too long to hold a process: pause until due (`Runtime.resume_due`).
            wake = ex.now() + timedelta(seconds=delay)
            payload = {"attempt": attempt + 1, "error": f"{type(exc).__name__}: {exc}"}
            yield Pause("system", "retry", path, payload, wake, None, awaits_value=False)
            msg = "a step paused for a back-off was sent a value; resume builds a new run"
            raise RuntimeError(msg) from None
        if delay > 0:
            yield Backoff(delay)
            ex.at = None  # the back-off took its time


def _is_async(fn: Any) -> bool:
    import inspect  # at flow definition only

    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - a callable object's own method
    return call is not None and inspect.iscoroutinefunction(call)


def _close(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if close is not None:
        close()  # a coroutine never awaited: no "never awaited" warning


@overload
def step(
    fn: Callable[[Context], Any],
    /,
    name: str | None = None,
    *,
    retry: Retry | None = None,
    timeout: float | None = None,
) -> Step: ...


@overload
def step(
    fn: None = None,
    /,
    name: str | None = None,
    *,
    retry: Retry | None = None,
    timeout: float | None = None,
) -> Callable[[Callable[[Context], Any]], Step]: ...


def step(
    fn: Callable[[Context], Any] | None = None,
    /,
    name: str | None = None,
    *,
    retry: Retry | None = None,
    timeout: float | None = None,
) -> Step | Callable[[Callable[[Context], Any]], Step]:
    """Make `fn` a step with options: `@step`, `@step()` or `@step(name=..., retry=..., timeout=...)`.
    Sync or `async def`; the Step is called as `fn` is (`step(fn)(ctx) == fn(ctx)`)."""
    if fn is not None:
        return Step(fn, name, retry=retry, timeout=timeout)

    def decorate(f: Callable[[Context], Any]) -> Step:
        return Step(f, name, retry=retry, timeout=timeout)

    return decorate
