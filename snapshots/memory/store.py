"""MemoryStore: the default store, in this process, holding the same encoded bytes as a
durable store would (so a flow that works in memory also works durably).

The class holds the sessions, events and values; tokens, timers and leases come from
memory_tokens.py, waits and the mailbox from memory_waits.py, and the entries it keeps per
session from memory_entry.py.

What a paused session costs in memory is what this process can hold, so an entry keeps little
besides its bytes, and a paused session left idle (IDLE_AFTER writes of the store since its
own) has its state and events deflated (`entry._compact`): what is handed out is always the bytes that
were written.
"""

from __future__ import annotations

import builtins
import collections
import datetime as dt
import heapq
import threading
from collections.abc import Sequence

from tarry.engine.errors import ConcurrentUpdate, SessionExists
from tarry.engine.state.events import Event, EventLog, rows_of
from tarry.snapshots.log_records import LogBatch, LogRecord
from tarry.snapshots.memory import upkeep as upkeep
from tarry.snapshots.memory.batches import Batches
from tarry.snapshots.memory.entry import (
    _ENDED,
    _MARK,
    IN_STATE,
    MERGE_BYTES,
    MERGE_FIRST,
    _compact,
    _copy,
    _decode_batch,
    _dropped_logs,
    _encode_batch,
    _Entry,
    _keep,
    _keep_logs,
    _merged,
    _pages,
    _read_logs,
    _split,
    _tokens_of,
    _unpack,
)
from tarry.snapshots.memory.tokens import TokensAndLeases
from tarry.snapshots.memory.waits import WaitsAndMail
from tarry.snapshots.records import SessionRecord, WaitRecord
from tarry.snapshots.store import ENDED, due_now, kept_stop
from tarry.snapshots.tally import Totals

__all__ = ["MemoryStore", "_decode_batch", "_encode_batch"]

#: A paused session's state and event blobs are deflated once IDLE_AFTER writes of the store
#: (to any session) have passed since its own last write: a session resumed soon after its pause
#: never pays for it, a session left waiting holds a fraction of the bytes.
IDLE_AFTER = 32


