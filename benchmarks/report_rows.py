"""The main table's rows: how each row reads its number for a system from the run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from report_collect import NO_PAUSE, Bench, pick


@attrs.frozen
class Row:
    """One line of the main table: how to find each system's number in the run."""

    title: str
    unit: str
    value: Callable[[list[Bench], str], float | None]  # (benchmarks, system) -> number
    target: float | None = None
    fmt: str = "{:,.2f}"
    floor: Callable[[list[Bench]], float | None] | None = None
    floor_note: str = ""
    no_peer: dict[str, str] = attrs.field(factory=dict)  # peer -> why it has no number
    workload: str | None = None  # where a peer's script says why it cannot do the row


# -- how each row reads the run -------------------------------------------------------------


def per_unit_us(workload: str, variants: dict[str, str] | None = None) -> Callable[..., Any]:
    def value(benches: list[Bench], system: str) -> float | None:
        b = pick(benches, workload, system, (variants or {}).get(system))
        return None if b is None else b.per_unit * 1e6

    return value


def floor_us(workload: str, variant: str) -> Callable[[list[Bench]], float | None]:
    def value(benches: list[Bench]) -> float | None:
        b = pick(benches, workload, "floor", variant)
        return None if b is None else b.per_unit * 1e6

    return value


def ks(benches: list[Bench]) -> tuple[int, int]:
    found = sorted(
        {b.extra["k"] for b in benches if b.workload.startswith("pause_") and "k" in b.extra}
    )
    return (found[0], found[-1]) if found else (10, 9000)


def pause_us(kind: str, at: int) -> Callable[..., Any]:
    def value(benches: list[Bench], system: str) -> float | None:
        b = pick(benches, f"pause_{kind}", system, k=ks(benches)[at])
        return None if b is None else b.median * 1e6

    return value


def pause_ratio(kind: str) -> Callable[..., Any]:
    """From the round trips taken in turns at both k (test_resume_cost_flat_in_k); failing
    that, from the medians of the two separate benchmarks."""

    def value(benches: list[Bench], system: str) -> float | None:
        paired = pick(benches, f"pause_ratio_{kind}", system)
        if paired is not None:
            return paired.extra["ratio"]
        early, late = pause_us(kind, 0)(benches, system), pause_us(kind, 1)(benches, system)
        return None if early is None or late is None else late / early

    return value


def pause_extra(key: str, at: int) -> Callable[..., Any]:
    def value(benches: list[Bench], system: str) -> float | None:
        b = pick(benches, "pause_sqlite", system, k=ks(benches)[at])
        return None if b is None else b.extra.get(key)

    return value


def input_extra(key: str, at: int) -> Callable[..., Any]:
    """From the pause of a ForEach over a large input (test_input_bytes.py)."""

    def value(benches: list[Bench], system: str) -> float | None:
        b = pick(benches, "input_pause_sqlite", system, k=ks(benches)[at])
        return None if b is None else b.extra.get(key)

    return value


def wall_ms(workload: str, variant: str | None = None) -> Callable[..., Any]:
    def value(benches: list[Bench], system: str) -> float | None:
        b = pick(benches, workload, system, variant)
        return None if b is None else b.median * 1e3

    return value


def import_ms(benches: list[Bench], system: str) -> float | None:
    b = pick(benches, "import", system)
    return None if b is None else b.extra["importtime_us"] / 1e3


def rss_sessions_mb(benches: list[Bench], system: str) -> float | None:
    """MB per 10,000 paused sessions (LangGraph is measured over fewer and scaled)."""
    b = pick(benches, "rss_sessions", system)
    return None if b is None else b.extra["rss_kb"] / b.extra["sessions"] * 10_000 / 1024


def rss_worker_mb(benches: list[Bench], system: str) -> float | None:
    """MB the worker grew over the second half of its resumes (flat: no leak)."""
    b = pick(benches, "rss_worker", system)
    return None if b is None else b.extra["late_growth_kb"] / 1024


def sqlite_floor(benches: list[Bench]) -> float | None:
    return floor_us("durable_chain", "one WAL commit")(benches)


