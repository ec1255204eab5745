"""The `tarry` command end to end: every call is its own process, as a user's shell would run it.

The flows live in a module written to the test's folder (`jobs.py`), which is also the
current directory of every call, so `tarry run jobs:approval` imports it as `python -m` would.
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import WAIT, wait_until
from tarry import Flow, ForEach, Gate, Runtime, UnknownSession

TARRY = str(Path(sys.executable).parent / "tarry")

JOBS = """
import time
from pathlib import Path

from tarry import Flow, ForEach, Gate, Sleep, Wait, step


def double(ctx):
    return ctx.item * 2


def finish(ctx):
    return {"doubled": ctx.outputs["items"], "by": ctx.prev.get("by")}


approval = Flow("approval", [ForEach("items", lambda ctx: ctx.input["xs"], double),
                             Gate("ok", "Ship it?"), finish])


def fragile(ctx):
    raise ValueError("no luck")


broken = Flow("broken", [fragile, lambda ctx: {"after": ctx.prev}])

napper = Flow("napper", [Sleep("nap", seconds=1), lambda ctx: "awake"])
instant = Flow("instant", [Sleep("nap", seconds=0), lambda ctx: "awake"])


def slow_once(ctx):
    # The first run of this step waits to be killed; the one after recovery is quick.
    marker = Path(ctx.input["marker"])
    with marker.open("a") as f:
        f.write("started\\n")
    if marker.read_text().count("started") == 1:
        time.sleep(60)
    return ctx.item


crashy = Flow("crashy", [ForEach("items", [1, 2], slow_once)])


def tick(ctx):
    # With "slow" (a file), the delay holds only while that file exists, from item "from" on.
    slow = ctx.input.get("slow")
    if slow is None or (ctx.item >= ctx.input["from"] and Path(slow).exists()):
        time.sleep(ctx.input.get("delay", 0))
    ctx.metric("ticks", 1)
    return ctx.item


ticker = Flow("ticker", [ForEach("items", lambda ctx: list(range(ctx.input["n"])), tick)])

not_a_flow = 42


def job_key(ctx):
    return f"job-{ctx.input}"


keyed = Flow("keyed", [Wait("result", key=job_key), lambda ctx: {"got": ctx.prev}])


def answer(request):
    return {"from": "adapter", "key": request.key}


adapters = {"external": answer}


def make_adapters():
    return {"external": answer}
"""


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    (tmp_path / "jobs.py").write_text(textwrap.dedent(JOBS))
    return tmp_path


@pytest.fixture
def jobs_here(jobs: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """`jobs` as the current directory of this process, importable as `jobs` (and forgotten
    afterwards, with sys.path as it was)."""
    monkeypatch.chdir(jobs)
    monkeypatch.setattr(sys, "path", list(sys.path))
    sys.modules.pop("jobs", None)
    yield jobs
    sys.modules.pop("jobs", None)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TARRY_STORE", "TARRY_TOKEN")}
    env.update(extra)
    return env


def tarry(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TARRY, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env or _env(),
        input=stdin,
    )


def start(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [TARRY, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=_env(),
    )


class Lines:
    """Reads a process's stdout on a thread, so a test can wait for a line with a timeout."""

    def __init__(self, stream) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._queue.put(line)

    def wait_for(self, text: str, timeout: float = WAIT) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {timeout} s; saw {self.seen!r}")


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


def field(stdout: str, name: str) -> str:
    """The value of a `name VALUE` line of the plain output."""
    for line in stdout.splitlines():
        if line.startswith(name + " "):
            return line.split()[1]
    raise AssertionError(f"no {name!r} line in {stdout!r}")


def db(folder: Path) -> str:
    return f"sqlite:///{folder / 'runs.db'}"


# --- run and resume ----------------------------------------------------------------------------


