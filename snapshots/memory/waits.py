"""MemoryStore's waits, the mailbox and batches of tokens (a mixin of MemoryStore).

Waits are kept by token, with sorted token lists per kind, per key and overall, so that a
poll pages through them in token order without sorting. The mailbox is a queue of messages per
key: each message by its id (ids only grow), the unclaimed ids of each key in order, and the ids
each session claimed (see `SessionStore.claim_mail`).
"""

from __future__ import annotations

import bisect
import builtins
import datetime as dt
import heapq
import itertools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from tarry.engine.state.events import Event
from tarry.snapshots.codec.pack import dumps
from tarry.snapshots.mail import MailInfo, MailRecord
from tarry.snapshots.memory.entry import _encode_batch, _Entry
from tarry.snapshots.records import WaitRecord, encode_path
from tarry.snapshots.store import MailGone, refusals

#: The claimant of a message that no session claimed yet.
UNCLAIMED = ""

#: How many paths of waits a store keeps to share (see `_shared_parts`): a flow has a few.
SHARED_PATHS = 4096

#: The payload of a Gate without a message or an assignee, as `wait_record` encodes it.
_GATE_PAYLOAD = dumps({"message": "", "assignee": None})


_STR = frozenset((str,))


def _sid(known: str | WaitRecord) -> str:
    """The session of a token, from what `_tokens` holds for it."""
    return known if type(known) is str else known.session_id  # type: ignore[union-attr]


def _no_waits(entry: _Entry) -> None:
    entry.ordered = None
    if entry.extra is not None:  # (not the property: this is every resume's path)
        entry.extra.wakes = None


class _Message:
    """A queued message (mutable: its claimant changes)."""

    __slots__ = ("id", "key", "value", "at", "claimed_by", "target")

    def __init__(self, id: int, key: str, value: bytes, at: dt.datetime, target: str | None):
        self.id = id
        self.key = key
        self.value = value
        self.at = at
        self.claimed_by = UNCLAIMED
        self.target = target

    def record(self) -> MailRecord:
        return MailRecord(self.id, self.key, self.value, self.at, self.target)


