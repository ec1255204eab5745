"""`tarry recover [ID]` and the `stale` status in `tarry ls` / `tarry show`, each call its own
process. The dead run is made in this process with a clock in the past, so its lease lapsed
long ago by the machine's clock: no test waits for a lease."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tarry import ManualClock, Runtime

TARRY = str(Path(sys.executable).parent / "tarry")

JOBS = """
import os
from tarry import Flow, ForEach


class Crash(BaseException):
    pass


def work(ctx):
    if ctx.item == 2 and os.environ.get("CRASH"):
        raise Crash
    return ctx.item * 10


dying = Flow("dying", [ForEach("items", [1, 2, 3], work)])
"""


def tarry(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TARRY_STORE", "CRASH")}
    return subprocess.run(
        [TARRY, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )


@pytest.fixture
def dead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A folder with jobs.py and a store holding two sessions whose process died in 2020."""
    (tmp_path / "jobs.py").write_text(textwrap.dedent(JOBS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    monkeypatch.setenv("CRASH", "1")
    sys.modules.pop("jobs", None)
    import jobs  # type: ignore[import-not-found]

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    rt = Runtime(store=url, durability="step", clock=ManualClock(datetime(2020, 1, 1, tzinfo=UTC)))
    for sid in ("one", "two"):
        with pytest.raises(jobs.Crash):
            rt.run(jobs.dying, session_id=sid, meta={"flow_ref": "jobs:dying"})
    sys.modules.pop("jobs", None)
    return tmp_path, url


def test_ls_and_show_mark_a_dead_run_stale(dead) -> None:
    folder, url = dead
    ls = tarry("ls", "--store", url, cwd=folder)
    assert ls.returncode == 0, ls.stderr
    assert [line.split()[2] for line in ls.stdout.splitlines()] == ["stale", "stale"]
    listed = tarry("ls", "--status", "stale", "--json", "--store", url, cwd=folder)
    assert {s["session_id"] for s in json.loads(listed.stdout)} == {"one", "two"}
    show = tarry("show", "one", "--store", url, cwd=folder)
    assert "status stale" in show.stdout and "tarry recover one" in show.stdout


def test_recover_one_session_by_id(dead) -> None:
    folder, url = dead
    out = tarry("recover", "one", "--store", url, cwd=folder)
    assert out.returncode == 0, out.stderr
    assert "completed" in out.stdout and "output [10,20,30]" in out.stdout
    ls = tarry("ls", "--json", "--store", url, cwd=folder)
    assert {s["session_id"]: s["status"] for s in json.loads(ls.stdout)} == {
        "one": "completed",
        "two": "stale",
    }
    again = tarry("recover", "one", "--store", url, cwd=folder)
    assert again.returncode == 2 and "cannot recover session 'one': it is completed" in again.stderr


def test_recover_all_and_then_nothing(dead) -> None:
    folder, url = dead
    out = tarry("recover", "--store", url, cwd=folder)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.splitlines()) == [
        "recovered one: ok",
        "recovered two: ok",
    ]
    again = tarry("recover", "--store", url, cwd=folder)
    assert again.returncode == 0 and "nothing to recover" in again.stdout
