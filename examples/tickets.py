"""A batch of support tickets: triage each one, wait for a human to approve the risky ones,
then file them all. The run pauses at the first approval, and a *separate process* resumes it
from the SQLite file — as a person clicking "approve" a day later would.

    python examples/tickets.py            # the whole story, end to end
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tarry
from tarry import Branch, Flow, ForEach, Gate, Runtime

DB = Path(__file__).with_name("tickets.db")
STORE = f"sqlite:///{DB}"


def load_tickets(ctx):
    return ctx.input["tickets"]


def triage(ctx):
    ticket = ctx.item
    risky = "refund" in ticket["text"] or "delete" in ticket["text"]
    return {"id": ticket["id"], "risky": risky}


def file_ticket(ctx):
    decision = ctx.prev  # the Branch's output: the Gate's decision, or None if not risky
    approved = decision["approved"] if decision else True
    ctx.metric("filed", int(approved))
    return {"id": ctx.item["id"], "filed": approved, "by": (decision or {}).get("by", "auto")}


def summarize(ctx):
    filed = [t["id"] for t in ctx.prev if t["filed"]]
    return {"filed": filed, "held": [t["id"] for t in ctx.prev if not t["filed"]]}


FLOW = Flow(
    "tickets",
    [
        load_tickets,
        ForEach(
            "each",
            "load_tickets",
            [
                triage,
                Branch(
                    "check",
                    when=lambda ctx: ctx.prev["risky"],
                    then=Gate("approve", "Approve this risky ticket?", assignee="lead"),
                ),
                file_ticket,
            ],
        ),
        summarize,
    ],
)

TICKETS = [
    {"id": 1, "text": "printer is on fire"},
    {"id": 2, "text": "please refund my order"},
    {"id": 3, "text": "password reset"},
    {"id": 4, "text": "delete my account"},
]


def show(out: tarry.Outcome) -> None:
    if out.paused:
        p = out.pause
        where = "/".join(map(str, p.path))
        print(f"  paused ({p.kind}) at {where}: {p.reason!r}, assignee={p.payload['assignee']}")
    elif out.ok:
        print(f"  done: {json.dumps(out.output)}")
    else:
        print(f"  failed: {out.error.type}: {out.error.message}")


def start() -> None:
    rt = Runtime(store=STORE, durability="step")
    print(f"1. run the batch of {len(TICKETS)} tickets (store: {DB.name})")
    out = rt.run(FLOW, {"tickets": TICKETS})
    show(out)
    print(f"   token {out.token[:12]}… saved; this process exits now.")
    DB.with_suffix(".token").write_text(out.token)


def approve(token: str, approved: bool) -> str:
    """Run in a fresh process: resume one approval, print, hand the next token back."""
    rt = Runtime(store=STORE, flows=[FLOW], durability="step")
    out = rt.resume(token, {"approved": approved, "by": "lead"})
    show(out)
    return out.token or ""


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "approve":
        next_token = approve(sys.argv[2], sys.argv[3] == "yes")
        DB.with_suffix(".token").write_text(next_token)
        return
    for path in (DB, DB.with_suffix(".db-wal"), DB.with_suffix(".db-shm")):
        path.unlink(missing_ok=True)
    start()
    for n, answer in enumerate(("yes", "no"), start=2):
        token = DB.with_suffix(".token").read_text()
        print(f"{n}. a new process resumes the token and answers {answer!r}")
        subprocess.run([sys.executable, __file__, "approve", token, answer], check=True)
    DB.with_suffix(".token").unlink()
    rt = Runtime(store=STORE)
    [summary] = rt.sessions()
    view = rt.session(summary.session_id)
    steps = [e for e in view.events() if e.type == "node.completed" and e.path[-1] == "triage"]
    print(
        f"4. history: {summary.status}, {len(view.events())} events, "
        f"{len(steps)} triage steps (each ran once), filed={view.state.metrics.get('filed'):g}"
    )
    assert view.derive_state() == view.state


if __name__ == "__main__":
    main()
