"""tarry's side of each workload. Imported by the benchmarks and by the processes they spawn."""

from __future__ import annotations

from typing import Any

from tarry import Branch, Flow, ForEach, Gate, step


def noop(ctx: Any) -> None:
    return None


def chain(n: int) -> Flow:
    """n no-op steps in a row."""
    return Flow("chain", [step(noop, f"s{i}") for i in range(n)])


def batch(n: int) -> Flow:
    """A ForEach over n items whose body is one no-op step."""
    return Flow("batch", [ForEach("items", list(range(n)), noop)])


def paused_loop(n: int, k: int) -> Flow:
    """A ForEach over n items whose one step interrupts at every item from k on.

    `run` goes straight to item k and pauses; each resume finishes that item and pauses at the
    next one: one pause -> resume round trip. The items are part of the definition and the
    results are collected by the engine, as in the LangGraph version of this loop.
    """

    def work(ctx: Any) -> Any:
        if ctx.index >= k:
            ctx.interrupt("review")
        return ctx.item

    return Flow("paused_loop", [ForEach("items", list(range(n)), step(work, "work"))])


def gated_loop(n: int, k: int) -> Flow:
    """The same loop paused by a Gate (with its decision check) instead of ctx.interrupt."""

    def late(ctx: Any) -> bool:
        return ctx.index >= k

    body = [step(noop, "work"), Branch("check", late, Gate("review"))]
    return Flow("gated_loop", [ForEach("items", list(range(n)), body)])


def ticket() -> Flow:
    """A small flow that pauses once: three steps, a Gate, one step."""
    return Flow(
        "ticket",
        [step(noop, "a"), step(noop, "b"), step(noop, "c"), Gate("approve"), step(noop, "d")],
    )
