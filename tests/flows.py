"""Flows shared by tests that run them in other processes.

Each step records its side effects in a plain text file (one line per start and end, flushed
at once), so a test can count what ran across processes and crashes.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

from tarry import Flow, ForEach, Gate, Runtime


def _record(ctx, what: str) -> None:
    path = ctx.input["log"]
    with open(path, "a") as f:
        f.write(f"{what} {ctx.index} {ctx.idempotency_key}\n")
        f.flush()
        os.fsync(f.fileno())


def work(ctx):
    _record(ctx, "start")
    time.sleep(ctx.input.get("delay", 0) * random.random())
    _record(ctx, "end")
    return ctx.item * 2


def gated_work(ctx):
    _record(ctx, "start")
    _record(ctx, "end")
    return ctx.item + 1


def batch(n: int) -> Flow:
    """A ForEach of n iterations of `work`."""
    return Flow("batch", [ForEach("items", list(range(n)), work)])


def paused_at(k: int, n: int) -> Flow:
    """A ForEach that pauses at a Gate in iteration k."""
    from tarry import Branch

    return Flow(
        "paused_at",
        [
            ForEach(
                "items",
                list(range(n)),
                [gated_work, Branch("maybe", when=lambda ctx: ctx.index == k, then=Gate("ok"))],
            )
        ],
    )


def counts(log: Path) -> dict[str, dict[int, list[str]]]:
    """{"start"|"end": {index: [idempotency keys]}} from a side-effect log."""
    seen: dict[str, dict[int, list[str]]] = {"start": {}, "end": {}}
    for line in log.read_text().splitlines():
        what, index, key = line.split()
        seen[what].setdefault(int(index), []).append(key)
    return seen


def resume_racing(db: str, token: str, start: float, n: int, k: int) -> str:
    """Resume `token` of a `paused_at(k, n)` session as close to `start` as possible."""
    from tarry import TokenAlreadyUsed

    rt = Runtime(store=f"sqlite:///{db}", flows=[paused_at(k, n)])
    while time.time() < start:
        pass
    try:
        rt.resume(token, True)
        return "won"
    except TokenAlreadyUsed:
        return "lost"


if __name__ == "__main__":
    # python flows.py DB LOG N         -> run batch(N) with durability="step", print the session id
    # python flows.py run-to-pause DB LOG K N / resume DB LOG K N TOKEN
    command, *args = sys.argv[1:]
    if command == "batch":
        db, log, n = args
        rt = Runtime(store=f"sqlite:///{db}", durability="step", lease=3600)
        out = rt.run(batch(int(n)), {"log": log, "delay": 0.004}, session_id="crash")
        print(out.status)
    elif command == "run-to-pause":
        db, log, k, n = args
        rt = Runtime(store=f"sqlite:///{db}")
        out = rt.run(paused_at(int(k), int(n)), {"log": log})
        print(out.token)
    elif command == "resume":
        db, log, k, n, token = args
        rt = Runtime(store=f"sqlite:///{db}", flows=[paused_at(int(k), int(n))])
        out = rt.resume(token, True)
        print(out.status, len(out.output))
