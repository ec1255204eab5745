"""The Runtime's reading and retention methods (the base class of `Runtime`, see runtime.py):
sessions, stats, logs and subscriptions, and pruning. Each delegates to its family module."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from tarry.drivers.lazy_module import lazy_module
from tarry.drivers.settings import Settings
from tarry.engine.flow import Flow
from tarry.engine.state.events import Event
from tarry.snapshots.log_records import LogRecord

if TYPE_CHECKING:
    from tarry.drivers.reading import inspecting, paging
    from tarry.drivers.reading.paging import SessionPage
    from tarry.drivers.reading.stats import Stats
    from tarry.drivers.reading.views import SessionSummary, SessionView
    from tarry.drivers.rounds import pruning
else:
    # Loaded when first called: `import tarry` and a plain run or resume never need them.
    inspecting = lazy_module("tarry.drivers.reading.inspecting")
    paging = lazy_module("tarry.drivers.reading.paging")
    pruning = lazy_module("tarry.drivers.rounds.pruning")


class Reads(Settings):
    """What a Runtime reads of its sessions, and how it lets them go."""

    # -- retention -----------------------------------------------------------------------------
    def prune(
        self,
        *,
        older_than: timedelta,
        status: str | Iterable[str] = ("completed", "cancelled", "failed"),
        dry_run: bool = False,
    ) -> int:
        """Delete the ended sessions whose last update is older than `older_than` (by `clock`)
        — with their events, values and tokens — and return how many. `status` narrows which
        ended statuses go (one or several of "completed", "cancelled", "failed"); a running or
        paused session is never deleted, nor a failed one being resumed. Deletes in batches,
        each one short transaction; a SQLite file then gives the space back. `dry_run`: only
        count them. InvalidArgument for an `older_than` that is not a positive timedelta or a
        status that is not an ended one."""
        return pruning.prune(self._core, older_than, status, dry_run)

    def retain(self) -> int:
        """Prune by `retention` if it is set and a minute (by `clock`) passed since the last
        time: what `tarry worker` does every round, for loops of your own. Returns how many
        sessions were deleted; a failure is logged, not raised."""
        return pruning.retain(self._core)

    # -- inspecting ----------------------------------------------------------------------------
    def session(self, session_id: str) -> SessionView:
        """A view of one stored session; UnknownSession if there is none."""
        return inspecting.session(self._core, session_id)

    def sessions(
        self,
        *,
        status: str | None = None,
        flow: str | Flow | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[SessionSummary]:
        """Sessions newest first, optionally filtered by status and flow (name or Flow)."""
        return inspecting.sessions(self._core, status, flow, limit, offset)

    def sessions_page(
        self,
        *,
        status: str | None = None,
        flow: str | Flow | None = None,
        q: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> SessionPage:
        """A page of sessions newest first and the `next_cursor` of the next page (None on the
        last): keyset paging, stable while sessions are created, an index range read however
        deep. `q`: a session id prefix or flow name substring; created in [`since`, `until`)."""
        return paging.sessions_page(
            self._core,
            status=status,
            flow=flow,
            q=q,
            since=since,
            until=until,
            limit=limit,
            cursor=cursor,
        )

    def stats(
        self,
        *,
        flow: str | Flow | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Stats:
        """Counts of sessions by status; per node (by name) executions, failures and mean
        duration; and the sums of every `ctx.metric` — over all sessions, or one flow's, or
        those created in [`since`, `until`) (timezone-aware datetimes).

        The store keeps a tally per session and folds in only the events written since the last
        report: its cost grows with the sessions, not with their logs. A session whose stored
        data cannot be read is logged and left out of the node figures.
        """
        return inspecting.stats(self._core, flow, since, until)

    def logs(
        self,
        session_id: str,
        *,
        level: int | str | None = None,
        after: int = 0,
        limit: int = 1000,
    ) -> list[LogRecord]:
        """The `logging` records a session's steps emitted (those it keeps), in order: those
        at `level` or above (a number or a name such as "WARNING"), with seq > `after`, at most
        `limit`. Records are written with the session (at most a second behind while it
        runs). UnknownSession for an id no session has."""
        return inspecting.logs(self._core, session_id, level, after, limit)

    def dropped_logs(self, session_id: str) -> int:
        """How many of a session's `logging` records it did not keep (over `max_logs`: its
        oldest ones)."""
        return inspecting.dropped_logs(self._core, session_id)

    def subscribe(
        self, callback: Callable[[Event], Any], *, session_id: str | None = None
    ) -> Callable[[], None]:
        """Call `callback(event)` for each new event (of one session, or all). Returns the
        function that unsubscribes. Runs already in progress keep the subscribers they
        started with; a callback that raises is logged and does not disturb the run."""
        return self._core.hub.subscribe(callback, session_id)
