"""The monitor page's per-item grid of a ForEach, in headless Chromium against a real server: a
cell per item by index, coloured by status, 200 a page, for each open ForEach."""

from __future__ import annotations

from pathlib import Path

import tarry
from support import browsing, need_chromium
from tarry import Branch, Flow, ForEach, Gate


def item(ctx):
    return ctx.index


LONG = Flow(
    "long",
    [
        ForEach(
            "rows",
            list(range(250)),
            [item, Branch("late", when=lambda c: c.index == 210, then=Gate("ok"))],
        )
    ],
)
WIDE = Flow(
    "wide",
    [
        ForEach(
            "items",
            list(range(30)),
            [Branch("check", when=lambda c: c.index % 3 == 0, then=Gate("ok"))],
            concurrency=4,
        )
    ],
)


def test_the_item_grid_pages_through_a_foreach(tmp_path: Path) -> None:
    need_chromium()
    from tarry.drivers.http import create_app

    rt = tarry.Runtime(store=f"sqlite:///{tmp_path / 'items.db'}", flows=[LONG, WIDE])
    long = rt.run(LONG)
    wide = rt.run(WIDE)
    assert long.paused and wide.paused
    with browsing(create_app(rt, poll_interval=0.2)) as b:
        page, expect, errors, base = b.page, b.expect, b.errors, b.base
        page.goto(f"{base}/#session={long.session_id}")
        cells = page.locator("#items-grid .cell")
        expect(page.locator("#items-card")).to_be_visible()
        expect(cells).to_have_count(200)
        expect(page.locator("#items-grid .i-done")).to_have_count(200)
        expect(page.locator("#items-range")).to_have_text("items 0–199 of 250")
        expect(page.locator("#items-counts")).to_contain_text("210 done")
        expect(page.locator("#items-counts")).to_contain_text("1 waiting")
        expect(page.locator("#items-prev")).to_be_disabled()
        page.click("#items-next")
        expect(page.locator("#items-range")).to_have_text("items 200–249 of 250")
        expect(cells).to_have_count(50)
        expect(page.locator('#items-grid [data-index="210"]')).to_have_attribute(
            "data-status", "waiting"
        )
        expect(page.locator("#items-grid .i-done")).to_have_count(10)
        expect(page.locator("#items-grid .i-not_started")).to_have_count(39)
        expect(page.locator("#items-next")).to_be_disabled()

        # A concurrent ForEach: its waiting lanes (parked in wait rows) by index.
        page.locator(f'#sessions tr[data-session="{wide.session_id}"]').click()
        expect(page.locator("#items-range")).to_have_text("items 0–29 of 30")
        for index, status in ((0, "waiting"), (1, "done"), (9, "waiting"), (10, "not_started")):
            expect(page.locator(f'#items-grid [data-index="{index}"]')).to_have_attribute(
                "data-status", status
            )
        expect(page.locator("#items-grid .i-waiting")).to_have_count(4)

        # Once the ForEach is over, no grid.
        assert rt.resume(long.token, {"approved": True}).ok
        page.locator(f'#sessions tr[data-session="{long.session_id}"]').click()
        expect(page.locator("#detail-status")).to_have_text("completed")
        expect(page.locator("#items-card")).to_be_hidden()
        assert errors == []