class WaitsAndMail:
    """The wait, mailbox and many-token methods of MemoryStore."""

    _lock: threading.RLock
    _sessions: dict[str, _Entry]
    _tokens: dict[str, str | WaitRecord]
    _used: set[str]
    _check_seq: Any
    _append: Any
    _add_token: Any

    def _init_waits(self) -> None:
        self._all_waits: list[str] = []  # every live wait's token, sorted
        self._by_kind: dict[str, list[str]] = {}  # sorted tokens per kind
        self._by_key: dict[str, list[str]] = {}  # sorted tokens per key
        # tokens per key in the order their waits were registered (who waited longest)
        self._fifo: dict[str, dict[str, None]] = {}
        self._mail: dict[int, _Message] = {}  # every message, by id
        self._queue: dict[str, list[int]] = {}  # the unclaimed ids of each key, in order
        self._claims: dict[str, set[int]] = {}  # the ids each session claimed
        self._targeted: dict[str, list[int]] = {}  # ids posted for a busy session
        self._next_mail = 1
        self._paths: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # see _shared_parts

    # -- tokens ----------------------------------------------------------------------------
    def consume_tokens(
        self,
        tokens: Sequence[str],
        *,
        owner: str | None = None,
        until: dt.datetime | None = None,
        events: Mapping[str, Sequence[Event]] = {},  # noqa: B006 - read only
        mail: Mapping[str, int] = {},  # noqa: B006 - read only
    ) -> dict[str, str]:
        with self._lock:
            known = {t: t in self._used for t in tokens if t in self._tokens}
            refused = refusals(tokens, known)
            if refused:
                return refused
            for token in tokens:
                if token in mail:
                    self._check_unclaimed(mail[token])
            touched = list(dict.fromkeys(_sid(self._tokens[t]) for t in tokens))
            entries = [(sid, self._sessions.get(sid)) for sid in touched]
            for sid, entry in entries:  # every check before any write
                if entry is not None:
                    self._check_seq(entry, events.get(sid, ()))
            for sid, entry in entries:
                if entry is None:
                    continue
                entry.record.status = "running"  # a stop request stays for the drive
                if owner is not None:
                    entry.record.lease_owner = owner
                    entry.record.lease_until = until
                given = events.get(sid, ())
                if given:
                    self._append(entry, given, _encode_batch(given))
            for token in tokens:
                self._used.add(token)
                self._drop_wait(token)
                if token in mail:
                    self._consume(mail[token])
            return {}

    # -- waits -----------------------------------------------------------------------------
    def wait(self, token: str) -> WaitRecord | None:
        with self._lock:
            return self._wait(token)

    def waits(self, session_id: str, *, limit: int | None = None) -> builtins.list[WaitRecord]:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None or not entry.ordered:
                return []
            return [self._tokens[t] for t in _tokens_in(entry, limit)]  # type: ignore[misc]

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
                wait: WaitRecord = self._tokens[token]  # type: ignore[assignment]
                if kind is None or wait.kind == kind:
                    found.append(wait)
            return found

    def waiters(self, key: str, limit: int = 100) -> builtins.list[WaitRecord]:
        with self._lock:
            tokens = list(self._fifo.get(key, ()))[:limit]
            return [self._tokens[t] for t in tokens]  # type: ignore[misc]

    # -- the mailbox -----------------------------------------------------------------------
    def post(self, key: str, value: bytes, at: dt.datetime, *, target: str | None = None) -> int:
        with self._lock:
            mid = self._next_mail
            self._next_mail += 1
            self._mail[mid] = _Message(mid, key, bytes(value), at, target)
            self._queue.setdefault(key, []).append(mid)  # the largest id yet: stays in order
            if target is not None:
                self._targeted.setdefault(target, []).append(mid)
            return mid

    def claim_mail(
        self, key: str, session_id: str, skip: Sequence[int] = ()
    ) -> tuple[int, bytes] | None:
        with self._lock:
            mine = [
                m
                for m in self._claims.get(session_id, ())
                if m not in skip and self._mail[m].key == key
            ]
            if mine:
                message = self._mail[min(mine)]
                return message.id, message.value
            queue = self._queue.get(key)
            if not queue:
                return None
            message = self._mail[queue[0]]
            self._unqueue(message)
            message.claimed_by = session_id
            self._claims.setdefault(session_id, set()).add(message.id)
            return message.id, message.value

    def queued(
        self,
        *,
        key: str | None = None,
        session_id: str | None = None,
        limit: int = 100,
    ) -> builtins.list[MailRecord]:
        with self._lock:
            if key is not None:
                ids = self._queue.get(key, [])[:limit]
            else:
                ids = self._targeted.get(session_id or "", [])[:limit]
            return [self._mail[m].record() for m in ids]

    def pending(
        self, limit: int = 100, after: int = 0
    ) -> builtins.list[tuple[WaitRecord, MailRecord]]:
        with self._lock:
            found = [
                (self._tokens[next(iter(self._fifo[key]))], self._mail[ids[0]].record())
                for key, ids in self._queue.items()
                if ids and ids[0] > after and self._fifo.get(key)
            ]
        found.sort(key=lambda pair: pair[1].id)
        return found[:limit]

    def discard(self, key: str) -> int:
        with self._lock:
            ids = list(self._queue.get(key, ()))
            for m in ids:
                self._consume(m)
            return len(ids)

    def mailbox(
        self, *, prefix: str | None = None, after: str | None = None, limit: int = 100
    ) -> builtins.list[MailInfo]:
        with self._lock:
            keys = sorted(
                k
                for k, ids in self._queue.items()
                if ids and (prefix is None or k.startswith(prefix)) and (after is None or k > after)
            )[:limit]
            return [
                MailInfo(k, len(self._queue[k]), min(self._mail[m].at for m in self._queue[k]))
                for k in keys
            ]

    def purge_mail(self, before: dt.datetime, limit: int = 1000) -> int:
        with self._lock:
            old = sorted(
                (m.at, m.id)
                for m in self._mail.values()
                if m.claimed_by == UNCLAIMED and m.at < before
            )[:limit]
            for _, mid in old:
                self._consume(mid)
            return len(old)

    # -- many keys at once ------------------------------------------------------------------
    def waiters_many(
        self, keys: Sequence[str], limit: int = 100
    ) -> dict[str, builtins.list[WaitRecord]]:
        with self._lock:
            return {
                key: [self._tokens[t] for t in itertools.islice(self._fifo[key], limit)]
                for key in dict.fromkeys(keys)
                if self._fifo.get(key)
            }

    def queued_keys(self, keys: Sequence[str]) -> set[str]:
        with self._lock:
            return {key for key in keys if self._queue.get(key)}

    # -- internals (under the lock) --------------------------------------------------------
    def _save_waits(
        self,
        entry: _Entry,
        status: str,
        waits: Sequence[WaitRecord],
        mail_done: Sequence[int] | None,
    ) -> None:
        """What a save does to the session's waits and claimed mail."""
        tokens = self._tokens
        for wait in waits:
            token = wait.token
            known = tokens.get(token)
            if known is None:
                self._add_token(entry, token)
                known = tokens[token]
            if (
                token not in self._used
                and (
                    known if type(known) is str else known.session_id  # type: ignore[union-attr]
                )
                == entry.record.session_id
            ):
                self._add_wait(entry, wait)
        ended = status != "paused" and status != "running"
        if ended and entry.ordered:
            for token in _tokens_in(entry):
                self._used.add(token)
                self._drop_wait(token)
        if mail_done is not None or ended:
            self._settle_claims(entry.record.session_id, mail_done or ())

    def _earliest(self, entry: _Entry) -> dt.datetime | None:
        """When the earliest live wait of the session is due: the top of its heap of wake
        times, once the tops whose waits are gone are popped (each is popped once)."""
        wakes = entry.wakes
        while wakes and self._wait(wakes[0][1]) is None:  # (tokens are never reused)
            heapq.heappop(wakes)
        return wakes[0][0] if wakes else None

    def _forget_waits(self, entry: _Entry) -> None:
        """Drop a deleted session's waits and the mail it claimed."""
        for token in _tokens_in(entry):
            self._drop_wait(token)
        self._settle_claims(entry.record.session_id, ())

    def _settle_claims(self, session_id: str, done: Sequence[int]) -> None:
        """A session's save (or end): the messages it names in `done` are consumed, its other
        claims released, queued again in their place."""
        for mid in self._claims.pop(session_id, ()):
            message = self._mail[mid]
            if mid in done:
                self._consume(mid)
                continue
            message.claimed_by = UNCLAIMED
            bisect.insort(self._queue.setdefault(message.key, []), mid)
            if message.target is not None:
                bisect.insort(self._targeted.setdefault(message.target, []), mid)

    def _check_unclaimed(self, mid: int) -> None:
        message = self._mail.get(mid)
        if message is None or message.claimed_by != UNCLAIMED:
            msg = f"message {mid} is no longer queued: another delivery or Wait took it"
            raise MailGone(msg)

    def _unqueue(self, message: _Message) -> None:
        """Take an unclaimed message out of its key's queue (and its target's list)."""
        _remove_id(self._queue, message.key, message.id)
        if message.target is not None:
            _remove_id(self._targeted, message.target, message.id)

    def _consume(self, mid: int) -> None:
        message = self._mail.pop(mid)
        if message.claimed_by == UNCLAIMED:
            self._unqueue(message)

    def _add_wait(self, entry: _Entry, wait: WaitRecord) -> None:
        wait = self._shared_parts(wait)
        token = wait.token
        if type(self._tokens.get(token)) is WaitRecord:
            self._drop_wait(token)
        self._tokens[token] = wait
        ordered = entry.ordered
        if ordered is None:
            entry.ordered = token
        else:
            if isinstance(ordered, str):
                ordered = entry.ordered = [_by_path(self._tokens[ordered])]  # type: ignore[arg-type]
            bisect.insort(ordered, _by_path(wait))
        if wait.wake_at is not None:
            if entry.wakes is None:
                entry.wakes = []
            heapq.heappush(entry.wakes, (wait.wake_at, token))
        bisect.insort(self._all_waits, token)
        bisect.insort(self._by_kind.setdefault(wait.kind, []), token)
        if wait.key is not None:
            bisect.insort(self._by_key.setdefault(wait.key, []), token)
            self._fifo.setdefault(wait.key, {})[token] = None

    def _wait(self, token: str) -> WaitRecord | None:
        """The live wait of `token`, if it has one."""
        found = self._tokens.get(token)
        return found if type(found) is WaitRecord else None

    def _shared_parts(self, wait: WaitRecord) -> WaitRecord:
        """`wait`, or an equal record that shares its path and payload with other waits: a
        path of names only (no iteration index) is the flow's, kept once per store (at most
        SHARED_PATHS of them); a payload that holds no value (a Gate's without a message) is
        kept once per process. Values of a session are never kept beyond it."""
        path, payload = wait.path, wait.payload
        try:
            shared = self._paths.get(path)
        except TypeError:  # a part that cannot be hashed: kept as it is
            shared = None
        else:
            if (
                shared is None
                and len(self._paths) < SHARED_PATHS
                and _STR.issuperset(map(type, path))
            ):
                shared = self._paths[path] = path
        if payload == _GATE_PAYLOAD:
            payload = _GATE_PAYLOAD
        if (shared is None or shared is path) and payload is wait.payload:
            return wait
        return WaitRecord(
            wait.token,
            wait.session_id,
            path if shared is None else shared,
            wait.kind,
            wait.key,
            wait.wake_at,
            wait.reason,
            payload,
            wait.lane,
        )

    def _drop_wait(self, token: str) -> None:
        wait = self._tokens.get(token)
        if type(wait) is not WaitRecord:
            return
        self._tokens[token] = wait.session_id
        self._unindex(wait)
        entry = self._sessions.get(wait.session_id)
        ordered = None if entry is None else entry.ordered
        if not ordered:
            return
        if isinstance(ordered, str):
            if ordered == token:  # (a wake left in the heap is a gone one)
                entry.ordered = None
                if entry.extra is not None:  # in place, not by the property: every resume
                    entry.extra.wakes = None
            return
        _remove(ordered, _by_path(wait))
        if not ordered:
            _no_waits(entry)

    def _unindex(self, wait: WaitRecord) -> None:
        _remove(self._all_waits, wait.token)
        _remove(self._by_kind, wait.token, wait.kind)
        if wait.key is not None:
            _remove(self._by_key, wait.token, wait.key)
            fifo = self._fifo.get(wait.key)
            if fifo is not None:
                fifo.pop(wait.token, None)
                if not fifo:
                    del self._fifo[wait.key]


def _remove(where: Any, token: Any, name: str | None = None) -> None:
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


def _remove_id(where: dict[Any, list[int]], name: Any, mid: int) -> None:
    ids = where.get(name)
    if ids is None:
        return
    i = bisect.bisect_left(ids, mid)
    if i < len(ids) and ids[i] == mid:
        del ids[i]
    if not ids:
        del where[name]


def _tokens_in(entry: _Entry, limit: int | None = None) -> builtins.list[str]:
    """The tokens of the session's live waits, in the stores' order (a copy): the first
    `limit` of them only, when given (what a read of the first wait costs is not the number
    of waits)."""
    ordered = entry.ordered
    if not ordered:
        return []
    if isinstance(ordered, str):
        return [ordered]
    if limit is not None:
        ordered = ordered[:limit]
    return [t for _, t in ordered]


def _by_path(wait: WaitRecord) -> tuple[bytes, str]:
    # By the path's encoding, as the durable stores order their path column (byte order).
    return (encode_path(wait.path), wait.token)
