"""Keyed delivery: `Runtime.deliver`, `deliver_many` and `discard`, and the one function that
resumes a group of waits (`resume_group`), which polls and deliveries share.

A `Wait(key=...)` registers its key with its wait (`WaitRecord.key`), so the outside world can
resume it by a name it knows. A delivery looks the key's live waits up through the store's
index and resumes each by its token; a key nothing waits on keeps the value as mail
(`SessionStore.post`), for the first Wait that reaches that key (see drive.py).

Nothing is written before every check passed: the key and the value (encodable, within
`max_value_bytes`), then every wait found against its session (the flow it runs with is
registered here, the waiting element accepts the value). A refused delivery raises its typed
error with the mailbox and every session as they were.

Racing a token: a wait that a `resume` by token (or a timeout) took between the look-up and
the delivery's use of the token is no longer live. The delivery is then handled as if it had
arrived after: posted again, so it goes to whatever waits on the key by then, or to the mailbox
when nothing does — never applied twice, never lost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from tarry.drivers.core import Core
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.drive.pump import settle, settle_many
from tarry.drivers.limits import check_actor, log
from tarry.drivers.rounds.boundary import contain, infrastructure
from tarry.drivers.sessions.batch import resume_keys
from tarry.drivers.sessions.resuming import prepare
from tarry.engine.describe import describe
from tarry.engine.errors import (
    InvalidArgument,
    InvalidResumeValue,
    SessionNotResumable,
    TokenAlreadyUsed,
    UnknownToken,
)
from tarry.snapshots.codec.pack import dumps
from tarry.snapshots.records import WaitRecord

#: Waiting rows read from the store at a time (an index range after the last token read).
PAGE = 1000
#: How many times a delivery that lost races to token resumes is posted again before it gives
#: up (each post either finds live waits or keeps the value as mail: one more is rare).
MAX_POSTS = 5

_RACED = (TokenAlreadyUsed, UnknownToken, SessionNotResumable)


@attrs.frozen
class Delivered:
    """What a delivery did: the outcome of each session it resumed, in the order of their
    first key, and the keys whose values were kept as mail."""

    outcomes: list[Outcome]
    kept: list[str]


def checked_key(key: Any) -> str:
    """`key` if it can name a wait (a non-empty str, as `Wait(key=...)` takes); else
    InvalidResumeValue naming it."""
    if type(key) is not str or not key:
        msg = f"a delivery key must be a non-empty str (got {describe(key)})"
        raise InvalidResumeValue(msg)
    return key


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


def deliver(core: Core, key: str, value: Any, actor: str | None = None) -> list[Outcome]:
    return deliver_many(core, {key: value}, actor).outcomes


def discard(core: Core, key: str) -> bool:
    """Drop the mail kept for `key`; whether there was any."""
    return core.store.discard(checked_key(key))


def deliver_many(core: Core, deliveries: Mapping[str, Any], actor: str | None = None) -> Delivered:
    """Resume every wait on each key with its value; keep the values of keys nothing waits on
    as mail. One resume per session touched (see `resume_group`); `actor` in each
    `run.resumed` event."""
    check_actor(actor)
    if not isinstance(deliveries, Mapping):
        msg = f"deliver_many takes a mapping {{key: value}} (got {describe(deliveries)})"
        raise InvalidArgument(msg)
    core.tokens.check()
    values: dict[str, Any] = {}
    blobs: dict[str, bytes] = {}
    for key, value in deliveries.items():
        checked_key(key)
        # The session's own copy, checked: NotSerializable / PayloadTooLarge naming the key.
        values[key], _ = core.take(value, f"delivery for key {key!r}")
        blobs[key] = dumps(values[key])
    found = {key: waiting(core, key=key) for key in values}
    group = {row.token: (row, values[key]) for key, rows in found.items() for row in rows}
    check_group(core, group)  # every refusal raises here, before anything is written
    kept: list[str] = []
    later: dict[str, tuple[WaitRecord, Any]] = {}
    now = core.clock.now()
    for key in values:
        if not found[key]:
            # Nothing waited when we looked: post keeps it as mail, unless a wait came since.
            for row in core.store.post(key, blobs[key], now):
                later[row.token] = (row, values[key])
            if not any(row.key == key for row, _ in later.values()):
                kept.append(key)
    if later:
        check_group(core, later)  # a wait that came meanwhile: checked like the others
        group.update(later)
    outcomes = _resume_posting(core, group, blobs, kept, actor)
    return Delivered(outcomes, kept)


def _resume_posting(
    core: Core,
    group: dict[str, tuple[WaitRecord, Any]],
    blobs: dict[str, bytes],
    kept: list[str],
    actor: str | None = None,
) -> list[Outcome]:
    """Resume the waits of `group`; the values of the keys whose every wait was taken by a
    token resume first are posted again (to the waits on the key by then, or kept as mail)."""
    outcomes: list[Outcome] = []
    for _ in range(MAX_POSTS):
        got, lost = resume_group(core, group, trigger="deliver", actor=actor)
        outcomes.extend(got)
        applied = {row.key for token, (row, _) in group.items() if token not in lost}
        keys = {row.key for token, (row, _) in group.items() if token in lost} - applied
        if not keys:
            return outcomes
        values = {row.key: value for row, value in group.values()}
        group = {}
        now = core.clock.now()
        for key in sorted(keys, key=str):
            rows = core.store.post(key, blobs[key], now)  # type: ignore[index]
            if not rows:
                kept.append(key)  # type: ignore[arg-type]
            for row in rows:
                group[row.token] = (row, values[key])
        if not group:
            return outcomes
        check_group(core, group)
    log().error(
        "deliver: the waits on %d keys were resumed by their tokens first %d times in a row; "
        "those values were not delivered",
        len(group),
        MAX_POSTS,
    )
    return outcomes


# --- resuming a group of waits ---------------------------------------------------------------


def check_group(core: Core, group: Mapping[str, tuple[WaitRecord, Any]]) -> None:
    """Raise the typed error of the first wait of `group` ({token key: (wait, value)}) that
    would refuse its value: its session's flow is not registered here (UnknownFlow,
    FlowMismatch), or the waiting element does not accept the value (InvalidResumeValue).
    Reads each session once; writes nothing. A session gone meanwhile is left to the resume,
    which finds its token unknown."""
    by_session: dict[str, list[tuple[WaitRecord, Any]]] = {}
    for row, value in group.values():
        by_session.setdefault(row.session_id, []).append((row, value))
    for sid, waits in by_session.items():
        record = core.store.load(sid)
        if record is None:
            continue
        flow = core.flows.flow_for(record, None, False)
        for row, value in waits:
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
    live any more (a token resume, a timeout or a cancel used them first: nothing done).

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
            except _RACED:
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
                    core, {k: (k, v) for k, v in left.items()}, trigger=trigger, actor=actor
                )
            )
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
    core: Core, token: str, value: Any, trigger: str, actor: str | None
) -> Outcome | None:
    try:
        return settle(prepare(core, token, None, False, value=value, trigger=trigger, actor=actor))
    except _RACED:
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
