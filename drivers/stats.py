"""`Runtime.stats()`: what ran, how often it failed, how long it took, what it measured."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import attrs
from tarry.engine import events as ev
from tarry.snapshots.store import SessionStore

PAGE = 500


@attrs.frozen
class NodeStats:
    """One node name over every session: attempts run, attempts failed, mean attempt time,
    and the sums of the `ctx.metric` values its steps recorded."""

    executions: int = 0
    failures: int = 0
    mean_seconds: float = 0.0
    metrics: dict[str, float] = attrs.field(factory=dict)


@attrs.frozen
class Stats:
    """Sessions by status, nodes by name, and metric sums over all sessions (or one flow's)."""

    sessions: int = 0
    by_status: dict[str, int] = attrs.field(factory=dict)
    nodes: dict[str, NodeStats] = attrs.field(factory=dict)
    metrics: dict[str, float] = attrs.field(factory=dict)


class _Node:
    __slots__ = ("executions", "failures", "seconds", "timed", "metrics")

    def __init__(self) -> None:
        self.executions = 0
        self.failures = 0
        self.seconds = 0.0
        self.timed = 0
        self.metrics: dict[str, float] = {}


def _add(totals: dict[str, float], metrics: dict[str, Any]) -> None:
    for name, value in metrics.items():
        totals[name] = totals.get(name, 0) + value


def compute_stats(store: SessionStore, *, flow: str | None = None) -> Stats:
    """Fold every matching session's events into a `Stats`.

    An execution is one attempt of a node: it starts at `node.started` (or when the back-off
    announced by `node.retrying` is over) and ends at `node.completed` or `node.failed`. A step
    recorded as done by `skip` is not an execution. Metrics count once, at the attempt that
    recorded them (a failed attempt's metrics count too: the tokens were spent).
    """
    by_status: dict[str, int] = {}
    nodes: dict[str, _Node] = {}
    metrics: dict[str, float] = {}
    sessions = 0
    offset = 0
    while True:
        page = store.list(flow=flow, limit=PAGE, offset=offset)
        offset += len(page)
        for record in page:
            sessions += 1
            by_status[record.status] = by_status.get(record.status, 0) + 1
            _fold_events(store.events(record.session_id), nodes, metrics)
        if len(page) < PAGE:
            break
    return Stats(
        sessions=sessions,
        by_status=by_status,
        nodes={
            name: NodeStats(
                executions=n.executions,
                failures=n.failures,
                mean_seconds=n.seconds / n.timed if n.timed else 0.0,
                metrics=n.metrics,
            )
            for name, n in sorted(nodes.items())
        },
        metrics=metrics,
    )


def _fold_events(events: list[Any], nodes: dict[str, _Node], metrics: dict[str, float]) -> None:
    started: dict[tuple[Any, ...], datetime] = {}
    for event in events:
        t = event.type
        if t == ev.NODE_STARTED:
            started[event.path] = event.at
            continue
        if t == ev.NODE_RETRYING:  # the next attempt starts when the back-off is over
            started[event.path] = event.at + timedelta(seconds=event.data.get("delay", 0))
            continue
        if t != ev.NODE_COMPLETED and t != ev.NODE_FAILED:
            continue
        data = event.data
        if data.get("skipped"):
            continue
        name = str(event.path[-1]) if event.path else ""
        node = nodes.get(name)
        if node is None:
            node = nodes[name] = _Node()
        node.executions += 1
        if t == ev.NODE_FAILED:
            node.failures += 1
        begun = started.pop(event.path, None)
        if begun is not None:
            node.seconds += (event.at - begun).total_seconds()
            node.timed += 1
        step_metrics = data.get("metrics")
        if step_metrics:
            _add(node.metrics, step_metrics)
            _add(metrics, step_metrics)
