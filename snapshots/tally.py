"""Per-session node tallies: what `stats()` adds up, kept by the stores so that no report reads a
whole event log.

A store keeps one `Tally` per session: its nodes' attempts, failures, timed seconds and metric
sums, the attempts still in progress (their start times), and the seq of the last event folded
in. `stats()` folds into each tally only the events written since it was last brought up to date
(paged, so memory stays flat), saves it, and adds the tallies up: a report costs O(sessions ×
nodes) plus the events written since the previous one, whatever the length of the logs. Writes
never pay for it: the tally is brought up to date by the reader.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Sequence
from typing import Any

import attrs
from tarry.engine.errors import SnapshotError
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event
from tarry.snapshots.codec.pack import dumps, loads

#: Events read per page while a tally catches up with its log.
PAGE = 1000
#: Statuses after which a session writes no more events: its tally, once caught up, is final.
FINAL = ("completed", "cancelled")
#: What reading or folding a session's stored data raises when that data is malformed. Store
#: errors (an unreachable server, a locked file) are not among them: they end the report.
FOLD_ERRORS = (SnapshotError, TypeError, ValueError, KeyError, AttributeError, OverflowError)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)

_reported: set[str] = set()  # sessions whose malformed data was logged (once per process)


@attrs.frozen
class NodeTotals:
    """One node over the sessions counted: attempts run, attempts failed, the seconds of the
    attempts whose start is known (`timed` of them), the sums of their metrics, and the pauses
    it was resumed from (`waits`) with the seconds they waited (`waited`: never run time)."""

    executions: int = 0
    failures: int = 0
    seconds: float = 0.0
    timed: int = 0
    metrics: dict[str, float] = attrs.field(factory=dict)
    waits: int = 0
    waited: float = 0.0


@attrs.frozen
class Totals:
    """What a store's `stats()` returns: sessions by status, node totals by node name (the
    nodes of that name in every flow and place, added up), and node totals by flow and node
    path (`flows[flow]["prompts/ask"]`: the path's names joined by "/", iteration indexes
    left out)."""

    by_status: dict[str, int] = attrs.field(factory=dict)
    nodes: dict[str, NodeTotals] = attrs.field(factory=dict)
    flows: dict[str, dict[str, NodeTotals]] = attrs.field(factory=dict)


#: The layout `Tally.encode` writes. Version 1 (a bare `[nodes, open]`, nodes by name, no
#: waits) is not read: such a tally is folded again from its session's log (`add_page`).
VERSION = 2

# A node's counters, by index.
_EXECUTIONS, _FAILURES, _SECONDS, _TIMED, _METRICS, _WAITS, _WAITED, _NAME = range(8)


class Tally:
    """One session's node counters up to event `seq`.

    `nodes`: node key (`node_key`) -> [executions, failures, seconds, timed, metrics, waits,
    waited, name]; `open`: path -> start of the attempt in progress there (µs since the
    epoch); `paused`: path -> when the pause there began (µs). An execution is one attempt of
    a node: it starts at `node.started` (or when the back-off announced by `node.retrying` is
    over; or, for a concurrent lane's sync step, when its call began on a pool thread: its
    completion's `began`) and ends at `node.completed` or `node.failed`; a step recorded as
    done by `skip` is not one. A pause (`run.paused` at a node, an abort's excepted) waits
    until that node starts again on resume: its seconds are `waited`, never run time.
    Metrics count once, at the attempt that recorded them (a failed attempt's too).
    """

    __slots__ = ("seq", "nodes", "open", "paused")

    def __init__(
        self,
        seq: int = 0,
        nodes: dict[str, list[Any]] | None = None,
        open: dict[tuple[Any, ...], int] | None = None,
        paused: dict[tuple[Any, ...], int] | None = None,
    ) -> None:
        self.seq = seq
        self.nodes = {} if nodes is None else nodes
        self.open = {} if open is None else open
        self.paused = {} if paused is None else paused

    def fold(self, events: Sequence[Event]) -> None:
        """Add `events` (the next ones of the log, in order)."""
        nodes, started, paused = self.nodes, self.open, self.paused
        for event in events:
            t = event.type
            if t == ev.NODE_STARTED:
                at = _micros(event.at)
                started[event.path] = at
                if paused:
                    since = paused.pop(event.path, None)
                    if since is not None:  # resumed: the pause there is over
                        node = _node(nodes, event.path)
                        node[_WAITS] += 1
                        node[_WAITED] += max(at - since, 0) / 1_000_000
                continue
            if t == ev.NODE_RETRYING:  # the next attempt starts when the back-off is over
                delay = dt.timedelta(seconds=event.data.get("delay", 0))
                started[event.path] = _micros(event.at + delay)
                continue
            if t == ev.RUN_PAUSED:
                if event.path and event.data.get("reason") != "aborted":
                    paused.setdefault(event.path, _micros(event.at))
                continue
            if t != ev.NODE_COMPLETED and t != ev.NODE_FAILED:
                continue
            data = event.data
            if data.get("skipped"):
                continue
            node = _node(nodes, event.path)
            node[_EXECUTIONS] += 1
            if t == ev.NODE_FAILED:
                node[_FAILURES] += 1
            begun = started.pop(event.path, None)
            began = data.get("began")  # ns: when a pool thread began the call
            if type(began) is int:
                begun = began // 1000
            if begun is not None:
                node[_SECONDS] += max(_micros(event.at) - begun, 0) / 1_000_000
                node[_TIMED] += 1
            step_metrics = data.get("metrics")
            if step_metrics:
                _add(node[_METRICS], step_metrics)
        if events:
            self.seq = events[-1].seq

    def copy(self) -> Tally:
        nodes = {key: [*n[:4], dict(n[4]), *n[5:]] for key, n in self.nodes.items()}
        return Tally(self.seq, nodes, dict(self.open), dict(self.paused))

    def encode(self) -> bytes:
        """The counters, open attempts and pauses (not `seq`, which stores keep in a column)."""
        return dumps(
            [
                VERSION,
                self.nodes,
                [[path, at] for path, at in self.open.items()],
                [[path, at] for path, at in self.paused.items()],
            ]
        )

    @classmethod
    def decode(cls, blob: bytes, seq: int) -> Tally:
        """The tally `encode` wrote, at `seq`; SnapshotError for anything else (a tally of
        an older layout included: the caller folds that session's log again)."""
        data = loads(blob)
        try:
            version, nodes, opened, waiting = data
            if version != VERSION:
                msg = f"a tally of layout {version!r}"
                raise ValueError(msg)
            checked = {
                str(key): [
                    int(n[0]),
                    int(n[1]),
                    float(n[2]),
                    int(n[3]),
                    dict(n[4]),
                    int(n[5]),
                    float(n[6]),
                    str(n[7]),
                ]
                for key, n in nodes.items()
            }
            started = {tuple(path): int(at) for path, at in opened}
            paused = {tuple(path): int(at) for path, at in waiting}
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            msg = f"malformed tally ({type(exc).__name__}: {exc})"
            raise SnapshotError(msg) from exc
        return cls(seq, checked, started, paused)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tally):
            return NotImplemented
        return (self.seq, self.nodes, self.open, self.paused) == (
            other.seq,
            other.nodes,
            other.open,
            other.paused,
        )

    def __repr__(self) -> str:
        return (
            f"Tally(seq={self.seq}, nodes={self.nodes!r}, open={len(self.open)}, "
            f"paused={len(self.paused)})"
        )


def node_key(path: Sequence[Any]) -> str:
    """The key of the node at `path` in a tally and in `Totals.flows`: its names joined by
    "/", without the iteration indexes (every item of a ForEach is the same node)."""
    return "/".join(str(part) for part in path if type(part) is not int)


def _node(nodes: dict[str, list[Any]], path: tuple[Any, ...]) -> list[Any]:
    key = node_key(path)
    node = nodes.get(key)
    if node is None:
        name = str(path[-1]) if path else ""
        node = nodes[key] = [0, 0, 0.0, 0, {}, 0, 0.0, name]
    return node


def caught_up(tally: Tally | None, read: Callable[[int, int], list[Event]]) -> Tally:
    """A copy of `tally` (or a new one) with every event after its seq folded in, read a page
    at a time by `read(after_seq, limit)`. Raises what reading or folding raises."""
    tally = Tally() if tally is None else tally.copy()
    while True:
        events = read(tally.seq, PAGE)
        tally.fold(events)
        if len(events) < PAGE:
            return tally


def add_page(
    sums: Sums,
    rows: Sequence[tuple[str, str, int | None, bytes | None, bool, str]],
    events: Callable[[str, int, int], list[Event]],
) -> list[tuple[str, int | None, Tally, bool]]:
    """Add a page of sessions to `sums`: rows of (session id, status, the stored tally's seq
    and bytes or None, whether events were written after it, flow), `events(sid, after, limit)`
    reading a session's log. Returns the tallies brought up to date, to save: (session id, the
    seq of the one they replace, the new tally, whether it is final)."""
    fresh = []
    for sid, status, seq, blob, behind, flow in rows:
        sums.count(status)
        tally = None
        if blob is not None:
            try:
                tally = Tally.decode(bytes(blob), seq)
            except SnapshotError:
                behind = True  # tallied again from the start
        if not behind:
            if tally is not None:
                sums.add(tally, flow)
            continue
        try:
            new = caught_up(tally, functools.partial(events, sid))
        except FOLD_ERRORS as exc:
            skipped(sid, exc)
            continue
        sums.add(new, flow)
        fresh.append((sid, seq, new, final(status)))
    return fresh


class Sums:
    """Adds up tallies and statuses into `Totals`."""

    def __init__(self) -> None:
        self.by_status: dict[str, int] = {}
        self._flows: dict[str, dict[str, list[Any]]] = {}

    def count(self, status: str) -> None:
        self.by_status[status] = self.by_status.get(status, 0) + 1

    def add(self, tally: Tally, flow: str = "") -> None:
        totals = self._flows.get(flow)
        if totals is None:
            totals = self._flows[flow] = {}
        for key, n in tally.nodes.items():
            node = totals.get(key)
            if node is None:
                totals[key] = [*n[:4], dict(n[4]), *n[5:]]
            else:
                _into(node, n)

    def totals(self) -> Totals:
        by_name: dict[str, list[Any]] = {}
        flows: dict[str, dict[str, NodeTotals]] = {}
        for flow, nodes in sorted(self._flows.items()):
            flows[flow] = {key: _totals(n) for key, n in sorted(nodes.items())}
            for n in nodes.values():
                node = by_name.get(n[_NAME])
                if node is None:
                    by_name[n[_NAME]] = [*n[:4], dict(n[4]), *n[5:]]
                else:
                    _into(node, n)
        named = {name: _totals(n) for name, n in sorted(by_name.items())}
        return Totals(dict(self.by_status), named, flows)


def _into(node: list[Any], n: list[Any]) -> None:
    node[_EXECUTIONS] += n[_EXECUTIONS]
    node[_FAILURES] += n[_FAILURES]
    node[_SECONDS] += n[_SECONDS]
    node[_TIMED] += n[_TIMED]
    _add(node[_METRICS], n[_METRICS])
    node[_WAITS] += n[_WAITS]
    node[_WAITED] += n[_WAITED]


def _totals(n: list[Any]) -> NodeTotals:
    return NodeTotals(n[0], n[1], n[2], n[3], n[4], n[5], n[6])


def skipped(session_id: str, exc: Exception) -> None:
    """Log, once per session and process, that a session's data could not be tallied."""
    if session_id in _reported:
        return
    if len(_reported) < 10_000:
        _reported.add(session_id)
    import logging  # loaded when something is first logged: `import tarry` stays quick

    logging.getLogger("tarry").warning(
        "stats: session %s is left out: its stored data cannot be read (%s: %s)",
        session_id,
        type(exc).__name__,
        exc,
    )


def final(status: str) -> bool:
    """Whether a session in `status` writes no more events."""
    return status in FINAL


def _micros(at: dt.datetime) -> int:
    return (at - _EPOCH) // _MICROSECOND


def _add(totals: dict[str, float], metrics: dict[str, Any]) -> None:
    for name, value in metrics.items():
        totals[name] = totals.get(name, 0) + value
