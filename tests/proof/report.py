"""Write the figures of a `make proof` run into docs/guarantees.md.

    .venv/bin/python tests/proof/report.py RESULTS_DIR docs/guarantees.md

RESULTS_DIR holds one JSON per campaign (crash, fuzz, stress, limits, poison, delivery), as each campaign's
`--json` writes it. The page's prose stays as written; only the part between the two
`<!-- proof:... -->` markers is replaced. A campaign whose JSON is missing is reported as not
run, never left out. Exit code 1 when any campaign failed or is missing.
"""

from __future__ import annotations

import json
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CAMPAIGNS = {
    "crash": "Crash campaign (SIGKILL at random points, then recovery)",
    "fuzz": "Fuzzing (snapshot decoder, tokens, resume values, HTTP bodies)",
    "stress": "Concurrency stress (threads and processes on the same sessions)",
    "limits": "Bounds (value and snapshot sizes, worker memory, store size)",
    "poison": "Poison (5% bad sessions among due ones; four workers)",
    "delivery": "Delivery (stateful: deliver, broadcast, resumes, cancels, prunes, rounds, crashes)",
}
START, END = "<!-- proof:start -->", "<!-- proof:end -->"


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def render(results: dict[str, dict[str, Any] | None], when: str, machine: str) -> str:
    lines = [
        START,
        f"Figures of the last `make proof` run ({when}, {machine}).",
        "",
        "| campaign | trials | failures | seconds | seed |",
        "|---|---|---|---|---|",
    ]
    for name, title in CAMPAIGNS.items():
        result = results.get(name)
        if result is None:
            lines.append(f"| {title} | not run | — | — | — |")
            continue
        lines.append(
            f"| {title} | {_number(result['trials'])} | {_number(result['failures'])} | "
            f"{_number(result['seconds'])} | {result['seed']} |"
        )
    for name, title in CAMPAIGNS.items():
        result = results.get(name)
        if result is None:
            continue
        lines += ["", f"**{title}**", ""]
        lines += [f"- {key}: {_number(value)}" for key, value in result["figures"].items()]
        for example in result.get("failure_examples") or []:
            lines.append(f"- FAILURE: {example}")
    lines.append(END)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    folder, page = Path(argv[0]), Path(argv[1])
    results: dict[str, dict[str, Any] | None] = {}
    for name in CAMPAIGNS:
        path = folder / f"{name}.json"
        results[name] = json.loads(path.read_text()) if path.exists() else None
    when = datetime.now(UTC).strftime("%Y-%m-%d")
    machine = f"{platform.machine()}, Python {platform.python_version()}"
    block = render(results, when, machine)
    text = page.read_text()
    if START not in text or END not in text:
        msg = f"{page} has no {START} ... {END} block to fill"
        raise SystemExit(msg)
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    page.write_text(head + block + tail)
    bad = [n for n, r in results.items() if r is None or r["failures"]]
    print(f"wrote {page}; " + (f"failed or missing: {', '.join(bad)}" if bad else "all passed"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