def test_run_pauses_and_another_process_resumes(jobs: Path) -> None:
    (jobs / "in.json").write_text('{"xs": [1, 2, 3]}')
    ran = tarry("run", "jobs:approval", "--input", "@in.json", "--store", db(jobs), cwd=jobs)
    assert ran.returncode == 3, ran.stderr
    assert "paused (human) at ok: Ship it?" in ran.stdout
    token, session = field(ran.stdout, "token"), field(ran.stdout, "session")
    assert f"tarry resume {token}" in ran.stdout  # how to go on

    done = tarry(
        "resume", token, "--value", '{"approved": true, "by": "ann"}', "--store", db(jobs), cwd=jobs
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.split("output ", 1)[1]) == {"doubled": [2, 4, 6], "by": "ann"}
    view = Runtime(store=db(jobs)).session(session)
    assert view.status == "completed" and view.meta == {"flow_ref": "jobs:approval"}

    again = tarry("resume", token, "--value", "true", "--store", db(jobs), cwd=jobs)
    assert again.returncode == 2 and "already used" in again.stderr


def test_tarry_secret_signs_tokens_for_every_command(jobs: Path) -> None:
    signed = _env(TARRY_SECRET="a secret of at least sixteen bytes")
    ran = tarry(
        "run", "jobs:approval", "--input", '{"xs": [1]}', "--store", db(jobs), cwd=jobs, env=signed
    )
    assert ran.returncode == 3, ran.stderr
    token = field(ran.stdout, "token")
    key = Runtime(store=db(jobs)).store.load(field(ran.stdout, "session")).token
    assert token.startswith(key + ".")  # the store holds the key, not the token

    other = _env(TARRY_SECRET="another secret, sixteen bytes+")
    refused = tarry("resume", token, "--value", "true", "--store", db(jobs), cwd=jobs, env=other)
    assert refused.returncode == 2 and "unknown resume token" in refused.stderr
    # Without the secret, the store's keys are refused too (fail closed), and so is a worker.
    for command in (["resume", token, "--value", "true"], ["resume", key], ["worker", "--once"]):
        refused = tarry(*command, "--store", db(jobs), cwd=jobs)
        assert refused.returncode == 2 and "TARRY_SECRET" in refused.stderr, command
    done = tarry("resume", token, "--value", "true", "--store", db(jobs), cwd=jobs, env=signed)
    assert done.returncode == 0, done.stderr


