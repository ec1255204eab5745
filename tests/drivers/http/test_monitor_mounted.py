"""The monitor mounted under a prefix (`/tarry` in a Starlette app): every URL the pages use is
the mount's, the login works there, and a failed session's traceback shows, collapsed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tarry
from support import PAGE_TIMEOUT, bounded_expect, live
from tarry import Flow, Gate

pytest.importorskip("starlette")

from starlette.applications import Starlette  # noqa: E402
from starlette.responses import PlainTextResponse  # noqa: E402
from starlette.routing import Mount, Route  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
ANN = "ann-token-1234"


def explode(ctx):
    raise ConnectionError("the billing API timed out")


FRAGILE = Flow("sync_billing", [explode])
HELD = Flow("held", [Gate("ok")])


def mounted(rt: tarry.Runtime, **kwargs) -> Starlette:
    async def home(request):
        return PlainTextResponse("the host app")

    return Starlette(routes=[Route("/", home), Mount("/tarry", app=create_app(rt, **kwargs))])


def test_the_pages_and_the_api_answer_under_the_prefix() -> None:
    rt = tarry.Runtime(flows=[HELD])
    out = rt.run(HELD)
    api = TestClient(mounted(rt), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 1))
    page = api.get("/tarry/")
    assert page.status_code == 200 and '<meta name="tarry-root" content="/tarry">' in page.text
    # No script of the page names a server path except through under() (the mount's).
    for absolute in ('fetch("/', 'EventSource("/', 'location.href = "/'):
        assert absolute not in page.text
    rows = api.get("/tarry/api/sessions").json()["sessions"]
    assert [r["session_id"] for r in rows] == [out.session_id]
    assert api.get("/").text == "the host app"
    assert api.get("/tarry/login", follow_redirects=False).headers["location"] == "/tarry/"
    assert api.options("/tarry/api/sessions").status_code == 204


def test_the_login_works_under_the_prefix() -> None:
    rt = tarry.Runtime()
    api = TestClient(
        mounted(rt, users={"ann": ANN}), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 1)
    )
    form = api.get("/tarry/", headers={"accept": "text/html"})
    assert form.status_code == 401 and 'content="/tarry"' in form.text
    assert api.get("/tarry/login").status_code == 200  # open without a login, under the prefix
    assert api.post("/tarry/login", json={"token": ANN}).status_code == 204
    assert api.get("/tarry/api/me").json()["user"] == "ann"


def test_in_chromium_mounted_at_tarry_with_a_failed_sessions_traceback(tmp_path: Path) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing")
    sync_api = pytest.importorskip("playwright.sync_api")
    rt = tarry.Runtime(store=f"sqlite:///{tmp_path / 'm.db'}", flows=[FRAGILE, HELD])
    broken = rt.run(FRAGILE)
    assert broken.failed and "ConnectionError" in broken.error.traceback
    held = rt.run(HELD)

    with live(mounted(rt, users={"ann": ANN})) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page()
            asked: list[str] = []
            page.on("request", lambda r: asked.append(r.url))
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.set_default_timeout(PAGE_TIMEOUT)
            expect = bounded_expect(sync_api)
            page.goto(base + "/tarry/")
            page.fill("#token", ANN)
            page.click("button[type=submit]")
            expect(page.locator(f'#sessions tr[data-session="{held.session_id}"]')).to_contain_text(
                "paused"
            )
            page.locator(f'#sessions tr[data-session="{broken.session_id}"]').click()
            details = page.locator("#error details.traceback")
            expect(details).to_have_count(1)
            assert details.get_attribute("open") is None  # collapsed at first
            pre = details.locator("pre")
            expect(pre).to_be_hidden()
            details.locator("summary").click()
            expect(pre).to_be_visible()
            expect(pre).to_contain_text("ConnectionError: the billing API timed out")
            expect(pre).to_contain_text("Traceback")
        finally:
            browser.close()
    assert errors == []
    outside = [u for u in asked if u.startswith(base) and not u.startswith(base + "/tarry/")]
    assert outside == [], outside  # every request stayed under the mount
