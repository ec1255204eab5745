"""What the Runtime's method families share: the store, the clock, tokens, bounds and registries.

`Runtime` (runtime.py) is a thin facade over the family modules (starting, resuming, timers,
polling, recovery, control, inspecting); each takes this one object, so none of them imports
`runtime.py` back, and `Drive` needs only this too.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from tarry.drivers.clock import Clock, SystemClock, clock_ns
from tarry.drivers.drive.executors import Executors
from tarry.drivers.drive.lease_keeper import LeaseKeeper
from tarry.drivers.drive.local_drives import Running
from tarry.drivers.drive.statecache import MAX_ENTRIES, RecordCache, states_for
from tarry.drivers.drive.values import value_check, value_take
from tarry.drivers.limits import (
    DURABILITY,
    ERROR_ALLOWANCE,
    MAIL_TTL,
    MAX_SNAPSHOT_BYTES,
    MAX_VALUE_BYTES,
    positive_int,
)
from tarry.drivers.logs import INFO, MAX_LOGS, LogSettings
from tarry.drivers.registry import FlowRegistry
from tarry.drivers.rounds.log_once import Reported
from tarry.drivers.stores import open_store
from tarry.drivers.subscribers import Subscribers
from tarry.drivers.tokens import Tokens
from tarry.engine.describe import describe
from tarry.engine.elements.flow import Flow
from tarry.engine.elements.waits import PAUSE_KINDS
from tarry.engine.errors import InvalidArgument
from tarry.engine.retry import Retry
from tarry.snapshots.codec.limits import MAX_BLOB_BYTES
from tarry.snapshots.store import SessionStore


class Core:
    """One Runtime's parts, checked once when it is built."""

    __slots__ = (
        "store",
        "wake_parent",
        "cancel_children",
        "clock",
        "ns",
        "durability",
        "lease",
        "owner",
        "retry",
        "adapters",
        "max_value_bytes",
        "mail_ttl",
        "max_snapshot_bytes",
        "check",
        "take",
        "tokens",
        "flows",
        "running",
        "states",
        "records",
        "hub",
        "retention",
        "retain_at",
        "reported",
        "pending_after",
        "logs",
        "executors",
        "keeper",
        "tracing",
        "batches",
    )

    def __init__(
        self,
        store: None | str | SessionStore,
        *,
        flows: Iterable[Flow],
        clock: Clock | None,
        adapters: dict[str, Any] | None,
        durability: str,
        secret: str | bytes | None,
        lease: float,
        retry: Retry | None,
        max_value_bytes: int = MAX_VALUE_BYTES,
        max_snapshot_bytes: int = MAX_SNAPSHOT_BYTES,
        retention: timedelta | None = None,
        log_level: int | str = INFO,
        max_logs: int = MAX_LOGS,
        mail_ttl: timedelta = MAIL_TTL,
        max_threads: int | None = None,
        executor: Any = None,
        batches: dict[str, Any] | None = None,
    ) -> None:
        if durability not in DURABILITY:
            msg = f"durability must be 'pause' or 'step' (got {durability!r})"
            raise InvalidArgument(msg)
        if not (isinstance(lease, int | float) and lease > 0):
            msg = f"lease must be a positive number of seconds (got {lease!r})"
            raise InvalidArgument(msg)
        #: Seconds a running session's lease lasts; renewed every third of it (at checkpoints,
        #: or by the lease keeper during a long step). `recover()` in another process takes
        #: over sessions whose lease ran out.
        self.lease = float(lease)
        #: This runtime's name on the leases it holds.
        self.owner = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.store: SessionStore = open_store(store)
        if clock is not None and not callable(getattr(clock, "now", None)):
            msg = f"clock must have a now() method, as tarry.ManualClock does (got {clock!r})"
            raise InvalidArgument(msg)
        self.clock: Clock = clock or SystemClock()
        #: The clock's time in nanoseconds since the epoch, for events (see Execution.ns):
        #: the machine's clock read as an int, without building a datetime.
        self.ns: Callable[[], int] = clock_ns(self.clock)
        self.durability = durability
        if retry is not None and not isinstance(retry, Retry):
            msg = f"retry= must be a tarry.Retry (got {retry!r})"
            raise InvalidArgument(msg)
        #: The retry policy of steps that have none of their own.
        self.retry = retry
        self.adapters = checked_adapters(adapters)
        #: Bounds on what a session may hold: one value an event carries (an input, a step's
        #: output, a ctx.state value, a resume value, a pause payload) and a whole snapshot.
        self.max_value_bytes = positive_int(max_value_bytes, "max_value_bytes")
        self.max_snapshot_bytes = positive_int(max_snapshot_bytes, "max_snapshot_bytes")
        # Every node keeps the state within max_snapshot_bytes; a completed session's snapshot
        # holds the run's output besides (one value), a failed one's its error (see
        # engine/failure.py). Either must still be one that tarry reads back.
        most = MAX_BLOB_BYTES - ERROR_ALLOWANCE
        if self.max_snapshot_bytes + self.max_value_bytes > most:
            msg = (
                f"max_snapshot_bytes plus max_value_bytes must be at most {most}, the largest "
                f"snapshot tarry reads back less room for an error (got {max_snapshot_bytes} "
                f"+ {max_value_bytes})"
            )
            raise InvalidArgument(msg)
        #: The check of every value a session takes in: encodable and within max_value_bytes.
        self.check = value_check(self.max_value_bytes)
        #: The same check, which also makes the value the session's own copy (see values.py).
        self.take = value_take(self.max_value_bytes)
        #: Mints tokens and checks them (signed with `secret` when one is given).
        self.tokens = Tokens(secret, self.store)
        self.flows = FlowRegistry()
        for flow in flows:
            self.flows.register(flow)
        self.running = Running()
        #: The states of the snapshots this runtime (or another over the same store object)
        #: last wrote, for resuming them undecoded.
        self.states = states_for(self.store)
        #: The records of the sessions this runtime last paused, for resuming them unread
        #: (not with a store of an older protocol, whose consume_token takes no version).
        self.records = RecordCache(MAX_ENTRIES if _takes_version(self.store) else 0)
        #: How long a message may stay queued before `prune` and workers drop it.
        self.mail_ttl = checked_age(mail_ttl, "mail_ttl")
        self.hub = Subscribers()
        #: How long ended sessions are kept: workers prune older ones as they go (pruning.py).
        self.retention = None if retention is None else checked_age(retention, "retention")
        #: When (by `clock`) workers may prune by `retention` next.
        self.retain_at: datetime | None = None
        #: The sessions whose trouble a round has logged (each once, not every round).
        self.reported = Reported()
        #: Where this runtime's next `deliver_pending` reads on from (a message id): past the
        #: last full page, so that pairs it cannot deliver do not hide the rest (delivering.py).
        self.pending_after = 0
        #: What of the `logging` records its steps emit a session keeps (see logs.py).
        self.logs = LogSettings(log_level, max_logs)
        #: Where the sync steps of concurrent lanes run (executors.py).
        self.executors = Executors(max_threads, executor)
        #: Renews the leases of this runtime's drives while a long step runs (lease_keeper.py).
        self.keeper = LeaseKeeper(self.lease)
        #: wake_parent(core, end key): the parent waiting on a child's end just queued takes it
        #: (rounds/delivering.py; set by the Runtime, which imports that module: the drives
        #: that end children cannot). Returns the parent's outcome, awaitable or not, or None.
        self.wake_parent: Callable[[Core, str], Any] = _no_parent
        #: OpenTelemetry spans of this runtime's sessions (drivers/telemetry/otel.py), or None:
        #: set by the Runtime (`tracing=`); a drive never asks for it.
        self.tracing: Any = None
        #: cancel_children(core, session id): cancel the children a session started that have
        #: not ended (sessions/control.py; set by the Runtime, as `wake_parent` is): a drive
        #: whose session's deadline passed calls it after its last write.
        self.cancel_children: Callable[[Core, str], Any] = _no_children
        #: {name: batch adapter} that BatchRequest(via=name) submits through (tarry.batches).
        self.batches = checked_batches(batches)

    def batch_check(self, via: str, key: str, body: Any) -> str | None:
        """What is wrong with a BatchRequest of `via` (Execution.batch_check), or None."""
        adapter = self.batches.get(via)
        if adapter is None:
            known = ", ".join(map(repr, self.batches)) or "none"
            return f"via {via!r} names no batch adapter of this Runtime (registered: {known})"
        problem: str | None = adapter.problem(key, body)
        return problem


