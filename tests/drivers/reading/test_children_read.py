"""A session's children (`SessionView.children`) come from its event log: a session read again
in the same process costs the events stored since, not the whole log (the page polls a busy
session's GET /api/sessions/{id} every 2 s)."""

from __future__ import annotations

from typing import Any

import tarry
from tarry import Child, Flow, ForEach, Gate


def item(ctx):
    return ctx.index


class CountingEvents:
    """A store whose `events` reads are counted (events returned)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.read: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def events(self, sid: str, after: int = 0, limit: int | None = None) -> Any:
        found = self.store.events(sid, after, limit)
        self.read.append(len(found))
        return found


def view_of(rt: tarry.Runtime, sid: str, store: CountingEvents) -> Any:
    view = rt.session(sid)
    view._store = store  # noqa: SLF001 - count what it reads
    return view


def test_a_log_is_read_once_then_only_what_came_since() -> None:
    many = Flow("many", [ForEach("items", list(range(300)), item), Gate("end")])
    rt = tarry.Runtime(flows=[many])
    out = rt.run(many)
    store = CountingEvents(rt.store)
    assert view_of(rt, out.session_id, store).children == []
    assert sum(store.read) > 900  # the whole log, once
    store.read.clear()
    assert view_of(rt, out.session_id, store).children == []
    assert sum(store.read) == 0  # nothing new since


def test_children_found_later_are_added() -> None:
    kid = Flow("kid", [Gate("ok")])
    parent = Flow("parent", [Gate("first"), Child("kid", kid)])
    rt = tarry.Runtime(flows=[kid, parent])
    out = rt.run(parent)
    assert rt.session(out.session_id).children == []  # read up to the first Gate
    out = rt.resume(out.token, {"approved": True})
    (child,) = rt.session(out.session_id).children  # the events since show the child
    assert rt.session(child).parent == out.session_id
