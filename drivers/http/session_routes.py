"""Route handlers that read sessions: the list (paged), one session, its events, its logs, and
the stats (a mixin of `Api`)."""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from tarry.drivers.http.bodies import (
    BadRequest,
    int_param,
    json_response,
    session_json,
    text_param,
)
from tarry.drivers.http.periods import period
from tarry.drivers.reading.inbox import inbox
from tarry.drivers.reading.items import items_page
from tarry.drivers.reading.jsonable import event_to_dict, log_to_dict
from tarry.drivers.reading.paging import encode_cursor
from tarry.drivers.reading.views import SessionView
from tarry.drivers.runtime import Runtime

#: The most events one `GET .../events` returns.
MAX_EVENTS = 10_000
#: The most items one `GET .../items` returns, and the longest `?path=` it takes.
MAX_ITEMS_PAGE = 1000
MAX_ITEMS_PATH = 1000
#: The longest `?flow=` taken (as documented: a flow's name).
MAX_FLOW_NAME = 512
#: The most Gates one `GET /api/inbox` returns, and the most wait rows it reads.
MAX_INBOX_PAGE = 500
MAX_INBOX_SCAN = 10_000
#: The most log records one `GET .../logs` returns.
MAX_LOGS_PAGE = 10_000


class SessionRoutes:
    """The handlers of `/api/sessions` reads and `/api/stats`, over `self.rt`."""

    rt: Runtime

    async def list_sessions(self, request: Request) -> Response:
        """Newest first. Paged by `cursor` (keyset: the `next_cursor` of the page before), or
        by `offset` (kept for old callers; a deep offset costs what it skips)."""
        q = request.query_params
        limit = int_param(request, "limit", 50, 1, 1000)
        offset = int_param(request, "offset", 0, 0, None)
        if q.get("status") == "":
            raise BadRequest(
                "BadRequest", "?status= must name a status (leave it out for every status)"
            )
        status, flow = q.get("status") or None, text_param(request, "flow", MAX_FLOW_NAME)
        if offset:
            if q.get("cursor") or q.get("q") or q.get("since") or q.get("until"):
                raise BadRequest(
                    "BadRequest",
                    "?offset= pages only by status and flow: use "
                    "?cursor= with ?q=, ?since= or ?until=",
                )
            rows = await run_in_threadpool(
                partial(self.rt.sessions, status=status, flow=flow, limit=limit + 1, offset=offset)
            )
            more = len(rows) > limit
            del rows[limit:]
            last = rows[-1] if rows and more else None
            cursor = encode_cursor(last.created_at, last.session_id) if last else None
            return json_response(
                {"sessions": rows, "next_cursor": cursor, "limit": limit, "offset": offset}
            )
        since, until = period(request)
        page = await run_in_threadpool(
            partial(
                self.rt.sessions_page,
                status=status,
                flow=flow,
                q=q.get("q") or None,
                since=since,
                until=until,
                limit=limit,
                cursor=q.get("cursor") or None,
            )
        )
        return json_response(
            {
                "sessions": page.sessions,
                "next_cursor": page.next_cursor,
                "limit": limit,
                "offset": 0,
            }
        )

    async def get_session(self, request: Request) -> Response:
        view = await self._view(request)
        now = self.rt.clock.now()  # a running session whose lease lapsed shows as stale
        return json_response(await run_in_threadpool(session_json, view, now))

    async def list_events(self, request: Request) -> Response:
        after = int_param(request, "after", 0, 0, None)
        limit = int_param(request, "limit", 1000, 1, MAX_EVENTS)
        view = await self._view(request)
        # One more than asked for tells whether there are more: the store reads that page only.
        events = await run_in_threadpool(view.events, after, limit + 1)
        more = len(events) > limit
        del events[limit:]
        return json_response(
            {
                "session_id": view.session_id,
                "events": [event_to_dict(e) for e in events],
                "last_seq": events[-1].seq if events else after,
                "more": more,
            }
        )

    async def list_items(self, request: Request) -> Response:
        """A page of an open ForEach's items with the status of each, by index (the page's
        per-item grid): costs the page, not the ForEach (drivers/reading/items.py)."""
        path = request.query_params.get("path") or ""
        if not path or len(path) > MAX_ITEMS_PATH or "\x00" in path:
            raise BadRequest(
                "BadRequest",
                f"?path= must name an open ForEach (its path, parts joined by /; "
                f"at most {MAX_ITEMS_PATH} characters)",
            )
        offset = int_param(request, "offset", 0, 0, None)
        limit = int_param(request, "limit", 200, 1, MAX_ITEMS_PAGE)
        view = await self._view(request)
        page = await run_in_threadpool(items_page, view, path, offset, limit)
        return json_response(
            {
                "session_id": page.session_id,
                "path": page.path,
                "size": page.size,
                "offset": page.offset,
                "limit": page.limit,
                "counts": page.counts,
                "items": page.items,
            }
        )

    async def list_inbox(self, request: Request) -> Response:
        """The Gates waiting for a person, of every session: those of `?assignee=` (all when
        absent), and the unassigned ones too with `?unassigned=true` (only those without an
        assignee), through the waits' kind index, at most MAX_INBOX_SCAN wait rows read
        (drivers/reading/inbox.py)."""
        assignee = text_param(request, "assignee", 512)
        unassigned = request.query_params.get("unassigned") or "false"
        if unassigned not in ("true", "false"):
            raise BadRequest(
                "BadRequest", f"?unassigned= must be true or false (got {unassigned!r})"
            )
        whose: set[str] | None = None if assignee is None else {assignee}
        if unassigned == "true":
            whose = (whose or set()) | {""}
        limit = int_param(request, "limit", 100, 1, MAX_INBOX_PAGE)
        page = await run_in_threadpool(
            partial(inbox, self.rt.store, assignees=whose, limit=limit, scan=MAX_INBOX_SCAN)
        )
        return json_response(
            {
                "gates": page.gates,
                "more": page.more,
                "assignees": page.assignees,
                "scanned": page.scanned,
                "complete": page.complete,
            }
        )

    async def list_logs(self, request: Request) -> Response:
        level: int | str | None = request.query_params.get("level") or None
        if isinstance(level, str) and level.isdigit():
            level = int(level)
        after = int_param(request, "after", 0, 0, None)
        limit = int_param(request, "limit", 1000, 1, MAX_LOGS_PAGE)
        sid = request.path_params["sid"]

        def read() -> tuple[list[Any], int]:
            # One more than asked for tells whether there are more.
            found = self.rt.logs(sid, level=level, after=after, limit=limit + 1)
            return found, self.rt.dropped_logs(sid)

        logs, dropped = await run_in_threadpool(read)
        more = len(logs) > limit
        del logs[limit:]
        return json_response(
            {
                "session_id": sid,
                "logs": [log_to_dict(r) for r in logs],
                "last_seq": logs[-1].seq if logs else after,
                "more": more,
                "dropped": dropped,
            }
        )

    async def stats(self, request: Request) -> Response:
        flow = text_param(request, "flow", MAX_FLOW_NAME)
        since, until = period(request)
        return json_response(
            await run_in_threadpool(partial(self.rt.stats, flow=flow, since=since, until=until))
        )

    async def _view(self, request: Request) -> SessionView:
        return await run_in_threadpool(self.rt.session, request.path_params["sid"])
