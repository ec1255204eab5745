"""Keyed delivery: `Runtime.deliver`, `deliver_many`, `broadcast`, `discard` and `mailbox`,
the worker round that delivers what crossed its wait (`deliver_pending`), and the one function
that resumes a group of waits (`resume_group`), which polls and broadcasts share.

A key is a queue. A message goes to the branch that has waited longest on its key
(`SessionStore.waiters`). With nothing queued ahead of it, that branch takes the value at once:
the use of its token records the resume with the value, and that is the message consumed. Else
the message is queued (`SessionStore.post`) and the queue's head is offered to the waits in turn:
a wait takes it by being resumed with it, the store consuming the message in the transaction
that uses the wait's token (`mail=`). So a message is taken exactly once however deliveries,
token resumes, timeouts and cancels race. A wait whose token was used meanwhile is passed over;
a session running right now is never waited for: the message stays queued for it (its drive
looks when it pauses, see starting.late_mail, and so does the next worker round:
`deliver_pending`); with no wait to take it, it stays queued for the next Wait on the key, which
takes it instead of pausing (`Drive._mailbox`).

Nothing is written before every check passed: the key and the value (encodable, within
`max_value_bytes`), then every wait found against its session (the flow it runs with is
registered here, the waiting element accepts the value). A refused delivery raises its typed
error with the mailbox and every session as they were.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import attrs
from tarry.drivers.core import Core
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import settle, settle_many
from tarry.drivers.limits import check_actor, log
from tarry.drivers.rounds.boundary import Round, contain, infrastructure
from tarry.drivers.sessions.batch import resume_keys
from tarry.drivers.sessions.resuming import SessionBusy, prepare_now
from tarry.engine.describe import describe
from tarry.engine.errors import (
    FlowMismatch,
    InvalidArgument,
    InvalidResumeValue,
    SessionNotResumable,
    TokenAlreadyUsed,
    UnknownFlow,
    UnknownToken,
)
from tarry.engine.keys import check_key
from tarry.snapshots.codec.pack import dumps, loads
from tarry.snapshots.mail import MailInfo, MailRecord
from tarry.snapshots.records import SessionRecord, WaitRecord
from tarry.snapshots.store import MailGone

#: Waiting rows read from the store at a time (an index range after the last token read).
PAGE = 1000

#: A wait that cannot take a message now: its token was used, or its session is gone.
_PASSED = (TokenAlreadyUsed, UnknownToken, SessionNotResumable)


@attrs.frozen
class Delivery:
    """What `deliver_many` did: `applied`, key -> the session whose wait took its message;
    `queued`, the keys whose messages stay queued (no wait could take them now); `outcomes`,
    one per session moved on, in the order of their first key."""

    applied: dict[str, str]
    queued: list[str]
    outcomes: list[Outcome]


def waiting(core: Core, *, kind: str | None = None, key: str | None = None) -> list[WaitRecord]:
    """Every live wait (of `kind`, on `key`), read a page at a time through the store's index
    (each page starts after the last token read: no OFFSET). Writes nothing."""
    rows: list[WaitRecord] = []
    after = None
    while True:
        page = core.store.waiting(kind=kind, key=key, after=after, limit=PAGE)
        rows.extend(page)
        if len(page) < PAGE:
            return rows
        after = page[-1].token


def _waiters(core: Core, keys: list[str]) -> dict[str, list[WaitRecord]]:
    """The waits on each of `keys`, the one that has waited longest first (at most PAGE of
    each), read for PAGE keys at a time; [] for a key nothing waits on."""
    found: dict[str, list[WaitRecord]] = {}
    for start in range(0, len(keys), PAGE):
        found.update(core.store.waiters_many(keys[start : start + PAGE], PAGE))
    return {key: found.get(key, []) for key in keys}


def deliver(core: Core, key: str, value: Any, actor: str | None = None) -> list[Outcome]:
    return deliver_many(core, {key: value}, actor).outcomes


def discard(core: Core, key: str) -> int:
    """Drop the messages queued on `key`; how many."""
    return int(core.store.discard(check_key(key)))


def mailbox(core: Core, prefix: str | None, limit: int) -> list[MailInfo]:
    if prefix is not None and type(prefix) is not str:
        msg = f"prefix must be a str or None (got {describe(prefix)})"
        raise InvalidArgument(msg)
    if type(limit) is not int or not 1 <= limit <= 10_000:
        msg = f"limit must be an int from 1 to 10000 (got {describe(limit)})"
        raise InvalidArgument(msg)
    return list(core.store.mailbox(prefix=prefix, limit=limit))


def _checked(
    core: Core, deliveries: Mapping[str, Any], what: str, every: bool = False
) -> tuple[dict[str, Any], dict[str, bytes], dict[str, list[WaitRecord]]]:
    """Every key and value checked, and every wait on the keys against its value: (values,
    their encodings, the waits of each key: the one that has waited longest first, or, with
    `every`, all of them). Raises the first refusal; writes nothing."""
    if not isinstance(deliveries, Mapping):
        msg = f"{what} takes a mapping {{key: value}} (got {describe(deliveries)})"
        raise InvalidArgument(msg)
    core.tokens.check()
    values: dict[str, Any] = {}
    blobs: dict[str, bytes] = {}
    for key, value in deliveries.items():
        check_key(key)
        # The session's own copy, checked: NotSerializable / PayloadTooLarge naming the key.
        values[key], _ = core.take(value, f"delivery for key {key!r}")
        blobs[key] = dumps(values[key])
    if every:
        found = {key: waiting(core, key=key) for key in values}
    else:
        found = _waiters(core, list(values))
    check_group(
        core, {row.token: (row, values[key]) for key, rows in found.items() for row in rows}
    )
    return values, blobs, found


def deliver_many(core: Core, deliveries: Mapping[str, Any], actor: str | None = None) -> Delivery:
    """Queue one message per key, then let a wait on each key take it (see the module's
    docstring); `actor` in each `run.resumed` event. The messages that found waits of one
    session are taken by one resume of it (one drive, one write).

    The look-ups are made for many keys and sessions at once (the waits of PAGE keys, then,
    PAGE sessions at a time, which of their keys hold messages queued ahead and the sessions'
    rows), so that a session whose one wait takes its value straight away costs two
    statements of its own: its token's use, checked against the row read for it, and the
    save of its drive (benchmarks/test_postgres_delivery.py)."""
    check_actor(actor)
    values, blobs, found = _checked(core, deliveries, "deliver_many")
    many = _Many(core, values, blobs, found, actor)
    # The longest-waiting branch of each key, grouped by session: one resume per session.
    # Each group's messages are queued just before its resume, so that no other drive of this
    # call finds them queued and takes them first.
    firsts: dict[str, dict[str, tuple[str, WaitRecord]]] = {}
    for key, rows in found.items():
        if rows:
            firsts.setdefault(rows[0].session_id, {})[rows[0].token] = (key, rows[0])
    groups = list(firsts.items())
    for start in range(0, len(groups), PAGE):
        page = groups[start : start + PAGE]
        ahead = core.store.queued_keys([key for _, waits in page for key, _ in waits.values()])
        records = core.store.load_many([sid for sid, waits in page if len(waits) == 1])
        for sid, waits in page:
            many.to_session(sid, waits, ahead, records.get(sid))
    for key in values:
        if not found[key]:
            # Nothing waited when we looked; a drive of this very call may have come to wait
            # on it since: offered to whatever waits now, else queued.
            many.offer(key, core.store.post(key, blobs[key], many.now), [])
    queued = [key for key in values if key not in many.applied]
    return Delivery(many.applied, queued, list(many.outcomes.values()))


class _Many:
    """One `deliver_many` under way: what it delivers, and what it did so far (`applied`:
    key -> session; `outcomes`: by session, its last outcome, in first-key order)."""

    def __init__(
        self,
        core: Core,
        values: dict[str, Any],
        blobs: dict[str, bytes],
        found: dict[str, list[WaitRecord]],
        actor: str | None,
    ) -> None:
        self.core = core
        self.values = values
        self.blobs = blobs
        self.found = found
        self.actor = actor
        self.now = core.clock.now()
        self.applied: dict[str, str] = {}
        self.outcomes: dict[str, Outcome] = {}

    def to_session(
        self,
        sid: str,
        waits: dict[str, tuple[str, WaitRecord]],
        ahead: set[str],
        record: SessionRecord | None,
    ) -> None:
        """The values of the keys whose longest-waiting branches are the `waits` of the session
        `sid` (token key -> (key, wait)) go to them, or are queued and offered in turn. `ahead`:
        keys that held queued messages when looked at; `record`: the session's row as read
        for this page (None: not read)."""
        core, values = self.core, self.values
        keys = [key for key, _ in waits.values()]
        if not ahead.intersection(keys):
            # Nothing queued ahead of them: the waits take the values straight away, the use of
            # their tokens recording each with its value (that is the message consumed), with
            # no message row to write and delete.
            if len(waits) == 1:
                [(key, wait)] = waits.values()
                taken, outcome = _take_one(core, wait, values[key], record, self.actor)
            else:
                outcome = _take_together(core, waits, values, dict.fromkeys(keys), self.actor)
                taken = outcome is not None
            if taken:
                self._moved(sid, keys, outcome)
                return
        posted = {key: core.store.post(key, self.blobs[key], self.now) for key in keys}
        if len(waits) > 1 and not ahead.intersection(keys):
            # (With a message queued ahead on one of the keys, the queue's head goes first:
            # each key's messages are offered in turn below, never these values together.)
            outcome = _take_together(core, waits, values, posted, self.actor)
            if outcome is not None:
                self._moved(sid, keys, outcome)
                return
        for key in keys:
            self.offer(key, posted[key], self.found[key])

    def offer(self, key: str, mid: int, rows: list[WaitRecord]) -> None:
        """Offer the message `mid` queued on `key` to the waits on it (see `_offer`)."""
        moved, taker = _offer(self.core, key, self.values[key], mid, rows, self.actor)
        self.outcomes.update((o.session_id, o) for o in moved)
        if taker is not None:
            self.applied[key] = taker

    def _moved(self, sid: str, keys: list[str], outcome: Outcome | None) -> None:
        if outcome is not None:
            self.outcomes[sid] = outcome
        self.applied.update(dict.fromkeys(keys, sid))


def broadcast(core: Core, key: str, value: Any, actor: str | None = None) -> list[Outcome]:
    """Resume every branch waiting on `key` now, each with `value`; keep nothing."""
    check_actor(actor)
    values, _, found = _checked(core, {key: value}, "broadcast", every=True)
    group = {row.token: (row, values[key]) for row in found[key]}
    outcomes, _ = resume_group(core, group, trigger="broadcast", actor=actor)
    return outcomes


def _take_one(
    core: Core, wait: WaitRecord, value: Any, record: SessionRecord | None, actor: str | None
) -> tuple[bool, Outcome | None]:
    """The wait takes `value` straight away, its token's use recording the resume with it:
    (True, the outcome of its session), or (False, None) when it cannot now (its token was
    used, its session is gone or running): nothing was done, and the caller queues the value.

    `record`: the session as read for this delivery. It is handed to the resume as this
    runtime's own record of the session (statecache.RecordCache), so that the resume makes no
    read of its own: its token is used only while the session is still at that version, in
    one statement, and a session that moved on since is read again, as any resume does."""
    if record is not None:
        core.records.keep(wait.token, record)
    try:
        return True, _resume_one(core, wait.token, value, "deliver", actor)
    except (*_PASSED, SessionBusy):
        return False, None


def _take_together(
    core: Core,
    waits: dict[str, tuple[str, WaitRecord]],
    values: dict[str, Any],
    posted: dict[str, int | None],
    actor: str | None,
) -> Outcome | None:
    """Waits of one session (token key -> (key, wait)) each take their key's value — its queued
    message, when `posted` names one — in one resume (resume_many's path); None when that
    cannot be done at once (a token used, a message taken, the session busy): nothing was
    done, and the caller queues the values and offers them one at a time."""
    keyed = {token: (token, values[key]) for token, (key, _) in waits.items()}
    mail = {token: mid for token, (key, _) in waits.items() if (mid := posted[key]) is not None}
    try:
        outcomes = settle_many(
            resume_keys(core, keyed, trigger="deliver", actor=actor, mail=mail, wait_busy=False)
        )
    except (*_PASSED, MailGone, SessionBusy):
        return None
    return outcomes[0] if outcomes else None


def _offer(
    core: Core,
    key: str,
    value: Any,
    mid: int,
    rows: list[WaitRecord],
    actor: str | None,
) -> tuple[list[Outcome], str | None]:
    """Offer the messages queued on `key`, oldest first, to the waits on it in turn (the one
    that waited longest first) until the message `mid` (of `value`) is taken: (the outcomes of
    the sessions moved on, the session whose wait took `mid`, or None when it stays queued).
    A message queued before `mid` goes first: a key is a queue. Waits that came since `rows` was
    read are asked too, so none is passed over."""
    moved: list[Outcome] = []
    passed: set[str] = set()  # waits that cannot take a message (their tokens were used)
    for attempt in range(2):
        candidates = rows if attempt == 0 and rows else core.store.waiters(key, PAGE)
        busy: list[str] = []
        for row in candidates:
            if row.token in passed:
                continue
            head = core.store.queued(key=key, limit=1)
            if not head or head[0].id > mid:
                return moved, None  # ours was taken by a Wait that reached the key meanwhile
            message = head[0]
            given = value if message.id == mid else loads(message.value)
            try:
                outcome = _resume_one(core, row.token, given, "deliver", actor, message.id)
            except _PASSED:
                passed.add(row.token)  # its token was used meanwhile: the next wait
                continue
            except MailGone:
                continue  # a Wait reached the key and took that message: the next one
            except SessionBusy:
                busy.append(row.session_id)  # running now: the message stays for it
                continue
            except InvalidResumeValue:
                if message.id == mid:
                    raise
                return moved, None  # an older message this wait refuses: left queued
            passed.add(row.token)
            if outcome is not None:
                moved.append(outcome)
            if message.id == mid:
                return moved, row.session_id
        for sid in busy:  # its drive looks for the message when it pauses
            core.running.note_mail(sid)
        if attempt == 0 and not busy and not rows:
            break  # every wait there is was asked
        # Once more, with the waits as they are now: ones that came meanwhile, and busy
        # sessions that paused before they could see the note.
    return moved, None


def deliver_pending(core: Core, round: Round | None = None, limit: int = 100) -> list[Outcome]:
    """The worker round's share of delivery: each wait whose key holds a queued message that
    did not reach it (the delivery and the wait crossed, and the process that would have
    joined them died, or the wait's session was busy) takes the oldest one. Reads through the
    store's indexes; writes only for what it delivers.

    A page of `limit` pairs, oldest message first. Pairs this runtime cannot deliver now stay
    queued (a session of a flow it does not know, a busy one): so that a full page of them
    does not hide the rest round after round, the next round reads on past this page's last
    message, and from the oldest again once a page comes back short."""
    after = core.pending_after
    pairs = core.store.pending(limit, after)
    if after and len(pairs) < limit:  # the end of the queue: on from the oldest
        seen = {message.id for _, message in pairs}
        pairs += [p for p in core.store.pending(limit - len(pairs)) if p[1].id not in seen]
    core.pending_after = pairs[-1][1].id if len(pairs) >= limit else 0
    return _deliver(core, round or Round(), pairs)


def _deliver(core: Core, round: Round, pairs: list[tuple[WaitRecord, MailRecord]]) -> list[Outcome]:
    """Each (wait, message) of `pairs` taken: the waits of one session in one resume (one
    drive, one write), a session found busy left to its drive and the next round."""
    outcomes: list[Outcome] = []
    by_session: dict[str, list[tuple[WaitRecord, MailRecord]]] = {}
    for wait, message in pairs:
        by_session.setdefault(wait.session_id, []).append((wait, message))
    for sid, group in by_session.items():
        if len(group) > 1:
            if round.stopping() or not round.begin(sid):
                break
            # Several waits of one session (the children of one parent that ended): one
            # resume takes every message, one drive, one write.
            outcome = _take_pending_together(core, group)
            if outcome is _BUSY or outcome is _NO_FLOW:
                # Running (in another process, or this one), or its flow is not registered
                # here: the messages stay queued, for the next round or for a Runtime that
                # knows the flow. Trying them one at a time would find the same.
                continue
            if outcome is not None:
                outcomes.append(outcome)  # type: ignore[arg-type]
                continue
        for wait, message in group:
            if round.stopping():
                return outcomes
            if not round.begin(wait.session_id):
                continue
            try:
                value = loads(message.value)
                outcome = _resume_one(core, wait.token, value, "mail", None, message.id)
            except SessionBusy:
                break  # the rest of its group would find it busy too
            except (UnknownFlow, FlowMismatch) as exc:
                _no_flow(core, wait.session_id, exc)
                break  # the rest of its group needs the same flow
            except (*_PASSED, MailGone):
                continue
            except Exception as exc:
                if infrastructure(exc):
                    raise
                log().warning(
                    "deliver: message %s for key %r not delivered: %s", message.id, message.key, exc
                )
                continue
            if outcome is not None:
                outcomes.append(outcome)
    return outcomes


#: The end keys of the children that ended in this context's round, whose parents are woken
#: together once the round's page is done (`deferred_wakes`); None outside of such a round.
_DEFERRED: ContextVar[list[str] | None] = ContextVar("tarry_deferred_wakes", default=None)


@contextmanager
def deferred_wakes(core: Core, round: Round) -> Iterator[None]:
    """Within: a child's end does not wake its parent at once (`wake_parent`); its key is kept,
    and on the way out the parents of every child that ended are woken, each once with all of
    its children's ends (`deliver_ends`): a worker round that ran a page of children resumes
    their parent once, not once per child. (Left on an error: the ends stay queued, and the
    next round delivers them, `deliver_pending`.)"""
    keys: list[str] = []
    reset = _DEFERRED.set(keys)
    try:
        yield
    finally:
        _DEFERRED.reset(reset)
    if keys:
        deliver_ends(core, keys, round)


def deliver_ends(core: Core, keys: list[str], round: Round | None = None) -> list[Outcome]:
    """The ends queued on `keys` (children's end keys) taken by the waits on them: one read for
    them all, then one resume per parent with every end it waits for (see `_deliver`)."""
    found = getattr(core.store, "pending_on", None)
    if found is not None:
        pairs = found(keys)
    else:  # a store without the one read: a key at a time
        pairs = []
        for key in dict.fromkeys(keys):
            rows = core.store.waiters(key, 1)
            head = core.store.queued(key=key, limit=1) if rows else []
            if head:
                pairs.append((rows[0], head[0]))
    try:
        return _deliver(core, round or Round(), pairs)
    except Exception as exc:
        if infrastructure(exc):
            raise
        log().warning("children's ends did not reach their parents now: %s", exc)
        return []


def wake_parent(core: Core, key: str) -> Any:
    """The wait on `key` — a parent's lane waiting on the child whose end was just queued
    there — takes that message, consumed with the use of its token. Returns the parent's
    outcome (awaitable when its drive awaits), or None when nothing was resumed: no wait yet
    (the parent's drive takes the message when it reaches or registers the wait), the parent
    busy (noted for its drive) or anything else; what this leaves is the next worker round's
    (`deliver_pending`). Inside a worker round's page (`deferred_wakes`) the key is kept for
    the page's end instead, and None returned."""
    deferred = _DEFERRED.get()
    if deferred is not None:
        deferred.append(key)
        return None
    rows: list[WaitRecord] = []
    try:
        rows = core.store.waiters(key, 1)
        head = core.store.queued(key=key, limit=1) if rows else []
        if not head:
            return None
        value = loads(head[0].value)
        return prepare_now(
            core, rows[0].token, None, False, value=value, trigger="child", mail=head[0].id
        )
    except (*_PASSED, MailGone):
        return None
    except SessionBusy:
        core.running.note_mail(rows[0].session_id)
        return None
    except Exception as exc:
        if infrastructure(exc):
            raise
        log().warning("a child's end (key %r) did not reach its parent now: %s", key, exc)
        return None


#: `_take_pending_together` found the session running: nothing was done.
_BUSY: Any = object()


#: `_take_pending_together` found that this Runtime has no flow for the session.
_NO_FLOW = object()


def _no_flow(core: Core, session_id: str, exc: Exception) -> None:
    """A queued message's session has no flow here (UnknownFlow, FlowMismatch): it stays
    queued for a Runtime that knows the flow, and the round goes on; said once per session."""
    if core.reported.first(session_id, "no flow"):
        log().warning(
            "deliver: messages for session %s left queued for a Runtime that knows its flow "
            "(logged once per session): %s",
            session_id,
            exc,
        )


def _take_pending_together(core: Core, group: list[tuple[WaitRecord, Any]]) -> Any:
    """Resume the waits of one session in `group`, each with its queued message (consumed
    with the tokens), in one resume: its outcome; `_BUSY` when the session is running, None
    when it cannot be done now for another reason (a token used, a message taken, a value
    refused): nothing was done either way, and the caller offers them one at a time after
    None."""
    keyed = {w.token: (w.token, loads(m.value)) for w, m in group}
    mail = {w.token: m.id for w, m in group}
    try:
        got = settle_many(resume_keys(core, keyed, trigger="mail", mail=mail, wait_busy=False))
    except SessionBusy:
        return _BUSY
    except (UnknownFlow, FlowMismatch) as exc:
        _no_flow(core, group[0][0].session_id, exc)
        return _NO_FLOW
    except (*_PASSED, MailGone, InvalidResumeValue):
        return None
    return got[0] if got else None


# --- resuming a group of waits ---------------------------------------------------------------


def check_group(core: Core, group: Mapping[str, tuple[WaitRecord, Any]]) -> None:
    """Raise the typed error of the first wait of `group` ({token key: (wait, value)}) that
    would refuse its value: its session's flow is not registered here (UnknownFlow,
    FlowMismatch), or the waiting element does not accept the value (InvalidResumeValue).
    Reads each session once, PAGE of them at a time; writes nothing. A session gone
    meanwhile is left to the resume, which finds its token unknown."""
    by_session: dict[str, list[tuple[WaitRecord, Any]]] = {}
    for row, value in group.values():
        by_session.setdefault(row.session_id, []).append((row, value))
    sids = list(by_session)
    for start in range(0, len(sids), PAGE):
        page = sids[start : start + PAGE]
        records = core.store.load_many(page)
        for sid in page:
            record = records.get(sid)
            if record is None:
                continue
            flow = core.flows.flow_for(record, None, False)
            for row, value in by_session[sid]:
                accept = getattr(flow.find(row.path), "accept", None)
                if accept is not None:
                    accept(value)


def resume_group(
    core: Core,
    group: Mapping[str, tuple[WaitRecord, Any]],
    *,
    trigger: str,
    actor: str | None = None,
) -> tuple[list[Outcome], set[str]]:
    """Resume the waits of `group` ({token key: (wait, value)}), each with its value: one
    outcome per session, in the order of its first wait; and the token keys that were not
    resumed (a token resume, a timeout or a cancel used them first, or their session was
    running — never waited for: the next round asks again — nothing done).

    Every resume a poll or a delivery makes goes through here. It resumes the waits of one
    session with one call: one `prepare` for one wait, `resume_many`'s (one drive and one
    write for all of them) for the waiting branches of concurrent containers. A session whose
    resume raised after its token was used is failed with a typed error (see boundary.py) and
    that outcome returned."""
    by_session: dict[str, dict[str, Any]] = {}
    for token, (row, value) in group.items():
        by_session.setdefault(row.session_id, {})[token] = value
    outcomes: list[Outcome] = []
    lost: set[str] = set()
    for tokens in by_session.values():
        outcome = None
        if len(tokens) > 1:
            outcome = _resume_together(core, tokens, trigger, lost, actor)
            tokens = {}  # all resumed together, or by one at a time below if that failed
        for token, value in tokens.items():
            try:
                outcome = _resume_one(core, token, value, trigger, actor) or outcome
            except (*_PASSED, SessionBusy):
                lost.add(token)
        if outcome is not None:
            outcomes.append(outcome)
    return outcomes, lost


def _resume_together(
    core: Core, tokens: dict[str, Any], trigger: str, lost: set[str], actor: str | None
) -> Outcome | None:
    """The waits `tokens` ({token key: value}) of one session resumed in one drive and one
    write (`resume_many`'s path); a token used meanwhile is set aside in `lost` and the rest
    tried again. None when none was live any more."""
    left = dict(tokens)
    while left:
        try:
            outcomes = settle_many(
                resume_keys(
                    core,
                    {k: (k, v) for k, v in left.items()},
                    trigger=trigger,
                    actor=actor,
                    wait_busy=False,
                )
            )
        except SessionBusy:
            lost.update(left)
            return None
        except (TokenAlreadyUsed, UnknownToken) as exc:
            raced = getattr(exc, "token", None)
            if raced not in left:
                raise
            lost.add(raced)
            del left[raced]
            continue
        return outcomes[0] if outcomes else None
    return None


def _resume_one(
    core: Core,
    token: str,
    value: Any,
    trigger: str,
    actor: str | None,
    mail: int | None = None,
) -> Outcome | None:
    """Resume one wait by its token with `value` (with `mail`, consuming that queued message with
    the token); SessionBusy, nothing done, when its session is running: a round never waits."""
    try:
        return settle(
            prepare_now(
                core, token, None, False, value=value, trigger=trigger, actor=actor, mail=mail
            )
        )
    except (*_PASSED, MailGone, SessionBusy):
        raise
    except Exception as exc:
        if infrastructure(exc):
            raise
        # Raised before the token was used: nothing changed, the caller hears of it. Raised
        # after (by the drive): the session is failed with a typed error, and logged.
        info = core.store.find_token(token)
        record = core.store.load(info.session_id) if info is not None and info.used else None
        if record is None:
            raise
        record.token = token
        return contain(core, trigger, record, exc, claimed=False)
