"""Rendering the run as markdown: the main table (every system in a column) and the table of
every benchmark."""

from __future__ import annotations

from typing import Any

from report_collect import PEERS, Bench, pick, unsupported
from report_rows import Row, rows


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
                taken = pick(benches, row.workload, p) if row.workload else None
                shape = f" ({taken.variant})" if taken is not None and taken.variant else ""
                if values[p] is not None:
                    cells.append(cell(row, values[p]) + shape)
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
