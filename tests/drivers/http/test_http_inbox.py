"""GET /api/inbox: the Gates waiting for a person, of every session, filtered by assignee."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tarry
from tarry import Flow, ForEach, Gate, Wait

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402
from tarry.drivers.reading.inbox import inbox  # noqa: E402

FOR_ANN = Flow("for_ann", [Gate("sign_off", "ship release 7?", assignee="ann")])
FOR_BOB = Flow("for_bob", [Gate("review", "check the refund", assignee="bob")])
ANYONE = Flow("anyone", [Gate("ok", "anyone may decide")])
MACHINE = Flow("machine", [Wait("settlement")])
OWNED = Flow(
    "owned",
    [
        ForEach(
            "tickets",
            [{"owner": "ann"}, {"owner": "bob"}, {"owner": "ann"}],
            [Gate("triage", "triage it", assignee=lambda ctx: ctx.item["owner"])],
            concurrency=3,
        )
    ],
)


def client(rt: tarry.Runtime) -> TestClient:
    return TestClient(create_app(rt), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 1))


@pytest.fixture
def rt(tmp_path: Path) -> tarry.Runtime:
    rt = tarry.Runtime(
        store=f"sqlite:///{tmp_path / 'inbox.db'}", flows=[FOR_ANN, FOR_BOB, ANYONE, MACHINE, OWNED]
    )
    for flow in (FOR_ANN, FOR_BOB, ANYONE, MACHINE, OWNED):
        assert rt.run(flow).paused
    return rt


def sessions_of(body: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    return sorted((g["flow"], tuple(g["path"])) for g in body["gates"])


def test_every_waiting_gate_and_none_of_the_other_waits(rt: tarry.Runtime) -> None:
    body = client(rt).get("/api/inbox").json()
    assert sessions_of(body) == [
        ("anyone", ("ok",)),
        ("for_ann", ("sign_off",)),
        ("for_bob", ("review",)),
        ("owned", ("tickets", 0, "triage")),
        ("owned", ("tickets", 1, "triage")),
        ("owned", ("tickets", 2, "triage")),
    ]
    assert body["assignees"] == {"ann": 3, "bob": 2, "": 1}
    assert body["complete"] is True and body["more"] is False and body["scanned"] == 6
    gate = next(g for g in body["gates"] if g["flow"] == "for_ann")
    assert gate["message"] == "ship release 7?" and gate["assignee"] == "ann"
    assert gate["since"] is not None
    text = str(body)
    assert all(w.token not in text for w in rt.store.waiting(kind="human"))  # no token shown


def test_filtered_by_assignee_or_unassigned(rt: tarry.Runtime) -> None:
    api = client(rt)
    ann = api.get("/api/inbox?assignee=ann").json()
    assert sessions_of(ann) == [
        ("for_ann", ("sign_off",)),
        ("owned", ("tickets", 0, "triage")),
        ("owned", ("tickets", 2, "triage")),
    ]
    assert ann["assignees"] == {"ann": 3, "bob": 2, "": 1}  # the menu still knows everyone
    assert sessions_of(api.get("/api/inbox?unassigned=true").json()) == [("anyone", ("ok",))]
    assert api.get("/api/inbox?assignee=carol").json()["gates"] == []
    both = api.get("/api/inbox?assignee=bob&unassigned=true").json()  # bob's, and anyone's
    assert sessions_of(both) == [
        ("anyone", ("ok",)),
        ("for_bob", ("review",)),
        ("owned", ("tickets", 1, "triage")),
    ]
    one = api.get("/api/inbox?assignee=ann&limit=1").json()
    assert len(one["gates"]) == 1 and one["more"] is True


def test_a_decided_gate_leaves_the_inbox(rt: tarry.Runtime) -> None:
    (sid,) = [s.session_id for s in rt.sessions(flow="for_bob")]
    api = client(rt)
    assert (
        api.post(f"/api/sessions/{sid}/resume", json={"value": {"approved": True}}).json()["status"]
        == "ok"
    )
    assert sessions_of(api.get("/api/inbox?assignee=bob").json()) == [
        ("owned", ("tickets", 1, "triage"))
    ]


def test_the_scan_is_bounded(rt: tarry.Runtime) -> None:
    page = inbox(rt.store, scan=4)
    assert page.scanned == 4 and page.complete is False
    assert len(page.gates) == 4
    assert inbox(rt.store, scan=6).complete is True


def test_bad_requests(rt: tarry.Runtime) -> None:
    api = client(rt)
    for query in ("unassigned=yes", "limit=0", "limit=501"):
        r = api.get(f"/api/inbox?{query}")
        assert r.status_code == 400 and r.json()["error"] == "BadRequest", query
    assert api.get("/api/inbox?assignee=a%00b").status_code == 400
