"""Instructions a fresh process spends importing tarry, against PocketFlow, by callgrind.

    .venv/bin/python benchmarks/import_instructions.py            (needs valgrind, pocketflow)

Each workload is one whole `python -c CODE` process under `valgrind --tool=callgrind`: the
interpreter's start (`pass`, the floor) included, as a user's process pays it. tarry is measured
from a regular install (its wheel unpacked on PYTHONPATH), not from the editable one, whose
finder adds a cost no user pays. The hash seed is fixed, and each count is the median of three
processes. Instruction counts do not care
how busy the machine is; wall times here would.

Workloads: `import` (the module alone), `names` (what a first program reads: tarry's Flow,
Runtime and step, which load the engine and the drivers), `first_run` (a one-step flow run in
memory, PocketFlow's one-node Flow).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKLOADS = {
    "floor": {"pass": "pass"},
    "import": {"tarry": "import tarry", "pocketflow": "import pocketflow"},
    "names": {"tarry": "from tarry import Flow, Runtime, step"},
    "first_run": {
        "tarry": (
            "import tarry\n"
            "def hello(ctx):\n"
            "    return 1\n"
            "assert tarry.Runtime().run(tarry.Flow('f', [hello])).ok\n"
        ),
        "pocketflow": (
            "import pocketflow\n"
            "class Hello(pocketflow.Node):\n"
            "    def exec(self, prep):\n"
            "        return 1\n"
            "pocketflow.Flow(start=Hello()).run({})\n"
        ),
    },
}


def install_wheel(into: Path) -> Path:
    """tarry's wheel, built from this tree and unpacked under `into` (a regular install's
    layout); returns the folder to put on PYTHONPATH."""
    out = into / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation"]
        + ["-q", "-w", str(out)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("tarry-*.whl")
    site = into / "site"
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(site)
    return site


def environment(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE",)}
    env.update(PYTHONPATH=str(site), PYTHONHASHSEED="0")
    return env


def count(code: str, env: dict[str, str], repeat: int = 3) -> int:
    """Instructions of one whole `python -c code` process: the median of `repeat` processes
    (a first run starts a thread or two, and objects' addresses differ from process to process:
    single counts of one workload spread by a few percent, now and then by a fifth)."""
    subprocess.run([sys.executable, "-c", code], env=env, check=True)  # bytecode cache written
    return statistics.median(_count(code, env) for _ in range(repeat))


def _count(code: str, env: dict[str, str]) -> int:
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        + [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    assert found, done.stderr
    return int(found.group(1))


def measure(site: Path, systems: tuple[str, ...] = ("pass", "tarry", "pocketflow")) -> dict:
    """{workload: {system: instructions}} for the systems named."""
    env = environment(site)
    where = [sys.executable, "-c", "import tarry; print(tarry.__file__)"]
    found = subprocess.run(where, env=env, capture_output=True, text=True, check=True).stdout
    assert found.startswith(str(site)), f"tarry came from {found!r}, not the wheel in {site}"
    return {
        workload: {s: count(code, env) for s, code in codes.items() if s in systems}
        for workload, codes in WORKLOADS.items()
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        site = install_wheel(Path(tmp))
        for workload, counts in measure(site).items():
            for system, n in counts.items():
                print(f"{workload:10} {system:11} {n / 1e6:8.1f} M instructions")


if __name__ == "__main__":
    main()
