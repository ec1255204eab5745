"""Route handlers that only read: registered flows and their structure, the stats timeline,
the replay of a session's events, and the OpenAPI description (a mixin of `Api`)."""

from __future__ import annotations

import datetime as dt
from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from tarry.drivers.http.bodies import (
    BadRequest,
    error_response,
    int_param,
    json_response,
    text_param,
)
from tarry.drivers.http.flows import flow_summary, structure
from tarry.drivers.http.openapi import document
from tarry.drivers.http.periods import period
from tarry.drivers.http.replay import MAX_SPEED, replay_feed
from tarry.drivers.http.sse import EventStreamResponse, Streams
from tarry.drivers.reading.stats import timeline
from tarry.drivers.runtime import Runtime
from tarry.engine.elements.flow import Flow

#: Most buckets one timeline has; its default period when none is given.
MAX_BUCKETS = 500
DEFAULT_PERIOD = dt.timedelta(hours=24)


class NoSuchFlow(Exception):
    """No registered flow has this name (and version): 404 UnknownFlow."""


def find_flow(rt: Runtime, name: str, version: Any = None) -> Flow:
    """The registered flow `name` (the newest registered, or the one whose `version` is
    given); NoSuchFlow naming what is registered otherwise."""
    flows = [f for f in rt.flows.all() if f.name == name]
    if version is not None:
        flows = [f for f in flows if f.version == version or str(f.version) == str(version)]
    if not flows:
        known = sorted({f.name for f in rt.flows.all()})
        which = f"{name!r} version {version!r}" if version is not None else repr(name)
        msg = f"no flow {which} is registered with this server (registered: {known or 'none'})"
        raise NoSuchFlow(msg)
    return flows[-1]


async def on_unknown_flow(request: Request, exc: Exception) -> Response:
    return error_response(404, "UnknownFlow", str(exc))


class ReadingRoutes:
    rt: Runtime
    streams: Streams

    async def list_flows(self, request: Request) -> Response:
        return json_response({"flows": [flow_summary(f) for f in self.rt.flows.all()]})

    async def get_flow(self, request: Request) -> Response:
        """One flow's structure: the newest registered of its name, or `?fingerprint=` /
        `?version=` for another one (a session's own, say)."""
        name = request.path_params["name"]
        q = request.query_params
        fingerprint = q.get("fingerprint")
        try:
            if fingerprint:
                flow = self.rt.flows.version(name, fingerprint)
                if flow is None:
                    msg = f"no flow {name!r} with fingerprint {fingerprint!r} is registered"
                    raise NoSuchFlow(msg)
            else:
                flow = find_flow(self.rt, name, q.get("version") or None)
        except NoSuchFlow as exc:
            return error_response(404, "UnknownFlow", str(exc))
        return json_response({**flow_summary(flow), "structure": structure(flow)})

    async def stats_timeline(self, request: Request) -> Response:
        """Sessions created per bucket of [since, until), by their current status."""
        since, until = period(request)
        buckets = int_param(request, "buckets", 24, 1, MAX_BUCKETS)
        flow = text_param(request, "flow", 512)
        if until is None:  # the end of the current minute: the last bucket holds "now"
            now = self.rt.clock.now()
            until = now.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
        if since is None:
            since = until - DEFAULT_PERIOD
        if since >= until:
            raise BadRequest("BadRequest", "?since= must be before ?until=")
        found = await run_in_threadpool(
            partial(timeline, self.rt.store, since=since, until=until, buckets=buckets, flow=flow)
        )
        return json_response(
            {
                "since": since,
                "until": until,
                "buckets": [
                    {"start": b.start, "end": b.end, "by_status": b.by_status} for b in found
                ],
            }
        )

    async def replay_session(self, request: Request) -> Response:
        """The session's stored events, paced: SSE, ending with `event: end`."""
        text = request.query_params.get("speed") or "10"
        try:
            speed = 0.0 if text == "max" else float(text)
        except ValueError:
            speed = -1.0
        if not 0 <= speed <= MAX_SPEED:
            raise BadRequest(
                "BadRequest",
                f"?speed= must be a number from 0 to {MAX_SPEED:g}, or max (got {text[:40]!r})",
            )
        after = int_param(request, "after", 0, 0, None)
        view = await run_in_threadpool(self.rt.session, request.path_params["sid"])
        return EventStreamResponse(replay_feed(view.events, after, speed, self.streams))

    async def openapi(self, request: Request) -> Response:
        return json_response(document())
