"""MemoryStore's waits, the mailbox and batches of tokens (a mixin of MemoryStore).

Waits are kept by token, with sorted token lists per kind, per key and overall, so that a
poll pages through them in token order without sorting. The mailbox is a dict keyed by
(key, the session that claimed it or "" while unclaimed).
"""

from __future__ import annotations

import bisect
import builtins
import datetime as dt
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from tarry.engine.state.events import Event
from tarry.snapshots.memory.entry import _encode_batch, _Entry
from tarry.snapshots.records import WaitRecord, encode_path
from tarry.snapshots.store import refusals

#: The claimant of mail that no session claimed yet.
UNCLAIMED = ""


class WaitsAndMail:
    """The wait, mailbox and many-token methods of MemoryStore."""

    _lock: threading.RLock
    _sessions: dict[str, _Entry]
    _tokens: dict[str, str]
    _used: set[str]
    _check_seq: Any
    _append: Any
    _add_token: Any

    def _init_waits(self) -> None:
        self._waits: dict[str, WaitRecord] = {}
        self._all_waits: list[str] = []  # every live wait's token, sorted
        self._by_kind: dict[str, list[str]] = {}  # sorted tokens per kind
        self._by_key: dict[str, list[str]] = {}  # sorted tokens per key
        # (key, claimant or UNCLAIMED) -> (value, posted at)
        self._mail: dict[tuple[str, str], tuple[bytes, dt.datetime]] = {}

    # -- tokens ----------------------------------------------------------------------------
    def consume_tokens(
        self,
        tokens: Sequence[str],
        *,
        owner: str | None = None,
        until: dt.datetime | None = None,
        events: Mapping[str, Sequence[Event]] = {},  # noqa: B006 - read only
    ) -> dict[str, str]:
        with self._lock:
            known = {t: t in self._used for t in tokens if t in self._tokens}
            refused = refusals(tokens, known)
            if refused:
                return refused
            touched = list(dict.fromkeys(self._tokens[t] for t in tokens))
            entries = [(sid, self._sessions.get(sid)) for sid in touched]
            for sid, entry in entries:  # every check before any write
                if entry is not None:
                    self._check_seq(entry, events.get(sid, ()))
            for sid, entry in entries:
                if entry is None:
                    continue
                entry.record.status = "running"
                entry.record.stop = None
                if owner is not None:
                    entry.record.lease_owner = owner
                    entry.record.lease_until = until
                given = events.get(sid, ())
                if given:
                    self._append(entry, given, _encode_batch(given))
            for token in tokens:
                self._used.add(token)
                self._drop_wait(token)
            return {}

    # -- waits -----------------------------------------------------------------------------
    def waits(self, session_id: str) -> builtins.list[WaitRecord]:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None or not entry.waits:
                return []
            found = [self._waits[t] for t in entry.waits]
        found.sort(key=_by_path)
        return found

    def waiting(
        self,
        *,
        kind: str | None = None,
        key: str | None = None,
        after: str | None = None,
        limit: int = 1000,
    ) -> builtins.list[WaitRecord]:
        with self._lock:
            if key is not None:
                tokens = self._by_key.get(key, [])
            elif kind is not None:
                tokens = self._by_kind.get(kind, [])
            else:
                tokens = self._all_waits
            start = 0 if after is None else bisect.bisect_right(tokens, after)
            found: builtins.list[WaitRecord] = []
            for token in tokens[start:]:
                if len(found) >= limit:
                    break
                wait = self._waits[token]
                if kind is None or wait.kind == kind:
                    found.append(wait)
            return found

    # -- the mailbox -----------------------------------------------------------------------
    def post(self, key: str, value: bytes, at: dt.datetime) -> builtins.list[WaitRecord]:
        with self._lock:
            live = self._by_key.get(key)
            if live:
                return [self._waits[t] for t in live]
            self._mail[key, UNCLAIMED] = (bytes(value), at)
            return []

    def take_mail(self, keys: Sequence[str], session_id: str) -> dict[str, bytes]:
        taken: dict[str, bytes] = {}
        with self._lock:
            entry = self._sessions.get(session_id)
            for key in keys:
                mine = self._mail.get((key, session_id))
                if mine is None:
                    free = self._mail.pop((key, UNCLAIMED), None)
                    if free is None:
                        continue
                    self._mail[key, session_id] = mine = free
                    if entry is not None:
                        entry.mail.add(key)
                taken[key] = mine[0]
        return taken

    def discard(self, key: str) -> bool:
        with self._lock:
            return self._mail.pop((key, UNCLAIMED), None) is not None

    def mail(self, key: str) -> bytes | None:
        with self._lock:
            found = self._mail.get((key, UNCLAIMED))
            return None if found is None else found[0]

    # -- internals (under the lock) --------------------------------------------------------
    def _save_waits(
        self, entry: _Entry, status: str, waits: Sequence[WaitRecord], mail_done: Sequence[str]
    ) -> None:
        """What a save does to the session's waits and claimed mail."""
        for wait in waits:
            if wait.token not in self._tokens:
                self._add_token(entry, wait.token)
            if wait.token not in self._used and self._tokens[wait.token] == entry.record.session_id:
                self._add_wait(entry, wait)
        if status != "paused" and status != "running":  # the session ended
            for token in list(entry.waits):
                self._used.add(token)
                self._drop_wait(token)
        sid = entry.record.session_id
        for key in mail_done:
            if self._mail.pop((key, sid), None) is not None:
                entry.mail.discard(key)

    def _forget_waits(self, entry: _Entry) -> None:
        """Drop a deleted session's waits and the mail it claimed."""
        for token in list(entry.waits):
            self._drop_wait(token)
        sid = entry.record.session_id
        for key in entry.mail:
            self._mail.pop((key, sid), None)
        entry.mail.clear()

    def _add_wait(self, entry: _Entry, wait: WaitRecord) -> None:
        token = wait.token
        if token in self._waits:
            self._unindex(self._waits[token])
        self._waits[token] = wait
        entry.waits.add(token)
        bisect.insort(self._all_waits, token)
        bisect.insort(self._by_kind.setdefault(wait.kind, []), token)
        if wait.key is not None:
            bisect.insort(self._by_key.setdefault(wait.key, []), token)

    def _drop_wait(self, token: str) -> None:
        wait = self._waits.pop(token, None)
        if wait is None:
            return
        self._unindex(wait)
        entry = self._sessions.get(wait.session_id)
        if entry is not None:
            entry.waits.discard(token)

    def _unindex(self, wait: WaitRecord) -> None:
        _remove(self._all_waits, wait.token)
        _remove(self._by_kind, wait.token, wait.kind)
        if wait.key is not None:
            _remove(self._by_key, wait.token, wait.key)


def _remove(where: Any, token: str, name: str | None = None) -> None:
    """Take `token` out of a sorted list (or, with `name`, out of the list under that name,
    dropping the list when it empties)."""
    tokens = where if name is None else where.get(name)
    if tokens is None:
        return
    i = bisect.bisect_left(tokens, token)
    if i < len(tokens) and tokens[i] == token:
        del tokens[i]
    if name is not None and not tokens:
        del where[name]


def _by_path(wait: WaitRecord) -> tuple[bytes, str]:
    # By the path's encoding, as the durable stores order their path column (byte order).
    return (encode_path(wait.path), wait.token)
