"""What the benchmarks share: the sizes of the workloads and how a result is labelled.

`make bench` runs the full sizes; `make test` runs every benchmark once with
`--benchmark-disable`, at smoke sizes, so that the suite cannot rot and stays fast.

Every benchmark labels itself with `label(benchmark, workload, system, ...)`: the labels land
in pytest-benchmark's JSON (`extra_info`), and `report.py` builds docs/performance.md from
them, so tarry, the peers and the plain-Python floor are always compared within one run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

#: What the peers measured in their own virtualenvs (test_peers.py) found in this run; conftest.py
#: adds each to the run's JSON as an entry of its own.
PEER_RESULTS: list[dict[str, Any]] = []

#: This folder: the processes the benchmarks spawn put it on sys.path to import bench_*.py.
HERE = Path(__file__).resolve().parent


@attrs.frozen
class Sizes:
    """How big each workload is. `full` is what `make bench` measures and reports."""

    full: bool
    steps: int  # chain of no-op steps, ForEach items, durable chain
    peer_durable_steps: int  # LangGraph's durable chain (it is ~50x slower per step)
    loop: int  # items of the pause -> resume loop
    ks: tuple[int, int]  # where that loop pauses: early and late
    rounds: int  # pause -> resume round trips timed at each k
    fresh_rounds: int  # fresh processes spawned per system
    sessions: int  # paused sessions held in memory (RSS)
    peer_sessions: int  # the same for LangGraph, scaled up to `sessions` in the report
    resumes: int  # resumes done by the worker (RSS)
    peer_resumes: int


FULL = Sizes(
    full=True,
    steps=1_000,
    peer_durable_steps=1_000,
    loop=10_000,
    ks=(10, 9_000),
    rounds=300,
    fresh_rounds=10,
    sessions=10_000,
    peer_sessions=2_000,
    resumes=100_000,
    peer_resumes=2_000,
)
SMOKE = Sizes(
    full=False,
    steps=100,
    peer_durable_steps=20,
    loop=100,
    ks=(10, 90),
    rounds=1,
    fresh_rounds=1,
    sessions=50,
    peer_sessions=20,
    resumes=100,
    peer_resumes=20,
)


def label(benchmark: Any, workload: str, system: str, *, per: int = 1, **extra: Any) -> None:
    """Name what `benchmark` measures for the report.

    `system`: "tarry", a peer's distribution name, or "floor" (plain Python / stdlib).
    `per`: how many units (steps, items) one timed call covers; the report divides by it.
    `extra`: more numbers (bytes, RSS) or a `variant` naming a second shape of one system.
    """
    load1 = round(os.getloadavg()[0], 2)  # how busy the machine was: the report shows it
    benchmark.extra_info.update(workload=workload, system=system, per=per, load1=load1, **extra)


def peer_entry(result: dict[str, Any]) -> dict[str, Any]:
    """One result of a peer's script (test_peers.py) as an entry of pytest-benchmark's JSON,
    labelled as `label` labels tarry's benchmarks."""
    return {
        "name": result["name"],
        "fullname": f"benchmarks/test_peers.py::{result['name']}",
        "group": None,
        "params": None,
        "stats": {
            "median": result["median"],
            "min": result["min"],
            "rounds": result["rounds"],
        },
        "extra_info": {
            "workload": result["workload"],
            "system": result["system"],
            "per": result["per"],
            "load1": result["load1"],
            "variant": result["variant"],
            **result["extra"],
            "version": result["version"],
            "external": True,
        },
    }
