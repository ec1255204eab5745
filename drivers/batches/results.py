"""Result lines of the providers' batch formats, read as (key, value) deliveries: what the batch
round delivers and what `tarry deliver --file --format` reads.

A response becomes its body; a provider's error for a request becomes `{BATCH_ERROR: error}`
(a `BatchRequest` fails with `BatchItemFailed` on it); a request the provider did not finish
(expired or cancelled with its batch) becomes UNFINISHED: nothing is delivered for it, and the
batch round submits it again.
"""

from __future__ import annotations

from typing import Any

from tarry.engine.elements.batch_request import BATCH_ERROR

#: The formats `tarry deliver --format` reads.
FORMATS = ("jsonl", "openai", "anthropic")


class _Unfinished:
    def __repr__(self) -> str:
        return "UNFINISHED"


#: What a result line of a request the provider did not finish reads as.
UNFINISHED = _Unfinished()

#: OpenAI's error codes of requests left undone by their batch's end (not the request's fault).
_OPENAI_UNDONE = ("batch_expired", "batch_cancelled")


def failed(error: Any) -> dict[str, Any]:
    """The delivered value of a provider's error for one request."""
    return {BATCH_ERROR: error}


def openai_line(item: Any) -> tuple[str, Any]:
    """(custom_id, value) of one line of an OpenAI batch's output or error file."""
    if not isinstance(item, dict) or not isinstance(item.get("custom_id"), str):
        raise ValueError('expected an OpenAI batch result line with a "custom_id"')
    key = item["custom_id"]
    error = item.get("error")
    if error:
        if isinstance(error, dict) and error.get("code") in _OPENAI_UNDONE:
            return key, UNFINISHED
        return key, failed(error)
    response = item.get("response")
    if not isinstance(response, dict):
        raise ValueError('expected a "response" or an "error"')
    status = response.get("status_code", 200)
    body = response.get("body")
    if not isinstance(status, int) or status >= 400:
        inner = body.get("error", body) if isinstance(body, dict) else body
        return key, failed({"status_code": status, "error": inner})
    return key, body


def anthropic_line(item: Any) -> tuple[str, Any]:
    """(custom_id, value) of one line of an Anthropic message batch's results."""
    if not isinstance(item, dict) or not isinstance(item.get("custom_id"), str):
        raise ValueError('expected an Anthropic batch result line with a "custom_id"')
    key = item["custom_id"]
    result = item.get("result")
    if not isinstance(result, dict):
        raise ValueError('expected a "result"')
    kind = result.get("type")
    if kind == "succeeded":
        return key, result["message"]
    if kind == "errored":
        return key, failed(result.get("error"))
    if kind in ("canceled", "expired"):
        return key, UNFINISHED
    raise ValueError('expected a "result" of type succeeded, errored, canceled or expired')


def jsonl_line(item: Any) -> tuple[str, Any]:
    """(key, value) of a `{"key": ..., "value": ...}` line."""
    if not isinstance(item, dict) or "key" not in item or set(item) - {"key", "value"}:
        raise ValueError('expected {"key": ..., "value": ...}')
    return item["key"], item.get("value")


READERS = {"jsonl": jsonl_line, "openai": openai_line, "anthropic": anthropic_line}
