"""Runtime: the one object users hold. A thin facade: each family of methods lives in its own
module (starting, resuming, timers, polling, recovery, control, inspecting), and they share
one `Core` (core.py) instead of importing this module back."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tarry.engine.events import Event
from tarry.engine.flow import Flow
from tarry.engine.retry import Retry
from tarry.snapshots.store import SessionStore

from . import control, inspecting, polling, recovery, timers
from .clock import Clock
from .core import Core, checked_adapters
from .limits import MAX_SNAPSHOT_BYTES, MAX_VALUE_BYTES
from .outcome import Outcome
from .pump import AwaitableOrValue
from .resuming import key_of, prepare
from .settle import is_awaitable, refuse_in_loop, settle
from .starting import begin
from .stats import Stats
from .tokens import Tokens
from .views import SessionSummary, SessionView


class Runtime:
    """Runs flows over one store. Safe to share between threads.

    `run`/`resume` return an `Outcome` for an all-sync flow and an awaitable as soon as an async
    step is met; `run_sync`/`resume_sync` always return an Outcome; `arun`/`aresume` always
    return an awaitable.

    Keywords: `store` (a SessionStore or a URL; in memory by default), `flows` (registered for
    resume and recovery), `clock`, `adapters` ({pause kind: callable}), `durability`
    ("pause" or "step"), `secret` (str or bytes of 16+ bytes, or a list for rotation: signs
    tokens so that a store's contents cannot resume its sessions), `lease` (seconds),
    `retry` (the default Retry), `max_value_bytes` (largest value one event carries, a
    container's gathered output too) and `max_snapshot_bytes` (largest state a session holds,
    checked at every node). See docs/guarantees.md.
    """

    def __init__(
        self,
        store: None | str | SessionStore = None,
        *,
        flows: Iterable[Flow] = (),
        clock: Clock | None = None,
        adapters: dict[str, Callable[..., Any]] | None = None,
        durability: str = "pause",
        secret: str | bytes | None = None,
        lease: float = 30.0,
        retry: Retry | None = None,
        max_value_bytes: int = MAX_VALUE_BYTES,
        max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES,
    ) -> None:
        self._core = Core(
            store,
            flows=flows,
            clock=clock,
            adapters=adapters,
            durability=durability,
            secret=secret,
            lease=lease,
            retry=retry,
            max_value_bytes=max_value_bytes,
            max_snapshot_bytes=max_snapshot_bytes,
        )

    # -- what it runs on -----------------------------------------------------------------------
    @property
    def store(self) -> SessionStore:
        return self._core.store

    @property
    def clock(self) -> Clock:
        return self._core.clock

    @property
    def tokens(self) -> Tokens:
        """Mints tokens and checks them (signed with `secret` when one is given)."""
        return self._core.tokens

    @property
    def durability(self) -> str:
        return self._core.durability

    @property
    def lease(self) -> float:
        """Seconds a running session's lease lasts; renewed at checkpoints."""
        return self._core.lease

    @property
    def owner(self) -> str:
        """This runtime's name on the leases it holds."""
        return self._core.owner

    @property
    def retry(self) -> Retry | None:
        """The retry policy of steps that have none of their own."""
        return self._core.retry

    @property
    def adapters(self) -> dict[str, Callable[..., Any]]:
        """{pause kind: adapter} that `poll()` asks."""
        return self._core.adapters

    @adapters.setter
    def adapters(self, adapters: dict[str, Callable[..., Any]]) -> None:
        self._core.adapters = checked_adapters(adapters)

    @property
    def max_value_bytes(self) -> int:
        return self._core.max_value_bytes

    @property
    def max_snapshot_bytes(self) -> int:
        return self._core.max_snapshot_bytes

    def register(self, flow: Flow) -> Flow:
        """Make `flow` available to `resume` by name."""
        return self._core.flows.register(flow)

    # -- starting ------------------------------------------------------------------------------
    def run(
        self,
        flow: Flow,
        input: Any = None,
        *,
        session_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> AwaitableOrValue[Outcome]:
        """Start a session of `flow`. Sync for sync flows; awaitable once an async step is met.

        `meta`: a small dict kept with the session record (not in its state or events), e.g.
        where the flow is defined (`{"flow_ref": "module:name"}`, as the CLI records it).
        """
        return begin(self._core, flow, input, session_id, meta, asynchronous=False)

    def run_sync(
        self,
        flow: Flow,
        input: Any = None,
        *,
        session_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Outcome:
        """Like `run`, but async steps are driven on a private event loop. Never awaitable."""
        refuse_in_loop("run_sync", "arun")
        return settle(self.run(flow, input, session_id=session_id, meta=meta))

    async def arun(
        self,
        flow: Flow,
        input: Any = None,
        *,
        session_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Outcome:
        """Like `run`, always as an awaitable; back-offs wait with `asyncio.sleep`."""
        result = begin(self._core, flow, input, session_id, meta, asynchronous=True)
        if is_awaitable(result):
            result = await result
        return result  # type: ignore[return-value]

    # -- resuming ------------------------------------------------------------------------------
    def resume(
        self,
        token: str,
        value: Any = None,
        *,
        flow: Flow | None = None,
        allow_changed: bool = False,
    ) -> AwaitableOrValue[Outcome]:
        """Continue a paused (or failed) session where it stopped. Every check happens before
        the token is consumed: a rejected resume leaves the session exactly as it was."""
        return prepare(self._core, key_of(self._core, token), flow, allow_changed, value=value)

    def resume_sync(
        self, token: str, value: Any = None, *, flow: Flow | None = None, allow_changed: bool = False
    ) -> Outcome:
        """Like `resume`, but async steps are driven on a private event loop. Never awaitable."""
        refuse_in_loop("resume_sync", "aresume")
        return settle(self.resume(token, value, flow=flow, allow_changed=allow_changed))

    async def aresume(
        self, token: str, value: Any = None, *, flow: Flow | None = None, allow_changed: bool = False
    ) -> Outcome:
        """Like `resume`, always as an awaitable."""
        key = key_of(self._core, token)
        result = prepare(self._core, key, flow, allow_changed, value=value, asynchronous=True)
        if is_awaitable(result):
            result = await result
        return result  # type: ignore[return-value]

    def skip(
        self, token: str, output: Any = None, *, flow: Flow | None = None
    ) -> AwaitableOrValue[Outcome]:
        """On a failed session: record the failed element as completed with `output`, go on."""
        key = key_of(self._core, token)
        return prepare(self._core, key, flow, flow is not None, skip=True, value=output)

    # -- timers, adapters, recovery ------------------------------------------------------------
    def resume_due(self, *, limit: int = 100) -> list[Outcome]:
        """Resume every session whose time has come (by `clock`): a `Sleep` or a retry back-off
        whose `wake_at` passed, and a Gate or Wait whose timeout passed (which then does what
        its `on_timeout` says). Returns the outcomes of the sessions it resumed.

        Each session is resumed by using its token, so of two callers (threads, processes,
        machines) only one resumes it; the other skips it. A decision that used the token
        first wins, and then the timer does nothing. Sessions of flows this Runtime does not
        know are left for a Runtime that does. Async steps run on a private event loop.
        """
        return timers.resume_due(self._core, limit)

    def poll(self, *, limit: int = 100) -> list[Outcome]:
        """`resume_due()`, then ask the adapters: for each paused session whose pause kind has
        an adapter, call `adapter(ResumeRequest(...))`; a value resumes the session with it,
        `NOT_READY` leaves it paused. Returns the outcomes of every session resumed.

        A session is claimed through the store before its adapter is asked, so two pollers
        never ask about (or resume) the same session at once. An adapter that raises, or
        returns a value the paused element refuses, is logged and the session stays paused.
        """
        return polling.poll(self._core, limit)

    def recover(self) -> list[Outcome]:
        """Continue the sessions whose worker died mid-run (their lease expired), from their
        last written point: with durability="step", the last completed step (the step in
        flight runs again, with the same `ctx.idempotency_key`); with "pause", the last pause.

        Each recovered session is claimed through the store first, so two processes calling
        `recover()` never continue the same session. Sessions of flows this Runtime does not
        know are left for a Runtime that does. Async steps are driven on a private loop.
        """
        return recovery.recover(self._core)

    # -- control -------------------------------------------------------------------------------
    def abort(self, session_id: str, *, resumable: bool = True) -> None:
        """Stop a running session at its next checkpoint (before the next iteration or child).

        Thread-safe. It then pauses with kind "system", reason "aborted" — or is cancelled
        when `resumable=False`. A paused or failed session is cancelled by
        `abort(..., resumable=False)`; with `resumable=True` it is already stopped: no-op.
        """
        control.abort(self._core, session_id, resumable)

    def cancel(self, token_or_session_id: str) -> Outcome:
        """End a paused or failed session as cancelled."""
        return control.cancel(self._core, token_or_session_id)

    # -- inspecting ----------------------------------------------------------------------------
    def session(self, session_id: str) -> SessionView:
        """A view of one stored session; UnknownSession if there is none."""
        return inspecting.session(self._core, session_id)

    def sessions(
        self,
        *,
        status: str | None = None,
        flow: str | Flow | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[SessionSummary]:
        """Sessions newest first, optionally filtered by status and flow (name or Flow)."""
        return inspecting.sessions(self._core, status, flow, limit, offset)

    def stats(self, *, flow: str | Flow | None = None) -> Stats:
        """Counts of sessions by status; per node (by name) executions, failures and mean
        duration; and the sums of every `ctx.metric` — over all sessions, or one flow's.

        Reads every session's events: a report, not something for a hot path.
        """
        return inspecting.stats(self._core, flow)

    def subscribe(
        self, callback: Callable[[Event], Any], *, session_id: str | None = None
    ) -> Callable[[], None]:
        """Call `callback(event)` for each new event (of one session, or all). Returns the
        function that unsubscribes. Runs already in progress keep the subscribers they
        started with; a callback that raises is logged and does not disturb the run."""
        return self._core.hub.subscribe(callback, session_id)
