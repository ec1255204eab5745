"""The SessionStore protocol every store implements (and the conformance suite checks)."""

from __future__ import annotations

import builtins
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from tarry.engine.errors import ConcurrentUpdate
from tarry.engine.state.events import Event
from tarry.snapshots.log_records import LogBatch, LogRecord
from tarry.snapshots.records import SessionRecord, TokenInfo, WaitRecord

if TYPE_CHECKING:
    from tarry.snapshots.mail import MailInfo, MailRecord
    from tarry.snapshots.tally import Totals

#: The statuses of ended sessions: the only ones `prune` deletes.
ENDED = ("completed", "cancelled", "failed")


def refusals(tokens: Sequence[str], used: Mapping[str, bool]) -> dict[str, str]:
    """Why `consume_tokens` refuses each token it refuses, given the used flag of each token
    the store knows (`used`): "duplicate" (given twice), "unknown" or "used"."""
    refused: dict[str, str] = {}
    seen: set[str] = set()
    for token in tokens:
        if token in seen:
            refused[token] = "duplicate"
        elif token not in used:
            refused[token] = "unknown"
        elif used[token]:
            refused[token] = "used"
        seen.add(token)
    return refused


class MailGone(ConcurrentUpdate):
    """A message a token's use was to consume is not queued any more: another delivery or a
    Wait took it first. Nothing was written."""


def kept_stop(stored: str | None, record: SessionRecord) -> str | None:
    """The stop request a save leaves stored: kept while the session runs or waits, unless
    the save honours it (`record.stop` names it: the drive stopped for it); cleared when the
    session ends."""
    if stored is None or stored == record.stop:
        return None
    return stored if record.status in ("running", "paused") else None


def due_now(wake_at: dt.datetime | None, now: dt.datetime) -> dt.datetime:
    """When a paused session that keeps a stop request is due: now, at the latest, so that a
    worker's timers round honours the request (timers.py)."""
    return now if wake_at is None or wake_at > now else wake_at


def stale(session_id: str, found: tuple[int, str] | None, version: int) -> ConcurrentUpdate | None:
    """Why `consume_token(..., version=version)` must not use a token whose session is at
    `found` (its version and status; None: gone), or None when it may."""
    if found is not None and found[0] == version and found[1] != "running":
        return None
    what = "gone" if found is None else f"at version {found[0]} ({found[1]})"
    msg = (
        f"session {session_id!r} is {what}, not at version {version} and waiting: "
        "it changed since that version was written"
    )
    return ConcurrentUpdate(msg)


