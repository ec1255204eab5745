"""What runs inside a process the crash campaign kills: the flow, its SQLite ledger, the kill plan.

The campaign forks one child per generation of a trial. A child opens the trial's session store
and ledger, drives the one session of the trial as far as it can (starting it, recovering it
after a kill, answering its gates and its interrupt), and either finishes it or is killed with
SIGKILL: by the parent after a delay, or by itself at the n-th ledger write of this process.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from datetime import UTC, datetime
from typing import Any

import attrs
from tarry import Branch, Flow, ForEach, Gate, Graph, Loop, Route, Runtime, TarryError, step
from tarry.engine.retry import Retry
from tarry.snapshots import SQLiteStore

SESSION = "crash"
#: Short, so that the next generation takes over soon after a kill. Generations never overlap
#: (the parent reaps a child before it starts the next), so a short lease cannot be stolen.
LEASE = 0.1
INPUT = {"qty": [1, 3, 2, 4]}
#: Where a self-kill lands around the n-th ledger write: before the side effect, after it was
#: committed (the step has not returned), after the step's `node.completed` was emitted (not yet
#: written), and right after the write that made that completion durable.
PHASES = ("before_effect", "after_effect", "completed", "flushed")
#: How long one generation may take before the parent calls it hung.
GENERATION_TIMEOUT = 60.0


class CampaignError(TarryError):
    """The campaign's run did not go as a run of this flow must (a failed outcome, a hang)."""


@attrs.frozen
class Plan:
    """What one generation is told. `write`/`phase`: kill yourself at that ledger write of this
    process; `delay`: the parent kills you that many seconds after you report ready."""

    generation: int
    write: int | None = None
    phase: str | None = None
    delay: float | None = None
    #: "pause" is a deliberately weaker mode: the campaign must fail with it.
    durability: str = "step"

    @property
    def kills(self) -> bool:
        return self.write is not None or self.delay is not None

    def describe(self) -> str:
        if self.write is not None:
            return f"self-kill at write {self.write} ({self.phase})"
        if self.delay is not None:
            return f"external kill after {self.delay * 1000:.1f} ms"
        return "no kill"


# -- per-process state of a child (set by `main`, after the fork) -----------------------------
_plan = Plan(0)
_writes = 0
_armed: tuple[Any, ...] | None = None  # the path whose completion a late phase waits for
_flush_armed = False
_ledger: sqlite3.Connection | None = None


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # SIGKILL is delivered at once; never go on in the meantime


def open_ledger(path: str) -> sqlite3.Connection:
    # Autocommit: every INSERT is committed when execute() returns, before the step does.
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS runs (key TEXT NOT NULL, path TEXT NOT NULL, "
        "attempt INTEGER NOT NULL, generation INTEGER NOT NULL, at INTEGER NOT NULL)"
    )
    return conn