def rows(benches: list[Bench]) -> list[Row]:
    k0, k1 = ks(benches)
    steps = next((b.extra["per"] for b in benches if b.workload == "chain"), 1000)
    worker = pick(benches, "rss_worker", "tarry")
    resumes = worker.extra["resumes"] if worker else 100_000
    pause = {"pocketflow": NO_PAUSE}
    out = [
        Row(
            f"step overhead: chain of {steps:,} no-op steps, in memory",
            "µs/step",
            per_unit_us("chain"),
            None,  # the goal is a ratio to PocketFlow's: see the Goals table
            floor=floor_us("chain", "3-deep yield from"),
            floor_note="3-deep yield from",
            workload="chain",
        ),
        Row(
            f"step overhead: ForEach / batch over {steps:,} items, in memory",
            "µs/item",
            per_unit_us("foreach"),
            None,  # the goal is a ratio to PocketFlow's: see the Goals table
            floor=floor_us("chain", "3-deep yield from"),
            floor_note="3-deep yield from",
            workload="foreach",
        ),
        Row(
            "durable step: the chain, every step persisted to SQLite",
            "µs/step",
            per_unit_us("durable_chain"),
            None,  # the goal is a ratio to the floor: see the Goals table
            floor=sqlite_floor,
            floor_note="one WAL commit",
            no_peer=pause,
            workload="durable_chain",
        ),
        Row(
            "durable step: the chain, every step persisted to PostgreSQL",
            "µs/step",
            per_unit_us("durable_chain_postgres"),
            no_peer=pause,
            workload="durable_chain_postgres",
        ),
    ]
    wheres = {
        "memory": "in memory",
        "sqlite": "SQLite",
        "postgres": "PostgreSQL",
        "file": "a JSON file (pydantic-graph's FileStatePersistence)",
    }
    for kind, target in (("memory", 50.0), ("sqlite", 200.0), ("postgres", 1600.0), ("file", None)):
        where = wheres[kind]
        floor = sqlite_floor if kind == "sqlite" else None
        for at, k in enumerate((k0, k1)):
            out.append(
                Row(
                    f"pause → resume, {where}, k = {k:,}, resumed by the Runtime that paused",
                    "µs",
                    pause_us(kind, at),
                    target,
                    floor=floor,
                    floor_note="one WAL commit" if floor else "",
                    no_peer=pause,
                    workload=f"pause_{kind}",
                )
            )
    for kind in ("memory", "sqlite"):
        where = "in memory" if kind == "memory" else "SQLite"
        out.append(
            Row(
                f"resume at k = {k1:,} ÷ at k = {k0:,}, {where} (round trips in turns)",
                "ratio",
                pause_ratio(kind),
                1.10,
                floor=lambda _: 1.0,
                no_peer=pause,
            )
        )
    out += [
        Row(
            "fresh process: spawn, import, resume from SQLite, exit",
            "ms",
            wall_ms("fresh_resume"),
            120.0,
            fmt="{:,.0f}",
            floor=lambda bs: wall_ms("fresh_resume", "python -c pass")(bs, "floor"),
            floor_note="python -c pass",
            no_peer=pause,
            workload="fresh_resume",
        ),
        Row(
            "import (-X importtime, cumulative)",
            "ms",
            import_ms,
            60.0,
            fmt="{:,.1f}",
            workload="import",
        ),
        Row(
            "import, whole process: spawn, import, exit",
            "ms",
            wall_ms("import"),
            fmt="{:,.0f}",
            floor=lambda bs: wall_ms("fresh_resume", "python -c pass")(bs, "floor"),
            floor_note="python -c pass",
        ),
        Row(
            f"snapshot size at k = {k0:,}, SQLite",
            "bytes",
            pause_extra("snapshot_bytes", 0),
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            f"snapshot size at k = {k1:,}, SQLite",
            "bytes",
            pause_extra("snapshot_bytes", 1),
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            f"payload bytes per pause at k = {k0:,}, SQLite (the store's count; the disk: Counts)",
            "bytes",
            pause_extra("bytes_written", 0),
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            f"payload bytes per pause at k = {k1:,}, SQLite (the store's count; the disk: Counts)",
            "bytes",
            pause_extra("bytes_written", 1),
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            f"payload bytes per pause at k = {k0:,}, SQLite, a ForEach over a 10,000-prompt "
            "input (2 MB) after a 100 KB output",
            "bytes",
            input_extra("bytes_written", 0),
            2_000,
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            f"payload bytes per pause at k = {k1:,}, SQLite, the same",
            "bytes",
            input_extra("bytes_written", 1),
            2_000,
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            "RSS per 10,000 sessions paused in memory",
            "MB",
            rss_sessions_mb,
            fmt="{:,.1f}",
            no_peer=pause,
        ),
        Row(
            f"worker RSS growth over the 2nd half of {resumes:,} resumes",
            "MB",
            rss_worker_mb,
            fmt="{:,.1f}",
            no_peer=pause,
        ),
    ]
    return out