def test_json_output_values_from_stdin_and_the_default_store(jobs: Path) -> None:
    ran = tarry("run", "jobs:approval", "--input", '{"xs": [5]}', "--json", cwd=jobs)
    assert ran.returncode == 3 and (jobs / "tarry.db").exists()  # sqlite:///tarry.db, here
    out = json.loads(ran.stdout)
    assert out["status"] == "paused" and out["pause"]["kind"] == "human"
    done = tarry(
        "resume", out["token"], "--value", "@-", "--json", cwd=jobs, stdin='{"approved": true}'
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"] == {"doubled": [10], "by": None}


def test_tarry_store_variable_and_python_dash_m(jobs: Path) -> None:
    env = _env(TARRY_STORE=db(jobs))
    ran = subprocess.run(
        [sys.executable, "-m", "tarry", "run", "jobs:approval", "--input", '{"xs": []}'],
        capture_output=True,
        text=True,
        cwd=jobs,
        env=env,
        timeout=60,
    )
    assert ran.returncode == 3, ran.stderr
    assert not (jobs / "tarry.db").exists()
    listed = tarry("ls", "--json", cwd=jobs, env=env)
    [row] = json.loads(listed.stdout)
    assert row["flow"] == "approval" and row["status"] == "paused"


def test_resume_a_session_started_from_python_needs_the_flow(jobs_here: Path) -> None:
    from tarry.drivers.worker import load_flow

    jobs = jobs_here
    flow = load_flow("jobs:approval")
    out = Runtime(store=db(jobs)).run(flow, {"xs": [4]})  # records no MODULE:FLOW
    refused = tarry("resume", out.token, "--value", "true", "--store", db(jobs), cwd=jobs)
    assert refused.returncode == 2 and "pass --flow MODULE:FLOW" in refused.stderr
    done = tarry(
        "resume",
        out.token,
        "--value",
        "true",
        "--flow",
        "jobs:approval",
        "--store",
        db(jobs),
        cwd=jobs,
    )
    assert done.returncode == 0, done.stderr


def test_a_failing_flow_exits_1_and_skip_goes_on(jobs: Path) -> None:
    ran = tarry("run", "jobs:broken", "--store", db(jobs), cwd=jobs)
    assert ran.returncode == 1
    assert "failed at fragile: ValueError: no luck" in ran.stdout
    assert "ValueError: no luck" in ran.stderr  # the traceback
    token = field(ran.stdout, "token")
    skipped = tarry("skip", token, "--output", "5", "--store", db(jobs), cwd=jobs)
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads(skipped.stdout.split("output ", 1)[1]) == {"after": 5}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "jobs"], "expected MODULE:FLOW"),
        (["run", "nowhere:flow"], "no module named 'nowhere'"),
        (["run", "jobs:missing"], "has no attribute 'missing'"),
        (["run", "jobs:not_a_flow"], "must be a tarry.Flow"),
        (["run", "jobs:approval", "--input", "{"], "--input is not valid JSON"),
        (["run", "jobs:approval", "--input", "@nope.json"], "cannot read"),
        (["resume", "tk_nope", "--value", "true"], "unknown resume token"),
        (["show", "nope"], "no session 'nope'"),
        (["run", "jobs:approval", "--store", "ftp://x"], "unknown store URL"),
        (["ls", "--status", "sleeping"], "status must be one of"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2(
    jobs_here: Path, args: list[str], message: str, monkeypatch, capsys
) -> None:
    # In this process, to keep the file fast: the exit code's way out of a process is covered
    # by the end-to-end tests above and below.
    from tarry.drivers.cli import main

    monkeypatch.delenv("TARRY_STORE", raising=False)
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_a_refused_resume_value_exits_2_and_leaves_the_session_paused(jobs: Path) -> None:
    ran = tarry("run", "jobs:approval", "--input", '{"xs": [1]}', cwd=jobs)
    token = field(ran.stdout, "token")
    refused = tarry("resume", token, "--value", '"maybe"', cwd=jobs)
    assert refused.returncode == 2 and "decision must be a bool" in refused.stderr
    assert tarry("resume", token, "--value", "true", cwd=jobs).returncode == 0


def test_progress_is_plain_lines_when_not_a_terminal(jobs: Path) -> None:
    ran = tarry("run", "jobs:ticker", "--input", '{"n": 20}', cwd=jobs)
    assert ran.returncode == 0, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.startswith("items ")]
    assert lines[0] == "items 0/20" and lines[-1] == "items 20/20 done"
    assert len(lines) == 11  # the start, every tenth, the end
    quiet = tarry("run", "jobs:ticker", "--input", '{"n": 3}', "--no-progress", cwd=jobs)
    assert quiet.returncode == 0 and "items" not in quiet.stderr


def test_plain_progress_leaves_out_loops_nested_in_a_running_foreach(capsys) -> None:
    from tarry.drivers.cli.progress import show_progress

    inner = ForEach("inner", [1, 2, 3], lambda ctx: ctx.item)
    flow = Flow("nested", [ForEach("outer", [1, 2], [inner])])
    rt = Runtime()
    with show_progress(rt, "s1"):
        assert rt.run(flow, session_id="s1").ok
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["outer 0/2", "outer 1/2", "outer 2/2 done"]


def test_progress_bars_in_a_terminal(jobs: Path) -> None:
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [TARRY, "run", "jobs:ticker", "--input", '{"n": 30, "delay": 0.01}'],
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=jobs,
        env=_env(),
    )
    os.close(follower)
    screen = b""
    deadline = time.monotonic() + WAIT  # a bound against a hang: the loop ends at EOF
    while time.monotonic() < deadline:
        if not select.select([leader], [], [], 0.2)[0]:
            continue
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the process is done
            break
        if not chunk:
            break
        screen += chunk
    os.close(leader)
    assert proc.wait(timeout=WAIT) == 0
    text = screen.decode(errors="replace")
    assert "items" in text and "30/30" in text and "\x1b[" in text  # drawn, not printed


def test_ctrl_c_pauses_the_run_where_it_stands(jobs: Path) -> None:
    slow = jobs / "slow"
    # From item 20 on, a minute of items while "slow" exists: the Ctrl-C lands in the run
    # however slow the machine.
    slow.touch()
    given = json.dumps({"n": 200, "delay": 0.3, "slow": str(slow), "from": 20})
    proc = start("run", "jobs:ticker", "--input", given, cwd=jobs)
    Lines(proc.stderr).wait_for("items 20/200")
    proc.send_signal(signal.SIGINT)
    stdout = proc.stdout.read()
    assert proc.wait(timeout=WAIT) == 3
    assert "paused (system) at items" in stdout and "aborted" in stdout
    slow.unlink()
    done = tarry("resume", field(stdout, "token"), cwd=jobs)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.split("output ", 1)[1]) == list(range(200))