def read_ledger(path: str) -> list[tuple[str, tuple[Any, ...], int, int]]:
    """Every recorded execution as (key, path, attempt, generation), in commit order. (`at`,
    the wall-clock time, is only for people reading a kept ledger.)"""
    conn = open_ledger(path)
    try:
        rows = conn.execute(
            "SELECT key, path, attempt, generation FROM runs ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()
    return [(k, tuple(json.loads(p)), a, g) for k, p, a, g in rows]


def effect(ctx: Any, value: Any) -> Any:
    """The side effect of a step: one committed ledger row per execution, then `value`."""
    global _writes, _armed
    _writes += 1
    here = _plan.write == _writes
    if here and _plan.phase == "before_effect":
        _die()
    at = time.time_ns() // 1000
    assert _ledger is not None
    _ledger.execute(
        "INSERT INTO runs (key, path, attempt, generation, at) VALUES (?, ?, ?, ?, ?)",
        (ctx.idempotency_key, json.dumps(list(ctx.path)), ctx.attempt, _plan.generation, at),
    )
    if here:
        if _plan.phase == "after_effect":
            _die()
        _armed = tuple(ctx.path)
    return value


def _on_event(event: Any) -> None:
    """Subscriber for the late phases: fires when the armed step's completion is emitted."""
    global _flush_armed
    if _armed is not None and event.type == "node.completed" and event.path == _armed:
        if _plan.phase == "completed":
            _die()
        _flush_armed = True


def _kill_after_write(write: Any) -> Any:
    """Wrap a store write: die right after the one that made the armed completion durable."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = write(*args, **kwargs)
        if _flush_armed:
            _die()
        return result

    return wrapped


# -- the flow --------------------------------------------------------------------------------
class Flaky(Exception):
    """The first attempt of `flaky` fails, so retries meet crashes too."""


def prepare(ctx):
    return effect(ctx, [{"sku": f"s{i}", "qty": q} for i, q in enumerate(ctx.input["qty"])])


def price(ctx):
    # Shared state changes ride on the step's completion: a crash must neither lose nor double them.
    ctx.state["units"] = ctx.state.get("units", 0) + ctx.item["qty"]
    return effect(ctx, ctx.item["qty"] * 5 + ctx.index)


def charge(ctx):
    return effect(ctx, ctx.outputs["price"] * (ctx.iteration + 1))


def check(ctx):
    approved = ctx.outputs["approve"]["approved"]
    return effect(ctx, Route("ship" if approved else "hold", ctx.outputs["settle"]))


def ship(ctx):
    return effect(ctx, {"shipped": ctx.item["sku"], "amount": ctx.prev})


def hold(ctx):
    return effect(ctx, {"held": ctx.item["sku"], "amount": ctx.prev})


def note(ctx):
    return effect(ctx, {"small": ctx.item["sku"], "amount": ctx.outputs["settle"]})


def count(ctx):
    ctx.state["tallies"] = ctx.state.get("tallies", 0) + 1
    return effect(ctx, f"{ctx.item}:{ctx.iteration}")


@step(retry=Retry(attempts=3, backoff="fixed", initial=0.0, jitter=False))
def flaky(ctx):
    effect(ctx, None)
    if ctx.attempt < 2:
        raise Flaky("first attempt fails")
    return ctx.attempt


def ask(ctx):
    # The interrupt pauses before the effect; on resume the step runs again with the value.
    answer = ctx.interrupt("factor?", kind="external", payload={"n": len(ctx.outputs["orders"])})
    return effect(ctx, answer["factor"] * ctx.state["units"])


def summarize(ctx):
    out = {name: ctx.outputs[name] for name in ("orders", "regions", "flaky", "ask")}
    return effect(ctx, {**out, "units": ctx.state["units"], "tallies": ctx.state["tallies"]})


def build_flow() -> Flow:
    """Nested containers three deep (regions > zones > tally), two gates, a Graph, a retried
    step and an interrupt; every step writes one ledger row per execution."""
    order = [
        price,
        Loop("settle", charge, until=lambda ctx: ctx.iteration >= 1, max_iterations=3),
        Branch(
            "big",
            when=lambda ctx: ctx.item["qty"] >= 3,
            then=[
                Gate("approve", "large order"),
                Graph(
                    "route",
                    [check, ship, hold],
                    start="check",
                    routes={"check": {"ship": "ship", "hold": "hold"}},
                ),
            ],
            otherwise=note,
        ),
    ]
    zones = ForEach(
        "zones",
        lambda ctx: [f"{ctx.item}-a", f"{ctx.item}-b"],
        Loop("tally", count, until=lambda ctx: ctx.iteration >= 1, max_iterations=2),
    )
    return Flow(
        "crash",
        [
            prepare,
            ForEach("orders", "prepare", order),
            ForEach("regions", ["eu", "us"], zones),
            flaky,
            ask,
            summarize,
        ],
    )


FLOW = build_flow()


def answer(pause: Any) -> Any:
    """The deterministic decision for a pause: the gate of order 1 is rejected."""
    if pause.kind == "human":
        return {"approved": pause.path[1] != 1, "by": "crash-campaign"}
    return {"factor": pause.payload["n"] + 1}


# -- one generation ----------------------------------------------------------------------------
def main(plan: Plan, db: str, ledger: str, ready_fd: int) -> None:
    """Drive the trial's session until it completes (or this process is killed).

    Writes one byte to `ready_fd` when the previous generation's lease has run out and the
    real work begins, so that the parent's kill delay counts from there."""
    global _plan, _ledger, _writes, _armed, _flush_armed
    _plan, _writes, _armed, _flush_armed = plan, 0, None, False
    _ledger = open_ledger(ledger)
    store = SQLiteStore(db)
    try:
        _drive(plan, store, ready_fd)
    finally:  # in a test's own process (a child just exits)
        store.close()
        _ledger.close()
        _ledger = None


def _drive(plan: Plan, store: SQLiteStore, ready_fd: int) -> None:
    if plan.durability == "pause":
        # The campaign on durability="pause" counts the steps lost since the last pause: a
        # drive's once-a-TICK progress write (what other processes see of a running session)
        # would make that count depend on how fast this machine runs. Off, for this child only.
        from tarry.drivers.drive import drive as drive_module

        drive_module.TICK = float("inf")
    rt = Runtime(store=store, durability=plan.durability, lease=LEASE, flows=[FLOW])
    if plan.phase in ("completed", "flushed"):
        rt.subscribe(_on_event)
        store.append_events = _kill_after_write(store.append_events)  # type: ignore[method-assign]
        store.save = _kill_after_write(store.save)  # type: ignore[method-assign]
    record = store.load(SESSION)
    if record is not None and record.lease_until is not None:
        time.sleep(max(0.0, (record.lease_until - datetime.now(UTC)).total_seconds()))
    os.write(ready_fd, b"r")
    deadline = time.monotonic() + GENERATION_TIMEOUT
    while time.monotonic() < deadline:
        record = store.load(SESSION)
        if record is None:
            out = rt.run(FLOW, INPUT, session_id=SESSION)
        elif record.status == "completed":
            return
        elif record.lease_owner is not None:
            # Held by a generation that died: started, recovered, or resumed (the record's
            # status column still says "paused" after a resume until the next full save).
            outcomes = rt.recover()
            if not outcomes:  # the lease has not quite run out on this clock
                time.sleep(0.002)
                continue
            [out] = outcomes
        elif record.status == "paused":
            pause = rt.session(SESSION).state.pause
            out = rt.resume(record.token, answer(pause))
        else:
            msg = f"session {SESSION!r} ended as {record.status!r}"
            raise CampaignError(msg)
        while out.paused:
            out = rt.resume(out.token, answer(out.pause))
        if not out.ok:
            msg = f"the run ended with {out.status}: {out.error}"
            raise CampaignError(msg)
    msg = f"generation {plan.generation} did not finish within {GENERATION_TIMEOUT} s"
    raise CampaignError(msg)
