"""Prometheus metrics, scraped over HTTP: `/metrics` of the served app, and a worker's own
metrics port."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")
pytest.importorskip("uvicorn")

import tarry  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from support import WAIT, live  # noqa: E402
from tarry import Flow, ForEach, Gate, ManualClock, Runtime, Wait  # noqa: E402
from tarry.drivers.http.app import create_app  # noqa: E402
from tarry.drivers.telemetry.prometheus import Metrics  # noqa: E402
from tarry.drivers.worker import Worker  # noqa: E402


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def get(url: str, token: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


def test_serve_exposes_metrics_by_flow_node_and_status() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    app = create_app(rt, token="secret-token")

    def ask(ctx: tarry.Context) -> int:
        clock.advance(0.2)
        return 1

    def boom(ctx: tarry.Context) -> int:
        raise ValueError("no")

    flow = Flow("prompts", [ForEach("items", lambda ctx: ctx.input, [ask]), Gate("approve")])
    rt.run(flow, ["a", "b", "c"])  # paused at the gate
    rt.run(Flow("broken", [boom]))
    rt.run(Flow("mail", [Wait("reply", key="k-1")]))
    rt.deliver("k-2", "early")  # queued: nothing waits on k-2

    with live(app) as base:
        with pytest.raises(urllib.error.HTTPError) as refused:
            get(f"{base}/metrics")  # behind the login, as the API
        assert refused.value.code == 401
        status, kind, text = get(f"{base}/metrics", "secret-token")
    assert status == 200 and kind.startswith("text/plain")
    got = samples(text)
    ok = (("flow", "prompts"), ("node", "items/ask"), ("outcome", "ok"))
    assert got[("tarry_steps_total", ok)] == 3
    failed = (("flow", "broken"), ("node", "boom"), ("outcome", "failed"))
    assert got[("tarry_steps_total", failed)] == 1
    labels = (("flow", "prompts"), ("node", "items/ask"))
    assert got[("tarry_step_duration_seconds_count", labels)] == 3
    assert got[("tarry_step_duration_seconds_sum", labels)] == pytest.approx(0.6)
    bucket = "tarry_step_duration_seconds_bucket"
    assert got[(bucket, tuple(sorted((*labels, ("le", "0.25")))))] == 3
    assert got[(bucket, tuple(sorted((*labels, ("le", "0.1")))))] == 0
    assert got[("tarry_sessions", (("status", "paused"),))] == 2
    assert got[("tarry_sessions", (("status", "failed"),))] == 1
    assert got[("tarry_waiting_branches", ())] == 2
    assert got[("tarry_queued_messages", ())] == 1


def test_a_worker_serves_its_rounds_and_steps_on_its_own_port(tmp_path: Path) -> None:
    clock = ManualClock()
    url = f"sqlite:///{tmp_path / 's.db'}"
    flow = Flow("nap", [tarry.Sleep("wait", 60), lambda ctx: 1])
    out = Runtime(url, clock=clock).run(flow)
    assert out.paused
    rt = Runtime(url, clock=clock, flows=[flow])
    metrics = Metrics(rt, refresh=0)
    worker = Worker(rt, on_round=metrics.round)
    clock.advance(61)
    assert [o.ok for o in worker.run_once()] == [True]
    assert worker.run_once() == []
    server = metrics.serve(0)
    try:
        port = server.server_address[1]
        status, _, text = get(f"http://127.0.0.1:{port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    assert status == 200
    got = samples(text)
    assert got[("tarry_worker_round_duration_seconds_count", ())] == 2
    assert got[("tarry_worker_round_errors_total", ())] == 0
    step = (("flow", "nap"), ("node", "<lambda>"), ("outcome", "ok"))
    assert got[("tarry_steps_total", step)] == 1
    assert got[("tarry_sessions", (("status", "completed"),))] == 1


def test_a_round_that_raises_counts_as_an_error() -> None:
    rt = Runtime()
    metrics = Metrics(rt)
    worker = Worker(rt, on_round=metrics.round)

    def broken(*args, **kwargs):
        raise ConnectionError("store down")

    worker._round_once = broken
    with pytest.raises(ConnectionError):
        worker.run_once()
    got = samples(metrics.exposition().decode())
    assert got[("tarry_worker_round_errors_total", ())] == 1
    assert got[("tarry_worker_round_duration_seconds_count", ())] == 1


def test_the_worker_command_takes_a_metrics_port() -> None:
    from tarry.drivers.cli.parser import build_parser

    args = build_parser().parse_args(["worker", "--metrics-port", "9464"])
    assert (args.metrics_port, args.metrics_host) == (9464, "127.0.0.1")
