"""The batch adapters over the providers' official SDK clients: `OpenAIBatch` (Files + Batches,
`openai`) and `AnthropicBatch` (Message Batches, `anthropic`). Each takes a client the caller
made (its key, base_url, retries and timeouts are the caller's), so this module imports no SDK.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

from tarry.drivers.batches.adapter import (
    ANTHROPIC_KEY,
    FIND_LIMIT,
    SUBMISSION,
    BatchStatus,
    json_line,
)
from tarry.drivers.batches.results import anthropic_line, failed, openai_line
from tarry.engine.errors import InvalidArgument
from tarry.snapshots.batch_records import BatchRecord

#: OpenAI's limits per batch: 50,000 requests, an input file of 200 MB.
OPENAI_MAX_REQUESTS = 50_000
OPENAI_MAX_BYTES = 200 * 1000 * 1000
#: Anthropic's: 100,000 requests, 256 MB.
ANTHROPIC_MAX_REQUESTS = 100_000
ANTHROPIC_MAX_BYTES = 256 * 1000 * 1000
#: Both providers' custom_id limit, in characters.
MAX_CUSTOM_ID = 64

_OPENAI_ENDED = ("completed", "expired", "cancelled", "failed")


def _checked_client(adapter: str, client: Any, needs: tuple[str, ...], made: str) -> Any:
    """`client` if it has each attribute path of `needs` (an SDK client's resources), else
    InvalidArgument naming the client to pass (`made`)."""
    for need in needs:
        found = client
        for part in need.split("."):
            found = getattr(found, part, None)
        if found is None:
            msg = f"{adapter}(client=...) takes an SDK client, {made} (got {client!r}, without .{need})"
            raise InvalidArgument(msg)
    return client


def _limit(adapter: str, name: str, value: int, most: int) -> int:
    """`value` capped at the provider's `most`; InvalidArgument unless a positive int."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        msg = f"{adapter}({name}=...) must be a positive int (got {value!r})"
        raise InvalidArgument(msg)
    return min(value, most)


def _plain(obj: Any) -> Any:
    """A pydantic model of an SDK as plain JSON values."""
    dump = getattr(obj, "model_dump", None)
    return dump(mode="json") if dump is not None else obj


class OpenAIBatch:
    """OpenAI's Batch API: `OpenAIBatch(client=openai.OpenAI(), endpoint="/v1/chat/completions",
    window="24h")`. Each BatchRequest's body is the request body for `endpoint`; a batch is one
    uploaded JSONL file (purpose "batch") and one batch carrying `metadata={"tarry_submission":
    ...}`, by which a worker that died before recording it finds it again."""

    max_requests = OPENAI_MAX_REQUESTS
    max_bytes = OPENAI_MAX_BYTES

    def __init__(
        self,
        client: Any,
        *,
        endpoint: str = "/v1/chat/completions",
        window: str = "24h",
        max_requests: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.client = _checked_client(
            "OpenAIBatch", client, ("files", "batches"), "such as openai.OpenAI()"
        )
        self.endpoint = endpoint
        self.window = window
        if max_requests is not None:
            self.max_requests = _limit(
                "OpenAIBatch", "max_requests", max_requests, OPENAI_MAX_REQUESTS
            )
        if max_bytes is not None:
            self.max_bytes = _limit("OpenAIBatch", "max_bytes", max_bytes, OPENAI_MAX_BYTES)

    def __repr__(self) -> str:
        return f"OpenAIBatch(endpoint={self.endpoint!r}, window={self.window!r})"

    def problem(self, key: str, body: dict[str, Any]) -> str | None:
        if len(key) > MAX_CUSTOM_ID:
            return f"key {key[:20]!r}... has {len(key)} characters, over OpenAI's custom_id limit of {MAX_CUSTOM_ID}"
        if len(self.line(key, body)) > self.max_bytes:
            return f"body is larger than one batch file may be ({self.max_bytes} bytes)"
        return None

    def line(self, key: str, body: dict[str, Any]) -> bytes:
        return json_line({"custom_id": key, "method": "POST", "url": self.endpoint, "body": body})

    def submit(self, submission_id: str, lines: list[bytes]) -> tuple[str, BatchStatus]:
        data = b"".join(lines)
        file = self.client.files.create(
            file=(f"{submission_id}.jsonl", io.BytesIO(data)), purpose="batch"
        )
        batch = self.client.batches.create(
            input_file_id=file.id,
            endpoint=self.endpoint,
            completion_window=self.window,
            metadata={SUBMISSION: submission_id},
        )
        return batch.id, self._status(batch)

    def find(self, record: BatchRecord, taken: set[str]) -> str | None:
        for seen, batch in enumerate(self.client.batches.list(limit=100)):
            if seen >= FIND_LIMIT:
                break
            if (batch.metadata or {}).get(SUBMISSION) == record.submission_id:
                return str(batch.id)
        return None

    def status(self, provider_id: str) -> BatchStatus:
        return self._status(self.client.batches.retrieve(provider_id))

    def _status(self, batch: Any) -> BatchStatus:
        counts = _plain(batch.request_counts) or {}
        return BatchStatus(batch.status, batch.status in _OPENAI_ENDED, dict(counts))

    def results(self, provider_id: str, status: BatchStatus) -> Iterator[tuple[str, Any]]:
        batch = self.client.batches.retrieve(provider_id)
        if batch.status == "failed":
            # The whole batch was refused (validation): every request fails with its errors.
            error = {"batch_failed": _plain(batch.errors)}
            for line in self._lines(batch.input_file_id):
                yield json.loads(line)["custom_id"], failed(error)
            return
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                for line in self._lines(file_id):
                    yield openai_line(json.loads(line))

    def _lines(self, file_id: str) -> Iterator[bytes]:
        # Streamed: a 200 MB result file is never held whole.
        with self.client.files.with_streaming_response.content(file_id) as response:
            for line in response.iter_lines():
                if line.strip():
                    yield line

    def cancel(self, provider_id: str) -> None:
        self.client.batches.cancel(provider_id)


class AnthropicBatch:
    """Anthropic's Message Batches: `AnthropicBatch(client=anthropic.Anthropic())`. Each
    BatchRequest's body is the `params` of one request (model, max_tokens, messages, ...).

    Message batches carry no metadata: a worker that died between the submission and the
    record finds its batch again as the most recent one with the same number of requests
    that no other submission recorded (and only the keys it recorded are delivered from it)."""

    max_requests = ANTHROPIC_MAX_REQUESTS
    max_bytes = ANTHROPIC_MAX_BYTES

    def __init__(
        self, client: Any, *, max_requests: int | None = None, max_bytes: int | None = None
    ) -> None:
        self.client = _checked_client(
            "AnthropicBatch", client, ("messages.batches",), "such as anthropic.Anthropic()"
        )
        if max_requests is not None:
            self.max_requests = _limit(
                "AnthropicBatch", "max_requests", max_requests, ANTHROPIC_MAX_REQUESTS
            )
        if max_bytes is not None:
            self.max_bytes = _limit("AnthropicBatch", "max_bytes", max_bytes, ANTHROPIC_MAX_BYTES)

    def __repr__(self) -> str:
        return "AnthropicBatch()"

    def problem(self, key: str, body: dict[str, Any]) -> str | None:
        if not ANTHROPIC_KEY.fullmatch(key):
            shown = key if len(key) <= 80 else f"{key[:20]}... ({len(key)} characters)"
            return (
                f"key {shown!r} is not an Anthropic custom_id (1 to {MAX_CUSTOM_ID} letters, "
                "digits, _ or -)"
            )
        missing = [name for name in ("model", "max_tokens", "messages") if name not in body]
        if missing:
            return f"body lacks {', '.join(missing)} (the params of a Messages request)"
        if len(self.line(key, body)) > self.max_bytes:
            return f"body is larger than one batch may be ({self.max_bytes} bytes)"
        return None

    def line(self, key: str, body: dict[str, Any]) -> bytes:
        return json_line({"custom_id": key, "params": body})

    def submit(self, submission_id: str, lines: list[bytes]) -> tuple[str, BatchStatus]:
        requests = [json.loads(line) for line in lines]
        batch = self.client.messages.batches.create(requests=requests)
        return batch.id, self._status(batch)

    def find(self, record: BatchRecord, taken: set[str]) -> str | None:
        for seen, batch in enumerate(self.client.messages.batches.list(limit=100)):
            if seen >= FIND_LIMIT:
                break
            counts = _plain(batch.request_counts) or {}
            if batch.id not in taken and sum(counts.values()) == record.total:
                return str(batch.id)
        return None

    def status(self, provider_id: str) -> BatchStatus:
        return self._status(self.client.messages.batches.retrieve(provider_id))

    def _status(self, batch: Any) -> BatchStatus:
        counts = dict(_plain(batch.request_counts) or {})
        return BatchStatus(batch.processing_status, batch.processing_status == "ended", counts)

    def results(self, provider_id: str, status: BatchStatus) -> Iterator[tuple[str, Any]]:
        for item in self.client.messages.batches.results(provider_id):
            yield anthropic_line(_plain(item))

    def cancel(self, provider_id: str) -> None:
        self.client.messages.batches.cancel(provider_id)
