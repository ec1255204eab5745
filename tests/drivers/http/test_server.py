"""The HTTP API and its event streams, through HTTP only (TestClient, or uvicorn for SSE)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import pytest
import tarry
from support import WAIT, live, wait_until
from tarry import Flow, ForEach, Gate
from tarry.snapshots import MemoryStore

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")

from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app, serve  # noqa: E402

SECRET = "s3cret-monitor-token"
LOCAL = "http://127.0.0.1:8765"


# --- flows -------------------------------------------------------------------------------------


def prepare(ctx):
    return ctx.input or ["a", "b"]


def work(ctx):
    return ctx.item.upper()


def finish(ctx):
    return {"done": ctx.outputs["items"]}


REVIEW = Flow("review", [prepare, ForEach("items", "prepare", [work, Gate("approve")]), finish])


def explode(ctx):
    raise RuntimeError("the lights went out")


def after(ctx):
    return {"after": ctx.prev}


FRAGILE = Flow("fragile", [explode, after])


def work_item(ctx):
    return ctx.item


# --- helpers -----------------------------------------------------------------------------------


def runtime(tmp_path=None) -> tarry.Runtime:
    store = f"sqlite:///{tmp_path / 'tarry.db'}" if tmp_path is not None else None
    return tarry.Runtime(store=store, flows=[REVIEW, FRAGILE])


def client(rt: tarry.Runtime, token: str | None = None, **kwargs: Any) -> TestClient:
    # A loopback peer and Host, as a browser on the same machine would be.
    return TestClient(
        create_app(rt, token=token, **kwargs),
        base_url=LOCAL,
        client=("127.0.0.1", 50000),
    )


def paused(rt: tarry.Runtime, items: list[str] | None = None) -> tarry.Outcome:
    out = rt.run(REVIEW, items)
    assert out.paused
    return out


def failed(rt: tarry.Runtime) -> tarry.Outcome:
    out = rt.run(FRAGILE)
    assert out.failed and out.token
    return out


def unchanged(rt: tarry.Runtime, out: tarry.Outcome) -> None:
    """The session is exactly where `out` left it: same status, token live, no new events."""
    view = rt.session(out.session_id)
    assert view.status == ("paused" if out.paused else "failed")
    assert view.outcome.token == out.token
    assert view.events()[-1].type in ("run.paused", "run.failed")


# --- reading -----------------------------------------------------------------------------------


def test_list_sessions_filters_by_status() -> None:
    rt = runtime()
    p = paused(rt)
    f = failed(rt)
    api = client(rt)
    body = api.get("/api/sessions").json()
    assert {s["session_id"] for s in body["sessions"]} == {p.session_id, f.session_id}
    assert body["limit"] == 50 and body["offset"] == 0
    only = api.get("/api/sessions", params={"status": "paused"}).json()["sessions"]
    assert [(s["session_id"], s["status"], s["flow"]) for s in only] == [
        (p.session_id, "paused", "review")
    ]
    assert (
        api.get("/api/sessions", params={"flow": "fragile"}).json()["sessions"][0]["session_id"]
        == f.session_id
    )
    assert len(api.get("/api/sessions", params={"limit": 1}).json()["sessions"]) == 1


@pytest.mark.parametrize(
    "params, word",
    [({"status": "sleeping"}, "status"), ({"limit": "ten"}, "limit"), ({"offset": "-1"}, "offset")],
)
def test_bad_query_parameters_are_400(params: dict[str, str], word: str) -> None:
    r = client(runtime()).get("/api/sessions", params=params)
    assert r.status_code == 400
    assert word in r.json()["message"]


def test_get_session_shows_stack_pause_and_actions() -> None:
    rt = runtime()
    out = paused(rt)
    body = client(rt).get(f"/api/sessions/{out.session_id}").json()
    assert body["session_id"] == out.session_id
    assert body["status"] == "paused" and body["flow"] == "review"
    [frame] = body["container_stack"]
    assert (frame["kind"], frame["node"], frame["iteration"]) == ("foreach", "items", 0)
    assert frame["path"] == ["items"]
    assert body["pause"]["kind"] == "human"
    assert body["pause"]["path"] == ["items", 0, "approve"]
    assert body["outputs"] == {"prepare": ["a", "b"]}
    assert body["actions"] == {
        "resume": True,
        "cancel": True,
        "skip": False,
        "abort": False,
        "recover": False,
    }
    assert body["token"] == out.token  # the caller is authorized (loopback, no token set)
    assert body["last_seq"] == rt.session(out.session_id).events()[-1].seq


def test_unknown_session_is_404_with_a_json_error() -> None:
    api = client(runtime())
    for r in (
        api.get("/api/sessions/nope"),
        api.get("/api/sessions/nope/events"),
        api.post("/api/sessions/nope/resume", json={"value": True}),
        api.post("/api/sessions/nope/cancel"),
    ):
        assert r.status_code == 404
        assert r.json()["error"] == "UnknownSession"
        assert "nope" in r.json()["message"]


def test_unknown_route_is_a_json_404() -> None:
    r = client(runtime()).get("/api/nothing-here")
    assert r.status_code == 404
    assert r.json()["error"] == "NotFound"


def test_events_are_the_session_log_in_order() -> None:
    rt = runtime()
    out = paused(rt)
    api = client(rt)
    body = api.get(f"/api/sessions/{out.session_id}/events").json()
    seqs = [e["seq"] for e in body["events"]]
    assert seqs == list(range(1, len(seqs) + 1))
    assert body["events"][0]["type"] == "run.started"
    assert body["events"][-1]["type"] == "run.paused"
    assert body["last_seq"] == seqs[-1]
    later = api.get(f"/api/sessions/{out.session_id}/events", params={"after": 3}).json()
    assert [e["seq"] for e in later["events"]] == seqs[3:]
    some = api.get(f"/api/sessions/{out.session_id}/events", params={"after": 1, "limit": 2})
    assert [e["seq"] for e in some.json()["events"]] == [2, 3]


def test_the_page_is_served_at_the_root() -> None:
    r = client(runtime()).get("/")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "tarry" in r.text and "EventSource" in r.text


# --- controls ----------------------------------------------------------------------------------


def test_resume_by_session_id_continues_until_completed() -> None:
    rt = runtime()
    out = paused(rt)
    api = client(rt)
    url = f"/api/sessions/{out.session_id}/resume"
    first = api.post(url, json={"value": {"approved": True, "by": "ann"}})
    assert first.status_code == 200
    assert first.json()["status"] == "paused"
    assert first.json()["pause"]["path"] == ["items", 1, "approve"]
    assert first.json()["token"] and first.json()["token"] != out.token
    second = api.post(url, json={"value": True})
    assert second.status_code == 200, second.text
    assert second.json()["status"] == "ok"
    # Each iteration's output is its last element's: the Gate's decision.
    assert second.json()["output"] == {
        "done": [{"approved": True, "by": "ann"}, {"approved": True}]
    }
    assert rt.session(out.session_id).status == "completed"
    again = api.post(url, json={"value": True})
    assert again.status_code == 409
    assert again.json()["error"] == "SessionNotResumable"


async def _fetch(ctx):
    return {"fetched": ctx.prev}


ASYNC = Flow("async_review", [Gate("approve"), _fetch])


def test_resume_drives_async_steps_to_the_outcome() -> None:
    rt = runtime()
    out = rt.run(ASYNC)  # pauses before the async step is met: a plain outcome
    assert out.paused
    r = client(rt).post(f"/api/sessions/{out.session_id}/resume", json={"value": True})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ok"
    assert r.json()["output"] == {"fetched": {"approved": True}}


def test_resume_imports_the_flow_a_session_recorded(tmp_path, monkeypatch) -> None:
    # `tarry serve` knows no flows; a session started by `tarry run` names its MODULE:FLOW.
    (tmp_path / "served_flows.py").write_text(
        "from tarry import Flow, Gate\n"
        "def done(ctx):\n    return 'done'\n"
        "flow = Flow('served', [Gate('approve'), done])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from served_flows import flow  # type: ignore[import-not-found]

    store = f"sqlite:///{tmp_path / 'tarry.db'}"
    starter = tarry.Runtime(store=store)
    recorded = starter.run(flow, meta={"flow_ref": "served_flows:flow"})
    anonymous = starter.run(flow)
    api = client(tarry.Runtime(store=store))
    r = api.post(f"/api/sessions/{recorded.session_id}/resume", json={"value": True})
    assert r.status_code == 200, r.text
    assert r.json()["output"] == "done"
    # Without a recorded flow reference the server cannot know the flow: 409, nothing changed.
    fresh = client(tarry.Runtime(store=store))
    r = fresh.post(f"/api/sessions/{anonymous.session_id}/resume", json={"value": True})
    assert r.status_code == 409 and r.json()["error"] == "UnknownFlow"
    assert tarry.Runtime(store=store).session(anonymous.session_id).outcome.token == anonymous.token


def test_resume_with_a_rejected_value_is_422_and_changes_nothing() -> None:
    rt = runtime()
    out = paused(rt)
    r = client(rt).post(f"/api/sessions/{out.session_id}/resume", json={"value": "maybe"})
    assert r.status_code == 422
    assert r.json()["error"] == "InvalidResumeValue"
    unchanged(rt, out)


@pytest.mark.parametrize(
    "body, error, words",
    [
        (b"{not json", "MalformedJSON", "not valid JSON"),
        (b'{"value": NaN}', "MalformedJSON", "NaN"),
        (b"\xff\xfe", "MalformedJSON", "not valid JSON"),
        (b"[true]", "BadRequest", "JSON object"),
        (b'{"valeu": true}', "BadRequest", "valeu"),
    ],
)
def test_malformed_bodies_are_400_with_a_clear_message_and_change_nothing(
    body: bytes, error: str, words: str
) -> None:
    rt = runtime()
    out = paused(rt)
    r = client(rt).post(
        f"/api/sessions/{out.session_id}/resume",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    assert r.json()["error"] == error
    assert words in r.json()["message"]
    unchanged(rt, out)


def test_resume_by_token_is_single_use() -> None:
    rt = runtime()
    out = paused(rt, ["x"])
    api = client(rt)
    r = api.post("/api/resume", json={"token": out.token, "value": True})
    assert r.status_code == 200 and r.json()["status"] == "ok"
    again = api.post("/api/resume", json={"token": out.token, "value": True})
    assert again.status_code == 409 and again.json()["error"] == "TokenAlreadyUsed"
    unknown = api.post("/api/resume", json={"token": "tk_nope", "value": True})
    assert unknown.status_code == 404 and unknown.json()["error"] == "UnknownToken"
    missing = api.post("/api/resume", json={"value": True})
    assert missing.status_code == 400 and "token" in missing.json()["message"]


def test_cancel_ends_a_paused_session() -> None:
    rt = runtime()
    out = paused(rt)
    api = client(rt)
    r = api.post(f"/api/sessions/{out.session_id}/cancel")
    assert r.status_code == 200
    assert r.json()["status"] == "error" and r.json()["error"]["type"] == "cancelled"
    assert rt.session(out.session_id).status == "cancelled"
    again = api.post(f"/api/sessions/{out.session_id}/cancel")
    assert again.status_code == 409 and again.json()["error"] == "SessionNotResumable"


def test_skip_a_failed_step_with_an_output() -> None:
    rt = runtime()
    out = failed(rt)
    api = client(rt)
    detail = api.get(f"/api/sessions/{out.session_id}").json()
    assert detail["error"]["type"] == "RuntimeError"
    assert detail["actions"] == {
        "resume": True,
        "cancel": True,
        "skip": True,
        "abort": False,
        "recover": False,
    }
    r = api.post(f"/api/sessions/{out.session_id}/skip", json={"output": 42})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ok" and r.json()["output"] == {"after": 42}
    p = paused(rt)
    refused = api.post(f"/api/sessions/{p.session_id}/skip", json={"output": 1})
    assert refused.status_code == 409
    unchanged(rt, p)


def test_stats_count_sessions_and_nodes() -> None:
    rt = runtime()
    paused(rt)
    failed(rt)
    api = client(rt)
    body = api.get("/api/stats").json()
    assert body["by_status"] == {"paused": 1, "failed": 1}
    assert body["nodes"]["explode"]["failures"] == 1
    assert body["nodes"]["work"]["executions"] == 1
    review = api.get("/api/stats", params={"flow": "review"}).json()
    assert review["by_status"] == {"paused": 1}


# --- authorization -----------------------------------------------------------------------------

REQUESTS = [
    ("GET", "/", None),
    ("GET", "/api/sessions", None),
    ("GET", "/api/sessions/{sid}", None),
    ("GET", "/api/sessions/{sid}/events", None),
    ("GET", "/api/sessions/{sid}/events/stream", None),
    ("GET", "/api/events/stream", None),
    ("GET", "/api/stats", None),
    ("POST", "/api/sessions/{sid}/resume", {"value": True}),
    ("POST", "/api/sessions/{sid}/cancel", None),
    ("POST", "/api/sessions/{sid}/skip", {"output": 1}),
    ("POST", "/api/resume", {"token": "{token}", "value": True}),
]


def _request(
    api: TestClient, method: str, path: str, body: Any, out: tarry.Outcome, headers: dict[str, str]
) -> httpx.Response:
    path = path.format(sid=out.session_id)
    if body is not None:
        body = json.loads(json.dumps(body).replace("{token}", out.token))
    return api.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong"},
        {"authorization": f"Basic {SECRET}"},
        {"cookie": f"tarry_token={SECRET}"},
    ],
    ids=["none", "wrong", "not-bearer", "raw-cookie"],
)
@pytest.mark.parametrize("method, path, body", REQUESTS)
def test_unauthorized_requests_are_401_and_change_nothing(
    method: str, path: str, body: Any, headers: dict[str, str]
) -> None:
    rt = runtime()
    out = paused(rt)
    api = client(rt, token=SECRET)
    r = _request(api, method, path, body, out, headers)
    assert r.status_code == 401, r.text
    assert out.token not in r.text
    assert r.headers["www-authenticate"].startswith("Bearer")
    unchanged(rt, out)


def test_an_authorized_caller_sees_the_token() -> None:
    rt = runtime()
    out = paused(rt)
    api = client(rt, token=SECRET)
    r = api.get(f"/api/sessions/{out.session_id}", headers={"authorization": f"Bearer {SECRET}"})
    assert r.status_code == 200
    assert r.json()["token"] == out.token
    done = api.post(
        f"/api/sessions/{out.session_id}/resume",
        json={"value": True},
        headers={"authorization": f"Bearer {SECRET}"},
    )
    assert done.status_code == 200 and done.json()["status"] == "paused"


def test_the_page_logs_in_with_a_cookie() -> None:
    rt = runtime()
    out = paused(rt)
    api = client(rt, token=SECRET)
    page = api.get("/", headers={"accept": "text/html"})
    assert page.status_code == 401
    assert "<form" in page.text and SECRET not in page.text
    wrong = api.post("/login", json={"token": "guess"})
    assert wrong.status_code == 401
    assert "tarry_token" not in wrong.headers.get("set-cookie", "")
    right = api.post("/login", json={"token": SECRET})
    assert right.status_code == 204
    cookie = right.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert SECRET not in cookie  # the cookie holds a value derived from the token
    # TestClient keeps the cookie: the page and the API now answer.
    assert api.get("/").status_code == 200
    assert api.get(f"/api/sessions/{out.session_id}").json()["token"] == out.token
    bad = api.post("/login", content=b"token=x", headers={"content-type": "text/plain"})
    assert bad.status_code == 400


def test_without_a_token_only_loopback_peers_are_served() -> None:
    rt = runtime()
    out = paused(rt)
    remote = TestClient(create_app(rt), base_url=LOCAL, client=("203.0.113.9", 40000))
    r = remote.post(f"/api/sessions/{out.session_id}/cancel")
    assert r.status_code == 401
    assert "token" in r.json()["message"]
    unchanged(rt, out)
    # A loopback peer with a Host that is not a loopback name: a DNS-rebinding page.
    rebound = TestClient(
        create_app(rt), base_url="http://attacker.example:8765", client=("127.0.0.1", 40000)
    )
    r = rebound.get(f"/api/sessions/{out.session_id}")
    assert r.status_code == 403
    assert out.token not in r.text


def test_cross_origin_writes_are_refused() -> None:
    rt = runtime()
    out = paused(rt)
    api = client(rt)
    r = api.post(
        f"/api/sessions/{out.session_id}/cancel", headers={"origin": "http://attacker.example"}
    )
    assert r.status_code == 403
    assert r.json()["error"] == "Forbidden"
    unchanged(rt, out)
    same = api.post(f"/api/sessions/{out.session_id}/cancel", headers={"origin": LOCAL})
    assert same.status_code == 200


def test_serve_refuses_a_public_host_without_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TARRY_TOKEN", raising=False)
    started: list[Any] = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, *a, **k: started.append(self.config))
    for host in ("0.0.0.0", "192.0.2.1", "example.com", "::"):
        with pytest.raises(ValueError, match="token"):
            serve(runtime(), host=host)
    with pytest.raises(ValueError, match="token"):
        serve(runtime(), token="")
    assert started == []
    serve(runtime(), host="0.0.0.0", port=9999, token=SECRET)
    serve(runtime())
    monkeypatch.setenv("TARRY_TOKEN", SECRET)
    serve(runtime(), host="0.0.0.0")  # the token comes from the environment
    assert [(c.host, c.port) for c in started] == [
        ("0.0.0.0", 9999),
        ("127.0.0.1", 8765),
        ("0.0.0.0", 8765),
    ]


def test_importing_tarry_does_not_import_the_server() -> None:
    code = (
        "import sys, tarry, tarry.drivers, tarry.drivers.cli; "
        "bad = [m for m in ('starlette', 'uvicorn', 'tarry.drivers.http') if m in sys.modules]; "
        "sys.exit(str(bad) if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- event streams over a real server ----------------------------------------------------------


class Stream:
    """An SSE client over httpx: `next()` returns the next message as a dict (id, event, data),
    comments as {"comment": text}."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self._http = httpx.Client(timeout=WAIT)  # a bound against a hang
        self._cm = self._http.stream("GET", url, headers=headers or {})
        self.response = self._cm.__enter__()
        self._lines = self.response.iter_lines()

    def next(self) -> dict[str, Any]:
        message: dict[str, Any] = {}
        for line in self._lines:
            if line == "":
                if message:
                    if "data" in message:
                        message["data"] = json.loads(message["data"])
                    return message
                continue
            if line.startswith(":"):
                return {"comment": line[1:].strip()}
            name, _, value = line.partition(":")
            message[name] = value[1:] if value.startswith(" ") else value
        raise EOFError("the stream ended")

    def events(self, count: int) -> list[dict[str, Any]]:
        """The next `count` event messages (comments, retry hints and resets skipped)."""
        got: list[dict[str, Any]] = []
        while len(got) < count:
            m = self.next()
            if "data" in m and m.get("event", "message") == "message":
                got.append(m)
        return got

    def close(self) -> None:
        self._cm.__exit__(None, None, None)
        self._http.close()