# --- inspecting and managing -----------------------------------------------------------------


def test_ls_show_events(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    out = Runtime(store=url).run(Flow("cli", [ForEach("f", [1, 2], Gate("g"))]))
    listed = tarry("--store", url, "ls", cwd=tmp_path)
    assert listed.returncode == 0 and out.session_id in listed.stdout and "paused" in listed.stdout
    shown = tarry("--store", url, "show", out.session_id, cwd=tmp_path)
    assert "in foreach f: iteration 0, child 0" in shown.stdout
    assert "paused (human) at f/0/g" in shown.stdout
    assert f"token {out.token}" in shown.stdout
    as_json = json.loads(
        tarry("show", out.session_id, "--json", "--store", url, cwd=tmp_path).stdout
    )
    assert as_json["status"] == "paused" and as_json["container_stack"][0]["node"] == "f"
    lines = tarry(
        "--store", url, "events", out.session_id, "--jsonl", cwd=tmp_path
    ).stdout.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["seq"] for e in events] == list(range(1, len(lines) + 1))
    assert events[0]["type"] == "run.started" and events[-1]["type"] == "run.paused"


def test_cancel_by_token_or_session(jobs: Path) -> None:
    first = tarry("run", "jobs:approval", "--input", '{"xs": [1]}', cwd=jobs)
    second = tarry("run", "jobs:approval", "--input", '{"xs": [2]}', cwd=jobs)
    by_token = tarry("cancel", field(first.stdout, "token"), cwd=jobs)
    assert by_token.returncode == 0 and "cancelled" in by_token.stdout
    by_id = tarry("cancel", field(second.stdout, "session"), cwd=jobs)
    assert by_id.returncode == 0
    listed = tarry("ls", "--status", "cancelled", cwd=jobs)
    assert listed.stdout.count("cancelled") == 2
    again = tarry("cancel", field(second.stdout, "session"), cwd=jobs)
    assert again.returncode == 2 and "it is cancelled" in again.stderr


