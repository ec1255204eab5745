"""Counts that do not depend on the machine's load: callgrind instructions of a fixed amount of
work, bytes written, RSS, and CPU ratios taken in turns; each system from a regular install.

    .venv/bin/python benchmarks/counts.py [--twice]     (needs valgrind and install_peers.py)

Every figure comes from `probes.py` run by a system's own Python: tarry, PocketFlow and
LangGraph by `.benchmarks/venvs/tarry` (tarry's wheel, not the editable checkout: install_peers.py
builds it), pydantic-graph by its venv. `test_counts.py` puts them in the run's JSON for the
report; `--twice` measures everything twice and prints both, to show that two runs agree.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs

HERE = Path(__file__).resolve().parent
VENVS = HERE.parent / ".benchmarks" / "venvs"
PROBES = HERE / "probes.py"


@attrs.frozen
class Count:
    """One figure: `workload` of `system` (its `variant`), by `shape` of probes.py."""

    workload: str
    system: str
    shape: str
    kind: str  # "instructions", "import" (instructions of an import), or "json"
    units: int = 1000
    reps: int = 1  # for "json" shapes: how many rounds of `units`
    variant: str | None = None
    venv: str = "tarry"  # the venv under .benchmarks/venvs whose Python runs the probe


#: Round trips of a peer's paused loop per repetition. Their state carries the results
#: collected so far (tarry keeps them out of line, its cost flat), so a peer's round trip grows
#: with the trips made: 20 keep its counted trips between k = 30 and k = 90, near the k = 10
#: the figure stands for (tarry's 100 are flat).
PEER_TRIPS = 20

COUNTS = (
    Count("instr_chain", "tarry", "tarry_chain", "instructions"),
    Count("instr_chain", "pocketflow", "pocketflow_chain", "instructions"),
    Count("instr_chain", "floor", "floor_chain", "instructions", variant="3-deep yield from"),
    Count("instr_foreach", "tarry", "tarry_foreach", "instructions"),
    Count(
        "instr_foreach", "pocketflow", "pocketflow_batchnode", "instructions", variant="BatchNode"
    ),
    Count(
        "instr_foreach", "pocketflow", "pocketflow_batchflow", "instructions", variant="BatchFlow"
    ),
    Count("instr_pause_memory", "tarry", "tarry_pause_cold", "instructions", 100, variant="cold"),
    Count("instr_pause_memory", "tarry", "tarry_pause_warm", "instructions", 100, variant="warm"),
    Count(
        "instr_pause_memory",
        "pydantic-graph",
        "pydantic_graph_pause",
        "instructions",
        PEER_TRIPS,
        variant="SimpleStatePersistence",
        venv="pydantic-graph",
    ),
    Count(
        "instr_pause_memory",
        "apache-burr",
        "burr_pause",
        "instructions",
        PEER_TRIPS,
        variant="rebuilt from InMemoryPersister",
        venv="apache-burr",
    ),
    Count(
        "instr_pause_memory",
        "apache-burr",
        "burr_pause_kept",
        "instructions",
        PEER_TRIPS,
        variant="app kept in memory",
        venv="apache-burr",
    ),
    Count(
        "instr_pause_memory",
        "llama-index-workflows",
        "llamaindex_pause",
        "instructions",
        PEER_TRIPS,
        variant="ctx.to_dict() kept in memory",
        venv="llama-index-workflows",
    ),
    Count("instr_import", "tarry", "import_tarry", "import"),
    Count("instr_import", "pocketflow", "import_pocketflow", "import"),
    # `import tarry` loads its names on first use: the figure to compare is a first program.
    Count("instr_first_run", "tarry", "first_run_tarry", "import"),
    Count("instr_first_run", "pocketflow", "first_run_pocketflow", "import"),
    Count("disk_per_pause_sqlite", "tarry", "tarry_sqlite_bytes", "json", 100),
    Count("disk_per_pause_sqlite", "langgraph", "langgraph_sqlite_bytes", "json", 100),
    Count("rss_per_session", "tarry", "tarry_rss", "json", 5000),
    Count("rss_per_session", "langgraph", "langgraph_rss", "json", 2000),
    Count(
        "rss_per_session",
        "pydantic-graph",
        "pydantic_graph_rss",
        "json",
        5000,
        venv="pydantic-graph",
    ),
    Count("rss_per_session", "apache-burr", "burr_rss", "json", 2000, venv="apache-burr"),
    Count(
        "rss_per_session",
        "llama-index-workflows",
        "llamaindex_rss",
        "json",
        2000,
        venv="llama-index-workflows",
    ),
    Count("turns_chain", "tarry", "turns_chain", "json", 1000, 31),
    Count("turns_foreach", "tarry", "turns_foreach", "json", 1000, 31),
)


#: A first program of each system, in a fresh process: its imports and a one-step run.
FIRST_RUNS = {
    "first_run_tarry": (
        "from tarry import Flow, Runtime; Runtime().run(Flow('first', [lambda ctx: 1]))"
    ),
    "first_run_pocketflow": (
        "from pocketflow import Flow, Node\n"
        "class One(Node):\n    def exec(self, prep_res): return 1\n"
        "Flow(start=One()).run({})"
    ),
}


#: Every count runs with one hash seed, every system alike: str hashes (and so dict and set
#: layouts, probes and resizes) otherwise differ from one process to the next, and move a
#: count by a few hundred instructions per step: as much as what tells two systems apart.
_ONE_HASH_SEED = {**os.environ, "PYTHONHASHSEED": "0"}


def python(venv: str) -> Path | None:
    found = VENVS / venv / "bin" / "python"
    return found if found.exists() else None


def _run(py: Path, shape: str, units: int, reps: int, *, callgrind: bool) -> str | int:
    args = [str(py), str(PROBES), shape, str(units), str(reps)]
    if not callgrind:
        done = subprocess.run(args, capture_output=True, text=True, check=True)
        return done.stdout
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *args],
            capture_output=True,
            text=True,
            check=True,
            env=_ONE_HASH_SEED,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if not found:
        raise RuntimeError(done.stderr[-2000:])
    return int(found.group(1))


def _run_c(py: Path, code: str) -> int:
    """Instructions of `python -c code` under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(py), "-c", code],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp,
            env=_ONE_HASH_SEED,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if not found:
        raise RuntimeError(done.stderr[-2000:])
    return int(found.group(1))


