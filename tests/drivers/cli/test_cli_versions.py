"""`tarry resume --flow MODULE:FLOW --allow-changed`: the session records the new module
reference, so the next `tarry resume` and the worker continue it with the repaired flow.

In this process (the CLI's own exit codes and processes are covered by test_cli.py)."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tarry import Runtime

V1 = """
from tarry import Flow, Gate, step

job = Flow("job", [Gate("ok"), Gate("again"), step(lambda ctx: "v1", "finish")])
"""

V2 = """
from tarry import Flow, Gate, Sleep, step

job = Flow(
    "job",
    [Gate("ok"), Sleep("nap", seconds=0), Gate("again"), step(lambda ctx: "v2", "finish")],
    version=2,
)
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "jobs.py").write_text(textwrap.dedent(V1))
    (tmp_path / "jobs_v2.py").write_text(textwrap.dedent(V2))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("TARRY_STORE", raising=False)
    for name in ("jobs", "jobs_v2"):
        sys.modules.pop(name, None)
    yield tmp_path
    for name in ("jobs", "jobs_v2"):
        sys.modules.pop(name, None)


def tarry(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    from tarry.drivers.cli import main

    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip().startswith("{") else {})


def test_allow_changed_records_the_new_module_for_the_next_resume_and_the_worker(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = f"sqlite:///{here / 'runs.db'}"
    code, ran = tarry(capsys, "run", "jobs:job", "--store", store, "--json")
    assert code == 3 and ran["pause"]["path"] == ["ok"]
    sid = ran["session_id"]

    code, repaired = tarry(
        capsys,
        "resume",
        ran["token"],
        "--value",
        "true",
        "--flow",
        "jobs_v2:job",
        "--allow-changed",
        "--store",
        store,
        "--json",
    )
    assert code == 3 and repaired["pause"]["path"] == ["nap"]
    assert Runtime(store=store).session(sid).meta == {"flow_ref": "jobs_v2:job"}

    # The worker imports the flow the session records, now jobs_v2, and wakes the nap.
    assert tarry(capsys, "worker", "--once", "--store", store)[0] == 0
    view = Runtime(store=store).session(sid)
    assert view.status == "paused" and view.state.pause.path == ("again",)

    code, done = tarry(
        capsys, "resume", view.outcome.token, "--value", "true", "--store", store, "--json"
    )
    assert code == 0 and done["output"] == "v2"


def test_the_server_imports_the_version_a_session_records_beside_another(here: Path) -> None:
    """`tarry serve` that knows another version of a session's flow imports the one the
    session records, instead of refusing it."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient
    from tarry.drivers.http import create_app
    from tarry.drivers.worker import load_flow

    store = f"sqlite:///{here / 'runs.db'}"
    out = Runtime(store=store).run(load_flow("jobs:job"), meta={"flow_ref": "jobs:job"})
    server = Runtime(store=store, flows=[load_flow("jobs_v2:job")])
    api = TestClient(
        create_app(server), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 50000)
    )
    r = api.post(f"/api/sessions/{out.session_id}/resume", json={"value": True})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "paused" and r.json()["pause"]["path"] == ["again"]
