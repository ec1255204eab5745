"""The counts of issue 28 (test_counts.py, counts.py) as markdown: instructions per unit of
work, bytes per pause, RSS per paused session, and the CPU ratios taken in turns with how far
two measurements of them agree. Each system is at its fastest shape, the shape named."""

from __future__ import annotations

from typing import Any

import attrs
from report_collect import PEERS, Bench

#: KB in the goals and the tables: 1,024 bytes.
KB = 1024


@attrs.frozen
class Counted:
    """One line of the counts table: a workload, the figure read from each benchmark."""

    title: str
    workload: str
    key: str
    unit: str
    tarry_variant: str | None = None  # which of tarry's shapes the line shows
    scale: float = 1.0  # the figure is divided by it (bytes -> KB)
    fmt: str = "{:,.0f}"


def figure(
    benches: list[Bench], workload: str, system: str, key: str, variant: str | None = None
) -> tuple[float, str | None] | None:
    """(the figure, the shape it was taken from) of `system`: for tarry the shape asked for,
    for anyone else its smallest figure over all its shapes (its fastest or leanest)."""
    found = [
        b
        for b in benches
        if b.workload == workload
        and b.system == system
        and isinstance(b.extra.get(key), int | float)
        and (system != "tarry" or b.variant == variant)
    ]
    best = min(found, key=lambda b: b.extra[key], default=None)
    return None if best is None else (float(best.extra[key]), best.variant)


COUNTED = (
    Counted("chain step, in memory", "instr_chain", "instructions", "instructions"),
    Counted("ForEach item, in memory", "instr_foreach", "instructions", "instructions"),
    Counted(
        "pause → resume in memory, resumed by another Runtime (cold)",
        "instr_pause_memory",
        "instructions",
        "instructions",
        "cold",
    ),
    Counted(
        "pause → resume in memory, resumed by the Runtime that paused it (warm)",
        "instr_pause_memory",
        "instructions",
        "instructions",
        "warm",
    ),
    Counted("import, added to `python -c pass`", "instr_import", "instructions", "instructions"),
    Counted(
        "import, the whole `python -c` process",
        "instr_import",
        "process_instructions",
        "instructions",
    ),
    Counted(
        "a first program (imports and a one-step run), added to `python -c pass`",
        "instr_first_run",
        "instructions",
        "instructions",
    ),
    Counted(
        "disk bytes written per pause, SQLite (write() bytes: WAL and checkpoints)",
        "disk_per_pause_sqlite",
        "disk_bytes_per_pause",
        "KB",
        scale=KB,
        fmt="{:,.1f}",
    ),
    Counted(
        "payload bytes per pause, SQLite (what the store or saver hands to SQLite)",
        "disk_per_pause_sqlite",
        "payload_bytes_per_pause",
        "KB",
        scale=KB,
        fmt="{:,.2f}",
    ),
    Counted(
        "RSS per paused session, in memory",
        "rss_per_session",
        "rss_bytes_per_session",
        "KB",
        scale=KB,
        fmt="{:,.2f}",
    ),
)


def counts_table(benches: list[Bench]) -> list[str]:
    if not any(b.workload.startswith(("instr_", "disk_per_", "rss_per_")) for b in benches):
        return []
    systems = ["tarry", *PEERS, "floor"]
    names = {"tarry": "tarry", "floor": "floor", **PEERS}
    lines = [
        "## Counts: instructions, bytes, RSS",
        "",
        "Counted, not timed, so the load of the machine does not move them "
        "(`benchmarks/counts.py`; `test_counts.py` puts them in this run). Instructions: "
        "callgrind's count of one unit of work (a step, an item, a round trip: 4 repetitions "
        "minus 1, over 3 × the units, start-up cancelled out), the cyclic collector off in "
        "every system alike. Disk bytes: the process's `write()` bytes (`wchar` of "
        "/proc/self/io) over 100 pauses, beside the payload the store hands to SQLite. RSS: "
        "VmRSS growth per session held paused, after `gc.collect()`. Every system runs from a "
        "regular install: tarry from its wheel (`.benchmarks/venvs/tarry`), the peers from "
        "PyPI wheels. A peer with several shapes is shown at its fastest or leanest, named.",
        "",
        "| workload | unit | " + " | ".join(names[s] for s in systems) + " | tarry ÷ best peer |",
        "|---|---|" + "---|" * len(systems) + "---|",
    ]
    for line in COUNTED:
        cells = [line.title, line.unit]
        seen: dict[str, float] = {}
        for system in systems:
            got = figure(benches, line.workload, system, line.key, line.tarry_variant)
            if got is None:
                cells.append("—")
                continue
            value, shape = got
            seen[system] = value
            shown = line.fmt.format(value / line.scale)
            if system != "tarry" and shape:
                shown += f" ({shape})"
            cells.append(shown)
        others = {s: v for s, v in seen.items() if s not in ("tarry", "floor")}
        best = min(others, key=lambda s: others[s], default=None)
        if "tarry" in seen and best is not None and others[best]:
            cells.append(f"{seen['tarry'] / others[best]:,.2f} ({names[best]})")
        else:
            cells.append("—")
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, "", *turns_table(benches)]