def test_events_follow_stops_when_the_session_ends(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    flow = Flow("follow", [Gate("g"), lambda ctx: "done"])
    rt = Runtime(store=url)
    out = rt.run(flow)
    follower = start(
        "events",
        out.session_id,
        "--follow",
        "--jsonl",
        "--interval",
        "0.1",
        "--store",
        url,
        cwd=tmp_path,
    )
    lines = Lines(follower.stdout)
    lines.wait_for('"run.paused"')
    assert follower.poll() is None  # still following
    assert rt.resume(out.token, True).ok
    lines.wait_for('"run.completed"')
    assert follower.wait(timeout=WAIT) == 0


def test_stats(jobs: Path) -> None:
    assert tarry("run", "jobs:ticker", "--input", '{"n": 3}', cwd=jobs).returncode == 0
    assert tarry("run", "jobs:approval", "--input", '{"xs": [1]}', cwd=jobs).returncode == 3
    shown = tarry("stats", cwd=jobs)
    assert shown.returncode == 0
    assert "completed 1" in shown.stdout and "paused 1" in shown.stdout
    assert "ticks 3" in shown.stdout
    as_json = json.loads(tarry("stats", "--json", "--flow", "ticker", cwd=jobs).stdout)
    assert as_json["by_status"] == {"completed": 1}
    assert as_json["nodes"]["tick"]["executions"] == 3
    assert as_json["flows"]["ticker"]["items/tick"]["executions"] == 3
    # One row per flow and node path, with its waits.
    row = next(line.split() for line in shown.stdout.splitlines() if "items/tick" in line)
    assert row[:4] == ["ticker", "items/tick", "3", "0"]
    assert "mean wait s" in shown.stdout


def test_due_lists_and_runs_sessions_whose_time_has_come(jobs: Path) -> None:
    ran = tarry("run", "jobs:instant", cwd=jobs)
    assert ran.returncode == 3 and "paused (system) at nap: sleep" in ran.stdout
    session = field(ran.stdout, "session")
    listed = tarry("due", cwd=jobs)
    assert listed.returncode == 0 and session in listed.stdout
    resumed = tarry("due", "--run", cwd=jobs)
    assert resumed.returncode == 0 and f"resumed {session}: ok" in resumed.stdout
    assert session not in tarry("due", cwd=jobs).stdout


def test_db_upgrade_of_a_store_without_migrations(jobs: Path) -> None:
    result = tarry("db", "upgrade", "--store", db(jobs), cwd=jobs)
    assert result.returncode == 0 and "needs no migration" in result.stdout


def test_db_upgrade_calls_the_stores_upgrade(monkeypatch, capsys) -> None:
    from tarry.drivers.cli import main, services

    class Migrating:
        def upgrade(self) -> list[int]:
            return [1, 2]

        def schema_version(self) -> int:
            return 2

    monkeypatch.setattr(services, "open_store", lambda url: Migrating())
    assert main(["db", "upgrade", "--store", "memory://"]) == 0
    assert capsys.readouterr().out == "applied migrations 1, 2: schema version 2\n"


def test_db_upgrade_of_postgresql(tmp_path: Path) -> None:
    from pgserver import schema_dsn, scratch_schema

    with scratch_schema() as schema:
        url = schema_dsn(schema)
        first = tarry("db", "upgrade", "--store", url, cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert first.stdout.startswith("applied migrations 1")
        again = tarry("db", "upgrade", "--store", url, cwd=tmp_path)
        assert again.returncode == 0 and again.stdout.startswith("up to date: schema version")


def test_serve_needs_a_token_beyond_loopback(jobs: Path) -> None:
    helped = tarry("serve", "--help", cwd=jobs)
    assert helped.returncode == 0 and "--port" in helped.stdout
    refused = tarry("serve", "--host", "0.0.0.0", "--port", "0", cwd=jobs)
    assert refused.returncode == 2 and "token" in refused.stderr


# --- the worker --------------------------------------------------------------------------------


def test_worker_wakes_a_sleeping_session_and_stops_on_sigterm(jobs: Path) -> None:
    ran = tarry("run", "jobs:napper", "--store", db(jobs), cwd=jobs)
    assert ran.returncode == 3
    session = field(ran.stdout, "session")
    worker = start("worker", "--interval", "0.2", "--store", db(jobs), cwd=jobs)
    lines = Lines(worker.stdout)
    assert "ok" in lines.wait_for(f"resumed {session}")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=WAIT) == 0
    assert Runtime(store=db(jobs)).session(session).outcome.output == "awake"


LONG_JOB = """
import signal
import time
from pathlib import Path

from tarry import Flow, ForEach, Sleep


def item(ctx):
    with open(ctx.input["log"], "a") as f:
        f.write(f"{ctx.item}\\n")
    if Path(ctx.input["slow"]).exists():
        time.sleep(ctx.input["delay"])
    return ctx.item


long = Flow("long", [Sleep("nap", seconds=0),
                     ForEach("items", lambda ctx: list(range(ctx.input["n"])), item)])


def counting(ctx):
    # Run in the worker's main thread: each SIGTERM it gets is counted in the file "terms"
    # before the worker's own handler sees it, so a test can tell when one was handled.
    previous = signal.getsignal(signal.SIGTERM)

    def count(signum, frame):
        with open(ctx.input["terms"], "a") as f:
            f.write("term\\n")
        previous(signum, frame)

    signal.signal(signal.SIGTERM, count)
    return item(ctx)


counted = Flow("counted", [Sleep("nap", seconds=0),
                           ForEach("items", lambda ctx: list(range(ctx.input["n"])), counting)])
"""


def test_sigterm_pauses_the_session_in_progress_and_the_next_worker_goes_on(jobs: Path) -> None:
    (jobs / "longjob.py").write_text(LONG_JOB)
    log, slow = jobs / "items.log", jobs / "slow"
    slow.touch()
    n = 1000  # a minute of work at 0.06 s an item
    given = {"log": str(log), "slow": str(slow), "delay": 0.06, "n": n}
    ran = tarry("run", "longjob:long", "--input", json.dumps(given), "--store", db(jobs), cwd=jobs)
    assert ran.returncode == 3, ran.stderr  # asleep on its Sleep(0): due at once
    session = field(ran.stdout, "session")

    worker = start("worker", "--interval", "0.2", "--store", db(jobs), cwd=jobs)
    wait_until(
        lambda: worker.poll() is not None or (log.exists() and len(lines_of(log)) >= 5),
        "the run's first items",
    )
    assert worker.poll() is None, "the run never started"
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=WAIT) == 0, worker.stderr.read()  # not after the whole minute
    said = worker.stderr.read()
    assert f"the session in progress, {session}, was paused and handed back" in said, said
    view = Runtime(store=db(jobs)).session(session)
    assert view.status == "paused" and view.state.pause.reason == "aborted"
    assert len(log.read_text().splitlines()) < n

    slow.unlink()  # the rest is quick: the next worker goes on where this one stopped
    again = tarry("worker", "--once", "--store", db(jobs), cwd=jobs)
    assert again.returncode == 0 and f"resumed {session}: ok" in again.stdout, again.stderr
    assert Runtime(store=db(jobs)).session(session).outcome.output == list(range(n))
    items = log.read_text().splitlines()
    assert sorted(map(int, items)) == list(range(n))  # each item ran exactly once


