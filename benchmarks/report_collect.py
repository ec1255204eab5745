"""Collecting a run for the report: pytest-benchmark's JSON read into `Bench` records, a
benchmark picked by its labels, the peers' install status, the versions and the machine."""

from __future__ import annotations

import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import attrs

# Columns: the peers, by the distribution that provides them (the last four are measured in
# virtualenvs of their own: test_peers.py).
PEERS = {
    "langgraph": "LangGraph",
    "pocketflow": "PocketFlow",
    "dbos": "DBOS",
    "apache-burr": "Burr",
    "pydantic-graph": "pydantic-graph",
    "llama-index-workflows": "llama-index-workflows",
}
# Distributions of the bench extra (or of a peer's venv) that belong to a peer column.
PEER_OF = {
    "langgraph": "langgraph",
    "langgraph-checkpoint-sqlite": "langgraph",
    "pocketflow": "pocketflow",
    "dbos": "dbos",
    "apache-burr": "apache-burr",
    "pydantic-graph": "pydantic-graph",
    "llama-index-workflows": "llama-index-workflows",
}
#: The peers measured in virtualenvs of their own (install_peers.py makes them).
VENV_PEERS = {"dbos", "apache-burr", "pydantic-graph", "llama-index-workflows"}
VENVS = Path(__file__).resolve().parents[1] / ".benchmarks" / "venvs"
VERSIONS = [
    "tarry",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
    "pocketflow",
    "dbos",
    "apache-burr",
    "pydantic-graph",
    "llama-index-workflows",
    "pytest-benchmark",
    "attrs",
    "cattrs",
    "msgpack",
]
NO_PAUSE = "n/a (no persistence)"


@attrs.frozen
class Bench:
    name: str
    system: str
    workload: str
    variant: str | None
    median: float  # seconds per timed call
    minimum: float
    rounds: int
    extra: dict[str, Any]

    @property
    def per_unit(self) -> float:
        return self.median / self.extra.get("per", 1)


def load(path: Path) -> tuple[list[Bench], dict[str, Any]]:
    data = json.loads(path.read_text())
    found = []
    for b in data["benchmarks"]:
        extra = dict(b.get("extra_info") or {})
        # A benchmark that did not label itself is listed in the details only.
        found.append(
            Bench(
                name=b["name"],
                system=extra.get("system", "?"),
                workload=extra.get("workload", "(unlabelled)"),
                variant=extra.get("variant"),
                median=b["stats"]["median"],
                minimum=b["stats"]["min"],
                rounds=b["stats"]["rounds"],
                extra=extra,
            )
        )
    return found, data


def pick(
    benches: list[Bench], workload: str, system: str, variant: str | None = None, **match: Any
) -> Bench | None:
    """The benchmark of `system` at `workload` in `variant`; for a peer asked for no variant,
    its fastest shape of the workload (e.g. PocketFlow's BatchNode rather than its BatchFlow,
    Burr's application kept in memory rather than rebuilt): a row compares tarry with the best
    each peer offers, and the table names the shape it took."""
    others = []
    for b in benches:
        if (
            b.workload == workload
            and b.system == system
            and all(b.extra.get(key) == value for key, value in match.items())
        ):
            if b.variant == variant and not (variant is None and system in PEERS):
                return b
            others.append(b)
    if variant is None and system in PEERS:
        return min(others, key=lambda b: b.per_unit, default=None)
    return None


def unsupported(benches: list[Bench]) -> dict[tuple[str, str], str]:
    """(peer, workload) -> why the peer cannot do it, as its script said (test_peers.py)."""
    found: dict[tuple[str, str], str] = {}
    for b in benches:
        if b.workload == "peer_script":
            for workload, why in (b.extra.get("unsupported") or {}).items():
                found[(b.system, workload)] = why
    return found


def peer_status(path: Path | None) -> dict[str, dict[str, Any]]:
    """Per peer column: installed or not, and why not (from install_peers.py, else probed)."""
    recorded = json.loads(path.read_text()) if path is not None and path.exists() else {}
    status: dict[str, dict[str, Any]] = {p: {"installed": True, "missing": []} for p in PEERS}
    names = {**{d: None for d in PEER_OF}, **recorded}
    for dist in names:
        peer = PEER_OF.get(dist)
        if peer is None:
            continue
        info = recorded.get(dist)
        if info is None and dist in VENV_PEERS:
            venv = VENVS / dist / "bin" / "python"
            info = (
                {"installed": True}
                if venv.exists()
                else {"installed": False, "error": f"no virtualenv at {venv.parent.parent}"}
            )
        elif info is None:
            try:
                metadata.version(dist)
                info = {"installed": True}
            except metadata.PackageNotFoundError:
                info = {"installed": False, "error": "not installed in this environment"}
        if not info["installed"]:
            # Without its main distribution a peer has no results at all; without another
            # part (e.g. its SQLite saver) only the workloads that need that part are missing.
            if dist == peer:
                status[peer]["installed"] = False
            status[peer]["missing"].append((dist, info.get("error", "")))
    return status


def load_average(benches: list[Bench]) -> str:
    """The 1-minute load average seen by the benchmarks: above the core count, numbers are
    noisy (other processes shared the cores)."""
    seen = sorted(b.extra["load1"] for b in benches if "load1" in b.extra)
    if not seen:
        return "load average not recorded"
    return (
        f"1-minute load average during the run: {seen[0]:.2f} to {seen[-1]:.2f} "
        f"(median {seen[len(seen) // 2]:.2f})"
    )


def versions(data: dict[str, Any], recorded: dict[str, Any]) -> dict[str, str]:
    """Each distribution's version as the run saw it: recorded in the run's JSON by the
    process that ran the benchmarks (conftest.py), or by install_peers.py (a peer's venv);
    only failing both, the environment running this report."""
    seen = dict(data.get("versions") or {})
    for dist, info in recorded.items():
        if info.get("installed") and info.get("version"):
            seen.setdefault(dist, info["version"])
    return {dist: seen.get(dist) or version(dist) for dist in VERSIONS}


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model(data: dict[str, Any]) -> str:
    brand = (data.get("machine_info", {}).get("cpu") or {}).get("brand_raw")
    if brand:
        return brand
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