def measure(count: Count, *, callgrind: bool = True, scale: float = 1.0) -> dict[str, Any]:
    """The figures of one Count as extra_info keys. Without callgrind (make test's smoke run)
    the probe runs once at `scale` of its size, so that it cannot rot; no figure is given."""
    py = python(count.venv)
    if py is None:
        return {"not_installed": f"no virtualenv .benchmarks/venvs/{count.venv}"}
    units = max(2, int(count.units * scale))
    if count.kind == "json":
        reps = count.reps if scale == 1.0 else 1
        return json.loads(_run(py, count.shape, units, reps, callgrind=False))
    if not callgrind:
        if count.kind != "import":
            _run(py, count.shape, units, 1, callgrind=False)
        return {}
    if count.kind == "import":
        # `python -c`, not probes.py: the probes' own imports (asyncio...) would be counted in
        # the start-up and taken off the import.
        statement = FIRST_RUNS.get(count.shape) or "import " + count.shape.removeprefix("import_")
        spent = _run_c(py, statement)
        start = _run_c(py, "pass")
        return {"instructions": spent - start, "process_instructions": spent}
    once = _run(py, count.shape, units, 1, callgrind=True)
    four = _run(py, count.shape, units, 4, callgrind=True)
    return {"instructions": (int(four) - int(once)) // (3 * units)}


def smoke(venv: str, units: int = 20) -> None:
    """Every probe a venv runs, once, small, in one process (make test: none can rot)."""
    py = python(venv)
    assert py is not None
    # A first run is a `python -c` statement (FIRST_RUNS), not a shape of probes.py.
    shapes = {c.shape for c in COUNTS if c.venv == venv and c.shape not in FIRST_RUNS}
    shapes = sorted(shapes | {"import_none"})
    subprocess.run(
        [str(py), str(PROBES), "--smoke", ",".join(shapes), str(units)],
        capture_output=True,
        text=True,
        check=True,
    )


def main(argv: list[str]) -> None:
    """Each figure as it is measured (one JSON line each); `--twice`: then all of them again."""
    for run in range(2 if "--twice" in argv else 1):
        for count in COUNTS:
            figures = measure(count)
            line = {"run": run + 1, "workload": count.workload, "system": count.system}
            print(json.dumps({**line, "variant": count.variant, **figures}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