def test_a_second_sigterm_stops_the_worker_at_once(jobs: Path) -> None:
    (jobs / "longjob.py").write_text(LONG_JOB)
    log = jobs / "items.log"
    slow = jobs / "slow"
    slow.touch()
    terms = jobs / "terms"
    given = {"log": str(log), "slow": str(slow), "delay": 120, "n": 2, "terms": str(terms)}
    given_json = json.dumps(given)  # a step of two minutes
    ran = tarry("run", "longjob:counted", "--input", given_json, "--store", db(jobs), cwd=jobs)
    assert ran.returncode == 3, ran.stderr
    worker = start("worker", "--interval", "0.2", "--store", db(jobs), cwd=jobs)
    wait_until(lambda: worker.poll() is not None or log.exists(), "the run's first step")
    assert worker.poll() is None, "the run never started"
    worker.send_signal(signal.SIGTERM)  # waits for the step in flight ...
    # Once the worker handled it (not merely got it: two signals not yet handled are one).
    wait_until(lambda: terms.exists() and lines_of(terms) == ["term"], "the first SIGTERM")
    assert worker.poll() is None
    worker.send_signal(signal.SIGTERM)  # ... unless asked twice
    assert worker.wait(timeout=WAIT) == 130


def test_worker_once_resumes_the_others_when_a_session_cannot_be_continued(jobs: Path) -> None:
    runs = [tarry("run", "jobs:instant", "--store", db(jobs), cwd=jobs) for _ in range(3)]
    assert [r.returncode for r in runs] == [3, 3, 3]
    bad, *good = [field(r.stdout, "session") for r in runs]
    store = Runtime(store=db(jobs)).store
    record = store.load(bad)
    record.state = record.state[:10]  # a truncated snapshot
    store.save(record, record.version)
    worker = tarry("worker", "--once", "--store", db(jobs), cwd=jobs)
    assert worker.returncode == 0, worker.stderr
    assert all(f"resumed {sid}: ok" in worker.stdout for sid in good)
    assert f"session {bad} cannot be continued (SnapshotError" in worker.stderr
    assert Runtime(store=db(jobs)).session(bad).status == "paused"


def test_worker_recovers_a_run_whose_process_was_killed(jobs: Path) -> None:
    marker = jobs / "marker"
    run = start(
        "run",
        "jobs:crashy",
        "--input",
        json.dumps({"marker": str(marker)}),
        "--durability",
        "step",
        "--lease",
        "1",
        "--store",
        db(jobs),
        cwd=jobs,
    )
    wait_until(
        lambda: run.poll() is not None or (marker.exists() and "started" in marker.read_text()),
        "the run's first step",
    )
    assert run.poll() is None, "the run never started"
    run.kill()  # SIGKILL, mid-step
    run.wait(timeout=WAIT)
    [session] = [s.session_id for s in Runtime(store=db(jobs)).sessions(status="running")]

    # Its lease (1 s) lapses in the machine's time: the worker's rounds (every 0.2 s) recover it
    # the first time they find it lapsed, awaited as a condition (Lines.wait_for).
    worker = start("worker", "--interval", "0.2", "--store", db(jobs), cwd=jobs)
    lines = Lines(worker.stdout)
    assert "ok" in lines.wait_for(f"recovered {session}")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=WAIT) == 0
    assert Runtime(store=db(jobs)).session(session).outcome.output == [1, 2]
    assert marker.read_text().count("started") == 3  # item 1 twice (killed, then again), item 2