def _resume(base: str, sid: str, value: Any = True) -> dict[str, Any]:
    r = httpx.post(f"{base}/api/sessions/{sid}/resume", json={"value": value}, timeout=WAIT)
    assert r.status_code == 200, r.text
    return r.json()


def test_session_stream_reconnects_with_last_event_id_and_misses_nothing(tmp_path) -> None:
    rt = runtime(tmp_path)
    out = paused(rt, ["a", "b", "c"])
    sid = out.session_id
    with live(create_app(rt, poll_interval=0.2)) as base:
        url = f"{base}/api/sessions/{sid}/events/stream"
        first = Stream(url)
        assert first.response.headers["content-type"].startswith("text/event-stream")
        history = first.events(rt.session(sid).state.last_seq)
        _resume(base, sid)  # new events arrive live on the open stream
        got = history + first.events(2)
        first.close()  # drop the connection part-way through the new events
        _resume(base, sid)
        _resume(base, sid)
        last_id = got[-1]["id"]
        second = Stream(url, headers={"last-event-id": last_id})
        total = rt.session(sid).events()[-1].seq
        got += second.events(total - int(last_id))
        second.close()
    seqs = [m["data"]["seq"] for m in got]
    assert seqs == list(range(1, total + 1))  # every event, exactly once, in order
    assert [int(m["id"]) for m in got] == seqs
    assert got[-1]["data"]["type"] == "run.completed"
    assert all(m["data"]["session_id"] == sid for m in got)
    assert out.token not in json.dumps(got)


