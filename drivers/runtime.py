"""Runtime: the one object users hold. A thin facade: each family of methods lives in its own
module (starting, resuming, timers, polling, recovery, control, inspecting), and they share
one `Core` (core.py) instead of importing this module back. The reading and retention methods
are in reads.py, its base class."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tarry.drivers.clock import Clock
from tarry.drivers.core import Core
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import AwaitableOrValue, refuse_in_loop, settle
from tarry.drivers.lazy_module import lazy_module
from tarry.drivers.limits import MAX_SNAPSHOT_BYTES, MAX_VALUE_BYTES
from tarry.drivers.logs import INFO, MAX_LOGS
from tarry.drivers.reads import Reads
from tarry.drivers.sessions.resuming import key_of, prepare
from tarry.drivers.sessions.starting import begin
from tarry.engine.flow import Flow
from tarry.engine.is_awaitable import is_awaitable
from tarry.engine.retry import Retry
from tarry.snapshots.store import SessionStore

if TYPE_CHECKING:
    from tarry.drivers.rounds import delivering, polling, recovery, timers
    from tarry.drivers.sessions import batch, control
else:
    # The families a plain run or resume never calls load when first called, so that
    # `import tarry` and a process that only resumes a token do not pay for them.
    batch = lazy_module("tarry.drivers.sessions.batch")
    control = lazy_module("tarry.drivers.sessions.control")
    delivering = lazy_module("tarry.drivers.rounds.delivering")
    polling = lazy_module("tarry.drivers.rounds.polling")
    recovery = lazy_module("tarry.drivers.rounds.recovery")
    timers = lazy_module("tarry.drivers.rounds.timers")


class Runtime(Reads):
    """Runs flows over one store. Safe to share between threads.

    `run`/`resume` return an `Outcome` for an all-sync flow and an awaitable as soon as an async
    step is met; `run_sync`/`resume_sync` always return an Outcome; `arun`/`aresume` always
    return an awaitable. They are typed `-> Outcome`, so that sync code reads `out.paused`;
    async code that may meet sync flows awaits `arun`/`aresume`.

    Keywords: `store` (a SessionStore or a URL; in memory by default), `flows` (registered for
    resume, timers and recovery; several versions of one flow may be given side by side, and
    each session continues with the one whose fingerprint started it), `clock`, `adapters` ({pause kind: adapter}), `durability`
    ("pause" or "step"), `secret` (str or bytes of 16+ bytes, or a list for rotation: signs
    tokens so that a store's contents cannot resume its sessions; a store once used with a
    secret is refused without one: `SecretRequired`), `lease` (seconds),
    `retry` (the default Retry), `max_value_bytes` (largest value one event carries, a
    container's gathered output too), `max_snapshot_bytes` (largest state a session holds,
    checked at every node), `retention` (a timedelta: workers prune sessions that ended longer
    ago, see `prune`), `log_level` (the least level of the `logging` records its steps emit
    that a session keeps, a number or a name; INFO) and `max_logs` (how many of them a session
    keeps, its last ones; 1000, 0 to capture none). See docs/guarantees.md, docs/monitor.md.
    """

    def __init__(
        self,
        store: None | str | SessionStore = None,
        *,
        flows: Iterable[Flow] = (),
        clock: Clock | None = None,
        adapters: dict[str, Any] | None = None,
        durability: str = "pause",
        secret: str | bytes | None = None,
        lease: float = 30.0,
        retry: Retry | None = None,
        max_value_bytes: int = MAX_VALUE_BYTES,
        max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES,
        retention: timedelta | None = None,
        log_level: int | str = INFO,
        max_logs: int = MAX_LOGS,
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
            retention=retention,
            log_level=log_level,
            max_logs=max_logs,
        )

    def register(self, flow: Flow) -> Flow:
        """Make `flow` available to `resume`, timers and recovery, which find the flow of a
        session by its name and fingerprint: several versions of one flow may be registered
        side by side. Registering a flow again changes nothing."""
        return self._core.flows.register(flow)

    # -- starting ------------------------------------------------------------------------------
    def run(
        self,
        flow: Flow,
        input: Any = None,
        *,
        session_id: str | None = None,
        meta: dict[str, Any] | None = None,
        durability: str | None = None,
        actor: str | None = None,
    ) -> Outcome:
        """Start a session of `flow`. Sync for sync flows; an awaitable of the Outcome once an
        async step is met (typed as the Outcome, see Outcome; `arun` always awaits).

        `meta`: a small dict kept with the session record (not in its state or events), e.g.
        where the flow is defined (`{"flow_ref": "module:name"}`, as the CLI records it).
        `durability`: the session's own ("pause" or "step"; the Runtime's when None), kept by
        every resume, recovery and worker that continues it. `actor`: who starts it (a login
        name, an OS user), recorded in its `run.started` event; so on every control method.
        """
        # Typed as the Outcome (see the class): an awaitable of it once an async step is met.
        return begin(  # type: ignore[return-value]
            self._core,
            flow,
            input,
            session_id,
            meta,
            durability=durability,
            asynchronous=False,
            actor=actor,
            resume=prepare,
        )

    def run_sync(
        self,
        flow: Flow,
        input: Any = None,
        *,
        session_id: str | None = None,
        meta: dict[str, Any] | None = None,
        durability: str | None = None,
        actor: str | None = None,
    ) -> Outcome:
        """Like `run`, but async steps are driven on a private event loop. Never awaitable."""
        refuse_in_loop("run_sync", "arun")
        return settle(
            self.run(
                flow, input, session_id=session_id, meta=meta, durability=durability, actor=actor
            )
        )

    async def arun(
        self,
        flow: Flow,
        input: Any = None,
        *,
        session_id: str | None = None,
        meta: dict[str, Any] | None = None,
        durability: str | None = None,
        actor: str | None = None,
    ) -> Outcome:
        """Like `run`, always as an awaitable; back-offs wait with `asyncio.sleep`."""
        result = begin(
            self._core,
            flow,
            input,
            session_id,
            meta,
            durability=durability,
            asynchronous=True,
            actor=actor,
            resume=prepare,
        )
        if is_awaitable(result):
            result = await result
        return result  # type: ignore[return-value]

    # -- resuming ------------------------------------------------------------------------------
    def resume(
        self,
        token: str | None,
        value: Any = None,
        *,
        flow: Flow | None = None,
        allow_changed: bool = False,
        meta: dict[str, Any] | None = None,
        actor: str | None = None,
    ) -> Outcome:
        """Continue a paused (or failed) session where it stopped. Every check happens before
        the token is consumed: a rejected resume leaves the session exactly as it was. Sync and
        typed like `run`. `token` is an Outcome's (`out.token`); None, like any string that is
        no token, raises UnknownToken.

        It continues with the flow whose fingerprint started it (`flow`, or the registered
        version): else `FlowMismatch`, or `UnknownFlow` if no flow has its name.
        `allow_changed=True` accepts a changed flow of its name (never another) that still has
        what the session entered, completed or waits at; the session then records that flow's
        fingerprint and version. `meta`: keys to set in the session's meta, e.g. the
        `{"flow_ref": "module:name"}` of a repaired flow. A snapshot that cannot be continued
        raises `SnapshotError` with the token unused."""
        key = key_of(self._core, token)
        return prepare(  # type: ignore[return-value]  # typed as the Outcome: see run
            self._core, key, flow, allow_changed, value=value, meta=meta, actor=actor
        )

    def resume_sync(
        self,
        token: str | None,
        value: Any = None,
        *,
        flow: Flow | None = None,
        allow_changed: bool = False,
        meta: dict[str, Any] | None = None,
        actor: str | None = None,
    ) -> Outcome:
        """Like `resume`, but async steps are driven on a private event loop. Never awaitable."""
        refuse_in_loop("resume_sync", "aresume")
        return settle(
            self.resume(
                token, value, flow=flow, allow_changed=allow_changed, meta=meta, actor=actor
            )
        )

    async def aresume(
        self,
        token: str | None,
        value: Any = None,
        *,
        flow: Flow | None = None,
        allow_changed: bool = False,
        meta: dict[str, Any] | None = None,
        actor: str | None = None,
    ) -> Outcome:
        """Like `resume`, always as an awaitable."""
        key = key_of(self._core, token)
        result = prepare(
            self._core,
            key,
            flow,
            allow_changed,
            value=value,
            asynchronous=True,
            meta=meta,
            actor=actor,
        )
        if is_awaitable(result):
            result = await result
        return result  # type: ignore[return-value]

    def resume_many(self, values: dict[str, Any]) -> AwaitableOrValue[list[Outcome]]:
        """Resume many waits at once: `{token: value}` for waiting branches of one or several
        sessions. One drive and one store write per session, not one per token; the tokens are
        used in one transaction. If any token is unknown, used or given twice, or its value is
        refused, raises that error (`UnknownToken`, `TokenAlreadyUsed`, `InvalidResumeValue`,
        naming the token) and uses none. Returns one Outcome per session touched, in the order
        of their first token; sync unless an async step is met (like `run`)."""
        return batch.resume_many(self._core, values)

    async def aresume_many(self, values: dict[str, Any]) -> list[Outcome]:
        """Like `resume_many`, always as an awaitable."""
        result = batch.resume_many(self._core, values, asynchronous=True)
        return result if isinstance(result, list) else await result

    def skip(
        self,
        token: str | None,
        output: Any = None,
        *,
        flow: Flow | None = None,
        meta: dict[str, Any] | None = None,
        actor: str | None = None,
    ) -> Outcome:
        """On a failed session: record the failed element as completed with `output`, go on.
        A `flow` given may be a changed one (as with `allow_changed=True`); `meta` as for
        `resume`. Sync and typed like `run`."""
        key = key_of(self._core, token)
        return prepare(  # type: ignore[return-value]  # typed as the Outcome: see run
            self._core,
            key,
            flow,
            flow is not None,
            skip=True,
            value=output,
            meta=meta,
            actor=actor,
        )

    # -- keyed delivery ------------------------------------------------------------------------
    def deliver(self, key: str, value: Any = None, *, actor: str | None = None) -> list[Outcome]:
        """Resume every wait on `key` (`Wait(key=...)`) in any session with `value`, one outcome
        per session; if none waits, keep it as mail for the first Wait that reaches `key` and
        return []. A bad key or value, or one a wait refuses: typed error, nothing changed."""
        return delivering.deliver(self._core, key, value, actor)

    def deliver_many(
        self, deliveries: Mapping[str, Any], *, actor: str | None = None
    ) -> list[Outcome]:
        """`deliver` for each `{key: value}`, all checked before any is used; one resume per
        session touched. The outcomes of the sessions resumed, in the order of their keys."""
        return delivering.deliver_many(self._core, deliveries, actor).outcomes

    def discard(self, key: str) -> bool:
        """Drop the mail kept for `key`; whether there was any."""
        return delivering.discard(self._core, key)

    # -- timers, adapters, recovery ------------------------------------------------------------
    def resume_due(self, *, limit: int = 100) -> list[Outcome]:
        """Resume every session whose time has come (by `clock`): a `Sleep` or a retry back-off
        whose `wake_at` passed, and a Gate or Wait whose timeout passed (which then does what
        its `on_timeout` says). Returns the outcomes of the sessions it resumed.

        Due sessions are claimed from the store a page at a time, so concurrent callers take
        different ones; each is resumed by using its token, so of two callers (threads,
        processes, machines) only one resumes it. A decision that used the token first wins,
        and then the timer does nothing. Each session is handled inside its own error
        boundary: one whose flow is unknown here or changed, or whose snapshot cannot be
        read, is logged once and left as it was (its token unused); one whose resume raised
        after its token was used is failed with an error typed by the exception (its outcome
        is returned). Either way the call goes on with the others; sessions set aside do not
        count towards `limit`. Async steps run on a private event loop.
        """
        return timers.resume_due(self._core, limit)

    def poll(self, *, limit: int = 100) -> list[Outcome]:
        """`resume_due()`, then ask the adapters about every waiting request of their pause
        kinds: a callable adapter once per request (`adapter(ResumeRequest(...))`: a value or
        `NOT_READY`), a bulk adapter once with all of them (`adapter.many(requests)`: {token or
        key: value}). Ready requests are resumed with their values; the outcomes are returned.

        Writes nothing for a request that is not ready (no claim, no lease): of two pollers,
        the token's single use decides which one resumes a ready request. An adapter that
        raises, or a value the waiting element refuses, is logged, and the round goes on. Each
        session is handled inside its own error boundary, as in `resume_due`.
        """
        return polling.poll(self._core, limit)

    def recover(self) -> list[Outcome]:
        """Continue the sessions whose worker died mid-run (their lease expired), from their
        last written point: with durability="step", the last completed step (the step in
        flight runs again, with the same `ctx.idempotency_key`); with "pause", the last pause.

        Each recovered session is claimed through the store first, so two processes calling
        `recover()` never continue the same session. A session continues only with the flow
        whose fingerprint it runs with (the one that started it, or the changed one a
        `resume(..., allow_changed=True)` gave it), checked exactly as `resume` checks it. Each
        is handled inside its own error boundary: one that cannot be recovered here (its flow
        version not registered, its snapshot corrupt or holding a position its flow does not
        have) is logged once and left as it is, its lease not taken, for a Runtime that can;
        one whose recovery raised after the run went on is failed with a typed error. Async
        steps are driven on a private loop.
        """
        return recovery.recover(self._core)

    # -- control -------------------------------------------------------------------------------
    def abort(self, session_id: str, *, resumable: bool = True, actor: str | None = None) -> None:
        """Stop a running session at its next checkpoint (before the next iteration or child),
        whichever process runs it: this one sees the request at once, another reads it from
        the store within a second (or after the step in flight, whichever is later).

        Thread-safe. It then pauses with kind "system", reason "aborted" — or is cancelled
        when `resumable=False`. A paused or failed session is cancelled by
        `abort(..., resumable=False)`; with `resumable=True` it is already stopped: no-op.
        UnknownSession for an id no session has. `actor` goes into the stop's event when this
        process runs the session (a request stored for another process carries none).
        """
        control.abort(self._core, session_id, resumable, actor)

    def cancel(self, token_or_session_id: str, *, actor: str | None = None) -> Outcome:
        """End a paused or failed session as cancelled (its outcome: an error of type
        "cancelled"). A running session (by id) is asked to stop as cancelled at its next
        checkpoint, in whichever process runs it; the outcome returned then has status
        "running" and `meta["stop_requested"] == "cancel"`."""
        return control.cancel(self._core, token_or_session_id, actor)
