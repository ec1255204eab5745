"""The goals of issue 17 as ratios measured in one `make bench` run, for report.py.

Each goal reads the run's own numbers (tarry, a peer or the floor measured beside it), so
every verdict is a comparison within one run on one machine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs


@attrs.frozen
class Goal:
    title: str
    value: Callable[[], float | None]  # the number measured in the run
    target: float
    unit: str
    fmt: str = "{:,.2f}"


def _matching(benches: list[Any], workload: str, system: str, **match: Any) -> list[Any]:
    return [
        b
        for b in benches
        if b.workload == workload
        and b.system == system
        and all(b.extra.get(key) == value for key, value in match.items())
    ]


def per_unit_us(
    benches: list[Any], workload: str, system: str, variant: Any = "any", **match: Any
) -> float | None:
    """The fastest shape of `system` at `workload` (or the named variant), µs per unit: a
    goal against a peer never rests on a slow shape of the peer."""
    found = [
        b
        for b in _matching(benches, workload, system, **match)
        if variant == "any" or b.variant == variant
    ]
    return min((b.per_unit * 1e6 for b in found), default=None)


def ratio_of(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def goals(benches: list[Any], ks: tuple[int, int]) -> list[tuple[Goal, float | None]]:
    k0, k1 = ks

    def tarry(workload: str, **match: Any) -> float | None:
        return per_unit_us(benches, workload, "tarry", None, **match)

    def extra(workload: str, key: str, k: int, system: str = "tarry") -> float | None:
        for b in benches:
            if (
                b.workload == workload
                and b.system == system
                and b.variant is None
                and b.extra.get("k") == k
            ):
                return b.extra.get(key)
        return None

    def paired(kind: str) -> float | None:
        for b in benches:
            if b.workload == f"pause_ratio_{kind}" and b.system == "tarry":
                return b.extra["ratio"]
        return ratio_of(tarry(f"pause_{kind}", k=k1), tarry(f"pause_{kind}", k=k0))

    def import_ms() -> float | None:
        for b in benches:
            if b.workload == "import" and b.system == "tarry":
                return b.extra["importtime_us"] / 1e3
        return None

    def fresh_ms() -> float | None:
        value = tarry("fresh_resume", k=k0) or tarry("fresh_resume")
        return None if value is None else value / 1e3

    def worker_mb() -> float | None:
        for b in benches:
            if b.workload == "rss_worker" and b.system == "tarry":
                return b.extra["late_growth_kb"] / 1024
        return None

    burr = "apache-burr"
    rows = [
        (
            Goal(
                "chain step ÷ PocketFlow's chain step",
                lambda: ratio_of(tarry("chain"), per_unit_us(benches, "chain", "pocketflow", None)),
                1.0,
                "ratio",
            ),
        ),
        (
            Goal(
                "ForEach item ÷ PocketFlow's BatchFlow item",
                lambda: ratio_of(
                    tarry("foreach"), per_unit_us(benches, "foreach", "pocketflow", "BatchFlow")
                ),
                1.0,
                "ratio",
            ),
        ),
        (
            Goal(
                f"pause → resume in memory, k = {k0:,}",
                lambda: tarry("pause_memory", k=k0),
                50.0,
                "µs",
                "{:,.1f}",
            ),
        ),
        (
            Goal(
                f"pause → resume in memory ÷ Burr's (its fastest shape), k = {k0:,}",
                lambda: ratio_of(
                    tarry("pause_memory", k=k0), per_unit_us(benches, "pause_memory", burr, k=k0)
                ),
                1.0,
                "ratio",
            ),
        ),
        (
            Goal(
                f"pause → resume, SQLite, k = {k0:,}",
                lambda: tarry("pause_sqlite", k=k0),
                200.0,
                "µs",
                "{:,.1f}",
            ),
        ),
        (
            Goal(
                f"pause → resume, SQLite ÷ Burr's, k = {k0:,}",
                lambda: ratio_of(
                    tarry("pause_sqlite", k=k0), per_unit_us(benches, "pause_sqlite", burr, k=k0)
                ),
                1.0,
                "ratio",
            ),
        ),
        (
            Goal(
                f"pause → resume, PostgreSQL, k = {k0:,}",
                lambda: ratio_of(tarry("pause_postgres", k=k0), 1e3),
                1.6,
                "ms",
            ),
        ),
        (
            Goal(
                "durable SQLite step ÷ one WAL commit of one row (floor)",
                lambda: ratio_of(
                    tarry("durable_chain"),
                    per_unit_us(benches, "durable_chain", "floor", "one WAL commit"),
                ),
                1.5,
                "ratio",
            ),
        ),
        (Goal("import tarry (-X importtime)", import_ms, 60.0, "ms", "{:,.1f}"),),
        (
            Goal(
                "fresh process: spawn, import, resume from SQLite, exit",
                fresh_ms,
                120.0,
                "ms",
                "{:,.0f}",
            ),
        ),
        (
            Goal(
                f"resume at k = {k1:,} ÷ at k = {k0:,}, in memory",
                lambda: paired("memory"),
                1.10,
                "ratio",
            ),
        ),
        (
            Goal(
                f"resume at k = {k1:,} ÷ at k = {k0:,}, SQLite",
                lambda: paired("sqlite"),
                1.10,
                "ratio",
            ),
        ),
        (
            Goal(
                f"resume at k = {k1:,} ÷ at k = {k0:,}, PostgreSQL",
                lambda: ratio_of(tarry("pause_postgres", k=k1), tarry("pause_postgres", k=k0)),
                1.10,
                "ratio",
            ),
        ),
        (
            Goal(
                f"bytes written per pause at k = {k1:,} ÷ at k = {k0:,}, SQLite (flat)",
                lambda: ratio_of(
                    extra("pause_sqlite", "bytes_written", k1),
                    extra("pause_sqlite", "bytes_written", k0),
                ),
                1.05,
                "ratio",
            ),
        ),
        (
            Goal(
                "worker RSS growth over the 2nd half of its resumes (flat)",
                worker_mb,
                1.0,
                "MB",
                "{:,.1f}",
            ),
        ),
    ]
    return [(goal, goal.value()) for (goal,) in rows]


def goals_table(benches: list[Any], ks: tuple[int, int]) -> list[str]:
    lines = [
        "## Goals (issue 17)",
        "",
        "Each goal as measured in this run: a ratio is tarry ÷ the other system's median from "
        "the same run (a peer with several shapes is taken at its fastest). *Flat*: bytes per "
        "pause within 5 % from k = 10 to k = 9,000; worker RSS growing by at most 1 MB over "
        "the second half of its resumes.",
        "",
        "| goal | measured | unit | target | met |",
        "|---|---|---|---|---|",
    ]
    for goal, value in goals(benches, ks):
        if value is None:
            measured, met = "not measured in this run", "—"
        else:
            measured = goal.fmt.format(value)
            met = "met" if value <= goal.target else "**not met**"
        lines.append(f"| {goal.title} | {measured} | {goal.unit} | ≤ {goal.target:,g} | {met} |")
    return [*lines, ""]
