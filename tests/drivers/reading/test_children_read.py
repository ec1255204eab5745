"""A session's children (`SessionView.children`) are listed by the store (one index range), not
read from its event log: the page polls a busy session's GET /api/sessions/{id} every 2 s, and
a read of the log would grow with it."""

from __future__ import annotations

from typing import Any

import tarry
from tarry import Child, Flow, ForEach


class CountingEvents:
    """A store whose `events` reads are counted."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.read = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def events(self, *args: Any, **kwargs: Any) -> Any:
        self.read += 1
        return self.store.events(*args, **kwargs)


INNER = Flow("inner", [lambda ctx: ctx.input])
PARENT = Flow(
    "parent",
    [
        ForEach("steps", list(range(300)), lambda ctx: ctx.item),  # a long log before it
        ForEach("jobs", [1, 2, 3], Child("c", INNER, input=lambda ctx: ctx.item), concurrency=None),
    ],
)


def test_children_read_no_event(store: Any) -> None:
    counting = CountingEvents(store)
    rt = tarry.Runtime(store=counting)
    assert rt.run(PARENT, None, session_id="p").paused
    counting.read = 0
    assert rt.session("p").children == [f"p.jobs.{i}.c" for i in range(3)]
    assert counting.read == 0
    rt.resume_due()
    assert rt.session("p").status == "completed"
    assert rt.session("p").children == [f"p.jobs.{i}.c" for i in range(3)]
