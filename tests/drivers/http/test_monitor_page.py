"""The monitor page's controls and views in headless Chromium (Playwright, Debian's chromium).

One server and one browser for the module: `tarry serve`'s app over a real Runtime and
SQLiteStore holding paused, running, failed and completed sessions whose steps log and count
tokens, served with a named user who logs in through the page's login form. Every route is the
real one; a test that checks what the page asked for records the request (`expect_request`).
Only the test of an older server puts a stub in front (`WithoutNewRoutes`: 404 for the routes
an older server lacks). It also writes docs/monitor-360.png, -768.png, -1440.png and
monitor-stats.png.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import tarry
from support import PAGE_TIMEOUT, WAIT, bounded_expect, live, wait_until
from tarry import Flow, ForEach, Gate, Parallel, Wait

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS = Path(__file__).resolve().parents[3] / "docs"
TIMEOUT = PAGE_TIMEOUT  # ms, for every wait on the page
WIDTHS = (360, 768, 1440)
USER, TOKEN = "ann", "ann-secret-token-7"
CONTROLS = ("approve", "reject", "resume", "skip", "abort", "cancel", "replay")
APP_LOG = logging.getLogger("app")


def _need(module: str) -> Any:
    reason = None
    if not os.path.exists(CHROMIUM):
        reason = f"{CHROMIUM} is missing: install Debian's `chromium` package (.ci/run does)"
    else:
        try:
            return __import__(module, fromlist=["_"])
        except ImportError:
            reason = f"{module} is missing: pip install -e '.[dev]' (it brings playwright)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


# --- flows in every state worth showing --------------------------------------------------------


def load(ctx):
    APP_LOG.debug("connecting")
    logging.getLogger("app.billing").warning("retrying the card charge")
    return [{"id": "T-101", "urgent": False}, {"id": "T-102", "urgent": True}]


def triage(ctx):
    ctx.metric("tokens", 1200)
    ctx.metric("cost", 0.42)
    return {"ticket": ctx.item["id"]}


TICKETS = Flow("tickets", [load, ForEach("tickets", "load", [triage, Gate("review")])])
APPROVAL = Flow("approval", [Gate("sign_off", "ship release 7?")])
PAYMENTS = Flow("payments", [Wait("settlement", reason="the bank's batch")])


def explode(ctx):
    raise ConnectionError("the billing API timed out")


FRAGILE = Flow("sync_billing", [explode])
RELEASE: dict[str, threading.Event] = {}  # session id -> what its running steps wait for
#: How long a held step waits for its release: a bound against a hang, longer than this module
#: takes on any machine (the `site` fixture releases every step at its end, and the threads are
#: daemons). WAIT would not do: it runs from the fixture's start, and on a loaded machine the
#: tests before the last one that expects a held session still running may take longer.
HOLD = 3600.0


def work(ctx):
    if ctx.index >= 3:
        RELEASE[ctx.session_id].wait(HOLD)
    return ctx.index


BATCH = Flow("batch", [ForEach("items", list(range(10)), work)])
FANOUT = Flow("fanout", [ForEach("items", list(range(12)), work, concurrency=2)])
QUICK = Flow("quick", [lambda ctx: "done"])


def hold(ctx):
    RELEASE[ctx.session_id].wait(HOLD)


SPREAD = Flow(
    "spread", [Parallel("sources", {"crm": lambda ctx: 1, "erp": lambda ctx: 2, "ledger": hold})]
)

#: The routes an older server lacks (before users, flows, the timeline, logs and replay).
NEW_ROUTES = re.compile(
    r"/api/me|/api/flows(/.*)?|/api/stats/timeline|/api/sessions/[^/]+/(logs|replay)"
)


class WithoutNewRoutes:
    """An ASGI app that answers the NEW_ROUTES as an older server does (404 NotFound) and hands
    every other request to the real app."""

    def __init__(self, real: Any) -> None:
        self.real = real

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        from starlette.responses import JSONResponse

        if scope["type"] == "http" and NEW_ROUTES.fullmatch(scope["path"]):
            answer = JSONResponse(
                {"error": "NotFound", "message": f"no route {scope['path']}"}, 404
            )
            await answer(scope, receive, send)
        else:
            await self.real(scope, receive, send)


# --- one server and one browser for the module ------------------------------------------------


def _run_in_background(rt: tarry.Runtime, flow: Flow, sid: str, threads: list, done: int) -> None:
    thread = threading.Thread(target=rt.run, args=(flow,), kwargs={"session_id": sid}, daemon=True)
    thread.start()
    threads.append(thread)

    def going() -> bool:  # `done` items are done and the next one waits on RELEASE
        try:
            stack = rt.session(sid).state.container_stack
        except tarry.TarryError:
            stack = []
        return bool(stack and stack[0].completed_iterations >= done)

    wait_until(going, f"{sid} to get going")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    sync_api = _need("playwright.sync_api")
    pytest.importorskip("starlette")
    from tarry.drivers.http import create_app

    # Logging creates a record only for a logger enabled for its level (the root is at WARNING).
    APP_LOG.setLevel(logging.DEBUG)
    db = tmp_path_factory.mktemp("monitor") / "tarry.db"
    rt = tarry.Runtime(
        store=f"sqlite:///{db}",
        log_level=logging.DEBUG,
        flows=[TICKETS, APPROVAL, PAYMENTS, FRAGILE, BATCH, FANOUT, QUICK, SPREAD],
    )
    s: dict[str, Any] = {"rt": rt}
    for _ in range(8):
        assert rt.run(QUICK).ok
    s["failed"] = rt.run(FRAGILE).session_id
    s["payments"] = rt.run(PAYMENTS).session_id
    s["approve"] = rt.run(APPROVAL).session_id
    s["reject"] = rt.run(APPROVAL).session_id
    s["tickets"] = rt.run(TICKETS).session_id
    threads: list[threading.Thread] = []
    for name, flow, done in (
        ("batch", BATCH, 3),
        ("abort", BATCH, 3),
        ("cancel", FANOUT, 3),
        ("spread", SPREAD, 2),
    ):
        s[name] = f"{name}-0123456789"
        RELEASE[s[name]] = threading.Event()
        _run_in_background(rt, flow, s[name], threads, done)
    with ExitStack() as stack:
        stack.callback(APP_LOG.setLevel, logging.NOTSET)
        s["base"] = stack.enter_context(
            live(create_app(rt, users={USER: TOKEN}, poll_interval=0.2))
        )
        s["older"] = stack.enter_context(live(WithoutNewRoutes(create_app(rt, poll_interval=0.2))))
        pw = stack.enter_context(sync_api.sync_playwright())
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        stack.callback(browser.close)
        s["browser"], s["expect"] = browser, bounded_expect(sync_api)
        try:
            yield s
        finally:
            for event in RELEASE.values():
                event.set()
            for thread in threads:
                thread.join(WAIT)


def log_in(page: Any, site: dict[str, Any]) -> None:
    """Through the login form the server answers a page without its cookie with (401)."""
    page.goto(site["base"])
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    site["expect"](page.locator("#user")).to_have_text(USER)


def watched(browser: Any) -> Any:
    """A new tab in a context of its own (its own cookies) that records its errors and posts."""
    tab = browser.new_context().new_page()
    tab.errors, tab.posts = [], []
    tab.on("pageerror", lambda exc: tab.errors.append(str(exc)))
    tab.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
    tab.on("request", lambda r: tab.posts.append(r.url) if r.method == "POST" else None)
    tab.set_default_timeout(TIMEOUT)
    return tab


def not_logged_in(errors: list[str]) -> list[str]:
    """`errors` without the 401 the browser reports for the login page it was answered with."""
    return [e for e in errors if "status of 401" not in e]


@pytest.fixture(scope="module")
def tab(site: dict[str, Any]) -> Iterator[Any]:
    """One browser tab for the module (a new one per test costs more than the test), logged in
    as USER."""
    tab = watched(site["browser"])
    log_in(tab, site)
    assert not_logged_in(tab.errors) == []
    # Each test loads the page afresh (`page` leaves it blank after each): so does the first.
    # (Left on the page, the first test's `open_session` changed only the address's hash,
    # which the page does not read after its load: it failed when run first, alone or with -k.)
    tab.goto("about:blank")
    yield tab
    tab.context.close()


@pytest.fixture
def page(tab: Any) -> Iterator[Any]:
    tab.set_viewport_size({"width": 1440, "height": 900})
    tab.errors.clear()
    tab.posts.clear()
    yield tab
    tab.goto("about:blank")  # the next test loads the page afresh
    assert tab.errors == []


def open_session(page: Any, site: dict[str, Any], sid: str, base: str | None = None) -> None:
    page.goto(f"{base or site['base']}/#session={sid}")
    site["expect"](page.locator("#detail-id")).to_have_text(sid)


def wait_for(check: Any, what: str) -> None:
    wait_until(check, what, every=0.05)


# --- controls ------------------------------------------------------------------------------------


def test_every_control_is_disabled_while_nothing_is_selected(site, page) -> None:
    expect = site["expect"]
    page.goto(site["base"])
    expect(page.locator("#sessions tbody tr").first).to_be_visible()
    for control in CONTROLS:
        expect(page.locator(f"#{control}")).to_be_disabled()
    expect(page.locator("#detail-empty")).to_be_visible()
    page.evaluate("document.getElementById('resume').click()")  # even a forced click posts nothing
    page.wait_for_timeout(200)
    assert page.posts == []


def test_approve_resumes_a_gate_with_a_decision(site, page) -> None:
    expect, sid = site["expect"], site["approve"]
    open_session(page, site, sid)
    expect(page.locator("#gate-controls")).to_be_visible()
    for control in ("abort", "skip", "replay"):
        expect(page.locator(f"#{control}")).to_be_disabled()
    page.click("#approve")
    expect(page.locator("#detail-status")).to_have_text("completed")
    expect(page.locator("#approve")).to_be_disabled()
    assert site["rt"].session(sid).state.output == {"approved": True, "by": USER}  # who clicked


def test_reject_sends_the_comment(site, page) -> None:
    expect, sid = site["expect"], site["reject"]
    open_session(page, site, sid)
    page.fill("#gate-comment", "not before the audit")
    page.click("#reject")
    expect(page.locator("#detail-status")).to_have_text("completed")
    assert site["rt"].session(sid).state.output == {
        "approved": False,
        "comment": "not before the audit",
        "by": USER,
    }


def test_a_wait_resumes_with_a_json_value(site, page) -> None:
    expect, sid = site["expect"], site["payments"]
    open_session(page, site, sid)
    expect(page.locator("#gate-controls")).to_be_hidden()  # not a human decision
    expect(page.locator("#resume-value")).to_have_value("null")
    page.fill("#resume-value", "{not json")
    page.click("#resume")
    expect(page.locator("#notice")).to_contain_text("not valid JSON")
    assert site["rt"].session(sid).status == "paused"  # nothing was sent
    page.fill("#resume-value", '{"settled": 1250}')
    page.click("#resume")
    expect(page.locator("#detail-status")).to_have_text("completed")
    assert site["rt"].session(sid).state.output == {"settled": 1250}


def test_skip_records_the_failed_step_as_done(site, page) -> None:
    expect, sid = site["expect"], site["failed"]
    open_session(page, site, sid)
    expect(page.locator("#error")).to_contain_text("the billing API timed out")
    for control in ("approve", "abort"):
        expect(page.locator(f"#{control}")).to_be_disabled()
    page.fill("#skip-value", '"fallback"')
    page.click("#skip")
    expect(page.locator("#detail-status")).to_have_text("completed")
    assert site["rt"].session(sid).state.output == "fallback"


def test_a_running_foreach_shows_where_it_is_and_its_progress(site, page) -> None:
    expect = site["expect"]
    open_session(page, site, site["batch"])
    expect(page.locator("#detail-status")).to_have_text("running")
    expect(page.locator("#stack li").first).to_contain_text("items")
    expect(page.locator("#stack-empty")).to_be_hidden()
    bar = page.locator("#stack [role=progressbar]").first
    expect(bar).to_have_attribute("aria-valuenow", "3")
    expect(bar).to_have_attribute("aria-valuemax", "10")
    expect(page.locator("#stack .count").first).to_have_text("3 / 10 done")
    expect(page.locator("#stack .rate").first).to_contain_text("items/s")
    expect(page.locator("#stack .eta").first).to_contain_text("ETA")
    for control in ("abort", "cancel"):
        expect(page.locator(f"#{control}")).to_be_enabled()
    for control in ("approve", "resume", "skip", "replay"):
        expect(page.locator(f"#{control}")).to_be_disabled()
    expect(page.locator("#flow .fnode.current")).to_have_attribute("data-path", "items")


def test_a_concurrent_foreach_shows_what_is_in_flight(site, page) -> None:
    expect = site["expect"]
    open_session(page, site, site["cancel"])
    expect(page.locator("#stack .progress").first).to_contain_text("in flight")
    expect(page.locator("#stack li[data-kind=lane]").first).to_be_visible()


def test_a_parallel_shows_its_branches_done_of_all(site, page) -> None:
    expect = site["expect"]
    open_session(page, site, site["spread"])
    frame = page.locator("#stack li[data-kind=parallel]")
    expect(frame).to_contain_text("3 branches")
    expect(frame.locator(".count")).to_have_text("2 / 3 done")
    expect(frame).to_contain_text("1 in flight")
    expect(page.locator("#stack li[data-kind=lane]")).to_contain_text("ledger")


def test_abort_pauses_a_running_session_resumably(site, page) -> None:
    expect, sid, rt = site["expect"], site["abort"], site["rt"]
    open_session(page, site, sid)
    page.click("#abort")
    expect(page.locator("#notice")).to_contain_text("abort requested")
    assert page.posts[-1].endswith(f"/api/sessions/{sid}/abort")
    RELEASE[sid].set()  # the step in flight ends; the run stops at its next checkpoint
    wait_for(lambda: rt.session(sid).status == "paused", "the aborted run did not pause")
    assert rt.session(sid).state.pause.reason == "aborted"
    expect(page.locator("#detail-status")).to_have_text("paused")
    expect(page.locator("#resume")).to_be_enabled()


def test_cancel_asks_for_a_confirmation_first(site, page) -> None:
    expect, sid, rt = site["expect"], site["cancel"], site["rt"]
    open_session(page, site, sid)
    page.click("#cancel")
    expect(page.locator("#cancel")).to_have_text("Click again to cancel")
    page.wait_for_timeout(200)
    assert page.posts == [] and rt.session(sid).status == "running"
    page.click("#cancel")
    expect(page.locator("#notice")).to_contain_text("cancel")
    RELEASE[sid].set()
    wait_for(lambda: rt.session(sid).status == "cancelled", "the cancelled run did not stop")
    expect(page.locator("#detail-status")).to_have_text("cancelled")


# --- the sessions table ---------------------------------------------------------------------------


def test_paging_follows_the_servers_cursor_forward_and_back(site, page) -> None:
    expect = site["expect"]
    page.goto(site["base"])
    rows = page.locator("#sessions tbody tr")
    expect(rows.first).to_be_visible()
    page.select_option("#page-size", "10")
    expect(rows).to_have_count(10)
    expect(page.locator("#prev")).to_be_disabled()
    first = rows.evaluate_all("rs => rs.map(r => r.dataset.session)")
    with page.expect_request(lambda r: "/api/sessions?" in r.url and "cursor=" in r.url) as asked:
        page.click("#next")
    assert "offset" not in asked.value.url
    expect(page.locator("#page-info")).to_have_text("page 2")
    expect(rows.first).not_to_have_attribute("data-session", first[0])
    second = rows.evaluate_all("rs => rs.map(r => r.dataset.session)")
    total = len(site["rt"].sessions(limit=100))
    assert len(second) == total - 10 and not set(first) & set(second)
    expect(page.locator("#next")).to_be_disabled()  # the server's next_cursor was null
    expect(page.locator("#prev")).to_be_enabled()
    page.click("#prev")
    expect(page.locator("#page-info")).to_have_text("page 1")
    expect(rows.first).to_have_attribute("data-session", first[0])
    expect(rows).to_have_count(10)


def test_search_by_id_prefix_or_flow_name(site, page) -> None:
    expect, sid = site["expect"], site["tickets"]
    page.goto(site["base"])
    rows = page.locator("#sessions tbody tr")
    expect(rows.first).to_be_visible()
    with page.expect_request(lambda r: "q=" + sid[:8] in r.url):
        page.fill("#search", sid[:8])
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-session", sid)
    page.fill("#search", "approval")
    expect(rows).to_have_count(2)
    for flow in rows.locator("td:nth-child(3)").all_text_contents():
        assert flow == "approval"


# --- views -----------------------------------------------------------------------------------------


def test_the_flow_diagram_is_the_sessions_version_with_where_it_waits(site, page) -> None:
    expect, sid = site["expect"], site["tickets"]
    fingerprint = site["rt"].session(sid).fingerprint
    with page.expect_response(lambda r: "/api/flows/tickets?" in r.url) as asked:
        open_session(page, site, sid)
    assert asked.value.ok and f"fingerprint={fingerprint}" in asked.value.url
    # The answer has arrived; the page draws it just after: wait for the drawing.
    expect(page.locator("#flow .fnode").first).to_be_visible()
    shown = page.locator("#flow .fnode").evaluate_all(
        "ns => ns.map(n => [n.dataset.path, n.querySelector('.kind').textContent])"
    )
    assert shown == [
        ["", "flow"],
        ["load", "step"],
        ["tickets", "foreach"],
        ["tickets/triage", "step"],
        ["tickets/review", "gate"],
    ]
    expect(page.locator("#flow .fnode.current")).to_have_attribute("data-path", "tickets/review")
    expect(page.locator('#flow .fnode[data-path="tickets"]')).to_have_class("fnode on-path")
    expect(page.locator('#flow .fnode[data-path="load"]')).to_have_class("fnode")


def test_logs_are_merged_into_the_timeline_by_level(site, page) -> None:
    expect = site["expect"]
    open_session(page, site, site["tickets"])
    logs = page.locator("#timeline li.log")
    expect(logs).to_have_count(1)  # info and up: the warning only
    expect(logs.first).to_contain_text("WARNING app.billing")
    expect(logs.first).to_contain_text("retrying the card charge")
    expect(logs.first.locator(".path")).to_have_text("load")
    with page.expect_request(lambda r: "/logs?" in r.url and "level=debug" in r.url):
        page.select_option("#log-level", "debug")
    expect(logs).to_have_count(2)
    expect(page.locator("#timeline li.log[data-level=DEBUG]")).to_contain_text("connecting")
    page.select_option("#log-level", "off")
    expect(logs).to_have_count(0)


def test_replay_plays_a_finished_sessions_events_back(site, page) -> None:
    expect, rt = site["expect"], site["rt"]
    sid = rt.sessions(flow="quick", limit=1)[0].session_id
    open_session(page, site, sid)
    expect(page.locator("#replay")).to_be_enabled()
    page.select_option("#replay-speed", "100")
    with page.expect_request(lambda r: "/replay?" in r.url and "speed=100" in r.url):
        page.click("#replay")
    count = len(rt.session(sid).events())
    expect(page.locator("#timeline-note")).to_have_text(f"replay finished: {count} events")
    expect(page.locator("#timeline li.event")).to_have_count(count)
    expect(page.locator("#timeline li.event .type").last).to_have_text("run.completed")
    page.click("#replay")  # back to live
    expect(page.locator("#replay")).to_have_text("Replay")


def test_stats_draws_charts_of_a_period(site, page) -> None:
    expect, rt = site["expect"], site["rt"]
    page.goto(site["base"])
    page.click("#tab-stats")
    expect(page.locator("#timeline-svg rect[data-status=completed]").first).to_be_visible()
    expect(page.locator("#nodes-svg")).to_contain_text("triage")
    assert rt.stats().metrics == {"tokens": 1200, "cost": 0.42}  # one triage ran
    expect(page.locator("#tile-tokens b")).to_have_text("1,200")
    expect(page.locator("#tile-cost b")).to_have_text("$0.42")
    expect(page.locator("#tile-sessions b")).to_have_text(str(len(rt.sessions(limit=100))))
    page.screenshot(path=str(DOCS / "monitor-stats.png"))
    with page.expect_response(lambda r: "/api/stats/timeline?" in r.url) as asked:
        page.select_option("#stats-period", "3600")
    query = asked.value.url.split("?", 1)[1]
    assert "since=" in query and "until=" in query and "buckets=24" in query
    buckets = asked.value.json()["buckets"]
    assert len(buckets) == 24
    assert sum(sum(b["by_status"].values()) for b in buckets) == len(rt.sessions(limit=100))


def test_the_user_name_and_logout(site) -> None:
    expect, base = site["expect"], site["base"]
    tab = watched(site["browser"])
    try:
        log_in(tab, site)
        expect(tab.locator("#logout")).to_be_visible()
        assert [c["name"] for c in tab.context.cookies()] == ["tarry_token"]
        with tab.expect_navigation(url=f"{base}/login"):
            tab.click("#logout")
        assert tab.posts[-1] == f"{base}/logout"
        expect(tab.locator("#token")).to_be_visible()  # the login form
        assert tab.context.cookies() == []
        assert tab.context.request.get(f"{base}/api/me").status == 401
        tab.goto(base)
        expect(tab.locator("#token")).to_be_visible()
        assert not_logged_in(tab.errors) == []
    finally:
        tab.context.close()


def test_routes_the_server_lacks_leave_a_note_not_a_broken_page(site, page) -> None:
    expect = site["expect"]
    open_session(page, site, site["tickets"], base=site["older"])
    expect(page.locator("#flow")).to_contain_text("not available on this server")
    expect(page.locator("#timeline-note")).to_contain_text("logs are not available")
    expect(page.locator("#logout")).to_be_hidden()
    page.click("#tab-stats")
    expect(page.locator("#chart-timeline")).to_contain_text("needs a newer server")
    expect(page.locator("#tile-tokens b")).to_have_text("1,200")  # /api/stats itself is there
    # The browser reports each 404 as a console error; nothing else went wrong.
    page.errors[:] = [e for e in page.errors if "404" not in e]


# --- widths ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", WIDTHS)
def test_no_horizontal_scroll_and_a_screenshot_at(site, page, width: int) -> None:
    expect = site["expect"]
    page.set_viewport_size({"width": width, "height": 900 if width > 400 else 780})
    open_session(page, site, site["tickets"])
    expect(page.locator("#flow .fnode.current")).to_be_visible()
    expect(page.locator("#timeline li.log")).to_have_count(1)
    overflow = "document.documentElement.scrollWidth <= window.innerWidth"
    assert page.evaluate(overflow)
    for control in ("approve", "reject", "cancel"):
        page.locator(f"#{control}").scroll_into_view_if_needed()
        expect(page.locator(f"#{control}")).to_be_in_viewport()
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(DOCS / f"monitor-{width}.png"), full_page=width < 1000)
    page.click("#tab-stats")
    expect(page.locator("#timeline-svg")).to_be_visible()
    assert page.evaluate(overflow)
    assert (DOCS / f"monitor-{width}.png").stat().st_size > 10_000


def test_the_login_page_fits_a_phone_and_lets_you_in(site) -> None:
    expect = site["expect"]
    tab = watched(site["browser"])
    try:
        tab.set_viewport_size({"width": 360, "height": 740})
        tab.goto(site["base"])
        expect(tab.locator("#token")).to_be_visible()
        assert tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        tab.fill("#token", "not-the-token")
        tab.click("button[type=submit]")
        expect(tab.locator("#error")).to_contain_text("wrong token")
        tab.fill("#token", TOKEN)
        tab.click("button[type=submit]")
        expect(tab.locator("#sessions tbody tr").first).to_be_visible()
        expect(tab.locator("#user")).to_have_text(USER)
        assert tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert not_logged_in(tab.errors) == []
    finally:
        tab.context.close()
