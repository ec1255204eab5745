"""MemoryStore's tokens, stop requests, timers, leases and marks (a mixin of MemoryStore)."""

from __future__ import annotations

import builtins
import datetime as dt
import threading
from collections.abc import Sequence
from typing import Any

from tarry.engine.state.events import Event, EventLog, rows_of
from tarry.snapshots.memory.entry import _copy, _encode_batch, _Entry
from tarry.snapshots.records import SessionRecord, TokenInfo, WaitRecord
from tarry.snapshots.store import stale


def _sid(known: Any) -> str:
    """The session of a token, from what the store's `_tokens` holds for it (its id, or
    while the token has a live wait, that wait)."""
    return known if type(known) is str else known.session_id


_new = object.__new__
_set_info_sid = TokenInfo.__dict__["session_id"].__set__
_set_info_used = TokenInfo.__dict__["used"].__set__


def _token_info(session_id: str, used: bool) -> TokenInfo:
    """`TokenInfo(session_id, used)`, its slots set directly: a cold resume reads one (attrs'
    frozen `__init__` sets each field through `object.__setattr__`)."""
    info = _new(TokenInfo)
    _set_info_sid(info, session_id)
    _set_info_used(info, used)
    return info


class TokensAndLeases:
    """The token, control, timer, lease and mark methods of MemoryStore."""

    _lock: threading.RLock
    _sessions: dict[str, _Entry]
    _tokens: dict[str, str | WaitRecord]
    _used: set[str]
    _wait: Any
    _marks: set[str]
    _check_seq: Any
    _append: Any
    _drop_wait: Any
    _check_unclaimed: Any
    _consume: Any

    # -- tokens ----------------------------------------------------------------------------
    def find_token(self, token: str) -> TokenInfo | None:
        with self._lock:
            known = self._tokens.get(token)
            return None if known is None else _token_info(_sid(known), token in self._used)

    def find_tokens(self, tokens: Sequence[str]) -> dict[str, TokenInfo]:
        with self._lock:
            known = self._tokens
            return {
                token: TokenInfo(_sid(known[token]), token in self._used)
                for token in tokens
                if token in known
            }

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
        if events and type(events) is not EventLog:
            # A resume's own events (`run.resumed`): made rows once, here, rather than once
            # each by the encoder, the seq check and the append (the same bytes either way).
            events = EventLog(events[0].session_id, rows_of(events))
        batch = _encode_batch(events) if events else None
        with self._lock:
            known = self._tokens.get(token)
            if known is None or token in self._used:
                return False
            sid = known if type(known) is str else known.session_id
            entry = self._sessions.get(sid)
            if version is not None:
                found = (entry.record.version, entry.record.status) if entry else None
                if (moved := stale(sid, found, version)) is not None:
                    raise moved
            if mail is not None:
                self._check_unclaimed(mail)
            if entry is not None:
                self._check_seq(entry, events)
                entry.record.status = "running"  # a stop request stays for the drive
                if owner is not None:
                    entry.record.lease_owner = owner
                    entry.record.lease_until = until
                self._append(entry, events, batch)
            self._used.add(token)
            self._drop_wait(token)
            if mail is not None:
                self._consume(mail)
            return True

    # -- control ---------------------------------------------------------------------------
    def request_stop(self, session_id: str, stop: str) -> str | None:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                return None
            if entry.record.status == "running":
                entry.record.stop = stop
            return entry.record.status

    def stop_requested(self, session_id: str) -> str | None:
        with self._lock:
            entry = self._sessions.get(session_id)
            return None if entry is None else entry.record.stop

    # -- timers and leases -----------------------------------------------------------------
    def due(self, now: dt.datetime, limit: int = 100) -> builtins.list[SessionRecord]:
        with self._lock:
            rows = [
                e.record
                for e in self._sessions.values()
                if e.record.status == "paused"
                and e.record.wake_at is not None
                and e.record.wake_at <= now
            ]
            rows.sort(key=lambda r: (r.wake_at, r.session_id))
            return [_copy(r) for r in rows[:limit]]

    def claim(self, session_id: str, owner: str, until: dt.datetime, now: dt.datetime) -> bool:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                return False
            rec = entry.record
            free = rec.lease_owner is None or rec.lease_until is None or rec.lease_until <= now
            if not (free or rec.lease_owner == owner):
                return False
            rec.lease_owner = owner
            rec.lease_until = until
            return True

    def release(self, session_id: str, owner: str) -> None:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is not None and entry.record.lease_owner == owner:
                entry.record.lease_owner = None
                entry.record.lease_until = None

    def claim_due(
        self,
        now: dt.datetime,
        owner: str,
        until: dt.datetime,
        *,
        limit: int = 100,
        after: tuple[dt.datetime, str] | None = None,
    ) -> builtins.list[SessionRecord]:
        with self._lock:
            rows = [
                e.record
                for e in self._sessions.values()
                if e.record.status == "paused"
                and e.record.wake_at is not None
                and e.record.wake_at <= now
                and (after is None or (e.record.wake_at, e.record.session_id) > after)
                and e.record.token is not None
                and e.record.token not in self._used
                and (e.record.lease_until is None or e.record.lease_until <= now)
            ]
            rows.sort(key=lambda r: (r.wake_at, r.session_id))
            claimed = rows[:limit]
            for rec in claimed:
                rec.lease_owner = owner
                rec.lease_until = until
            return [_copy(r) for r in claimed]

    def claim_waits(
        self, tokens: Sequence[str], owner: str, until: dt.datetime, now: dt.datetime
    ) -> dict[str, SessionRecord]:
        with self._lock:
            claimed: dict[str, SessionRecord] = {}
            held: dict[str, SessionRecord | None] = {}  # by session: its copy, or None
            for token in tokens:
                wait = self._wait(token)
                if wait is None:
                    continue  # unknown or used
                sid = wait.session_id
                if sid not in held:
                    entry = self._sessions.get(sid)
                    rec = entry.record if entry is not None else None
                    held[sid] = None
                    if (
                        rec is not None
                        and rec.status == "paused"
                        and (rec.lease_until is None or rec.lease_until <= now)
                    ):
                        rec.lease_owner = owner
                        rec.lease_until = until
                        held[sid] = _copy(rec)
                found = held[sid]
                if found is not None:
                    claimed[token] = found
            return claimed

    def expired(
        self, now: dt.datetime, limit: int = 100, *, after: tuple[dt.datetime, str] | None = None
    ) -> builtins.list[SessionRecord]:
        with self._lock:
            rows = [
                e.record
                for e in self._sessions.values()
                if e.record.lease_until is not None
                and e.record.lease_until <= now
                and (after is None or (e.record.lease_until, e.record.session_id) > after)
            ]
            rows.sort(key=lambda r: (r.lease_until, r.session_id))
            return [_copy(r) for r in rows[:limit]]

    # -- store-wide marks --------------------------------------------------------------------
    def mark(self, name: str) -> None:
        with self._lock:
            self._marks.add(name)

    def marked(self, name: str) -> bool:
        return name in self._marks
