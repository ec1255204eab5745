"""report.py on a small run of its own making: every peer in its column, a workload a peer
cannot do shown with its reason, a peer that failed to install named, the versions the run
saw, and the goals of issue 17 judged from the run's own numbers."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import turns
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
    memory = dict(zip(head, row(text, "pause → resume, in memory, k = 10,"), strict=True))
    # Every peer at its fastest shape, the shape named: Burr's application kept in memory.
    assert memory["Burr"] == "30.00 (app kept in memory)"
    assert memory["pydantic-graph"] == "700.00 (SimpleStatePersistence)"
    assert memory["llama-index-workflows"] == "not installed"
    foreach = dict(zip(head, row(text, "step overhead: ForEach"), strict=True))
    assert foreach["PocketFlow"] == "1.00 (BatchNode)" and foreach["best peer"] == "PocketFlow"
    assert foreach["tarry ÷ best peer"] == "6.00"


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


# -- issue 28: counts and turns ----------------------------------------------------------------


def test_the_ratio_in_turns_is_the_median_of_the_per_round_ratios() -> None:
    # Round 2 was slow for both (a busy moment): its ratio is still 2; the ratio of the
    # medians (3 / 1.5) agrees here, but the ratio of the means would not.
    mine, theirs = [2.0, 30.0, 4.0, 3.0, 2.2], [1.0, 15.0, 2.0, 1.5, 1.0]
    assert turns.median_of_ratios(mine, theirs) == 2.0
    assert turns.median_of_ratios([1.0, 9.0, 3.0], [1.0, 1.0, 1.0]) == 3.0  # not the mean, 4.33
    assert turns.median_of_ratios([1.0, 4.0], [1.0, 2.0]) == 1.5  # even: the middle two's mean


def test_the_ratio_in_turns_needs_a_pair_per_round() -> None:
    import pytest

    with pytest.raises(ValueError):
        turns.median_of_ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        turns.median_of_ratios([], [])


def test_systems_take_turns_in_a_rotated_order_and_warmups_are_dropped() -> None:
    order: list[str] = []
    now = iter(range(1000))
    spent = turns.in_turns(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")},
        3,
        warmup=1,
        clock=lambda: float(next(now)),
    )
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert spent == {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0, 1.0]}
    assert turns.ratios({"t": [2.0, 4.0, 9.0], "p": [1.0, 1.0, 1.0]}, "t") == {"p": 4.0}


COUNTS = [
    entry("instr_chain", "tarry", 1.0, instructions=24_000),
    entry("instr_chain", "pocketflow", 1.0, instructions=25_000),
    entry("instr_chain", "floor", 1.0, variant="3-deep yield from", instructions=2_000),
    entry("instr_foreach", "tarry", 1.0, instructions=45_000),
    entry("instr_foreach", "pocketflow", 1.0, variant="BatchNode", instructions=3_000),
    entry("instr_foreach", "pocketflow", 1.0, variant="BatchFlow", instructions=27_000),
    entry("instr_pause_memory", "tarry", 1.0, variant="cold", instructions=600_000),
    entry("instr_pause_memory", "tarry", 1.0, variant="warm", instructions=400_000),
    entry(
        "instr_pause_memory",
        "pydantic-graph",
        1.0,
        variant="SimpleStatePersistence",
        instructions=500_000,
    ),
    entry("instr_import", "tarry", 1.0, instructions=150_000_000),
    entry("instr_import", "pocketflow", 1.0, instructions=200_000_000),
    entry(
        "disk_per_pause_sqlite",
        "tarry",
        1.0,
        disk_bytes_per_pause=93_184.0,
        payload_bytes_per_pause=999.0,
    ),
    entry("rss_per_session", "tarry", 1.0, rss_bytes_per_session=512.0),
    entry("rss_per_session", "pydantic-graph", 1.0, rss_bytes_per_session=400.0),
    entry(
        "turns_chain",
        "tarry",
        1.0,
        units=1000,
        rounds=31,
        ratios={"pocketflow": 1.1, "floor": 9.0},
        again={"pocketflow": 1.21, "floor": 9.0},
    ),
]


def test_issue_28_goals_are_judged_from_the_counts_of_the_run(tmp_path: Path) -> None:
    text = run(tmp_path, RUN + COUNTS, PEERS)
    assert row(text, "chain step ÷ PocketFlow's, instructions")[1:] == [
        "0.96", "ratio", "≤ 1", "met",
    ]  # fmt: skip
    assert row(text, "chain step ÷ PocketFlow's, CPU in turns")[1] == "1.10"
    assert row(text, "ForEach item, instructions")[1:] == [
        "45,000", "instructions", "≤ 40,000", "**not met**",
    ]  # fmt: skip
    assert row(text, "ForEach item ÷ PocketFlow's BatchFlow item, instructions")[1] == "1.67"
    batchnode = row(text, "ForEach item ÷ PocketFlow's BatchNode item")
    assert batchnode[1:] == ["15.00", "ratio", "—", "—"]  # shown, judged by no target
    cold = row(text, "pause → resume in memory by another Runtime ÷ pydantic-graph's")
    assert cold[1] == "1.20" and cold[-1] == "**not met**"
    assert row(text, "pause → resume in memory by the Runtime that paused")[1] == "0.80"
    disk = row(text, "disk bytes written per pause, SQLite (write() bytes)")
    assert disk[1:] == ["91.0", "KB", "≤ 24", "**not met**"]
    assert row(text, "RSS per paused session, in memory")[1:] == ["0.50", "KB", "≤ 1", "met"]
    assert row(text, "import tarry ÷ import pocketflow")[1:] == ["0.75", "ratio", "≤ 1", "met"]
    assert row(text, "ForEach item ÷ PocketFlow's BatchFlow item, CPU")[1] == (
        "not measured in this run"
    )


def test_the_counts_table_takes_each_peer_at_its_leanest_shape_and_names_it(
    tmp_path: Path,
) -> None:
    text = run(tmp_path, RUN + COUNTS, PEERS)
    head = row(text, "workload | unit | tarry")
    foreach = dict(zip(head, row(text, "ForEach item, in memory | instructions"), strict=True))
    assert foreach["PocketFlow"] == "3,000 (BatchNode)"
    assert foreach["tarry ÷ best peer"] == "15.00 (PocketFlow)"
    cold = dict(zip(head, row(text, "pause → resume in memory, resumed by another"), strict=True))
    assert cold["tarry"] == "600,000" and cold["tarry ÷ best peer"] == "1.20 (pydantic-graph)"
    warm = dict(
        zip(head, row(text, "pause → resume in memory, resumed by the Runtime"), strict=True)
    )
    assert warm["tarry"] == "400,000"
    disk = dict(
        zip(
            head, row(text, "disk bytes written per pause, SQLite (write() bytes: WAL"), strict=True
        )
    )
    payload = dict(zip(head, row(text, "payload bytes per pause"), strict=True))
    assert disk["tarry"] == "91.0" and payload["tarry"] == "0.98"
    rss = dict(zip(head, row(text, "RSS per paused session, in memory | KB"), strict=True))
    assert rss["pydantic-graph"] == "0.39" and rss["tarry ÷ best peer"] == "1.28 (pydantic-graph)"


def test_the_turns_show_how_far_two_measurements_agree(tmp_path: Path) -> None:
    text = run(tmp_path, RUN + COUNTS, PEERS)
    assert row(text, "chain of 1,000 | pocketflow") == [
        "chain of 1,000", "pocketflow", "31", "1.10", "1.21", "10.0%",
    ]  # fmt: skip


def test_a_run_without_counts_has_no_counts_table(tmp_path: Path) -> None:
    text = run(tmp_path, RUN, PEERS)
    assert "## Counts" not in text
    assert row(text, "ForEach item, instructions")[1] == "not measured in this run"


def test_a_partial_run_says_which_benchmark_files_it_ran(tmp_path: Path) -> None:
    ran = entry("chain", "tarry", 2e-3, per=1000)
    ran["fullname"] = "benchmarks/test_step_overhead.py::test_tarry_chain"
    text = run(tmp_path, [ran], PEERS)
    line = next(line for line in text.splitlines() if line.startswith("- Benchmark files:"))
    assert "**a partial run**" in line and "(test_step_overhead.py)" in line
    assert "not run: " in line and "test_counts.py" in line


def test_each_count_is_shown_beside_the_previous_runs(tmp_path: Path) -> None:
    before = tmp_path / "previous.json"
    earlier = [
        entry("instr_chain", "tarry", 1.0, instructions=25_000),
        entry("turns_chain", "tarry", 1.0, units=1000, rounds=31, ratios={"pocketflow": 1.0}),
    ]
    before.write_text(json.dumps({"benchmarks": earlier, "commit_info": {"id": "abc"}}))
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"benchmarks": RUN + COUNTS, "commit_info": {"id": "abc"}}))
    out = tmp_path / "performance.md"
    report.write(bench, None, out, before)
    text = out.read_text()
    assert "abc then abc: the same commit" in text
    assert row(text, "instr_chain | tarry |  | instructions") == [
        "instr_chain", "tarry", "", "instructions", "25,000", "24,000", "4.0%",
    ]  # fmt: skip
    assert row(text, "turns_chain | tarry | pocketflow")[-1] == "10.0%"
    assert "Largest spread: 10.0%." in text


def test_agreement_reads_the_turns_ratios_and_passes_over_other_ratio_lists(
    tmp_path: Path,
) -> None:
    from report_collect import load
    from report_counts import agreement

    data = {
        "benchmarks": [
            entry("turns_chain", "tarry", 1.0, ratios={"pocketflow": 1.1}),
            entry("resume_one_branch", "tarry", 1.0, ratios=[1.0, 1.2]),
        ]
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    benches, _ = load(path)
    lines = agreement(benches, benches, ("abc", "abc"))
    assert any("pocketflow" in line for line in lines)
