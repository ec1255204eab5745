"""The peers measured in virtualenvs of their own (install_peers.py makes them under
.benchmarks/venvs/): DBOS Transact, Apache Burr, pydantic-graph and llama-index-workflows.

Each runs its script (bench_<peer>.py) with its own venv's Python, once per part (a store, or
"memory"), at the sizes of this run; the script times every workload as tarry's benchmarks do
(peer_timing.py) and prints JSON. Each result is added to this run's JSON beside tarry's
(conftest.py), labelled as `label` labels tarry's, so report.py compares them within one run.
The timing of the test itself is the whole script (in the details only).

A peer without its venv is skipped here and shown by the report as not installed, with pip's
words (install_peers.py recorded them); `make test` runs each part once at smoke sizes where
the venv exists, so a script cannot rot.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bench_support import HERE, PEER_RESULTS, Sizes, label, peer_entry

VENVS = HERE.parent / ".benchmarks" / "venvs"
DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"

#: peer (its distribution, the report's system name) -> (script, the parts it measures).
PEERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "dbos": ("bench_dbos.py", ("sqlite", "postgres")),
    "apache-burr": ("bench_burr.py", ("memory", "sqlite", "postgres")),
    "pydantic-graph": ("bench_pydantic_graph.py", ("memory",)),
    "llama-index-workflows": ("bench_llamaindex.py", ("memory",)),
}


def venv_python(peer: str) -> Path:
    return VENVS / peer / "bin" / "python"


def script_sizes(sizes: Sizes, tmp: Path, part: str, dsn: str | None) -> dict[str, Any]:
    """The sizes of tarry's workloads in this run, for a peer's script."""
    return {
        "full": sizes.full,
        "part": part,
        "steps": sizes.steps,
        "loop": sizes.loop,
        "ks": list(sizes.ks),
        "rounds": sizes.rounds,
        "warmup": 10 if sizes.full else 0,
        "step_rounds": 20 if sizes.full else 1,
        "durable_rounds": 3 if sizes.full else 1,
        "durable_steps": sizes.peer_durable_steps,
        "fresh_rounds": sizes.fresh_rounds,
        "tmp": str(tmp),
        "postgres": dsn,
    }


@pytest.fixture
def postgres() -> Iterator[str]:
    """The server's DSN (each script makes its own fresh tables or schema and drops them);
    skip without a server."""
    psycopg = pytest.importorskip("psycopg")
    server = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    try:
        psycopg.connect(server, connect_timeout=3).close()
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL not reachable ({type(exc).__name__}): set TARRY_TEST_POSTGRES")
    yield server


def run_script(peer: str, payload: dict[str, Any]) -> dict[str, Any]:
    script, _parts = PEERS[peer]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env.update(BURR_TELEMETRY_ENABLED="false", DBOS__CLOUD="false")
    done = subprocess.run(
        [str(venv_python(peer)), str(HERE / script), json.dumps(payload)],
        cwd=payload["tmp"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=1800,
    )
    assert done.returncode == 0, f"{script} ({payload['part']}) failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("peer", "part"), [(peer, part) for peer, (_s, parts) in PEERS.items() for part in parts]
)
def test_peer(benchmark, sizes: Sizes, tmp_path: Path, request, peer: str, part: str) -> None:
    if not venv_python(peer).exists():
        pytest.skip(f"{peer}: no venv at {VENVS / peer} (make bench runs install_peers.py)")
    dsn = request.getfixturevalue("postgres") if part == "postgres" else None
    payload = script_sizes(sizes, tmp_path, part, dsn)
    found: dict[str, Any] = {}

    def run() -> None:
        found.update(run_script(peer, payload))

    benchmark.pedantic(run, rounds=1, iterations=1)
    assert found["results"] or found["unsupported"], f"{peer} ({part}) measured nothing"
    label(
        benchmark,
        "peer_script",
        peer,
        variant=part,
        version=found["version"],
        unsupported=found["unsupported"],
    )
    for result in found["results"]:
        PEER_RESULTS.append(
            {
                "name": f"{peer}[{part}]:{result['workload']}"
                + (f"[{result['variant']}]" if result["variant"] else "")
                + (f"[k={result['extra']['k']}]" if "k" in result["extra"] else ""),
                "system": peer,
                "version": found["version"],
                "load1": round(os.getloadavg()[0], 2),
                **result,
            }
        )


def test_peer_results_are_labelled_for_the_report() -> None:
    """What conftest.py adds to the run's JSON reads like a pytest-benchmark entry."""
    entry = peer_entry(
        {
            "name": "x",
            "system": "apache-burr",
            "version": "1",
            "load1": 0.5,
            "workload": "pause_memory",
            "variant": None,
            "per": 1,
            "median": 2e-4,
            "min": 1e-4,
            "rounds": 3,
            "extra": {"k": 10},
        }
    )
    assert entry["stats"]["median"] == 2e-4 and entry["stats"]["rounds"] == 3
    assert entry["extra_info"] == {
        "workload": "pause_memory",
        "system": "apache-burr",
        "per": 1,
        "load1": 0.5,
        "variant": None,
        "k": 10,
        "version": "1",
        "external": True,
    }
