"""One drive of a session: from `run`/`resume` until it pauses, fails, is stopped, or ends."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs
from tarry.drivers.clock import sleepers
from tarry.drivers.drive.ledger import StoreLedger
from tarry.drivers.drive.outcome import (
    ERROR,
    Outcome,
    all_pauses,
    outcome_of,
    pause_of,
    stored_pauses,
)
from tarry.drivers.drive.pump import DONE, FAILED, PAUSED, STOPPED, AwaitableOrValue, Result, drive
from tarry.drivers.drive.values import bounds, copy
from tarry.drivers.limits import log
from tarry.drivers.sessions.children import end_post, start_child
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import NotSerializable, SnapshotTooLarge
from tarry.engine.execution import Execution
from tarry.engine.failure import fail, record_failure
from tarry.engine.signals import NO_MAIL, Pause, PauseMany
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event, EventLog
from tarry.engine.state.lanes import concurrent, park, parked, restore
from tarry.engine.state.records import (
    DEADLINE_EXCEEDED,
    ErrorInfo,
    PauseState,
    SessionState,
    pause_to_data,
)
from tarry.engine.state.reducer import error_from_data, error_to_data
from tarry.snapshots.codec.pack import loads
from tarry.snapshots.records import (
    SessionRecord,
    WaitRecord,
    decode_lane,
    encode_lane,
    encode_state,
    record_of,
    wait_record,
)

if TYPE_CHECKING:
    from tarry.drivers.core import Core


_OPENINGS = frozenset({ev.NODE_STARTED, ev.ITERATION_STARTED})

#: A result `_finish_cleanup` hands on when the run's ending event is recorded already.
ENDED = "ended"

#: With durability="pause", a drive still writes its events (and the values they refer to) once
#: this many are unwritten, at the next checkpoint after a step completed. A long run then holds
#: a bounded log in memory instead of every event since it started, and its events die young:
#: a log that lived as long as the run filled the cyclic collector's oldest generation, whose
#: full passes over a large heap (one that has imported a big framework) cost more than the
#: steps themselves.
FLUSH_EVENTS = 256

#: Seconds between a drive's ticks, at its first checkpoint after each: it writes its progress
#: (the events since its last write and a snapshot of its state, status "running"), so that
#: other processes see it at most this far behind, and reads the stop request that any process
#: may have stored for it (`Runtime.abort`/`cancel`).
TICK = 1.0

LEASE_LOST = ErrorInfo(
    type="lease_lost",
    message="another worker took over this session after its lease expired; this run stopped",
    retryable=False,
)


_NO_LOGS: dict[str, Any] = {}


def _on_the_way(path: tuple[Any, ...], frames: dict[tuple[Any, ...], Any]) -> bool:
    """Whether `path` leads to (or is) one of the containers a resumed run re-enters."""
    n = len(path)
    return any(at[:n] == path for at in frames)


def _stopped(path: tuple[Any, ...]) -> bool:
    return True  # a checkpoint after the drive ended (none should come) stops


class Drive:
    """Owns the Execution of one session while its generator tree runs in this process."""

    __slots__ = (
        "core",
        "flow",
        "record",
        "ex",
        "ledger",
        "aborts",
        "renew_at",
        "progress_at",
        "until",
        "stop",
        "written_seq",
        "lost",
        "asynchronous",
        "meta",
        "claimed",
        "keyed",
        "logs",
        "revived",
        "shown",
        "first",
        "honoured",
        "parked_now",
        "deadline",
        "expired",
        "going",
        "cascade",
        "posted",
    )

    def __init__(
        self,
        core: Core,
        flow: Flow,
        record: SessionRecord,
        state: SessionState,
        *,
        asynchronous: bool = False,
        meta: dict[str, Any] | None = None,
    ):
        self.core = core
        self.flow = flow
        self.record = record
        self.ledger = StoreLedger(core.store, state.session_id)
        listener: Callable[[Event], None] | None = core.hub.notify if core.hub.entries else None
        self.ex = Execution(
            state,
            now=core.clock.now,
            ns=core.ns,
            ledger=self.ledger,
            take=core.take,
            copy=copy,
            bounds=bounds(core, flow, record, meta),
            stop=self._on_checkpoint,
            listener=listener,
            retry=core.retry,
            mailbox=self._mailbox,
            children=self._children,
        )
        self.ex.batch_check = core.batch_check
        # ex.rows holds the events not written yet; they are written once `flush_at` are. The
        # durability is the session's own, whichever process continues it. The engine asks
        # `_on_checkpoint` only when a write or a tick (`ex.due`) is due (Execution.watch).
        self.ex.flush_at = 1 if record.durability == "step" else FLUSH_EVENTS
        self.ex.watch = False
        self.aborts = core.running.aborts
        # The lease is renewed at the first checkpoint after a third of it has passed, and the
        # drive ticks once a TICK; the monotonic clock makes those checks cheap enough for
        # every checkpoint.
        started = time.monotonic()
        self.renew_at = started + core.lease / 3
        #: When the drive next writes its progress (monotonic): once a TICK, however short
        #: the lease (whose renewals write only the lease).
        self.progress_at = started + TICK
        #: A stop request read from the store ("abort" or "cancel"); one stored before this
        #: drive began (a recovered session's) is acted on at the first checkpoint.
        self.stop: str | None = None
        # When the next tick is due (monotonic).
        self.ex.due = 0.0 if record.stop else started + min(TICK, core.lease / 3)
        #: Until when this drive's lease lasts, as it last renewed it.
        self.until: datetime | None = None
        #: The last seq whose state the stored snapshot holds.
        self.written_seq = state.last_seq
        self.lost = False
        #: Called from an async API (`arun`/`aresume`): back-offs await instead of blocking.
        self.asynchronous = asynchronous
        #: What the outcome's `meta` says of how this drive began (the pause kind resumed).
        self.meta = meta
        #: (key, id) of each message this drive claimed (`_mailbox`) since its last write.
        self.claimed: list[tuple[str, int]] = []
        #: {key: token key} of the keyed waits its last write registered (see starting.py).
        self.keyed: dict[str, str] = {}
        #: The `logging` records its steps emit, until its next write (None: not captured).
        self.logs = core.logs.watch(self.ex, core.clock)
        #: A failed session resumed: its waiting lanes lost their tokens when it failed, so
        #: they get new ones (and wait rows) when it pauses again.
        self.revived = record.status == "failed"
        #: The waits its outcome shows, as the state held them before their lanes were
        #: parked (`_write`); None: every wait of the state.
        self.shown: list[PauseState] | None = None
        #: The wait it paused again on when no wait began in it (see `record_pauses`).
        self.first: PauseState | None = None
        #: The stored stop request this drive stopped for, which its last write clears (one
        #: it did not see stays stored, and a worker honours it: see SessionStore.save).
        self.honoured: str | None = None
        #: How many lanes its last write parked (the outcome lists those without the store).
        self.parked_now = 0
        #: When the session fails with "deadline_exceeded" (None: no deadline, or its body
        #: ended and its cleanup runs, which no deadline stops). Checked at every checkpoint:
        #: the engine asks at each one while there is a deadline (a clock read per element).
        self.deadline = state.deadline if state.ending is None else None
        if self.deadline is not None:
            self.ex.watch = True
        #: The deadline passed at a checkpoint: the run stopped there for it.
        self.expired = False
        #: (sleep, asleep, start) of the pump, once the drive started: a cleanup that begins
        #: when the body ended is driven with them (see `_begin_cleanup`).
        self.going: tuple[Any, ...] | None = None
        #: Its deadline ended the session's body in this drive: the children it started that
        #: have not ended are cancelled after its last write.
        self.cascade = False
        #: The end key its last write queued the child's end on (a child that ended), for
        #: whoever drove it to wake the parent (`Core.wake_parent`).
        self.posted: str | None = None

    # -- running ---------------------------------------------------------------------------
    def start(self) -> AwaitableOrValue[Outcome]:
        self.core.running.started(self.ex.session_id, self.ex)
        # Its lease is kept while a step runs longer than a third of it (lease_keeper.py).
        self.core.keeper.add(self)
        try:
            if self.deadline is not None and self.core.clock.now() >= self.deadline:
                # Its deadline passed before anything ran (given in the past, or passed while
                # no process held the session): it fails at once.
                return self._finish((FAILED, deadline_error(self.ex.state, ())))
            gen = self.flow._run(self.ex)
            backoff, asleep, start = self._pump_with()
            if self.logs is not None:  # the drive runs with its capture watching (logs.py)
                return self.logs.around(
                    drive, gen, self._finish, backoff, asleep, self.asynchronous, start
                )
            return drive(gen, self._finish, backoff, asleep, self.asynchronous, start)
        except BaseException:
            self._ended()
            raise

    def _pump_with(self) -> tuple[Any, ...]:
        """What the pump needs besides the generator: (sleep, asleep, start)."""
        if self.going is None:
            sleep, asleep = sleepers(self.core.clock)
            # Where the sync steps of concurrent lanes run (a Batch of this drive's own, on an
            # executor of other processes: see executors.py).
            start = self.core.executors.starter()

            def backoff(seconds: float) -> None:
                # A short back-off in a sync run, on the Runtime's clock; the lease is kept.
                sleep(seconds)
                if time.monotonic() >= self.renew_at:
                    self._renew()

            self.going = (backoff, asleep, start)
        return self.going

    def _ended(self) -> None:
        # An abort that arrived too late to stop this drive must not stop the next one.
        self.core.running.ended(self.ex.session_id, self.ex)
        self.core.keeper.discard(self)
        if self.logs is not None:
            self.logs.close()
        # The Execution calls back into this Drive at checkpoints, and this Drive holds it: a
        # reference cycle, which would keep the run's whole event log alive until the cyclic
        # garbage collector found it (and make that collector's full passes ever longer).
        # Cut it, so the log is freed as soon as the outcome is built.
        self.ex.stop = _stopped
        self.ex.watch = True
        self.ex.mailbox = None
        self.going = None  # its back-off calls back into this Drive: the same cycle
        self.ex.children = None

    def fail_now(self, error: ErrorInfo) -> Outcome:
        """End the session as failed with `error` at `error.path` without running anything:
        a Gate or Wait whose timeout passed with `on_timeout` set to fail."""
        self.core.running.started(self.ex.session_id, self.ex)
        record_failure(self.ex, error)
        return self._finish((FAILED, error))

    def _on_checkpoint(self, path: tuple[Any, ...]) -> bool:
        """Asked by the engine before every iteration and child (`Execution.stop`): stop if an
        abort was requested (in this process, or stored by any) or the lease is lost. Writes
        the unwritten events after every step with durability="step", and once FLUSH_EVENTS
        are unwritten otherwise; ticks once a TICK.

        Not on the way back into a container a resumed run stood in (one it has still to
        re-enter, `Execution.restoring`): a stop there would record a pause outside the frames
        the state holds. The first checkpoint past them stops it."""
        if self.ex.restoring and _on_the_way(path, self.ex.restoring):
            return False
        if self.deadline is not None and self.core.clock.now() >= self.deadline:
            self.expired = True
            return True
        if self.aborts and self.ex.session_id in self.aborts:
            return True
        if self.lost:
            return True
        log = self.ex.rows
        # Only when something completed since the last write: an iteration or container that
        # only started waits for its first step, so an item costs one commit, not two.
        if len(log) >= self.ex.flush_at and log[-1][1] not in _OPENINGS:
            if self.claimed:
                # A Wait took a message: the events that record it go with the write that
                # consumes it, never before (a recovery would see the Wait done and the
                # message queued again).
                self._write_progress()
            else:
                self._flush_steps()
        if time.monotonic() >= self.ex.due:
            return self._tick()
        return False

    def _tick(self) -> bool:
        """Renew the lease when due, read the stop request, write the progress. True: stop."""
        core = self.core
        sid = self.ex.session_id
        mono = time.monotonic()
        # A short lease (tests use one) is renewed in time: ticks come at least that often.
        self.ex.due = mono + min(TICK, core.lease / 3)
        self.ex.at = None  # the next event reads the clock again
        progress = self.ex.state.last_seq != self.written_seq and mono >= self.progress_at
        # The lease is renewed (which also checks that it is still ours) before any progress
        # is written with it.
        if (progress or mono >= self.renew_at) and not self._renew():
            return True
        self.stop = core.store.stop_requested(sid)
        if self.stop is not None and not (self.stop == "cancel" and self.ex.state.ending):
            # (A stored cancel while the cleanup runs is the cancel it runs after, stored until
            # its last write, or one more: the cleanup goes on either way. A cancel asked in
            # this process, or while the cleanup waits, stops it: see `_finish_cleanup`.)
            return True
        if progress:
            self.progress_at = mono + TICK
            self._write_progress()
        return False

    def _renew(self) -> bool:
        core = self.core
        now = core.clock.now()
        until = now + timedelta(seconds=core.lease)
        self.renew_at = time.monotonic() + core.lease / 3
        self.ex.at = None  # the next event reads the clock again
        if core.store.claim(self.ex.session_id, core.owner, until, now):
            self.until = until
            return True
        self.lost = True
        self.ex.watch = True
        return False

    def keep_lease(self) -> None:
        """Renew the lease from the lease keeper's thread, while a step runs (no checkpoint
        comes): as `_renew`, without touching the Execution's clock cache, which belongs to
        the drive's thread. A lease found taken stops the drive at its next checkpoint."""
        core = self.core
        now = core.clock.now()
        until = now + timedelta(seconds=core.lease)
        self.renew_at = time.monotonic() + core.lease / 3
        if core.store.claim(self.ex.session_id, core.owner, until, now):
            self.until = until
        else:
            self.lost = True
            self.ex.watch = True

    def _mailbox(self, key: str) -> Any:
        """What a keyed Wait finds when reached (`Execution.mailbox`): the oldest message
        queued on `key`, claimed for this session (no other takes it), or NO_MAIL. The write
        that records the Wait's output consumes it (`_mail_taken`); a run that dies first finds
        its claim again when recovered."""
        skip = [mid for _, mid in self.claimed]
        found = self.core.store.claim_mail(key, self.ex.session_id, skip)
        self.ex.at = None  # the store took its time: the next event reads the clock
        if found is None:
            return NO_MAIL
        self.claimed.append((key, found[0]))
        return loads(found[1])

    def _children(
        self,
        path: tuple[Any, ...],
        session_id: str | None,
        flow: Flow,
        input: Any,
        lookup: bool = False,
    ) -> tuple[str, Any, bool]:
        """What a Child reached asks (`Execution.children`): its session stored, queued for
        any worker (see sessions/children.py); with `lookup`, only found."""
        try:
            return start_child(self.core, self.record, path, session_id, flow, input, lookup=lookup)
        finally:
            self.ex.at = None  # the store took its time: the next event reads the clock

    def _mail_taken(self) -> list[int] | None:
        """The ids of the messages whose Waits completed since the last write, for that write
        to consume; the write releases the drive's other claims (a Wait that refused its
        message), so each write starts the drive's claims afresh."""
        if not self.claimed:
            return None  # nothing claimed: the write leaves claims alone
        left = list(self.claimed)
        done = []
        for key in self.ex.mail_taken:
            for i, (claimed_key, mid) in enumerate(left):
                if claimed_key == key:
                    done.append(mid)
                    del left[i]
                    break
        self.claimed, self.ex.mail_taken = [], []
        return done

    def _write_progress(self) -> None:
        """The state so far (status "running"), the events and values since the last write:
        what other processes see of a running session, and where recovery starts from."""
        state = self.ex.state
        rec = self.record
        record = next_record(self, self._encode(), None, None, self.core.owner, self.until)
        values = self.ledger.take()
        ex = self.ex  # its rows, marked when they may hold items (Execution.items)
        events = EventLog(ex.session_id, ex.rows, ex.items)
        ex.rows, ex.items = [], False
        done = self._mail_taken()
        record.version = self.core.store.save(
            record, rec.version, events=events, values=values, mail_done=done, **self._logs()
        )
        self.record = record
        self.written_seq = state.last_seq

    def _flush_steps(self) -> None:
        store = self.core.store
        sid = self.ex.session_id
        # Values before events: a crash between the two leaves values that the re-run of the
        # step overwrites, never events that point at missing values.
        values = self.ledger.take()
        if values:
            store.put_values(sid, values)
        ex = self.ex  # its rows, marked when they may hold items (Execution.items)
        store.append_events(sid, EventLog(sid, ex.rows, ex.items))
        ex.rows, ex.items = [], False
        self.ex.at = None  # the write took its time: the next event reads the clock

    # -- ending ----------------------------------------------------------------------------
    def _finish(self, result: Result) -> Outcome:
        ex = self.ex
        sid = ex.session_id
        kind, value = result
        token: str | None = None
        waits: list[WaitRecord] = []
        # Before the last write, which ends the lease (or keeps it, lost): no renewal after it.
        self.core.keeper.discard(self)
        if self.lost:  # another worker owns the session now: write nothing
            self._ended()
            return Outcome(ERROR, sid, error=LEASE_LOST)
        if kind == STOPPED and self.expired:  # its deadline passed: it fails there
            kind, value = FAILED, deadline_error(ex.state, value.path)
            result = (kind, value)
        if kind == FAILED and value.type == DEADLINE_EXCEEDED and ex.state.ending is None:
            # Its children that have not ended are cancelled, as by a cancel of it, once its
            # last write is done (a waiting session's: rounds/timers.py `_expire`).
            self.cascade = True
        if self.flow.cleanup is not None and ex.state.status == "running":
            try:
                if ex.state.ending is None:
                    ending = self._ending(kind, value)
                    if ending is not None:
                        return self._begin_cleanup(ending, kind, value)
                else:
                    result = self._finish_cleanup(kind, value)
                    kind, value = result
            except BaseException:
                self._ended()
                raise
        try:
            if kind == DONE:
                ex.emit(ev.RUN_COMPLETED, (), {"output": value})
                self.ledger.discard()
            elif kind == PAUSED and self._cancel_asked():
                # A cancel accepted while the run was going, whose last checkpoint came before
                # it: the run ends cancelled instead of pausing (its waits are dropped).
                ex.emit(ev.RUN_CANCELLED, (), self._stop_actor(sid))
            elif kind == PAUSED:
                signals = value.pauses if type(value) is PauseMany else (value,)
                waits, first = record_pauses(self, signals)
                # A failed session (a payload refused) keeps a token like any failed one.
                token = waits[0].token if waits else first.token if first else self._new_key()
            elif kind == STOPPED:
                # Asked in this process (a flag), or by any process (stored; read at a tick).
                resumable = self.aborts.get(sid, self.stop != "cancel")
                by = self._stop_actor(sid)
                self.honoured = self.stop  # its write clears the stored request it honours
                if resumable:
                    pause = PauseState("system", "aborted", value.path, awaits_value=False)
                    ex.emit(ev.RUN_PAUSED, value.path, {**pause_to_data(pause), **by})
                    token = self.core.tokens.new_key()
                else:
                    ex.emit(ev.RUN_CANCELLED, value.path, by)
            elif kind == FAILED:
                self._fail(value)
                # A failed session can be retried, skipped or cancelled: it keeps a token.
                token = self.core.tokens.new_key()
            # ENDED: its ending event is recorded already (a cancel after its cleanup).
            token = self._write(token, waits)
        finally:
            self._ended()
        if self.cascade:
            self.cascade = False
            self._cancel_children(sid)
        tokens = self.core.tokens
        public = None if token is None else tokens.token(token)  # token: the store key
        if kind != PAUSED or ex.state.status != "paused":
            return outcome_of(ex.state, public, self.meta, read=ex.value)
        by_path = {}
        for w in waits:  # (a loop: a comprehension is a function made and called per pause)
            by_path[w.path] = tokens.token(w.token)
        shown = self.shown if self.shown is not None else all_pauses(ex.state)
        if parked(ex.state) > self.parked_now:
            # Lanes of earlier drives wait parked in the store: the outcome lists them when
            # its `pauses` are first looked at, and reads nothing for them before.
            first = shown[0] if shown else self.first
            assert first is not None  # record_pauses found the one it paused again on
            return outcome_of(
                ex.state,
                public,
                self.meta,
                by_path,
                read=ex.value,
                waits=[first],
                stored=lambda: stored_pauses(
                    self.core.store,
                    self.core.tokens,
                    ex.state,
                    ex.value,
                    self.flow.order,
                    first.path,
                ),
            )
        if len(waits) < len(shown):  # some waited already: their tokens too
            for w in self.core.store.waits(sid):
                if w.path not in by_path:
                    by_path[w.path] = tokens.token(w.token)
        return outcome_of(ex.state, public, self.meta, by_path, read=ex.value, waits=shown)

    # -- the flow's cleanup ------------------------------------------------------------------
    def _ending(self, kind: str, value: Any) -> str | None:
        """How the body ended, for its cleanup, when the result `(kind, value)` ends it; None
        when it does not (a pause, an abort: the body goes on later)."""
        if kind == DONE:
            return "completed"
        if kind == FAILED:
            return DEADLINE_EXCEEDED if value.type == DEADLINE_EXCEEDED else "failed"
        if kind == PAUSED and self._cancel_asked():
            return "cancelled"
        if kind == STOPPED and not self.aborts.get(self.ex.session_id, self.stop != "cancel"):
            return "cancelled"
        return None

    def _begin_cleanup(self, ending: str, kind: str, value: Any) -> AwaitableOrValue[Outcome]:
        """Record that the body ended (`cleanup.started`, with the data its ending event will
        carry) and drive the cleanup body on in this drive; its end comes back to `_finish`."""
        ex = self.ex
        sid = ex.session_id
        path: tuple[Any, ...] = ()
        if kind == DONE:
            end: dict[str, Any] = {"output": value}
        elif kind == FAILED:
            end = {"error": error_to_data(value)}
            path = value.path
        else:  # cancelled: who asked, recorded in its `run.cancelled`
            end = self._stop_actor(sid)
            self.honoured = self.stop  # its last write clears the stored request it honours
            self.stop = None
            self.core.running.forget_abort(sid, ex)  # the cleanup's checkpoints go on
            path = getattr(value, "path", ())
        end["path"] = path
        # Waits of its body that the store still holds (branches parked by earlier drives, or
        # waiting while another was resumed) end here: nothing of the body runs again, and a
        # cleanup that pauses must not leave them live. (This drive holds the session: no
        # other resume uses them meanwhile.)
        live = [w.token for w in self.core.store.waits(sid)]
        if live:
            self.core.store.consume_tokens(live)
        ex.emit(ev.CLEANUP_STARTED, (), {"ending": ending, "end": end})
        # The body's generator is over: what it left in the Execution goes with it.
        ex.restoring = {}
        ex.lanes = 0
        ex.pooled = False
        self.deadline = None
        self.expired = False
        ex.watch = self.lost
        backoff, asleep, start = self._pump_with()
        return drive(self.flow._run(ex), self._finish, backoff, asleep, self.asynchronous, start)

    def _finish_cleanup(self, kind: str, value: Any) -> Result:
        """The cleanup body's result `(kind, value)`: what the drive then does. A pause or an
        abort stops the cleanup as it would the body (it goes on when resumed); a completed
        or failed cleanup is recorded (`cleanup.ended`) and the run ends as its body did; a
        cancelled one ends the session cancelled, its `cleanup_error` of type "cancelled"."""
        ex = self.ex
        state = ex.state
        if kind == PAUSED and not self._cancel_asked():
            return (kind, value)
        if kind == STOPPED and self.aborts.get(ex.session_id, self.stop != "cancel"):
            return (kind, value)
        if kind != DONE and kind != FAILED:
            # Cancelled while it ran (not by the cancel it runs after: see `_tick`): the
            # cleanup stops, and the session ends cancelled.
            sid = ex.session_id
            ex.emit(ev.CLEANUP_ENDED, (), {"error": error_to_data(CLEANUP_CANCELLED)})
            self.honoured = self.stop
            ex.emit(ev.RUN_CANCELLED, (), self._stop_actor(sid))
            return (ENDED, None)
        if not state.cleaned:
            data: dict[str, Any] = {}
            if kind == FAILED:
                data["error"] = error_to_data(value)
            ex.emit(ev.CLEANUP_ENDED, (), data)
        end = dict(state.ending_data)
        path = tuple(end.pop("path", ()))
        ending = state.ending
        if ending == "completed":
            return (DONE, end.get("output"))
        if ending == "cancelled":
            self.honoured = self.honoured or self.stop
            ex.emit(ev.RUN_CANCELLED, path, end)
            return (ENDED, None)
        error = error_from_data(end["error"])
        return (FAILED, error)

    def _cancel_children(self, sid: str) -> None:
        """Cancel the children of a session whose deadline passed (its own end is written).
        A child that cannot be cancelled here is logged: its parent's end stands."""
        try:
            self.core.cancel_children(self.core, sid)
        except Exception:
            log().exception("session %s: its children could not all be cancelled", sid)

    def _cancel_asked(self) -> bool:
        """Whether a cancel was asked of this drive: in this process, or read from the store."""
        return self.aborts.get(self.ex.session_id) is False or self.stop == "cancel"

    def _stop_actor(self, sid: str) -> dict[str, Any]:
        actor = self.core.running.actors.get(sid)
        return {} if actor is None else {"actor": actor}

    def _fail(self, error: ErrorInfo) -> None:
        self.ex.emit(ev.RUN_FAILED, error.path, {"error": error_to_data(error)})

    def _write(self, token: str | None, waits: Sequence[WaitRecord] = ()) -> str | None:
        """One write: the state, the events since the last write, the unwritten values.

        A session that stops to wait (paused, aborted) with a snapshot over
        `max_snapshot_bytes` fails there instead, with SnapshotTooLarge; what it holds is
        written all the same, so nothing is lost. A completed session's snapshot is final: the
        engine failed any node that would have made the state larger than `max_snapshot_bytes`,
        so it holds at most that plus the run's output (one value), which tarry reads back
        (see Core). Returns the token key the session keeps."""
        state = self.ex.state
        wake = None
        if state.status == "paused":
            # The earliest timer, back-off or deadline of the waits its snapshot holds (the
            # store adds those of the lanes parked by earlier drives), and the session's own
            # deadline: the timers fail it then (rounds/timers.py).
            self.shown = all_pauses(state)
            times = []
            for p in self.shown:
                t = p.wake_at or p.expires_at
                if t is not None:
                    times.append(t)
            if state.deadline is not None and state.ending is None:
                times.append(state.deadline)
            wake = min(times) if times else None
            waits = self._park([*waits, *self._orphans(waits)])
            n = 0
            for w in waits:
                if w.lane:
                    n += 1
            self.parked_now = n
        blob = self._encode()
        if len(blob) > self.core.max_snapshot_bytes and state.status == "paused":
            self._fail(too_large(state, len(blob), self.core.max_snapshot_bytes))
            restore(state, [decode_lane(w.lane) for w in waits if w.lane])
            blob = None
        if state.status != "paused":
            waits = []
            if parked(state):
                # Its waits end with it (failed, cancelled): its lanes come back into its
                # snapshot (a resume of a failed session goes on with them, on new tokens).
                rows = self.core.store.waits(state.session_id)
                restore(state, [decode_lane(w.lane) for w in rows if w.lane])
                blob = None
            if blob is None:
                blob = self._encode()
        rec = self.record
        record = next_record(self, blob, token, wake, None, None)
        record.stop = self.honoured
        values = [] if state.status == "completed" else self.ledger.take()
        ex = self.ex  # its rows, marked when they may hold items (Execution.items)
        events = EventLog(ex.session_id, ex.rows, ex.items)
        ex.rows, ex.items = [], False
        done = self._mail_taken()
        # A child that ends: its end, for its parent (a store is asked for `post` only then).
        post = end_post(record, state)
        record.version = self.core.store.save(
            record,
            rec.version,
            events=events,
            values=values,
            waits=waits,
            mail_done=done,
            **self._logs(),
            **({} if post is None else {"post": post}),
        )
        if post is not None:
            self.posted = post[0]
        self.record = record
        if token is not None:  # to be resumed: keep the state to skip decoding it then,
            self.core.states.keep(blob, state)
            self.core.records.keep(token, record)  # and the record to skip reading it
        # The keyed waits it registered: a delivery posted just before may be in the mailbox.
        keyed = self.keyed = {}
        for w in waits:
            if w.key is not None:
                keyed[w.key] = w.token
        return token

    def _park(self, waits: list[WaitRecord]) -> list[WaitRecord]:
        """`waits`, each of a lane's own wait with that lane taken out of the state (parked)
        and kept in its row instead: the snapshot holds what is in flight, not what waits."""
        state = self.ex.state
        if not concurrent(state):
            return waits
        made = []
        for wait in waits:
            lane = park(state, wait.path)
            if lane is not None:
                wait = attrs.evolve(wait, lane=encode_lane(lane))
            made.append(wait)
        return made

    def _orphans(self, waits: Sequence[WaitRecord]) -> list[WaitRecord]:
        """Rows for the waiting lanes of a failed session that was resumed (their tokens
        ended with the failure), each on a new token; none for any other drive."""
        if not self.revived:
            return []
        state = self.ex.state
        have = {w.path for w in waits}
        sid = state.session_id
        return [
            wait_record(self._new_key(), sid, p)
            for p in all_pauses(state)
            if p is not state.pause and p.path not in have
        ]

    def _new_key(self) -> str:
        return self.core.tokens.new_key()

    def _logs(self) -> dict[str, Any]:
        """The `logs=` of a write: the records captured since the last one, if any."""
        batch = None if self.logs is None else self.logs.take()
        return _NO_LOGS if batch is None else {"logs": batch}

    def _encode(self) -> bytes:
        return encode_state(
            self.ex.state, fingerprint=self.flow.fingerprint, flow_version=self.flow.version
        )