def test_session_stream_starts_after_the_given_seq_and_sees_other_processes(tmp_path) -> None:
    rt = runtime(tmp_path)
    out = paused(rt, ["a", "b"])
    sid = out.session_id
    last = rt.session(sid).state.last_seq
    # Another process writes to the same store; this server's runtime hears nothing of it.
    other = tarry.Runtime(store=f"sqlite:///{tmp_path / 'tarry.db'}", flows=[REVIEW])
    with live(create_app(rt, poll_interval=0.2)) as base:
        stream = Stream(f"{base}/api/sessions/{sid}/events/stream?after={last}")
        resumed = other.resume(out.token, True)
        [first] = stream.events(1)  # polled every 0.2 s (a read waits up to WAIT)
        assert first["data"]["seq"] == last + 1 and first["data"]["type"] == "run.resumed"
        stream.close()
    assert resumed.paused and resumed.token not in json.dumps(first)


def test_stream_of_an_unknown_session_is_404() -> None:
    r = client(runtime()).get("/api/sessions/nope/events/stream")
    assert r.status_code == 404 and r.json()["error"] == "UnknownSession"


@pytest.mark.parametrize("given", ["-1", "x", "\u00b2", "1.5"])
def test_a_malformed_last_event_id_is_400(given: str) -> None:
    rt = runtime()
    out = paused(rt)
    api = client(rt)
    r = api.get(f"/api/sessions/{out.session_id}/events/stream", params={"after": given})
    assert r.status_code == 400 and "Last-Event-ID" in r.json()["message"]