@pytest.mark.parametrize("cancel", [False, True])
def test_abort_a_run_from_another_process(jobs: Path, cancel: bool) -> None:
    url = db(jobs)
    run = start(
        "run",
        "jobs:ticker",
        "--input",
        # 100 s of steps unless stopped: time enough for the abort even on a loaded machine.
        '{"n": 2000, "delay": 0.05}',
        "--session-id",
        "t1",
        "--store",
        url,
        "--no-progress",
        cwd=jobs,
    )
    rt = Runtime(store=url)

    def progress() -> bool:  # the run has written its progress once
        try:
            return bool(rt.session("t1").state.container_stack)
        except UnknownSession:
            return False

    wait_until(progress, "the run's progress")
    asked = tarry("abort", "t1", *(["--cancel"] if cancel else []), "--store", url, cwd=jobs)
    assert asked.returncode == 0, asked.stderr
    action = "cancel" if cancel else "abort"
    assert f"{action} requested: session t1 stops at its next checkpoint" in asked.stdout
    out, err = run.communicate(timeout=120)
    assert run.returncode == (1 if cancel else 3), err
    view = rt.session("t1")
    assert view.status == ("cancelled" if cancel else "paused")
    done = [e for e in view.events() if e.type == "container.iteration_completed"]
    assert len(done) < 2000
    unknown = tarry("abort", "nope", "--store", url, cwd=jobs)
    assert unknown.returncode == 2 and "nope" in unknown.stderr
    assert json.loads(tarry("show", "t1", "--json", "--store", url, cwd=jobs).stdout)


# --- deliver and adapters ------------------------------------------------------------------------


def keyed_sessions(jobs: Path, n: int) -> list[str]:
    """`n` sessions of jobs:keyed waiting on keys job-0 .. job-(n-1)."""
    runs = [
        tarry("run", "jobs:keyed", "--input", str(i), "--store", db(jobs), cwd=jobs)
        for i in range(n)
    ]
    assert [r.returncode for r in runs] == [3] * n, runs[0].stderr
    return [field(r.stdout, "session") for r in runs]


def test_deliver_a_key_with_a_value(jobs: Path) -> None:
    [sid] = keyed_sessions(jobs, 1)
    r = tarry("deliver", "job-0", "--value", '{"score": 1}', "--store", db(jobs), cwd=jobs)
    assert r.returncode == 0, r.stderr
    assert f"session {sid}: ok" in r.stdout
    assert "delivered to 1 session, kept 0 as mail, 0 refused" in r.stdout
    assert Runtime(store=db(jobs)).session(sid).outcome.output == {"got": {"score": 1}}
    kept = tarry("deliver", "job-9", "--store", db(jobs), "--json", cwd=jobs)
    assert kept.returncode == 0 and json.loads(kept.stdout)["kept"] == 1
    bad = tarry("deliver", "", "--value", "1", "--store", db(jobs), cwd=jobs)
    assert bad.returncode == 2 and "key" in bad.stderr
    both = tarry("deliver", "job-1", "--file", "x.jsonl", "--store", db(jobs), cwd=jobs)
    assert both.returncode == 2


def test_deliver_a_results_file_reports_bad_lines_and_goes_on(jobs: Path) -> None:
    sids = keyed_sessions(jobs, 3)
    lines = [
        '{"key": "job-0", "value": "zero"}',
        "not json",
        '{"key": "job-2", "value": "two"}',
        "",
        '{"value": "no key"}',
        '{"key": "early", "value": "mail"}',
        '{"key": "job-1", "value": "one", "extra": 1}',
        '{"key": "job-1", "value": "one"}',
    ]
    (jobs / "results.jsonl").write_text("\n".join(lines) + "\n")
    r = tarry("deliver", "--file", "results.jsonl", "--batch", "2", "--store", db(jobs), cwd=jobs)
    assert r.returncode == 1, r.stderr
    assert "delivered to 3 sessions, kept 1 as mail, 3 refused" in r.stdout
    assert "line 2: not valid JSON" in r.stderr
    assert "line 5: expected" in r.stderr and "line 7: expected" in r.stderr
    assert "deliver 8/8 lines" in r.stderr  # progress, plain lines when not a terminal
    rt = Runtime(store=db(jobs))
    assert [rt.session(s).outcome.output for s in sids] == [
        {"got": "zero"},
        {"got": "one"},
        {"got": "two"},
    ]
    assert rt.store.queued(key="early") != []