# --- what a drive writes ----------------------------------------------------------------------


def next_record(
    drive: Drive,
    blob: bytes,
    token: str | None,
    wake: datetime | None,
    owner: str | None,
    until: datetime | None,
) -> SessionRecord:
    """The session's record as its next write leaves it: the state `blob`, the `token`
    it keeps, when it wakes, and its lease (an owner while it runs, none once it stops)."""
    rec = drive.record
    return record_of(
        rec.session_id,
        rec.flow,
        drive.ex.state.status,
        blob,
        rec.version,
        drive.flow.fingerprint,
        drive.flow.version,
        token,
        wake,
        owner,
        until,
        rec.created_at,
        drive.core.clock.now(),
        rec.meta,
        rec.durability,
        None,  # a stop request is the store's: it never takes one from a record it is given
    )


def deadline_error(state: SessionState, path: tuple[Any, ...]) -> ErrorInfo:
    """The failure of a session whose deadline passed, stopped at `path`."""
    at = "" if state.deadline is None else f" ({state.deadline.isoformat()})"
    return ErrorInfo(
        type=DEADLINE_EXCEEDED,
        message=f"session {state.session_id!r} did not end by its deadline{at}",
        path=path,
        retryable=False,
    )


#: The cleanup error of a cleanup that a cancel stopped.
CLEANUP_CANCELLED = ErrorInfo(
    type="cancelled", message="the cleanup was cancelled before it ended", retryable=False
)


