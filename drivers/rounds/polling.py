"""Adapters: `Runtime.poll` is `resume_due` plus the adapters, asked about every waiting request
of their pause kinds; the requests they answer are resumed with the answer — each session
inside its own error boundary (boundary.py).

A poll writes nothing for a request that is not ready: the waiting requests are read through
the store's index of live waits (`SessionStore.waiting`, a page at a time after the last token
read), with no claim, lease or release around the question. So a round that finds nothing
ready costs reads of the waits and nothing else, and its writes grow with what is ready, never
with what is waiting.

Every poller (every worker) asks about the same requests and hears of the same ready ones. So
that they do not all try the same tokens, a round claims what it resumes, as the timers do: the
sessions of the ready waits, a page at a time, in one store call (`SessionStore.claim_waits`,
which skips sessions another round holds and leases the rest to this runtime), then resumes
only what it claimed — against the record the claim returned, so that a session with one ready
wait costs the claim's share, its token's use and its drive's save. Another round passes over
what this one holds; a claim that is not resumed is given back at once, and one whose worker
died lapses with its lease. The token's single use still settles any race the claim does not
see (a resume by token, a delivery, a timeout).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from tarry.drivers.adapters import NOT_READY, ResumeRequest, decoding_request, is_bulk
from tarry.drivers.batches.round import batch_round
from tarry.drivers.core import Core
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import settle
from tarry.drivers.limits import log
from tarry.drivers.rounds.boundary import Round, flow_of, guarded
from tarry.drivers.rounds.delivering import deliver_pending, resume_group, waiting
from tarry.drivers.rounds.timers import resume_due
from tarry.engine.errors import InvalidResumeValue, NotSerializable, SnapshotError
from tarry.engine.is_awaitable import is_awaitable
from tarry.snapshots.codec.pack import loads
from tarry.snapshots.records import SessionRecord, WaitRecord

#: Unknown tokens or keys an adapter's answer may name before the log stops listing them.
LISTED = 3

#: Sessions of ready waits claimed at a time: a round holds no more than it is about to resume,
#: so that other workers' rounds find the rest free (as timers.PAGE).
PAGE = 20

#: token key -> (the wait, the adapter's answer)
Ready = dict[str, tuple[WaitRecord, Any]]


def poll(core: Core, limit: int, round: Round | None = None) -> list[Outcome]:
    round = round or Round()
    outcomes = resume_due(core, limit, round)
    outcomes += deliver_pending(core, round, limit)
    outcomes += ask_adapters(core, round)
    return outcomes + batch_round(core, round)


def ask_adapters(core: Core, round: Round | None = None) -> list[Outcome]:
    """Ask each adapter about every waiting request of its pause kind; resume the ready ones."""
    if not core.adapters:
        return []
    core.tokens.check()
    round = round or Round()
    outcomes: list[Outcome] = []
    for kind, adapter in list(core.adapters.items()):
        if round.stopping():
            break
        rows = waiting(core, kind=kind)
        if not rows:
            continue
        requests = _requests(core, rows)
        ready = _ask_many(adapter, requests) if is_bulk(adapter) else _ask_each(adapter, requests)
        outcomes += _resume_ready(core, ready, round)
    return outcomes


def _requests(core: Core, rows: list[WaitRecord]) -> list[tuple[ResumeRequest, WaitRecord]]:
    """The request an adapter is asked about for each wait: the caller's token (signed when
    the Runtime signs), the wait's pause and its payload, decoded when the adapter first reads
    it. A payload that cannot be decoded raises SnapshotError to the adapter that reads it
    (which fails that request, or a bulk adapter's round), and is logged once per session."""
    # Unsigned, a token is its key (ask_adapters checked the store's mark once already).
    token = core.tokens.token if core.tokens.signed else str
    made = []
    decode = _decoder(core)
    for row in rows:
        request = decoding_request(
            token(row.token),
            row.session_id,
            row.kind,
            row.reason,
            row.payload,
            decode,
            row.path,
            row.key,
        )
        made.append((request, row))
    return made


def _decoder(core: Core) -> Callable[[bytes, ResumeRequest], Any]:
    def decode(blob: bytes, row: ResumeRequest) -> Any:
        try:
            return loads(blob) if blob else None
        except SnapshotError as exc:
            if core.reported.first(row.session_id, "payload"):
                log().error(
                    "poll: the payload of session %s's wait at %s cannot be read (%s); an "
                    "adapter that reads it fails for it (logged once per session)",
                    row.session_id,
                    row.path,
                    exc,
                )
            raise

    return decode


def _ask_each(adapter: Any, requests: list[tuple[ResumeRequest, WaitRecord]]) -> Ready:
    """A callable adapter, asked once per request. One that raises is logged once a round
    (with how many requests it failed), and those requests stay as they are."""
    ready: Ready = {}
    failed = 0
    for request, row in requests:
        try:
            value = adapter(request)
            if is_awaitable(value):
                value = settle(value)
        except Exception:
            failed += 1
            if failed == 1:
                log().exception("adapter %r failed for session %s", adapter, row.session_id)
            continue
        if value is not NOT_READY:
            ready[row.token] = (row, value)
    if failed > 1:
        log().error("adapter %r failed for %d requests this round", adapter, failed)
    return ready


def _ask_many(adapter: Any, requests: list[tuple[ResumeRequest, WaitRecord]]) -> Ready:
    """A bulk adapter, asked once with every request. Its answer maps a request's token or its
    key (every wait on that key) to a value; `NOT_READY` values are left out, and tokens or
    keys that name no request asked are logged and ignored. One that raises, or answers with
    anything but a mapping, is logged and nothing is resumed."""
    try:
        answer = adapter.many([request for request, _ in requests])
        if is_awaitable(answer):
            answer = settle(answer)
    except Exception:
        log().exception("adapter %r: many() failed for %d requests", adapter, len(requests))
        return {}
    if not isinstance(answer, Mapping):
        log().error(
            "adapter %r: many() must return a dict {token or key: value} (got %s); ignored",
            adapter,
            type(answer).__name__,
        )
        return {}
    if not any(value is not NOT_READY for value in answer.values()):
        return {}  # nothing ready (the usual round): no index of the requests is needed
    by_token = {request.token: row for request, row in requests}
    by_key: dict[str, list[WaitRecord]] = {}
    for _, row in requests:
        if row.key is not None:
            by_key.setdefault(row.key, []).append(row)
    ready: Ready = {}
    unknown: list[Any] = []
    for name, value in answer.items():
        if value is NOT_READY:
            continue
        row = by_token.get(name)
        rows = [row] if row is not None else by_key.get(name)
        if not rows:
            unknown.append(name)
            continue
        for row in rows:
            ready[row.token] = (row, value)
    if unknown:
        # Tokens are not written to the log: only how many, and the keys among the names.
        keys = [n for n in unknown if not (isinstance(n, str) and n.startswith("tk_"))]
        log().warning(
            "adapter %r: many() answered %d tokens or keys that no request asked about (ignored)%s",
            adapter,
            len(unknown),
            f"; keys: {', '.join(map(repr, keys[:LISTED]))}" if keys else "",
        )
    return ready


def _resume_ready(core: Core, ready: Ready, round: Round) -> list[Outcome]:
    """Resume the ready waits, one session at a time, each inside its own boundary: the
    sessions claimed PAGE at a time, and only those claimed resumed (see the module's
    docstring). A session held by another round, running, or ended since is passed over: the
    next round asks about it again if it still waits."""
    by_session: dict[str, Ready] = {}
    for token, (row, value) in ready.items():
        by_session.setdefault(row.session_id, {})[token] = (row, value)
    groups = list(by_session.values())
    outcomes: list[Outcome] = []
    for start in range(0, len(groups), PAGE):
        if round.stopping():
            break
        now = core.clock.now()
        until = now + timedelta(seconds=core.lease)
        page = groups[start : start + PAGE]
        claimed = core.store.claim_waits(
            [token for group in page for token in group], core.owner, until, now
        )
        held: list[tuple[SessionRecord, Ready]] = []
        for group in page:
            mine = {token: found for token, found in group.items() if token in claimed}
            if mine:
                held.append((claimed[next(iter(mine))], mine))
        started = 0
        try:
            for record, mine in held:
                if round.stopping():
                    break
                started += 1
                outcome = guarded(
                    core,
                    "poll",
                    record,
                    round,
                    lambda r=record, g=mine: _claimed(core, r, g, round),
                    claimed=True,
                )
                if outcome is not None:
                    outcomes.append(outcome)
        finally:
            # Claimed but not started (the round stops, or ends with an error): let other
            # workers have them now rather than when the claims lapse.
            _give_back(core, [record.session_id for record, _ in held[started:]])
    return outcomes


def _claimed(core: Core, record: SessionRecord, group: Ready, round: Round) -> Outcome | None:
    """Resume the ready waits `group` of the session this round claimed (`record`)."""
    if flow_of(core, record, round, "poll") is None:
        return None
    if len(group) == 1:
        # Claimed just now, so the resume need not read it again: it uses the token only while
        # the session is still at this version (see resuming._prepare).
        [token] = group
        core.records.keep(token, record)
    return _resume(core, record.session_id, group)


def _give_back(core: Core, sids: list[str]) -> None:
    for sid in sids:
        try:
            core.store.release(sid, core.owner)
        except Exception:  # the store is away: the claims lapse after the lease instead
            return


def _resume(core: Core, sid: str, group: Ready) -> Outcome | None:
    try:
        got, _ = resume_group(core, group, trigger="adapter")
    except (InvalidResumeValue, NotSerializable) as exc:
        log().error("an adapter gave session %s a value it refused: %s", sid, exc)
        return None
    return got[0] if got else None
