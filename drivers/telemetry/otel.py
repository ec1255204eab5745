"""OpenTelemetry traces of a Runtime's drives and steps (`Runtime(tracing=...)`).

Spans are made from the Runtime's events, as a subscriber (`Runtime.subscribe`): a drive pays
for them only when tracing is on. Each span's times are its events' (`Event.at`: the
Runtime's clock).

- `tarry.start <flow>`: when a session is created, a short span (a child of the caller's
  current span, if any) whose context is kept in the session's `meta` as `traceparent`
  (W3C Trace Context). Every later drive of the session, in any process, is its child: one
  session reads as one trace across its pauses, resumes, recoveries and workers. A `meta`
  given with a `traceparent` of its own is kept (no start span): the session joins that trace.
- `tarry.drive <flow>`: one run of the session in this process, from its `run.started`,
  `run.resumed` (or, for a recovery, its first event) to its `run.paused`,
  `run.completed`, `run.failed` or `run.cancelled`. Attributes: `tarry.session_id`,
  `tarry.flow`, `tarry.trigger` (`start`, `resume`, `recover`) and `tarry.outcome`
  (`completed`, `paused`, `aborted`, `failed`, `cancelled`). A drive that resumes a session
  started elsewhere links to the caller's span when there is one (the request that resumed it).
- `<kind> <node>` (`step prompts/ask`, `gate approve`, `foreach prompts`): one attempt of a
  node, a child of the container it runs in (or of the drive). Attributes:
  `tarry.session_id`, `tarry.flow`, `tarry.path` (with item indexes: `prompts/3/ask`),
  `tarry.node`, `tarry.kind`, `tarry.attempt` and `tarry.outcome` (`ok`, `failed`,
  `paused`, `skipped`, or the run's end). A failed attempt's span has an ERROR status and
  the error's type and message. A step of a concurrent lane starts when its call began on a
  pool thread (its completion's `began`), not when it was queued.

Spans of steps are made when the step ends (their start time is given), so no span is kept
open across a step's call, and user code inside a step does not see the step's span as its
current one.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event

#: The `meta` key of a session's trace context (W3C `traceparent`).
TRACEPARENT = "traceparent"
#: Node kinds whose span stays open while their children run.
CONTAINERS = frozenset({"flow", "foreach", "loop", "graph", "branch", "parallel"})
_ENDS = {
    ev.RUN_COMPLETED: "completed",
    ev.RUN_FAILED: "failed",
    ev.RUN_CANCELLED: "cancelled",
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)
_PROPAGATOR = TraceContextTextMapPropagator()
#: Trace contexts of sessions started here, kept until their first drive reads them.
_MAX_CARRIED = 10_000


def _ns(at: dt.datetime) -> int:
    return (at - _EPOCH) // _MICROSECOND * 1000


def _where(path: tuple[Any, ...]) -> str:
    return "/".join(map(str, path))


def _node_key(path: tuple[Any, ...]) -> str:
    return "/".join(str(p) for p in path if type(p) is not int)


class _Drive:
    __slots__ = ("span", "flow", "containers", "leaves", "attempts")

    def __init__(self, span: Any, flow: str) -> None:
        self.span = span
        self.flow = flow
        #: path -> open span of a container
        self.containers: dict[tuple[Any, ...], Any] = {}
        #: path -> (start ns, attempt, kind) of a node in progress, its span made at its end
        self.leaves: dict[tuple[Any, ...], tuple[int, int, str]] = {}
        #: path -> the attempt the node's next start is (after a back-off)
        self.attempts: dict[tuple[Any, ...], int] = {}


class Tracing:
    """Makes spans of one Runtime's events (see the module's docstring)."""

    def __init__(self, store: Any, provider: Any = None) -> None:
        provider = provider if provider is not None else trace.get_tracer_provider()
        self.tracer = provider.get_tracer("tarry")
        self.store = store
        self._lock = threading.Lock()
        self._drives: dict[str, _Drive] = {}
        self._carried: dict[str, tuple[str, dict[str, str]]] = {}

    # -- a session's trace ---------------------------------------------------------------------
    def started(self, session_id: str, flow: str, meta: dict[str, Any]) -> None:
        """A session is being created with `meta` (its own copy): keep its trace context
        there, under a start span (a child of the caller's current span, if any)."""
        given = meta.get(TRACEPARENT)
        if isinstance(given, str):
            carrier = {TRACEPARENT: given}
        else:
            span = self.tracer.start_span(
                f"tarry.start {flow}",
                kind=SpanKind.PRODUCER,
                attributes={"tarry.session_id": session_id, "tarry.flow": flow},
            )
            carrier = {}
            _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
            span.end()
            if TRACEPARENT in carrier:
                meta[TRACEPARENT] = carrier[TRACEPARENT]
        with self._lock:
            if len(self._carried) >= _MAX_CARRIED:
                self._carried.pop(next(iter(self._carried)))
            self._carried[session_id] = (flow, carrier)

    def _parent(self, session_id: str) -> tuple[str, Any]:
        """The flow of a session and the context its drives are children of."""
        carried = self._carried.pop(session_id, None)
        if carried is None:
            record = self.store.load(session_id)
            if record is None:
                return "", otel_context.Context()
            meta = record.meta or {}
            carrier = {TRACEPARENT: meta[TRACEPARENT]} if TRACEPARENT in meta else {}
            carried = (record.flow, carrier)
        flow, carrier = carried
        return flow, _PROPAGATOR.extract(carrier, context=otel_context.Context())

    # -- events --------------------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        with self._lock:
            self._fold(event)

    def _fold(self, event: Event) -> None:
        t, sid, path, data = event.type, event.session_id, event.path, event.data
        drive = self._drives.get(sid)
        if drive is None:
            if t == ev.RUN_PAUSED or t in _ENDS:
                return  # an end written outside a drive (a cancel of a paused session)
            if t == ev.RUN_STARTED:
                trigger = "start"
            elif t == ev.RUN_RESUMED and not data.get("recovered"):
                trigger = "resume"
            else:  # a recovery, or a drive whose opening this Runtime was not told of
                trigger = "recover"
            drive = self._open(sid, trigger, event)
            if t == ev.RUN_STARTED or t == ev.RUN_RESUMED:
                return
        at = _ns(event.at)
        if t == ev.NODE_STARTED:
            kind = str(data.get("kind", "node"))
            if kind in CONTAINERS:
                drive.containers[path] = self.tracer.start_span(
                    f"{kind} {_node_key(path)}",
                    context=self._context_of(drive, path),
                    start_time=at,
                    attributes=self._attributes(sid, drive, path, kind, 1),
                )
            else:
                drive.leaves[path] = (at, drive.attempts.pop(path, 1), kind)
        elif t == ev.NODE_COMPLETED:
            span = drive.containers.pop(path, None)
            if span is not None:
                span.set_attribute("tarry.outcome", "ok")
                span.end(end_time=at)
                return
            outcome = "skipped" if data.get("skipped") else "ok"
            began = data.get("began")
            self._leaf(drive, sid, path, at, outcome, began=began if type(began) is int else None)
        elif t == ev.NODE_FAILED:
            error = data.get("error") or {}
            span = drive.containers.pop(path, None)
            if span is not None:
                _failed(span, error)
                span.end(end_time=at)
                return
            self._leaf(drive, sid, path, at, "failed", error=error, attempt=data.get("attempt"))
        elif t == ev.NODE_RETRYING:
            attempt = int(data.get("attempt", 1)) + 1
            delay = int(float(data.get("delay", 0)) * 1e9)
            kind = "step"
            drive.leaves[path] = (at + delay, attempt, kind)
            drive.attempts[path] = attempt
        elif t == ev.RUN_PAUSED:
            outcome = "aborted" if data.get("reason") == "aborted" else "paused"
            self._close(sid, drive, at, outcome)
        elif t in _ENDS:
            outcome = _ENDS[t]
            if t == ev.RUN_FAILED:
                _failed(drive.span, data.get("error") or {})
            self._close(sid, drive, at, outcome)

    def _open(self, sid: str, trigger: str, event: Event) -> _Drive:
        flow, parent = self._parent(sid)
        if event.type == ev.RUN_STARTED:
            flow = str(event.data.get("flow", flow))
        links = []
        current = trace.get_current_span().get_span_context()
        if trigger != "start" and current.is_valid:
            links.append(Link(current))  # the caller that resumed it (an HTTP request)
        span = self.tracer.start_span(
            f"tarry.drive {flow}",
            context=parent,
            kind=SpanKind.CONSUMER if trigger != "start" else SpanKind.INTERNAL,
            start_time=_ns(event.at),
            links=links,
            attributes={"tarry.session_id": sid, "tarry.flow": flow, "tarry.trigger": trigger},
        )
        drive = self._drives[sid] = _Drive(span, flow)
        return drive

    def _context_of(self, drive: _Drive, path: tuple[Any, ...]) -> Any:
        """The context of the innermost container open around `path` (or of the drive)."""
        containers = drive.containers
        if containers:
            for end in range(len(path) - 1, 0, -1):
                span = containers.get(path[:end])
                if span is not None:
                    return trace.set_span_in_context(span)
        return trace.set_span_in_context(drive.span)

    def _attributes(
        self, sid: str, drive: _Drive, path: tuple[Any, ...], kind: str, attempt: int
    ) -> dict[str, Any]:
        return {
            "tarry.session_id": sid,
            "tarry.flow": drive.flow,
            "tarry.path": _where(path),
            "tarry.node": str(path[-1]) if path else "",
            "tarry.kind": kind,
            "tarry.attempt": attempt,
        }

    def _leaf(
        self,
        drive: _Drive,
        sid: str,
        path: tuple[Any, ...],
        at: int,
        outcome: str,
        *,
        began: int | None = None,
        error: dict[str, Any] | None = None,
        attempt: Any = None,
    ) -> None:
        """The span of one attempt of a node that is not a container, now that it ended."""
        start, known, kind = drive.leaves.pop(path, (at, 1, "step"))
        if began is not None:
            start = began
        if type(attempt) is int:
            known = attempt
        span = self.tracer.start_span(
            f"{kind} {_node_key(path)}",
            context=self._context_of(drive, path),
            start_time=min(start, at),
            attributes=self._attributes(sid, drive, path, kind, known),
        )
        span.set_attribute("tarry.outcome", outcome)
        if error is not None:
            _failed(span, error)
        span.end(end_time=at)

    def _close(self, sid: str, drive: _Drive, at: int, outcome: str) -> None:
        """The drive ended with `outcome`: so do the nodes still in progress in it."""
        for path in list(drive.leaves):
            self._leaf(drive, sid, path, at, outcome)
        for _, span in sorted(drive.containers.items(), key=lambda item: -len(item[0])):
            span.set_attribute("tarry.outcome", outcome)
            span.end(end_time=at)
        drive.containers.clear()
        drive.span.set_attribute("tarry.outcome", outcome)
        drive.span.end(end_time=at)
        del self._drives[sid]


def _failed(span: Any, error: dict[str, Any]) -> None:
    kind = str(error.get("type", "Error"))
    message = str(error.get("message", ""))
    span.set_attribute("tarry.outcome", "failed")
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, f"{kind}: {message}" if message else kind))
