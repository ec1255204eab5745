"""The monitor page in headless Chromium: it lists a paused session, shows its stack, resumes
it with a JSON value and shows the new events live; it also takes docs/monitor.png."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tarry
from support import PAGE_TIMEOUT, bounded_expect, live
from tarry import Branch, Flow, ForEach, Gate

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
SCREENSHOT = Path(__file__).resolve().parents[3] / "docs" / "monitor.png"
TIMEOUT = PAGE_TIMEOUT  # ms, for every wait on the page


def _need_chromium() -> None:
    if os.path.exists(CHROMIUM):
        return
    reason = f"{CHROMIUM} is missing: install Debian's `chromium` package (.ci/run does)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


# --- a flow with a container stack worth showing -----------------------------------------------


def load(ctx):
    return [
        {"id": "T-101", "urgent": False},
        {"id": "T-102", "urgent": False},
        {"id": "T-103", "urgent": True},
    ]


def triage(ctx):
    return {"ticket": ctx.item["id"], "team": "billing" if ctx.index % 2 else "support"}


def report(ctx):
    return {"tickets": len(ctx.outputs["tickets"])}


TICKETS = Flow(
    "tickets",
    [
        load,
        ForEach(
            "tickets",
            "load",
            [triage, Branch("urgent", when=lambda ctx: ctx.item["urgent"], then=Gate("review"))],
        ),
        report,
    ],
)


def explode(ctx):
    raise ConnectionError("the billing API timed out")


FRAGILE = Flow("sync_billing", [explode])


def test_the_page_resumes_a_paused_session_and_shows_its_events_live(tmp_path: Path) -> None:
    _need_chromium()
    pytest.importorskip("starlette")
    sync_api = pytest.importorskip("playwright.sync_api")
    from tarry.drivers.http import create_app

    rt = tarry.Runtime(store=f"sqlite:///{tmp_path / 'tarry.db'}", flows=[TICKETS, FRAGILE])
    done = rt.run(TICKETS)
    assert rt.resume(done.token, {"approved": True, "by": "ann"}).ok
    broken = rt.run(FRAGILE)
    assert broken.failed
    out = rt.run(TICKETS)
    assert out.paused
    sid = out.session_id

    with live(create_app(rt, poll_interval=0.2)) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 860})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.set_default_timeout(TIMEOUT)
            expect = bounded_expect(sync_api)
            page.goto(base)

            # The table lists the paused session; a click opens it.
            row = page.locator(f'#sessions tr[data-session="{sid}"]')
            expect(row).to_contain_text("paused")
            expect(page.locator("#sessions tbody tr")).to_have_count(3)
            page.select_option("#status-filter", "paused")
            expect(page.locator("#sessions tbody tr")).to_have_count(1)
            row.click()
            page.select_option("#status-filter", "")  # all again; the selection stays
            expect(page.locator("#sessions tbody tr")).to_have_count(3)
            expect(page.locator("#sessions tr.selected")).to_have_attribute("data-session", sid)

            # Its container stack: the ForEach at iteration 2 and the Branch inside it.
            stack = page.locator("#stack li")
            expect(stack).to_have_count(2)
            expect(stack.nth(0)).to_contain_text("tickets")
            expect(stack.nth(0)).to_contain_text("foreach")
            expect(stack.nth(0)).to_contain_text("iteration 3 of 3")
            expect(stack.nth(1)).to_contain_text("branch")
            expect(page.locator("#pause")).to_contain_text("tickets/2/urgent/review")
            timeline = page.locator("#timeline li")
            expect(timeline.last).to_contain_text("run.paused")
            before = timeline.count()
            assert out.token not in page.content()  # the page never shows tokens

            page.fill("#resume-value", '{"approved": true, "by": "browser", "comment": "ok"}')
            page.evaluate("window.__sameDocument = true")
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT))

            page.click("#resume")
            expect(timeline.last).to_contain_text("run.completed")
            expect(page.locator("#detail-status")).to_have_text("completed")
            assert timeline.count() > before + 3
            expect(page.locator("#notice")).to_contain_text("completed")
            expect(row).to_contain_text("completed")  # the table follows too
            expect(page.locator("#resume")).to_be_disabled()
            assert page.evaluate("window.__sameDocument") is True  # no reload happened
            assert rt.session(sid).status == "completed"

            # A session started elsewhere shows up in the table without a reload.
            other = rt.run(TICKETS)
            expect(
                page.locator(f'#sessions tr[data-session="{other.session_id}"]')
            ).to_contain_text("paused")
            assert page.evaluate("window.__sameDocument") is True

            # A failed session shows its error and offers to skip the failed step.
            page.locator(f'#sessions tr[data-session="{broken.session_id}"]').click()
            expect(page.locator("#error")).to_contain_text("ConnectionError")
            expect(page.locator("#error")).to_contain_text("the billing API timed out")
            expect(page.locator("#skip")).to_be_visible()
            # Every route the page asks for is there (users, flows, logs): nothing went wrong.
            assert errors == []
        finally:
            browser.close()
    assert SCREENSHOT.stat().st_size > 10_000
