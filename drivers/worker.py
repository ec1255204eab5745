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
import time
from collections.abc import Callable, Iterable
from typing import Any

from tarry.drivers.batches.round import batch_round
from tarry.drivers.core import Core
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.limits import check_limit
from tarry.drivers.rounds import delivering, polling, recovery, timers
from tarry.drivers.rounds.boundary import Round
from tarry.drivers.rounds.delivering import Delivery
from tarry.drivers.runtime import Runtime
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import FlowMismatch, InvalidArgument, InvalidFlow, UnknownFlow
from tarry.snapshots.records import SessionRecord

log = logging.getLogger("tarry.worker")

#: The key of a session's `meta` that names where its flow is defined.
FLOW_REF = "flow_ref"

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
    value = _imported(ref, "MODULE:FLOW, e.g. jobs.nightly:flow", FlowRefError)
    if not isinstance(value, Flow):
        attr = ref.split(":")[1]
        problem = f"{attr!r} must be a tarry.Flow (got {type(value).__name__} {value!r:.60})"
        raise FlowRefError(ref, problem)
    return value


class AdaptersRefError(InvalidArgument):
    """A `MODULE:OBJ` reference to adapters is malformed, or does not lead to them."""

    def __init__(self, ref: str, problem: str) -> None:
        self.ref = ref
        self.problem = problem
        super().__init__(f"adapters reference {ref!r}: {problem}")


def load_adapters(ref: str) -> dict[str, Any]:
    """Import `MODULE:OBJ` and return the adapters it names: OBJ is a dict {pause kind:
    adapter}, or a callable that returns one (called once, with no arguments). Imported as
    `load_flow` imports; `AdaptersRefError` for anything else (what the adapters themselves
    must be is checked by the Runtime they are given to)."""
    value = _imported(ref, "MODULE:OBJ, e.g. jobs.batch:adapters", AdaptersRefError)
    if callable(value) and not isinstance(value, dict):
        try:
            value = value()
        except Exception as exc:
            problem = f"calling it failed ({type(exc).__name__}: {exc})"
            raise AdaptersRefError(ref, problem) from exc
    if not isinstance(value, dict):
        problem = (
            f"must be a dict {{pause kind: adapter}} or a callable returning one "
            f"(got {type(value).__name__} {value!r:.60})"
        )
        raise AdaptersRefError(ref, problem)
    return value