def test_heartbeats_keep_a_quiet_stream_alive(tmp_path) -> None:
    rt = runtime(tmp_path)
    out = paused(rt)
    last = rt.session(out.session_id).state.last_seq
    with live(create_app(rt, heartbeat=0.2)) as base:
        stream = Stream(f"{base}/api/sessions/{out.session_id}/events/stream?after={last}")
        seen = [stream.next() for _ in range(3)]
        stream.close()
    assert {"comment": "keep-alive"} in seen


def test_a_disconnected_client_leaves_no_subscription(tmp_path) -> None:
    rt = runtime(tmp_path)
    out = paused(rt)
    live_subscriptions = {"n": 0}
    subscribe = rt.subscribe

    def counting(callback, **kwargs):
        unsubscribe = subscribe(callback, **kwargs)
        live_subscriptions["n"] += 1

        def undo() -> None:
            live_subscriptions["n"] -= 1
            unsubscribe()

        return undo

    rt.subscribe = counting  # type: ignore[method-assign]
    with live(create_app(rt, poll_interval=0.2)) as base:
        streams = [Stream(f"{base}/api/sessions/{out.session_id}/events/stream") for _ in range(3)]
        for s in streams:
            s.events(1)
        assert live_subscriptions["n"] >= 3
        for s in streams:
            s.close()
        wait_until(lambda: live_subscriptions["n"] == 0, "the subscriptions to end", every=0.05)


