"""The monitor's view of a session's open provider batches: GET /api/sessions/{sid}/batches."""

from __future__ import annotations

import pytest
from batchflows import openai_flow
from tarry import Flow, Runtime, Wait
from tarry.batches import OpenAIBatch

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402

LOCAL = "http://127.0.0.1:8765"


def client(rt: Runtime) -> TestClient:
    return TestClient(create_app(rt), base_url=LOCAL, client=("127.0.0.1", 50000))


def test_a_sessions_open_batches(fake, openai_client):
    rt = Runtime(batches={"openai": OpenAIBatch(openai_client, max_requests=2)})
    out = rt.run(openai_flow, ["a", "b", "c"])
    other = rt.run(Flow("plain", [Wait("w")]))
    api = client(rt)
    assert api.get(f"/api/sessions/{out.session_id}/batches").json() == {"batches": []}
    rt.poll()
    got = api.get(f"/api/sessions/{out.session_id}/batches").json()["batches"]
    assert sorted(b["provider_id"] for b in got) == sorted(fake.batches)
    assert {b["status"] for b in got} == {"in_progress"} and sum(b["total"] for b in got) == 3
    assert got[0]["counts"] == {"completed": 0, "failed": 0, "total": got[0]["total"]}
    assert api.get(f"/api/sessions/{other.session_id}/batches").json() == {"batches": []}
    assert api.get("/api/sessions/nope/batches").status_code == 404
    fake.complete()
    rt.poll()
    assert api.get(f"/api/sessions/{out.session_id}/batches").json() == {"batches": []}


def test_the_monitor_page_has_the_panel():
    page = client(Runtime()).get("/").text
    assert 'id="batches-card"' in page and "/batches" in page
