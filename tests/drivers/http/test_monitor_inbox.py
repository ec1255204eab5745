"""The monitor page's inbox, in headless Chromium against a real server with named users: the
Gates waiting for a decision, opened on the logged-in user's own, filtered by assignee (or
unassigned), each row opening its session, and a decided Gate leaving it."""

from __future__ import annotations

from pathlib import Path

import tarry
from support import browsing, need_chromium
from tarry import Flow, ForEach, Gate

ANN = "ann-token-5678"

FOR_ANN = Flow("for_ann", [Gate("sign_off", "ship release 7?", assignee="ann")])
FOR_BOB = Flow("for_bob", [Gate("review", "check the refund", assignee="bob")])
ANYONE = Flow("anyone", [Gate("ok", "anyone may decide")])
OWNED = Flow(
    "owned",
    [
        ForEach(
            "tickets",
            [{"owner": "ann"}, {"owner": "bob"}],
            [Gate("triage", "triage it", assignee=lambda ctx: ctx.item["owner"])],
            concurrency=2,
        )
    ],
)


def test_the_inbox_by_assignee(tmp_path: Path) -> None:
    need_chromium()
    from tarry.drivers.http import create_app

    flows = [FOR_ANN, FOR_BOB, ANYONE, OWNED]
    rt = tarry.Runtime(store=f"sqlite:///{tmp_path / 'inbox.db'}", flows=flows)
    sids = {f.name: rt.run(f).session_id for f in flows}
    with browsing(create_app(rt, poll_interval=0.2, users={"ann": ANN})) as b:
        page, expect, errors, base = b.page, b.expect, b.errors, b.base
        page.goto(base + "/")
        page.fill("#token", ANN)
        page.click("button[type=submit]")
        expect(page.locator("#user")).to_have_text("ann")
        page.click("#tab-inbox")
        rows = page.locator("#inbox tbody tr")
        # Ann's own first: her Gate and her ticket's.
        expect(rows).to_have_count(2)
        expect(page.locator("#inbox-assignee")).to_have_value("ann")
        expect(page.locator('#inbox-assignee option[value="ann"]')).to_have_text("mine: ann (2)")
        expect(page.locator(f'#inbox tr[data-session="{sids["for_ann"]}"]')).to_contain_text(
            "ship release 7?"
        )
        expect(page.locator('#inbox tr[data-path="tickets/0/triage"]')).to_contain_text("ann")
        page.select_option("#inbox-assignee", "bob")
        expect(rows).to_have_count(2)
        expect(page.locator('#inbox tr[data-path="tickets/1/triage"]')).to_contain_text("bob")
        page.select_option("#inbox-assignee", "")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-session", sids["anyone"])
        page.select_option("#inbox-assignee", "*")
        expect(rows).to_have_count(5)

        # A row opens its session, where it can be decided; then it leaves the inbox.
        page.select_option("#inbox-assignee", "ann")
        page.locator(f'#inbox tr[data-session="{sids["for_ann"]}"]').click()
        expect(page.locator("#sessions-view")).to_be_visible()
        expect(page.locator("#detail-id")).to_have_text(sids["for_ann"])
        page.click("#approve")
        expect(page.locator("#detail-status")).to_have_text("completed")
        page.click("#tab-inbox")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-path", "tickets/0/triage")
        assert errors == []
