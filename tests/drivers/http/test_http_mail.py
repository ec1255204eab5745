"""The mailbox over HTTP: `GET /api/mail` (keys holding queued messages, paged by key) and
`DELETE /api/mail/{key}` (drop a key's messages), behind the same guard as every /api route."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import tarry
from tarry import Flow, ManualClock, Wait

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402

LOCAL = "http://127.0.0.1:8765"
TOKEN = "mail-test-token"
QUEUED_AT = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
KEYS = ["batch-7/a", "batch-7/b", "batch-7/c", "batch-8/a", "other"]


@pytest.fixture(params=["memory", "sqlite"])
def rt(request: pytest.FixtureRequest, tmp_path: Path) -> tarry.Runtime:
    store = f"sqlite:///{tmp_path / 'runs.db'}" if request.param == "sqlite" else None
    rt = tarry.Runtime(store=store, clock=ManualClock(QUEUED_AT))
    for key in KEYS:
        rt.deliver(key, {"for": key})
    rt.deliver("batch-7/a", "a second message")
    return rt


def client(rt: tarry.Runtime, **kwargs: Any) -> TestClient:
    return TestClient(create_app(rt, **kwargs), base_url=LOCAL, client=("127.0.0.1", 50000))


# --- GET /api/mail -----------------------------------------------------------------------------


def test_get_lists_the_keys_that_hold_messages(rt: tarry.Runtime) -> None:
    r = client(rt).get("/api/mail")
    assert r.status_code == 200, r.text
    body = r.json()
    assert [m["key"] for m in body["mail"]] == KEYS
    assert body["mail"][0] == {"key": "batch-7/a", "count": 2, "oldest_at": QUEUED_AT.isoformat()}
    assert body["next_after"] is None


def test_get_pages_by_key_with_after(rt: tarry.Runtime) -> None:
    api = client(rt)
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        params = {"limit": 2} if after is None else {"limit": 2, "after": after}
        body = api.get("/api/mail", params=params).json()
        assert len(body["mail"]) <= 2
        seen += [m["key"] for m in body["mail"]]
        pages += 1
        after = body["next_after"]
        if after is None:
            break
        assert after == seen[-1]
    assert seen == KEYS and pages == 3
    # A last page that is exactly full says there is no more.
    body = api.get("/api/mail", params={"limit": 5}).json()
    assert len(body["mail"]) == 5 and body["next_after"] is None


def test_get_filters_by_prefix_taken_literally(rt: tarry.Runtime) -> None:
    api = client(rt)
    body = api.get("/api/mail", params={"prefix": "batch-7/"}).json()
    assert [m["key"] for m in body["mail"]] == ["batch-7/a", "batch-7/b", "batch-7/c"]
    page = api.get("/api/mail", params={"prefix": "batch-7/", "after": "batch-7/a", "limit": 1})
    assert page.json() == {
        "mail": [{"key": "batch-7/b", "count": 1, "oldest_at": QUEUED_AT.isoformat()}],
        "next_after": "batch-7/b",
    }
    assert api.get("/api/mail", params={"prefix": "batch-_"}).json()["mail"] == []
    assert api.get("/api/mail", params={"prefix": "%"}).json()["mail"] == []
    assert len(api.get("/api/mail", params={"prefix": ""}).json()["mail"]) == len(KEYS)


def test_a_message_a_wait_took_is_not_listed(rt: tarry.Runtime) -> None:
    out = rt.run(Flow("takes", [Wait("w", key="batch-7/b")]))
    assert out.ok and out.output == {"for": "batch-7/b"}
    keys = [m["key"] for m in client(rt).get("/api/mail").json()["mail"]]
    assert "batch-7/b" not in keys


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("limit=0", "?limit="),
        ("limit=1001", "?limit="),
        ("limit=ten", "?limit="),
        ("after=" + "x" * 513, "?after="),
        ("after=a%00b", "?after="),
        ("prefix=" + "x" * 513, "?prefix="),
        ("prefix=a%00", "?prefix="),
    ],
)
def test_get_refuses_a_bad_parameter(rt: tarry.Runtime, query: str, named: str) -> None:
    r = client(rt).get(f"/api/mail?{query}")
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "BadRequest"
    assert r.json()["message"].startswith(named), r.json()


# --- DELETE /api/mail/{key} --------------------------------------------------------------------


def test_delete_drops_a_keys_messages(rt: tarry.Runtime) -> None:
    api = client(rt)
    r = api.delete("/api/mail/batch-7/a")  # a key may hold slashes
    assert r.status_code == 200, r.text
    assert r.json() == {"discarded": 2}
    assert api.delete("/api/mail/batch-7%2Fb").json() == {"discarded": 1}  # or encode them
    assert api.delete("/api/mail/batch-7/a").json() == {"discarded": 0}
    assert api.delete("/api/mail/never-used").json() == {"discarded": 0}
    keys = [m["key"] for m in api.get("/api/mail").json()["mail"]]
    assert keys == ["batch-7/c", "batch-8/a", "other"]
    assert rt.mailbox(prefix="batch-7/") == rt.mailbox(prefix="batch-7/c")


def test_delete_of_a_key_with_spaces_and_unicode(rt: tarry.Runtime) -> None:
    rt.deliver("día uno/ü", 1)
    r = client(rt).delete("/api/mail/d%C3%ADa%20uno%2F%C3%BC")
    assert r.status_code == 200 and r.json() == {"discarded": 1}


@pytest.mark.parametrize("path", ["/api/mail/", "/api/mail/" + "x" * 513, "/api/mail/a%00b"])
def test_delete_refuses_a_bad_key(rt: tarry.Runtime, path: str) -> None:
    r = client(rt).delete(path)
    assert r.status_code == 400, r.text
    if "%00" in path:  # refused at the edge, before any route (edge.py)
        assert r.json()["error"] == "BadRequest" and "NUL" in r.json()["message"]
    else:
        assert r.json()["error"] == "InvalidArgument"
        assert "key" in r.json()["message"]
    assert sum(m.count for m in rt.mailbox()) == len(KEYS) + 1


def test_delete_refuses_a_body_with_fields(rt: tarry.Runtime) -> None:
    api = client(rt)
    r = api.request("DELETE", "/api/mail/other", json={"key": "batch-7/a"})
    assert r.status_code == 400 and r.json()["error"] == "BadRequest"
    assert api.request("DELETE", "/api/mail/other", json={}).json() == {"discarded": 1}


# --- access ------------------------------------------------------------------------------------


def test_both_routes_need_the_token(rt: tarry.Runtime) -> None:
    api = client(rt, token=TOKEN)
    assert api.get("/api/mail").status_code == 401
    assert api.delete("/api/mail/other").status_code == 401
    assert len(rt.mailbox()) == len(KEYS)
    auth = {"authorization": f"Bearer {TOKEN}"}
    assert len(api.get("/api/mail", headers=auth).json()["mail"]) == len(KEYS)
    assert api.delete("/api/mail/other", headers=auth).json() == {"discarded": 1}


def test_a_cross_origin_delete_is_refused(rt: tarry.Runtime) -> None:
    api = client(rt, token=TOKEN)
    auth = {"authorization": f"Bearer {TOKEN}"}
    other = {**auth, "origin": "http://attacker.example"}
    r = api.delete("/api/mail/other", headers=other)
    assert r.status_code == 403 and r.json()["error"] == "Forbidden"
    assert len(rt.mailbox()) == len(KEYS)
    # Reading is not a change: a cross-origin GET is answered (the token still guards it).
    assert api.get("/api/mail", headers=other).status_code == 200
    same = api.delete("/api/mail/other", headers={**auth, "origin": LOCAL})
    assert same.status_code == 200 and same.json() == {"discarded": 1}
