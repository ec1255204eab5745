"""MemoryStore: the default store, in this process, holding the same encoded bytes as a
durable store would (so a flow that works in memory also works durably)."""

from __future__ import annotations

import bisect
import builtins
import datetime as dt
import heapq
import threading
from collections.abc import Sequence
from typing import Any

import msgpack
from tarry.engine.errors import ConcurrentUpdate, SessionExists, SnapshotError
from tarry.engine.events import Event

from . import memory_upkeep as upkeep
from ._codec import dumps
from .records import SessionRecord, TokenInfo, decode_event, event_arrays
from .store import ENDED
from .tally import Tally, Totals

_ENDED = frozenset({"completed", "failed", "cancelled"})

#: The meta of every kept record that has none. Never mutated, never handed out.
_NO_META: dict[str, Any] = {}


def _keep(record: SessionRecord, version: int) -> SessionRecord:
    """The store's own copy of a record it is given, at `version`."""
    return _copy(record, version, dict(record.meta) if record.meta else _NO_META)


def _copy(
    record: SessionRecord,
    version: int | None = None,
    meta: dict[str, Any] | None = None,
    state: bytes | None = None,
) -> SessionRecord:
    """A record that shares no mutable part with `record` (as a durable store's would), with
    `state` instead of its own if given.

    The constructor, not `attrs.evolve`: a copy is made on every load and save, and evolve
    costs four times as much.
    """
    return SessionRecord(
        record.session_id,
        record.flow,
        record.status,
        record.state if state is None else state,
        record.version if version is None else version,
        record.fingerprint,
        record.flow_version,
        record.token,
        record.wake_at,
        record.lease_owner,
        record.lease_until,
        record.created_at,
        record.updated_at,
        dict(record.meta) if meta is None else meta,
        record.durability,
        record.stop,
    )


def _encode_batch(events: Sequence[Event]) -> tuple[bytes, int]:
    """The events of one write as one msgpack array of `encode_event`'s arrays, and how many
    bytes those arrays take (the blob less the array's header).

    One encoder call per write instead of one per event halves the cost of encoding a pause's
    events, and a session holds one bytes object per write instead of one per event. The
    elements are byte for byte what `encode_event` writes (a test checks it), so the bytes
    counted are the same as a durable store's.
    """
    blob = dumps(event_arrays(events))
    n = len(events)
    return blob, len(blob) - (1 if n < 16 else 3 if n < 0x10000 else 5)


def _decode_batch(
    blob: bytes, session_id: str, skip: int = 0, limit: int | None = None
) -> builtins.list[Event]:
    """The events of a blob `_encode_batch` wrote, each decoded by `decode_event`: the first
    `skip` are passed over undecoded, and no more than `limit` (if given) are decoded."""
    unpacker = msgpack.Unpacker(max_buffer_size=len(blob))
    unpacker.feed(blob)
    events: builtins.list[Event] = []
    try:
        count = unpacker.read_array_header()
        start = unpacker.tell()
        for i in range(count):
            unpacker.skip()
            end = unpacker.tell()
            if i >= skip:
                events.append(decode_event(blob[start:end], session_id))
                if len(events) == limit:
                    break
            start = end
    except (ValueError, msgpack.OutOfData) as exc:  # as a durable store's bad blob would
        msg = f"session {session_id!r}: malformed events ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc
    return events


class _Entry:
    __slots__ = ("record", "batches", "firsts", "last_seq", "values", "tokens", "tally")

    def __init__(self, record: SessionRecord) -> None:
        self.record = record
        self.batches: list[bytes] = []  # one _encode_batch blob per write, in order
        self.firsts: list[int] = []  # the seq of each batch's first event (to find a page)
        self.last_seq = 0
        self.tally: Tally | None = None  # brought up to date by `stats()`
        self.values: dict[str, dict[int, bytes]] | None = None  # made when the first is put
        self.tokens: list[str] = []


