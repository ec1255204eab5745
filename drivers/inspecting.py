"""Inspection: `Runtime.session`, `sessions` and `stats`."""

from __future__ import annotations

from tarry.engine.describe import describe
from tarry.engine.errors import InvalidArgument, UnknownSession
from tarry.engine.flow import Flow

from .core import Core
from .limits import check_filters, check_limit, valid_session_id
from .stats import Stats, compute_stats
from .views import SessionSummary, SessionView


def session(core: Core, session_id: str) -> SessionView:
    if not valid_session_id(session_id):
        raise UnknownSession(session_id)  # no such id can have been stored
    record = core.store.load(session_id)
    if record is None:
        raise UnknownSession(session_id)
    return SessionView(core.store, record, core.tokens)


def sessions(
    core: Core, status: str | None, flow: str | Flow | None, limit: int, offset: int
) -> list[SessionSummary]:
    name = flow.name if isinstance(flow, Flow) else flow
    check_filters(status, name)
    check_limit(limit)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        msg = f"offset must be an int >= 0 (got {describe(offset)})"
        raise InvalidArgument(msg)
    rows = core.store.list(status=status, flow=name, limit=limit, offset=offset)
    return [SessionSummary.of(r) for r in rows]


def stats(core: Core, flow: str | Flow | None) -> Stats:
    name = flow.name if isinstance(flow, Flow) else flow
    check_filters(None, name)
    return compute_stats(core.store, flow=name)
