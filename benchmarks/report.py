"""Write docs/performance.md from one run of the benchmarks (pytest-benchmark's JSON).

    python benchmarks/report.py BENCH.json PEERS.json docs/performance.md

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
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import attrs
from report_goals import goals_table

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
#: Shapes of a peer kept out of its column (they are in the details): lighter than the shape
#: the row stands for.
SIDE_VARIANTS = {"BatchNode", "app kept in memory"}
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


@attrs.frozen
class Row:
    """One line of the main table: how to find each system's number in the run."""

    title: str
    unit: str
    value: Callable[[list[Bench], str], float | None]  # (benchmarks, system) -> number
    target: float | None = None
    fmt: str = "{:,.2f}"
    floor: Callable[[list[Bench]], float | None] | None = None
    floor_note: str = ""
    no_peer: dict[str, str] = attrs.field(factory=dict)  # peer -> why it has no number
    workload: str | None = None  # where a peer's script says why it cannot do the row


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
    its one shape of the workload when it names it (e.g. pydantic-graph's
    "SimpleStatePersistence"), its side shapes (SIDE_VARIANTS) left to the details."""
    others = []
    for b in benches:
        if (
            b.workload == workload
            and b.system == system
            and all(b.extra.get(key) == value for key, value in match.items())
        ):
            if b.variant == variant:
                return b
            others.append(b)
    if variant is None and system in PEERS:
        named = [b for b in others if b.variant not in SIDE_VARIANTS]
        return named[0] if named else None
    return None


def unsupported(benches: list[Bench]) -> dict[tuple[str, str], str]:
    """(peer, workload) -> why the peer cannot do it, as its script said (test_peers.py)."""
    found: dict[tuple[str, str], str] = {}
    for b in benches:
        if b.workload == "peer_script":
            for workload, why in (b.extra.get("unsupported") or {}).items():
                found[(b.system, workload)] = why
    return found


# -- how each row reads the run -------------------------------------------------------------


def per_unit_us(workload: str, variants: dict[str, str] | None = None) -> Callable[..., Any]:
    def value(benches: list[Bench], system: str) -> float | None:
        b = pick(benches, workload, system, (variants or {}).get(system))
        return None if b is None else b.per_unit * 1e6

    return value


def floor_us(workload: str, variant: str) -> Callable[[list[Bench]], float | None]:
    def value(benches: list[Bench]) -> float | None:
        b = pick(benches, workload, "floor", variant)
        return None if b is None else b.per_unit * 1e6

    return value


def ks(benches: list[Bench]) -> tuple[int, int]:
    found = sorted(
        {b.extra["k"] for b in benches if b.workload.startswith("pause_") and "k" in b.extra}
    )
    return (found[0], found[-1]) if found else (10, 9000)


def pause_us(kind: str, at: int) -> Callable[..., Any]:
    def value(benches: list[Bench], system: str) -> float | None:
        b = pick(benches, f"pause_{kind}", system, k=ks(benches)[at])
        return None if b is None else b.median * 1e6

    return value


def pause_ratio(kind: str) -> Callable[..., Any]:
    """From the round trips taken in turns at both k (test_resume_cost_flat_in_k); failing
    that, from the medians of the two separate benchmarks."""

    def value(benches: list[Bench], system: str) -> float | None:
        paired = pick(benches, f"pause_ratio_{kind}", system)
        if paired is not None:
            return paired.extra["ratio"]
        early, late = pause_us(kind, 0)(benches, system), pause_us(kind, 1)(benches, system)
        return None if early is None or late is None else late / early

    return value


def pause_extra(key: str, at: int) -> Callable[..., Any]:
    def value(benches: list[Bench], system: str) -> float | None:
        b = pick(benches, "pause_sqlite", system, k=ks(benches)[at])
        return None if b is None else b.extra.get(key)

    return value


def input_extra(key: str, at: int) -> Callable[..., Any]:
    """From the pause of a ForEach over a large input (test_input_bytes.py)."""

    def value(benches: list[Bench], system: str) -> float | None:
        b = pick(benches, "input_pause_sqlite", system, k=ks(benches)[at])
        return None if b is None else b.extra.get(key)

    return value


def wall_ms(workload: str, variant: str | None = None) -> Callable[..., Any]:
    def value(benches: list[Bench], system: str) -> float | None:
        b = pick(benches, workload, system, variant)
        return None if b is None else b.median * 1e3

    return value


def import_ms(benches: list[Bench], system: str) -> float | None:
    b = pick(benches, "import", system)
    return None if b is None else b.extra["importtime_us"] / 1e3


def rss_sessions_mb(benches: list[Bench], system: str) -> float | None:
    """MB per 10,000 paused sessions (LangGraph is measured over fewer and scaled)."""
    b = pick(benches, "rss_sessions", system)
    return None if b is None else b.extra["rss_kb"] / b.extra["sessions"] * 10_000 / 1024


def rss_worker_mb(benches: list[Bench], system: str) -> float | None:
    """MB the worker grew over the second half of its resumes (flat: no leak)."""
    b = pick(benches, "rss_worker", system)
    return None if b is None else b.extra["late_growth_kb"] / 1024


def sqlite_floor(benches: list[Bench]) -> float | None:
    return floor_us("durable_chain", "one WAL commit")(benches)


def rows(benches: list[Bench]) -> list[Row]:
    k0, k1 = ks(benches)
    steps = next((b.extra["per"] for b in benches if b.workload == "chain"), 1000)
    worker = pick(benches, "rss_worker", "tarry")
    resumes = worker.extra["resumes"] if worker else 100_000
    pause = {"pocketflow": NO_PAUSE}
    out = [
        Row(
            f"step overhead: chain of {steps:,} no-op steps, in memory",
            "µs/step",
            per_unit_us("chain"),
            None,  # the goal is a ratio to PocketFlow's: see the Goals table
            floor=floor_us("chain", "3-deep yield from"),
            floor_note="3-deep yield from",
            workload="chain",
        ),
        Row(
            f"step overhead: ForEach / batch over {steps:,} items, in memory",
            "µs/item",
            per_unit_us("foreach", {"pocketflow": "BatchFlow"}),
            None,  # the goal is a ratio to PocketFlow's: see the Goals table
            floor=floor_us("chain", "3-deep yield from"),
            floor_note="3-deep yield from",
            workload="foreach",
        ),
        Row(
            "durable step: the chain, every step persisted to SQLite",
            "µs/step",
            per_unit_us("durable_chain"),
            None,  # the goal is a ratio to the floor: see the Goals table
            floor=sqlite_floor,
            floor_note="one WAL commit",
            no_peer=pause,
            workload="durable_chain",
        ),
        Row(
            "durable step: the chain, every step persisted to PostgreSQL",
            "µs/step",
            per_unit_us("durable_chain_postgres"),
            no_peer=pause,
            workload="durable_chain_postgres",
        ),
    ]
    wheres = {
        "memory": "in memory",
        "sqlite": "SQLite",
        "postgres": "PostgreSQL",
        "file": "a JSON file (pydantic-graph's FileStatePersistence)",
    }
    for kind, target in (("memory", 50.0), ("sqlite", 200.0), ("postgres", 1600.0), ("file", None)):
        where = wheres[kind]
        floor = sqlite_floor if kind == "sqlite" else None
        for at, k in enumerate((k0, k1)):
            out.append(
                Row(
                    f"pause → resume, {where}, k = {k:,}",
                    "µs",
                    pause_us(kind, at),
                    target,
                    floor=floor,
                    floor_note="one WAL commit" if floor else "",
                    no_peer=pause,
                    workload=f"pause_{kind}",
                )
            )
    for kind in ("memory", "sqlite"):
        where = "in memory" if kind == "memory" else "SQLite"
        out.append(
            Row(
                f"resume at k = {k1:,} ÷ at k = {k0:,}, {where} (round trips in turns)",
                "ratio",
                pause_ratio(kind),
                1.10,
                floor=lambda _: 1.0,
                no_peer=pause,
            )
        )
    out += [
        Row(
            "fresh process: spawn, import, resume from SQLite, exit",
            "ms",
            wall_ms("fresh_resume"),
            120.0,
            fmt="{:,.0f}",
            floor=lambda bs: wall_ms("fresh_resume", "python -c pass")(bs, "floor"),
            floor_note="python -c pass",
            no_peer=pause,
            workload="fresh_resume",
        ),
        Row(
            "import (-X importtime, cumulative)",
            "ms",
            import_ms,
            60.0,
            fmt="{:,.1f}",
            workload="import",
        ),
        Row(
            "import, whole process: spawn, import, exit",
            "ms",
            wall_ms("import"),
            fmt="{:,.0f}",
            floor=lambda bs: wall_ms("fresh_resume", "python -c pass")(bs, "floor"),
            floor_note="python -c pass",
        ),
        Row(
            f"snapshot size at k = {k0:,}, SQLite",
            "bytes",
            pause_extra("snapshot_bytes", 0),
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            f"snapshot size at k = {k1:,}, SQLite",
            "bytes",
            pause_extra("snapshot_bytes", 1),
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            f"bytes written per pause at k = {k0:,}, SQLite",
            "bytes",
            pause_extra("bytes_written", 0),
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            f"bytes written per pause at k = {k1:,}, SQLite",
            "bytes",
            pause_extra("bytes_written", 1),
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            f"bytes written per pause at k = {k0:,}, SQLite, a ForEach over a 10,000-prompt "
            "input (2 MB) after a 100 KB output",
            "bytes",
            input_extra("bytes_written", 0),
            2_000,
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            f"bytes written per pause at k = {k1:,}, SQLite, the same",
            "bytes",
            input_extra("bytes_written", 1),
            2_000,
            fmt="{:,.0f}",
            no_peer=pause,
        ),
        Row(
            "RSS per 10,000 sessions paused in memory",
            "MB",
            rss_sessions_mb,
            fmt="{:,.1f}",
            no_peer=pause,
        ),
        Row(
            f"worker RSS growth over the 2nd half of {resumes:,} resumes",
            "MB",
            rss_worker_mb,
            fmt="{:,.1f}",
            no_peer=pause,
        ),
    ]
    return out


# -- writing ---------------------------------------------------------------------------------


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


def cell(row: Row, value: float | None) -> str:
    return "—" if value is None else row.fmt.format(value)


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b == 0:
        return "—"
    r = a / b
    return f"{r:,.3f}" if r < 0.1 else f"{r:,.2f}"


def main_table(benches: list[Bench], status: dict[str, dict[str, Any]]) -> list[str]:
    """Every system in a column; a peer that cannot do a workload says why below the table."""
    peers = list(PEERS)
    cannot = unsupported(benches)
    reasons: list[str] = []
    head = (
        ["workload", "unit", "floor", "tarry"]
        + [PEERS[p] for p in peers]
        + ["tarry ÷ floor", "best peer", "tarry ÷ best peer", "target", "met"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows(benches):
        tarry = row.value(benches, "tarry")
        floor = row.floor(benches) if row.floor else None
        floor_cell = cell(row, floor) + (
            f" ({row.floor_note})" if row.floor_note and floor is not None else ""
        )
        cells = [row.title, row.unit, floor_cell, cell(row, tarry)]
        values = {}
        for p in peers:
            values[p] = None
            why = row.no_peer.get(p) or cannot.get((p, row.workload or ""))
            if not status[p]["installed"]:
                cells.append("not installed")
            elif why is not None and p in row.no_peer:
                cells.append(why)
            elif why is not None:
                reasons.append(f"{PEERS[p]}, {row.title}: {why}")
                cells.append(f"not supported [{len(reasons)}]")
            else:
                values[p] = row.value(benches, p)
                if values[p] is not None:
                    cells.append(cell(row, values[p]))
                elif status[p]["missing"]:  # a part of the peer failed to install
                    cells.append("not installed")
                else:
                    cells.append("not measured")
        measured = {p: v for p, v in values.items() if v is not None}
        best = min(measured, key=lambda p: measured[p]) if measured else None
        cells.append(ratio(tarry, floor))
        cells += [PEERS[best] if best else "—", ratio(tarry, measured.get(best))]
        if row.target is None:
            cells += ["—", ""]
        else:
            met = "" if tarry is None else ("yes" if tarry <= row.target else "**no**")
            cells += [f"≤ {row.target:,g}", met]
        lines.append("| " + " | ".join(cells) + " |")
    if reasons:
        lines += ["", "Not supported:", ""]
        lines += [f"{i}. {why}" for i, why in enumerate(reasons, 1)]
    return lines


def detail_table(benches: list[Bench]) -> list[str]:
    lines = [
        "| benchmark | system | variant | median | min | per unit | rounds | extra |",
        "|---|---|---|---|---|---|---|---|",
    ]
    hidden = {"workload", "system", "variant", "per", "rss_samples_kb", "load1"}
    for b in sorted(benches, key=lambda b: (b.workload, b.system, b.name)):
        extra = ", ".join(
            f"{k}={v}" for k, v in b.extra.items() if k not in hidden and v is not None
        )
        per = b.extra.get("per", 1)
        lines.append(
            f"| `{b.name}` | {b.system} | {b.variant or ''} | {human(b.median)} | "
            f"{human(b.minimum)} | {human(b.per_unit) + f' (÷{per:,})' if per > 1 else ''} | "
            f"{b.rounds} | {extra} |"
        )
    return lines


def human(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:,.2f} {unit}"
    return f"{seconds * 1e9:,.0f} ns"


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


def worker_samples(benches: list[Bench]) -> list[str]:
    lines = []
    for b in benches:
        if b.workload == "rss_worker":
            samples = b.extra.get("rss_samples_kb", [])
            mb = ", ".join(f"{s / 1024:,.1f}" for s in samples)
            lines.append(
                f"- {b.system}, {b.extra['resumes']:,} resumes, RSS (MB) every tenth: {mb}"
            )
    return lines


def pg_workers(benches: list[Bench]) -> list[str]:
    """Worker processes on PostgreSQL, before and after due sessions were claimed."""
    found = [b for b in benches if b.workload == "pg_workers"]
    if not found:
        return []
    sessions = max(b.extra.get("sessions", 0) for b in found)
    lines = [
        "## Workers on PostgreSQL",
        "",
        f"{sessions:,} sessions asleep on a due `Sleep`, resumed by 1, 2 and 4 worker processes "
        "on one PostgreSQL (`test_postgres_resumes_from_worker_processes`). *Before*: how "
        "workers found due sessions until issue 14 — each fetched the same earliest ones and "
        "raced the others for their tokens, and slept the interval (1 s) after every round. "
        "*After*: `Worker` claims due sessions with `FOR UPDATE SKIP LOCKED` (disjoint pages) "
        "and starts the next round at once after a full one. Token attempts: `consume_token` "
        "calls per session resumed (1.0: no worker tried a token another one used).",
        "",
        "| workers | resumes/s before | resumes/s after | token attempts per resume before "
        "| after |",
        "|---|---|---|---|---|",
    ]
    for n in sorted({b.extra["workers"] for b in found}):
        before = pick(found, "pg_workers", "tarry", "before", workers=n)
        after = pick(found, "pg_workers", "tarry", "after", workers=n)

        def get(b: Bench | None, key: str, fmt: str) -> str:
            return "not run" if b is None else fmt.format(b.extra[key])

        lines.append(
            f"| {n} | {get(before, 'resumes_per_second', '{:,.0f}')} "
            f"| {get(after, 'resumes_per_second', '{:,.0f}')} "
            f"| {get(before, 'token_attempts_per_resume', '{:.2f}')} "
            f"| {get(after, 'token_attempts_per_resume', '{:.2f}')} |"
        )
    return [*lines, ""]


def inflight(benches: list[Bench]) -> list[str]:
    """Issue 15: concurrent ForEach, many pauses per session, resume_many
    (benchmarks/test_inflight.py), each beside its baseline from the same run."""
    sleep = pick(benches, "inflight_sleep", "tarry")
    noop = pick(benches, "inflight_noop", "tarry")
    many = {kind: pick(benches, f"resume_many_{kind}", "tarry") for kind in ("memory", "sqlite")}
    waiting = sorted(
        (b for b in benches if b.workload == "waiting_bytes"), key=lambda b: b.extra["waiting"]
    )
    if not (sleep or noop or any(many.values()) or waiting):
        return []
    lines = [
        "## Many things in flight",
        "",
        "`benchmarks/test_inflight.py`: concurrent `ForEach`, many waits in one session and "
        "`resume_many`, each beside its baseline measured in the same run.",
        "",
        "| workload | tarry | baseline | tarry ÷ baseline | target | met |",
        "|---|---|---|---|---|---|",
    ]

    def met(value: float, target: float) -> str:
        return "yes" if value <= target else "**no**"

    if sleep is not None:
        e = sleep.extra
        lines.append(
            f"| {e['steps']} async steps of `asyncio.sleep({e['sleep_s']})`, concurrency="
            f"{e['concurrency']}: wall ÷ one sleep | {e['wall_over_sleep']:.2f} | "
            f"{e['gather_over_sleep']:.2f} (`asyncio.gather`) | {e['ratio_to_gather']:.2f} | "
            f"≤ 1.5 | {met(e['wall_over_sleep'], 1.5)} |"
        )
    if noop is not None:
        e = noop.extra
        us = noop.per_unit * 1e6
        lines.append(
            f"| {noop.extra['per']:,} async no-op steps, concurrency={e['concurrency']}: "
            f"µs per item | {us:,.1f} | {e['gather_us_per_item']:,.1f} (`asyncio.gather`); "
            f"{e['throttled_gather_us_per_item']:,.1f} (gather, semaphore of "
            f"{e['concurrency']}) | {e['ratio_to_gather']:.2f}; "
            f"{e['ratio_to_throttled_gather']:.2f} | — | |"
        )
    for kind, b in many.items():
        if b is None:
            continue
        e = b.extra
        where = "in memory" if kind == "memory" else "SQLite"
        target = " ≤ 30 | " + met(e["us_per_branch"], 30.0) if kind == "sqlite" else " — | "
        lines.append(
            f"| {e['branches']:,} waiting iterations, one `resume_many` of every token, "
            f"{where}: µs per branch (total {e['resume_many_s']:.2f} s; "
            f"{e['bytes_per_resumed_branch']:,.0f} bytes written per branch) | "
            f"{e['us_per_branch']:,.1f} | {e['round_trip_us']:,.1f} (one sequential "
            f"pause → resume round trip) | {e['ratio_branch_to_round_trip']:.3f} |{target} |"
        )
    for kind, b in many.items():
        if b is None:
            continue
        e = b.extra
        where = "in memory" if kind == "memory" else "SQLite"
        lines.append(
            f"| the run that pauses those {e['branches']:,} iterations, {where}: seconds "
            f"(bytes written per pause: {e['bytes_per_pause']:,.0f}) | "
            f"{e['run_to_pauses_s']:.2f} | — | — | — | |"
        )
    if waiting:
        lines += [
            "",
            "One branch's resume beside many waiting (SQLite): the branch resumes, runs a step "
            "and waits again — one resume and one pause, in one write. The snapshot holds a "
            "lane per waiting branch, so it grows with the number waiting by the lane's own "
            "entry; the rest of the write (events, values, the wait) does not grow.",
            "",
            "| branches waiting | bytes per pause (the run) | bytes one resume writes | "
            "of which the snapshot | the rest | snapshot bytes per waiting branch "
            "| ms per resume |",
            "|---|---|---|---|---|---|---|",
        ]
        for b in waiting:
            e = b.extra
            lines.append(
                f"| {e['waiting']:,} | {e['bytes_per_pause']:,.0f} | {e['resume_bytes']:,} | "
                f"{e['snapshot_bytes']:,} | {e['resume_bytes_beside_snapshot']:,} | "
                f"{e['snapshot_bytes_per_waiting']:,.1f} | {b.median * 1e3:,.1f} |"
            )
    return [*lines, ""]


def batch_waits(benches: list[Bench]) -> list[str]:
    """Batch waits (issue 16): poll rounds over many keyed waits, and deliver_many."""
    polls = [b for b in benches if b.workload == "poll_keyed"]
    delivers = [
        b
        for b in benches
        if b.workload in ("deliver_many", "deliver_many_mailbox", "deliver_many_branches")
    ]
    counted = [b for b in benches if b.workload == "deliver_many_statements"]
    herds = [b for b in benches if b.workload == "poll_workers"]
    if not polls and not delivers and not counted and not herds:
        return []
    targets = {"sqlite": 0.050, "postgres": 0.200}
    lines = [
        "## Batch waits",
        "",
        "Sessions each paused at a `Wait(key=...)`, as a batch job's prompts are "
        "(`benchmarks/test_batch.py`; docs/batch.md). *Idle round*: `poll()` with a bulk "
        "adapter that has nothing ready (median); rows written counted by SQLite's "
        "`total_changes`, write calls by a wrapper around the store. *Ready round*: one "
        "`poll()` in which some of them are ready. Before issue 16 an idle round over "
        "10,000 waiting sessions took 2.4–3.2 s on SQLite and 14–18 s on PostgreSQL and "
        "wrote 20,000 rows (a claim and a release per session).",
        "",
        "| store | waiting | idle round | target | met | write calls idle | ready | ready round "
        "| write calls per ready |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for b in sorted(polls, key=lambda b: b.variant or ""):
        target = targets.get(b.variant or "")
        met = "" if target is None else ("yes" if b.median <= target else "**no**")
        lines.append(
            f"| {b.variant} | {b.extra['waiting']:,} | {human(b.median)} "
            f"| {'—' if target is None else human(target)} | {met} | {b.extra['idle_writes']} "
            f"| {b.extra['ready']} | {human(b.extra['ready_round_s'])} "
            f"| {b.extra['writes_per_ready']} |"
        )
    if delivers:
        lines += [
            "",
            "| `deliver_many` of results | store | results | total | per result |",
            "|---|---|---|---|---|",
        ]
        shapes = {
            "deliver_many": "to as many waiting sessions",
            "deliver_many_mailbox": "to one session's sequential ForEach (mailbox)",
            "deliver_many_branches": "to one session's waiting branches "
            "(ForEach(concurrency=None))",
        }
        for b in sorted(delivers, key=lambda b: (b.workload, b.variant or "")):
            lines.append(
                f"| {shapes[b.workload]} | {b.variant} | {b.extra['per']:,} | {human(b.median)} "
                f"| {human(b.per_unit)} |"
            )
    if counted:
        lines += [
            "",
            "Statements sent to PostgreSQL by one `deliver_many` to as many sessions, each "
            "waiting on a key of its own, from a Runtime that did not pause them "
            "(`benchmarks/test_postgres_delivery.py`; counted around the store's pool, BEGIN "
            "and COMMIT included). Before issue 24: 14 a session (two reads of the session, one "
            "of its token, one of its key's waits, one of its queue, a transaction of eight "
            "statements to use the token, and the save).",
            "",
            "| sessions | statements | per session | target | met | total | per session |",
            "|---|---|---|---|---|---|---|",
        ]
        for b in counted:
            e = b.extra
            target = e["target_statements_per_session"]
            met = "yes" if e["statements_per_session"] <= target else "**no**"
            lines.append(
                f"| {e['sessions']:,} | {e['statements']:,} | {e['statements_per_session']:.2f} "
                f"| ≤ {target} | {met} | {human(b.median)} | {human(b.per_unit)} |"
            )
    if herds:
        lines += [
            "",
            "Workers (threads, each with a Runtime and a store of its own) polling one bulk "
            "adapter that answers every waiting session at once (`benchmarks/test_poll_workers.py`"
            "): token attempts (`consume_token` calls and tokens given to `consume_tokens`) and "
            "store calls (one statement each on PostgreSQL, one transaction on SQLite) per "
            "resume. Before issue 24, every worker tried every ready token: 1.00 / 1.58 / 2.67 "
            "/ 4.36 attempts and 5.0 / 8.4 / 14.9 / 27.1 statements per resume at 1 / 2 / 4 / 8 "
            "workers on PostgreSQL (1.00 / 1.03 / 1.14 / 1.43 and 5.0 / 7.1 / 11.3 / 19.9 on "
            "SQLite).",
            "",
            "| store | sessions | workers | token attempts per resume | statements per resume "
            "| met (at most workers) |",
            "|---|---|---|---|---|---|",
        ]
        for b in sorted(herds, key=lambda b: b.variant or ""):
            e = b.extra
            attempts, statements = e["attempts_per_resume"], e["statements_per_resume"]
            met = (
                "yes"
                if attempts[-1] <= e["target_attempts_per_resume"]
                and statements[-1] <= e["target_statements_per_resume"]
                else "**no**"
            )
            lines.append(
                f"| {b.variant} | {e['sessions']:,} | {' / '.join(map(str, e['workers']))} "
                f"| {' / '.join(f'{a:.2f}' for a in attempts)} "
                f"| {' / '.join(f'{s:.2f}' for s in statements)} "
                f"| {met} (targets {e['target_attempts_per_resume']:.2f} and "
                f"≤ {e['target_statements_per_resume']:g}) |"
            )
    return [*lines, ""]


#: The benchmarks of benchmarks/test_delivery_costs.py and test_view_reads.py, by test name: a
#: line each, what it measures, and the extra_info keys it shows.
_DELIVERY_COSTS = (
    (
        "test_trickling_results_to_one_wide_session",
        "trickle N results into one session, one `deliver` each: CPU seconds",
        ("branches", "cpu_seconds", "ratio", "target_ratio"),
    ),
    (
        "test_a_resume_of_one_branch_costs_the_same_at_any_width",
        "deliver to one branch of N waiting",
        ("branches", "bytes_read", "bytes_written", "sqlite_wal_bytes", "ratios", "target_ratio"),
    ),
    (
        "test_queued_messages_are_taken_at_a_flat_cost",
        "queued messages taken by Waits",
        ("messages", "cpu_us_per_message", "ratio"),
    ),
    (
        "test_sqlite_wal_bytes_per_delivery",
        "SQLite WAL per delivery",
        ("wal_bytes_per_delivery", "ratio_to_floor", "target_bytes"),
    ),
    (
        "test_sqlite_bytes_written_by_a_wide_start",
        "SQLite bytes written by a wide start",
        ("branches", "data_bytes", "bytes_written", "ratio", "target_ratio"),
    ),
)


def delivery_costs(benches: list[Bench]) -> list[str]:
    """Issue 24's costs of delivery (benchmarks/test_delivery_costs.py): each as its figures."""
    found = {b.name: b for b in benches}
    lines = []
    for name, title, keys in _DELIVERY_COSTS:
        b = found.get(name)
        if b is None:
            continue
        shown = "; ".join(f"{k}: {b.extra[k]}" for k in keys if k in b.extra)
        lines.append(f"| {title} | {shown} |")
    if not lines:
        return []
    return [
        "### Delivery costs",
        "",
        "What moves, not what waits (`benchmarks/test_delivery_costs.py`, one run; see "
        "docs/batch.md).",
        "",
        "| measure | figures |",
        "|---|---|",
        *lines,
        "",
    ]


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
        "rebuild) is in the details (`app kept in memory`); the goals take Burr's faster "
        "shape. The paused application starts at item k from the loop's state there.",
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


