"""`tarry children ID`: the sessions a session started with Child elements. A child started
by `tarry run` is run by `tarry worker`, which imports the parent's module (and so registers
the child's flow) from the `MODULE:FLOW` the child recorded."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

JOBS = """
from tarry import Child, Flow, ForEach


def double(ctx):
    with open("ran.txt", "a") as f:
        f.write(f"{ctx.input}\\n")
    return ctx.input * 2


inner = Flow("inner", [double])
parent = Flow("parent", [ForEach("items", [1, 2, 3], Child("c", inner, input=lambda ctx: ctx.item))])
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "jobs.py").write_text(textwrap.dedent(JOBS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("TARRY_STORE", raising=False)
    sys.modules.pop("jobs", None)
    yield tmp_path
    sys.modules.pop("jobs", None)


def tarry(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    from tarry.drivers.cli import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().out


def test_children_listed_and_run_by_a_worker(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = tarry(capsys, "run", "jobs:parent", "--session-id", "p")
    assert code == 3  # paused: it waits on its first child
    code, out = tarry(capsys, "children", "p", "--json")
    assert code == 0
    assert json.loads(out) == [{"session_id": "p.items.0.c", "status": "paused"}]
    sys.modules.pop("jobs", None)  # the worker imports the module itself
    for _ in range(3):  # each round runs the child that is due, whose end moves the parent on
        code, _ = tarry(capsys, "worker", "--once")
        assert code == 0
    code, out = tarry(capsys, "children", "p")
    assert code == 0
    assert out.split() == [
        "completed",
        "p.items.0.c",
        "completed",
        "p.items.1.c",
        "completed",
        "p.items.2.c",
    ]
    code, out = tarry(capsys, "show", "p.items.1.c")
    assert "child of p" in out
    assert (here / "ran.txt").read_text().split() == ["1", "2", "3"]
    code, out = tarry(capsys, "show", "p", "--json")
    assert json.loads(out)["output"] == [2, 4, 6]
