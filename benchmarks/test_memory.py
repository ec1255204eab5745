"""Workload 6, memory: RSS per 10,000 sessions paused in memory, and a worker's RSS over
100,000 resumes (each in a process of its own: see bench_memory.py). LangGraph is measured
over fewer sessions and resumes (it is ~10x slower per session) and scaled per unit; PocketFlow
cannot pause. `test_paused_session_in_store` is what one paused session costs the MemoryStore
itself (the caller keeping only its token), against the target of issue 28.

The timing pytest-benchmark records here is the whole process; the numbers that count are
in `extra_info` (RSS in kB).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_support import HERE, Sizes, label

SCRIPT = str(HERE / "bench_memory.py")


def _measure(mode: str, system: str, n: int, cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, SCRIPT, mode, system, str(n)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    return {key: result[key] for key in result if key not in ("mode", "system", "n")}


def _skip_missing(system: str) -> None:
    if system != "tarry":
        pytest.importorskip(system)


@pytest.mark.parametrize("system", ["tarry", "langgraph"])
def test_paused_sessions_rss(benchmark, sizes: Sizes, tmp_path: Path, system: str) -> None:
    _skip_missing(system)
    n = sizes.sessions if system == "tarry" else sizes.peer_sessions
    result = benchmark.pedantic(_measure, ("sessions", system, n, tmp_path), rounds=1)
    grown = result["rss_after_kb"] - result["rss_before_kb"]
    label(benchmark, "rss_sessions", system, per=n, sessions=n, rss_kb=grown, **result)


@pytest.mark.parametrize("system", ["tarry", "langgraph"])
def test_worker_rss(benchmark, sizes: Sizes, tmp_path: Path, system: str) -> None:
    _skip_missing(system)
    n = sizes.resumes if system == "tarry" else sizes.peer_resumes
    result = benchmark.pedantic(_measure, ("worker", system, n, tmp_path), rounds=1)
    samples = result["rss_samples_kb"]
    # Growth over the second half: a flat line once the store is full means no leak.
    half = samples[len(samples) // 2]
    label(
        benchmark,
        "rss_worker",
        system,
        per=n,
        resumes=n,
        rss_kb=samples[-1] - samples[0],
        late_growth_kb=samples[-1] - half,
        **result,
    )


#: Issue 28: a paused session of the ticket flow holds at most this many bytes of RSS in a
#: MemoryStore (pydantic-graph's in-memory persistence holds about 0.5 KB).
STORE_TARGET_BYTES = 1024


def test_paused_session_in_store(benchmark, sizes: Sizes, tmp_path: Path) -> None:
    n = sizes.sessions
    result = benchmark.pedantic(_measure, ("store", "tarry", n, tmp_path), rounds=1)
    grown = result["rss_after_kb"] - result["rss_before_kb"]
    per = grown * 1024 / n
    label(
        benchmark,
        "rss_store_session",
        "tarry",
        sessions=n,
        rss_kb=grown,
        bytes_per_session=round(per),
        target_bytes=STORE_TARGET_BYTES,
        **result,
    )
    if sizes.full:  # smoke sizes are too few sessions for RSS to say anything
        assert per <= STORE_TARGET_BYTES, f"{per:.0f} bytes per paused session"
