"""Prometheus metrics of a Runtime (the `tarry[prometheus]` extra: prometheus_client).

`Metrics(runtime)` keeps, in its own `CollectorRegistry`:

- from this process's events (a subscriber, `Runtime.subscribe`):
  `tarry_steps_total{flow, node, outcome}` (step attempts ended here: `ok`, `failed`,
  `skipped`) and `tarry_step_duration_seconds{flow, node}` (a histogram of their times,
  from the start of the step's execution, as `stats()` times them; `node` is the step's
  path without item indexes, `prompts/ask`);
- from a worker's rounds (`Worker(on_round=metrics.round)`):
  `tarry_worker_round_duration_seconds` (a histogram) and `tarry_worker_round_errors_total`;
- from the store, read when scraped (at most once per `refresh` seconds, 10 by default):
  `tarry_sessions{status}` (every session of the store by status: the store's `stats()`
  counts), `tarry_waiting_branches` (live waits: one per paused branch) and
  `tarry_queued_messages` (unclaimed mailbox messages). Those reads cost O(sessions + waits
  + keys): keep the refresh well above the scrape interval on a large store.

Counters and histograms are per process (sum them over workers with `sum by (flow, node)`);
the store gauges are the same in every process that reads one store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event

#: Step times: from a millisecond to an hour.
STEP_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
ROUND_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: Sessions whose flow is remembered while they run here.
_MAX_FLOWS = 10_000
_PAGE = 1000
_ENDS = frozenset({ev.RUN_PAUSED, ev.RUN_COMPLETED, ev.RUN_FAILED, ev.RUN_CANCELLED})


def _node_key(path: tuple[Any, ...]) -> str:
    return "/".join(str(p) for p in path if type(p) is not int)


def _seconds(at: Any) -> float:
    return at.timestamp()  # type: ignore[no-any-return]


class Metrics:
    """A Runtime's metrics (see the module's docstring); `exposition()` is the text a scrape
    of `/metrics` answers with."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, runtime: Any, *, refresh: float = 10.0) -> None:
        self.runtime = runtime
        self.registry = CollectorRegistry(auto_describe=True)
        self.steps = Counter(
            "tarry_steps",
            "Step attempts ended in this process, by flow, node and outcome",
            ["flow", "node", "outcome"],
            registry=self.registry,
        )
        self.step_seconds = Histogram(
            "tarry_step_duration_seconds",
            "Step attempt times in this process (from the start of execution), by flow and node",
            ["flow", "node"],
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )
        self.rounds = Histogram(
            "tarry_worker_round_duration_seconds",
            "Worker round times in this process",
            buckets=ROUND_BUCKETS,
            registry=self.registry,
        )
        self.round_errors = Counter(
            "tarry_worker_round_errors",
            "Worker rounds in this process that raised",
            registry=self.registry,
        )
        self.registry.register(_StoreCollector(runtime, refresh))
        self._lock = threading.Lock()
        self._flows: dict[str, str] = {}
        self._started: dict[tuple[str, tuple[Any, ...]], float] = {}
        # Told of every event as a Runtime's own subscriber (as tracing is), not as a caller's.
        runtime._core.hub.subscribe(self.on_event)

    # -- worker rounds -------------------------------------------------------------------------
    def round(self, seconds: float, failed: bool) -> None:
        """A worker round took `seconds` (and raised, if `failed`)."""
        self.rounds.observe(seconds)
        if failed:
            self.round_errors.inc()

    # -- steps ---------------------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        t = event.type
        if t == ev.NODE_STARTED:
            if event.data.get("kind") == "step":
                with self._lock:
                    self._started[(event.session_id, event.path)] = _seconds(event.at)
            return
        if t == ev.NODE_RETRYING:
            delay = float(event.data.get("delay", 0))
            with self._lock:
                self._started[(event.session_id, event.path)] = _seconds(event.at) + delay
            return
        if t == ev.RUN_STARTED:
            with self._lock:
                self._remember(event.session_id, str(event.data.get("flow", "")))
            return
        if t in _ENDS:
            with self._lock:
                self._flows.pop(event.session_id, None)
                sid = event.session_id
                for key in [k for k in self._started if k[0] == sid]:
                    del self._started[key]
            return
        if t != ev.NODE_COMPLETED and t != ev.NODE_FAILED:
            return
        with self._lock:
            started = self._started.pop((event.session_id, event.path), None)
        data = event.data
        if started is None and not data.get("skipped"):
            return  # not a step (a container, a wait), or begun in another process
        flow = self._flow(event.session_id)
        node = _node_key(event.path)
        if data.get("skipped"):
            self.steps.labels(flow, node, "skipped").inc()
            return
        outcome = "ok" if t == ev.NODE_COMPLETED else "failed"
        self.steps.labels(flow, node, outcome).inc()
        began = data.get("began")
        start = began / 1e9 if type(began) is int else started
        if start is not None:
            self.step_seconds.labels(flow, node).observe(max(_seconds(event.at) - start, 0.0))

    def _remember(self, session_id: str, flow: str) -> None:
        if len(self._flows) >= _MAX_FLOWS:
            self._flows.pop(next(iter(self._flows)))
        self._flows[session_id] = flow

    def _flow(self, session_id: str) -> str:
        with self._lock:
            flow = self._flows.get(session_id)
        if flow is None:  # resumed or recovered here: its record says (one read per drive)
            record = self.runtime.store.load(session_id)
            flow = record.flow if record is not None else ""
            with self._lock:
                self._remember(session_id, flow)
        return flow

    # -- exposition ----------------------------------------------------------------------------
    def exposition(self) -> bytes:
        """The metrics in Prometheus's text format."""
        return generate_latest(self.registry)  # type: ignore[no-any-return]

    def serve(self, port: int, host: str = "127.0.0.1") -> Any:
        """Answer scrapes of `http://host:port/metrics` on a thread of its own (a worker's
        `--metrics-port`); the server, whose `shutdown()` stops it."""
        from prometheus_client import start_http_server

        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return server


