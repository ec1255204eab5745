"""Typing: `mypy --strict` accepts the public modules and typed user code as users write it
(the README's quick start, async use), and refuses misuse, so the types are not `Any`.

mypy reads the package as it is installed (`tarry`, `tarry.engine`, ...): the folders are
mapped in pyproject.toml, so a tree of links under a temporary folder lays them out that way.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TYPED = Path(__file__).resolve().parent / "typed"

#: The modules of what `tarry.__all__` and `tarry.snapshots.__all__` name (and the stores):
#: `mypy --strict` must be clean on each of them.
PUBLIC_MODULES = [
    "tarry",
    "tarry.__main__",
    "tarry.batches",
    "tarry.drivers.batches.adapter",
    "tarry.drivers.batches.providers",
    "tarry.drivers.batches.round",
    "tarry.engine.elements.batch_request",
    "tarry.snapshots.batch_records",
    "tarry.drivers",
    "tarry.drivers.adapters",
    "tarry.drivers.clock",
    "tarry.drivers.reading.jsonable",
    "tarry.drivers.drive.outcome",
    "tarry.drivers.runtime",
    "tarry.drivers.reading.stats",
    "tarry.drivers.reading.views",
    "tarry.engine",
    "tarry.engine.containers",
    "tarry.engine.containers.branch",
    "tarry.engine.containers.foreach",
    "tarry.engine.containers.graph",
    "tarry.engine.containers.loop",
    "tarry.engine.containers.parallel",
    "tarry.engine.context",
    "tarry.engine.elements.element",
    "tarry.engine.errors",
    "tarry.engine.state.events",
    "tarry.engine.elements.flow",
    "tarry.engine.retry",
    "tarry.engine.state.records",
    "tarry.engine.elements.step",
    "tarry.engine.elements.waits",
    "tarry.snapshots",
    "tarry.snapshots.codec.pack",
    "tarry.snapshots.memory.store",
    "tarry.snapshots.postgres.store",
    "tarry.snapshots.records",
    "tarry.snapshots.sqlite.store",
    "tarry.snapshots.store",
]


@pytest.fixture(scope="module")
def mypy(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., list[str]]:
    """Run `mypy --strict` over the installed layout; returns its output lines."""
    pytest.importorskip("mypy")
    tree = tmp_path_factory.mktemp("typed")
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    (tree / "tarry").mkdir()
    for entry in (ROOT / dirs["tarry"]).iterdir():
        (tree / "tarry" / entry.name).symlink_to(entry)
    for package, folder in dirs.items():
        if package.count(".") == 1:  # tarry.engine -> engine/ (its subpackages come along)
            (tree / "tarry" / package.split(".")[1]).symlink_to(ROOT / folder)
    cache = tree / "cache"

    def run(*targets: str) -> list[str]:
        command = [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            "--no-error-summary",
            "--show-error-codes",
            *targets,
        ]
        env = {"MYPYPATH": str(tree), "PATH": "/usr/bin:/bin"}
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        assert done.returncode in (0, 1), done.stderr or done.stdout
        return [line for line in done.stdout.splitlines() if ": error:" in line]

    return run


def test_the_public_modules_are_strict_clean(mypy: Callable[..., list[str]]) -> None:
    targets = [arg for name in PUBLIC_MODULES for arg in ("-m", name)]
    # Modules these import are read, but only the public ones are held to --strict here.
    assert mypy("--follow-imports=silent", *targets) == []


@pytest.mark.parametrize("snippet", ["quickstart.py", "async_usage.py"])
def test_typed_user_code_checks(mypy: Callable[..., list[str]], snippet: str) -> None:
    assert mypy("--follow-imports=silent", str(TYPED / snippet)) == []


def test_misuse_is_refused(mypy: Callable[..., list[str]]) -> None:
    errors = mypy("--follow-imports=silent", str(TYPED / "misuse.py"))
    lines = (TYPED / "misuse.py").read_text().splitlines()
    refused = {i for i, line in enumerate(lines, 1) if line.endswith("# refused")}
    found = {int(m.group(1)) for e in errors if (m := re.search(r"misuse\.py:(\d+):", e))}
    assert found == refused, errors
