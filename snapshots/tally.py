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
    """One node name over the sessions counted: attempts run, attempts failed, the seconds of
    the attempts whose start is known (`timed` of them), and the sums of their metrics."""

    executions: int = 0
    failures: int = 0
    seconds: float = 0.0
    timed: int = 0
    metrics: dict[str, float] = attrs.field(factory=dict)


@attrs.frozen
class Totals:
    """What a store's `stats()` returns: sessions by status, and node totals by node name."""

    by_status: dict[str, int] = attrs.field(factory=dict)
    nodes: dict[str, NodeTotals] = attrs.field(factory=dict)


class Tally:
    """One session's node counters up to event `seq`.

    `nodes`: name -> [executions, failures, seconds, timed, metrics]; `open`: path -> start of
    the attempt in progress there (µs since the epoch). An execution is one attempt of a node:
    it starts at `node.started` (or when the back-off announced by `node.retrying` is over) and
    ends at `node.completed` or `node.failed`; a step recorded as done by `skip` is not one.
    Metrics count once, at the attempt that recorded them (a failed attempt's too).
    """

    __slots__ = ("seq", "nodes", "open")

    def __init__(
        self,
        seq: int = 0,
        nodes: dict[str, list[Any]] | None = None,
        open: dict[tuple[Any, ...], int] | None = None,
    ) -> None:
        self.seq = seq
        self.nodes = {} if nodes is None else nodes
        self.open = {} if open is None else open

    def fold(self, events: Sequence[Event]) -> None:
        """Add `events` (the next ones of the log, in order)."""
        nodes, started = self.nodes, self.open
        for event in events:
            t = event.type
            if t == ev.NODE_STARTED:
                started[event.path] = _micros(event.at)
                continue
            if t == ev.NODE_RETRYING:  # the next attempt starts when the back-off is over
                delay = dt.timedelta(seconds=event.data.get("delay", 0))
                started[event.path] = _micros(event.at + delay)
                continue
            if t != ev.NODE_COMPLETED and t != ev.NODE_FAILED:
                continue
            data = event.data
            if data.get("skipped"):
                continue
            name = str(event.path[-1]) if event.path else ""
            node = nodes.get(name)
            if node is None:
                node = nodes[name] = [0, 0, 0.0, 0, {}]
            node[0] += 1
            if t == ev.NODE_FAILED:
                node[1] += 1
            begun = started.pop(event.path, None)
            if begun is not None:
                node[2] += (_micros(event.at) - begun) / 1_000_000
                node[3] += 1
            step_metrics = data.get("metrics")
            if step_metrics:
                _add(node[4], step_metrics)
        if events:
            self.seq = events[-1].seq

    def copy(self) -> Tally:
        nodes = {name: [*n[:4], dict(n[4])] for name, n in self.nodes.items()}
        return Tally(self.seq, nodes, dict(self.open))

    def encode(self) -> bytes:
        """The counters and open attempts (not `seq`, which stores keep in a column)."""
        return dumps([self.nodes, [[path, at] for path, at in self.open.items()]])

    @classmethod
    def decode(cls, blob: bytes, seq: int) -> Tally:
        """The tally `encode` wrote, at `seq`; SnapshotError for anything else."""
        data = loads(blob)
        try:
            nodes, opened = data
            checked = {
                str(name): [int(n[0]), int(n[1]), float(n[2]), int(n[3]), dict(n[4])]
                for name, n in nodes.items()
            }
            started = {tuple(path): int(at) for path, at in opened}
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            msg = f"malformed tally ({type(exc).__name__}: {exc})"
            raise SnapshotError(msg) from exc
        return cls(seq, checked, started)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tally):
            return NotImplemented
        return (self.seq, self.nodes, self.open) == (other.seq, other.nodes, other.open)

    def __repr__(self) -> str:
        return f"Tally(seq={self.seq}, nodes={self.nodes!r}, open={len(self.open)})"


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
    rows: Sequence[tuple[str, str, int | None, bytes | None, bool]],
    events: Callable[[str, int, int], list[Event]],
) -> list[tuple[str, int | None, Tally, bool]]:
    """Add a page of sessions to `sums`: rows of (session id, status, the stored tally's seq
    and bytes or None, whether events were written after it), `events(sid, after, limit)`
    reading a session's log. Returns the tallies brought up to date, to save: (session id, the
    seq of the one they replace, the new tally, whether it is final)."""
    fresh = []
    for sid, status, seq, blob, behind in rows:
        sums.count(status)
        tally = None
        if blob is not None:
            try:
                tally = Tally.decode(bytes(blob), seq)
            except SnapshotError:
                behind = True  # tallied again from the start
        if not behind:
            if tally is not None:
                sums.add(tally)
            continue
        try:
            new = caught_up(tally, functools.partial(events, sid))
        except FOLD_ERRORS as exc:
            skipped(sid, exc)
            continue
        sums.add(new)
        fresh.append((sid, seq, new, final(status)))
    return fresh


class Sums:
    """Adds up tallies and statuses into `Totals`."""

    def __init__(self) -> None:
        self.by_status: dict[str, int] = {}
        self._nodes: dict[str, list[Any]] = {}

    def count(self, status: str) -> None:
        self.by_status[status] = self.by_status.get(status, 0) + 1

    def add(self, tally: Tally) -> None:
        totals = self._nodes
        for name, n in tally.nodes.items():
            node = totals.get(name)
            if node is None:
                totals[name] = [*n[:4], dict(n[4])]
                continue
            node[0] += n[0]
            node[1] += n[1]
            node[2] += n[2]
            node[3] += n[3]
            _add(node[4], n[4])

    def totals(self) -> Totals:
        nodes = {
            name: NodeTotals(n[0], n[1], n[2], n[3], n[4])
            for name, n in sorted(self._nodes.items())
        }
        return Totals(dict(self.by_status), nodes)


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
