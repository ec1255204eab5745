"""`GET /api/flows` and `GET /api/flows/{name}`: the registered flows, and one flow's structure
as a tree the page draws as a diagram (every element with its kind and path; a Graph's routes,
a Branch's sides)."""

from __future__ import annotations

from typing import Any

from tarry.engine.elements.flow import Flow

#: Kinds reported as they are; anything else (a user's own Element) is reported as "step".
KINDS = frozenset(
    {"flow", "step", "foreach", "loop", "branch", "graph", "parallel", "gate", "wait", "sleep"}
)


def flow_summary(flow: Flow) -> dict[str, Any]:
    return {"name": flow.name, "version": flow.version, "fingerprint": flow.fingerprint}


def structure(flow: Flow) -> dict[str, Any]:
    """The flow as a tree: `{"name", "kind", "path", "children"}` per element; paths are
    structural (names only, as `Flow.find` takes them; a Parallel's branch name included)."""
    return {
        "name": flow.name,
        "kind": "flow",
        "path": [],
        "children": [_element(e, (e.name,)) for e in flow.body],
    }


def _element(element: Any, path: tuple[str, ...]) -> dict[str, Any]:
    kind = element.kind if element.kind in KINDS else "step"
    node: dict[str, Any] = {"name": element.name, "kind": kind, "path": list(path), "children": []}
    sides: dict[str, list[str]] = {}
    for label, body in element._bodies():
        base = path + (label,) if element.labelled else path
        for child in body:
            node["children"].append(_element(child, base + (child.name,)))
        sides[label] = [child.name for child in body]
    if kind == "graph":
        node["start"] = element.start
        node["routes"] = [
            {"from": source, "to": target, "when": action}
            for source, table in element.routes.items()
            for action, target in table.items()
        ]
    elif kind == "branch":
        node["sides"] = {"then": sides.get("then", []), "otherwise": sides.get("otherwise", [])}
    elif kind == "parallel":
        node["branches"] = sides
    return node
