"""The states of the snapshots a Runtime last wrote, kept so that resuming them skips decoding.

A session resumed by the Runtime that paused it (a harness that runs and resumes in one
process, a server handling the decision of a session it started) would decode the snapshot
it has just encoded; decoding is a fifth of a round trip in memory. The Runtime keeps the state
it wrote, keyed by the snapshot's very bytes, and a resume that loads those bytes from the
store takes the state instead. Any other bytes (another process wrote the session since, the
store holds something else) miss, and the snapshot is decoded as always.

What a resume gets must not depend on whether the state was kept or decoded, so a state is
kept only when every value a resumed run can read decodes as itself: None, bools, numbers,
text, bytes, and tuples and frozensets of them (a datetime too, unless its zone is one that
only a fixed-offset `timezone` stands for after decoding), and metric totals that are floats
already. A state holding a list or a dict a step returned is not kept: its caller may still
hold that value and change it before the resume, and the snapshot holds it as it was. (The
pause's payload is not looked at: a resume clears the pause without reading it.) The run
changes a copy of the state (`reducer.own`), never the kept one.

The Runtimes of one process that share a store share this cache too (`states_for`): a worker
resuming a session that another Runtime over the same MemoryStore paused does not decode its
snapshot. The state is kept by the snapshot's bytes, so it is the one any Runtime would decode
from them. (Each Runtime keeps its own RecordCache: another Runtime reads the session, and so
sees a stop request stored since the record was written.)
"""

from __future__ import annotations

import threading
import weakref
from datetime import datetime, timezone
from typing import Any

from tarry.engine.state.records import OutOfLine, SessionState
from tarry.snapshots.records import SessionRecord

#: States kept at most, and the largest snapshot kept (bigger ones are decoded as always).
MAX_ENTRIES = 256
MAX_SNAPSHOT = 64 * 1024

# OutOfLine: a reference to a value kept out of line (frozen; decodes as an equal one).
_ATOMS = frozenset({type(None), bool, int, float, str, bytes, OutOfLine})


class _Kept:
    """At most `max_entries` values by key, the oldest dropped first, none whose snapshot is
    over `max_snapshot` bytes (the subclasses check). Writes take the lock; reads need none."""

    __slots__ = ("_kept", "_lock", "max_entries", "max_snapshot")

    def __init__(self, max_entries: int = MAX_ENTRIES, max_snapshot: int = MAX_SNAPSHOT) -> None:
        self._kept: dict[Any, Any] = {}
        self._lock = threading.Lock()
        self.max_entries = max_entries
        self.max_snapshot = max_snapshot

    def __len__(self) -> int:
        return len(self._kept)

    def _put(self, key: Any, value: Any) -> None:
        if self.max_entries <= 0:
            return
        with self._lock:
            kept = self._kept
            if len(kept) >= self.max_entries:
                del kept[next(iter(kept))]  # the oldest
            kept[key] = value

    def _pop(self, key: Any) -> Any:
        with self._lock:
            return self._kept.pop(key, None)


class StateCache(_Kept):
    __slots__ = ()

    def keep(self, snapshot: bytes, state: SessionState) -> None:
        """Keep `state`, which `snapshot` encodes, if every value in it decodes as itself."""
        if len(snapshot) <= self.max_snapshot and _decodes_as_itself(state):
            self._put(snapshot, state)

    def get(self, snapshot: bytes) -> SessionState | None:
        """The state `snapshot` encodes, if kept. Nobody may change it (see `reducer.own`)."""
        return self._kept.get(snapshot)  # type: ignore[no-any-return]

    def drop(self, snapshot: bytes) -> None:
        """Forget `snapshot`: its token was used, so it will not be resumed again."""
        self._pop(snapshot)


class RecordCache(_Kept):
    """The record this Runtime last wrote for each session it paused, by the token it keeps.

    A resume by this Runtime checks the session against that record (and its state, kept
    above or decoded from the record's snapshot) instead of reading the session from the
    store, then uses the token with `consume_token(version=...)`: the store refuses if the
    session moved on since that version (another process saved it, or used another of its
    tokens), and the resume then reads the session as any other would. Against a database
    (PostgresStore) that is one round trip instead of three. Bounded like StateCache."""

    __slots__ = ()

    def keep(self, token: str, record: SessionRecord) -> None:
        """Keep `record` (as written, with its new version) as the session `token` resumes."""
        if len(record.state) <= self.max_snapshot:
            self._put(token, record)

    def take(self, token: str) -> SessionRecord | None:
        """The record kept for `token`, forgotten here (a token is used once). The caller may
        change it: the drive that wrote it has ended, and stores keep copies of their own."""
        return self._pop(token)  # type: ignore[no-any-return]


def _same(value: Any) -> bool:
    kind = type(value)
    if kind in _ATOMS:
        return True
    if kind is tuple or kind is frozenset:
        return all(map(_same, value))
    if kind is datetime:
        zone = value.tzinfo
        return zone is None or type(zone) is timezone
    return False


def _all_same(values: Any) -> bool:
    return all(map(_same, values))


def _floats(metrics: dict[str, Any]) -> bool:
    """Whether every metric total is a float already (read back as floats)."""
    for total in metrics.values():  # noqa: SIM110 - not all(genexpr): asked per pause
        if type(total) is not float:
            return False
    return True


def _decodes_as_itself(state: SessionState) -> bool:
    # Asked at every pause: an atom (most values) and an empty dict are passed in place,
    # without a call each.
    f = state.__dict__
    atoms = _ATOMS
    value = f["input"]
    if type(value) not in atoms and not _same(value):
        return False
    value = f["output"]
    if type(value) not in atoms and not _same(value):
        return False
    if (
        (f["outputs"] and not _all_same(f["outputs"].values()))
        or (f["shared"] and not _all_same(f["shared"].values()))
        or (f["resume_values"] and not _all_same(f["resume_values"]))
        or (f["metrics"] and not _floats(f["metrics"]))
    ):
        return False
    for frame in f["container_stack"]:
        if frame.lanes:
            # Lanes in flight nest frames: decoded each time. (Waiting lanes are parked in
            # the store, so a wide session's snapshot usually holds none.)
            return False
        g = frame.__dict__
        value = g["selected"]
        if type(value) not in atoms and not _same(value):
            return False
        value = g["last_output"]
        if type(value) not in atoms and not _same(value):
            return False
        if g["child_outputs"] and not _all_same(g["child_outputs"].values()):
            return False
    pause = f["pause"]
    # Its times decide when a timer resumes; its payload is never read again.
    return pause is None or (
        (pause.wake_at is None or _same(pause.wake_at))
        and (pause.expires_at is None or _same(pause.expires_at))
    )


#: The state cache of the Runtimes sharing each store, by store (gone with it).
_SHARED: weakref.WeakKeyDictionary[Any, StateCache] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def states_for(store: Any) -> StateCache:
    """The state cache of the Runtimes over `store`, made with the first of them; a store
    that cannot be a weak key (or an unhashable one) gets a cache of its own each time."""
    try:
        with _SHARED_LOCK:
            found = _SHARED.get(store)
            if found is None:
                found = _SHARED[store] = StateCache()
            return found
    except TypeError:
        return StateCache()
