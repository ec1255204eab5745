"""`Runtime.stats()`: what ran, how often it failed, how long it took, what it measured."""

from __future__ import annotations

import datetime as dt

import attrs
from tarry.snapshots.store import SessionStore
from tarry.snapshots.tally import NodeTotals


@attrs.frozen
class NodeStats:
    """One node over every session: attempts run, attempts failed, mean attempt time (from
    the start of its execution: a concurrent lane's step that waited for a thread is timed
    from when its call began), the sums of the `ctx.metric` values its steps recorded, and
    the pauses it was resumed from (`waits`) with the seconds they waited, in all and on
    average: waiting is never counted as run time."""

    executions: int = 0
    failures: int = 0
    mean_seconds: float = 0.0
    metrics: dict[str, float] = attrs.field(factory=dict)
    waits: int = 0
    waiting_seconds: float = 0.0
    mean_waiting_seconds: float = 0.0


@attrs.frozen
class Stats:
    """Sessions by status, nodes by name, and metric sums over all sessions (or one flow's).

    `nodes` adds up the nodes of one name wherever they are (in every flow); `flows` keeps
    them apart: `flows[flow][path]`, the path being the node's names from the top of its flow
    joined by "/" (`"prompts/ask"`), without iteration indexes."""

    sessions: int = 0
    by_status: dict[str, int] = attrs.field(factory=dict)
    nodes: dict[str, NodeStats] = attrs.field(factory=dict)
    metrics: dict[str, float] = attrs.field(factory=dict)
    flows: dict[str, dict[str, NodeStats]] = attrs.field(factory=dict)


def compute_stats(
    store: SessionStore,
    *,
    flow: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> Stats:
    """The store's totals (`SessionStore.stats`) as a `Stats`.

    An execution is one attempt of a node: it starts at `node.started` (or when the back-off
    announced by `node.retrying` is over) and ends at `node.completed` or `node.failed`. A step
    recorded as done by `skip` is not an execution. Metrics count once, at the attempt that
    recorded them (a failed attempt's metrics count too: the tokens were spent). The store keeps
    a tally per session and folds in only the events written since the last report, so a report
    never reads a whole event log; a session whose stored data cannot be read is logged and
    left out of the node figures (it is still counted by status).
    """
    totals = store.stats(flow=flow, since=since, until=until)
    nodes = {name: _node(node) for name, node in totals.nodes.items()}
    metrics: dict[str, float] = {}
    for node in totals.nodes.values():
        for metric, value in node.metrics.items():
            metrics[metric] = metrics.get(metric, 0) + value
    flows = {
        name: {path: _node(node) for path, node in paths.items()}
        for name, paths in totals.flows.items()
    }
    by_status = dict(totals.by_status)
    return Stats(
        sessions=sum(by_status.values()),
        by_status=by_status,
        nodes=nodes,
        metrics=metrics,
        flows=flows,
    )


def _node(node: NodeTotals) -> NodeStats:
    mean = node.seconds / node.timed if node.timed else 0.0
    waiting = node.waited / node.waits if node.waits else 0.0
    return NodeStats(
        node.executions,
        node.failures,
        mean,
        dict(node.metrics),
        node.waits,
        node.waited,
        waiting,
    )


#: Sessions read per page while a timeline counts them.
TIMELINE_PAGE = 1000


@attrs.frozen
class Bucket:
    """Sessions created in [`start`, `end`), counted by their current status."""

    start: dt.datetime
    end: dt.datetime
    by_status: dict[str, int] = attrs.field(factory=dict)


def timeline(
    store: SessionStore,
    *,
    since: dt.datetime,
    until: dt.datetime,
    buckets: int,
    flow: str | None = None,
) -> list[Bucket]:
    """Sessions created in [`since`, `until`) counted per equal time bucket by their current
    status. Reads the session rows only (a page at a time, newest first), never a state or an
    event: its cost grows with the sessions of the period."""
    width = (until - since) / buckets
    found = [Bucket(since + width * i, since + width * (i + 1)) for i in range(buckets)]
    before = None
    while True:
        rows = store.list(flow=flow, since=since, until=until, before=before, limit=TIMELINE_PAGE)
        for row in rows:
            index = min(int((row.created_at - since) / width), buckets - 1) if width else 0
            counts = found[index].by_status
            counts[row.status] = counts.get(row.status, 0) + 1
        if len(rows) < TIMELINE_PAGE:
            return found
        before = (rows[-1].created_at, rows[-1].session_id)
