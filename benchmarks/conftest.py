"""Benchmark fixtures. The benchmarks folder is put on sys.path for the workload modules
(bench_*.py), which the tests import and the processes they spawn import too."""

from __future__ import annotations

import contextlib
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_support import FULL, PEER_RESULTS, SMOKE, Sizes, peer_entry  # noqa: E402


@pytest.fixture(scope="session")
def sizes(request: pytest.FixtureRequest) -> Sizes:
    """Full sizes under `make bench`; smoke sizes under --benchmark-disable (`make test`)."""
    return SMOKE if request.config.getoption("benchmark_disable") else FULL


def pytest_benchmark_update_json(config: Any, benchmarks: Any, output_json: dict) -> None:
    """Adds the peers' results (test_peers.py), and the version of every system as this
    process and the peers' scripts saw it, so the report names the versions of the run."""
    output_json["benchmarks"].extend(peer_entry(result) for result in PEER_RESULTS)
    found = {}
    for dist in (
        "tarry",
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "langchain-core",
        "pocketflow",
        "pytest-benchmark",
        "attrs",
        "cattrs",
        "msgpack",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[dist] = metadata.version(dist)
    for result in PEER_RESULTS:
        found[result["system"]] = result["version"]
    output_json["versions"] = found
