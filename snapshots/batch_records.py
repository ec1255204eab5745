"""What a store keeps of the provider batches tarry submitted (tarry.batches): one record per
submission, and which keys (custom_ids) it holds while it is open."""

from __future__ import annotations

import builtins
import datetime as dt
import json
from collections.abc import Sequence
from typing import Any, Protocol

import attrs


@attrs.frozen
class BatchRecord:
    """One submission of waiting `BatchRequest`s to the batch adapter `via`.

    `submission_id`: tarry's own id, written to the store before anything is uploaded and
    carried by the provider's batch (its metadata, where the provider has some), so that a
    worker that died between the upload and the record finds the batch again instead of
    submitting its keys twice. `provider_id`: the provider's batch id (None until recorded).
    `status`: the provider's status as last seen ("submitting" before it has one). `total`:
    how many requests. `counts`: the provider's request counts as last seen. `ended_at`: when
    tarry read its results and delivered them (None while open).
    """

    submission_id: str
    via: str
    provider_id: str | None
    status: str
    total: int
    created_at: dt.datetime
    updated_at: dt.datetime
    counts: dict[str, int] = attrs.field(factory=dict)
    ended_at: dt.datetime | None = None

    @property
    def open(self) -> bool:
        return self.ended_at is None


def counts_text(counts: dict[str, int]) -> str:
    return json.dumps(counts, sort_keys=True, separators=(",", ":"))


def counts_of(text: Any) -> dict[str, int]:
    return dict(json.loads(text)) if text else {}


#: The SQL stores' columns of a batch record, in BatchRecord's order of its fields.
BATCH_COLUMNS = (
    "submission_id, via, provider_id, status, total, created_at, updated_at, counts, ended_at"
)


class BatchStore(Protocol):
    """What a store keeps of provider batches (MemoryStore, SQLiteStore and PostgresStore all
    do; see snapshots/*/batches.py). Not part of `SessionStore`: a store without it serves
    everything but `Runtime(batches=...)`."""

    def batch_intent(self, record: BatchRecord, keys: Sequence[str]) -> builtins.list[str]:
        """Record `record` with those of `keys` that something still waits on and no open
        submission holds; returns them (nothing is recorded when none is free)."""

    def batch_update(
        self,
        submission_id: str,
        *,
        status: str,
        at: dt.datetime,
        provider_id: str | None = None,
        counts: dict[str, int] | None = None,
    ) -> None: ...

    def batch_end(
        self, submission_id: str, *, status: str, at: dt.datetime, counts: dict[str, int]
    ) -> None:
        """Mark a submission ended and free its keys."""

    def batch_claim(
        self, submission_id: str, owner: str, until: dt.datetime, now: dt.datetime
    ) -> bool:
        """Lease an open submission to `owner` unless another owner holds it."""

    def batches(
        self, *, open: bool = True, via: str | None = None, limit: int = 1000
    ) -> builtins.list[BatchRecord]: ...

    def batch_keys(self, submission_id: str) -> builtins.list[str]: ...

    def batch_submitted(self, keys: Sequence[str]) -> set[str]: ...

    def batch_turns(
        self, submission_ids: Sequence[str], *, owner: str, slot: int
    ) -> builtins.set[str]:
        """Those of the open submissions `submission_ids` whose status check is `owner`'s in
        the round `slot` (see snapshots/batch_turns.py): the ones it took in that slot before,
        and those no one holds, which it takes now. Writes nothing to the store."""
