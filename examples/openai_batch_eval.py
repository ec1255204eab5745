"""An evaluation through OpenAI's Batch API: 1,000 prompts, each a `BatchRequest`, submitted by
tarry as ONE batch (one file upload, one batch), waited for without holding a process, and
delivered back by `custom_id` when the batch ends — no glue code.

It runs against the project's own fake OpenAI server (tests/batchfake.py, a real HTTP server on
127.0.0.1 that speaks the Files and Batches API), through the official `openai` SDK: point the
client at api.openai.com and it is the real thing.

1. `run`: the session pauses with 1,000 waiting requests (one PauseInfo each).
2. `poll()`: tarry gathers them, uploads one JSONL file, creates one batch carrying its own
   submission id in the batch's metadata, and records which keys went into it.
3. polls while the batch runs: one status call each, no store write.
4. the batch completes; the next `poll()` streams the output file and delivers every answer to
   its request through `deliver_many`: the session goes on and scores the answers.

    python examples/openai_batch_eval.py        # or: make demo-batch
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from batchfake import FakeProvider  # noqa: E402  (the project's fake OpenAI server)
from tarry import BatchRequest, Flow, ForEach, Runtime  # noqa: E402
from tarry.batches import OpenAIBatch  # noqa: E402

PROMPTS = 1_000


def request(ctx):
    """One chat completion request of the batch: the body OpenAI's /v1/chat/completions takes."""
    return {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Reverse the user's text."},
            {"role": "user", "content": ctx.item["text"]},
        ],
        "max_tokens": 50,
    }


def answer_key(ctx):
    """The request's custom_id: a name the provider's files show it by (64 characters at most)."""
    return f"eval-7-{ctx.item['id']}"


def score(ctx):
    prompts = ctx.input
    answers = ctx.outputs["ask"]
    right = sum(
        a["choices"][0]["message"]["content"] == p["text"][::-1]
        for p, a in zip(prompts, answers, strict=True)
    )
    return {"prompts": len(prompts), "right": right, "accuracy": right / len(prompts)}


FLOW = Flow(
    "openai_batch_eval",
    [
        ForEach(
            "ask",
            lambda ctx: ctx.input,
            BatchRequest("answer", request, via="openai", key=answer_key),
            concurrency=None,  # every request waits at once: they are one batch
        ),
        score,
    ],
)


def main(store: str) -> dict:
    prompts = [{"id": f"p{i}", "text": f"prompt number {i}"} for i in range(PROMPTS)]
    with FakeProvider() as provider:
        client = openai.OpenAI(base_url=provider.openai_url, api_key="sk-fake", max_retries=0)
        rt = Runtime(store=store, batches={"openai": OpenAIBatch(client, window="24h")})

        started = time.perf_counter()
        out = rt.run(FLOW, prompts)
        print(f"1. paused with {len(out.pauses)} BatchRequests waiting")

        rt.poll()
        [batch] = rt.store.batches()
        print(
            f"2. one poll submitted them: {provider.count('POST', '/v1/files')} file upload, "
            f"{len(provider.batches)} batch ({batch.provider_id}, {batch.total} requests)"
        )

        for _ in range(3):
            assert rt.poll() == []
        print("3. three polls while it runs: one status call each, nothing written")

        provider.complete()  # the provider finishes the batch (hours later, for real)
        [out] = rt.poll()
        assert out.ok, out.error
        print(f"4. the batch ended: one poll delivered {PROMPTS} answers by custom_id")
        submitted_twice = [k for k, n in provider.submitted.items() if n > 1]
        assert not submitted_twice
        print(f"5. done in {time.perf_counter() - started:.2f} s: {out.output}")
        return out.output


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        store = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(tmp) / 'eval.db'}"
        main(store)
