"""A session's JSON names its parent and its children (counted by status, the first listed)."""

from __future__ import annotations

from typing import Any

import pytest
import tarry
from tarry import Child, Flow, ForEach, Wait

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402

LOCAL = "http://127.0.0.1:8765"

INNER = Flow("inner", [lambda ctx: ctx.input, Wait("w", key=lambda ctx: f"k/{ctx.input}")])
PARENT = Flow(
    "parent",
    [ForEach("items", [0, 1, 2], Child("c", INNER, input=lambda ctx: ctx.item), concurrency=None)],
)


def test_a_parent_lists_its_children_by_status_and_a_child_names_its_parent() -> None:
    rt = tarry.Runtime(flows=[PARENT])
    api = TestClient(create_app(rt), base_url=LOCAL, client=("127.0.0.1", 50000))
    rt.run(PARENT, None, session_id="p")
    rt.resume_due()  # the queued children run, and wait on their keys
    rt.deliver("k/1", "done")  # one of them ends
    body: Any = api.get("/api/sessions/p").json()
    assert body["parent"] is None
    assert body["children"]["total"] == 3
    assert body["children"]["by_status"] == {"paused": 2, "completed": 1}
    assert [c["session_id"] for c in body["children"]["listed"]] == [
        "p.items.0.c",
        "p.items.1.c",
        "p.items.2.c",
    ]
    child = api.get("/api/sessions/p.items.1.c")
    assert child.status_code == 200, child.text
    assert child.json()["parent"] == "p"
    assert child.json()["children"] == {"total": 0, "by_status": {}, "listed": []}
