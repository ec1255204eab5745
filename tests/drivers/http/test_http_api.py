"""The HTTP API added for operators: starting runs, paging, stats of a period and its timeline,
flow structure, replay, named users (actor and Gate `by`), abort from another process."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import tarry
from tarry import Branch, Flow, ForEach, Gate, Graph, ManualClock, Parallel, Route, Sleep, Wait

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402
from support import WAIT, wait_until  # noqa: E402
from tarry.drivers.drive.drive import TICK  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402
from tarry.drivers.http.users import LoginLimit, UsersError, parse_users  # noqa: E402

LOCAL = "http://127.0.0.1:8765"
ANN, BOB = "ann-token-1234", "bob-token-5678"
USERS = {"ann": ANN, "bob": BOB}


def double(ctx):
    return ctx.input * 2


def shout(ctx):
    return str(ctx.prev).upper()


APPROVAL = Flow("approval", [double, Gate("approve"), shout], version="2")
SIMPLE = Flow("simple", [double])


def client(rt: tarry.Runtime, **kwargs: Any) -> TestClient:
    return TestClient(create_app(rt, **kwargs), base_url=LOCAL, client=("127.0.0.1", 50000))


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


# --- starting ----------------------------------------------------------------------------------


def test_start_runs_a_registered_flow_until_it_pauses() -> None:
    rt = tarry.Runtime(flows=[APPROVAL, SIMPLE])
    api = client(rt)
    r = api.post("/api/sessions", json={"flow": "simple", "input": 21})
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "ok" and r.json()["output"] == 42
    r = api.post(
        "/api/sessions",
        json={"flow": "approval", "input": 2, "session_id": "job-1", "version": "2"},
    )
    assert r.status_code == 201 and r.json()["status"] == "paused"
    assert r.json()["session_id"] == "job-1"
    assert rt.session("job-1").status == "paused"


def test_start_with_a_session_id_is_idempotent() -> None:
    rt = tarry.Runtime(flows=[APPROVAL, SIMPLE])
    api = client(rt)
    body = {"flow": "approval", "input": 3, "session_id": "once"}
    assert api.post("/api/sessions", json=body).status_code == 201
    events = len(rt.session("once").events())
    again = api.post("/api/sessions", json=body)
    assert again.status_code == 200, again.text
    assert again.json()["session_id"] == "once" and again.json()["status"] == "paused"
    assert len(rt.session("once").events()) == events  # no second run
    for other in ({**body, "input": 4}, {**body, "flow": "simple"}):
        r = api.post("/api/sessions", json=other)
        assert r.status_code == 409 and r.json()["error"] == "SessionExists", r.text
    assert len(rt.session("once").events()) == events
    assert len(rt.sessions()) == 1


@pytest.mark.parametrize(
    "body, status, error",
    [
        ({"flow": "nope"}, 404, "UnknownFlow"),
        ({"flow": "approval", "version": "9"}, 404, "UnknownFlow"),
        ({"input": 1}, 400, "BadRequest"),
        ({"flow": "simple", "extra": 1}, 400, "BadRequest"),
        ({"flow": "simple", "session_id": ""}, 400, "BadRequest"),
        ({"flow": "simple", "session_id": "x" * 300}, 400, "InvalidArgument"),
        ([1], 400, "BadRequest"),
    ],
)
def test_a_refused_start_runs_nothing(body: Any, status: int, error: str) -> None:
    rt = tarry.Runtime(flows=[APPROVAL, SIMPLE])
    r = client(rt).post("/api/sessions", json=body)
    assert (r.status_code, r.json()["error"]) == (status, error), r.text
    assert rt.sessions() == []


# --- reading -----------------------------------------------------------------------------------


def test_sessions_page_by_cursor_with_search() -> None:
    clock = ManualClock()
    rt = tarry.Runtime(flows=[APPROVAL, SIMPLE], clock=clock)
    for i in range(5):
        clock.advance(1)
        rt.run(SIMPLE, 1, session_id=f"s-{i}")
    clock.advance(1)
    rt.run(APPROVAL, 1, session_id="gated")
    api = client(rt)
    first = api.get("/api/sessions", params={"limit": 4}).json()
    assert [s["session_id"] for s in first["sessions"]] == ["gated", "s-4", "s-3", "s-2"]
    assert first["limit"] == 4 and first["next_cursor"]
    rest = api.get("/api/sessions", params={"limit": 4, "cursor": first["next_cursor"]}).json()
    assert [s["session_id"] for s in rest["sessions"]] == ["s-1", "s-0"]
    assert rest["next_cursor"] is None
    found = api.get("/api/sessions", params={"q": "appro"}).json()["sessions"]
    assert [s["session_id"] for s in found] == ["gated"]
    found = api.get("/api/sessions", params={"q": "s-", "status": "completed", "limit": 2}).json()
    assert [s["session_id"] for s in found["sessions"]] == ["s-4", "s-3"]
    old = api.get("/api/sessions", params={"limit": 2, "offset": 4}).json()
    assert [s["session_id"] for s in old["sessions"]] == ["s-1", "s-0"]
    bad = api.get("/api/sessions", params={"cursor": "garbage"})
    assert bad.status_code == 400 and "cursor" in bad.json()["message"]


def test_stats_of_a_period_and_the_timeline() -> None:
    clock = ManualClock()
    start = clock.now()
    rt = tarry.Runtime(flows=[APPROVAL, SIMPLE], clock=clock)
    rt.run(SIMPLE, 1)
    clock.advance(3600)
    rt.run(APPROVAL, 1)
    rt.run(SIMPLE, 2)
    api = client(rt)
    assert api.get("/api/stats").json()["by_status"] == {"completed": 2, "paused": 1}
    iso = start.replace(microsecond=0).timestamp() + 1800
    later = api.get("/api/stats", params={"since": str(iso)}).json()
    assert later["by_status"] == {"completed": 1, "paused": 1}
    assert set(later) >= {"by_status", "nodes", "metrics"}
    until = api.get("/api/stats", params={"until": "1970-01-01T00:00:00Z"}).json()
    assert until["by_status"] == {}
    assert api.get("/api/stats", params={"since": "yesterday"}).status_code == 400
    line = api.get(
        "/api/stats/timeline",
        params={
            "since": start.isoformat(),
            "until": (start.timestamp() + 7200),
            "buckets": 2,
        },
    )
    assert line.status_code == 200, line.text
    body = line.json()
    assert [b["by_status"] for b in body["buckets"]] == [
        {"completed": 1},
        {"completed": 1, "paused": 1},
    ]
    assert (
        body["buckets"][0]["start"] == body["since"] and body["buckets"][1]["end"] == body["until"]
    )
    default = api.get("/api/stats/timeline").json()
    assert len(default["buckets"]) == 24
    assert sum(sum(b["by_status"].values()) for b in default["buckets"]) == 3
    assert api.get("/api/stats/timeline", params={"buckets": 0}).status_code == 400


def test_flows_and_their_structure() -> None:
    def pick(ctx):
        return Route("done", 1)

    rich = Flow(
        "rich",
        [
            ForEach("items", [1, 2], [double, Wait("w")]),
            Branch("b", lambda ctx: True, [shout], Sleep("nap", 1)),
            Graph("g", [pick, shout], "pick", {"pick": {"done": "shout"}, "shout": {}}),
            Parallel("p", {"left": [double], "right": [shout]}),
            Gate("ok"),
        ],
    )
    rt = tarry.Runtime(flows=[rich, SIMPLE])
    api = client(rt)
    flows = api.get("/api/flows").json()["flows"]
    assert {f["name"] for f in flows} == {"rich", "simple"}
    assert all(set(f) == {"name", "version", "fingerprint"} for f in flows)
    r = api.get("/api/flows/rich").json()
    assert r["fingerprint"] == rich.fingerprint
    tree = r["structure"]
    assert (tree["name"], tree["kind"], tree["path"]) == ("rich", "flow", [])
    kinds = {c["name"]: c["kind"] for c in tree["children"]}
    assert kinds == {"items": "foreach", "b": "branch", "g": "graph", "p": "parallel", "ok": "gate"}
    items = tree["children"][0]
    assert [(c["name"], c["kind"], c["path"]) for c in items["children"]] == [
        ("double", "step", ["items", "double"]),
        ("w", "wait", ["items", "w"]),
    ]
    branch, graph, parallel = tree["children"][1:4]
    assert branch["sides"] == {"then": ["shout"], "otherwise": ["nap"]}
    assert branch["children"][1]["kind"] == "sleep"
    assert graph["routes"] == [{"from": "pick", "to": "shout", "when": "done"}]
    assert parallel["children"][0]["path"] == ["p", "left", "double"]
    assert rich.find(tuple(parallel["children"][0]["path"])) is not None
    assert api.get("/api/flows/nope").status_code == 404
    assert api.get(f"/api/flows/rich?fingerprint={rich.fingerprint}").status_code == 200


def test_replay_sends_the_stored_events_and_ends() -> None:
    rt = tarry.Runtime(flows=[APPROVAL])
    out = rt.run(APPROVAL, 1)
    rt.resume(out.token, True)
    seqs = [e.seq for e in rt.session(out.session_id).events()]
    api = client(rt)
    with api.stream("GET", f"/api/sessions/{out.session_id}/replay?speed=max") as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    ids = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]
    assert ids == seqs
    assert text.rstrip().endswith(f'event: end\ndata: {{"last_seq":{seqs[-1]}}}')
    with api.stream("GET", f"/api/sessions/{out.session_id}/replay?speed=0&after=3") as r:
        text = "".join(r.iter_text())
    assert [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")] == seqs[3:]
    assert api.get(f"/api/sessions/{out.session_id}/replay?speed=-1").status_code == 400
    assert api.get("/api/sessions/nope/replay").status_code == 404


def test_replay_keeps_the_gaps_divided_by_the_speed_and_capped() -> None:
    import asyncio
    import datetime as dt

    from tarry.drivers.http.replay import MAX_GAP, replay_feed
    from tarry.drivers.http.sse import Streams
    from tarry.engine.state.events import Event

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    gaps = [0, 10, 15, 3615]  # seconds since t0
    events = [
        Event(i + 1, "node.started", "s", t0 + dt.timedelta(seconds=g), (), {})
        for i, g in enumerate(gaps)
    ]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def collect() -> list[bytes]:
        read = lambda after, limit: [e for e in events if e.seq > after][:limit]  # noqa: E731
        return [m async for m in replay_feed(read, 0, 10.0, Streams(), page=2, sleep=sleep)]

    sent = asyncio.run(collect())
    assert slept == [1.0, 0.5, MAX_GAP]
    assert sent[-1].startswith(b"event: end")


# --- users -------------------------------------------------------------------------------------


def test_users_parse_from_lines_or_commas_and_refuse_bad_ones() -> None:
    assert parse_users("# ops\nann:ann-token-1234\n\n bob : bob-token-5678 \n", "f") == USERS
    assert parse_users("ann:ann-token-1234,bob:bob-token-5678", "env") == USERS
    for bad, words in (
        ("ann", "name:token"),
        ("ann:short", "at least"),
        ("a b:xxxxxxxxxx", "name"),
        ("ann:xxxxxxxxxx\nann:yyyyyyyyyy", "twice"),
        ("ann:xxxxxxxxxx\nbob:xxxxxxxxxx", "another"),
        ("# none", "no user"),
    ):
        with pytest.raises(UsersError, match=words):
            parse_users(bad, "f")


def test_each_user_logs_in_and_is_recorded_as_the_actor() -> None:
    rt = tarry.Runtime(flows=[APPROVAL, SIMPLE])
    api = client(rt, users=USERS)
    assert api.get("/api/me").status_code == 401
    assert api.get("/api/me", headers=bearer(BOB)).json() == {"user": "bob"}
    r = api.post("/login", json={"token": ANN})
    assert r.status_code == 204
    cookie = r.headers["set-cookie"]
    assert "Max-Age=43200" in cookie and ANN not in cookie
    assert api.get("/api/me").json() == {"user": "ann"}
    started = api.post("/api/sessions", json={"flow": "approval", "input": 1}).json()
    sid = started["session_id"]
    # A bare bool and a decision without `by` both become ann's decision.
    r = api.post(f"/api/sessions/{sid}/resume", json={"value": True})
    assert r.status_code == 200 and r.json()["status"] == "ok", r.text
    events = rt.session(sid).events()
    assert [e.data.get("actor") for e in events if e.type in ("run.started", "run.resumed")] == [
        "ann",
        "ann",
    ]
    (resumed,) = [e for e in events if e.type == "run.resumed"]
    assert resumed.data["value"] == {"approved": True, "by": "ann"}
    # bob cancels another session by bearer token
    other = rt.run(APPROVAL, 1)
    api.post(f"/api/sessions/{other.session_id}/cancel", headers=bearer(BOB))
    assert rt.session(other.session_id).events()[-1].data == {"actor": "bob"}
    # logout: the cookie is cleared, the next request is refused
    assert api.post("/logout").status_code == 204
    assert api.get("/api/me").status_code == 401


def test_a_decision_in_another_users_name_is_refused_and_changes_nothing() -> None:
    rt = tarry.Runtime(flows=[APPROVAL])
    out = rt.run(APPROVAL, 1)
    api = client(rt, users=USERS)
    r = api.post(
        f"/api/sessions/{out.session_id}/resume",
        json={"value": {"approved": True, "by": "bob"}},
        headers=bearer(ANN),
    )
    assert r.status_code == 422 and "ann" in r.json()["message"], r.text
    r = api.post(
        "/api/resume",
        json={"token": out.token, "value": {"approved": False, "by": "x"}},
        headers=bearer(ANN),
    )
    assert r.status_code == 422
    assert rt.session(out.session_id).status == "paused"
    assert rt.session(out.session_id).outcome.token == out.token
    r = api.post(
        "/api/resume",
        json={"token": out.token, "value": {"approved": False, "comment": "no"}},
        headers=bearer(ANN),
    )
    assert r.status_code == 200
    (resumed,) = [e for e in rt.session(out.session_id).events() if e.type == "run.resumed"]
    assert resumed.data["value"] == {"approved": False, "comment": "no", "by": "ann"}


def test_the_single_token_user_is_admin() -> None:
    rt = tarry.Runtime(flows=[SIMPLE])
    api = client(rt, token="single-token")
    assert api.get("/api/me", headers=bearer("single-token")).json() == {"user": "admin"}
    assert client(rt).get("/api/me").json() == {"user": None}  # no users: loopback only


def test_failed_logins_are_rate_limited_per_client() -> None:
    rt = tarry.Runtime()
    api = client(rt, users=USERS)
    for _ in range(5):
        assert api.post("/login", json={"token": "guess-guess"}).status_code == 401
    r = api.post("/login", json={"token": ANN})  # even the right token waits
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    other = TestClient(create_app(rt, users=USERS), base_url=LOCAL, client=("127.0.0.2", 1))
    assert other.post("/login", json={"token": ANN}).status_code == 204
    limit = LoginLimit(2, 60.0)
    limit.failed("a", now=0.0)
    limit.failed("a", now=1.0)
    assert limit.retry_after("a", now=2.0) == 58
    assert limit.retry_after("a", now=60.5) == 0  # the first failure left the window


def test_an_expired_or_forged_cookie_is_refused() -> None:
    from tarry.drivers.http.users import Users

    users = Users(USERS, session_seconds=60)
    cookie = users.cookie("ann", now=1000.0)
    assert users.by_cookie(cookie, now=1059.0) == "ann"
    assert users.by_cookie(cookie, now=1060.0) is None
    name, expires, mac = cookie.split(".")
    assert users.by_cookie(f"bob.{expires}.{mac}", now=1000.0) is None
    assert users.by_cookie(f"ann.{int(expires) + 999}.{mac}", now=1000.0) is None
    assert users.by_cookie("garbage", now=1000.0) is None


# --- abort and cancel of a session running in another process -----------------------------------


def _hold(ctx):
    # The first item holds until the test says go: the session is running meanwhile.
    path = ctx.input
    open(path, "a").close()
    if ctx.index == 0:
        wait_until(lambda: _exists(path + ".go"), "the test's go")
    return ctx.index


def _exists(path: str) -> bool:
    import os

    return os.path.exists(path)


HELD = Flow("held", [ForEach("items", [0, 1, 2], _hold)])


@pytest.mark.parametrize(
    "action, body, status",
    [
        ("abort", {}, "paused"),
        ("abort", {"resumable": False}, "cancelled"),
        ("cancel", None, "cancelled"),
    ],
)
def test_abort_and_cancel_reach_a_session_run_by_another_runtime(
    tmp_path, ticks, action, body, status
):
    """The server's Runtime and the running one share only the store (as two processes do)."""
    url = f"sqlite:///{tmp_path / 'tarry.db'}"
    runner = tarry.Runtime(store=url, flows=[HELD], lease=3.0)
    server = tarry.Runtime(store=url, flows=[HELD])
    marker = str(tmp_path / "reached")
    result: list[tarry.Outcome] = []
    thread = threading.Thread(target=lambda: result.append(runner.run(HELD, marker)))
    thread.start()
    wait_until(lambda: _exists(marker), "the run's first item")
    (sid,) = [s.session_id for s in server.sessions(status="running")]
    api = client(server, users=USERS)
    r = api.post(f"/api/sessions/{sid}/{action}", json=body, headers=bearer(ANN))
    assert r.status_code in (200, 202), r.text
    # The running drive reads stored requests at its ticks (a TICK apart), and then stops at
    # its next checkpoint: the step is held while the tick comes (moved by hand).
    ticks.advance(TICK)
    open(marker + ".go", "w").close()
    thread.join(WAIT)
    assert not thread.is_alive()
    assert server.session(sid).status == status
    assert (
        json.loads(json.dumps(api.get(f"/api/sessions/{sid}", headers=bearer(ANN)).json()))[
            "status"
        ]
        == status
    )