class _StoreCollector:
    """The gauges read from the store when scraped, kept for `refresh` seconds."""

    def __init__(self, runtime: Any, refresh: float) -> None:
        self.runtime = runtime
        self.refresh = refresh
        self._lock = threading.Lock()
        self._read_at = -float("inf")
        self._found: tuple[dict[str, int], int, int] = ({}, 0, 0)

    def describe(self) -> list[Any]:
        return []  # read only when scraped, never at registration

    def collect(self) -> Iterator[Any]:
        by_status, waiting, queued = self._read()
        sessions = GaugeMetricFamily(
            "tarry_sessions", "Sessions of the store by status", labels=["status"]
        )
        for status, count in sorted(by_status.items()):
            sessions.add_metric([status], count)
        yield sessions
        yield GaugeMetricFamily(
            "tarry_waiting_branches", "Live waits in the store (one per paused branch)", waiting
        )
        yield GaugeMetricFamily(
            "tarry_queued_messages", "Unclaimed messages in the store's mailbox", queued
        )

    def _read(self) -> tuple[dict[str, int], int, int]:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= self.refresh:
                store = self.runtime.store
                by_status = dict(store.stats().by_status)
                self._found = (by_status, _count_waits(store), _count_mail(store))
                self._read_at = now
            return self._found


def _count_waits(store: Any) -> int:
    count, after = 0, None
    while True:
        page = store.waiting(after=after, limit=_PAGE)
        count += len(page)
        if len(page) < _PAGE:
            return count
        after = page[-1].token


def _count_mail(store: Any) -> int:
    count, after = 0, None
    while True:
        page = store.mailbox(after=after, limit=_PAGE)
        count += sum(info.count for info in page)
        if len(page) < _PAGE:
            return count
        after = page[-1].key
