"""Flows of the batch tests, importable by `MODULE:FLOW` (the CLI and subprocesses load them)."""

from __future__ import annotations

from tarry import BatchRequest, Flow, ForEach


def chat(ctx):
    return {"model": "m", "messages": [{"role": "user", "content": ctx.item}]}


def params(ctx):
    return {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": ctx.item}]}


def _key(ctx):
    return f"k-{ctx.item}"


def _items(ctx):
    return ctx.input


def _flow(via: str, body) -> Flow:
    return Flow(
        f"cli-{via}",
        [ForEach("items", _items, BatchRequest("ask", body, via=via, key=_key), concurrency=None)],
    )


openai_flow = _flow("openai", chat)
claude_flow = _flow("claude", params)
