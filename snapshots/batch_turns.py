"""Whose turn it is to check a provider batch's status: one status check per open batch per
round, whatever the number of workers (tarry.batches; drivers/batches/round.py).

A round is a *slot* of the runtime's clock (its `lease` seconds long). The first runtime that
asks for the check of an open batch in a slot takes its *turn*, and keeps it until the slot
ends: it checks the batch at each of its rounds, and every other runtime passes over it. The
next slot's turn goes to whoever asks first. Nothing is written to the store: a turn is held
by the store object (`Turns`, for the runtimes that share it) and, across processes, by a lock
that needs no write and that the operating system or the server drops when its holder dies —
a PostgreSQL session-level advisory lock (snapshots/postgres/batches.py), a byte-range lock of
a file beside the SQLite file (`FileLocks`); a MemoryStore serves one process, where the store
object is enough. So a worker that dies while it holds a turn stops no check: PostgreSQL and
the operating system release its locks, and the next slot's turn is free in any case.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

# hashlib and fcntl are imported where they are used (only with batches on SQLite or
# PostgreSQL): `import tarry` and a MemoryStore pay for neither.

#: Take locks by key: the keys taken (each key a signed 64-bit int).
Take = Callable[[list[int]], set[int]]
#: Release locks by key.
Give = Callable[[list[int]], None]


def lock_key(namespace: str, submission_id: str, slot: int) -> int:
    """A signed 64-bit key for the turn of `submission_id` in `slot` (`namespace`: what keeps
    two stores on one server apart, e.g. the schema)."""
    import hashlib

    digest = hashlib.blake2b(f"{namespace}\0{submission_id}\0{slot}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


class Turns:
    """The turns a store holds: submission id -> (owner, slot, lock key). `take`/`give`: the
    locks that keep other processes out (none: the store object is the only holder)."""

    def __init__(self, namespace: str = "", take: Take | None = None, give: Give | None = None):
        self.namespace = namespace
        self._take = take
        self._give = give
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str, int, int]] = {}

    def turns(self, submission_ids: Sequence[str], owner: str, slot: int) -> set[str]:
        """Those of `submission_ids` (the open batches) whose check is `owner`'s in `slot`:
        the ones it holds already, and those it takes now because no one holds them. The
        turns held here for another slot, and `owner`'s of a batch no longer open, are given
        back."""
        wanted = set(submission_ids)
        with self._lock:
            stale = [
                sid
                for sid, (who, s, _) in self._held.items()
                if s != slot or (sid not in wanted and who == owner)
            ]
            if stale:
                keys = [self._held.pop(sid)[2] for sid in stale]
                if self._give is not None:
                    self._give(keys)
            mine = {sid for sid in wanted if sid in self._held and self._held[sid][0] == owner}
            if self._take is None:  # the store object is the only holder: no lock, no key
                for sid in wanted:
                    if sid not in self._held:
                        self._held[sid] = (owner, slot, 0)
                        mine.add(sid)
                return mine
            free = {
                lock_key(self.namespace, sid, slot): sid for sid in wanted if sid not in self._held
            }
            if not free:
                return mine
            for key in self._take(list(free)):
                self._held[free[key]] = (owner, slot, key)
                mine.add(free[key])
            return mine

    def clear(self) -> None:
        """Forget every turn (its locks are gone: the connection or the file was closed)."""
        with self._lock:
            self._held.clear()


# -- byte-range locks of a file (SQLite) ---------------------------------------------------------


class FileLocks:
    """Locks of one byte each of the file `path`, one per key, never waited for: taken with
    `fcntl.lockf(LOCK_EX | LOCK_NB)`, dropped by the operating system when the process dies.

    POSIX record locks belong to the process, and closing any of its descriptors of the file
    drops them all: so the process opens each file once (`_open`), and the stores of one
    process share it and keep each other out by the process's own table of what they hold."""

    #: path -> (its descriptor, offset -> the FileLocks that holds it, the FileLocks using it)
    _files: dict[str, tuple[int, dict[int, object], set[int]]] = {}
    _guard = threading.Lock()

    def __init__(self, path: str) -> None:
        self.path = os.path.realpath(path)

    def _open(self) -> tuple[int, dict[int, object], set[int]]:
        found = FileLocks._files.get(self.path)
        if found is None:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            found = FileLocks._files[self.path] = (fd, {}, set())
        found[2].add(id(self))
        return found

    def take(self, keys: list[int]) -> set[int]:
        fcntl = _fcntl()
        taken: set[int] = set()
        with FileLocks._guard:
            fd, held, _ = self._open()
            for key in keys:
                offset = key & 0x3FFF_FFFF_FFFF_FFFF  # a non-negative offset
                if offset in held:
                    continue  # another store of this process holds it
                if fcntl is not None:
                    try:
                        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
                    except OSError:
                        continue  # another process holds it
                held[offset] = self
                taken.add(key)
        return taken

    def give(self, keys: list[int]) -> None:
        fcntl = _fcntl()
        with FileLocks._guard:
            found = FileLocks._files.get(self.path)
            if found is None:
                return
            fd, held, _ = found
            for key in keys:
                offset = key & 0x3FFF_FFFF_FFFF_FFFF
                if held.get(offset) is self:
                    del held[offset]
                    if fcntl is not None:
                        fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)

    def close(self) -> None:
        """Give back every lock this object holds; the file's descriptor is closed when no
        FileLocks of this process uses it any more (closing it earlier would drop the locks
        of the others)."""
        with FileLocks._guard:
            found = FileLocks._files.get(self.path)
            if found is None:
                return
            mine = [offset for offset, owner in found[1].items() if owner is self]
        self.give(mine)
        with FileLocks._guard:
            found = FileLocks._files.get(self.path)
            if found is None:
                return
            fd, held, users = found
            users.discard(id(self))
            if not users and not held:
                del FileLocks._files[self.path]
                os.close(fd)


def _fcntl() -> Any:
    """The fcntl module, or None where there is none (Windows: turns are then shared by the
    stores of one process only)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        return None
    return fcntl
