"""tarry.batches: provider batch APIs out of the box (re-exports of tarry.drivers.batches).

from tarry.batches import OpenAIBatch, AnthropicBatch, BatchRequest
"""

from __future__ import annotations

from tarry.drivers.batches import (
    AnthropicBatch,
    BatchAdapter,
    BatchItemFailed,
    BatchRecord,
    BatchRequest,
    BatchStatus,
    InvalidBatchRequest,
    OpenAIBatch,
)

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