def too_large(state: SessionState, size: int, limit: int) -> ErrorInfo:
    """The failure of a session whose snapshot (`size` bytes) is over `limit`."""
    error = SnapshotTooLarge(state.session_id, size, limit)
    path = state.pause.path if state.pause is not None else ()
    return ErrorInfo(type="SnapshotTooLarge", message=str(error), path=path, retryable=False)


# --- what a drive records when its run pauses -----------------------------------------------


def record_pauses(
    drive: Drive, signals: tuple[Pause, ...]
) -> tuple[list[WaitRecord], WaitRecord | None]:
    """Record each wait that began (`run.paused`), each with a token of its own; with none
    (the waits left began in an earlier drive), the session pauses again on its first, whose
    stored wait comes second. A payload that cannot be stored fails the run there: no wait
    is then recorded."""
    ex = drive.ex
    core = drive.core
    waits = []
    for signal in signals:
        try:
            if signal.payload is not None:  # (None passes the check: no place to name)
                core.check(signal.payload, "/".join(map(str, signal.path)) + ".payload")
        except NotSerializable as exc:
            drive._fail(fail(ex, signal.path, exc).error)
            return [], None
        ex.emit(ev.RUN_PAUSED, signal.path, pause_to_data(signal))
        waits.append(wait_record(core.tokens.new_key(), ex.session_id, signal))
    if signals:
        return waits, None
    # The first of its stored waits (one row, whatever the number parked); a failed session
    # resumed has none: the first wait its state holds then.
    stored = core.store.waits(ex.session_id, limit=1)
    first = stored[0] if stored else None
    pause = None if first is None else pause_of(first, ex.state)
    if pause is None:
        pause = all_pauses(ex.state)[0]
    ex.emit(ev.RUN_PAUSED, pause.path, pause_to_data(pause))
    drive.first = pause
    return waits, first
