"""report.py on a small run of its own making: every peer in its column, a workload a peer
cannot do shown with its reason, a peer that failed to install named, the versions the run
saw, and the goals of issue 17 judged from the run's own numbers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from bench_support import HERE

# Loaded from its path: `make test` also collects tests/proof/report.py.
_spec = importlib.util.spec_from_file_location("bench_report", HERE / "report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def entry(
    workload: str,
    system: str,
    median: float,
    *,
    variant: str | None = None,
    per: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "name": f"{system}:{workload}:{variant}:{extra.get('k')}",
        "stats": {"median": median, "min": median, "rounds": 3},
        "extra_info": {
            "workload": workload,
            "system": system,
            "per": per,
            "variant": variant,
            "load1": 1.0,
            **extra,
        },
    }


def run(tmp_path: Path, benchmarks: list[dict[str, Any]], peers: dict[str, Any]) -> str:
    bench = tmp_path / "bench.json"
    bench.write_text(
        json.dumps(
            {
                "benchmarks": benchmarks,
                "versions": {"tarry": "0.1.0", "langgraph": "1.2.3", "pocketflow": "0.0.3"},
            }
        )
    )
    status = tmp_path / "peers.json"
    status.write_text(json.dumps(peers))
    out = tmp_path / "performance.md"
    report.write(bench, status, out)
    return out.read_text()


RUN = [
    entry("chain", "tarry", 2e-3, per=1000),
    entry("chain", "pocketflow", 2.5e-3, per=1000),
    entry("foreach", "tarry", 6e-3, per=1000),
    entry("foreach", "pocketflow", 5e-3, per=1000, variant="BatchFlow"),
    entry("foreach", "pocketflow", 1e-3, per=1000, variant="BatchNode"),
    entry("pause_memory", "tarry", 40e-6, k=10),
    entry("pause_memory", "tarry", 41e-6, k=9000),
    entry("pause_memory", "apache-burr", 900e-6, k=10),
    entry("pause_memory", "apache-burr", 30e-6, k=10, variant="app kept in memory"),
    entry("pause_memory", "pydantic-graph", 700e-6, k=10, variant="SimpleStatePersistence"),
    entry(
        "peer_script",
        "dbos",
        10.0,
        variant="sqlite",
        version="3.4.0",
        unsupported={"chain": "every step is checkpointed"},
    ),
]
PEERS = {
    "langgraph": {"installed": True, "version": "1.2.3"},
    "pocketflow": {"installed": True, "version": "0.0.3"},
    "dbos": {"installed": True, "version": "3.4.0"},
    "apache-burr": {"installed": True, "version": "0.43.0"},
    "pydantic-graph": {"installed": True, "version": "1.107.10"},
    "llama-index-workflows": {"installed": False, "error": "pip: no matching distribution"},
}


def row(text: str, starts: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {starts}"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_every_peer_has_a_column_and_its_number(tmp_path: Path) -> None:
    text = run(tmp_path, RUN, PEERS)
    head = row(text, "workload")
    for name in (
        "LangGraph",
        "PocketFlow",
        "DBOS",
        "Burr",
        "pydantic-graph",
        "llama-index-workflows",
    ):
        assert name in head
    memory = dict(zip(head, row(text, "pause → resume, in memory, k = 10 "), strict=True))
    assert memory["Burr"] == "900.00"  # the rebuilt application; the kept one is a side shape
    assert memory["pydantic-graph"] == "700.00"  # its one named shape
    assert memory["llama-index-workflows"] == "not installed"
    foreach = dict(zip(head, row(text, "step overhead: ForEach"), strict=True))
    assert foreach["PocketFlow"] == "5.00" and foreach["best peer"] == "PocketFlow"


def test_a_workload_a_peer_cannot_do_says_why(tmp_path: Path) -> None:
    text = run(tmp_path, RUN, PEERS)
    head = row(text, "workload")
    chain = dict(zip(head, row(text, "step overhead: chain"), strict=True))
    assert chain["DBOS"].startswith("not supported [")
    number = chain["DBOS"].split("[")[1].rstrip("]")
    assert (
        f"{number}. DBOS, step overhead: chain of 1,000 no-op steps, in memory: every step "
        "is checkpointed" in text
    )


def test_a_peer_that_failed_to_install_is_named_with_pips_words(tmp_path: Path) -> None:
    text = run(tmp_path, RUN, PEERS)
    assert "llama-index-workflows: `llama-index-workflows` failed to install" in text
    assert "pip: no matching distribution" in text


def test_versions_are_the_ones_the_run_saw(tmp_path: Path) -> None:
    text = run(tmp_path, RUN, PEERS)
    line = next(line for line in text.splitlines() if line.startswith("- Versions:"))
    assert "langgraph 1.2.3" in line and "pocketflow 0.0.3" in line
    assert "apache-burr 0.43.0" in line and "pydantic-graph 1.107.10" in line


def test_goals_are_judged_from_the_runs_ratios(tmp_path: Path) -> None:
    text = run(tmp_path, RUN, PEERS)
    chain = row(text, "chain step ÷ PocketFlow's chain step")
    assert chain[1:] == ["0.80", "ratio", "≤ 1", "met"]
    foreach = row(text, "ForEach item ÷ PocketFlow's BatchFlow item")
    assert foreach[1:] == ["1.20", "ratio", "≤ 1", "**not met**"]
    burr = row(text, "pause → resume in memory ÷ Burr's")
    assert burr[1] == "1.33" and burr[-1] == "**not met**"  # against its fastest shape
    assert row(text, "pause → resume in memory, k = 10")[1:] == ["40.0", "µs", "≤ 50", "met"]
    assert row(text, "import tarry")[1] == "not measured in this run"


def test_statements_per_delivered_session_are_judged_against_their_target(tmp_path: Path) -> None:
    counted = entry(
        "deliver_many_statements",
        "tarry",
        20.0,
        variant="postgres",
        per=10_000,
        sessions=10_000,
        statements=20_040,
        statements_per_session=2.004,
        target_statements_per_session=3,
        ms_per_session=2.0,
    )
    text = run(tmp_path, [*RUN, counted], PEERS)
    assert row(text, "10,000 | 20,040") == [
        "10,000", "20,040", "2.00", "≤ 3", "yes", "20.00 s", "2.00 ms",
    ]  # fmt: skip


def test_workers_polling_one_bulk_adapter_are_judged_at_the_most_workers(tmp_path: Path) -> None:
    herd = entry(
        "poll_workers",
        "tarry",
        7.0,
        variant="sqlite",
        per=1_000,
        sessions=1_000,
        workers=[1, 2, 4, 8],
        attempts_per_resume=[1.0, 1.0, 1.0, 1.0],
        statements_per_resume=[2.06, 2.12, 2.23, 2.47],
        target_attempts_per_resume=1.0,
        target_statements_per_resume=3.0,
    )
    text = run(tmp_path, [*RUN, herd], PEERS)
    assert row(text, "sqlite | 1,000 | 1 / 2 / 4 / 8") == [
        "sqlite", "1,000", "1 / 2 / 4 / 8", "1.00 / 1.00 / 1.00 / 1.00",
        "2.06 / 2.12 / 2.23 / 2.47", "yes (targets 1.00 and ≤ 3)",
    ]  # fmt: skip