class MemoryStore:
    """Sessions in a dict, encoded.

    `ttl` (seconds): a session not updated for that long is evicted, unless it is running.
    `max_sessions`: when a new session would exceed it, the least recently updated sessions
    that are not running are evicted (ended ones first, then paused ones; a tenth of the limit
    at once). A running session is never evicted, so the limit can be exceeded by running ones.
    An evicted session is gone: its token is unknown from then on. `bytes_written` /
    `bytes_read` count the encoded bytes that went in and came out, for checking the cost model.

    Records are kept as private copies, changed in place under the lock, and copied again
    whenever one is handed out.
    """

    def __init__(self, *, ttl: float | None = None, max_sessions: int | None = None) -> None:
        self.ttl = ttl
        self.max_sessions = max_sessions
        self._lock = threading.RLock()
        self._sessions: dict[str, _Entry] = {}
        # Tokens by session id; a consumed one is also in `_used` until its session is gone.
        self._tokens: dict[str, str] = {}
        self._used: set[str] = set()
        self._marks: set[str] = set()
        self.bytes_written = 0
        self.bytes_read = 0
        self._swept: dt.datetime | None = None

    # -- sessions --------------------------------------------------------------------------
    def create(self, record: SessionRecord, *, events: Sequence[Event] = ()) -> None:
        batch = _encode_batch(events) if events else None
        with self._lock:
            self._evict(record.created_at)
            if record.session_id in self._sessions:
                raise SessionExists(record.session_id)
            entry = _Entry(_keep(record, 0))
            entry.record.stop = None
            self._check_seq(entry, events)
            self._sessions[record.session_id] = entry
            self.bytes_written += len(record.state)
            self._append(entry, events, batch)
            if record.token and record.token not in self._tokens:
                self._add_token(entry, record.token)

    def load(self, session_id: str) -> SessionRecord | None:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                return None
            self.bytes_read += len(entry.record.state)
            return _copy(entry.record)

    def save(
        self,
        record: SessionRecord,
        expected_version: int,
        *,
        events: Sequence[Event] = (),
        values: Sequence[tuple[str, int, bytes]] = (),
    ) -> int:
        batch = _encode_batch(events) if events else None
        with self._lock:
            entry = self._sessions.get(record.session_id)
            if entry is None or entry.record.version != expected_version:
                found = None if entry is None else entry.record.version
                msg = f"session {record.session_id!r} is at version {found}, not {expected_version}"
                raise ConcurrentUpdate(msg)
            self._check_seq(entry, events)
            stop = entry.record.stop if record.status == "running" else None
            entry.record = _keep(record, expected_version + 1)
            entry.record.stop = stop
            self.bytes_written += len(record.state)
            self._append(entry, events, batch)
            self._put(entry, values)
            if record.token and record.token not in self._tokens:
                self._add_token(entry, record.token)
            return expected_version + 1

    def delete(self, session_id: str) -> None:
        with self._lock:
            entry = self._sessions.pop(session_id, None)
            if entry is not None:
                for token in entry.tokens:
                    self._tokens.pop(token, None)
                    self._used.discard(token)

    def list(
        self,
        *,
        status: str | None = None,
        flow: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> builtins.list[SessionRecord]:
        with self._lock:
            rows = (
                e.record
                for e in self._sessions.values()
                if (status is None or e.record.status == status)
                and (flow is None or e.record.flow == flow)
            )
            # The newest offset + limit of them, without sorting the rest.
            newest = heapq.nlargest(offset + limit, rows, key=_newest)
            return [_copy(r, state=b"") for r in newest[offset:]]

    def prune(
        self,
        *,
        before: dt.datetime,
        statuses: Sequence[str] = ENDED,
        now: dt.datetime,
        limit: int = 1000,
        dry_run: bool = False,
    ) -> int:
        return upkeep.prune(self, before, statuses, now, limit, dry_run)

    # -- events ----------------------------------------------------------------------------
    def append_events(self, session_id: str, events: Sequence[Event]) -> None:
        batch = _encode_batch(events) if events else None
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                msg = f"no session {session_id!r} to append events to"
                raise ConcurrentUpdate(msg)
            self._check_seq(entry, events)
            self._append(entry, events, batch)

    def events(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        if limit is not None and limit < 1:
            return []
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                return []
            # The write holding after_seq + 1, found by its first seq, and those after it:
            # a page decodes only the writes it spans, wherever it is in the log.
            first = max(bisect.bisect_right(entry.firsts, after_seq + 1) - 1, 0)
            batches = entry.batches[first:]
            firsts = entry.firsts[first:]
        found: builtins.list[Event] = []
        for blob, start in zip(batches, firsts, strict=True):
            left = None if limit is None else limit - len(found)
            found += _decode_batch(blob, session_id, max(after_seq + 1 - start, 0), left)
            if limit is not None and len(found) >= limit:
                break
        return found

    # -- reports ---------------------------------------------------------------------------
    def stats(self, *, flow: str | None = None) -> Totals:
        return upkeep.stats(self, flow)

    # -- out-of-line values ----------------------------------------------------------------
    def put_values(self, session_id: str, values: Sequence[tuple[str, int, bytes]]) -> None:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is not None:
                self._put(entry, values)

    def get_value(self, session_id: str, key: str, index: int) -> bytes | None:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None or entry.values is None:
                return None
            blob = entry.values.get(key, {}).get(index)
            if blob is not None:
                self.bytes_read += len(blob)
            return blob

    def get_values(self, session_id: str, key: str, stop: int) -> builtins.list[bytes]:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None or entry.values is None:
                return []
            column = entry.values.get(key, {})
            blobs = [column[i] for i in range(stop) if i in column]
            self.bytes_read += sum(map(len, blobs))
            return blobs

    # -- tokens ----------------------------------------------------------------------------
    def find_token(self, token: str) -> TokenInfo | None:
        with self._lock:
            sid = self._tokens.get(token)
            return None if sid is None else TokenInfo(sid, token in self._used)

    def consume_token(
        self,
        token: str,
        *,
        owner: str | None = None,
        until: dt.datetime | None = None,
        events: Sequence[Event] = (),
    ) -> bool:
        batch = _encode_batch(events) if events else None
        with self._lock:
            sid = self._tokens.get(token)
            if sid is None or token in self._used:
                return False
            entry = self._sessions.get(sid)
            if entry is not None:
                self._check_seq(entry, events)
                entry.record.status = "running"
                entry.record.stop = None
                if owner is not None:
                    entry.record.lease_owner = owner
                    entry.record.lease_until = until
                self._append(entry, events, batch)
            self._used.add(token)
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

    # -- internals ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._sessions)

    def _add_token(self, entry: _Entry, token: str) -> None:
        self._tokens[token] = entry.record.session_id
        entry.tokens.append(token)

    @staticmethod
    def _check_seq(entry: _Entry, events: Sequence[Event]) -> None:
        expected = entry.last_seq + 1
        for event in events:
            if event.seq != expected:
                msg = (
                    f"session {event.session_id!r}: event seq {event.seq} does not follow "
                    f"{expected - 1} (another writer got there first)"
                )
                raise ConcurrentUpdate(msg)
            expected += 1

    def _append(
        self, entry: _Entry, events: Sequence[Event], batch: tuple[bytes, int] | None
    ) -> None:
        if batch is not None:
            blob, counted = batch
            entry.batches.append(blob)
            entry.firsts.append(events[0].seq)
            entry.last_seq = events[-1].seq
            self.bytes_written += counted

    def _put(self, entry: _Entry, values: Sequence[tuple[str, int, bytes]]) -> None:
        if not values:
            return
        if entry.values is None:
            entry.values = {}
        for key, index, blob in values:
            entry.values.setdefault(key, {})[index] = blob
            self.bytes_written += len(blob)

    def _evict(self, now: dt.datetime) -> None:
        """Drop expired sessions, then the least recently updated beyond max_sessions.

        Never a running session. Amortised: the TTL sweep runs at most once per tenth of the
        TTL, and an overflow evicts a tenth of `max_sessions` at once, so creating sessions
        stays O(1) on average however many are kept.
        """
        if self.ttl is not None and (self._swept is None or now >= self._swept):
            self._swept = now + dt.timedelta(seconds=self.ttl / 10)
            cutoff = now - dt.timedelta(seconds=self.ttl)
            for sid in [
                s
                for s, e in self._sessions.items()
                if e.record.status != "running" and e.record.updated_at < cutoff
            ]:
                self.delete(sid)
        if self.max_sessions is not None and len(self._sessions) >= self.max_sessions:
            idle = sorted(
                (e.record for e in self._sessions.values() if e.record.status != "running"),
                key=lambda r: (r.status not in _ENDED, r.updated_at),
            )
            excess = len(self._sessions) - self.max_sessions + 1
            batch = max(excess, self.max_sessions // 10)
            for rec in idle[:batch]:
                self.delete(rec.session_id)


def _newest(record: SessionRecord) -> tuple[dt.datetime, str]:
    return (record.created_at, record.session_id)