def turns_table(benches: list[Bench]) -> list[str]:
    """The CPU ratios taken in turns, measured twice (each in a process of its own)."""
    found = [b for b in benches if b.workload.startswith("turns_") and "ratios" in b.extra]
    if not found:
        return []
    lines = [
        "### CPU ratios in turns, measured twice",
        "",
        "tarry ÷ each other system, CPU time (`time.process_time`): in each round every "
        "system runs once, one right after the other, in an order rotated every round; the "
        "ratio is the median of the per-round ratios (`benchmarks/turns.py`), so a busy moment "
        "of the machine weighs on both sides of a ratio alike. Each was measured twice, in two "
        "processes one after the other; *spread* is how far the second is from the first.",
        "",
        "| workload | against | rounds | first | second | spread |",
        "|---|---|---|---|---|---|",
    ]
    for b in sorted(found, key=lambda b: b.workload):
        again: dict[str, Any] = b.extra.get("again") or {}
        for other, first in b.extra["ratios"].items():
            second = again.get(other)
            spread = "—" if second is None else f"{abs(second - first) / first:.1%}"
            lines.append(
                f"| {b.workload.removeprefix('turns_')} of {b.extra.get('units', '?'):,} "
                f"| {other} | {b.extra.get('rounds', '?')} | {first:.2f} "
                f"| {'—' if second is None else f'{second:.2f}'} | {spread} |"
            )
    return [*lines, ""]


def agreement(benches: list[Bench], previous: list[Bench], commits: tuple[str, str]) -> list[str]:
    """Each count of this run beside the same count of the previous run (make bench keeps it):
    how far two runs agree. Only meaningful on the same code: the commits are named."""
    keys = ("instructions", "process_instructions", "disk_bytes_per_pause")
    keys += ("payload_bytes_per_pause", "rss_bytes_per_session")

    def counted(bs: list[Bench]) -> dict[tuple[str, str, str, str], float]:
        found = {}
        for b in bs:
            for key in keys:
                if isinstance(b.extra.get(key), int | float):
                    found[(b.workload, b.system, b.variant or "", key)] = float(b.extra[key])
            ratios = b.extra.get("ratios")
            if isinstance(ratios, dict):  # the turns' ratios (other benchmarks keep lists)
                for other, value in ratios.items():
                    found[(b.workload, b.system, other, "CPU ratio in turns")] = float(value)
        return found

    now, before = counted(benches), counted(previous)
    shared = sorted(set(now) & set(before))
    if not shared:
        return []
    same = "the same commit" if commits[0] == commits[1] else "**different commits**"
    lines = [
        "### Agreement with the previous run",
        "",
        f"Every count of this run beside the previous `make bench` on this machine (commits "
        f"{commits[1]} then {commits[0]}: {same}). *Spread*: |this − previous| ÷ previous.",
        "",
        "| workload | system | shape | figure | previous | this run | spread |",
        "|---|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for workload, system, shape, key in shared:
        a, b = before[(workload, system, shape, key)], now[(workload, system, shape, key)]
        spread = abs(b - a) / a if a else 0.0
        worst = max(worst, spread)
        lines.append(
            f"| {workload} | {system} | {shape} | {key} | {a:,.6g} | {b:,.6g} | {spread:.1%} |"
        )
    return [*lines, "", f"Largest spread: {worst:.1%}.", ""]