def test_all_sessions_stream_resumes_from_its_cursor_exactly_once(tmp_path) -> None:
    rt = runtime(tmp_path)
    before = paused(rt)  # history from before the stream opened is not replayed
    with live(create_app(rt, poll_interval=0.2)) as base:
        url = f"{base}/api/events/stream"
        first = Stream(url)
        a = rt.run(REVIEW, ["a"])  # in this process: the stream is woken at once
        got = first.events(3)
        first.close()
        b = tarry.Runtime(store=f"sqlite:///{tmp_path / 'tarry.db'}", flows=[REVIEW]).run(
            REVIEW, ["b"]
        )  # another process, while nobody listens
        rt.resume(a.token, True)
        want = {
            (e.session_id, e.seq)
            for sid in (a.session_id, b.session_id)
            for e in rt.session(sid).events()
        }
        second = Stream(url, headers={"last-event-id": got[-1]["id"]})
        got += second.events(len(want) - len(got))
        second.close()
        stale = Stream(url, headers={"last-event-id": "gone-42"})
        reset = stale.next()
        while reset.get("event") != "reset":
            reset = stale.next()
        stale.close()
    seen = [(m["data"]["session_id"], m["data"]["seq"]) for m in got]
    assert len(seen) == len(set(seen)) and set(seen) == want
    assert before.session_id not in {sid for sid, _ in seen}
    for sid in (a.session_id, b.session_id):  # each session's events in order
        mine = [seq for s, seq in seen if s == sid]
        assert mine == sorted(mine)
    assert len({m["id"] for m in got}) == len(got)
    assert reset["data"]["reason"]


