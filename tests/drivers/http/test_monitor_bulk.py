"""Bulk actions in the monitor's sessions table, in headless Chromium against a real server:
pick sessions by their checkboxes, choose Approve, Reject, Cancel or Retry, confirm, and each
picked session it applies to gets the same request as the single-session controls send (the
others are left alone and said so)."""

from __future__ import annotations

from pathlib import Path

import tarry
from support import browsing, need_chromium
from tarry import Flow, Gate

APPROVAL = Flow("approval", [Gate("sign_off")])
FAILS_ONCE: set[str] = set()


def flaky(ctx):
    if ctx.session_id not in FAILS_ONCE:
        FAILS_ONCE.add(ctx.session_id)
        raise ConnectionError("the first call times out")
    return "ok"


FLAKY = Flow("flaky", [flaky])


def test_bulk_approve_reject_cancel_and_retry_after_a_confirmation(tmp_path: Path) -> None:
    need_chromium()
    from tarry.drivers.http import create_app

    rt = tarry.Runtime(store=f"sqlite:///{tmp_path / 'bulk.db'}", flows=[APPROVAL, FLAKY])
    gates = [rt.run(APPROVAL).session_id for _ in range(5)]
    failed = [rt.run(FLAKY).session_id for _ in range(2)]
    assert all(rt.session(s).status == "failed" for s in failed)
    with browsing(create_app(rt, poll_interval=0.2)) as b:
        page, expect, errors, base = b.page, b.expect, b.errors, b.base
        page.goto(base)
        expect(page.locator("#sessions tbody tr")).to_have_count(7)
        expect(page.locator("#bulk")).to_be_hidden()

        def pick(*ids: str) -> None:
            for sid in ids:
                page.check(f'#sessions tr[data-session="{sid}"] .c-pick input')

        # Approve two: nothing is sent before the confirmation.
        pick(gates[0], gates[1])
        expect(page.locator("#bulk-count")).to_have_text("2 selected")
        expect(page.locator("#detail-id")).to_have_text("No session selected")  # not opened
        expect(page.locator('[data-bulk="retry"]')).to_be_disabled()  # none failed
        page.click('[data-bulk="approve"]')
        expect(page.locator("#bulk-question")).to_have_text("Approve 2 sessions?")
        page.click("#bulk-no")  # changed my mind: nothing happens
        assert rt.session(gates[0]).status == "paused"
        page.click('[data-bulk="approve"]')
        page.click("#bulk-yes")
        expect(page.locator("#bulk-result")).to_have_text("2 approved.")
        expect(page.locator(f'#sessions tr[data-session="{gates[0]}"]')).to_contain_text(
            "completed"
        )
        assert [rt.session(s).status for s in gates[:2]] == ["completed", "completed"]

        # Reject one, with a failed session picked too: it is left alone, and said so.
        pick(gates[2], failed[0])
        page.click('[data-bulk="reject"]')
        expect(page.locator("#bulk-question")).to_contain_text("Reject 1 session?")
        expect(page.locator("#bulk-question")).to_contain_text("1 not paused: left alone")
        page.click("#bulk-yes")
        expect(page.locator("#bulk-result")).to_have_text("1 rejected.")
        assert rt.session(failed[0]).status == "failed"

        # Retry both failed sessions (one still picked): they complete.
        pick(failed[1])
        page.click('[data-bulk="retry"]')
        expect(page.locator("#bulk-question")).to_have_text("Retry 2 sessions?")
        page.click("#bulk-yes")
        expect(page.locator("#bulk-result")).to_have_text("2 retried.")
        assert [rt.session(s).status for s in failed] == ["completed", "completed"]

        # Select all on the page, cancel: the two paused ones are cancelled.
        page.check("#pick-all")
        expect(page.locator("#bulk-count")).to_have_text("7 selected")
        page.click('[data-bulk="cancel"]')
        expect(page.locator("#bulk-question")).to_contain_text("Cancel 2 sessions?")
        page.click("#bulk-yes")
        expect(page.locator("#bulk-result")).to_have_text("2 cancelled.")
        assert [rt.session(s).status for s in gates[3:]] == ["cancelled", "cancelled"]
        assert errors == []
