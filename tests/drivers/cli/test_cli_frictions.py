"""The CLI frictions of issue 27: `serve` on a port in use, `deliver --file` counting and
listing sessions, the worker's stop message, the advice after an abort, the login page's
wording, and what `make demo` installs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import WAIT
from tarry import Flow, Gate, Runtime
from tarry.drivers.cli.text import describe_outcome

TARRY = str(Path(sys.executable).parent / "tarry")
ROOT = Path(__file__).resolve().parents[3]

JOBS = """
from tarry import Flow, ForEach, Wait

wide = Flow("wide", [ForEach("items", list(range(6)),
                             Wait("result", key=lambda ctx: f"job/{ctx.item}"), concurrency=None)])
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("TARRY_STORE", "TARRY_TOKEN")}


def tarry(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TARRY, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=_env()
    )


def test_serve_on_a_port_in_use_exits_1_with_one_line(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = tarry(
            "serve", "--port", str(port), "--store", f"sqlite:///{tmp_path / 's.db'}", cwd=tmp_path
        )
    assert r.returncode == 1  # not 3, which means "paused"
    assert r.stderr.strip().splitlines() == [
        f"tarry: cannot serve on 127.0.0.1:{port}: Address already in use "
        "(another server runs there: pass another --port)"
    ]
    assert "INFO" not in r.stderr and r.stdout == ""


@pytest.fixture
def wide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, str]:
    """A session whose six concurrent Waits each wait on a key of their own."""
    (tmp_path / "jobs.py").write_text(textwrap.dedent(JOBS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    sys.modules.pop("jobs", None)
    import jobs  # type: ignore[import-not-found]

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    out = Runtime(store=url).run(jobs.wide, session_id="wide-1", meta={"flow_ref": "jobs:wide"})
    sys.modules.pop("jobs", None)
    assert out.paused and len(out.pauses) == 6
    lines = [json.dumps({"key": f"job/{i}", "value": i}) for i in range(6)]
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path, url, "wide-1"


def test_deliver_file_counts_a_session_once_and_prints_its_line(wide) -> None:
    folder, url, sid = wide
    r = tarry(
        "deliver",
        "--file",
        "results.jsonl",
        "--batch",
        "1",
        "--no-progress",
        "--store",
        url,
        cwd=folder,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"session {sid}: ok",
        "delivered to 1 session, kept 0 as mail, 0 refused",
    ]
    assert Runtime(store=url).session(sid).outcome.output == [0, 1, 2, 3, 4, 5]


def test_deliver_file_json_lists_each_session_once(wide) -> None:
    folder, url, sid = wide
    r = tarry(
        "deliver", "--file", "results.jsonl", "--batch", "2", "--json", "--store", url, cwd=folder
    )
    body = json.loads(r.stdout)
    assert body["delivered"] == 1 and [o["session_id"] for o in body["outcomes"]] == [sid]
    assert body["outcomes"][0]["status"] == "ok"


def test_an_idle_worker_stopped_hands_nothing_back(tmp_path: Path) -> None:
    worker = subprocess.Popen(
        [TARRY, "worker", "--interval", "0.2", "--store", f"sqlite:///{tmp_path / 'w.db'}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=_env(),
    )
    first = worker.stderr.readline()  # written before its first round: the handler is set
    assert "a round every" in first
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=WAIT) == 0
    rest = worker.stderr.read()
    assert rest.strip() == "tarry worker: stopped" and "handed back" not in rest


def test_an_aborted_run_is_not_told_to_pass_a_value() -> None:
    rt = Runtime()

    def stop_here(ctx):
        rt.abort(ctx.session_id)
        return 1

    aborted = rt.run(Flow("ab", [stop_here, lambda ctx: 2]))
    assert aborted.paused and aborted.pause.reason == "aborted"
    lines = describe_outcome(aborted)
    assert f"resume with: tarry resume {aborted.token}" in lines
    assert not any("--value" in line for line in lines)
    gate = rt.run(Flow("g", [Gate("ok")]))
    assert f"resume with: tarry resume {gate.token} --value JSON" in describe_outcome(gate)


def test_the_login_page_names_the_token_in_use() -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient
    from tarry.drivers.http import create_app

    def page(**kwargs) -> str:
        app = create_app(Runtime(), **kwargs)
        return TestClient(app, base_url="http://127.0.0.1:8765").get("/login").text

    with_users = page(users={"ann": "ann-token-1234"})
    assert "--token" not in with_users and "TARRY_TOKEN" not in with_users
    assert "users file" in with_users
    single = page(token="the-one-token")
    assert "<code>--token</code>" in single and "users file" not in single
    both = page(users={"ann": "ann-token-1234"}, token="the-one-token")
    assert "users file" in both and "--token" in both


def test_make_demo_installs_tarry_alone(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("no make")
    shutil.copy(ROOT / "Makefile", tmp_path)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    # The batch demo also needs the official OpenAI SDK: tarry's `openai` extra, no other.
    for target, install in (("demo", "-e .\n"), ("demo-batch", "-e '.[openai]'\n")):
        plan = subprocess.run(
            ["make", "-n", target], capture_output=True, text=True, cwd=tmp_path, timeout=60
        ).stdout
        assert f"pip install -q {install}" in plan, plan
        assert "[dev]" not in plan and "playwright" not in plan