def write(bench_json: Path, peers_json: Path | None, out: Path) -> None:
    benches, data = load(bench_json)
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
        f"- Run: {data.get('datetime', '?')} (report written "
        f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')})",
        f"- Machine: {cpu_model(data)}, {os.cpu_count()} logical cores, "
        f"{platform.system()} {platform.release()}; {load_average(benches)}",
        f"- Python {machine.get('python_version', platform.python_version())} "
        f"({machine.get('python_implementation', platform.python_implementation())}), "
        f"SQLite {sqlite3.sqlite_version}",
        "- Versions: " + ", ".join(f"{d} {v}" for d, v in versions(data, recorded).items()),
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
        "## Results",
        "",
        "Medians. Ratios are tarry ÷ the other (below 1: tarry is faster or smaller); *best "
        "peer*: the peer with the lowest number on the row.",
        "",
        *main_table(benches, status),
        "",
        *goals_table(benches, ks(benches)),
        "",
        *pg_workers(benches),
        *inflight(benches),
        *batch_waits(benches),
        *delivery_costs(benches),
        "## How each workload is measured",
        "",
        "- **Step overhead**: tarry `Flow` of no-op steps and a `ForEach` over the items "
        "(body: one no-op step); PocketFlow `Node`s chained with `>>` and a `BatchFlow` (a "
        "sub-flow per item; its `BatchNode` is in the details); LangGraph `StateGraph` of "
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
        "in the details (tarry only).",
        "- **Fresh process**: `python -c` that imports the library, opens the SQLite file, "
        "resumes one session paused at k = 10 up to its next pause, and exits; one prepared "
        "session per process. Floor: `python -c pass`. Every spawned process may use the "
        "bytecode cache, as a library installed by pip does (a shell that sets "
        "PYTHONDONTWRITEBYTECODE would time tarry compiling its source while the peers, "
        "installed from wheels, load theirs).",
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
        "checkpoint, metadata and write blobs in its tables).",
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
    if len(args) != 3:
        sys.exit("usage: report.py BENCH.json PEERS.json OUT.md")
    write(Path(args[0]), Path(args[1]), Path(args[2]))
    print(f"report.py: wrote {args[2]}", file=sys.stderr)
