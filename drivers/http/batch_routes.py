"""Route handler of a session's open provider batches (tarry.batches; a mixin of `Api`)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from tarry.drivers.batches.inspect import session_batches
from tarry.drivers.http.bodies import json_response
from tarry.drivers.runtime import Runtime


class BatchRoutes:
    """The handler of `/api/sessions/{sid}/batches`, over `self.rt`."""

    rt: Runtime

    async def list_session_batches(self, request: Request) -> Response:
        """The open batches that hold the session's waiting BatchRequests: provider id,
        status, counts. 404 for an unknown session."""
        sid = request.path_params["sid"]
        await run_in_threadpool(self.rt.session, sid)  # UnknownSession: 404
        found = await run_in_threadpool(session_batches, self.rt.store, sid)
        return json_response({"batches": found})
