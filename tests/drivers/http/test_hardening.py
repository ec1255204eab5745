"""Bad requests get a JSON 4xx, never a plain-text 500: NUL in any string (on PostgreSQL too),
login cookies that are not numbers, oversized query integers; OPTIONS is answered; the login
rate limit holds against a rotating X-Forwarded-For; the OpenAPI document says what the server
does (maxima, formats, minLength, empty status)."""

from __future__ import annotations

import http.client
import json
import logging
import threading
from typing import Any

import pytest
import tarry
from support import WAIT
from tarry import Flow, ForEach, Gate

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402
from tarry.drivers.http.openapi import document  # noqa: E402
from tarry.drivers.http.users import Users  # noqa: E402

LOCAL = "http://127.0.0.1:8765"
FLOW = Flow("hard", [lambda ctx: ctx.input, Gate("ok")])


def client(rt: tarry.Runtime, **kwargs: Any) -> TestClient:
    return TestClient(
        create_app(rt, **kwargs),
        base_url=LOCAL,
        client=("127.0.0.1", 50000),
        raise_server_exceptions=False,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def rt(request, tmp_path):
    if request.param == "postgres":
        import pgserver

        store = pgserver.scratch_store()
    else:
        store = tarry.snapshots.SQLiteStore(tmp_path / "h.db")
    runtime = tarry.Runtime(store=store, flows=[FLOW])
    yield runtime
    close = getattr(store, "close", None)
    if close is not None:
        close()


def _is_json_4xx(r: Any) -> bool:
    if not 400 <= r.status_code < 500:
        return False
    body = r.json()
    return isinstance(body, dict) and {"error", "message"} <= set(body)


#: (method, path, body) of every route, each with a NUL somewhere a caller controls.
NUL = "a\x00b"
NUL_REQUESTS = [
    ("GET", "/api/sessions/a%00b", None),
    ("GET", "/api/sessions/a%00b/events", None),
    ("GET", "/api/sessions/a%00b/logs", None),
    ("GET", "/api/sessions/a%00b/replay", None),
    ("GET", "/api/sessions/a%00b/events/stream", None),
    ("GET", "/api/sessions?flow=a%00b", None),
    ("GET", "/api/sessions?q=a%00b", None),
    ("GET", "/api/sessions?cursor=a%00b", None),
    ("GET", "/api/stats?flow=a%00b", None),
    ("GET", "/api/stats/timeline?flow=a%00b", None),
    ("GET", "/api/flows/a%00b", None),
    ("GET", "/api/mail?prefix=a%00b", None),
    ("GET", "/api/events/stream?after=a%00b", None),
    ("POST", "/api/sessions", {"flow": "hard", "input": NUL}),
    ("POST", "/api/sessions", {"flow": "hard", "input": 1, "session_id": NUL}),
    ("POST", "/api/sessions", {"flow": NUL}),
    ("POST", "/api/sessions", {"flow": "hard", "input": {NUL: 1}}),
    ("POST", "/api/sessions/a%00b/resume", {"value": True}),
    ("POST", "/api/sessions/s1/resume", {"value": {"by": NUL}}),
    ("POST", "/api/sessions/a%00b/abort", {}),
    ("POST", "/api/sessions/a%00b/cancel", {}),
    ("POST", "/api/sessions/a%00b/skip", {}),
    ("POST", "/api/sessions/a%00b/recover", {}),
    ("POST", "/api/resume", {"token": NUL, "value": 1}),
    ("POST", "/api/deliver", {"key": NUL, "value": 1}),
    ("POST", "/api/deliver", {"key": "k", "value": [NUL]}),
    ("DELETE", "/api/mail/a%00b", None),
]


@pytest.mark.parametrize(("method", "path", "body"), NUL_REQUESTS)
def test_a_nul_anywhere_is_a_json_400_and_changes_nothing(rt, method, path, body) -> None:
    rt.run(FLOW, 1, session_id="s1")
    api = client(rt)
    r = api.request(method, path, json=body)
    assert r.status_code == 400 and _is_json_4xx(r), (r.status_code, r.text)
    assert "NUL" in r.json()["message"]
    # Nothing started, nothing moved: the one paused session is as it was.
    assert [(s.session_id, s.status) for s in rt.sessions()] == [("s1", "paused")]


@pytest.mark.parametrize(
    "expiry", ["\u00b2\u00b3\u00b9" * 3, "9" * 4300, "1" * 13, "-5", "", "\u0661\u0662"]
)
def test_a_login_cookie_that_is_not_a_time_is_unauthenticated(expiry, caplog) -> None:
    rt = tarry.Runtime()
    api = client(rt, users={"ann": "ann-token-1234"})
    cookie = f"tarry_token=ann.{expiry}.{'0' * 64}".encode()  # raw UTF-8, as a client may send
    with caplog.at_level(logging.DEBUG):
        r = api.get("/api/sessions", headers={"cookie": cookie})
    assert r.status_code == 401 and _is_json_4xx(r)
    assert not [rec for rec in caplog.records if rec.exc_info]  # no traceback logged


def test_a_cookie_with_a_non_ascii_mac_is_unauthenticated() -> None:
    users = Users({"ann": "ann-token-1234"}, session_seconds=60)
    good = users.cookie("ann", now=1000)
    assert users.by_cookie(good, now=1000) == "ann"
    name, expires, _ = good.split(".")
    assert users.by_cookie(f"{name}.{expires}.{'é' * 64}", now=1000) is None
    assert users.by_cookie(f"{name}.{expires}.x", now=1000) is None
    assert users.by_cookie("ann", now=1000) is None


BIG = str(2**63)


@pytest.mark.parametrize(
    "path",
    [
        f"/api/sessions?offset={BIG}",
        f"/api/sessions?limit={BIG}",
        f"/api/sessions/s1/events?after={BIG}",
        f"/api/sessions/s1/logs?after={BIG}",
        f"/api/sessions/s1/replay?after={BIG}",
        f"/api/sessions/s1/events?after={'9' * 4300}",
        "/api/sessions/s1/events?after=%C2%B2",  # ² is a digit to str.isdigit
        "/api/sessions/s1/events?after=1_0",
        f"/api/sessions/s1/events/stream?after={BIG}",
    ],
)
def test_oversized_query_integers_are_a_json_400(path: str) -> None:
    rt = tarry.Runtime(flows=[FLOW])
    rt.run(FLOW, 1, session_id="s1")
    r = client(rt).get(path)
    assert r.status_code == 400 and _is_json_4xx(r), (r.status_code, r.text[:200])


def test_the_largest_query_integer_is_taken() -> None:
    rt = tarry.Runtime(flows=[FLOW])
    rt.run(FLOW, 1, session_id="s1")
    r = client(rt).get(f"/api/sessions/s1/events?after={2**63 - 1}")
    assert r.status_code == 200 and r.json()["events"] == []


def test_options_is_answered_with_the_methods_of_the_path() -> None:
    api = client(tarry.Runtime())
    r = api.options("/api/sessions")
    assert r.status_code == 204
    assert set(r.headers["allow"].split(", ")) == {"GET", "HEAD", "POST", "OPTIONS"}
    r = api.options("/api/sessions/abc/resume")
    assert r.status_code == 204 and set(r.headers["allow"].split(", ")) == {"POST", "OPTIONS"}
    r = api.options("/api/mail/a/b/c")
    assert r.status_code == 204 and "DELETE" in r.headers["allow"]
    r = api.options("/api/nothing-here")
    assert r.status_code == 404 and _is_json_4xx(r)


def test_an_empty_status_is_refused_as_documented() -> None:
    api = client(tarry.Runtime())
    r = api.get("/api/sessions?status=")
    assert r.status_code == 400 and _is_json_4xx(r)
    [param] = [
        p
        for p in document()["paths"]["/api/sessions"]["get"]["parameters"]
        if p["name"] == "status"
    ]
    assert "allowEmptyValue" not in param and "refused" in param["description"]
    assert api.get("/api/sessions?flow=").status_code == 200  # documented as left out
    [flow] = [
        p for p in document()["paths"]["/api/sessions"]["get"]["parameters"] if p["name"] == "flow"
    ]
    assert flow["allowEmptyValue"] is True


def _params(path: str) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in document()["paths"][path]["get"]["parameters"]}


