"""The ledger: a ForEach's items and results, kept out of the state and out of line in the store,
and the large input and top-level outputs the state refers to (read back through held.py).

Nothing is encoded on the step path: items and results wait in memory and are encoded when the
session is written (a pause, a step flush with `durability="step"`, or the write of a long run's
events every `drive.FLUSH_EVENTS`). A short run that completes without pausing never encodes
them at all: they are only needed to resume.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

from tarry.drivers.drive.values_out_of_line import fetch
from tarry.engine.errors import SnapshotError
from tarry.snapshots.codec.pack import dumps, dumps_many, loads
from tarry.snapshots.records import path_key
from tarry.snapshots.store import SessionStore

ITEMS, RESULTS = "i", "r"


class StoreLedger:
    __slots__ = ("_store", "_sid", "_items", "_unwritten", "_results", "unwritten_results")

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self._store = store
        self._sid = session_id
        self._items: dict[tuple[Any, ...], list[Any]] = {}  # known this run, by container path
        self._unwritten: list[tuple[Any, ...]] = []  # paths whose items are not written yet
        self._results: list[tuple[tuple[Any, ...], int, Any]] = []  # unwritten
        #: The same list, which a ForEach appends its results to (Ledger.unwritten_results):
        #: changed in place only, never replaced.
        self.unwritten_results = self._results

    def _key(self, kind: str, path: tuple[Any, ...]) -> str:
        return kind + path_key(path)

    def put_items(self, path: tuple[Any, ...], items: list[Any]) -> None:
        self._items[path] = items
        self._unwritten.append(path)

    def item(self, path: tuple[Any, ...], index: int) -> Any:
        pending = self._items.get(path)
        if pending is not None:
            return pending[index]
        blob = self._store.get_value(self._sid, self._key(ITEMS, path), index)
        if blob is None:
            msg = (
                f"session {self._sid!r}: item {index} of {'/'.join(map(str, path))} is missing "
                f"from the store"
            )
            raise SnapshotError(msg)
        return loads(blob)

    def items(self, path: tuple[Any, ...], indexes: list[int]) -> dict[int, Any]:
        """The items at `indexes`, by index: read in one go when they are most of those up to
        the last (the branches a resume_many restores), else one at a time."""
        pending = self._items.get(path)
        if pending is not None:
            return {i: pending[i] for i in indexes}
        stop = max(indexes, default=-1) + 1
        if 2 * len(indexes) >= stop > 0:
            blobs = self._store.get_values(self._sid, self._key(ITEMS, path), stop)
            if len(blobs) == stop:  # none missing: index i is blobs[i]
                return {i: loads(blobs[i]) for i in indexes}
        at = getattr(self._store, "get_values_at", None) if len(indexes) > 1 else None
        if at is not None:  # a few of many (the children a round's ends resume): one read
            found = at(self._sid, self._key(ITEMS, path), indexes)
            if len(found) == len(set(indexes)):
                return {i: loads(found[i]) for i in indexes}
        return {i: self.item(path, i) for i in indexes}

    def put_result(self, path: tuple[Any, ...], index: int, value: Any) -> None:
        self._results.append((path, index, value))

    def results(self, path: tuple[Any, ...], stop: int) -> list[Any]:
        key = self._key(RESULTS, path)
        stored = self._store.get_values(self._sid, key, stop)
        if len(stored) < stop:
            # Some were completed by this run and are not written yet (in any order, when the
            # iterations ran concurrently): write them first, then read them all in order.
            mine = [(p, i, v) for p, i, v in self._results if p == path and i < stop]
            if mine:
                self._store.put_values(self._sid, [(key, i, dumps(v)) for _, i, v in mine])
                self._results[:] = [r for r in self._results if r[0] != path or r[1] >= stop]
                stored = self._store.get_values(self._sid, key, stop)
            if len(stored) < stop:
                msg = (
                    f"session {self._sid!r}: {stop - len(stored)} of the {stop} results of "
                    f"{'/'.join(map(str, path))} are missing from the store"
                )
                raise SnapshotError(msg)
        return [loads(b) for b in stored]

    def held(self, seq: int) -> Any:
        """The value the session's event `seq` keeps out of line (a large input or top-level
        output, see held.py); SnapshotError if the store has none."""
        return fetch(self._store, self._sid, seq)

    def take(self) -> list[tuple[str, int, bytes]]:
        """Encode and hand over everything not yet written; the caller writes it."""
        values = []
        for path in self._unwritten:
            key = self._key(ITEMS, path)
            items = self._items[path]
            values += zip(repeat(key), range(len(items)), dumps_many(items))
        results = self._results
        if len(results) == 1:  # a pause after one item (a loop resumed item by item)
            path, index, output = results[0]
            values.append((self._key(RESULTS, path), index, dumps(output)))
        elif results:
            # Most writes hold the results of one ForEach (the same path object each time):
            # then they are taken apart and put back together by C-level zips, not a Python
            # loop per result.
            paths, indexes, outputs = zip(*results, strict=True)
            blobs = dumps_many(list(outputs))
            first = paths[0]
            if paths.count(first) == len(paths):
                values += zip(
                    repeat(self._key(RESULTS, first), len(blobs)), indexes, blobs, strict=True
                )
            else:
                keys: dict[tuple[Any, ...], str] = {}
                for p in paths:
                    if p not in keys:
                        keys[p] = self._key(RESULTS, p)
                values += zip(map(keys.__getitem__, paths), indexes, blobs, strict=True)
        self._unwritten.clear()
        self._results.clear()
        return values

    def discard(self) -> None:
        """Forget unwritten values (the run ended: nothing will resume into them)."""
        self._unwritten.clear()
        self._results.clear()
