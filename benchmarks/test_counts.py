"""The counts of issue 28 (counts.py): instructions under callgrind, bytes a pause writes, RSS
per paused session, CPU ratios in turns; every system run by the Python of a regular install
(.benchmarks/venvs: tarry's wheel, the peers from PyPI). Each lands in the run's JSON as a
benchmark of its own, labelled for report.py; the timing of the test itself is the counting.

The turns are measured twice, each in a process of its own, so that the report shows how far
two measurements of the same code agree. `make test` runs every probe once at a small size,
one process per venv, without callgrind, where the venv exists (install_peers.py makes them), so that none can rot.
"""

from __future__ import annotations

from typing import Any

import pytest
from bench_support import Sizes, label
from counts import COUNTS, Count, measure, python, smoke

TWICE = {"turns_chain", "turns_foreach"}
#: Issue 28's target for tarry's RSS per paused session (bytes).
RSS_PER_SESSION = 1024


def _id(count: Count) -> str:
    return "-".join(x for x in (count.workload, count.system, count.variant) if x)


@pytest.mark.parametrize("venv", sorted({c.venv for c in COUNTS}))
def test_probes_run(sizes: Sizes, venv: str) -> None:
    """Every probe of a venv, once, small, in one process."""
    if python(venv) is None:
        pytest.skip(f"no .benchmarks/venvs/{venv}: run benchmarks/install_peers.py")
    smoke(venv)


@pytest.mark.parametrize("count", COUNTS, ids=_id)
def test_count(benchmark: Any, sizes: Sizes, count: Count) -> None:
    if python(count.venv) is None:
        pytest.skip(f"no .benchmarks/venvs/{count.venv}: run benchmarks/install_peers.py")
    if not sizes.full:
        pytest.skip("counted under make bench only (test_probes_run checks the probes)")
    figures: dict[str, Any] = {}

    def run() -> None:
        figures.update(measure(count))
        if count.workload in TWICE:
            figures["again"] = measure(count)["ratios"]

    benchmark.pedantic(run, rounds=1, iterations=1)
    assert "not_installed" not in figures, figures
    if (count.workload, count.system) == ("rss_per_session", "tarry"):
        # Issue 28: a paused session held in memory costs at most 1 KB.
        assert figures["rss_bytes_per_session"] <= RSS_PER_SESSION, figures
    label(
        benchmark,
        count.workload,
        count.system,
        variant=count.variant,
        units=count.units,
        install="wheel" if count.venv == "tarry" else f"venv {count.venv}",
        **figures,
    )
