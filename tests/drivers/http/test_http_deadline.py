"""The session JSON of a session with a deadline and a cleanup (Flow(deadline=, cleanup=))."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import tarry
from tarry import Flow, ManualClock

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402


def boom(ctx):
    raise ValueError("body")


def bad_cleanup(ctx):
    raise RuntimeError("cleanup")


def test_the_session_json_shows_the_deadline_ending_and_cleanup_error() -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    flow = Flow("http_dl", [boom], deadline=60, cleanup=bad_cleanup)
    rt = tarry.Runtime(clock=clock, flows=[flow])
    out = rt.run(flow)
    api = TestClient(create_app(rt), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 1))
    r = api.get(f"/api/sessions/{out.session_id}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["deadline"].startswith("2030-01-01T00:01:00")
    assert body["ending"] == "failed"
    assert body["cleanup_error"]["type"] == "RuntimeError"
    assert body["error"]["type"] == "ValueError"
    # its cleanup ran: the body does not run again
    assert body["actions"]["resume"] is False and body["actions"]["skip"] is False
    assert body["actions"]["cancel"] is True
    plain = rt.run(Flow("http_plain", [lambda ctx: 1]))
    body = api.get(f"/api/sessions/{plain.session_id}").json()
    assert (body["deadline"], body["ending"], body["cleanup_error"]) == (None, None, None)
