"""The journal behind the all-sessions event stream: every session's new events, numbered.

Sessions have no common order (each has its own gap-free `seq`), so the server makes one: a
watcher thread reads new events from the store and appends them to an in-memory journal,
numbering them 1, 2, 3 ... in the order it found them. A stream's event id is
`<epoch>-<number>`; a client that reconnects with that id gets every journal entry after it,
exactly once. The epoch changes whenever the watcher starts afresh (a new server, or after it
stopped for lack of listeners), and an id from another epoch or one that fell out of the
journal is answered with a reset: the client reloads what it shows and reads on from now.

What the watcher looks at, each round (woken at once by this runtime's runs, else every poll):
the sessions this runtime's subscribers named, every running session, and the newest
`scan` sessions. Events that reach the store from elsewhere are found as long as their session
is among those when it writes them; a session older than the newest `scan` that another process
resumes and finishes within one poll is missed (its own stream, which reads its log, is not).
Each look reads at most a page (`PAGE` events) of each session; a session with more to read is
looked at again at once, so a long log streams in pages and the server's memory stays flat.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from tarry.drivers.http.sse import (
    KEEP_ALIVE,
    Streams,
    Wakeup,
    event_message,
    message,
    retry_hint,
    silence,
)
from tarry.drivers.reading.views import state_of
from tarry.engine.errors import SnapshotError
from tarry.engine.state.events import Event
from tarry.snapshots.records import SessionRecord

log = logging.getLogger("tarry.server")

#: What a record looked like when the watcher last read its events; if it still looks the
#: same and is not running, it has no new events.
Mark = tuple[Any, ...]

#: The most events one look reads of one session.
PAGE = 500


class Journal:
    """New events of every session in one numbered order. Thread-safe.

    `attach(wake)` starts the watcher if needed and returns the id of the present position;
    `since(id)` gives the entries after an id (None when the id is not of this journal);
    `detach(wake)` when a stream ends. Without listeners for `idle` seconds the watcher stops.
    """

    def __init__(
        self,
        runtime: Any,
        *,
        poll: float = 1.0,
        capacity: int = 10_000,
        scan: int = 100,
        idle: float = 30.0,
    ) -> None:
        self._rt = runtime
        self._poll = poll
        self._scan = scan
        self._idle = idle
        self._lock = threading.Lock()
        # `_dirty` has its own lock: runs report to it from their threads, and must never wait
        # while the watcher reads the store under `_lock`.
        self._dirty_lock = threading.Lock()
        self._kick = threading.Event()
        self._entries: deque[tuple[int, bytes]] = deque(maxlen=capacity)
        self._count = 0
        self.epoch = ""
        self._listeners: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None
        self._stop: threading.Event | None = None  # the running watcher's stop flag
        self._unsubscribe: Callable[[], None] | None = None
        self._cursors: dict[str, int] = {}  # session id -> last seq journaled (or baseline)
        self._marks: dict[str, Mark] = {}
        self._dirty: dict[str, int] = {}  # session id -> lowest seq a subscriber announced
        self._behind: set[str] = set()  # sessions with more events to read than a look reads
        self._idle_since = time.monotonic()

    # -- streams -------------------------------------------------------------------------------
    def attach(self, wake: Callable[[], None]) -> str:
        """Register a stream's wake-up; returns the id of the position it starts from.

        Blocks while a fresh watcher takes its first look at the store (so events stored
        after this returns are all journaled): call it from a worker thread.
        """
        with self._lock:
            self._listeners.append(wake)
            if self._stop is None:
                self._start()
            return self._id(self._count)

    def detach(self, wake: Callable[[], None]) -> None:
        with self._lock:
            if wake in self._listeners:
                self._listeners.remove(wake)
            if not self._listeners:
                self._idle_since = time.monotonic()

    def since(self, cursor: str) -> list[tuple[str, bytes]] | None:
        """The entries after `cursor` as (id, SSE message); None if `cursor` is not a position
        of this journal (another epoch, malformed, or too old to be still held)."""
        epoch, _, number = cursor.rpartition("-")
        with self._lock:
            if (
                epoch != self.epoch
                or not (number.isascii() and number.isdigit() and len(number) <= 19)
                or int(number) > self._count
            ):
                return None
            n = int(number)
            first = self._entries[0][0] if self._entries else self._count + 1
            if n < first - 1:
                return None  # entries after n were dropped to keep the journal bounded
            newer = itertools.islice(self._entries, n - first + 1, None)
            return [(self._id(k), data) for k, data in newer]

    def position(self) -> str:
        """The id of the latest entry (of the present epoch)."""
        with self._lock:
            return self._id(self._count)

    def close(self) -> None:
        """Stop the watcher (at server shutdown)."""
        with self._lock:
            stop, thread = self._stop, self._thread
            self._halt()
        if stop is not None:
            stop.set()
            self._kick.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    def _id(self, n: int) -> str:
        return f"{self.epoch}-{n}"

    # -- the watcher ---------------------------------------------------------------------------
    def _start(self) -> None:
        """A fresh epoch: the journal restarts from what the store holds now (lock held)."""
        self.epoch = secrets.token_hex(4)
        self._entries.clear()
        self._count = 0
        self._cursors = {}
        self._marks = {}
        self._behind = set()
        self._take_dirty()
        self._unsubscribe = self._rt.subscribe(self._heard)
        self._look(self._take_dirty(), baseline=True)
        self._stop = stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name="tarry-journal", daemon=True
        )
        self._thread.start()

    def _halt(self) -> None:
        """Forget the running watcher (lock held); the next `attach` starts a new epoch."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._stop = None
        self._thread = None

    def _heard(self, event: Event) -> None:
        """A run of this runtime emitted `event` (called from the thread that runs it)."""
        sid = event.session_id
        with self._dirty_lock:
            if sid not in self._dirty or event.seq < self._dirty[sid]:
                self._dirty[sid] = event.seq
        self._kick.set()

    def _take_dirty(self) -> dict[str, int]:
        with self._dirty_lock:
            dirty, self._dirty = self._dirty, {}
        return dirty

    def _run(self, stop: threading.Event) -> None:
        fast_until = 0.0
        while not stop.is_set():
            timeout = 0.1 if time.monotonic() < fast_until else self._poll
            if self._kick.wait(timeout):
                self._kick.clear()
                # A subscriber hears of events before a durability="pause" run stores them.
                fast_until = time.monotonic() + 2.0
            if stop.is_set():
                return
            dirty = self._take_dirty()
            try:
                found = self._look(dirty, baseline=False)
            except Exception:  # a store hiccup must not end the streams: try again next round
                log.exception("tarry journal: reading the store failed")
                with self._dirty_lock:  # look at those sessions again next round
                    for sid, seq in dirty.items():
                        self._dirty[sid] = min(seq, self._dirty.get(sid, seq))
                continue
            with self._lock:
                if stop.is_set():
                    return
                for event in found:
                    self._count += 1
                    self._entries.append((self._count, event_message(event, self._id(self._count))))
                listeners = list(self._listeners)
                if not listeners and time.monotonic() - self._idle_since > self._idle:
                    stop.set()
                    self._halt()
                    return
            if found:
                for wake in listeners:
                    wake()
            if self._behind:  # more to read: look again without waiting
                self._kick.set()

    def _look(self, dirty: dict[str, int], *, baseline: bool) -> list[Event]:
        """The events stored since the last look, in the order they are to be journaled: at
        most a page of each session (the rest at the next look, which follows at once).

        Only the watcher calls this (and `_start`, before the watcher exists), so the cursors
        need no lock. With `baseline`, only note where every session stands.
        """
        store = self._rt.store
        running = {r.session_id: r for r in store.list(status="running", limit=self._scan)}
        newest = {r.session_id: r for r in store.list(limit=self._scan)}
        records = {**running, **newest}
        behind = self._behind
        for sid in (*dirty, *behind):
            if sid not in records:
                record = store.load(sid)
                if record is not None:
                    records[sid] = record
        found: list[Event] = []
        still_behind: set[str] = set()
        for sid, record in records.items():
            mark = (
                record.version,
                record.status,
                record.updated_at,
                record.lease_owner,
                record.lease_until,
            )
            cursor = self._cursors.get(sid)
            if (
                cursor is not None
                and sid not in dirty
                and sid not in behind
                and record.status != "running"
                and self._marks.get(sid) == mark
            ):
                continue
            try:
                if cursor is None:
                    if baseline:
                        cursor = _snapshot_seq(store, record)
                    elif sid in dirty:
                        cursor = dirty[sid] - 1
                    elif sid in newest:
                        cursor = 0  # not among the newest at the last look: created since
                    else:
                        cursor = _snapshot_seq(store, record)  # an old session, resumed elsewhere
                while True:
                    events = store.events(sid, cursor, PAGE)
                    if events:
                        cursor = events[-1].seq
                        if not baseline:
                            found.extend(events)
                    if len(events) < PAGE:
                        break
                    if not baseline:  # the next page at the next look
                        still_behind.add(sid)
                        break
            except SnapshotError as exc:  # one unreadable session must not stop the others
                if self._marks.get(sid) != mark:
                    log.warning("tarry journal: session %s cannot be read: %s", sid, exc)
            else:
                self._cursors[sid] = cursor
            self._marks[sid] = mark
        self._behind = still_behind  # only once the look is done: a failed one is repeated
        return found


