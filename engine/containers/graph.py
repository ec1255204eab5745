"""Graph: action routing between named nodes, as in PocketFlow."""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from typing import Any

from tarry.engine.bounds import frame_bytes
from tarry.engine.context import Scope
from tarry.engine.elements.body import as_element
from tarry.engine.elements.element import Element, Route, Signal, check_name
from tarry.engine.errors import InvalidFlow, UnknownRoute
from tarry.engine.execution import Execution
from tarry.engine.failure import admit, completed, fail
from tarry.engine.signals import Checkpoint
from tarry.engine.state import events as ev


class Graph(Element):
    """Nodes that route to each other by action.

    A node returns `Route(action, value)` (a plain return is action `"default"`);
    `routes[node][action]` names the next node, or `None` to end. A node absent from `routes`
    ends the graph. An action that its node's routes do not name fails the run with
    `UnknownRoute`: resuming with a repaired flow routes again without re-running the node.
    Each node visit is one iteration (item: the node's name); the output is the last node's.
    """

    kind = "graph"

    def __init__(
        self,
        name: str,
        nodes: Iterable[Any] | Mapping[str, Any],
        start: str,
        routes: Mapping[str, Mapping[str, str | None]],
    ) -> None:
        self.name = check_name(name, "Graph")
        if isinstance(nodes, Mapping):
            elements = {}
            for key, node in nodes.items():
                el = as_element(node)
                if el.name != key:
                    msg = f"Graph {name!r}: node {key!r} is an element named {el.name!r}"
                    raise InvalidFlow(msg)
                elements[key] = el
        else:
            elements = {}
            for node in nodes:
                el = as_element(node)
                if el.name in elements:
                    msg = f"Graph {name!r}: node names must be unique ({el.name!r} appears twice)"
                    raise InvalidFlow(msg)
                elements[el.name] = el
        self.nodes: dict[str, Element] = elements
        if start not in elements:
            msg = (
                f"Graph {name!r}: start must name a node (got {start!r}; nodes: {sorted(elements)})"
            )
            raise InvalidFlow(msg)
        self.start = start
        checked: dict[str, dict[str, str | None]] = {}
        for source, table in routes.items():
            if source not in elements:
                msg = f"Graph {name!r}: routes name an unknown node {source!r}"
                raise InvalidFlow(msg)
            for action, target in table.items():
                if target is not None and target not in elements:
                    msg = f"Graph {name!r}: routes[{source!r}][{action!r}] names an unknown node {target!r}"
                    raise InvalidFlow(msg)
            checked[source] = dict(table)
        self.routes = checked

    def _bodies(self) -> Iterable[tuple[str, tuple[Element, ...]]]:
        return (("nodes", tuple(self.nodes.values())),)

    def _describe(self) -> tuple[Any, ...]:
        routes = tuple(
            sorted((s, tuple(sorted(t.items(), key=str))) for s, t in self.routes.items())
        )
        return super()._describe() + (self.start, routes)

    def _next(self, ex: Execution, path: tuple[Any, ...], node: str, action: str) -> str | None:
        table = self.routes.get(node)
        if table is None:
            return None
        if action not in table:
            exc = UnknownRoute(self.name, node, action, sorted(table))
            raise fail(ex, path, exc)
        return table[action]

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        current: str | None  # the node in progress or next; None: the graph is done
        frame = ex.take_frame(path)
        if frame is None:
            ex.room -= frame_bytes(path)  # checked with what the container adds next
            ex.emit(ev.NODE_STARTED, path, {"kind": "graph"})
            index, current, last = 0, self.start, prev
        else:
            index, current = frame.iteration, frame.selected
            if current is None and not frame.completed_iterations:
                current = self.start  # stopped at the checkpoint before its first node
            last = frame.last_output if frame.completed_iterations else prev
        visited = current
        while current is not None:
            node = self.nodes[current]
            ipath = path + (index,)
            if frame is not None and frame.started and frame.child:
                # The node completed but its route failed: route again, do not run it again.
                value = frame.child_outputs.get(current)
                action = frame.action or "default"
            else:
                if frame is None or not frame.started:
                    if ex.checkpoint(ipath):
                        yield Checkpoint(ipath)
                    ex.emit(ev.ITERATION_STARTED, path, {"index": index, "item": current})
                result = yield from node._run(ex, ipath + (node.name,), last, scope)
                if type(result) is Route:
                    action, value = result.action, result.value
                else:
                    action, value = "default", result
            frame = None
            nxt = self._next(ex, path, current, action)
            data = {"index": index, "output": value, "action": action, "next": nxt}
            admit(ex, ev.ITERATION_COMPLETED, path, data, ex.size_of(value))  # the last output
            ex.emit(ev.ITERATION_COMPLETED, path, data)
            visited = current
            last, current, index = value, nxt, index + 1
        completed(ex, path, last, ex.size_of(last), {"selected": visited})
        return last