def _no_parent(core: Core, key: str) -> None:
    return None


def _no_children(core: Core, session_id: str) -> None:
    return None


def _takes_version(store: SessionStore) -> bool:
    """Whether the store declares that its consume_token takes `version` (every store of this
    tarry does: `consume_at_version = True`). Declared, never read off a signature: a wrapper
    of a store says what it forwards."""
    return getattr(store, "consume_at_version", False) is True


def checked_adapters(adapters: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of `adapters`, each a callable or an object with a callable `many` (a bulk
    adapter) under a pause kind."""
    if adapters is not None and not isinstance(adapters, dict):
        msg = f"adapters must be a dict {{pause kind: adapter}} (got {describe(adapters)})"
        raise InvalidArgument(msg)
    adapters = dict(adapters or {})
    if adapters:
        # Loaded only when there are adapters: its records (ResumeRequest...) are attrs classes
        # a Runtime without adapters never builds, and each one costs `import tarry` a compile.
        from tarry.drivers.adapters import is_bulk
    for kind, adapter in adapters.items():
        if kind not in PAUSE_KINDS or not (callable(adapter) or is_bulk(adapter)):
            msg = (
                f"adapters maps a pause kind {PAUSE_KINDS} to a callable or an object with a "
                f"callable `many` (got {kind!r}: {adapter!r})"
            )
            raise InvalidArgument(msg)
    return adapters


#: What a batch adapter must have (drivers/batches/adapter.py).
_BATCH_METHODS = ("problem", "line", "submit", "find", "status", "results")


def checked_batches(batches: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of `batches`: {name: batch adapter} (OpenAIBatch, AnthropicBatch or alike)."""
    if batches is not None and not isinstance(batches, dict):
        msg = f"batches must be a dict {{name: batch adapter}} (got {describe(batches)})"
        raise InvalidArgument(msg)
    batches = dict(batches or {})
    for name, adapter in batches.items():
        lacks = [m for m in _BATCH_METHODS if not callable(getattr(adapter, m, None))]
        if not isinstance(name, str) or not name or lacks:
            msg = (
                "batches maps a name to a batch adapter such as tarry.batches.OpenAIBatch "
                f"(got {name!r}: {adapter!r}{', which lacks ' + ', '.join(lacks) if lacks else ''})"
            )
            raise InvalidArgument(msg)
    return batches


def checked_age(value: Any, name: str = "older_than", *, zero: bool = False) -> timedelta:
    """`value` if it is a positive timedelta (or zero, when `zero`), else InvalidArgument
    naming `name`."""
    least = timedelta(0)
    if not isinstance(value, timedelta) or value < least or (value == least and not zero):
        what = "a datetime.timedelta of 0 or more" if zero else "a positive datetime.timedelta"
        msg = f"{name} must be {what} (got {describe(value)})"
        raise InvalidArgument(msg)
    return value