@runtime_checkable
class SessionStore(Protocol):
    """Where sessions live. Every method is atomic and safe to call from several threads.

    Values (`put_values`/`get_value`/`get_values`) are a session's out-of-line lists — a
    ForEach's items and results — addressed by (session, key, index) and stored encoded.
    """

    # -- sessions --------------------------------------------------------------------------
    def create(
        self, record: SessionRecord, *, events: Sequence[Event] = (), parent: str | None = None
    ) -> None:
        """Insert a new session (version 0) and its first `events`, in one transaction;
        SessionExists (nothing written) if the id is taken. `parent`: the session whose Child
        element starts this one, which then lists it (`children`) from this transaction on,
        whether or not the parent's own drive ever writes again."""

    def children(self, session_id: str) -> builtins.list[str]:
        """The sessions created with `parent=session_id`, oldest first (an index range). A
        pruned parent's list goes with it; a pruned child stays listed."""

    def load(self, session_id: str) -> SessionRecord | None:
        """The session's record, or None."""

    def load_many(self, session_ids: Sequence[str]) -> dict[str, SessionRecord]:
        """`load` of many sessions in one read: each known session's record, by id (unknown
        ones are left out). What a delivery to many sessions checks its waits against."""

    def save(
        self,
        record: SessionRecord,
        expected_version: int,
        *,
        events: Sequence[Event] = (),
        values: Sequence[tuple[str, int, bytes]] = (),
        waits: Sequence[WaitRecord] = (),
        mail_done: Sequence[int] | None = None,
        logs: LogBatch | None = None,
        post: tuple[str, bytes] | None = None,
    ) -> int:
        """In one transaction: write `record` if the stored version is `expected_version`
        (else ConcurrentUpdate, nothing written), append `events`, put `values`
        (`(key, index, blob)`), and register `record.token` as a live token of the session.
        The stored stop request (`request_stop`) is kept while `record.status` is "running" or
        "paused", unless `record.stop` names it (the drive honoured it: cleared); an ended
        session's is cleared. A paused session that keeps one is due at `record.updated_at`
        at the latest, so that a worker honours it (a run that paused before it saw the
        request). Returns the new version (`expected_version + 1`).

        `waits`: each becomes a wait of the session (`waits`, `waiting`) and its token a live
        token of it. A token already known keeps its used flag and is never made live again
        (a used one gets no wait row). A wait stays until its token is used or the session
        ends: a save whose status is neither "paused" nor "running" drops every wait of the
        session and marks their tokens used (TokenAlreadyUsed, never UnknownToken, for them
        later). `mail_done`: ids of messages this session claimed (`claim_mail`) and whose effect
        this save records: they are deleted (consumed), and the session's other claims are
        released (queued again). None (a drive that claimed nothing) leaves its claims alone,
        unless the session ended: an ended session's claims are released. `post`: (key,
        value) of a message queued with the save (`post`), at `record.updated_at`: what a
        child's end leaves for its parent, written with the end or not at all.
        A paused session is due (`wake_at`) at the earliest of `record.wake_at` and the
        `wake_at` of each wait it keeps, those of earlier saves included: a save whose snapshot
        leaves waiting lanes out (parked in their wait rows) still wakes for their timers. The
        store finds that earliest through an index, reading no other wait.
        `logs`: log records captured by the drive, numbered after the session's last and
        appended; the session then keeps only its last `logs.keep` records (log_records.py)."""

    def delete(self, session_id: str) -> None:
        """Remove the session, its events, values, tokens, waits and logs, and release the
        messages it claimed (queued again: a claim is not a consumption). Unknown ids are
        ignored."""

    def list(
        self,
        *,
        status: str | None = None,
        flow: str | None = None,
        limit: int = 50,
        offset: int = 0,
        before: tuple[dt.datetime, str] | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        search: str | None = None,
    ) -> builtins.list[SessionRecord]:
        """Sessions newest first (by `created_at`, then id), filtered and paginated, without
        their state (`state` is b""): listing reads no snapshot and no event. `load` a session
        to read its state.

        `before`: a keyset cursor, the (`created_at`, session id) of the last row of the
        previous page: only rows after it in this order (stable whatever is created
        meanwhile). `since` <= `created_at` < `until`. `search`: sessions whose id starts
        with it or whose flow name contains it (case-sensitive; no wildcards)."""

    def prune(
        self,
        *,
        before: dt.datetime,
        statuses: Sequence[str] = ENDED,
        now: dt.datetime,
        limit: int = 1000,
        dry_run: bool = False,
    ) -> int:
        """Delete, in one transaction, up to `limit` ended sessions (status in `statuses`, which
        holds only ENDED ones) last updated before `before` and not leased at `now` (a failed
        session being resumed is), oldest first, with their events, values, tokens, waits,
        logs and tally; the messages they claimed are released.
        Returns how many. Never a running or paused session, whatever `statuses` says. With
        `dry_run`, counts them all instead and deletes nothing."""

    # -- events ----------------------------------------------------------------------------
    def append_events(self, session_id: str, events: Sequence[Event]) -> None:
        """Append events, which must continue the log without a gap (first seq = last + 1);
        otherwise, or for an unknown session, ConcurrentUpdate and nothing written."""

    def events(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        """The session's events with seq > after_seq, in order: the first `limit` of them (all
        when None). Reads only the page asked for (an index range scan), never the whole log."""

    # -- logs ------------------------------------------------------------------------------
    def logs(
        self, session_id: str, *, levelno: int = 0, after: int = 0, limit: int = 1000
    ) -> builtins.list[LogRecord] | None:
        """The session's kept log records with seq > `after` and level >= `levelno`, in order,
        at most `limit`; None when there is no such session."""

    def dropped_logs(self, session_id: str) -> int:
        """How many of the session's log records were dropped (over its bound): its first
        kept seq less one (0 for an unknown session or one without records)."""

    # -- reports ---------------------------------------------------------------------------
    def stats(
        self,
        *,
        flow: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
    ) -> Totals:
        """Sessions (of one flow, or all; created at `since` or later and before `until` when
        given) counted by status, and their node tallies added up
        (see tally.py): each session's tally is brought up to date from the events written since
        it was last, and kept. A session whose stored data cannot be read is logged and left
        out of the node totals (still counted by status)."""

    # -- out-of-line values ----------------------------------------------------------------
    def put_values(self, session_id: str, values: Sequence[tuple[str, int, bytes]]) -> None: ...

    def get_value(self, session_id: str, key: str, index: int) -> bytes | None: ...

    def get_values(self, session_id: str, key: str, stop: int) -> builtins.list[bytes]:
        """Blobs at indexes 0..stop-1 of `key`, in order (missing ones are skipped)."""

    # -- tokens ----------------------------------------------------------------------------
    def find_token(self, token: str) -> TokenInfo | None: ...

    def find_tokens(self, tokens: Sequence[str]) -> dict[str, TokenInfo]:
        """`find_token` of many tokens in one read: each known token's TokenInfo, by token
        (unknown ones are left out)."""

    def consume_token(
        self,
        token: str,
        *,
        owner: str | None = None,
        until: dt.datetime | None = None,
        events: Sequence[Event] = (),
        version: int | None = None,
        mail: int | None = None,
    ) -> bool:
        """Mark the token used. True for exactly one caller, ever; False if already used
        or unknown (and then nothing is written). In the same transaction, the winner sets
        the session's status to "running" (keeping any stop request, for its drive), takes its lease (when
        `owner` is given), appends `events` and drops the token's wait.

        `version`: use the token only while its session is still at that version and not
        running (no other token of it was used since): else ConcurrentUpdate, nothing written.
        A caller that checked a resume against the session as it saved it (see
        drivers/drive/statecache.py) uses the token in one call, without reading the session.
        `mail`: the id of an unclaimed message whose value `events` carry (a delivery): it is
        deleted in the same transaction, so the message is consumed exactly when its effect
        is recorded; MailGone (nothing written) when no such unclaimed message is left."""

    def consume_tokens(
        self,
        tokens: Sequence[str],
        *,
        owner: str | None = None,
        until: dt.datetime | None = None,
        events: Mapping[str, Sequence[Event]] = {},  # noqa: B006 - read only
        mail: Mapping[str, int] = {},  # noqa: B006 - read only
    ) -> dict[str, str]:
        """Use many tokens, of one or several sessions, all or nothing, in one transaction.

        On success (`{}`): every token is marked used and its wait dropped; every session they
        belong to is set "running" (a stop request kept), leased to `owner` until `until`
        when `owner` is given, and gets `events[session_id]` appended (they must continue its
        log, as in `append_events`: else ConcurrentUpdate, nothing written; events of sessions
        no token belongs to are not written). Otherwise NOTHING is written and the result names
        each offending token: "unknown", "used", or "duplicate" (given more than once).
        Single-winner with `consume_token`, other `consume_tokens` and `save`. `mail`: {token:
        message id} consumed with those tokens, as in `consume_token` (MailGone, nothing
        written, when one of them is no longer an unclaimed message)."""

    # -- waits and the mailbox ---------------------------------------------------------------
    def wait(self, token: str) -> WaitRecord | None:
        """The live wait of `token`, with its `lane`; None when it has none (unknown, used, or
        no wait of its own): one indexed read, whatever else waits."""

    def waits(self, session_id: str, *, limit: int | None = None) -> builtins.list[WaitRecord]:
        """The live waits of one session, with their `lane`s, by path then token; the first
        `limit` of them if given."""

    def waiting(
        self,
        *,
        kind: str | None = None,
        key: str | None = None,
        after: str | None = None,
        limit: int = 1000,
    ) -> builtins.list[WaitRecord]:
        """Live waits of every session, of `kind` and/or on `key` if given, by token, only
        tokens after `after` (the last token of the previous page): through an index, reading
        no snapshot and writing nothing (a poll of idle waits costs no write)."""

    def waiters(self, key: str, limit: int = 100) -> builtins.list[WaitRecord]:
        """The live waits on `key`, the one that has waited longest first (by when the save
        that registered it ran), at most `limit`: who takes a message. Writes nothing."""

    def waiters_many(
        self, keys: Sequence[str], limit: int = 100
    ) -> dict[str, builtins.list[WaitRecord]]:
        """`waiters` of many keys in one read: the live waits on each key, the one that has
        waited longest first, at most `limit` per key; keys that nothing waits on are left
        out. Writes nothing."""

    def post(self, key: str, value: bytes, at: dt.datetime, *, target: str | None = None) -> int:
        """Queue one message on `key` (a key is a FIFO queue: a later post never replaces an
        earlier one) and return its id; ids only grow. `target`: a session that waits on the
        key but was busy when the message came; its drive asks for such messages when it
        next saves (`queued(session_id=...)`). Writes the message row only."""

    def claim_mail(
        self, key: str, session_id: str, skip: Sequence[int] = ()
    ) -> tuple[int, bytes] | None:
        """A message on `key` for a Wait of `session_id` that its drive reached: the oldest
        one this session claimed earlier whose id is not in `skip` (a drive that died before
        it saved finds its claims again on recovery), else the oldest unclaimed one, claimed
        for the session now (no other session or delivery takes it while it is claimed).
        `(id, value)`, or None when the key holds no message it may take. The claim ends with
        the session's next `save`: the ids in its `mail_done` are deleted (consumed), its
        other claims released (queued again, in their place)."""

    def queued(
        self,
        *,
        key: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> builtins.list[MailRecord]:
        """Unclaimed messages, oldest first: on `key`, or targeted at `session_id` (see
        `post`), at most `limit`. Reads through an index; writes nothing."""

    def queued_keys(self, keys: Sequence[str]) -> set[str]:
        """Which of `keys` hold an unclaimed message, in one read (a probe of the queue's index
        per key): a delivery's message must not overtake one queued ahead of it. Writes
        nothing."""

    def pending(
        self, limit: int = 100, after: int = 0
    ) -> builtins.list[tuple[WaitRecord, MailRecord]]:
        """Live waits on keys that hold an unclaimed message, each with the oldest such
        message of its key (one pair per key: the wait that has waited longest), oldest
        message first, those whose message id is above `after` only: what a worker round
        delivers when a delivery and a wait crossed without meeting (a crash between a save
        and its check for mail); `after` pages past pairs a round could not deliver. Reads
        through indexes; writes nothing."""

    def discard(self, key: str) -> int:
        """Drop the key's unclaimed messages; how many."""

    def mailbox(
        self, *, prefix: str | None = None, after: str | None = None, limit: int = 100
    ) -> builtins.list[MailInfo]:
        """Keys that hold unclaimed messages, by key (only keys starting with `prefix`, and
        after `after`, when given), each with its count and oldest message's time."""

    def purge_mail(self, before: dt.datetime, limit: int = 1000) -> int:
        """Drop up to `limit` unclaimed messages posted before `before`, oldest first; how
        many (the mailbox's time to live)."""

    # -- control ---------------------------------------------------------------------------
    def request_stop(self, session_id: str, stop: str) -> str | None:
        """Store a stop request (`"abort"` or `"cancel"`) for a running session; the process
        running it reads it with `stop_requested`. Returns the session's status: "running"
        when the request was stored, another status when it was not (nothing written), None
        for an unknown session. A later request replaces an earlier one."""

    def stop_requested(self, session_id: str) -> str | None:
        """The stop request stored for a session, or None."""

    # -- timers and leases -----------------------------------------------------------------
    def due(self, now: dt.datetime, limit: int = 100) -> builtins.list[SessionRecord]:
        """Paused sessions whose `wake_at` <= now, earliest first."""

    def claim(self, session_id: str, owner: str, until: dt.datetime, now: dt.datetime) -> bool:
        """Take the lease of a session if it is free or expired at `now`, or already `owner`'s.
        True for one claimant at a time."""

    def release(self, session_id: str, owner: str) -> None:
        """Give up the lease if `owner` holds it."""

    def claim_due(
        self,
        now: dt.datetime,
        owner: str,
        until: dt.datetime,
        *,
        limit: int = 100,
        after: tuple[dt.datetime, str] | None = None,
    ) -> builtins.list[SessionRecord]:
        """Claim up to `limit` paused sessions that are due and free, and return them with
        their new lease, earliest first by (`wake_at`, session id).

        Due: `wake_at` <= `now`. Free: a live token that was not used (a session whose token
        was used is being resumed, or its resumer died: `expired` finds that one), and no lease
        or one that ended at or before `now` (a lease of `owner`'s own is not free here, unlike
        in `claim`). Each is leased to `owner` until `until` in the same transaction. `after`
        is a cursor, the (`wake_at`, session id) of the last row of a previous page: only rows
        after it are claimed, so a caller pages past sessions it could not handle. Rows that
        another transaction holds are skipped, never waited for: concurrent claimants get
        disjoint sessions, and none queues behind another."""

    def claim_waits(
        self, tokens: Sequence[str], owner: str, until: dt.datetime, now: dt.datetime
    ) -> dict[str, SessionRecord]:
        """Claim the sessions of the live waits among `tokens`, for a round about to resume
        them (an adapter's answers): {token: its session's record, with its new lease}, for
        each of `tokens` that is a live wait of a session that is paused and free — no lease,
        or one that ended at or before `now` (a lease of `owner`'s own is not free here, as
        in `claim_due`). Each such session is leased to `owner` until `until` in the same
        transaction. Tokens unknown or used, of sessions not paused (running, ended) or held by
        another lease are left out, and their sessions are not written.

        Rows that another transaction holds are skipped, never waited for: concurrent rounds
        that found the same ready waits claim disjoint sessions, and each resumes only what it
        claimed, so no token is tried twice. A claim that is not followed by a resume is given
        back with `release`, or lapses at `until` (its worker died)."""

    def expired(
        self, now: dt.datetime, limit: int = 100, *, after: tuple[dt.datetime, str] | None = None
    ) -> builtins.list[SessionRecord]:
        """Sessions whose lease ended at or before `now` (their worker died mid-run), earliest
        lease first by (`lease_until`, session id); with `after`, only those after that pair."""

    # -- store-wide marks ------------------------------------------------------------------
    def mark(self, name: str) -> None:
        """Record the mark `name` for the whole store (once; marking again changes nothing).
        Marks are never removed: e.g. "signed_tokens", written by the first Runtime with a
        secret that uses the store (see drivers/tokens.py)."""

    def marked(self, name: str) -> bool:
        """Whether `mark(name)` was ever called on this store."""
