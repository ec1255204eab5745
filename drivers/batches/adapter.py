"""What the batch round asks of a provider's batch adapter (`BatchAdapter`), and the checks and
splitting every adapter shares."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Protocol

import attrs
from tarry.snapshots.batch_records import BatchRecord

#: The metadata key under which a batch carries tarry's submission id (where the provider
#: keeps metadata).
SUBMISSION = "tarry_submission"

#: How many of the provider's most recent batches `find` looks through.
FIND_LIMIT = 1000


@attrs.frozen
class BatchStatus:
    """What one status call tells of a provider batch: its status, whether it has ended (its
    results can be read), and its request counts."""

    status: str
    ended: bool
    counts: dict[str, int] = attrs.field(factory=dict)


class BatchAdapter(Protocol):
    """A provider's batch API, as the batch round uses it (OpenAIBatch, AnthropicBatch)."""

    #: The most requests, and bytes of request lines, in one batch.
    max_requests: int
    max_bytes: int

    def problem(self, key: str, body: dict[str, Any]) -> str | None:
        """What stops `body` under `key` from being one request of this provider, or None."""

    def line(self, key: str, body: dict[str, Any]) -> bytes:
        """The request as it is uploaded (its size counts towards `max_bytes`)."""

    def submit(self, submission_id: str, lines: list[bytes]) -> tuple[str, BatchStatus]:
        """Upload the requests as one batch carrying `submission_id`; its provider id and
        status."""

    def find(self, record: BatchRecord, taken: set[str]) -> str | None:
        """The provider id of the batch `record` submitted, if the provider has it (a worker
        died between the upload and the record); `taken`: provider ids already recorded."""

    def status(self, provider_id: str) -> BatchStatus: ...

    def results(self, provider_id: str, status: BatchStatus) -> Iterator[tuple[str, Any]]:
        """(custom_id, value) for each result of an ended batch, streamed (see results.py)."""

    def cancel(self, provider_id: str) -> None: ...


def json_line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


#: Anthropic's custom_id: 1 to 64 of letters, digits, _ and -. OpenAI only limits the length.
ANTHROPIC_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


def split(
    items: list[tuple[str, bytes]], max_requests: int, max_bytes: int
) -> Iterator[list[tuple[str, bytes]]]:
    """`items` (key, line) in order, in groups within both limits."""
    group: list[tuple[str, bytes]] = []
    size = 0
    for key, line in items:
        if group and (len(group) >= max_requests or size + len(line) > max_bytes):
            yield group
            group, size = [], 0
        group.append((key, line))
        size += len(line)
    if group:
        yield group
