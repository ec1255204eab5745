"""A session with many waiting branches, and a racer that resumes them: for the race test of
tests/drivers/containers/test_branch_race.py, whose racers run in threads and in spawned processes.

Each branch records its step in a side-effect log (one line per run, flushed at once), so the
test can count what ran across processes.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

from tarry import Flow, ForEach, Runtime, TarryError, TokenAlreadyUsed, Wait, step


def _record(ctx: Any) -> Any:
    with open(ctx.input["log"], "a") as f:
        f.write(f"{ctx.index} {ctx.prev}\n")
        f.flush()
        os.fsync(f.fileno())
    return ctx.prev * 10


def branches(n: int) -> Flow:
    """n branches that all wait at once, each for its own result, then record it."""
    body = [Wait("result", reason="batch result"), step(_record, "record")]
    return Flow("branches", [ForEach("items", list(range(n)), body, concurrency=None)])


#: Errors that say another call is resuming another branch of the session right now: nothing
#: was changed and the token is still unused, so the racer tries it again a moment later.
BUSY = ("ConcurrentUpdate", "SessionNotResumable")


def race(
    store: str, tokens: list[tuple[str, int]], n: int, seed: int, start: float
) -> list[tuple[str, list[str]]]:
    """Resume every token of `tokens` ((token, branch index) pairs, resumed with the index) in
    an order of this racer's own, alone (`resume`) or a few at once (`resume_many`), from
    `start` on. A batch that loses is tried again token by token; a token that meets a BUSY
    error is tried again later (for up to 10 s). Returns what each call came to: ("won",
    "used", the error's type name, or "untyped" and its type; and the call's tokens)."""
    rt = Runtime(store=store, flows=[branches(n)])
    rng = random.Random(seed)
    order = list(tokens)
    rng.shuffle(order)
    results: list[tuple[str, list[str]]] = []

    def attempt(batch: list[tuple[str, int]]) -> str:
        try:
            if len(batch) == 1:
                rt.resume(batch[0][0], batch[0][1])
            else:
                rt.resume_many(dict(batch))
            what = "won"
        except TokenAlreadyUsed:
            what = "used"
        except TarryError as exc:  # any other typed error: the test says whether it may be
            what = type(exc).__name__
        except Exception as exc:  # an untyped one is a bug: the test fails (or knows it)
            what = f"untyped {type(exc).__module__}.{type(exc).__name__}"
        results.append((what, [token for token, _ in batch]))
        return what

    def again(what: str) -> bool:
        return what in BUSY

    while time.time() < start:
        pass
    later: list[tuple[str, int]] = []
    i = 0
    while i < len(order):
        size = rng.choice((1, 1, 2, 3, 5))
        batch, i = order[i : i + size], i + size
        if attempt(batch) == "won":
            continue
        for one in batch if len(batch) > 1 else ():
            if again(attempt([one])):
                later.append(one)
        if len(batch) == 1 and again(results[-1][0]):
            later.append(batch[0])
    deadline = time.time() + 10
    while later and time.time() < deadline:
        time.sleep(rng.uniform(0.001, 0.01))
        one = later.pop(0)
        if again(attempt([one])):
            later.append(one)
    return results