def _snapshot_seq(store: Any, record: SessionRecord) -> int:
    """The seq of the last event in the session's snapshot (a listed record has no state: the
    session is loaded for it)."""
    if not record.state:
        loaded = store.load(record.session_id)
        if loaded is None:
            return 0
        record = loaded
    return state_of(record).last_seq


async def journal_feed(
    journal: Journal,
    cursor: str | None,
    start: str,
    wakeup: Wakeup,
    streams: Streams,
    *,
    heartbeat: float,
) -> AsyncIterator[bytes]:
    """The all-sessions stream: journal entries after `cursor` (a Last-Event-ID), or after
    `start` (where the stream attached) when there is none. An unknown cursor gets a `reset`
    message first, whose id is the present position."""
    yield retry_hint()
    position = start
    if cursor:
        if journal.since(cursor) is None:
            yield _reset(start, "the stream restarted or the id is too old: reload, then read on")
        else:
            position = cursor
    quiet_since = time.monotonic()
    while True:
        entries = journal.since(position)
        if entries is None:  # this client fell further behind than the journal holds
            position = journal.position()
            yield _reset(position, "events were missed: reload, then read on")
            continue
        for ident, data in entries:
            yield data
            position = ident
        if entries:
            quiet_since = time.monotonic()
        elif silence(quiet_since, heartbeat):
            yield KEEP_ALIVE
            quiet_since = time.monotonic()
        await wakeup.wait(heartbeat)
        if streams.closing:
            return


def _reset(position: str, reason: str) -> bytes:
    return message({"reason": reason}, id=position, event="reset")
