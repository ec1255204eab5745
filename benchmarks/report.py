"""Write docs/performance.md from one run of the benchmarks (pytest-benchmark's JSON).

    python benchmarks/report.py BENCH.json PEERS.json docs/performance.md [PREVIOUS.json]

PREVIOUS.json, the run before (make bench keeps it), puts every count beside its previous
value: how far two runs agree.

Every number and every ratio comes from BENCH.json, so tarry, the peers and the floor are
compared within one run on one machine; only the targets (from issue 5) are written here.
PEERS.json is what install_peers.py recorded: a peer that failed to install gets a line saying
so and "not installed" in its cells, never a silent gap.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from report_collect import PEERS, Bench, cpu_model, load, load_average, peer_status, versions
from report_counts import agreement, counts_table
from report_goals import goals_28_table, goals_table
from report_render import detail_table, main_table
from report_rows import ks
from report_sections import (
    batch_requests,
    batch_waits,
    delivery_costs,
    inflight,
    pg_workers,
    worker_samples,
)


def peer_notes() -> list[str]:
    """How the peers measured in virtualenvs of their own (test_peers.py) do each workload."""
    return [
        "- **DBOS, Burr, pydantic-graph, llama-index-workflows** run in virtualenvs of their "
        "own (`.benchmarks/venvs/<peer>`, made by `install_peers.py` from "
        "`[tool.tarry.bench-venvs]` in pyproject.toml), each measured by its script "
        "(`benchmarks/bench_<peer>.py`) in a subprocess: median of the same number of rounds "
        "as tarry's after the same warm-up, at the same sizes (DBOS: at most 30 round trips "
        "and 200 durable steps, each a commit of its own). A peer whose venv failed reads "
        '"not installed", with pip\'s words above.',
        "- **DBOS Transact**: a `@DBOS.workflow` calling `@DBOS.step` functions, checkpointed "
        "in its system database — SQLite, or PostgreSQL in a schema of its own. Pause: "
        "`DBOS.recv(topic)`; resume: `DBOS.send`, timed until the workflow reaches the next "
        "`recv`. **A waiting DBOS workflow holds a thread** (its `recv` blocks it) for as long "
        "as it waits. On SQLite a waiting `recv` is woken by the notification poller "
        "(`notification_listener_polling_interval_sec`, 1 s by default). No in-memory mode, "
        "hence no in-memory rows; a fresh process recovers a waiting workflow by running it "
        "again from its start, hence no fresh-process row. The paused workflow starts at item "
        "k with the k results as its input.",
        "- **Apache Burr**: `@action` functions and transitions; a state persister "
        "(`InMemoryPersister`, `SQLitePersister` on WAL/NORMAL, the psycopg2 "
        "`PostgreSQLPersister`) saves after every step. Pause: the run halts after a `wait` "
        "action; resume: the application is built again from the persister "
        "(`initialize_from(..., resume_at_next_action=True)`) and run with the answer as an "
        "input to the next halt. The same round trip on one application kept in memory (no "
        "rebuild: `app kept in memory`, not a shape that survives the process) is its "
        "fastest, and the one its column shows. The paused application starts at item k from the loop's state there.",
        "- **pydantic-graph 1.107.10**: the newest release with state persistence (2.0.0 "
        "removed `pydantic_graph.persistence` and the `BaseNode` graphs for the builder API). "
        "Dataclass nodes; pause: the caller stops `graph.iter` at the node that needs a person "
        "(the docs' question graph); resume: `load_next()` and `graph.iter` from the node that "
        "takes the answer. `SimpleStatePersistence` (memory) and `FileStatePersistence` (a "
        "JSON file); no SQLite or PostgreSQL persistence. Chain: one node class run n times.",
        "- **llama-index-workflows**: `@step` methods passing events (the chain: one step, n "
        "events); pause: a step returns `InputRequiredEvent`, the caller streams to it, "
        "serialises `handler.ctx.to_dict()` and cancels the run; resume: "
        "`Context.from_dict`, `run(ctx=...)`, `send_event(HumanResponseEvent)` and stream to "
        "the next `InputRequiredEvent`. The library stores nothing: in memory keeps the dict, "
        "SQLite keeps its JSON in one row (WAL/NORMAL, one commit).",
    ]


def installs(benches: list[Bench]) -> str:
    """How tarry was installed where it was spawned or counted (labels of the run)."""
    seen = sorted(
        {
            f"{b.extra['install']} ({b.workload})"
            for b in benches
            if b.system == "tarry" and "install" in b.extra
        }
    )
    wheel = all(s.startswith(("wheel", "venv")) for s in seen)
    if not seen:
        return "not recorded"
    head = (
        "every system from a regular install: tarry from its wheel in `.benchmarks/venvs/tarry` "
        "for the counts, the fresh processes and the imports; the peers from PyPI. The "
        "wall-clock rows timed inside the pytest process use its editable tarry: an editable "
        "install changes what importing costs, not what a step or a resume does"
        if wheel
        else "**tarry ran from an editable install in some rows**"
    )
    return f"{head} — " + ", ".join(seen)


def coverage(data: dict[str, Any]) -> str:
    """Which of benchmarks/test_*.py the run ran: a partial run says so, and which."""
    ran = {
        b.get("fullname", "").split("::")[0].rsplit("/", 1)[-1]
        for b in data["benchmarks"]
        if b.get("fullname")
    }
    ran.discard("")
    every = {p.name for p in Path(__file__).resolve().parent.glob("test_*.py")}
    every.discard("test_report.py")  # no benchmark of its own
    if ran >= every:
        return f"all {len(every)} (`make bench`)"
    missing = sorted(every - ran)
    return (
        f"**a partial run**: {len(ran & every)} of {len(every)} "
        f"({', '.join(sorted(ran & every))}); not run: {', '.join(missing)}"
    )


def commit_of(data: dict[str, Any]) -> str:
    info = data.get("commit_info") or {}
    sha = str(info.get("id") or "?")[:10]
    return sha + (" (with uncommitted changes)" if info.get("dirty") else "")


def write(
    bench_json: Path, peers_json: Path | None, out: Path, previous_json: Path | None = None
) -> None:
    benches, data = load(bench_json)
    previous, previous_data = (
        load(previous_json) if previous_json is not None and previous_json.exists() else ([], {})
    )
    status = peer_status(peers_json)
    recorded = (
        json.loads(peers_json.read_text()) if peers_json is not None and peers_json.exists() else {}
    )
    machine = data.get("machine_info", {})
    lines = [
        "# Performance",
        "",
        "Written by `make bench` (`benchmarks/report.py`) from one run of `benchmarks/`: tarry,",
        "the peers and the plain-Python floor are measured side by side in the same run, and",
        "every ratio below comes from that run. Do not edit by hand.",
        "",
        "Read the counted figures first (*Goals (issue 28)*, *Counts*): instructions, bytes and "
        "RSS do not depend on the machine's load, and the CPU ratios are taken in turns (each "
        "round runs every system once, the ratio taken within the round). The wall-clock "
        "medians of *Results* time each system at a different moment: on a shared machine "
        "(see the load below) they move by more than the differences they show.",
        "",
        f"- Run: {data.get('datetime', '?')} (report written "
        f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')})",
        f"- Machine: {cpu_model(data)}, {os.cpu_count()} logical cores, "
        f"{platform.system()} {platform.release()}; {load_average(benches)}",
        f"- Python {machine.get('python_version', platform.python_version())} "
        f"({machine.get('python_implementation', platform.python_implementation())}), "
        f"SQLite {sqlite3.sqlite_version}",
        "- Versions: " + ", ".join(f"{d} {v}" for d, v in versions(data, recorded).items()),
        f"- Installs: {installs(benches)}",
        f"- Benchmark files: {coverage(data)}",
    ]
    for peer, info in status.items():
        for dist, error in info["missing"]:
            why = " ".join(error.split())[-300:] if error else "no reason recorded"
            lines.append(
                f"- **{PEERS[peer]}: `{dist}` failed to install** — the cells that need it "
                f'read "not installed". pip said: {why}'
            )
    lines += [
        "",
        *goals_28_table(benches),
        *counts_table(benches),
        *agreement(benches, previous, (commit_of(data), commit_of(previous_data))),
        "## Results",
        "",
        "Wall-clock medians. Ratios are tarry ÷ the other (below 1: tarry is faster or "
        "smaller); each peer at its fastest shape, named in its cell; *best peer*: the peer "
        "with the lowest number on the row.",
        "",
        *main_table(benches, status),
        "",
        *goals_table(benches, ks(benches)),
        "",
        *pg_workers(benches),
        *inflight(benches),
        *batch_waits(benches),
        *batch_requests(benches),
        *delivery_costs(benches),
        "## How each workload is measured",
        "",
        "- **Step overhead**: tarry `Flow` of no-op steps and a `ForEach` over the items "
        "(body: one no-op step); PocketFlow `Node`s chained with `>>` and a `BatchFlow` (a "
        "sub-flow per item) and a `BatchNode` (`exec` once per item, no sub-flow: its fastest "
        "shape, the one its column shows); LangGraph `StateGraph` of "
        "no-op nodes and one node looped by a conditional edge, compiled without a "
        "checkpointer. Floor: the same calls through a 3-deep `yield from` chain (tarry's "
        "flow → container → step nesting); a plain loop is in the details.",
        "- **Durable step**: the same chain with SQLite persistence of every step: tarry "
        '`durability="step"` on `SQLiteStore`; LangGraph `SqliteSaver` with '
        '`durability="sync"`. Every SQLite file, the floor\'s included, is WAL with '
        "`synchronous=NORMAL` (tarry's setting; LangGraph's connection is given the same). "
        "Floor: one stdlib `sqlite3` transaction inserting one row per step.",
        "- **Pause → resume**: a loop over 10,000 items (tarry `ForEach`, LangGraph one node "
        "looped by a conditional edge collecting a result per item) whose step interrupts "
        "(`ctx.interrupt` / `interrupt()`) at every item from k on. One round trip is one "
        "resume from item i to the pause at item i + 1. Persistence at the pause: tarry "
        '`durability="pause"`, LangGraph `durability="exit"`; in memory is tarry\'s '
        "`MemoryStore` and LangGraph's `InMemorySaver`. The same loop paused by a `Gate` is "
        "in the details (tarry only). These wall-clock rows are resumed by the Runtime that "
        "paused the session (its caches warm); *Counts* gives the resume by another Runtime "
        "(cold) beside it.",
        "- **Fresh process**: `python -c` that imports the library, opens the SQLite file, "
        "resumes one session paused at k = 10 up to its next pause, and exits; one prepared "
        "session per process. Floor: `python -c pass`. Every spawned process may use the "
        "bytecode cache, as a library installed by pip does (a shell that sets "
        "PYTHONDONTWRITEBYTECODE would time tarry compiling its source while the peers, "
        "installed from wheels, load theirs). Under `make bench` every process, tarry's "
        "included, is spawned by `.benchmarks/venvs/tarry`, where tarry is installed from "
        "its wheel (no editable finder) beside the peers of the bench extra.",
        '- **Import**: `python -X importtime -c "import ..."`: the cumulative time of the '
        "top-level imports the statement adds to `python -c pass` (LangGraph: "
        "`langgraph.graph`, `langgraph.types`, `langgraph.checkpoint.sqlite`), median of 5. "
        "The wall time of the whole process is its own row, against the floor "
        "`python -c pass` of the same run. `import tarry` leaves for first use what a plain "
        "run or resume does not call: the stores, cattrs, the JSON form, the CLI and HTTP "
        "front ends, OpenSSL (SHA-256 comes from CPython's own module), dataclasses, and the "
        "Runtime's families for timers, delivery, control, inspection and stats "
        "(tests/test_packaging.py pins the list). What remains is mostly attrs itself "
        "(about 40 % of it: the package builds its own classes with `compile`) and the ~25 "
        "attrs records and signals every run uses.",
        "- **Bytes**: the store's own count of bytes written by one round trip and the size "
        "of the session's snapshot (tarry `bytes_written` / the state blob; LangGraph the "
        "checkpoint, metadata and write blobs in its tables): the payload. What the disk "
        "sees (the WAL's pages, checkpoints) is in *Counts*: the process's `write()` bytes.",
        "- **Counts** (`benchmarks/counts.py`, run by `test_counts.py`; `probes.py` holds each "
        "system's work): instructions under `valgrind --tool=callgrind` of 1 and of 4 "
        "repetitions of a fixed amount of work in processes of their own, the difference "
        "over 3 × the units (a chain of 1,000 steps, a ForEach of 1,000 items, 100 round "
        "trips of the paused loop at k = 10 with 100,000 items (a peer's: 20, as its state "
        "grows by each result), "
        "an import against `pass`); cold resumes alternate two Runtimes on one MemoryStore, "
        "so that each resume is made by the Runtime that did not pause the session. Disk "
        "bytes: `wchar` of /proc/self/io around 100 round trips on SQLite after 20 untimed "
        "ones. RSS: sessions of the ticket shape (tarry, its caller keeping each token; "
        "LangGraph) or of the loop paused "
        "at item 3 (pydantic-graph: a `SimpleStatePersistence` each; Burr: one "
        "`InMemoryPersister`; llama-index: the context's `to_dict()` kept), 2,000 to 5,000 "
        "of them. DBOS is not in the RSS row: a waiting workflow holds a thread, not a record "
        "in memory. `python benchmarks/counts.py --twice` measures everything twice.",
        "- **Memory**: separate processes reading VmRSS after `gc.collect()`. Paused sessions: "
        "RSS growth while starting sessions of a small flow (three steps, a pause, a step) "
        "that all stay paused, per 10,000 (LangGraph is measured over fewer and scaled). "
        "Worker: start, pause, resume and finish such sessions over and over, keeping at "
        "most 1,000 ended ones (`MemoryStore(max_sessions=1000)`; LangGraph deletes the "
        "oldest thread); growth over the second half means a leak.",
        *peer_notes(),
        "",
        *worker_samples(benches),
        "",
        "## Every benchmark",
        "",
        *detail_table(benches),
        "",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) not in (3, 4):
        sys.exit("usage: report.py BENCH.json PEERS.json OUT.md [PREVIOUS-BENCH.json]")
    write(Path(args[0]), Path(args[1]), Path(args[2]), Path(args[3]) if args[3:] else None)
    print(f"report.py: wrote {args[2]}", file=sys.stderr)
