"""One session's error boundary inside a round of `resume_due`, `poll` or `recover`.

A round handles many sessions, and nothing one of them does may stop the others. A session
whose flow is missing or changed, whose snapshot is corrupt or inconsistent, or whose resume
raises is logged once (per session and kind of trouble, per Runtime: see reported.py), left
exactly as it was — its token unused, its claim given back — or, when this round already used
its token and then the resume raised, failed with a typed error (the exception's class name,
as for a failing step); and the round goes on with the next session. Only trouble with the
store itself (a database that cannot be reached) ends a round, since every other session
would meet it too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tarry.drivers.drive.outcome import Outcome, outcome_of
from tarry.drivers.limits import log
from tarry.drivers.reading.views import state_of
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import TarryError
from tarry.engine.failure import error_type
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event
from tarry.engine.state.records import ErrorInfo
from tarry.engine.state.reducer import apply, error_to_data
from tarry.snapshots.records import SessionRecord, encode_state, fold_stored

if TYPE_CHECKING:
    from tarry.drivers.core import Core

#: The longest error message kept in a failure this module records (a message can quote data).
MAX_MESSAGE = 2000
_ENDED = ("completed", "failed", "cancelled")


class Round:
    """What a caller (the worker) adds to a round of `resume_due`, `poll` or `recover`.

    `stopping()` is asked before each session: once it is true, the round takes no other
    session, and gives back the claims it holds. `import_flow(record)` may register the flow of
    a session the runtime does not know (True when it did). `current` is the session being
    handled, so that a worker told to stop can ask that one to stop at its next checkpoint.
    """

    __slots__ = ("stopping", "import_flow", "current")

    def __init__(
        self,
        stopping: Callable[[], bool] | None = None,
        import_flow: Callable[[SessionRecord], bool] | None = None,
    ) -> None:
        self.stopping: Callable[[], bool] = stopping or _never
        self.import_flow = import_flow
        self.current: str | None = None

    def begin(self, session_id: str) -> bool:
        """`session_id` is the session now in hand; False if the round is stopping (then it
        must not be started). In this order, so that a stop either sees the session as current
        (and asks it to stop at a checkpoint) or is seen here."""
        self.current = session_id
        if self.stopping():
            self.current = None
            return False
        return True


def _never() -> bool:
    return False


def infrastructure(exc: BaseException) -> bool:
    """Trouble with the store rather than with one session: the DB-API's OperationalError and
    InterfaceError (sqlite3's and psycopg's: a lost connection, a locked database) or an
    OSError. Those end the round instead of being pinned on the session at hand."""
    if isinstance(exc, OSError):
        return True
    return any(cls.__name__ in ("OperationalError", "InterfaceError") for cls in type(exc).__mro__)


def flow_of(
    core: Core, record: SessionRecord, round: Round, where: str, *, warn: bool = True
) -> Flow | None:
    """The registered flow of `record`'s name, imported by the round if it can; None (and,
    with `warn`, a warning once per session: `no_flow`) when there is none: the session is
    left for a Runtime that knows its flow. The version that started the session when it is
    registered, else any of its name (resuming with it then refuses with FlowMismatch, before
    the token is used)."""
    flow = _registered(core, record)
    if flow is None and round.import_flow is not None and round.import_flow(record):
        flow = _registered(core, record)
    if flow is None and warn:
        no_flow(core, record, where)
    return flow


def no_flow(core: Core, record: SessionRecord, where: str) -> None:
    """Say, once per session, that `record`'s flow is not registered here and the session is
    left for a Runtime that knows it."""
    if core.reported.first(record.session_id, "no flow"):
        log().warning(
            "%s: no flow %r registered for session %s; left for a Runtime that knows it "
            "(logged once per session)",
            where,
            record.flow,
            record.session_id,
        )


def _registered(core: Core, record: SessionRecord) -> Flow | None:
    return core.flows.version(record.flow, record.fingerprint) or core.flows.get(record.flow)


def guarded(
    core: Core,
    where: str,
    record: SessionRecord,
    round: Round,
    handle: Callable[[], Outcome | None],
    *,
    claimed: bool,
) -> Outcome | None:
    """`handle()` the session of `record` inside its boundary. `claimed`: the round holds the
    session's lease, and gives it back unless the session was resumed (its drive's last save
    ends the lease)."""
    sid = record.session_id
    if not round.begin(sid):
        outcome = None
    else:
        try:
            outcome = handle()
        except Exception as exc:
            if infrastructure(exc):
                raise
            # The claim, if any, is given back below unless the session was failed.
            outcome = contain(core, where, record, exc, claimed=False)
        finally:
            round.current = None
    if outcome is None:
        if claimed:
            core.store.release(sid, core.owner)
    else:
        core.reported.forget(sid)
    return outcome


def contain(
    core: Core,
    where: str,
    record: SessionRecord,
    exc: Exception,
    *,
    claimed: bool,
    used: bool | None = None,
) -> Outcome | None:
    """After `exc` from one session: fail it if this runtime used its token (`used`; None: ask
    the store), else give back the claim; log it once either way. The failed session's
    outcome, or None."""
    sid = record.session_id
    try:
        if used is None:
            used = _used_here(core, record)
        if used:
            outcome = fail_session(core, sid, exc, where)
            if outcome is not None:
                if core.reported.first(sid, f"failed:{error_type(exc)}"):
                    log().error(
                        "%s: session %s raised %s after its token was used; failed it with "
                        "error type %r",
                        where,
                        sid,
                        error_type(exc),
                        outcome.error.type,
                        exc_info=_details(exc),
                    )
                return outcome
        elif claimed:
            core.store.release(sid, core.owner)
    except Exception as again:
        if infrastructure(again):
            raise
        if core.reported.first(sid, f"stuck:{error_type(again)}"):
            log().error(
                "%s: session %s raised %s, and then %s while it was being set aside; skipped",
                where,
                sid,
                error_type(exc),
                error_type(again),
                exc_info=again,
            )
        return None
    if core.reported.first(sid, f"left:{error_type(exc)}"):
        log().error(
            "%s: session %s cannot be continued (%s: %s); left as it was and skipped "
            "(logged once per session)",
            where,
            sid,
            error_type(exc),
            exc,
            exc_info=_details(exc),
        )
    return None


def _details(exc: Exception) -> Exception | None:
    # A tarry error says what is wrong in its message; anything else is a bug somewhere, whose
    # traceback is what tells where.
    return None if isinstance(exc, TarryError) else exc


def _used_here(core: Core, record: SessionRecord) -> bool:
    """Whether this runtime used the session's token before the resume raised: the token is
    used, and the session's lease is still this runtime's (a resume elsewhere takes it)."""
    if record.token is None:
        return False
    info = core.store.find_token(record.token)
    if info is None or not info.used:
        return False
    current = core.store.load(record.session_id)
    return (
        current is not None and current.lease_owner == core.owner and current.status not in _ENDED
    )


def fail_session(core: Core, session_id: str, exc: Exception, trigger: str) -> Outcome | None:
    """End a session that this runtime resumed (its token used, its lease held) and whose
    resume raised `exc` as failed, with an error typed by the exception: what it held before
    stays, and it keeps a token, so it can be retried after a fix, skipped or cancelled. None
    when the stored session is not running after all (nothing is written then)."""
    store = core.store
    record = store.load(session_id)
    if record is None:
        return None
    state = state_of(record)
    state = fold_stored(state, store.events(session_id, state.last_seq))
    if state.status != "running":
        return None
    import traceback  # only when a session fails this way

    now = core.clock.now()
    error = ErrorInfo(
        type=error_type(exc),
        message=str(exc)[:MAX_MESSAGE],
        path=(),
        retryable=False,
        attempts=1,
        traceback="".join(traceback.format_exception(exc))[-4 * MAX_MESSAGE :],
    )
    data: dict[str, Any] = {"error": error_to_data(error)}
    event = Event(state.last_seq + 1, ev.RUN_FAILED, session_id, now, (), data)
    state = apply(state, event)
    key = core.tokens.new_key()
    core.states.drop(record.state)
    record.state = encode_state(
        state, fingerprint=record.fingerprint, flow_version=record.flow_version
    )
    record.status = state.status
    record.token = key
    record.wake_at = None
    record.lease_owner = None
    record.lease_until = None
    record.updated_at = now
    store.save(record, record.version, events=[event])
    core.hub.notify(event)
    return outcome_of(state, core.tokens.token(key), {"trigger": trigger})
