"""OpenTelemetry spans of drives and steps, read back from the SDK's InMemorySpanExporter: one
session is one trace across its pauses, resumes and Runtimes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

import tarry  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # noqa: E402
from support import WAIT
from tarry import Flow, ForEach, Gate, ManualClock, Retry, Runtime, step  # noqa: E402


def provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer, exporter


def by_name(spans, name: str):
    return [s for s in spans if s.name == name]


def test_a_span_per_drive_and_per_step_with_attributes() -> None:
    tracer, exporter = provider()
    clock = ManualClock()
    rt = Runtime(clock=clock, tracing=tracer)

    def load(ctx: tarry.Context) -> int:
        clock.advance(2)
        return 1

    out = rt.run(Flow("f", [load]))
    assert out.ok
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == ["step load", "tarry.drive f", "tarry.start f"]
    (start,) = by_name(spans, "tarry.start f")
    (drive,) = by_name(spans, "tarry.drive f")
    (load_span,) = by_name(spans, "step load")
    assert drive.parent.span_id == start.context.span_id
    assert load_span.parent.span_id == drive.context.span_id
    assert {s.context.trace_id for s in spans} == {start.context.trace_id}
    assert dict(drive.attributes) == {
        "tarry.session_id": out.session_id,
        "tarry.flow": "f",
        "tarry.trigger": "start",
        "tarry.outcome": "completed",
    }
    assert dict(load_span.attributes) == {
        "tarry.session_id": out.session_id,
        "tarry.flow": "f",
        "tarry.path": "load",
        "tarry.node": "load",
        "tarry.kind": "step",
        "tarry.attempt": 1,
        "tarry.outcome": "ok",
    }
    assert load_span.end_time - load_span.start_time == 2_000_000_000
    # The trace context is kept with the session, for its drives elsewhere.
    assert rt.store.load(out.session_id).meta["traceparent"].startswith("00-")


def test_failed_attempts_are_spans_with_an_error_status() -> None:
    tracer, exporter = provider()
    rt = Runtime(tracing=tracer, retry=Retry(attempts=2, initial=0.0, jitter=False))
    calls = []

    def flaky(ctx: tarry.Context) -> int:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            raise ConnectionError("down")
        return 1

    assert rt.run(Flow("f", [flaky])).ok
    spans = by_name(exporter.get_finished_spans(), "step flaky")
    assert [(s.attributes["tarry.attempt"], s.attributes["tarry.outcome"]) for s in spans] == [
        (1, "failed"),
        (2, "ok"),
    ]
    assert spans[0].status.status_code == StatusCode.ERROR
    assert "ConnectionError: down" in spans[0].status.description

    out = rt.run(Flow("g", [lambda ctx: 1 / 0]))
    assert out.failed
    (drive,) = by_name(exporter.get_finished_spans(), "tarry.drive g")
    assert drive.attributes["tarry.outcome"] == "failed"
    assert drive.status.status_code == StatusCode.ERROR


def test_steps_nest_in_their_containers_and_lanes_are_timed_from_their_start() -> None:
    tracer, exporter = provider()
    clock = ManualClock()
    rt = Runtime(clock=clock, tracing=tracer, max_threads=1)
    second = threading.Event()

    def watch(event: tarry.Event) -> None:
        if event.type == "node.started" and event.path[1:] == (1, "work"):
            second.set()

    rt.subscribe(watch)

    @step
    def work(ctx: tarry.Context) -> int:
        if ctx.item == "slow":
            assert second.wait(WAIT)
            clock.advance(5)
        return 1

    flow = Flow("f", [ForEach("items", lambda ctx: ctx.input, [work], concurrency=2)])
    assert rt.run(flow, ["slow", "quick"]).ok
    spans = exporter.get_finished_spans()
    (each,) = by_name(spans, "foreach items")
    works = sorted(by_name(spans, "step items/work"), key=lambda s: s.attributes["tarry.path"])
    assert [s.attributes["tarry.path"] for s in works] == ["items/0/work", "items/1/work"]
    assert all(s.parent.span_id == each.context.span_id for s in works)
    assert [s.end_time - s.start_time for s in works] == [5_000_000_000, 0]


def test_a_pause_here_and_a_resume_in_another_runtime_are_one_trace(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    clock = ManualClock()
    flow = Flow("review", [lambda ctx: 1, Gate("approve"), lambda ctx: 2])
    first_tracer, first = provider()
    second_tracer, second = provider()  # another process: its own exporter

    out = Runtime(url, clock=clock, tracing=first_tracer).run(flow)
    assert out.paused
    clock.advance(20)
    other = Runtime(url, clock=clock, flows=[flow], tracing=second_tracer)
    assert other.resume(out.token, True).ok

    before, after = first.get_finished_spans(), second.get_finished_spans()
    (start,) = by_name(before, "tarry.start review")
    trace_id = start.context.trace_id
    assert {s.context.trace_id for s in [*before, *after]} == {trace_id}
    drives = by_name(before, "tarry.drive review") + by_name(after, "tarry.drive review")
    assert [d.attributes["tarry.outcome"] for d in drives] == ["paused", "completed"]
    assert [d.attributes["tarry.trigger"] for d in drives] == ["start", "resume"]
    assert all(d.parent.span_id == start.context.span_id for d in drives)
    gates = by_name(before, "gate approve") + by_name(after, "gate approve")
    assert [g.attributes["tarry.outcome"] for g in gates] == ["paused", "ok"]


def test_tracing_off_subscribes_nothing(monkeypatch) -> None:
    monkeypatch.delenv("TARRY_TRACING", raising=False)
    rt = Runtime()
    assert rt._core.tracing is None and rt._core.hub.entries == []
    out = rt.run(Flow("f", [lambda ctx: 1]))
    assert "traceparent" not in rt.store.load(out.session_id).meta
    assert Runtime(tracing=False)._core.tracing is None
    monkeypatch.setenv("TARRY_TRACING", "1")
    assert Runtime()._core.tracing is not None


def test_a_traceparent_given_in_meta_is_joined() -> None:
    tracer, exporter = provider()
    rt = Runtime(tracing=tracer)
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert rt.run(Flow("f", [lambda ctx: 1]), meta={"traceparent": parent}).ok
    spans = exporter.get_finished_spans()
    assert not by_name(spans, "tarry.start f")
    assert {format(s.context.trace_id, "032x") for s in spans} == {
        "0af7651916cd43dd8448eb211c80319c"
    }


def test_tracing_without_opentelemetry_is_a_typed_error(monkeypatch) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "tarry.drivers.telemetry.otel", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(tarry.InvalidArgument, match=r"tarry\[otel\]"):
        Runtime(tracing=True)


def test_async_runs_are_traced_alike() -> None:
    import asyncio

    tracer, exporter = provider()
    rt = Runtime(tracing=tracer)

    async def fetch(ctx: tarry.Context) -> int:
        await asyncio.sleep(0)
        return 1

    out = asyncio.run(rt.arun(Flow("a", [fetch, Gate("ok")])))
    assert out.paused
    assert asyncio.run(rt.aresume(out.token, True)).ok
    spans = exporter.get_finished_spans()
    drives = by_name(spans, "tarry.drive a")
    assert [d.attributes["tarry.outcome"] for d in drives] == ["paused", "completed"]
    (fetched,) = by_name(spans, "step fetch")
    assert fetched.attributes["tarry.outcome"] == "ok"
    assert len({s.context.trace_id for s in spans}) == 1