def _imported(ref: str, expected: str, error: Callable[[str, str], Exception]) -> Any:
    """The attribute `ref` (`MODULE:ATTR`) names; `error(ref, problem)` when there is none."""
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise error(str(ref), f"expected {expected}")
    module_name, attr = ref.split(":")
    if not module_name or not attr:
        raise error(ref, f"expected {expected}")
    _put_cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            problem = f"no module named {exc.name!r} (looked in {os.getcwd()} and sys.path)"
            raise error(ref, problem) from exc
        raise error(ref, f"importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:  # the user's module raised while importing
        problem = f"importing {module_name!r} failed ({type(exc).__name__}: {exc})"
        raise error(ref, problem) from exc
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise error(ref, f"{module_name!r} has no attribute {attr!r}") from None
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


def deliver_importing(
    runtime: Runtime,
    deliveries: dict[str, Any],
    tried: set[str] | None = None,
    *,
    actor: str | None = None,
) -> Delivery:
    """`deliver_many`, importing the flow of a waiting session that the runtime does not know
    from the `MODULE:FLOW` its meta records (each reference once per `tried`): what `tarry
    deliver` and `POST /api/deliver` do, in processes that never ran those flows. A refused
    delivery changes nothing, so it is simply tried again after an import."""
    tried = set() if tried is None else tried
    while True:
        try:
            return delivering.deliver_many(_core(runtime), deliveries, actor)
        except (UnknownFlow, FlowMismatch) as exc:
            record = runtime.store.load(exc.session_id) if exc.session_id else None
            if record is None or not register_recorded_flows(runtime, [record], tried):
                raise


def recover_importing(runtime: Runtime, tried: set[str] | None = None) -> list[Outcome]:
    """`recover()`, importing the flow of a stale session that the runtime does not know
    from the `MODULE:FLOW` its meta records (each reference once per `tried`): what
    `tarry recover` does without a session id."""
    tried = set() if tried is None else tried
    round = Round(
        import_flow=lambda record: bool(register_recorded_flows(runtime, [record], tried))
    )
    return recovery.recover(_core(runtime), round)


# --- the loop --------------------------------------------------------------------------------

#: Seconds between a stopping worker's requests to stop the session it has in hand, while that
#: session's drive is still starting.
HALT_POLL = 0.01

#: Called with ("resumed" | "recovered", outcome) for each session the worker drove.
Report = Callable[[str, Outcome], Any]


class Worker:
    """Loops `recover()` and `poll()` (due timers, back-offs, timeouts and adapter-ready
    sessions) until `stop()`.

    A round that handled a full batch (`limit` due sessions, or as many recoveries) starts the
    next one at once; otherwise the worker waits `interval` seconds. Each session is handled
    inside its own error boundary: one that cannot be continued is logged once and set aside,
    and the round goes on (see drivers/rounds/boundary.py).

    A session of a flow the runtime does not know has its flow imported from the `MODULE:FLOW`
    recorded in its meta when the round meets it (`import_flows=False` turns that off); each
    reference is imported once per worker. `stop()` is safe from a signal handler or another
    thread: the session in progress stops at its next checkpoint (steps are never cut in half),
    paused, and is handed back — due at once, so that any worker continues it — and no other
    session starts. Many workers may share one durable store: due sessions are claimed a page
    at a time (`SessionStore.claim_due`), so no two workers fetch the same ones.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        interval: float = 1.0,
        report: Report | None = None,
        import_flows: bool = True,
        limit: int = 100,
        on_round: Callable[[float, bool], Any] | None = None,
    ) -> None:
        if not (isinstance(interval, int | float) and interval > 0):
            msg = f"interval must be a positive number of seconds (got {interval!r})"
            raise ValueError(msg)
        check_limit(limit)
        self.runtime = runtime
        self.interval = float(interval)
        self.report = report
        self.import_flows = import_flows
        self.limit = limit
        #: on_round(seconds, failed): told of each round's time, and whether it raised (the
        #: Prometheus metrics' `Metrics.round`).
        self.on_round = on_round
        self._stopping = False
        self._wake = threading.Event()
        self._tried: set[str] = set()
        self._round = Round(
            stopping=lambda: self._stopping,
            import_flow=self._import_flow if import_flows else None,
        )
        #: Sessions this worker asked to stop at a checkpoint, to hand back after the round.
        self._stopped: set[str] = set()
        #: The sessions it handed back (paused at a checkpoint, due at once for any worker).
        self.handed_back: list[str] = []

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """End `run_forever`: the session in progress stops at its next checkpoint and is
        handed back, and no other starts. Safe from a signal handler and from any thread."""
        self._stopping = True
        # A thread does the rest: Event.set() and the abort take locks that the code this
        # handler interrupted may be holding, in this very thread.
        threading.Thread(target=self._halt, name="tarry-worker-stop", daemon=True).start()

    def _halt(self) -> None:
        self._wake.set()
        running = _core(self.runtime).running
        # The session in hand may not have started its drive yet (its token is being used):
        # ask again until it has, or until the round let go of it.
        while (sid := self._round.current) is not None:
            self._stopped.add(sid)  # before the abort lands, so the round's end sees it
            if running.request_abort(sid, True):
                return
            self._stopped.discard(sid)
            time.sleep(HALT_POLL)

    def run_once(self) -> list[Outcome]:
        """One round: recover dead runs, then resume what is due or ready. Sync; async steps
        are driven on a private event loop. Returns the outcomes, recovered ones first."""
        outcomes, _ = self._run_round()
        return outcomes

    def run_forever(self) -> None:
        """Run rounds until `stop()`. An exception in a round (a store that is briefly
        unreachable, say) is logged and the loop goes on after `interval`."""
        while not self._stopping:
            try:
                _, full = self._run_round()
            except Exception:
                log.exception("tarry worker: a round failed; retrying in %s s", self.interval)
                full = False
            if not self._stopping and not full:
                self._wake.wait(self.interval)

    def _run_round(self) -> tuple[list[Outcome], bool]:
        """One round; its outcomes, and whether it handled a full batch (then more may be
        waiting, and the next round starts at once). Timed for `on_round`, if given."""
        if self.on_round is None:
            return self._round_once()
        began = time.monotonic()
        try:
            found = self._round_once()
        except BaseException:
            self.on_round(time.monotonic() - began, True)
            raise
        self.on_round(time.monotonic() - began, False)
        return found

    def _round_once(self) -> tuple[list[Outcome], bool]:
        core = _core(self.runtime)
        outcomes: list[Outcome] = []
        try:
            recovered = recovery.recover(core, self._round, self.limit)
            self._report("recovered", recovered, outcomes)
            if self._stopping:
                return outcomes, False
            resumed = timers.resume_due(core, self.limit, self._round)
            self._report("resumed", resumed, outcomes)
            if not self._stopping:
                delivered = delivering.deliver_pending(core, self._round, self.limit)
                self._report("delivered", delivered, outcomes)
            if not self._stopping:
                self._report("resumed", polling.ask_adapters(core, self._round), outcomes)
            if not self._stopping:
                tried: set[str] = set()
                results = batch_round(
                    core,
                    self._round,
                    lambda values: deliver_importing(self.runtime, values, tried),
                )
                self._report("delivered", results, outcomes)
        finally:
            self._hand_back(core)
        self.runtime.retain()  # prunes by `Runtime(retention=)`, at most once a minute
        return outcomes, len(recovered) >= self.limit or len(resumed) >= self.limit

    def _report(self, source: str, got: list[Outcome], outcomes: list[Outcome]) -> None:
        for outcome in got:
            outcomes.append(outcome)
            if self.report is not None:
                self.report(source, outcome)

    def _hand_back(self, core: Core) -> None:
        """Make the sessions this worker stopped due, for any worker to continue."""
        while self._stopped:
            sid = self._stopped.pop()
            try:
                if timers.hand_back(core, sid):
                    self.handed_back.append(sid)
            except Exception:  # it stays paused, for a resume by hand; the others go on
                log.exception("tarry worker: could not hand back session %s", sid)

    def _import_flow(self, record: SessionRecord) -> bool:
        return bool(register_recorded_flows(self.runtime, [record], self._tried))


def _core(runtime: Runtime) -> Core:
    # The worker drives the method families itself (a round that can be stopped between
    # sessions, with flows imported on demand), on the Runtime's one Core.
    return runtime._core
