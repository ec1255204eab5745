"""Steps that run on an executor of other processes (tests/drivers/containers/test_executors.py):
defined at the top level of a module the workers import by name, so that they pickle."""

from __future__ import annotations

import os
from typing import Any

from tarry import step


class Flaky(Exception):
    """Raised by `fail_first`: a step's own exception, retried by its policy."""


def pid(ctx: Any) -> dict[str, Any]:
    """Which process ran it, and what its ctx held."""
    return {
        "pid": os.getpid(),
        "item": ctx.item,
        "index": ctx.index,
        "input": ctx.input,
        "path": list(ctx.path),
        "key": ctx.idempotency_key,
        "session": ctx.session_id,
    }


def boom(ctx: Any) -> None:
    if ctx.item == 2:
        raise ValueError(f"no {ctx.item} in pid {os.getpid()}")


def fail_first(ctx: Any) -> int:
    """Fails on its first attempt, in the worker; the driver's retry sends it again."""
    if ctx.attempt == 1:
        raise Flaky(f"attempt {ctx.attempt} of item {ctx.item}")
    return ctx.item * 100 + ctx.attempt


def effects(ctx: Any) -> int:
    """Reads and writes ctx.state, records a metric: applied in the driving process."""
    seen = ctx.state.get("seed", 0)
    ctx.state[f"item{ctx.item}"] = seen + ctx.item
    if "drop" in ctx.state:
        del ctx.state["drop"]
    ctx.metric("weight", ctx.item)
    return seen


def ask(ctx: Any) -> dict[str, Any]:
    """Pauses for a human in the worker; resumed, it runs again and gets the value."""
    answer = ctx.interrupt(f"ok {ctx.item}?", payload={"item": ctx.item})
    return {"item": ctx.item, "answer": answer, "pid": os.getpid()}


def reads_outputs(ctx: Any) -> Any:
    return ctx.outputs["first"]


def unsendable_output(ctx: Any) -> Any:
    return lambda: None


@step(name="decorated")
def decorated(ctx: Any) -> int:
    """A module-level `@step`: the module holds the Step, not the function."""
    return ctx.item + 1


#: What `noted` and `flaky_thirds` ran in this process (an in-process executor's steps).
RAN: list[Any] = []


def noted(ctx: Any) -> dict[str, Any]:
    """Notes its item in `RAN`; what its lane's ctx held."""
    RAN.append(ctx.item)
    return {"item": ctx.item, "index": ctx.index, "attempt": ctx.attempt}


def flaky_thirds(ctx: Any) -> int:
    """Items divisible by 3 fail their first attempt; the others complete at once."""
    RAN.append(ctx.item)
    if ctx.item % 3 == 0 and ctx.attempt == 1:
        raise Flaky(f"attempt 1 of item {ctx.item}")
    return ctx.item * 100 + ctx.attempt


class Crash(BaseException):
    """The driving process dies (escapes every step's error handling, as a kill would)."""


#: Items `crash_once` crashed on already (it runs in this process, on an in-process executor).
CRASHED: list[Any] = []


def crash_once(ctx: Any) -> int:
    """Notes its item; on item 7, the first time, the driving process "dies"."""
    RAN.append(ctx.item)
    if ctx.item == 7 and not CRASHED:
        CRASHED.append(ctx.item)
        raise Crash
    return ctx.item * 10
