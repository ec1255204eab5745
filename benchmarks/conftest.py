"""Benchmark fixtures. The benchmarks folder is put on sys.path for the workload modules
(bench_*.py), which the tests import and the processes they spawn import too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_support import FULL, SMOKE, Sizes  # noqa: E402 - needs the path above


@pytest.fixture(scope="session")
def sizes(request: pytest.FixtureRequest) -> Sizes:
    """Full sizes under `make bench`; smoke sizes under --benchmark-disable (`make test`)."""
    return SMOKE if request.config.getoption("benchmark_disable") else FULL
