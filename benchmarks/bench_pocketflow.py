"""PocketFlow's side of the step-overhead workloads. It has no persistence, so no pause/resume."""

from __future__ import annotations

from typing import Any

from pocketflow import BatchFlow, BatchNode, Flow, Node


class Noop(Node):
    """A node whose prep/exec/post do nothing (PocketFlow's step)."""


class NoopBatch(BatchNode):
    def prep(self, shared: Any) -> Any:
        return shared["items"]


class Items(BatchFlow):
    def prep(self, shared: Any) -> Any:
        return [{"item": i} for i in shared["items"]]


def chain(n: int) -> Flow:
    """n no-op nodes in a row."""
    first = node = Noop()
    for _ in range(n - 1):
        node = node >> Noop()
    return Flow(start=first)


def batch_flow(n: int) -> tuple[Flow, dict[str, Any]]:
    """A BatchFlow: the sub-flow (one no-op node) runs once per item — tarry's ForEach."""
    return Items(start=Noop()), {"items": list(range(n))}


def batch_node(n: int) -> tuple[BatchNode, dict[str, Any]]:
    """A BatchNode: `exec` once per item, no sub-flow (a lighter shape than ForEach)."""
    return NoopBatch(), {"items": list(range(n))}
