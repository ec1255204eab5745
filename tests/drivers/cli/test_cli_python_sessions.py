"""Sessions started from Python record no MODULE:FLOW (only `tarry run` does), so a command
that drives one names its flow with `--flow MODULE:FLOW`, as the error says: `deliver`,
`cancel`, `due --run`, `recover` and `worker` take it. Through the real `tarry` command
against a SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tarry import Runtime

TARRY = str(Path(sys.executable).parent / "tarry")

JOBS = textwrap.dedent(
    """
    from pathlib import Path

    from tarry import Flow, Wait

    def note_cleanup(ctx):
        Path("cleanup.txt").write_text(ctx.session_id)

    approve = Flow("approve", [Wait("ok", key=lambda ctx: f"ok/{ctx.input}")], cleanup=note_cleanup)
    """
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TARRY_STORE", "TARRY_TOKEN")}
    env["PYTHONPATH"] = ""  # the jobs module is found in the working directory only
    return env


def tarry(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TARRY, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=_env()
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "pyjobs.py").write_text(JOBS)
    return tmp_path


def _start_from_python(folder: Path, name: str) -> str:
    """A session of pyjobs:approve started by `Runtime.run` in another process: the id."""
    code = (
        "from tarry import Runtime; import pyjobs; "
        f"print(Runtime('sqlite:///runs.db').run(pyjobs.approve, {name!r}).session_id)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=folder, env=_env()
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _status(folder: Path, sid: str) -> str:
    return Runtime(f"sqlite:///{folder / 'runs.db'}").session(sid).status


def test_deliver_without_the_flow_says_to_pass_flow_and_changes_nothing(folder: Path) -> None:
    sid = _start_from_python(folder, "a")
    done = tarry("deliver", "ok/a", "--value", "1", "--store", "sqlite:///runs.db", cwd=folder)
    assert done.returncode == 2
    assert "pass --flow MODULE:FLOW" in done.stderr
    assert _status(folder, sid) == "paused"
    done = tarry(
        "deliver", "ok/a", "--value", "1", "--flow", "pyjobs:approve", "--json",
        "--store", "sqlite:///runs.db", cwd=folder,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    [out] = json.loads(done.stdout)["outcomes"]
    assert (out["session_id"], out["status"], out["output"]) == (sid, "ok", 1)
    assert _status(folder, sid) == "completed"


def test_cancel_with_flow_runs_the_flows_cleanup(folder: Path) -> None:
    sid = _start_from_python(folder, "b")
    done = tarry("cancel", sid, "--store", "sqlite:///runs.db", cwd=folder)
    assert done.returncode == 2 and "pass --flow MODULE:FLOW" in done.stderr
    assert _status(folder, sid) == "paused" and not (folder / "cleanup.txt").exists()
    done = tarry(
        "cancel", sid, "--flow", "pyjobs:approve", "--store", "sqlite:///runs.db", cwd=folder
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"cancelled session {sid}"
    assert _status(folder, sid) == "cancelled"
    assert (folder / "cleanup.txt").read_text() == sid


def test_a_flow_that_cannot_be_loaded_is_a_usage_error(folder: Path) -> None:
    sid = _start_from_python(folder, "c")
    done = tarry(
        "cancel", sid, "--flow", "pyjobs:nothing", "--store", "sqlite:///runs.db", cwd=folder
    )
    assert done.returncode == 2 and "nothing" in done.stderr
    assert _status(folder, sid) == "paused"


@pytest.mark.parametrize("command", ["deliver", "cancel", "due", "recover", "worker"])
def test_each_command_that_drives_sessions_it_did_not_start_takes_flow(command: str) -> None:
    done = subprocess.run([TARRY, command, "--help"], capture_output=True, text=True, env=_env())
    assert done.returncode == 0
    assert "--flow MODULE:FLOW" in done.stdout and "started from Python" in done.stdout
