"""The monitor page on a busy session, in headless Chromium against a real server: a ForEach of
thousands of trivial steps with durability="step" (thousands of events a second) runs while the
page follows it. The page's DOM stays under 5,000 elements throughout (a MutationObserver
records the largest count after every change), its JS heap stays bounded (CDP
`Performance.getMetrics` after a garbage collection), the timeline holds a bounded window of
the newest events, and "Load older" brings earlier ones back. No timing is asserted here:
`benchmarks/monitor_busy.py` measures click latency and heap growth over minutes."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import tarry
from support import PAGE_TIMEOUT, WAIT, bounded_expect, live
from tarry import Flow, ForEach

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
TIMEOUT = PAGE_TIMEOUT  # ms: the busy session's end may take a while on a loaded machine
ITEMS = 2500  # four events each: 10,000 events
WINDOW = 400  # the page's TIMELINE_WINDOW
MB = 1024 * 1024

GO = threading.Event()
STARTED = threading.Event()


def step(ctx):
    if ctx.index == 0:
        STARTED.set()
        GO.wait(WAIT)  # the page opens the session before the flood
    return ctx.index


BUSY = Flow("busy", [ForEach("items", list(range(ITEMS)), step)])

# Records the most elements the document ever held, after every change to it.
SAMPLER = """
window.__maxElements = 0;
new MutationObserver(() => {
  window.__maxElements = Math.max(window.__maxElements, document.getElementsByTagName("*").length);
}).observe(document, {childList: true, subtree: true});
"""


def heap(cdp) -> int:
    cdp.send("HeapProfiler.collectGarbage")
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return int(metrics["JSHeapUsedSize"])


def test_a_busy_session_keeps_the_page_small(tmp_path: Path) -> None:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing")
        pytest.skip(f"{CHROMIUM} is missing")
    sync_api = pytest.importorskip("playwright.sync_api")
    from tarry.drivers.http import create_app

    rt = tarry.Runtime(store=f"sqlite:///{tmp_path / 'busy.db'}", flows=[BUSY])
    GO.clear()
    STARTED.clear()
    result: dict[str, tarry.Outcome] = {}
    runner = threading.Thread(
        target=lambda: result.setdefault("out", rt.run(BUSY, durability="step")), daemon=True
    )
    runner.start()
    assert STARTED.wait(WAIT)
    (sid,) = [s.session_id for s in rt.sessions()]

    with live(create_app(rt, poll_interval=0.2)) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 860})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.add_init_script(SAMPLER)
            page.set_default_timeout(TIMEOUT)
            expect = bounded_expect(sync_api)
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            page.goto(f"{base}/#session={sid}")
            expect(page.locator("#detail-status")).to_have_text("running")
            expect(page.locator("#timeline li").last).to_contain_text("node.started")
            before = heap(cdp)

            GO.set()  # the flood
            page.wait_for_function(
                f"() => Number(document.querySelector('#timeline li:last-child')?.dataset.seq) > {ITEMS * 2}"
            )
            middle = heap(cdp)
            assert page.evaluate("document.getElementsByTagName('*').length") < 5000
            expect(page.locator("#timeline li").last).to_contain_text("run.completed")
            runner.join(WAIT)
            assert result["out"].ok
            after = heap(cdp)

            events = len(rt.session(sid).events(0, 100_000))
            assert events > ITEMS * 4
            assert page.evaluate("window.__maxElements") < 5000
            assert page.locator("#timeline li").count() <= WINDOW
            assert middle < before + 10 * MB and after < before + 10 * MB, (before, middle, after)

            # The window slides: the oldest events shown are near the end; older ones load.
            first = int(page.locator("#timeline li.event").first.get_attribute("data-seq"))
            assert first > events - WINDOW - 1
            page.click("#load-older")
            expect(page.locator("#timeline li.event").first).to_have_attribute(
                "data-seq", str(first - 200)
            )
            assert page.locator("#timeline li").count() <= WINDOW
            expect(page.locator("#jump-latest")).to_be_visible()
            page.click("#jump-latest")
            expect(page.locator("#timeline li").last).to_contain_text("run.completed")
            expect(page.locator("#jump-latest")).to_be_hidden()
            assert errors == []
        finally:
            browser.close()