class MemoryStore(TokensAndLeases, WaitsAndMail, Batches):
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

    #: Its consume_token takes `version=` (drivers/core.py reads this, never a signature).
    consume_at_version = True

    def __init__(self, *, ttl: float | None = None, max_sessions: int | None = None) -> None:
        self.ttl = ttl
        self.max_sessions = max_sessions
        self._lock = threading.RLock()
        #: parent -> the children created with it, oldest first.
        self._children: dict[str, builtins.list[str]] = {}
        self._sessions: dict[str, _Entry] = {}
        # The session of each token: its id, or while the token has a live wait, that wait
        # (one index by token for both). A consumed one is also in `_used` until its session
        # is gone.
        self._tokens: dict[str, str | WaitRecord] = {}
        self._used: set[str] = set()
        self._init_waits()
        self._init_batches()
        self._marks: set[str] = set()
        self.bytes_written = 0
        self.bytes_read = 0
        self._swept: dt.datetime | None = None
        #: The entries of the last IDLE_AFTER writes with the version each wrote, oldest
        #: first (see `_wrote`). Not their records: a record held on would keep its state.
        self._recent: collections.deque[tuple[_Entry, int]] = collections.deque()

    # -- sessions --------------------------------------------------------------------------
    def create(
        self, record: SessionRecord, *, events: Sequence[Event] = (), parent: str | None = None
    ) -> None:
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
            self._wrote(entry)
            if parent is not None:
                self._children.setdefault(parent, []).append(record.session_id)

    def children(self, session_id: str) -> builtins.list[str]:
        with self._lock:
            return list(self._children.get(session_id, ()))

    def load(self, session_id: str) -> SessionRecord | None:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                return None
            state = _unpack(entry.record.state, entry.record)
            self.bytes_read += len(state)
            return _copy(entry.record, state=state)

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
        batch = _encode_batch(events) if events else None
        with self._lock:
            entry = self._sessions.get(record.session_id)
            if entry is None or entry.record.version != expected_version:
                found = None if entry is None else entry.record.version
                msg = f"session {record.session_id!r} is at version {found}, not {expected_version}"
                raise ConcurrentUpdate(msg)
            self._check_seq(entry, events)
            stop = kept_stop(entry.record.stop, record)
            if entry.batches is IN_STATE:  # its events are packed with the state it replaces
                _split(entry)
            entry.record = _keep(record, expected_version + 1)
            entry.record.stop = stop
            self.bytes_written += len(record.state)
            self._append(entry, events, batch)
            self._put(entry, values)
            if record.token and record.token not in self._tokens:
                self._add_token(entry, record.token)
            self._save_waits(entry, record.status, waits, mail_done)
            if stop is not None and record.status == "paused":
                entry.record.wake_at = due_now(entry.record.wake_at, record.updated_at)
            extra = entry.extra  # (read in place: this is every pause's path)
            if record.status == "paused" and extra is not None and extra.wakes:
                earliest = self._earliest(entry)
                wake = entry.record.wake_at
                if earliest is not None and (wake is None or earliest < wake):
                    entry.record.wake_at = earliest
            if logs is not None and logs.records:
                _keep_logs(entry, logs)
            if post is not None:
                self.post(post[0], post[1], record.updated_at)  # under the same lock
            self._wrote(entry)
            return expected_version + 1

    def delete(self, session_id: str) -> None:
        with self._lock:
            entry = self._sessions.pop(session_id, None)
            self._children.pop(session_id, None)
            if entry is not None:
                self._forget_waits(entry)
                for token in _tokens_of(entry):
                    self._tokens.pop(token, None)
                    self._used.discard(token)

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
        with self._lock:
            rows = (
                e.record
                for e in self._sessions.values()
                if (status is None or e.record.status == status)
                and (flow is None or e.record.flow == flow)
                and (before is None or _newest(e.record) < before)
                and (since is None or e.record.created_at >= since)
                and (until is None or e.record.created_at < until)
                and (search is None or _found(e.record, search))
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
            self._wrote(entry)

    def events(
        self, session_id: str, after_seq: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        if limit is not None and limit < 1:
            return []
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is None:
                return []
            batches, firsts = _pages(entry, after_seq)
        found: builtins.list[Event] = []
        for blob, start in zip(batches, firsts, strict=True):
            left = None if limit is None else limit - len(found)
            found += _decode_batch(_unpack(blob), session_id, max(after_seq + 1 - start, 0), left)
            if limit is not None and len(found) >= limit:
                break
        return found

    # -- logs ------------------------------------------------------------------------------
    def logs(
        self, session_id: str, *, levelno: int = 0, after: int = 0, limit: int = 1000
    ) -> builtins.list[LogRecord] | None:
        with self._lock:
            entry = self._sessions.get(session_id)
            return None if entry is None else _read_logs(entry, levelno, after, limit)

    def dropped_logs(self, session_id: str) -> int:
        with self._lock:
            entry = self._sessions.get(session_id)
            return 0 if entry is None else _dropped_logs(entry)

    # -- reports ---------------------------------------------------------------------------
    def stats(
        self,
        *,
        flow: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
    ) -> Totals:
        return upkeep.stats(self, flow, since, until)

    # -- out-of-line values ----------------------------------------------------------------
    def put_values(self, session_id: str, values: Sequence[tuple[str, int, bytes]]) -> None:
        with self._lock:
            entry = self._sessions.get(session_id)
            if entry is not None:
                self._put(entry, values)

    def get_value(self, session_id: str, key: str, index: int) -> bytes | None:
        with self._lock:
            kept = _values_of(self._sessions.get(session_id))
            if kept is None:
                return None
            blob = kept.get(key, {}).get(index)
            if blob is not None:
                self.bytes_read += len(blob)
            return blob

    def get_values(self, session_id: str, key: str, stop: int) -> builtins.list[bytes]:
        with self._lock:
            kept = _values_of(self._sessions.get(session_id))
            if kept is None:
                return []
            column = kept.get(key, {})
            blobs = [column[i] for i in range(stop) if i in column]
            self.bytes_read += sum(map(len, blobs))
            return blobs

    def load_many(self, session_ids: Sequence[str]) -> dict[str, SessionRecord]:
        with self._lock:
            found = {}
            for sid in session_ids:
                entry = self._sessions.get(sid)
                if entry is not None:
                    state = _unpack(entry.record.state, entry.record)
                    self.bytes_read += len(state)
                    found[sid] = _copy(entry.record, state=state)
            return found

    # -- internals ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._sessions)

    def _add_token(self, entry: _Entry, token: str) -> None:
        self._tokens[token] = entry.record.session_id
        tokens = entry.tokens
        if tokens is None:
            entry.tokens = token
        elif isinstance(tokens, str):
            entry.tokens = [tokens, token]
        else:
            tokens.append(token)

    def _wrote(self, entry: _Entry) -> None:
        """After a write of `entry`: compact the session written IDLE_AFTER writes ago if it
        was not saved since (its version is the same), is still kept and is paused (one that
        runs is written again soon; an ended one waits for nothing and is pruned in turn: its
        compaction would tax every run by the bytes it wrote, a ForEach item by some 15,000
        instructions). One compaction at most per write, of what one write left raw."""
        recent = self._recent
        recent.append((entry, entry.record.version))
        if len(recent) > IDLE_AFTER:
            old, version = recent.popleft()
            record = old.record
            if (
                record.version == version
                and record.status == "paused"
                and self._sessions.get(record.session_id) is old
            ):
                _compact(old)

    @staticmethod
    def _check_seq(entry: _Entry, events: Sequence[Event]) -> None:
        expected = entry.last_seq + 1
        if type(events) is EventLog:
            # A run's own rows: gap-free by construction (Execution numbers them one by one),
            # so their first and last seq say whether they follow: O(1), not a test per event.
            rows = events.rows
            if not rows or (rows[0][0] == expected and rows[-1][0] == expected + len(rows) - 1):
                return
            # else the test per event below names the first that does not follow
        for row in rows_of(events):
            if row[0] != expected:
                msg = (
                    f"session {entry.record.session_id!r}: event seq {row[0]} does not follow "
                    f"{expected - 1} (another writer got there first)"
                )
                raise ConcurrentUpdate(msg)
            expected += 1

    def _append(
        self, entry: _Entry, events: Sequence[Event], batch: tuple[bytes, int] | None
    ) -> None:
        if batch is not None:
            blob, counted = batch
            rows = rows_of(events)
            if entry.batches is IN_STATE:
                _split(entry)
            last = entry.batches
            if last is None:
                entry.batches = blob
            elif (
                type(last) is bytes
                and last[:1] != _MARK  # one blob, not packed
                and len(last) < MERGE_FIRST
                and len(last) + len(blob) <= MERGE_BYTES
            ):
                entry.batches = _merged(last, blob)
            elif type(last) is list:
                last.append(blob)
                entry.extra.firsts.append(rows[0][0])  # type: ignore[union-attr]
            else:  # one blob (IN_STATE was split above)
                entry.batches = [last, blob]  # type: ignore[list-item]
                entry.firsts = [1, rows[0][0]]
            entry.last_seq = rows[-1][0]
            self.bytes_written += counted

    def _put(self, entry: _Entry, values: Sequence[tuple[str, int, bytes]]) -> None:
        if not values:
            return
        kept = _values_of(entry)
        if kept is None:
            kept = entry.values = {}
        # Most values of one write share their key (a ForEach's items, its results): the
        # key's dict is looked up once per run of them, not once per value.
        last = slot = None
        written = 0
        for key, index, blob in values:
            if key != last:
                slot = kept.get(key)
                if slot is None:
                    slot = kept[key] = {}
                last = key
            slot[index] = blob  # type: ignore[index]
            written += len(blob)
        self.bytes_written += written

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


def _values_of(entry: _Entry | None) -> dict[str, dict[int, bytes]] | None:
    """The entry's out-of-line values, read in place (not by the property: a resume reads
    them)."""
    extra = None if entry is None else entry.extra
    return None if extra is None else extra.values


def _newest(record: SessionRecord) -> tuple[dt.datetime, str]:
    return (record.created_at, record.session_id)


def _found(record: SessionRecord, search: str) -> bool:
    return record.session_id.startswith(search) or search in record.flow