def test_abort_and_cancel_a_running_session() -> None:
    import threading

    gate, reached = threading.Event(), threading.Event()

    def hold(ctx):
        reached.set()
        assert gate.wait(WAIT)
        return ctx.index

    flow = Flow("held", [ForEach("items", [0, 1, 2], hold)])
    rt = runtime()
    api = client(rt)
    for body, expected in (({}, "paused"), ({"resumable": False}, "error")):
        gate.clear()
        reached.clear()
        result: list[tarry.Outcome] = []
        thread = threading.Thread(target=lambda result=result: result.append(rt.run(flow)))
        thread.start()
        assert reached.wait(WAIT)
        (sid,) = [s.session_id for s in rt.sessions(status="running")]
        assert api.get(f"/api/sessions/{sid}").json()["actions"]["abort"] is True
        r = api.post(f"/api/sessions/{sid}/abort", json=body)
        assert r.status_code == 202, r.text
        assert r.json() == {
            "session_id": sid,
            "requested": "cancel" if body else "abort",
            "status": "running",
        }
        gate.set()
        thread.join(WAIT)
        assert result[0].status == expected
    bad = api.post(f"/api/sessions/{sid}/abort", json={"resumable": "no"})
    assert bad.status_code == 400
    assert api.post("/api/sessions/nope/abort").status_code == 404
    # cancel of a running session: asked, and the outcome says it is still running
    gate.clear()
    reached.clear()
    result = []
    thread = threading.Thread(target=lambda: result.append(rt.run(flow)))
    thread.start()
    assert reached.wait(WAIT)
    (sid,) = [s.session_id for s in rt.sessions(status="running")]
    r = api.post(f"/api/sessions/{sid}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "running"
    gate.set()
    thread.join(WAIT)
    assert result[0].error.type == "cancelled"


# --- reading long logs a page at a time --------------------------------------------------------


class CountingStore(MemoryStore):
    """A MemoryStore that records every `events` read: (session, after_seq, limit, found)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, int, int | None, int]] = []

    def events(self, session_id, after_seq=0, limit=None):
        found = super().events(session_id, after_seq, limit)
        self.reads.append((session_id, after_seq, limit, len(found)))
        return found


LONG = Flow("long", [ForEach("items", lambda ctx: list(range(ctx.input)), [work_item])])


def long_session(rt: tarry.Runtime, items: int = 400) -> tuple[str, int]:
    """A completed session of 4 events per item; its id and last seq."""
    from tarry.snapshots.records import decode_state

    out = rt.run(LONG, items)
    assert out.ok
    # From the snapshot itself: `SessionView.state` would also read back the large output
    # it refers to (one event), and the tests count the reads of the log.
    return out.session_id, decode_state(rt.store.load(out.session_id).state).last_seq


def test_the_events_endpoint_reads_only_the_page_it_serves() -> None:
    store = CountingStore()
    rt = tarry.Runtime(store=store)
    sid, last = long_session(rt)
    api = client(rt)
    store.reads.clear()
    body = api.get(f"/api/sessions/{sid}/events", params={"after": 100, "limit": 5}).json()
    assert [e["seq"] for e in body["events"]] == [101, 102, 103, 104, 105]
    assert body["more"] is True and body["last_seq"] == 105
    assert store.reads == [(sid, 100, 6, 6)]  # one more than served, to know there is more
    end = api.get(f"/api/sessions/{sid}/events", params={"after": last - 2}).json()
    assert [e["seq"] for e in end["events"]] == [last - 1, last]
    assert end["more"] is False and end["last_seq"] == last
    assert all(limit is not None for _, _, limit, _ in store.reads)


def test_session_streams_read_a_long_log_in_pages() -> None:
    from tarry.drivers.http import sse

    store = CountingStore()
    rt = tarry.Runtime(store=store)
    sid, last = long_session(rt, 300)  # more than two pages
    assert last > 2 * sse.PAGE
    store.reads.clear()
    with live(create_app(rt, poll_interval=0.2)) as base:
        streams = [Stream(f"{base}/api/sessions/{sid}/events/stream") for _ in range(3)]
        for stream in streams:
            got = stream.events(last)
            assert [m["data"]["seq"] for m in got] == list(range(1, last + 1))
            stream.close()
    mine = [r for r in store.reads if r[0] == sid]
    assert mine and all(limit == sse.PAGE and found <= sse.PAGE for _, _, limit, found in mine)


def test_the_all_sessions_stream_reads_a_long_log_in_pages() -> None:
    from tarry.drivers.http import journal

    store = CountingStore()
    rt = tarry.Runtime(store=store)
    with live(create_app(rt, poll_interval=0.2)) as base:
        stream = Stream(f"{base}/api/events/stream")
        sid, last = long_session(rt, 300)
        got = stream.events(last)
        stream.close()
    assert [(m["data"]["session_id"], m["data"]["seq"]) for m in got] == [
        (sid, seq) for seq in range(1, last + 1)
    ]
    mine = [r for r in store.reads if r[0] == sid]
    assert len(mine) >= 3 and all(limit == journal.PAGE for _, _, limit, _ in mine)


# --- keyed delivery ------------------------------------------------------------------------------


KEYED = Flow(
    "keyed",
    [tarry.Wait("result", key=lambda ctx: f"job-{ctx.input}"), lambda ctx: {"got": ctx.prev}],
)


def test_deliver_one_key_or_a_list() -> None:
    rt = tarry.Runtime(flows=[KEYED], max_value_bytes=1000)
    outs = [rt.run(KEYED, i) for i in range(3)]
    api = client(rt)
    r = api.post("/api/deliver", json={"key": "job-0", "value": "zero"})
    assert r.status_code == 200
    [out] = r.json()["outcomes"]
    assert out["session_id"] == outs[0].session_id and out["status"] == "ok"
    assert out["output"] == {"got": "zero"} and r.json()["kept"] == []
    r = api.post(
        "/api/deliver",
        json=[{"key": "job-2", "value": 2}, {"key": "early"}, {"key": "job-1", "value": 1}],
    )
    assert r.status_code == 200
    assert [o["session_id"] for o in r.json()["outcomes"]] == [
        outs[2].session_id,
        outs[1].session_id,
    ]
    assert r.json()["kept"] == ["early"]
    assert rt.store.queued(key="early") != []


@pytest.mark.parametrize(
    "body, status, words",
    [
        ({"value": 1}, 400, "must name a key"),
        ({"key": "", "value": 1}, 400, "must name a key"),
        ({"key": "job-0", "valu": 1}, 400, "unknown field 'valu'"),
        ([{"key": "job-0"}, 7], 400, "item 1 of the request body"),
        ([{"key": "job-0"}, {"key": "job-0"}], 400, "twice"),
        ({"key": "job-0", "value": "x" * 2000}, 422, "bytes"),
    ],
)
def test_a_refused_delivery_is_4xx_and_changes_nothing(body: Any, status: int, words: str) -> None:
    rt = tarry.Runtime(flows=[KEYED], max_value_bytes=1000)
    out = rt.run(KEYED, 0)
    r = client(rt).post("/api/deliver", json=body)
    assert r.status_code == status, r.text
    assert words in r.json()["message"]
    unchanged(rt, out)
    assert rt.store.queued(key="job-0") == []
