"""Workload 4: a fresh process that imports the library, resumes a paused session from SQLite
and exits (the floor: `python -c pass`); and the import time of each library alone.

Each round spawns one process and resumes one session prepared beforehand (tarry's tokens are
single-use; LangGraph gets one thread per round too). The session is the loop of
test_pause_resume.py paused at k = 10; the process resumes it up to the next pause.
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
from pathlib import Path

import bench_tarry
import pytest
from bench_support import HERE, Sizes, label
from tarry import Runtime
from tarry.snapshots import SQLiteStore

#: tarry built into a wheel and installed with the peers of the bench extra (install_peers.py):
#: `make bench` spawns every system, tarry included, from this regular install, as the peers'
#: venvs are; an editable install would add its finder's imports to tarry's every start.
#: `make test` (smoke sizes) spawns this interpreter: the wheel may be older than the code.
WHEEL_PYTHON = HERE.parent / ".benchmarks" / "venvs" / "tarry" / "bin" / "python"
PYTHON = sys.executable
K = 10
#: The environment of every spawned process: the bytecode cache allowed, as it is for a library
#: installed by pip (which compiles .pyc files at install). A shell that sets
#: PYTHONDONTWRITEBYTECODE would otherwise time tarry compiling its own source at every start
#: while the peers, installed from wheels, load their cached bytecode.
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}

TARRY_RESUME = """
import sys
sys.path.insert(0, {here!r})
import tarry, bench_tarry
rt = tarry.Runtime(store={url!r}, flows=[bench_tarry.paused_loop({n}, {k})])
assert rt.resume(sys.argv[1], True).paused
"""

LANGGRAPH_RESUME = """
import sys
sys.path.insert(0, {here!r})
import bench_langgraph as lg
from langgraph.types import Command
graph = lg.loop({n}, {k}, lg.sqlite_saver({path!r}))
assert "__interrupt__" in graph.invoke(Command(resume=True), lg.config(sys.argv[1]), durability="exit")
"""

IMPORTS = {
    "tarry": "import tarry",
    # What the workloads here need of LangGraph: the graph, interrupts, the SQLite saver.
    "langgraph": ("import langgraph.graph, langgraph.types, langgraph.checkpoint.sqlite"),
    "pocketflow": "import pocketflow",
}


@pytest.fixture(autouse=True)
def _python(sizes: Sizes, monkeypatch: pytest.MonkeyPatch) -> None:
    if sizes.full:
        assert WHEEL_PYTHON.exists(), "run benchmarks/install_peers.py first (make bench does)"
        monkeypatch.setattr(sys.modules[__name__], "PYTHON", str(WHEEL_PYTHON))


def _install() -> str:
    return "wheel" if str(WHEEL_PYTHON) == PYTHON else "editable"


def _spawn(code: str, *args: str, cwd: Path) -> None:
    done = subprocess.run(
        [PYTHON, "-c", code, *args], cwd=cwd, capture_output=True, text=True, check=False, env=ENV
    )
    assert done.returncode == 0, done.stderr


def test_floor_python_pass(benchmark, sizes: Sizes, tmp_path: Path) -> None:
    label(benchmark, "fresh_resume", "floor", variant="python -c pass", install=_install())
    benchmark.pedantic(_spawn, ("pass",), {"cwd": tmp_path}, rounds=sizes.fresh_rounds)


def test_tarry_fresh_resume(benchmark, sizes: Sizes, tmp_path: Path) -> None:
    label(benchmark, "fresh_resume", "tarry", k=K, install=_install())
    db = tmp_path / "tarry.db"
    rt = Runtime(store=SQLiteStore(db))
    flow = bench_tarry.paused_loop(sizes.loop, K)
    tokens = iter([rt.run(flow).token for _ in range(sizes.fresh_rounds)])
    code = TARRY_RESUME.format(here=str(HERE), url=f"sqlite:///{db}", n=sizes.loop, k=K)

    def setup():
        return (code, next(tokens)), {"cwd": tmp_path}

    _spawn(IMPORTS["tarry"] + ", bench_tarry", cwd=HERE)  # writes the bytecode cache once
    benchmark.pedantic(_spawn, setup=setup, rounds=sizes.fresh_rounds)


def test_langgraph_fresh_resume(benchmark, sizes: Sizes, tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    pytest.importorskip("langgraph.checkpoint.sqlite")
    import bench_langgraph as lg

    label(benchmark, "fresh_resume", "langgraph", k=K, install=_install())
    db = str(tmp_path / "lg.db")
    graph = lg.loop(sizes.loop, K, lg.sqlite_saver(db))
    for i in range(sizes.fresh_rounds):
        graph.invoke({"i": 0, "results": []}, lg.config(f"t{i}"), durability="exit")
    threads = (f"t{i}" for i in itertools.count())
    code = LANGGRAPH_RESUME.format(here=str(HERE), path=db, n=sizes.loop, k=K)

    def setup():
        return (code, next(threads)), {"cwd": tmp_path}

    benchmark.pedantic(_spawn, setup=setup, rounds=sizes.fresh_rounds)


def _top_level_imports(code: str, cwd: Path) -> dict[str, int]:
    """Cumulative microseconds of each top-level import under `python -X importtime`."""
    done = subprocess.run(
        [PYTHON, "-X", "importtime", "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        env=ENV,
    )
    found = {}
    for line in done.stderr.splitlines()[1:]:  # [0]: the header
        if line.startswith("import time:"):
            _self, cumulative, name = line[len("import time:") :].split("|")
            if not name[1:].startswith(" "):  # nested imports are indented
                found[name.strip()] = int(cumulative)
    return found


def _import_us(statement: str, cwd: Path) -> int:
    """Microseconds of the imports `statement` adds to those of `python -c pass` (which has
    the interpreter's own, and an editable install's finder where there is one)."""
    startup = _top_level_imports("pass", cwd)
    added = _top_level_imports(statement, cwd)
    return sum(us for name, us in added.items() if name not in startup)


@pytest.mark.parametrize("system", list(IMPORTS))
def test_import(benchmark, sizes: Sizes, tmp_path: Path, system: str) -> None:
    """Wall time of `python -c "import ..."` (timed) and its -X importtime share (extra)."""
    statement = IMPORTS[system]
    if system != "tarry":
        for module in statement.removeprefix("import ").split(", "):
            pytest.importorskip(module)
    _spawn(statement, cwd=tmp_path)  # writes the bytecode cache once, as an install would
    benchmark.pedantic(_spawn, (statement,), {"cwd": tmp_path}, rounds=sizes.fresh_rounds)
    runs = [_import_us(statement, tmp_path) for _ in range(5 if sizes.full else 1)]
    label(benchmark, "import", system, importtime_us=statistics.median(runs), install=_install())
