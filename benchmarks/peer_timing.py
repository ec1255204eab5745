"""How the peers that run in a virtualenv of their own are measured: stdlib only.

A peer whose dependencies clash with tarry's or another peer's (install_peers.py gives it
`.benchmarks/venvs/<peer>`) is measured by its script, bench_<peer>.py, run by that venv's
Python in a subprocess (test_peers.py). The script reads its sizes as JSON from argv[1], times
each workload here — the median of `rounds` timed calls after `warmup` untimed ones, as
pytest-benchmark's `pedantic` does for tarry — and prints one JSON document on stdout:

    {"version": "...", "results": [{"workload", "variant", "per", "median", "min",
     "rounds", "extra"}...], "unsupported": {"workload": "why"}}

test_peers.py adds each result to the run's JSON beside tarry's, so report.py compares them
within one run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

#: Spawned processes may use the bytecode cache, as for tarry (test_fresh_process.py).
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


class Results:
    """What one script measured, printed as JSON by `emit`."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.results: list[dict[str, Any]] = []
        self.unsupported: dict[str, str] = {}

    def timed(
        self,
        workload: str,
        call: Callable[[], Any],
        *,
        rounds: int,
        warmup: int = 0,
        per: int = 1,
        variant: str | None = None,
        setup: Callable[[], Any] | None = None,
        **extra: Any,
    ) -> list[float]:
        """Time `call` `rounds` times (after `warmup` untimed calls); `setup` runs untimed
        before each call."""
        for _ in range(warmup):
            if setup is not None:
                setup()
            call()
        spent = []
        for _ in range(rounds):
            if setup is not None:
                setup()
            started = time.perf_counter()
            call()
            spent.append(time.perf_counter() - started)
        self.add(workload, spent, per=per, variant=variant, **extra)
        return spent

    def add(
        self,
        workload: str,
        spent: list[float],
        *,
        per: int = 1,
        variant: str | None = None,
        **extra: Any,
    ) -> None:
        self.results.append(
            {
                "workload": workload,
                "variant": variant,
                "per": per,
                "median": statistics.median(spent),
                "min": min(spent),
                "rounds": len(spent),
                "extra": extra,
            }
        )

    def not_supported(self, workload: str, why: str) -> None:
        self.unsupported[workload] = why

    def emit(self) -> None:
        doc = {"version": self.version, "results": self.results, "unsupported": self.unsupported}
        print(json.dumps(doc))


def sizes() -> dict[str, Any]:
    return json.loads(sys.argv[1])


def spawn(code: str, *args: str, cwd: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env=ENV,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])


def import_us(statement: str, cwd: str) -> int:
    """Microseconds of the top-level imports `statement` adds to `python -c pass`, under
    `-X importtime` (the same count as test_fresh_process.py makes for tarry)."""

    def top_level(code: str) -> dict[str, int]:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
            env=ENV,
        )
        found = {}
        for line in done.stderr.splitlines()[1:]:
            if line.startswith("import time:"):
                _self, cumulative, name = line[len("import time:") :].split("|")
                if not name[1:].startswith(" "):
                    found[name.strip()] = int(cumulative)
        return found

    startup = top_level("pass")
    return sum(us for name, us in top_level(statement).items() if name not in startup)


def measure_import(results: Results, statement: str, s: dict[str, Any]) -> None:
    """The `import` workload: wall time of `python -c statement` (timed) and its
    -X importtime share (extra), as test_import does for tarry."""
    cwd = s["tmp"]
    spawn(statement, cwd=cwd)  # the bytecode cache, once
    runs = [import_us(statement, cwd) for _ in range(5 if s["full"] else 1)]
    results.timed(
        "import",
        lambda: spawn(statement, cwd=cwd),
        rounds=s["fresh_rounds"],
        importtime_us=statistics.median(runs),
        statement=statement,
    )