def test_worker_loads_adapters_by_import_path(jobs: Path) -> None:
    sids = keyed_sessions(jobs, 2)
    r = tarry("worker", "--once", "--adapters", "jobs:make_adapters", "--store", db(jobs), cwd=jobs)
    assert r.returncode == 0, r.stderr
    rt = Runtime(store=db(jobs))
    assert [rt.session(s).outcome.output for s in sids] == [
        {"got": {"from": "adapter", "key": "job-0"}},
        {"got": {"from": "adapter", "key": "job-1"}},
    ]
    for ref, words in [
        ("jobs:not_a_flow", "must be a dict"),
        ("jobs:nothing", "no attribute"),
        ("nojobs:adapters", "no module"),
        ("jobs", "expected MODULE:OBJ"),
    ]:
        bad = tarry("worker", "--once", "--adapters", ref, "--store", db(jobs), cwd=jobs)
        assert bad.returncode == 2 and words in bad.stderr, (ref, bad.stderr)


def test_commands_record_the_actor_given_or_the_os_user(jobs_here: Path, monkeypatch) -> None:
    import getpass

    from tarry.drivers.cli import main

    store = f"sqlite:///{jobs_here / 'actors.db'}"
    monkeypatch.setattr(getpass, "getuser", lambda: "osuser")
    assert (
        main(
            [
                "run",
                "jobs:approval",
                "--store",
                store,
                "--input",
                '{"xs": [1]}',
                "--session-id",
                "a1",
                "--no-progress",
            ]
        )
        == 3
    )
    rt = Runtime(store=store)
    token = rt.session("a1").outcome.token
    assert (
        main(
            [
                "resume",
                token,
                "--store",
                store,
                "--value",
                "true",
                "--actor",
                "ann",
                "--no-progress",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "run",
                "jobs:approval",
                "--store",
                store,
                "--input",
                '{"xs": [1]}',
                "--session-id",
                "a2",
                "--no-progress",
            ]
        )
        == 3
    )
    assert main(["cancel", "a2", "--store", store, "--actor", "bob"]) == 0
    actors = [
        (e.session_id, e.type, e.data.get("actor"))
        for sid in ("a1", "a2")
        for e in rt.session(sid).events()
        if e.type in ("run.started", "run.resumed", "run.cancelled")
    ]
    assert actors == [
        ("a1", "run.started", "osuser"),
        ("a1", "run.resumed", "ann"),
        ("a2", "run.started", "osuser"),
        ("a2", "run.cancelled", "bob"),
    ]


def test_serve_reads_its_users_file_and_flows(jobs_here: Path, monkeypatch) -> None:
    from tarry.drivers import http
    from tarry.drivers.cli import main

    served: list[dict] = []
    monkeypatch.setattr(
        http,
        "serve",
        lambda rt, **kw: served.append({**kw, "flows": [f.name for f in rt.flows.all()]}),
    )
    (jobs_here / "users").write_text("# who\nann:ann-token-1234\nbob:bob-token-5678\n")
    store = f"sqlite:///{jobs_here / 'serve.db'}"
    assert (
        main(
            [
                "serve",
                "--store",
                store,
                "--users",
                "users",
                "--flow",
                "jobs:approval",
                "--session-hours",
                "2",
            ]
        )
        == 0
    )
    assert served[0]["users"] == {"ann": "ann-token-1234", "bob": "bob-token-5678"}
    assert served[0]["session_hours"] == 2.0 and served[0]["flows"] == ["approval"]
    (jobs_here / "bad").write_text("ann\n")
    assert main(["serve", "--store", store, "--users", "bad"]) == 2
    assert len(served) == 1