def test_the_document_bounds_and_types_what_the_server_bounds_and_types() -> None:
    logs = _params("/api/sessions/{sid}/logs")
    assert logs["limit"]["schema"]["maximum"] == 10_000
    for path in ("/api/sessions", "/api/stats", "/api/stats/timeline"):
        for name in ("since", "until"):
            formats = {s.get("format") for s in _params(path)[name]["schema"]["anyOf"]}
            assert {"date-time", "date"} <= formats
    speed = _params("/api/sessions/{sid}/replay")["speed"]["schema"]
    assert {"type": "number", "minimum": 0, "maximum": 1_000_000} in speed["anyOf"]
    body = document()["paths"]["/api/sessions"]["post"]["requestBody"]["content"]
    props = body["application/json"]["schema"]["properties"]
    assert props["flow"]["minLength"] == 1 and props["session_id"]["minLength"] == 1
    schemas = document()["components"]["schemas"]
    assert schemas["Delivery"]["properties"]["key"]["minLength"] == 1


def test_each_documented_integer_maximum_is_the_servers() -> None:
    each = Flow("hard_each", [ForEach("each", [1, 2], [Gate("ok")])])
    rt = tarry.Runtime(flows=[FLOW, each])
    rt.run(FLOW, 1, session_id="s1")
    rt.run(each, session_id="s2")
    api = client(rt)
    checked = 0
    for path, ops in document()["paths"].items():
        get = ops.get("get")
        if get is None or path.endswith("/stream") or path.endswith("/replay"):
            continue
        url = path.replace("{sid}", "s1").replace("{name}", "hard")
        if path.endswith("/items"):  # its required ?path= names the open ForEach of s2
            url = path.replace("{sid}", "s2") + "?path=each&"
        else:
            url += "?"
        for p in get["parameters"]:
            schema = p["schema"]
            if p["in"] != "query" or schema.get("type") != "integer" or "maximum" not in schema:
                continue
            top = schema["maximum"]
            assert api.get(f"{url}{p['name']}={top}").status_code == 200, (path, p["name"])
            over = api.get(f"{url}{p['name']}={top + 1}")
            assert over.status_code == 400 and _is_json_4xx(over), (path, p["name"])
            checked += 1
    assert checked >= 4


