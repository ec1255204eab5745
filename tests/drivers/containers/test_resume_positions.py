"""Resuming from positions that are rare but real: a Graph stopped before its first node, and
a ForEach whose out-of-line items or results the store no longer holds. On memory, SQLite and
PostgreSQL."""

from __future__ import annotations

from typing import Any

from tarry import Flow, ForEach, Gate, Graph, Route, Runtime, step
from tarry.snapshots import dumps, loads


def graphy() -> Flow:
    route = step(lambda ctx: Route("next", 1), "route")
    return Flow(
        "graphy",
        [Graph("g", [route, Gate("gate")], start="route", routes={"route": {"next": "gate"}})],
    )


def nest() -> Flow:
    """Pauses at items/0/ok, with the ForEach's three items stored out of line."""
    return Flow(
        "nest",
        [ForEach("items", [1, 2, 3], [step(lambda ctx: ctx.item * 2, "double"), Gate("ok")])],
    )


def resume_to_end(rt: Runtime, token: str) -> Any:
    out = rt.resume(token, True)
    while out.paused:
        out = rt.resume(out.token, True)
    return out


def test_an_abort_before_a_graphs_first_node_resumes_the_graph(store) -> None:
    """The one position with no node selected: a Graph stopped at its first checkpoint (it
    used to end at once on resume, with the output of the element before it)."""
    flow = graphy()
    rt = Runtime(store=store)

    def abort_as_the_graph_starts(event) -> None:
        if event.type == "node.started" and event.path == ("g",):
            rt.abort(event.session_id)

    unsubscribe = rt.subscribe(abort_as_the_graph_starts)
    out = rt.run(flow)
    unsubscribe()
    assert out.paused and out.pause.reason == "aborted" and out.pause.path == ("g", 0)
    again = Runtime(store=store, flows=[flow]).resume(out.token)
    assert again.paused and again.pause.path == ("g", 1, "gate")  # the graph ran, from its start
    assert resume_to_end(rt, again.token).output == {"approved": True}


def test_a_foreach_counting_more_items_than_stored_fails_resumably_when_it_reads_one(store) -> None:
    """Items and results live out of line, read as the run needs them: one missing fails the
    ForEach with an error of type SnapshotError (it used to raise LookupError out of resume),
    and the session stays failed, with a token, cancellable."""
    rt = Runtime(store=store, flows=[nest()])
    out = rt.run(nest())
    sid = out.session_id
    record = store.load(sid)
    envelope = loads(record.state)
    envelope["state"]["container_stack"][0]["size"] = 5
    record.state = dumps(envelope)
    store.save(record, record.version)

    failed = resume_to_end(rt, out.token)
    assert failed.failed and failed.error.type == "SnapshotError"
    assert failed.error.path == ("items",) and "item 3 of items is missing" in failed.error.message
    assert rt.session(sid).status == "failed" and failed.token
    assert rt.cancel(failed.token).error.type == "cancelled"
