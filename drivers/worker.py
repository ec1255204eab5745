"""The worker: a loop that resumes due timers and adapter-ready sessions and recovers dead runs.

Also where a flow reference `MODULE:FLOW` becomes a `Flow`: the CLI records it on each session
it starts (`meta["flow_ref"]`), so a worker or a later `tarry resume` can import the flow of a
session it has never seen.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from tarry.engine.errors import InvalidFlow
from tarry.engine.flow import Flow
from tarry.snapshots.records import SessionRecord

from .outcome import Outcome
from .runtime import Runtime

log = logging.getLogger("tarry.worker")

#: The key of a session's `meta` that names where its flow is defined.
FLOW_REF = "flow_ref"

#: How many due and expired records the worker looks at per round for flows to import (as
#: many as `poll()` and `recover()` take per round), and the page size for paused ones.
SCAN_LIMIT = 100
SCAN_PAGE = 500


# --- flow references -------------------------------------------------------------------------


class FlowRefError(InvalidFlow):
    """A `MODULE:FLOW` reference is malformed, or does not lead to a `tarry.Flow`."""

    def __init__(self, ref: str, problem: str) -> None:
        self.ref = ref
        self.problem = problem
        super().__init__(f"flow reference {ref!r}: {problem}")


def load_flow(ref: str) -> Flow:
    """Import `MODULE:FLOW` and return the `Flow` it names.

    MODULE is imported with the current directory first on `sys.path`, as `python -m` does;
    FLOW is an attribute of it (dots reach into attributes: `jobs:flows.nightly`). Raises
    `FlowRefError` for a malformed reference, a module that cannot be imported (the error it
    raised is named) or an attribute that is missing or not a Flow.
    """
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise FlowRefError(str(ref), "expected MODULE:FLOW, e.g. jobs.nightly:flow")
    module_name, attr = ref.split(":")
    if not module_name or not attr:
        raise FlowRefError(ref, "expected MODULE:FLOW, e.g. jobs.nightly:flow")
    _put_cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            problem = f"no module named {exc.name!r} (looked in {os.getcwd()} and sys.path)"
            raise FlowRefError(ref, problem) from exc
        raise FlowRefError(ref, f"importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:  # the user's module raised while importing
        problem = f"importing {module_name!r} failed ({type(exc).__name__}: {exc})"
        raise FlowRefError(ref, problem) from exc
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise FlowRefError(ref, f"{module_name!r} has no attribute {attr!r}") from None
    if not isinstance(value, Flow):
        problem = f"{attr!r} must be a tarry.Flow (got {type(value).__name__} {value!r:.60})"
        raise FlowRefError(ref, problem)
    return value


def _put_cwd_on_path() -> None:
    # The console script's sys.path[0] is the script's folder, not the user's: put the current
    # folder first, as `python -m` does, so `tarry run jobs:flow` finds ./jobs.py.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def register_recorded_flows(
    runtime: Runtime, records: Iterable[SessionRecord], tried: set[str] | None = None
) -> list[str]:
    """Import and register the flows that `records` were started with (their
    `meta["flow_ref"]`). Each reference is tried once per `tried` set; a reference that fails
    to import is logged and skipped, so one broken module does not stop the others. Returns the
    references newly registered."""
    tried = set() if tried is None else tried
    loaded: list[str] = []
    for record in records:
        ref = record.meta.get(FLOW_REF) if isinstance(record.meta, dict) else None
        if not isinstance(ref, str) or ref in tried:
            continue
        tried.add(ref)
        try:
            runtime.register(load_flow(ref))
        except InvalidFlow as exc:
            log.warning("session %s: cannot load its flow: %s", record.session_id, exc)
            continue
        loaded.append(ref)
    return loaded


# --- the loop --------------------------------------------------------------------------------

#: Called with ("resumed" | "recovered", outcome) for each session the worker drove.
Report = Callable[[str, Outcome], Any]


class Worker:
    """Loops `runtime.recover()` and `runtime.poll()` (due timers, back-offs, timeouts and
    adapter-ready sessions) every `interval` seconds until `stop()`.

    Before each round it imports the flows of the sessions about to be continued, from the
    `MODULE:FLOW` recorded in their meta (`import_flows=False` turns that off), since the
    runtime only continues sessions of flows it knows; each reference is imported once per
    worker. `stop()` is safe from a signal handler or another thread: the batch of sessions in
    progress finishes (steps are never cut in half), and no other starts. Many workers may
    share one durable store: the store's claims make sure no session is driven by two of them.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        interval: float = 1.0,
        report: Report | None = None,
        import_flows: bool = True,
    ) -> None:
        if not (isinstance(interval, int | float) and interval > 0):
            msg = f"interval must be a positive number of seconds (got {interval!r})"
            raise ValueError(msg)
        self.runtime = runtime
        self.interval = float(interval)
        self.report = report
        self.import_flows = import_flows
        self._stopping = False
        self._wake = threading.Event()
        self._tried: set[str] = set()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """End `run_forever` after the round in progress. Safe from a signal handler and from
        any thread."""
        self._stopping = True
        # Event.set() takes the lock that Event.wait() holds for a moment; a signal handler
        # runs in the thread that may be inside wait(), so it must not take that lock itself.
        threading.Thread(target=self._wake.set, name="tarry-worker-stop", daemon=True).start()

    def run_once(self) -> list[Outcome]:
        """One round: recover dead runs, then resume what is due or ready. Sync; async steps
        are driven on a private event loop. Returns the outcomes, recovered ones first."""
        rt = self.runtime
        if self.import_flows:
            self._import_flows()
        outcomes: list[Outcome] = []
        for source, call in (("recovered", rt.recover), ("resumed", rt.poll)):
            if source == "resumed" and self._stopping:
                break  # stopping: do not start another batch of sessions
            for outcome in call():
                outcomes.append(outcome)
                if self.report is not None:
                    self.report(source, outcome)
        rt.retain()  # prunes by `Runtime(retention=)`, at most once a minute
        return outcomes

    def run_forever(self) -> None:
        """Run rounds until `stop()`. An exception in a round (a store that is briefly
        unreachable, say) is logged and the loop goes on after `interval`."""
        while not self._stopping:
            try:
                self.run_once()
            except Exception:
                log.exception("tarry worker: a round failed; retrying in %s s", self.interval)
            if not self._stopping:
                self._wake.wait(self.interval)

    def _import_flows(self) -> None:
        rt = self.runtime
        store = rt.store
        now = rt.clock.now()
        register_recorded_flows(rt, store.expired(now, SCAN_LIMIT), self._tried)
        register_recorded_flows(rt, store.due(now, SCAN_LIMIT), self._tried)
        if rt.adapters:
            # Adapter-ready sessions have no wake_at: `poll()` asks about every paused one.
            offset = 0
            while True:
                page = store.list(status="paused", limit=SCAN_PAGE, offset=offset)
                register_recorded_flows(rt, page, self._tried)
                if len(page) < SCAN_PAGE:
                    break
                offset += len(page)