@pytest.mark.parametrize(
    "value", ["2030-01-01T00:00:00z", "2030-01-01t00:00:00Z", "2030-01-01", "1700000000.5"]
)
def test_documented_time_forms_are_taken(value: str) -> None:
    r = client(tarry.Runtime()).get(f"/api/sessions?since={value}")
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("value", ["-1", "1e300", "nan", "yesterday"])
def test_times_out_of_the_document_are_refused(value: str) -> None:
    r = client(tarry.Runtime()).get(f"/api/stats?since={value}")
    assert r.status_code == 400 and _is_json_4xx(r)


# --- the real server: forwarded headers ---------------------------------------------------------


def _serving(forwarded_allow_ips: str | None = None):
    from tarry.drivers.http.app import server_of

    app = create_app(tarry.Runtime(), users={"ann": "ann-token-1234"})
    server, sock = server_of(app, "127.0.0.1", 0, forwarded_allow_ips)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    # The socket listens already: a request made before uvicorn accepts waits in its backlog.
    return server, sock, thread


def _login(port: int, forwarded: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request(
            "POST",
            "/login",
            body=json.dumps({"token": "wrong-token"}),
            headers={"content-type": "application/json", "x-forwarded-for": forwarded},
        )
        return conn.getresponse().status
    finally:
        conn.close()


def test_rotating_x_forwarded_for_does_not_escape_the_login_limit() -> None:
    server, sock, thread = _serving()
    try:
        port = sock.getsockname()[1]
        answers = [_login(port, f"10.0.0.{i}") for i in range(7)]
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()
    assert answers[:5] == [401] * 5 and answers[5:] == [429, 429]


def test_forwarded_headers_are_trusted_only_from_the_proxies_named() -> None:
    server, sock, thread = _serving("127.0.0.1")
    try:
        port = sock.getsockname()[1]
        answers = [_login(port, f"10.0.0.{i}") for i in range(7)]
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()
    assert answers == [401] * 7  # each a client of its own, as the trusted proxy says
