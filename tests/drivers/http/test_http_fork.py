"""`POST /api/sessions/{sid}/fork`: a new session from an existing one's past, over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
import tarry
from tarry import Flow, Gate

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402

LOCAL = "http://127.0.0.1:8765"
RUNS: list[str] = []


def double(ctx: Any) -> int:
    RUNS.append("double")
    return ctx.input * 2


def shout(ctx: Any) -> str:
    RUNS.append("shout")
    return str(ctx.outputs["double"]).upper()


APPROVAL = Flow("approval", [double, Gate("approve"), shout])


def client(rt: tarry.Runtime) -> TestClient:
    return TestClient(create_app(rt), base_url=LOCAL, client=("127.0.0.1", 50000))


def test_fork_by_seq_or_path_answers_the_new_sessions_outcome() -> None:
    rt = tarry.Runtime(flows=[APPROVAL])
    api = client(rt)
    out = rt.run(APPROVAL, 21, session_id="orig")
    rt.resume(out.token, True)
    RUNS.clear()
    events = rt.session("orig").events()
    at = next(e.seq for e in events if e.type == "node.completed" and e.path == ("double",))
    r = api.post("/api/sessions/orig/fork", json={"at_seq": at, "session_id": "copy"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["status"] == "paused" and body["session_id"] == "copy"
    assert body["pause"]["path"] == ["approve"] and body["meta"]["trigger"] == "fork"
    assert not RUNS
    assert rt.session("copy").forked_from == {"session_id": "orig", "seq": at}
    r = api.post("/api/sessions/copy/resume", json={"value": True})
    assert r.status_code == 200 and r.json()["output"] == "42" and RUNS == ["shout"]

    r = api.post("/api/sessions/orig/fork", json={"at": ["shout"]})
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "ok" and r.json()["output"] == "42"
    assert r.json()["session_id"] not in ("orig", "copy")
    got = api.get(f"/api/sessions/{r.json()['session_id']}")
    assert got.status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({}, 400, "InvalidArgument"),
        ({"at_seq": 1, "at": ["shout"]}, 400, "InvalidArgument"),
        ({"at_seq": 999}, 400, "InvalidArgument"),
        ({"at_seq": "2"}, 400, "InvalidArgument"),
        ({"at": ["nowhere"]}, 400, "InvalidArgument"),
        ({"at_seq": 2, "session_id": 5}, 400, "BadRequest"),
        ({"at_seq": 2, "extra": 1}, 400, None),
        ({"at_seq": 2, "session_id": "orig"}, 409, "SessionExists"),
    ],
)
def test_a_refused_fork_writes_nothing(body: Any, status: int, error: str | None) -> None:
    rt = tarry.Runtime(flows=[APPROVAL])
    api = client(rt)
    rt.run(APPROVAL, 1, session_id="orig")
    events = rt.session("orig").events()
    r = api.post("/api/sessions/orig/fork", json=body)
    assert r.status_code == status, r.text
    if error is not None:
        assert r.json()["error"] == error
    assert len(rt.sessions()) == 1 and rt.session("orig").events() == events


def test_fork_of_an_unknown_session_is_404() -> None:
    api = client(tarry.Runtime(flows=[APPROVAL]))
    r = api.post("/api/sessions/nope/fork", json={"at_seq": 1})
    assert r.status_code == 404 and r.json()["error"] == "UnknownSession"
