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


def make_batches():
    """`tarry worker --batches batchflows:make_batches`: an OpenAIBatch pointed at the fake
    provider whose URL is in $TARRY_FAKE_OPENAI."""
    import os

    import openai
    from tarry.batches import OpenAIBatch

    client = openai.OpenAI(base_url=os.environ["TARRY_FAKE_OPENAI"], api_key="x", max_retries=0)
    return {"openai": OpenAIBatch(client)}
