"""The README's quick start as a user with `mypy --strict` writes it (tests/test_typing.py)."""

from __future__ import annotations

from typing import Any

from tarry import Context, Flow, ForEach, Gate, Outcome, Runtime
from tarry.snapshots import MemoryStore, SQLiteStore


def triage(ctx: Context) -> dict[str, Any]:
    return {"id": ctx.item["id"], "urgent": "fire" in ctx.item["text"]}


flow = Flow(
    "tickets",
    [
        ForEach("each", lambda ctx: ctx.input["tickets"], [triage, Gate("approve", "File it?")]),
    ],
)

rt = Runtime(store="memory://")
stores = [Runtime(store=MemoryStore()), Runtime(store=SQLiteStore(":memory:"))]
out = rt.run(flow, {"tickets": [{"id": 1, "text": "printer on fire"}]})
if out.paused:
    assert out.pause is not None and out.pause.kind == "human"
    out = rt.resume(out.token, {"approved": True, "by": "ann"})
print(out.output)

# The other entry points and what they give back.
sync_out: Outcome = rt.run_sync(flow, {"tickets": []}, session_id="s-1")
failed = rt.run(flow, session_id="s-2")
if failed.failed and failed.error is not None and failed.token is not None:
    skipped: Outcome = rt.skip(failed.token, output=None)
waiting = [p.token for p in out.pauses]
view = rt.session(out.session_id)
status: str = view.status
summaries = [s.session_id for s in rt.sessions(status="paused", limit=10)]
by_status: dict[str, int] = rt.stats().by_status
unsubscribe = rt.subscribe(lambda event: print(event.seq, event.type))
unsubscribe()
