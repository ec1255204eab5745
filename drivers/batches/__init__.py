"""Provider batch APIs: the adapters (`OpenAIBatch`, `AnthropicBatch`) that `BatchRequest`s
are submitted through, registered as `Runtime(batches={name: adapter})`, and the round that
submits, checks and delivers them (round.py). Re-exported as `tarry.batches`."""

from __future__ import annotations

from tarry.drivers.batches.adapter import BatchAdapter, BatchStatus
from tarry.drivers.batches.providers import AnthropicBatch, OpenAIBatch
from tarry.engine.elements.batch_request import BatchRequest
from tarry.engine.errors import BatchItemFailed, InvalidBatchRequest
from tarry.snapshots.batch_records import BatchRecord

__all__ = [
    "AnthropicBatch",
    "BatchAdapter",
    "BatchItemFailed",
    "BatchRecord",
    "BatchRequest",
    "BatchStatus",
    "InvalidBatchRequest",
    "OpenAIBatch",
]
