"""`GET /api/sessions/{sid}/logs`: a session's captured log records, a page at a time."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import tarry

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402

log = logging.getLogger("app.server")
T0 = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def app_logs_enabled() -> Iterator[None]:
    log.setLevel(logging.DEBUG)
    yield
    log.setLevel(logging.NOTSET)


def noisy(ctx: Any) -> None:
    for i in range(6):
        (log.warning if i % 2 else log.info)("line %d", i)


def client(rt: tarry.Runtime, token: str | None = None) -> TestClient:
    return TestClient(
        create_app(rt, token=token), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 50000)
    )


def session(**runtime: Any) -> tuple[tarry.Runtime, str]:
    rt = tarry.Runtime(clock=tarry.ManualClock(T0), **runtime)
    return rt, rt.run(tarry.Flow("noisy", [noisy])).session_id


def test_logs_are_paged_and_filtered_by_level() -> None:
    rt, sid = session()
    api = client(rt)
    body = api.get(f"/api/sessions/{sid}/logs").json()
    assert body["session_id"] == sid
    assert body["logs"][1] == {
        "seq": 2,
        "at": T0.isoformat(),
        "level": "WARNING",
        "levelno": 30,
        "logger": "app.server",
        "message": "line 1",
        "path": ["noisy"],
    }
    assert [r["seq"] for r in body["logs"]] == [1, 2, 3, 4, 5, 6]
    assert (body["last_seq"], body["more"], body["dropped"]) == (6, False, 0)
    page = api.get(f"/api/sessions/{sid}/logs", params={"level": "WARNING", "limit": 2}).json()
    assert [r["seq"] for r in page["logs"]] == [2, 4]
    assert (page["last_seq"], page["more"]) == (4, True)
    rest = api.get(
        f"/api/sessions/{sid}/logs", params={"level": "30", "after": page["last_seq"]}
    ).json()
    assert [r["seq"] for r in rest["logs"]] == [6] and rest["more"] is False
    empty = api.get(f"/api/sessions/{sid}/logs", params={"after": 6}).json()
    assert (empty["logs"], empty["last_seq"], empty["more"]) == ([], 6, False)


def test_dropped_records_are_counted() -> None:
    rt, sid = session(max_logs=4)
    body = client(rt).get(f"/api/sessions/{sid}/logs").json()
    assert [r["seq"] for r in body["logs"]] == [3, 4, 5, 6]
    assert body["dropped"] == 2


def test_bad_requests_are_refused() -> None:
    rt, sid = session()
    api = client(rt)
    r = api.get("/api/sessions/nope/logs")
    assert r.status_code == 404 and r.json()["error"] == "UnknownSession"
    for params in ({"level": "LOUD"}, {"after": "-1"}, {"limit": "0"}, {"limit": "x"}):
        r = api.get(f"/api/sessions/{sid}/logs", params=params)
        assert r.status_code == 400, params
        assert r.json()["message"]


def test_logs_need_the_token_when_one_is_set() -> None:
    rt, sid = session()
    api = client(rt, token="s3cret-monitor-token")
    assert api.get(f"/api/sessions/{sid}/logs").status_code == 401
    ok = api.get(
        f"/api/sessions/{sid}/logs", headers={"authorization": "Bearer s3cret-monitor-token"}
    )
    assert ok.status_code == 200 and len(ok.json()["logs"]) == 6
