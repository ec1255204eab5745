"""`GET /metrics`: the Runtime's Prometheus metrics (drivers/telemetry/prometheus.py), served
when prometheus_client is installed (`tarry[prometheus]`). Behind the same login as the API:
a scraper sends a user's token (`Authorization: Bearer ...`)."""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


def metrics_route(runtime: Any) -> tuple[Route | None, Any]:
    """The `/metrics` route over `runtime` and its `Metrics`; (None, None) without
    prometheus_client."""
    try:
        from tarry.drivers.telemetry.prometheus import Metrics
    except ImportError:
        return None, None
    metrics = Metrics(runtime)

    async def endpoint(request: Request) -> Response:
        body = await run_in_threadpool(metrics.exposition)  # the store gauges read the store
        return Response(body, media_type=metrics.content_type)

    return Route("/metrics", endpoint, methods=["GET"]), metrics
