"""A batch evaluation: 1,000 prompts answered by a model, graded by a batch API, signed off by a
human — one session, durable in SQLite, and no thread held while it waits.

1. `answer`: one async model call per prompt, 50 in flight at once (`ForEach(concurrency=50)`)
   on one event loop, against a local fake model that takes a few milliseconds.
2. `grade`: every answer goes to a (fake) batch grading API, and each iteration waits for its
   own grade (`Wait`). With `concurrency=None` all 1,000 wait at once: the session pauses with
   1,000 waits, each with its own token (`out.pauses`).
3. When the batch job is done, ONE `resume_many` hands every grade back: one drive of the
   session and one store write, not 1,000.
4. `score` sums it up, and a `Gate` asks a human to approve the scores (this script approves).

    python examples/batch_eval.py          # or: make demo-batch
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

from tarry import Flow, ForEach, Gate, Runtime, Wait

PROMPTS = 1_000
IN_FLIGHT = 50  # model calls at once


# -- the outside world: a model and a batch grading API (local fakes) -----------------------


class FakeModel:
    """An LLM endpoint: a few milliseconds per call, right nine times out of ten."""

    async def complete(self, prompt: dict) -> int:
        await asyncio.sleep(random.uniform(0.002, 0.008))
        right = prompt["a"] + prompt["b"]
        return right if random.random() < 0.9 else right + 1


class FakeBatchGrader:
    """A batch API: take many jobs at once, answer them all later."""

    def __init__(self) -> None:
        self.queued: dict[int, bool] = {}

    def submit(self, item: int, correct: bool) -> None:
        self.queued[item] = correct

    def results(self) -> dict[int, float]:
        """Every grade, once the batch job has finished: item -> score."""
        return {item: 1.0 if correct else 0.0 for item, correct in self.queued.items()}


MODEL = FakeModel()
GRADER = FakeBatchGrader()


# -- the flow -----------------------------------------------------------------------------


async def call_model(ctx):
    prompt = ctx.item
    answer = await MODEL.complete(prompt)
    return {"id": prompt["id"], "answer": answer, "expected": prompt["a"] + prompt["b"]}


async def submit_for_grading(ctx):  # an API call: async, so all of them share the loop
    # ctx.item is this iteration's answer (ctx.input would copy all 1,000 prompts each time)
    GRADER.submit(ctx.index, ctx.item["answer"] == ctx.item["expected"])
    return ctx.item["id"]


def score(ctx):
    grades = ctx.outputs["grade"]
    return {"graded": len(grades), "mean": sum(grades) / len(grades)}


def publish(ctx):
    decision = ctx.outputs["approve"]
    return {**ctx.outputs["score"], "published": decision["approved"], "by": decision.get("by")}


FLOW = Flow(
    "batch_eval",
    [
        ForEach("answer", lambda ctx: ctx.input["prompts"], call_model, concurrency=IN_FLIGHT),
        ForEach(
            "grade",
            "answer",
            [
                submit_for_grading,
                # The iteration waits here for its grade. Its path, ("grade", index, "graded"),
                # tells which item it is, and so does its key, the name the batch API knows
                # the job by: `rt.deliver_many({"grade/7": 1.0, ...})` resumes by key, with no
                # token at all (see docs/batch.md).
                Wait("graded", reason="batch grade", key=lambda ctx: f"grade/{ctx.index}"),
            ],
            concurrency=None,  # all at once: they only wait
        ),
        score,
        Gate("approve", lambda ctx: f"Publish a mean score of {ctx.prev['mean']:.3f}?"),
        publish,
    ],
)


async def main(store: str) -> dict:
    random.seed(7)
    prompts = [{"id": f"p{i}", "a": i, "b": 2 * i} for i in range(PROMPTS)]
    rt = Runtime(store=store)

    started = time.perf_counter()
    out = await rt.arun(FLOW, {"prompts": prompts})
    answered = time.perf_counter()
    print(f"1. {PROMPTS} model calls, {IN_FLIGHT} in flight: {answered - started:.2f} s")
    print(f"2. paused with {len(out.pauses)} waits for the batch grader, each with its own token")

    # The batch job finished: every grade goes back with ONE call, to the wait of its item
    # (the index in the wait's path).
    grades = GRADER.results()
    [out] = await rt.aresume_many({p.token: grades[p.path[1]] for p in out.pauses})
    resumed = time.perf_counter()
    print(f"3. one resume_many of {len(grades)} grades: {resumed - answered:.2f} s")

    print(f"4. the Gate asks: {out.pause.reason!r} (approved here)")
    out = await rt.aresume(out.token, {"approved": True, "by": "reviewer"})
    assert out.ok, out.error
    view = rt.session(out.session_id)
    assert view.derive_state() == view.state
    print(
        f"5. done in {time.perf_counter() - started:.2f} s: {out.output}, "
        f"{len(view.events())} events"
    )
    return out.output


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        store = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(tmp) / 'eval.db'}"
        asyncio.run(main(store))
