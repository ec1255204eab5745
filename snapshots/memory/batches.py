"""MemoryStore's provider batch records (tarry.batches): see snapshots/batch_records.py."""

from __future__ import annotations

import builtins
import datetime as dt
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
from tarry.snapshots.batch_records import BatchRecord

if TYPE_CHECKING:
    from tarry.snapshots.batch_turns import Turns


class Batches:
    """The batch records of a MemoryStore, under its lock."""

    _lock: threading.RLock
    _fifo: dict[str, dict[str, None]]
    _queue: dict[str, list[int]]

    def _init_batches(self) -> None:
        self._batches: dict[str, BatchRecord] = {}
        #: key -> submission id, for the keys of open submissions, and the other way round.
        self._batch_items: dict[str, str] = {}
        self._batch_keys: dict[str, list[str]] = {}
        #: submission id -> (owner, until): the worker that delivers an ended batch.
        self._batch_claims: dict[str, tuple[str, dt.datetime]] = {}
        #: Whose turn it is to check each open batch: the runtimes sharing this store are
        #: the only ones that see it, so the store object is the whole lock (made on first
        #: use: a store of no batches does not import it).
        self._turns: Turns | None = None

    def _batch_state(self) -> tuple[dict[str, BatchRecord], dict[str, str]]:
        return self._batches, self._batch_items

    def batch_intent(self, record: BatchRecord, keys: Sequence[str]) -> builtins.list[str]:
        """Record `record` with those of `keys` that something still waits on, that hold no
        queued message (a result delivered to a busy session) and that no open submission
        holds; returns them (nothing is recorded when none is free)."""
        with self._lock:
            batches, items = self._batch_state()
            if record.submission_id in batches:
                return []
            free = [
                k
                for k in dict.fromkeys(keys)
                if k not in items and self._fifo.get(k) and not self._queue.get(k)
            ]
            if free:
                batches[record.submission_id] = attrs.evolve(record, total=len(free))
                self._batch_keys[record.submission_id] = free
                for key in free:
                    items[key] = record.submission_id
            return free

    def batch_update(
        self,
        submission_id: str,
        *,
        status: str,
        at: dt.datetime,
        provider_id: str | None = None,
        counts: dict[str, int] | None = None,
    ) -> None:
        with self._lock:
            batches, _ = self._batch_state()
            found = batches.get(submission_id)
            if found is None:
                return
            batches[submission_id] = attrs.evolve(
                found,
                status=status,
                updated_at=at,
                provider_id=provider_id if provider_id is not None else found.provider_id,
                counts=dict(counts) if counts is not None else found.counts,
            )

    def batch_end(
        self, submission_id: str, *, status: str, at: dt.datetime, counts: dict[str, int]
    ) -> None:
        """Mark a submission ended and free its keys (a key still waiting is then submitted
        again by the next round)."""
        with self._lock:
            batches, items = self._batch_state()
            found = batches.get(submission_id)
            if found is None:
                return
            batches[submission_id] = attrs.evolve(
                found, status=status, updated_at=at, ended_at=at, counts=dict(counts)
            )
            for key in self._batch_keys.pop(submission_id, ()):
                del items[key]
            self._batch_claims.pop(submission_id, None)

    def batches(
        self, *, open: bool = True, via: str | None = None, limit: int = 1000
    ) -> builtins.list[BatchRecord]:
        """Submissions oldest first: the open ones (or every one), of `via` (or any)."""
        with self._lock:
            batches, _ = self._batch_state()
            found = [
                r
                for r in batches.values()
                if (not open or r.ended_at is None) and (via is None or r.via == via)
            ]
        found.sort(key=lambda r: (r.created_at, r.submission_id))
        return found[:limit]

    def batch_claim(
        self, submission_id: str, owner: str, until: dt.datetime, now: dt.datetime
    ) -> bool:
        """Lease an open submission to `owner` until `until` (to deliver its results or upload
        it again), unless another owner holds it; whether it is `owner`'s now."""
        with self._lock:
            found = self._batches.get(submission_id)
            if found is None or found.ended_at is not None:
                return False
            held = self._batch_claims.get(submission_id)
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._batch_claims[submission_id] = (owner, until)
            return True

    def batch_keys(self, submission_id: str) -> builtins.list[str]:
        with self._lock:
            return sorted(self._batch_keys.get(submission_id, ()))

    def batch_submitted(self, keys: Sequence[str]) -> set[str]:
        """Those of `keys` that an open submission holds."""
        with self._lock:
            _, items = self._batch_state()
            return {key for key in keys if key in items}

    def batch_turns(
        self, submission_ids: Sequence[str], *, owner: str, slot: int
    ) -> builtins.set[str]:
        """Those of the open submissions whose status check is `owner`'s in round `slot`
        (snapshots/batch_turns.py); held in the store object, nothing written."""
        if self._turns is None:
            from tarry.snapshots.batch_turns import Turns

            with self._lock:
                if self._turns is None:
                    self._turns = Turns()
        return self._turns.turns(submission_ids, owner, slot)
