"""Keyed delivery as a state machine (API.md, "Delivery you can trust").

Hypothesis interleaves, through the public API only: new sessions of three flow shapes, `deliver`,
`deliver_many`, `broadcast`, token resumes (`resume`, `resume_many`), `cancel`, `abort`, `prune`,
worker rounds on a ManualClock, and crashes (a step raising a BaseException of our own out of the
drive, the Runtime dropped, a fresh one built on the same store, `recover()` once the lease has
passed). It can also act from inside a running step — deliver, broadcast, cancel or abort while a
drive is going, as another process would — and then checks, after every rule:

1. Exactly once: every message given to `deliver`/`deliver_many` is either taken by exactly one
   keyed Wait (its value is the `node.completed` output of one Wait, in one session) or still
   queued (`rt.mailbox()` counts it), never both, never twice, never lost. A broadcast value is
   taken by every branch that waited on its key at that moment, and never queued.
2. No stranded session: a session that has not ended is paused with a token per waiting branch,
   at the waits its flow shape says it must be at, and no branch waits on a key that holds a
   queued message (except for messages given while a drive was going, until the next worker
   round); `running` is allowed only for a session whose process crashed and that awaits
   recovery; no timer is overdue after a worker round.
3. `rt.session(id).derive_state() == rt.session(id).state`.
4. FIFO per key: a key's messages are taken in delivery order, each by the branch that had
   waited longest on the key when it arrived.

Every store: memory, an SQLite file, PostgreSQL (see tests/pgserver.py: skipped without a server,
failed under CI=true). The default size keeps the module well under a minute on two cores;
TARRY_PROOF_SCALE=N runs N times as many examples, each up to N times longer (at most 4x).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
import tarry
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)
from support import run_machine
from tarry import Flow, ForEach, Loop, ManualClock, Runtime, Wait, step
from tarry.snapshots import MemoryStore, SQLiteStore

SCALE = max(1.0, float(os.environ.get("TARRY_PROOF_SCALE") or 1))
#: Examples per store at scale 1 (PostgreSQL rules cost round trips: fewer of them).
EXAMPLES = {"memory": 40, "sqlite": 25, "postgres": 20}
STEPS = 30

LEASE = 30.0
#: Seconds a call into the Runtime made from inside a running step may take before the test
#: calls it hung ("delivering never waits for a busy session"). Only a guard against a
#: deadlock hanging the suite: nothing here depends on speed.
GUARD = 60.0
CONCURRENCY = 3
FAN_ITEMS = 4
#: Keys of the sequential and loop sessions: shared, so several sessions queue on one key.
KEYS = ("k0", "k1")
#: Keys of the fan sessions' lanes (item i waits on "f/i"): every fan session uses the same
#: ones, so lanes of two sessions queue on one key too.
LANE_KEYS = tuple(f"f/{i}" for i in range(FAN_ITEMS))
ALL_KEYS = KEYS + LANE_KEYS
#: The keys a rule gives messages to from inside a running step: lane keys first, and up to
#: three, so that several lanes of one fan often get late mail at once.
HOOK_KEYS = st.lists(st.sampled_from(LANE_KEYS + KEYS), min_size=1, max_size=3, unique=True)
#: Names of the keyed Waits of the three shapes.
WAITS = frozenset({"first", "second", "w", "lane"})
#: What a rule may do from inside a running step (see `DeliveryMachine._arm`).
ACTIONS = ("deliver", "crash", "cancel", "abort", "broadcast")
ENDED = frozenset({"completed", "failed", "cancelled"})
#: Stands for "who takes this message is not decided by the rule that gave it" (it was given
#: while a drive was going, or while a crashed session awaited recovery).
LOOSE = None


class Crash(BaseException):
    """Stands for the process dying mid-drive: nothing in tarry catches it."""


# --- the flows ---------------------------------------------------------------------------------
#
# Every step asks `_hook` whether the machine wants something done right now, inside this very
# step of this very branch: that is how a rule acts "while a drive is going", deterministically.


@attrs.define
class Hook:
    """One action to run inside the next step of branch `branch` (a path prefix) of `sid`."""

    sid: str
    branch: tuple[Any, ...]
    fire: Callable[[Any], None]


_hook: Hook | None = None
_hook_lock = threading.Lock()


def _set_hook(hook: Hook | None) -> None:
    global _hook
    with _hook_lock:
        _hook = hook


def _run_hook(ctx: Any) -> None:
    global _hook
    with _hook_lock:
        hook = _hook
        if hook is None or hook.sid != ctx.session_id or tuple(ctx.path[:-1]) != hook.branch:
            return
        _hook = None
    hook.fire(ctx)


@step(name="begin")
def begin(ctx: Any) -> None:
    _run_hook(ctx)


@step(name="between")
def between(ctx: Any) -> Any:
    _run_hook(ctx)
    return ctx.prev


@step(name="end")
def end(ctx: Any) -> list[Any]:
    _run_hook(ctx)
    return [ctx.outputs["first"], ctx.outputs["second"]]


@step(name="count")
def count(ctx: Any) -> int:
    _run_hook(ctx)
    return ctx.iteration + 1


@step(name="prep")
def prep(ctx: Any) -> None:
    _run_hook(ctx)


@step(name="post")
def post(ctx: Any) -> Any:
    _run_hook(ctx)
    return ctx.prev


def _input_key(ctx: Any) -> str:
    return ctx.input["key"]


#: A sequential flow with two keyed Waits on the same key.
PAIR = Flow(
    "pair",
    [begin, Wait("first", key=_input_key), between, Wait("second", key=_input_key), end],
)
#: A Loop around one keyed Wait, `n` iterations; its Wait may time out (and fail the session).
LOOP = Flow(
    "loop",
    [
        Loop(
            "loop",
            [Wait("w", key=_input_key, timeout=lambda ctx: ctx.input["timeout"]), count],
            until=lambda ctx: ctx.prev >= ctx.input["n"],
            max_iterations=FAN_ITEMS,
        )
    ],
)
#: A concurrent ForEach whose item i waits on its own key "f/i".
FAN = Flow(
    "fan",
    [
        ForEach(
            "fan",
            lambda ctx: list(range(ctx.input["n"])),
            [prep, Wait("lane", key=lambda ctx: f"f/{ctx.item}"), post],
            concurrency=CONCURRENCY,
        )
    ],
)
FLOWS = {"pair": PAIR, "loop": LOOP, "fan": FAN}


def key_of(shape: str, input: Any, path: tuple[Any, ...]) -> str:
    """The key the keyed Wait at `path` of a `shape` session waits on."""
    return f"f/{path[1]}" if shape == "fan" else input["key"]


def is_keyed(path: tuple[Any, ...]) -> bool:
    return bool(path) and path[-1] in WAITS


# --- what the machine knows of each session ------------------------------------------------------


@attrs.define
class Seen:
    """One session as the machine last saw it, and what it did to it."""

    shape: str
    input: Any
    status: str = "running"
    #: The events read so far (the log is only ever appended to).
    seen_seq: int = 0
    #: Wait path -> the values its `node.completed` events carried (one, unless taken twice).
    takes: dict[tuple[Any, ...], list[Any]] = attrs.Factory(dict)
    pauses: tuple[Any, ...] = ()
    outcome: Any = None
    #: A stop asked for while it ran or awaited recovery ("cancel" or "abort"), until honoured.
    stop: str | None = None
    pruned: bool = False


class DeliveryMachine(RuleBasedStateMachine):
    """Keyed delivery on one store; see the module docstring for the promises it checks."""

    sessions = Bundle("sessions")

    def __init__(self, kind: str, folder: Path, lacking: set[str]) -> None:
        super().__init__()
        _set_hook(None)
        self.kind = kind
        self.folder = folder
        #: Parts of the contract this Runtime lacks (see `_lacks`), shared by every example.
        self.lacking = lacking
        self.clock = ManualClock()
        self._extra_stores: list[Any] = []
        self.store = self._open_store()
        #: (session id, path) of every keyed Wait seen starting, live; and its condition.
        self.started: set[tuple[str, tuple[Any, ...]]] = set()
        self.live = threading.Condition()
        self.rt = self._runtime()

        self.seen: dict[str, Seen] = {}
        self.serial = 0
        self.step_no = 0
        #: Messages given by deliver/deliver_many, per key in delivery order; and their keys.
        self.order: dict[str, list[str]] = {key: [] for key in ALL_KEYS}
        self.msg_key: dict[str, str] = {}
        #: Message -> the branches (session id, wait path) tied for "waited longest" on its key
        #: when it was given (empty: nothing waited, it must be queued), or LOOSE.
        self.takers: dict[str, frozenset[tuple[str, tuple[Any, ...]]] | None] = {}
        #: Messages given by the current rule, checked against `takers` once it is observed.
        self.just_given: list[str] = []
        #: Broadcast value -> the branches that waited on its key then (or LOOSE).
        self.broadcasts: dict[str, frozenset[tuple[str, tuple[Any, ...]]] | None] = {}
        #: Value given with a token -> (session id, wait path) it was given to.
        self.direct: dict[str, tuple[str, tuple[Any, ...]]] = {}
        #: Value -> every (session id, wait path) seen taking it, pruned sessions included.
        self.taken: dict[Any, list[tuple[str, tuple[Any, ...]]]] = {}
        #: value -> the session a `run.resumed` event of a keyed Wait carried it into: a
        #: message consumed by a branch whose session a cancel then ended before the Wait
        #: completed is consumed all the same (see `_gone`).
        self.resumed_into: dict[Any, str] = {}
        #: (session id, wait path) -> the rule number at which it was first seen waiting (or
        #: taking a message without waiting): the order in which branches started to wait.
        self.rank: dict[tuple[str, tuple[Any, ...]], int] = {}
        #: Keys given a message while a drive was going or a crash awaited recovery: such a
        #: message may sit queued beside a waiting branch until the next worker round.
        self.pending: set[str] = set()
        self.crashed: set[str] = set()
        self.used_tokens: list[tuple[str, str]] = []
        self.swept = False
        #: (session id, path) of the step that ran the armed hook; a problem the hook met.
        self.fired: tuple[str, tuple[Any, ...]] | None = None
        self.hook_problem: str | None = None

    # -- stores and runtimes ----------------------------------------------------------------------

    def _open_store(self) -> Any:
        if self.kind == "memory":
            return MemoryStore()
        if self.kind == "sqlite":
            self.db = self.folder / f"{uuid.uuid4().hex}.db"
            return SQLiteStore(self.db)
        import pgserver

        return pgserver.scratch_store()

    def _store_after_crash(self) -> Any:
        """The store as a new process opens it. A MemoryStore is the database itself and
        survives; a durable store is opened again (the dead process's connections are gone)."""
        if self.kind == "memory":
            return self.store
        for made in self._extra_stores:
            made.close()
        self._extra_stores.clear()
        if self.kind == "sqlite":
            made = SQLiteStore(self.db)
        else:
            import pgserver
            from tarry.snapshots import PostgresStore

            made = PostgresStore(pgserver.server_dsn(), schema=self.store.schema)
        self._extra_stores.append(made)
        return made

    def _runtime(self, store: Any = None) -> Runtime:
        rt = Runtime(
            store=store if store is not None else self.store,
            clock=self.clock,
            flows=list(FLOWS.values()),
            lease=LEASE,
        )
        rt.subscribe(self._on_event)
        return rt

    def teardown(self) -> None:
        _set_hook(None)
        for made in self._extra_stores:
            made.close()
        close = getattr(self.store, "close", None)
        if close is not None:
            close()
        if self.kind == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.db}{suffix}").unlink(missing_ok=True)

    # -- helpers ----------------------------------------------------------------------------------

    def _lacks(self, what: str) -> None:
        """Note a part of API.md that this Runtime lacks. The rule that needed it goes on
        without it, so that the machine still finds whatever else is wrong, and the test
        fails once the machine is done (see `test_keyed_delivery_keeps_its_promises`)."""
        self.lacking.add(what)

    def _new(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def _waiters(self, key: str) -> list[tuple[int, str, tuple[Any, ...]]]:
        """(rank, session id, path) of every branch seen waiting on `key`, crashed sessions
        left out (they are running)."""
        found = []
        for sid, seen in self.seen.items():
            if seen.pruned or sid in self.crashed or seen.status != "paused":
                continue
            for pause in seen.pauses:
                keyed = pause.kind == "external" and is_keyed(pause.path)
                if keyed and key_of(seen.shape, seen.input, pause.path) == key:
                    found.append((self.rank[(sid, pause.path)], sid, pause.path))
        return sorted(found)

    def _head(self, key: str) -> frozenset[tuple[str, tuple[Any, ...]]] | None:
        """The branches tied for "waited longest" on `key` (empty if none waits), or LOOSE
        when that is not for this rule to say."""
        if self.crashed or key in self.pending:
            self.pending.add(key)
            return LOOSE
        waiters = self._waiters(key)
        if not waiters:
            return frozenset()
        first = waiters[0][0]
        return frozenset((sid, path) for rank, sid, path in waiters if rank == first)

    def _head_during(self, key: str, busy: str) -> frozenset[tuple[str, tuple[Any, ...]]] | None:
        """`_head(key)` for a message given while `busy` runs: LOOSE when `busy` itself may
        take it (its branches wait on the key, or may come to) — it is then queued for `busy`'s
        own drive or the next worker round."""
        takers = self._head(key)
        if not takers or any(sid == busy for sid, _ in takers):
            self.pending.add(key)
            return LOOSE
        return takers

    def _message(self, key: str, takers: Any) -> str:
        message = self._new("m")
        self.order[key].append(message)
        self.msg_key[message] = key
        self.takers[message] = takers
        self.just_given.append(message)
        return message

    def _pause(self, sid: str, lane: int, *, keyed: bool = False) -> Any:
        """A waiting branch of `sid` (its `lane`-th, modulo), or None."""
        seen = self.seen[sid]
        if seen.pruned or sid in self.crashed or seen.status != "paused":
            return None
        pauses = [
            p for p in seen.pauses if not keyed or (p.kind == "external" and is_keyed(p.path))
        ]
        return pauses[lane % len(pauses)] if pauses else None

    def _value_for(self, sid: str, pause: Any) -> Any:
        """A fresh value to resume `pause` with by its token (None for a system pause)."""
        if pause.kind != "external" or not is_keyed(pause.path):
            return None  # an aborted branch's system pause takes no value
        value = self._new("t")
        self.direct[value] = (sid, pause.path)
        return value

    def _resume(self, sid: str, pause: Any, value: Any) -> Any:
        self.used_tokens.append((pause.token, sid))
        try:
            return self._drive(lambda: self.rt.resume(pause.token, value))
        except (tarry.TokenAlreadyUsed, tarry.UnknownToken) as exc:
            pytest.fail(
                f"the token of waiting branch {pause.path} of {sid}, as the session view lists "
                f"it, is not usable: {exc!r}"
            )

    def _arm(
        self,
        sid: str,
        branch: tuple[Any, ...],
        action: str,
        keys: tuple[str, ...] = (),
        settle: tuple[tuple[Any, ...], ...] = (),
    ) -> None:
        """Run `action` inside the next step of `branch` of `sid`: "crash" raises Crash there;
        the others call the Runtime from another thread while that step runs, as another
        process would (and fail the rule if that call raises or never returns): "deliver"
        gives one message to each of `keys` in turn, "broadcast" broadcasts to each.

        `settle`: Wait paths of the same session's other lanes, in flight in the same drive.
        The action starts once each of them has started (their `node.started`, seen live by
        `subscribe`), so that it meets them waiting, whatever the threads' speed."""
        self.fired = None
        self.hook_problem = None

        def call() -> None:
            if action == "cancel":
                self.rt.cancel(sid)
            elif action == "abort":
                self.rt.abort(sid)
            for key in keys if action == "deliver" else ():
                self.rt.deliver(key, self._message(key, self._head_during(key, sid)))
            for key in keys if action == "broadcast" else ():
                if not hasattr(self.rt, "broadcast"):
                    self._lacks("Runtime.broadcast(key, value)")
                    return
                value = self._new("b")
                self.broadcasts[value] = LOOSE
                self.rt.broadcast(key, value)

        def fire(ctx: Any) -> None:
            self.fired = (ctx.session_id, tuple(ctx.path))
            if action == "crash":
                raise Crash
            if action in ("cancel", "abort"):
                self.seen[sid].stop = action
            with self.live:
                self.live.wait_for(lambda: {(sid, p) for p in settle} <= self.started, GUARD)
            problems: list[BaseException] = []

            def guarded() -> None:
                try:
                    call()
                except BaseException as exc:  # reported by the rule, not by the step
                    problems.append(exc)

            helper = threading.Thread(target=guarded, daemon=True)
            helper.start()
            helper.join(GUARD)
            if helper.is_alive():
                self.hook_problem = (
                    f"{action} from another thread, while a step of {sid} ran, did not return "
                    f"within {GUARD} s: it waits for the busy session"
                )
            elif problems:
                self.hook_problem = (
                    f"{action} while a step of {sid} ran raised {problems[0]!r}: a busy "
                    "session must not make it fail"
                )

        _set_hook(Hook(sid, branch, fire))

    def _on_event(self, event: Any) -> None:
        """Subscriber: notes each Wait that starts, live (see `_arm`'s `settle`)."""
        if event.type == "node.started" and is_keyed(event.path):
            with self.live:
                self.started.add((event.session_id, tuple(event.path)))
                self.live.notify_all()

    def _drive(self, op: Callable[[], Any]) -> Any:
        """`op()`; a Crash out of it is the process dying: the Runtime is dropped and a fresh
        one opened on the same store (the crashed session awaits `recover`)."""
        self.fired = None
        try:
            return op()
        except Crash:
            assert self.fired is not None, "a Crash came out of a drive where none was armed"
            self.crashed.add(self.fired[0])
            self.rt = self._runtime(self._store_after_crash())
            return None
        finally:
            _set_hook(None)
            if self.hook_problem is not None:
                problem, self.hook_problem = self.hook_problem, None
                pytest.fail(problem)

    def _start(
        self,
        shape: str,
        input: Any,
        durability: str,
        action: str | None = None,
        keys: tuple[str, ...] = (),
    ) -> str:
        sid = f"s{len(self.seen) + 1}"
        self.seen[sid] = Seen(shape, input)
        if action is not None and shape == "fan":
            # In lane 0's first step, once the other lanes in flight wait.
            others = tuple(("fan", i, "lane") for i in range(1, min(input["n"], CONCURRENCY)))
            self._arm(sid, ("fan", 0), action, keys, settle=others)
        elif action is not None:
            self._arm(sid, (), action, keys)
        out = self._drive(
            lambda: self.rt.run(FLOWS[shape], input, session_id=sid, durability=durability)
        )
        assert out is None or out.session_id == sid
        return sid

    # -- rules: new sessions ---------------------------------------------------------------------

    @rule(target=sessions, key=st.sampled_from(KEYS), durability=st.sampled_from(["pause", "step"]))
    def start_pair(self, key: str, durability: str) -> str:
        self.step_no += 1
        return self._start("pair", {"key": key}, durability)

    @rule(
        target=sessions,
        key=st.sampled_from(KEYS),
        n=st.integers(1, 3),
        timeout=st.sampled_from([None, 100]),
        durability=st.sampled_from(["pause", "step"]),
    )
    def start_loop(self, key: str, n: int, timeout: int | None, durability: str) -> str:
        self.step_no += 1
        input = {"key": key, "n": n, "timeout": timeout}
        return self._start("loop", input, durability)

    @rule(
        target=sessions, n=st.integers(1, FAN_ITEMS), durability=st.sampled_from(["pause", "step"])
    )
    def start_fan(self, n: int, durability: str) -> str:
        self.step_no += 1
        return self._start("fan", {"n": n}, durability)

    @rule(
        target=sessions,
        shape=st.sampled_from(["fan", "pair"]),
        action=st.sampled_from(ACTIONS),
        keys=HOOK_KEYS,
        n=st.integers(1, FAN_ITEMS),
        durability=st.sampled_from(["pause", "step"]),
    )
    def start_with(self, shape: str, action: str, keys: list[str], n: int, durability: str) -> str:
        """A new session that does `action` in its first step (a fan: in lane 0's, while the
        other lanes run theirs or already wait)."""
        self.step_no += 1
        input = {"key": "k0"} if shape == "pair" else {"n": n}
        return self._start(shape, input, durability, action, tuple(keys))

    @rule(
        target=sessions,
        n=st.integers(2, FAN_ITEMS),
        lanes=st.lists(st.integers(0, FAN_ITEMS - 1), min_size=1, max_size=FAN_ITEMS, unique=True),
        durability=st.sampled_from(["pause", "step"]),
    )
    def start_fan_with_late_mail(self, n: int, lanes: list[int], durability: str) -> str:
        """A new fan whose lane 0, in its first step, gives a message to each of `lanes`: the
        other lanes in flight already wait in the running drive (late mail), the ones not
        started yet will wait later (early mail)."""
        self.step_no += 1
        keys = tuple(f"f/{i}" for i in lanes)
        return self._start("fan", {"n": n}, durability, "deliver", keys)

    # -- rules: delivery --------------------------------------------------------------------------

    @rule(key=st.sampled_from(ALL_KEYS))
    def deliver(self, key: str) -> None:
        self.step_no += 1
        takers = self._head(key)
        message = self._message(key, takers)
        outs = self._drive(lambda: self.rt.deliver(key, message))
        if takers is not LOOSE:
            moved = sorted(o.session_id for o in outs)
            expected = sorted({sid for sid, _ in takers})
            assert len(moved) == (1 if takers else 0) and set(moved) <= set(expected), (
                f"deliver({key!r}) returned outcomes of {moved}; one message moves exactly one "
                f"of {expected or 'no session (it is queued)'}"
            )

    @rule(keys=st.lists(st.sampled_from(ALL_KEYS), min_size=1, max_size=3, unique=True))
    def deliver_many(self, keys: list[str]) -> None:
        self.step_no += 1
        given = {}
        for key in keys:
            takers = self._head(key)
            # A key nothing waits on may be taken within this very call, by a branch that one
            # of the other keys moved on: who takes it is not this rule's to say.
            given[key] = self._message(key, takers if takers else LOOSE)
        heads = {key: self.takers[m] for key, m in given.items()}
        report = self._drive(lambda: self.rt.deliver_many(given))
        if not all(hasattr(report, name) for name in ("applied", "queued", "outcomes")):
            self._lacks("deliver_many() -> Delivery(applied, queued, outcomes)")
            return
        applied, queued = dict(report.applied), list(report.queued)
        assert not set(applied) & set(queued) and set(applied) | set(queued) == set(keys), (
            f"deliver_many({given}) reported applied={applied} queued={queued}: every key is "
            "exactly one of them"
        )
        for key, takers in heads.items():
            if takers:
                assert applied.get(key) in {sid for sid, _ in takers}, (
                    f"deliver_many: {key!r} was waited on by {sorted(takers)}, but the report "
                    f"says applied={applied}, queued={queued}"
                )
        moved = [o.session_id for o in report.outcomes]
        # One outcome per session moved on: those its messages reached, and those a message
        # queued ahead of one of them reached (a key is a queue: the older message goes first).
        assert len(moved) == len(set(moved)) and set(applied.values()) <= set(moved), (
            f"deliver_many: outcomes of {moved}, applied to {applied}: one outcome per session "
            "touched"
        )

    @rule(key=st.sampled_from(ALL_KEYS))
    def broadcast(self, key: str) -> None:
        self.step_no += 1
        broadcast = getattr(self.rt, "broadcast", None)
        if broadcast is None:
            self._lacks("Runtime.broadcast(key, value)")
            return
        value = self._new("b")
        if self.crashed or key in self.pending:
            self.broadcasts[value] = LOOSE
        else:
            self.broadcasts[value] = frozenset((sid, path) for _, sid, path in self._waiters(key))
        outs = self._drive(lambda: broadcast(key, value))
        expected = self.broadcasts[value]
        if expected is not LOOSE:
            moved = sorted(o.session_id for o in outs)
            assert moved == sorted({sid for sid, _ in expected}), (
                f"broadcast({key!r}) returned outcomes of {moved}; it moves every session "
                f"waiting on the key: {sorted(expected)}"
            )

    # -- rules: tokens ------------------------------------------------------------------------------

    @rule(sid=sessions, lane=st.integers(0, CONCURRENCY))
    def resume(self, sid: str, lane: int) -> None:
        self.step_no += 1
        pause = self._pause(sid, lane)
        if pause is not None:
            self._resume(sid, pause, self._value_for(sid, pause))

    @rule(picks=st.lists(st.tuples(sessions, st.integers(0, CONCURRENCY)), min_size=1, max_size=3))
    def resume_many(self, picks: list[tuple[str, int]]) -> None:
        self.step_no += 1
        values: dict[str, Any] = {}
        order: list[str] = []
        for sid, lane in picks:
            pause = self._pause(sid, lane)
            if pause is None or pause.token in values:
                continue
            values[pause.token] = self._value_for(sid, pause)
            self.used_tokens.append((pause.token, sid))
            if sid not in order:
                order.append(sid)
        if not values:
            return
        outs = self._drive(lambda: self.rt.resume_many(values))
        if outs is not None:
            assert [o.session_id for o in outs] == order, (
                f"resume_many returned outcomes of {[o.session_id for o in outs]}: one per "
                f"session touched, in the order of their first token ({order})"
            )

    @precondition(lambda self: self.used_tokens)
    @rule(pick=st.integers(0, 50))
    def reuse_token(self, pick: int) -> None:
        self.step_no += 1
        token, sid = self.used_tokens[pick % len(self.used_tokens)]
        refused: tuple[type[Exception], ...] = (tarry.TokenAlreadyUsed,)
        if self.seen[sid].pruned:
            refused += (tarry.UnknownToken,)
        with pytest.raises(refused):
            self.rt.resume(token, "again")

    # -- rules: control ------------------------------------------------------------------------------

    @rule(sid=sessions)
    def cancel(self, sid: str) -> None:
        self.step_no += 1
        seen = self.seen[sid]
        if seen.pruned or seen.status in ("completed", "cancelled"):
            return
        out = self.rt.cancel(sid)
        seen.stop = "cancel"
        if sid not in self.crashed:
            assert out.failed and out.error.type == "cancelled", f"cancel({sid}) gave {out}"

    @rule(sid=sessions, resumable=st.booleans())
    def abort(self, sid: str, resumable: bool) -> None:
        self.step_no += 1
        seen = self.seen[sid]
        if seen.pruned or seen.status in ("completed", "cancelled"):
            return
        self.rt.abort(sid, resumable=resumable)
        if not resumable:
            seen.stop = "cancel"
        elif sid in self.crashed:
            seen.stop = "abort"

    @rule()
    def prune(self) -> None:
        self.step_no += 1
        ended = [sid for sid, seen in self.seen.items() if not seen.pruned and seen.status in ENDED]
        try:
            deleted = self.rt.prune(older_than=timedelta(0))
        except tarry.InvalidArgument:
            self._lacks("prune(older_than=timedelta(0)): every ended session")
            return
        assert deleted == len(ended), (
            f"prune(older_than=0) deleted {deleted} sessions; the ended ones were {ended}"
        )
        for sid in ended:
            self.seen[sid].pruned = True
            with pytest.raises(tarry.UnknownSession):
                self.rt.session(sid)

    @rule(seconds=st.sampled_from([1, 61, 150]))
    def worker_round(self, seconds: int) -> None:
        self.step_no += 1
        self.clock.advance(seconds)
        self._drive(self.rt.poll)
        if not self.crashed:
            self.pending.clear()
            self.swept = True

    # -- rules: acting while a drive is going, crashing ------------------------------------------

    @rule(
        sid=sessions,
        lane=st.integers(0, CONCURRENCY),
        action=st.sampled_from(ACTIONS),
        via=st.sampled_from(["token", "key"]),
        keys=HOOK_KEYS,
    )
    def drive_with(self, sid: str, lane: int, action: str, via: str, keys: list[str]) -> None:
        """Move one waiting branch of `sid` on (by its token, or by a message to its key) and
        do `action` inside the step that comes after its Wait."""
        self.step_no += 1
        pause = self._pause(sid, lane, keyed=True)
        if pause is None:
            return
        seen = self.seen[sid]
        self._arm(sid, pause.path[:-1], action, tuple(keys))
        if via == "token":
            self._resume(sid, pause, self._value_for(sid, pause))
        else:
            own = key_of(seen.shape, seen.input, pause.path)
            message = self._message(own, self._head(own))
            self._drive(lambda: self.rt.deliver(own, message))

    @precondition(lambda self: self.crashed)
    @rule()
    def recover(self) -> None:
        """A new process, once the dead one's lease has passed, recovers its sessions."""
        self.step_no += 1
        self.clock.advance(LEASE + 1)
        outs = self._drive(self.rt.recover)
        recovered = {o.session_id for o in outs}
        missing = self.crashed - recovered
        self.crashed.clear()
        assert not missing, f"recover() did not continue the crashed sessions {sorted(missing)}"

    # -- the promises ---------------------------------------------------------------------------------

    @invariant()
    def promises(self) -> None:
        self._observe()
        self._check_takes()
        self._check_fifo()
        self._check_sessions()
        self._check_waiting_mail()
        self._check_mailbox()
        self.just_given.clear()
        self.swept = False

    def _observe(self) -> None:
        """Read every live session: status, new events (what its Waits took), pauses; and
        check that its state is the fold of its events (promise 3)."""
        for sid, seen in self.seen.items():
            if seen.pruned:
                continue
            try:
                view = self.rt.session(sid)
            except tarry.UnknownSession:
                pytest.fail(f"session {sid} was started and is not in the store")
            seen.status = view.status
            for event in view.events(after_seq=seen.seen_seq):
                seen.seen_seq = event.seq
                if event.type == "run.resumed" and "value" in event.data and is_keyed(event.path):
                    self.resumed_into.setdefault(event.data["value"], sid)
                if event.type == "node.completed" and is_keyed(event.path):
                    value = event.data["output"]
                    seen.takes.setdefault(event.path, []).append(value)
                    self.taken.setdefault(value, []).append((sid, event.path))
                    self.rank.setdefault((sid, event.path), self.step_no)
            self._check_derived(sid, view)
            seen.outcome = view.outcome
            seen.pauses = tuple(seen.outcome.pauses) if seen.status == "paused" else ()
            for pause in seen.pauses:
                if pause.kind == "external":  # an aborted branch's system pause waits on no key
                    self.rank.setdefault((sid, pause.path), self.step_no)
            if seen.stop == "cancel" and seen.status == "cancelled":
                seen.stop = None
            if seen.stop == "abort" and seen.status != "running":
                seen.stop = None

    def _gone(self, message: Any) -> bool:
        """Whether `message` was consumed: taken by a Wait, or resumed into a branch (the
        resume recorded it) whose Wait has not completed yet: the session holds it, as a run
        stopped before that Wait (an abort at the first checkpoint of a recovery) or cancelled
        does. A session that completed took it, or lost it."""
        if message in self.taken:
            return True
        sid = self.resumed_into.get(message)
        return sid is not None and self.seen[sid].status != "completed"

    def _check_derived(self, sid: str, view: Any) -> None:
        """Promise 3: the state is the fold of the events."""
        state = view.state
        assert view.derive_state() == state, (
            f"session {sid} ({view.status}): derive_state() differs from state"
        )

    def _check_takes(self) -> None:
        """Promise 1, what the event logs show: no message taken twice, or by a Wait on
        another key; a token's value taken by its own Wait; a broadcast by its waiters."""
        for message, key in self.msg_key.items():
            takers = self.taken.get(message, [])
            assert len(takers) <= 1, (
                f"message {message} was delivered once to {key!r} and taken {len(takers)} "
                f"times: by {takers}"
            )
            for sid, path in takers:
                seen = self.seen[sid]
                own = key_of(seen.shape, seen.input, path)
                assert own == key, (
                    f"message {message} for {key!r} was taken by {sid} {path}, which waits on "
                    f"{own!r}"
                )
        for value, (sid, path) in self.direct.items():
            takers = self.taken.get(value, [])
            assert takers in ([], [(sid, path)]), (
                f"the value {value} resumed {sid} {path} by its token, but was taken by {takers}"
            )
            # A resume cut short by a crash continues on recovery with the token's value; an
            # abort may hold it (paused, kind "system") and a cancel may end the session before
            # it reaches its Wait. Anywhere else, the Wait has it.
            seen = self.seen[sid]
            holds = seen.status == "cancelled" or any(p.kind == "system" for p in seen.pauses)
            if sid not in self.crashed and not holds:
                assert takers, f"the value {value} resumed {sid} {path} by its token; it is lost"
        for value, waiters in self.broadcasts.items():
            takers = self.taken.get(value, [])
            assert len(takers) == len(set(takers)), (
                f"broadcast {value} was taken twice by one branch: {takers}"
            )
            if waiters is not LOOSE and not self.crashed:
                assert set(takers) == waiters, (
                    f"broadcast {value} was taken by {sorted(takers)}; it goes to every branch "
                    f"waiting on its key at that moment, and only them: {sorted(waiters)}"
                )

    def _check_fifo(self) -> None:
        """Promise 4: each key's messages taken in delivery order, each by the branch that had
        waited longest when it came."""
        for message in self.just_given:
            takers = self.takers[message]
            if takers is LOOSE or self.crashed:
                continue  # a crashed drive may hold what it took: see the checks below
            took = self.taken.get(message, [])
            key = self.msg_key[message]
            if not takers:
                assert not took, (
                    f"message {message} for {key!r}, which nothing waited on, was taken by "
                    f"{took} in the same call"
                )
            else:
                assert took and took[0] in takers, (
                    f"message {message} for {key!r} went to {took or 'no branch'}; the branch "
                    f"that had waited longest on the key was {sorted(takers)}"
                )
        if self.crashed:
            return  # a crashed drive may hold messages it took: checked once it is recovered
        for key, messages in self.order.items():
            taken = [m for m in messages if self._gone(m)]
            assert taken == messages[: len(taken)], (
                f"messages to {key!r} in delivery order are {messages}; the taken ones, "
                f"{taken}, are not the oldest ones"
            )
            ranks = [
                (self.rank[self.taken[m][0]], m)
                for m in taken
                if m in self.taken and self.takers[m] is not LOOSE
            ]
            for (early, m1), (late, m2) in zip(ranks, ranks[1:], strict=False):
                assert early <= late, (
                    f"{m1} was delivered to {key!r} before {m2}, but taken by a branch that "
                    f"started waiting later ({self.taken[m1][0]} after {self.taken[m2][0]})"
                )

    def _check_sessions(self) -> None:
        """Promise 2: every session ended, or paused where its shape says with a token per
        waiting branch, or running only while its crash awaits recovery."""
        tokens: set[str] = set()
        now = self.clock.now()
        for sid, seen in self.seen.items():
            if seen.pruned:
                continue
            if sid in self.crashed:
                continue
            assert seen.status != "running", (
                f"session {sid} is {seen.status!r} between rules, and no crash awaits recovery: "
                "it is stranded"
            )
            if seen.stop == "cancel":
                assert seen.status in ("cancelled", "completed"), (
                    f"session {sid} was asked to stop as cancelled while it ran, and is "
                    f"{seen.status!r}: the cancel was not honoured"
                )
            takes = {path: values[0] for path, values in seen.takes.items()}
            if seen.status == "failed":
                assert seen.shape == "loop" and seen.outcome.error.type == "wait_timeout", (
                    f"session {sid} failed: {seen.outcome.error}"
                )
            if seen.status == "completed":
                self._check_output(sid, seen, takes)
            if seen.status != "paused":
                continue
            assert seen.pauses, f"session {sid} is paused with no waiting branch: stranded"
            for pause in seen.pauses:
                assert isinstance(pause.token, str) and pause.token, (
                    f"session {sid}: waiting branch {pause.path} has no token: stranded"
                )
                assert pause.token not in tokens, f"token of {sid} {pause.path} listed twice"
                tokens.add(pause.token)
                assert pause.path not in takes, (
                    f"session {sid}: {pause.path} is listed as waiting, but its Wait completed"
                )
                if self.swept and pause.expires_at is not None:
                    assert pause.expires_at > now, (
                        f"session {sid}: the timeout of {pause.path} passed and a worker round "
                        "did not act on it"
                    )
            if any(pause.kind == "system" for pause in seen.pauses):
                continue  # stopped by an abort: where its branches stand is the abort's to say
            self._check_position(sid, seen, takes)

    def _check_position(self, sid: str, seen: Seen, takes: dict[Any, Any]) -> None:
        """The waiting branches of a paused session are those its shape and takes imply."""
        waiting = sorted(pause.path for pause in seen.pauses)
        if seen.shape == "pair":
            expected = [("second",) if ("first",) in takes else ("first",)]
        elif seen.shape == "loop":
            expected = [("loop", len(takes), "w")]
        else:
            left = [i for i in range(seen.input["n"]) if ("fan", i, "lane") not in takes]
            expected = [("fan", i, "lane") for i in left[:CONCURRENCY]]
        assert waiting == expected, (
            f"session {sid} ({seen.shape}) is paused at {waiting}; after what its Waits took "
            f"({takes}) it should wait at {expected}"
        )

    def _check_output(self, sid: str, seen: Seen, takes: dict[Any, Any]) -> None:
        output = seen.outcome.output
        if seen.shape == "pair":
            expected = [takes.get(("first",)), takes.get(("second",))]
        elif seen.shape == "fan":
            expected = [takes.get(("fan", i, "lane")) for i in range(seen.input["n"])]
        else:
            expected = seen.input["n"]
            assert len(takes) == expected, f"loop {sid} completed after {len(takes)} takes"
        assert output == expected, (
            f"session {sid} completed with {output!r}; its Waits took {takes}"
        )

    def _check_waiting_mail(self) -> None:
        """Promises 1 and 2, without reading the mailbox: a message that nobody took while a
        branch waits on its key is either queued beside that branch (stranded) or lost. A
        message given while a drive was going may wait for the next worker round."""
        if self.crashed:
            return
        for key, messages in self.order.items():
            if key in self.pending:
                continue
            left = [m for m in messages if not self._gone(m)]
            waiting = [(sid, path) for _, sid, path in self._waiters(key)]
            assert not (left and waiting), (
                f"{waiting} wait on {key!r}, and the messages {left} given to it were taken by "
                "nobody: queued beside a waiting branch (stranded), or lost"
            )

    def _check_mailbox(self) -> None:
        """Promise 1, the queue: every message given and not taken is queued (counted by
        `rt.mailbox()`), and nothing else is."""
        mailbox = getattr(self.rt, "mailbox", None)
        if mailbox is None:
            self._lacks("Runtime.mailbox(prefix=, limit=) -> [MailInfo(key, count, oldest_at)]")
            return
        counts = {info.key: info.count for info in mailbox(limit=1000)}
        assert set(counts) <= set(ALL_KEYS), f"mailbox lists keys nobody used: {counts}"
        for key, messages in self.order.items():
            left = [m for m in messages if not self._gone(m)]
            queued = counts.get(key, 0)
            if self.crashed:
                assert queued <= len(left), (
                    f"{key!r}: {queued} messages queued, but only {left} were given and not taken"
                )
                continue
            assert queued == len(left), (
                f"{key!r}: the messages given and not taken are {left}, but the mailbox holds "
                f"{queued}: {'lost' if queued < len(left) else 'kept twice or invented'}"
            )


def machine_settings(kind: str) -> settings:
    return settings(
        max_examples=int(EXAMPLES[kind] * SCALE),
        stateful_step_count=int(STEPS * min(SCALE, 4)),
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_keyed_delivery_keeps_its_promises(kind: str, tmp_path: Path) -> None:
    if kind == "postgres":
        import pgserver

        pgserver.server_dsn()  # skips without a server (fails under CI=true)
    lacking: set[str] = set()
    run_machine(lambda: DeliveryMachine(kind, tmp_path, lacking), machine_settings(kind))
    assert not lacking, (
        f"the machine found no broken promise, but ran without parts of API.md that this "
        f"Runtime lacks (so their checks did not run): {sorted(lacking)}"
    )
