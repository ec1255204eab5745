"""The OpenAPI description: every /api route described, the document valid, and each
documented GET answering in the documented shape."""

from __future__ import annotations

import re
from typing import Any

import pytest
import tarry
from tarry import Flow, ForEach, Gate

pytest.importorskip("starlette")
jsonschema = pytest.importorskip("jsonschema")

from starlette.routing import Route  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402
from tarry.drivers.http.openapi import document  # noqa: E402

TOKEN = "openapi-test-token"
#: Documented here, served by a route another part of the server adds.
ELSEWHERE = {"/api/sessions/{sid}/logs"}
#: Streams that never end by themselves: their shape is tested in test_server.py.
ENDLESS = {"/api/sessions/{sid}/events/stream", "/api/events/stream"}


def work(ctx):
    ctx.metric("tokens", 3)
    return ctx.input


FLOW = Flow("documented", [work, Gate("approve")], version="1")
#: A session with an open ForEach, for GET /api/sessions/{sid}/items.
EACH = Flow("documented_each", [ForEach("each", [1, 2], [Gate("approve")])])


def app_routes(app: Any) -> dict[str, set[str]]:
    """Each /api route's path, as OpenAPI spells it (`{key:path}` is `{key}`), and methods."""
    found: dict[str, set[str]] = {}
    for route in app.routes:
        if isinstance(route, Route) and route.path.startswith("/api/"):
            path = re.sub(r"{(\w+):\w+}", r"{\1}", route.path)
            found.setdefault(path, set()).update(
                m.lower() for m in route.methods or () if m != "HEAD"
            )
    return found


def test_every_api_route_is_described_and_nothing_else() -> None:
    app = create_app(tarry.Runtime())
    doc = document()
    described = {path: set(ops) for path, ops in doc["paths"].items()}
    served = app_routes(app)
    assert {p: m for p, m in served.items() if p not in ELSEWHERE} == {
        p: m for p, m in described.items() if p not in ELSEWHERE
    }
    for path in ELSEWHERE & set(served):  # once that route is in the app, as documented
        assert served[path] == described[path]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["summary"], (path, method)
            assert {"200", "201", "202"} & set(op["responses"]), (path, method)
            names = set(re.findall(r"{(\w+)}", path))
            declared = {p["name"] for p in op.get("parameters", ()) if p["in"] == "path"}
            assert names == declared, (path, method)


def test_the_document_is_valid_openapi_3_1() -> None:
    validator = pytest.importorskip("openapi_spec_validator")
    validator.validate(document())


def test_the_document_is_served() -> None:
    api = TestClient(create_app(tarry.Runtime(), token=TOKEN), base_url="http://127.0.0.1:8765")
    r = api.get("/api/openapi.json", headers={"authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200 and r.json() == document()


def _example(param: dict[str, Any], sid: str) -> str | None:
    name = param["name"]
    return {
        "sid": sid,
        "name": FLOW.name,
        "limit": "5",
        "after": "0",
        "status": "paused",
        "flow": FLOW.name,
        "q": "doc",
        "since": "2000-01-01T00:00:00Z",
        "until": "4102444800",
        "buckets": "3",
        "speed": "max",
        "version": "1",
        "fingerprint": FLOW.fingerprint,
        "prefix": "doc/",
        "path": "each",
    }.get(name)


def test_each_documented_get_answers_in_its_documented_shape() -> None:
    rt = tarry.Runtime(flows=[FLOW, EACH])
    each = rt.run(EACH)
    out = rt.run(FLOW, 1)
    rt.deliver("doc/mail", {"kept": True})  # so that the mailbox's answer is not empty
    api = TestClient(
        create_app(rt, token=TOKEN),
        base_url="http://127.0.0.1:8765",
        headers={"authorization": f"Bearer {TOKEN}"},
    )
    doc = document()
    checked = 0
    for path, ops in doc["paths"].items():
        if "get" not in ops or path in ELSEWHERE | ENDLESS:
            continue
        op = ops["get"]
        url = path
        query = {}
        for param in op["parameters"]:
            sid = each.session_id if path.endswith("/items") else out.session_id
            value = _example(param, sid)
            if param["in"] == "path":
                url = url.replace("{" + param["name"] + "}", value)
            elif value is not None and param["name"] not in ("offset", "fingerprint", "cursor"):
                query[param["name"]] = value
        r = api.get(url, params=query)
        assert r.status_code == 200, (path, r.text)
        if path == "/api/mail":
            assert r.json()["mail"], r.text
        content = op["responses"]["200"]["content"]
        if "text/event-stream" in content:
            assert r.headers["content-type"].startswith("text/event-stream"), path
        else:
            schema = {**content["application/json"]["schema"], "components": doc["components"]}
            jsonschema.validate(r.json(), schema, cls=jsonschema.Draft202012Validator)
        checked += 1
    assert checked >= 10
    # Errors have the documented error shape.
    missing = api.get("/api/sessions/nope")
    error = {"$ref": "#/components/schemas/Error", "components": doc["components"]}
    jsonschema.validate(missing.json(), error, cls=jsonschema.Draft202012Validator)
