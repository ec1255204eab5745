"""`tarry fork SESSION --at-seq N | --at PATH`: a new session from an existing one's past.

In this process (the CLI's exit codes through a real process are covered by test_cli.py),
but for one end-to-end call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tarry import Runtime

JOBS = """
from pathlib import Path

from tarry import Flow, ForEach, Gate, step


def double(ctx):
    with open("ran.txt", "a") as f:
        f.write(f"{ctx.item}\\n")
    return ctx.item * 2


approval = Flow("approval", [ForEach("items", lambda ctx: ctx.input["xs"], double),
                             Gate("ok", "Ship it?")])
"""

TARRY = str(Path(sys.executable).parent / "tarry")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "jobs.py").write_text(textwrap.dedent(JOBS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("TARRY_STORE", raising=False)
    sys.modules.pop("jobs", None)
    yield tmp_path
    sys.modules.pop("jobs", None)


def tarry(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:
    from tarry.drivers.cli import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    got = capsys.readouterr()
    out = got.out
    return code, (json.loads(out) if out.strip().startswith("{") else {}), got.err


def ran(here: Path) -> list[str]:
    path = here / "ran.txt"
    return path.read_text().split() if path.exists() else []


def test_fork_at_a_seq_or_a_path(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = f"sqlite:///{here / 'runs.db'}"
    code, out, _ = tarry(
        capsys, "run", "jobs:approval", "--input", '{"xs": [1, 2, 3]}', "--store", store,
        "--session-id", "orig", "--json",
    )  # fmt: skip
    assert code == 3 and ran(here) == ["1", "2", "3"]
    (here / "ran.txt").unlink()
    events = Runtime(store=store).session("orig").events()
    at = next(e.seq for e in events if e.type == "container.iteration_completed")
    code, out, _ = tarry(
        capsys, "fork", "orig", "--at-seq", str(at), "--session-id", "copy", "--store", store,
        "--json", "--actor", "ann",
    )  # fmt: skip
    assert code == 3 and out["session_id"] == "copy" and out["pause"]["path"] == ["ok"]
    assert ran(here) == ["2", "3"]
    view = Runtime(store=store).session("copy")
    assert view.forked_from == {"session_id": "orig", "seq": at}
    assert view.meta["flow_ref"] == "jobs:approval"
    resumed = view.events()[at]
    assert resumed.type == "run.resumed" and resumed.data["actor"] == "ann"

    (here / "ran.txt").unlink()
    code, out, _ = tarry(capsys, "fork", "orig", "--at", "items/2", "--store", store, "--json")
    assert code == 3 and ran(here) == ["3"]
    code, out, _ = tarry(
        capsys, "fork", "orig", "--at", '["items", 2, "double"]', "--store", store, "--json"
    )
    assert code == 3 and ran(here) == ["3", "3"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fork", "orig"], "one of the arguments --at-seq --at is required"),
        (["fork", "orig", "--at-seq", "1", "--at", "ok"], "not allowed with argument"),
        (["fork", "orig", "--at-seq", "99"], "past the log"),
        (["fork", "orig", "--at-seq", "0"], "at_seq must be an int >= 1"),
        (["fork", "orig", "--at", "nowhere"], "no element at ['nowhere'] ever started"),
        (["fork", "orig", "--at", "[1"], "--at is not valid JSON"),
        (["fork", "nope", "--at-seq", "1"], "no session 'nope'"),
    ],
)
def test_refused_forks_exit_2_and_write_nothing(
    here: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    store = f"sqlite:///{here / 'runs.db'}"
    tarry(capsys, "run", "jobs:approval", "--input", '{"xs": [1]}', "--store", store,
          "--session-id", "orig")  # fmt: skip
    code, _, err = tarry(capsys, *args, "--store", store)
    assert code == 2 and message in err, err
    assert [s.session_id for s in Runtime(store=store).sessions()] == ["orig"]


def test_fork_of_a_session_started_from_python_needs_the_flow(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tarry.drivers.worker import load_flow

    store = f"sqlite:///{here / 'runs.db'}"
    Runtime(store=store).run(load_flow("jobs:approval"), {"xs": [1]}, session_id="py")
    code, _, err = tarry(capsys, "fork", "py", "--at-seq", "2", "--store", store)
    assert code == 2 and "pass --flow MODULE:FLOW" in err
    code, out, _ = tarry(
        capsys, "fork", "py", "--at-seq", "2", "--flow", "jobs:approval", "--store", store,
        "--json",
    )  # fmt: skip
    assert code == 3 and out["pause"]["path"] == ["ok"]
    assert Runtime(store=store).session(out["session_id"]).meta["flow_ref"] == "jobs:approval"


def test_a_fork_from_a_shell_exits_3_when_it_pauses(here: Path) -> None:
    store = f"sqlite:///{here / 'runs.db'}"
    env = {k: v for k, v in os.environ.items() if k not in ("TARRY_STORE", "TARRY_TOKEN")}
    run = [TARRY, "run", "jobs:approval", "--input", '{"xs": [4]}', "--session-id", "o"]
    subprocess.run([*run, "--store", store], cwd=here, env=env, timeout=60, check=False)
    done = subprocess.run(
        [TARRY, "fork", "o", "--at-seq", "3", "--store", store, "--no-progress"],
        cwd=here, env=env, timeout=60, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "paused (human) at ok" in done.stdout
