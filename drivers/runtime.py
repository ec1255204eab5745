"""Runtime: the one object users hold. A thin facade: each family of methods lives in its own
module (starting, resuming, timers, polling, recovery, control, inspecting), and they share
one `Core` (core.py) instead of importing this module back. Its reading, retention and
settings methods delegate the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from tarry.drivers.clock import Clock
from tarry.drivers.core import Core, checked_adapters, checked_batches
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import AwaitableOrValue, refuse_in_loop, settle
from tarry.drivers.lazy_module import lazy_module
from tarry.drivers.limits import MAIL_TTL, MAX_SNAPSHOT_BYTES, MAX_VALUE_BYTES
from tarry.drivers.logs import INFO, MAX_LOGS
from tarry.drivers.registry import FlowRegistry
from tarry.drivers.sessions.resuming import key_of, prepare
from tarry.drivers.sessions.starting import begin
from tarry.drivers.tokens import Tokens
from tarry.engine.elements.flow import Flow
from tarry.engine.is_awaitable import is_awaitable
from tarry.engine.retry import Retry
from tarry.engine.state.events import Event
from tarry.snapshots.log_records import LogRecord
from tarry.snapshots.store import SessionStore

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from tarry.drivers.reading import inspecting, paging
    from tarry.drivers.reading.paging import SessionPage
    from tarry.drivers.reading.stats import Stats
    from tarry.drivers.reading.views import SessionSummary, SessionView
    from tarry.drivers.rounds import delivering, polling, pruning, recovery, timers
    from tarry.drivers.rounds.delivering import Delivery
    from tarry.drivers.sessions import batch, control, forking
    from tarry.snapshots.mail import MailInfo
else:
    # The families a plain run or resume never calls load when first called, so that
    # `import tarry` and a process that only resumes a token do not pay for them.
    batch = lazy_module("tarry.drivers.sessions.batch")
    control = lazy_module("tarry.drivers.sessions.control")
    forking = lazy_module("tarry.drivers.sessions.forking")
    delivering = lazy_module("tarry.drivers.rounds.delivering")
    polling = lazy_module("tarry.drivers.rounds.polling")
    recovery = lazy_module("tarry.drivers.rounds.recovery")
    timers = lazy_module("tarry.drivers.rounds.timers")
    inspecting = lazy_module("tarry.drivers.reading.inspecting")
    paging = lazy_module("tarry.drivers.reading.paging")
    pruning = lazy_module("tarry.drivers.rounds.pruning")


class Runtime:
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
    secret is refused without one: `SecretRequired`), `lease` (seconds a running session is presumed alive without a sign of life; 10),
    `retry` (the default Retry), `max_value_bytes` (largest value one event carries, a
    container's gathered output too), `max_snapshot_bytes` (largest state a session holds,
    checked at every node), `retention` (a timedelta: workers prune sessions that ended longer
    ago, see `prune`), `log_level` (the least level of the `logging` records its steps emit
    that a session keeps, a number or a name; INFO), `max_logs` (how many of them a session
    keeps, its last ones; 1000, 0 to capture none), `max_threads` (the size of the thread pool
    that the sync steps of concurrent lanes run on; 32) or `executor` (any
    `concurrent.futures.Executor` to run them on instead, e.g. a `ProcessPoolExecutor` or a Dask
    client's `get_executor()`; the caller's, never shut down by tarry), `batches` ({name: batch
    adapter}, e.g. `{"openai": tarry.batches.OpenAIBatch(client=openai.OpenAI())}`: what
    `BatchRequest(via=name)` is submitted through, see docs/batch.md), `tracing`
    (OpenTelemetry spans of its drives and steps: True for the global tracer provider, a
    tracer provider, False; None, the default, follows the `TARRY_TRACING` environment
    variable; docs/operations.md). See docs/guarantees.md,
    docs/monitor.md, docs/concepts.md ("Where sync steps run").
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
        lease: float = 10.0,
        retry: Retry | None = None,
        max_value_bytes: int = MAX_VALUE_BYTES,
        max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES,
        retention: timedelta | None = None,
        log_level: int | str = INFO,
        max_logs: int = MAX_LOGS,
        mail_ttl: timedelta = MAIL_TTL,
        max_threads: int | None = None,
        executor: Executor | None = None,
        batches: dict[str, Any] | None = None,
        tracing: Any = None,
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
            mail_ttl=mail_ttl,
            max_threads=max_threads,
            executor=executor,
            batches=batches,
        )
        # A child's end wakes its parent through the delivery road (loaded when first used).
        self._core.wake_parent = _wake_parent
        self._core.cancel_children = _cancel_children
        if tracing is not False:  # OpenTelemetry spans (docs/operations.md)
            from tarry.drivers.telemetry import tracing_of

            self._core.tracing = tracing_of(self._core, tracing)

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
        deadline: datetime | float | timedelta | None = None,
    ) -> Outcome:
        """Start a session of `flow`. Sync for sync flows; an awaitable of the Outcome once an
        async step is met (typed as the Outcome, see Outcome; `arun` always awaits).

        `meta`: a small dict kept with the session record (not in its state or events), e.g.
        where the flow is defined (`{"flow_ref": "module:name"}`, as the CLI records it).
        `durability`: the session's own ("pause" or "step"; the Runtime's when None), kept by
        every resume, recovery and worker that continues it. `actor`: who starts it (a login
        name, an OS user), recorded in its `run.started` event; so on every control method.
        `deadline`: a timezone-aware datetime, or seconds from now (a number or timedelta),
        by which the session must have ended, else it fails with "deadline_exceeded" (the
        flow's `deadline=` when None; one already past fails it at once).
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
            deadline=deadline,
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
        deadline: datetime | float | timedelta | None = None,
    ) -> Outcome:
        """Like `run`, but async steps are driven on a private event loop. Never awaitable."""
        refuse_in_loop("run_sync", "arun")
        return settle(
            self.run(
                flow,
                input,
                session_id=session_id,
                meta=meta,
                durability=durability,
                actor=actor,
                deadline=deadline,
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
        deadline: datetime | float | timedelta | None = None,
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
            deadline=deadline,
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

    # -- forking -------------------------------------------------------------------------------
    def fork(
        self,
        original: str,
        /,
        *,
        at_seq: int | None = None,
        at: tuple[Any, ...] | None = None,
        session_id: str | None = None,
        flow: Flow | None = None,
        meta: dict[str, Any] | None = None,
        actor: str | None = None,
    ) -> Outcome:
        """Start a new session from the state session `original` had after its event `at_seq`
        (or just before the element at path `at`, e.g. `("tickets", 3, "triage")`, first
        started), and run it from there: the steps completed by then are not run again, a step
        in flight then runs again, and a wait pending then is entered again (the new session
        pauses there with new tokens). The original is not changed. Sync and typed like `run`.

        The state is the fold of the original's stored events up to that point, so any
        session whose log is kept can be forked; the new session's log starts with a copy of
        them. It records where it came from: `rt.session(new).forked_from` (also in its meta
        and in its first event's data) is `{"session_id": original, "seq": at_seq}`.
        `session_id`: the new session's id (a new one when None; SessionExists if taken).
        `flow`: the flow it goes on with, by default the registered one whose fingerprint the
        original ran with then; a changed flow of its name is accepted if it fits where the
        session stood (else FlowMismatch). `meta`: keys to set in the new session's meta, a
        copy of the original's; `actor`: who forks, recorded in the fork's `run.resumed`
        event. UnknownSession for an unknown or pruned original;
        InvalidArgument (nothing written) for both or neither of `at_seq` and `at`, an
        `at_seq` below 1 or past the log, or a path `at` at which nothing ever started.
        See docs/fork.md."""
        return forking.fork(  # type: ignore[return-value]  # typed as the Outcome: see run
            self._core,
            original,
            at_seq=at_seq,
            at=at,
            new_id=session_id,
            flow=flow,
            meta=meta,
            actor=actor,
            resume=prepare,
        )

    # -- keyed delivery ------------------------------------------------------------------------
    def deliver(self, key: str, value: Any = None, *, actor: str | None = None) -> list[Outcome]:
        """Add one message to `key`'s queue (`Wait(key=...)`, in any session of the store): the
        branch that waits on `key` takes it and goes on; with none, it stays queued, and the
        next Wait that reaches `key` takes it instead of pausing. Every message is taken
        exactly once: two deliveries are two messages, taken in order by two Waits. Returns
        the outcomes of the sessions it moved on ([] when it was queued). A session running
        right now is never waited for: the message stays queued for it. A bad key or value,
        or one the waiting element refuses: a typed error, nothing queued."""
        return delivering.deliver(self._core, key, value, actor)

    def deliver_many(self, deliveries: Mapping[str, Any], *, actor: str | None = None) -> Delivery:
        """`deliver` for each `{key: value}`, every key and value checked before any message is
        queued; the messages that waits of one session take, one resume of it. A `Delivery`:
        `applied` (key -> session id), `queued` (keys), `outcomes`."""
        return delivering.deliver_many(self._core, deliveries, actor)

    def broadcast(self, key: str, value: Any = None, *, actor: str | None = None) -> list[Outcome]:
        """Resume every branch waiting on `key` at this moment with `value`, and keep nothing
        (a signal: "the dataset is ready"). The outcomes of the sessions it moved on."""
        return delivering.broadcast(self._core, key, value, actor)

    def discard(self, key: str) -> int:
        """Drop the messages queued on `key`; how many."""
        return delivering.discard(self._core, key)

    def mailbox(self, *, prefix: str | None = None, limit: int = 100) -> list[MailInfo]:
        """The keys that hold queued messages, by key (those starting with `prefix`): each a
        `MailInfo(key, count, oldest_at)`. Messages older than `mail_ttl` are dropped by
        `prune` and by workers with `retention`."""
        return delivering.mailbox(self._core, prefix, limit)

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

        Writes nothing for a request that is not ready (no claim, no lease). The sessions of
        the ready ones are claimed (leased to this runtime, as due timers are) before they are
        resumed, so that concurrent pollers resume different ones and try each token once;
        the token's single use settles any other race. An adapter that raises, or a value the
        waiting element refuses, is logged, and the round goes on. Each session is handled
        inside its own error boundary, as in `resume_due`. Between the two, each wait whose key
        holds a queued message that did not reach it (the delivery and the wait crossed in
        processes that died, or the session was busy) takes it. Last, with `batches`, the
        batch round (docs/batch.md): waiting `BatchRequest`s are submitted, open batches
        checked, and the results of ended ones delivered by key.
        """
        return polling.poll(self._core, limit)

    def recover(self, *, session_id: str | None = None) -> list[Outcome]:
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

        `session_id`: recover that one session only, and return its outcome (a list of one).
        Its trouble is raised instead of logged, and changes nothing: `UnknownSession`;
        `SessionNotResumable` when it is not running, its lease still holds (a process may be
        driving it) or another process took it over first; `UnknownFlow`, `FlowMismatch` or
        `SnapshotError` when this runtime cannot continue it.
        """
        if session_id is not None:
            return [recovery.recover_session(self._core, session_id)]
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

    # -- what it runs on -----------------------------------------------------------------------
    @property
    def store(self) -> SessionStore:
        return self._core.store

    @property
    def flows(self) -> FlowRegistry:
        """The flows this Runtime knows (`get(name)`, `version(name, fingerprint)`, `all()`)."""
        return self._core.flows

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
    def adapters(self) -> dict[str, Any]:
        """{pause kind: adapter} that `poll()` asks."""
        return self._core.adapters

    @adapters.setter
    def adapters(self, adapters: dict[str, Any]) -> None:
        self._core.adapters = checked_adapters(adapters)

    @property
    def batches(self) -> dict[str, Any]:
        """{name: batch adapter} that `BatchRequest(via=name)` submits through (tarry.batches);
        `poll()` and workers submit, check and deliver them."""
        return self._core.batches

    @batches.setter
    def batches(self, batches: dict[str, Any]) -> None:
        self._core.batches = checked_batches(batches)

    @property
    def max_value_bytes(self) -> int:
        return self._core.max_value_bytes

    @property
    def max_snapshot_bytes(self) -> int:
        return self._core.max_snapshot_bytes

    @property
    def retention(self) -> timedelta | None:
        """How long ended sessions are kept before workers prune them (None: forever)."""
        return self._core.retention

    # -- retention -----------------------------------------------------------------------------
    def prune(
        self,
        *,
        older_than: timedelta,
        status: str | Iterable[str] = ("completed", "cancelled", "failed"),
        dry_run: bool = False,
    ) -> int:
        """Delete the ended sessions whose last update is older than `older_than` (by `clock`)
        — with their events, values and tokens — and return how many. `status` narrows which
        ended statuses go (one or several of "completed", "cancelled", "failed"); a running or
        paused session is never deleted, nor a failed one being resumed. Deletes in batches,
        each one short transaction; a SQLite file then gives the space back. `dry_run`: only
        count them. InvalidArgument for an `older_than` that is not a positive timedelta or a
        status that is not an ended one."""
        return pruning.prune(self._core, older_than, status, dry_run)

    def retain(self) -> int:
        """Prune by `retention` if it is set and a minute (by `clock`) passed since the last
        time: what `tarry worker` does every round, for loops of your own. Returns how many
        sessions were deleted; a failure is logged, not raised."""
        return pruning.retain(self._core)

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

    def sessions_page(
        self,
        *,
        status: str | None = None,
        flow: str | Flow | None = None,
        q: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """A page of sessions newest first and the `next_cursor` of the next page (None on the
        last): keyset paging, stable while sessions are created, an index range read however
        deep. `q`: a session id prefix or flow name substring; created in [`since`, `until`)."""
        return paging.sessions_page(
            self._core,
            status=status,
            flow=flow,
            q=q,
            since=since,
            until=until,
            limit=limit,
            cursor=cursor,
        )

    def stats(
        self,
        *,
        flow: str | Flow | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Stats:
        """Counts of sessions by status; per node (by name) executions, failures and mean
        duration; and the sums of every `ctx.metric` — over all sessions, or one flow's, or
        those created in [`since`, `until`) (timezone-aware datetimes).

        The store keeps a tally per session and folds in only the events written since the last
        report: its cost grows with the sessions, not with their logs. A session whose stored
        data cannot be read is logged and left out of the node figures.
        """
        return inspecting.stats(self._core, flow, since, until)

    def logs(
        self,
        session_id: str,
        *,
        level: int | str | None = None,
        after: int = 0,
        limit: int = 1000,
    ) -> list[LogRecord]:
        """The `logging` records a session's steps emitted (those it keeps), in order: those
        at `level` or above (a number or a name such as "WARNING"), with seq > `after`, at most
        `limit`. Records are written with the session (at most a second behind while it
        runs). UnknownSession for an id no session has."""
        return inspecting.logs(self._core, session_id, level, after, limit)

    def dropped_logs(self, session_id: str) -> int:
        """How many of a session's `logging` records it did not keep (over `max_logs`: its
        oldest ones)."""
        return inspecting.dropped_logs(self._core, session_id)

    def subscribe(
        self, callback: Callable[[Event], Any], *, session_id: str | None = None
    ) -> Callable[[], None]:
        """Call `callback(event)` for each new event (of one session, or all). Returns the
        function that unsubscribes. Runs already in progress keep the subscribers they
        started with; a callback that raises is logged and does not disturb the run."""
        return self._core.hub.subscribe(callback, session_id)


def _wake_parent(core: Core, key: str) -> Any:
    return delivering.wake_parent(core, key)


def _cancel_children(core: Core, session_id: str) -> None:
    control.cancel_children(core, session_id)  # (control is loaded only when a deadline passes)
