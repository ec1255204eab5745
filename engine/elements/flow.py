"""Flow: the root element, its fingerprint, and lookup of elements by path."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from tarry.engine.context import ROOT
from tarry.engine.elements.body import as_body
from tarry.engine.elements.element import Element, Signal, check_name, resume_prev, run_body, unwrap
from tarry.engine.execution import Execution
from tarry.engine.short_hash import short_hash


def structural(path: tuple[Any, ...]) -> tuple[str, ...]:
    """A run path without its iteration indexes: `("tickets", 47, "triage")` -> names only."""
    return tuple(p for p in path if isinstance(p, str))


class Flow:
    """The root of a workflow: runs `body` in order; its output is the last element's output.

    `version` is part of the fingerprint: bump it to mark a change of meaning that keeps the
    same structure, so that sessions started by the old flow refuse to resume on the new one.
    """

    kind = "flow"

    def __init__(self, name: str, body: Any, *, version: str | int | None = None) -> None:
        self.name = check_name(name, "Flow")
        self.body = as_body(body, name)
        self.version = version
        self._index: dict[tuple[str, ...], Element] = {}
        #: Each element's (and each Parallel branch's) place in the tree, in order.
        self._places: dict[tuple[str, ...], int] = {}
        self._build_index(self.body, ())
        description = ("flow", self.name, version, tuple(e._describe() for e in self.body))
        self.fingerprint = short_hash(repr(description))

    def _build_index(self, body: tuple[Element, ...], base: tuple[str, ...]) -> None:
        for element in body:
            key = base + (element.name,)
            self._index[key] = element
            self._places[key] = len(self._places)
            for label, child_body in element._bodies():
                # A Parallel's branch name is part of its elements' paths.
                inner = key + (label,) if element.labelled else key
                self._places.setdefault(inner, len(self._places))
                self._build_index(child_body, inner)

    def find(self, path: tuple[Any, ...]) -> Element | None:
        """The element at a run path (iteration indexes are ignored), or None."""
        return self._index.get(structural(path))

    def order(self, path: tuple[Any, ...]) -> tuple[int, ...]:
        """A key that sorts run paths in the order of the tree: elements and Parallel branches
        as declared, iterations by index (the order their lanes start in)."""
        names: tuple[str, ...] = ()
        key = []
        for part in path:
            if isinstance(part, str):
                names += (part,)
                key.append(self._places.get(names, -1))
            else:
                key.append(part)
        return tuple(key)

    def _run(self, ex: Execution) -> Generator[Signal, Any, Any]:
        state = ex.state
        start = len(state.outputs)
        # A large input or output kept out of line (state.OutOfLine) is handed on as its
        # reference, and read only where it is used: by `ctx.prev` (CopyingContext), or when a
        # body that runs nothing returns it (run_body). A resume never reads it for nothing.
        prev = resume_prev(self.body, start, state.outputs, state.input)
        result = yield from run_body(ex, self.body, (), start, prev, ROOT)
        return unwrap(result)

    def __repr__(self) -> str:
        return f"Flow({self.name!r}, version={self.version!r})"
