"""The delivery campaign: the stateful property tests of keyed delivery and of the child road
(which rides on it) at campaign size.

    .venv/bin/python tests/proof/delivery.py --json OUT.json [--seed N] [--full]

Runs tests/drivers/rounds/test_delivery_machine.py (a hypothesis RuleBasedStateMachine that
interleaves deliver, deliver_many, broadcast, resume, resume_many, cancel, abort, prune, worker
rounds and crashes, checking every promise of "Delivery you can trust" after each rule) on every
store it can reach, and tests/drivers/rounds/test_children_machine.py (parents and their child
sessions under worker rounds, polls, deliveries, cancels, aborts, crashes and recovery), with
TARRY_PROOF_SCALE=25 under `--full` (4 quick) — each scale unit is as
many state machines again, each up to that many times longer (at most 4×). Writes the JSON the
other campaigns write, which tests/proof/report.py turns into docs/guarantees.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROUNDS = HERE.parent / "drivers" / "rounds"
TESTS = [ROUNDS / "test_delivery_machine.py", ROUNDS / "test_children_machine.py"]


def campaign(seed: int, scale: float) -> dict[str, Any]:
    env = {**os.environ, "TARRY_PROOF_SCALE": str(scale)}
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *map(str, TESTS),
            "-p",
            "no:cacheprovider",
            f"--hypothesis-seed={seed}",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=HERE.parent.parent,
    )
    seconds = time.monotonic() - started
    # (pytest's own -q, from pyproject.toml, keeps the summary line; a second -q would drop it)
    summary = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    tail = summary[-1] if summary else ""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)", tail)}
    failures = counts.get("failed", 0) + counts.get("error", 0)
    examples = [line.strip() for line in done.stdout.splitlines() if "AssertionError" in line][:5]
    return {
        "name": "delivery",
        "trials": counts.get("passed", 0) + failures,
        "failures": failures if done.returncode in (0, 1) else max(failures, 1),
        "seconds": round(seconds, 1),
        "seed": seed,
        "figures": {
            "machine runs (delivery, children; memory, SQLite, PostgreSQL when reachable)": counts.get(
                "passed", 0
            )
            + failures,
            "stores skipped": counts.get("skipped", 0),
            "scale (TARRY_PROOF_SCALE)": scale,
        },
        "failure_examples": examples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args(argv)
    result = campaign(args.seed, 25.0 if args.full else 4.0)
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("trials", "failures", "seconds")}))
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
