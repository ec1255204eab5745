"""The actors of the stress campaign, which race in every process, and a child process's entry.

`stress.run_campaign` starts this file as a script in each child process: it opens its own
Runtime on the shared store, prints `ready`, reads the shared start and deadline (wall clock)
from stdin, races until the deadline with its threads, and writes their operations to `--out`.
The parent runs the same `run_actors` in its own threads.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import tarry
from tarry.snapshots import dumps

#: How long an actor may run past its deadline (one slow operation) before it counts as hung.
GRACE = 30.0
#: Refusals the API promises for a lost race or a stale token; any other exception is a failure.
EXPECTED = frozenset(
    {
        "TokenAlreadyUsed",
        "UnknownToken",
        "UnknownSession",
        "SessionNotResumable",
        "SessionExists",
        "InvalidResumeValue",
        "ConcurrentUpdate",
    }
)
#: The shape of the race (Board and Actor say how each one is used).
ROUNDS = 4  # Loop iterations per session, each pausing at a Gate and at an interrupt
FAIL_RATE = 0.08  # chance that one `work` step fails, giving skip and retry something to do


# -- the flow every actor races on ------------------------------------------------------------


def prep(ctx: tarry.Context) -> int:
    time.sleep(0.002)  # keeps runs in flight long enough for aborts to land
    return ctx.iteration


def work(ctx: tarry.Context) -> int:
    time.sleep(0.001)
    if random.random() < FAIL_RATE:
        msg = f"planned failure at {ctx.path}"
        raise RuntimeError(msg)
    return ctx.item


def ask(ctx: tarry.Context) -> Any:
    return ctx.interrupt("more", kind="external", payload={"round": ctx.iteration})


FLOW = tarry.Flow(
    "stress",
    [
        tarry.Loop(
            "rounds",
            [prep, tarry.Gate("approve"), tarry.ForEach("parts", [0, 1, 2], work), ask],
            until=lambda ctx: False,
            max_iterations=ROUNDS,
        )
    ],
)


#: Session ids being started at any moment, and how fast that window slides (ids per second).
WINDOW, RATE = 16, 15.0
ABORTS_PER_SECOND = 8.0  # per process
THINK = 0.004  # longest pause between two operations of one actor, in seconds
#: How often CPython may switch threads (its default is 5 ms): a finer grain makes threads
#: interleave inside short critical sections, where races hide.
SWITCH_INTERVAL = 5e-5


def session_ids(seconds: float) -> list[str]:
    """The pool of session ids for a campaign of `seconds`."""
    return [f"s{k:04d}" for k in range(int(WINDOW + RATE * (seconds + GRACE)))]


# -- what a thread's operation emitted --------------------------------------------------------

_local = threading.local()


def digest(event: tarry.Event) -> str:
    """What an event says, as a short hash: equal for the event emitted and the event stored."""
    body = dumps([event.type, list(event.path), event.data])
    return hashlib.blake2b(body, digest_size=8).hexdigest()


def _listen(event: tarry.Event) -> None:
    # Subscribers are called in the thread that emits, so a thread-local buffer holds exactly
    # the events of the operation this thread is performing.
    buf = getattr(_local, "events", None)
    if buf is not None:
        buf.append([event.seq, event.type, event.session_id, digest(event)])


# -- actors -----------------------------------------------------------------------------------


class Board:
    """What the actors of one process know: tokens seen (per live session), runs in flight,
    and the window of session ids being started now."""

    def __init__(self, space: list[str], begin: float) -> None:
        self.space, self.begin = space, begin
        self.lock = threading.Lock()
        self.tokens: dict[str, list[tuple[str, str | None, str | None]]] = {}
        self.running: Counter[str] = Counter()
        self.next_abort = 0.0

    def may_abort(self) -> bool:
        """At most ABORTS_PER_SECOND in this process: an abort lands on nearly every run in
        flight, and runs that never get past an abort never reach their next Gate."""
        with self.lock:
            now = time.time()
            if now < self.next_abort:
                return False
            self.next_abort = now + 1 / ABORTS_PER_SECOND
            return True

    def window(self, rng: random.Random) -> str:
        """An id among the WINDOW that every actor of every process starts at this moment: the
        window slides by RATE ids a second, so new sessions keep coming and starts collide."""
        base = int(max(0.0, time.time() - self.begin) * RATE)
        return self.space[min(base + rng.randrange(WINDOW), len(self.space) - 1)]

    def note(self, sid: str, token: str | None, status: str | None, kind: str | None) -> None:
        """Remember a session's token (with its status and pause kind), or forget the session
        once it has ended."""
        with self.lock:
            if status in ("completed", "cancelled"):
                self.tokens.pop(sid, None)  # nothing left to race on
            if token is None:
                return
            seen = self.tokens.setdefault(sid, [])
            if all(t != token for t, _, _ in seen):
                seen.append((token, status, kind))
                del seen[:-6]  # a few stale tokens are kept on purpose: they must be refused

    def pick(self, rng: random.Random, status: str | None = None) -> tuple[str, str, str | None]:
        """A session and one of its tokens (mostly the newest; `status` preferred)."""
        with self.lock:
            sids = list(self.tokens)
            if not sids:
                return "", "", None
            sid = rng.choice(sids)
            seen = self.tokens[sid]
            if status is not None:
                sid, seen = next(
                    (
                        (s, t)
                        for s in rng.sample(sids, min(8, len(sids)))
                        if (t := self.tokens[s]) and t[-1][1] == status
                    ),
                    (sid, seen),
                )
            token, _, kind = seen[-1] if rng.random() < 0.8 else rng.choice(seen)
            return sid, token, kind

    def known(self, rng: random.Random) -> str:
        """A session this process has seen a token of, or else one of the window."""
        with self.lock:
            sids = list(self.tokens)
        return rng.choice(sids) if sids and rng.random() < 0.7 else self.window(rng)

    def in_flight(self, rng: random.Random) -> str | None:
        with self.lock:
            live = [sid for sid, n in self.running.items() if n > 0]
        return rng.choice(live) if live else None


class Actor:
    """One thread's loop of seeded random operations until `deadline` (wall clock)."""

    # Operation weights: most of the pressure is on tokens; learning keeps the tokens fresh.
    MIX = (("resume", 40), ("learn", 25), ("abort", 12), ("skip", 6), ("start", 9), ("cancel", 1))

    def __init__(
        self,
        who: str,
        proc: str,
        rt: tarry.Runtime,
        board: Board,
        rng: random.Random,
        deadline: float,
    ) -> None:
        self.who, self.proc, self.rt, self.board, self.rng = who, proc, rt, board, rng
        self.deadline = deadline
        self.ops: list[dict[str, Any]] = []
        self.current: dict[str, Any] | None = None  # the operation in progress, for hang reports
        self.crashed: str | None = None
        self.names = [name for name, _ in self.MIX]
        self.weights = [w for _, w in self.MIX]

    def loop(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # the actor's own code broke: the campaign must say so
            self.crashed = _explain(exc)

    def _loop(self) -> None:
        while time.time() < self.deadline:
            self.step(self.rng.choices(self.names, self.weights)[0])
            # A moment to think: 24 actors spinning on refusals would starve the runs they race
            # on of the GIL; a token still meets several actors within its lifetime.
            time.sleep(self.rng.random() * THINK)

    def step(self, op: str) -> dict[str, Any]:
        rng, board = self.rng, self.board
        rec: dict[str, Any] = {
            "who": self.who,
            "proc": self.proc,
            "n": len(self.ops),
            "op": op,
            "sid": None,
            "token": None,
        }
        call = None
        if op == "abort" and not board.may_abort():
            op = rec["op"] = "learn"
        if op in ("resume", "skip", "cancel"):
            sid, token, kind = board.pick(rng, "failed" if op == "skip" else None)
            if not sid:
                op = rec["op"] = "learn"
            elif op == "cancel" and rng.random() < 0.4:
                rec["sid"] = sid
                call = lambda: self.rt.cancel(sid)  # noqa: E731
            else:
                rec["sid"], rec["token"] = sid, token
                if op == "resume":
                    value = self.value(kind, rec)
                    call = lambda: self.rt.resume(token, value)  # noqa: E731
                elif op == "skip":
                    output = {"skipped_by": f"{self.who}#{rec['n']}"}
                    call = lambda: self.rt.skip(token, output)  # noqa: E731
                else:
                    call = lambda: self.rt.cancel(token)  # noqa: E731
        if op == "abort":
            sid = board.in_flight(rng) if rng.random() < 0.8 else None
            sid = sid or board.known(rng)
            # resumable=False on a session that is not running here cancels it: kept rare,
            # or the pool would be cancelled faster than it is started.
            resumable = rng.random() < 0.9
            rec["sid"], rec["resumable"] = sid, resumable
            call = lambda: self.rt.abort(sid, resumable=resumable)  # noqa: E731
        elif op == "start":
            sid = rec["sid"] = board.window(rng)
            call = lambda: self.rt.run(FLOW, {"by": self.who}, session_id=sid)  # noqa: E731
        elif op == "learn":
            sid = rec["sid"] = board.known(rng)
            call = lambda: self.rt.session(sid)  # noqa: E731
        return self.perform(rec, call)

    def value(self, kind: str | None, rec: dict[str, Any]) -> Any:
        rec["bogus"] = kind == "human" and self.rng.random() < 0.05
        if rec["bogus"]:
            return "maybe"  # not a decision: the Gate must refuse it and change nothing
        note = f"{self.who}#{rec['n']}"
        if kind == "human":
            return {"approved": self.rng.random() < 0.9, "by": self.who, "comment": note}
        return {"answer": note}

    def perform(self, rec: dict[str, Any], call: Any) -> dict[str, Any]:
        sid = rec["sid"]
        drives = rec["op"] in ("resume", "skip", "start")
        if drives:
            with self.board.lock:
                self.board.running[sid] += 1
        _local.events = events = []
        self.current = rec
        rec["t0"] = time.time()
        try:
            result = call()
            self.describe(rec, result)  # inside the try: a malformed result is a failure too
            rec["exc"] = None
        except tarry.TarryError as exc:
            rec["exc"] = type(exc).__name__
            if rec["exc"] not in EXPECTED:
                rec["unexpected"] = f"{rec['exc']}: {exc}"
        except Exception as exc:  # anything but a typed refusal is a failure of the campaign
            rec["exc"] = type(exc).__name__
            rec["unexpected"] = _explain(exc)
        finally:
            rec["t1"] = time.time()
            _local.events = None
            self.current = None
            if drives:
                with self.board.lock:
                    self.board.running[sid] -= 1
        rec["events"] = events
        self.ops.append(rec)
        return rec

    def describe(self, rec: dict[str, Any], result: Any) -> None:
        """Record what a successful call returned, and learn its token."""
        if rec["op"] == "abort":
            return
        if rec["op"] == "learn":
            view = result
            outcome = view.outcome
            rec["status"] = view.status
            rec["seq"] = view.state.last_seq  # the record holds the state its token paused at
            result = outcome
        rec["outcome"] = result.status
        rec["out_token"] = result.token
        rec["reason"] = result.pause.reason if result.pause else None
        rec["error"] = result.error.type if result.error else None
        kind = result.pause.kind if result.pause else None
        if rec["op"] == "learn":
            status = rec["status"]
        elif result.failed:
            status = "cancelled" if rec["error"] == "cancelled" else "failed"
        else:
            status = "completed" if result.ok else result.status
        self.board.note(result.session_id, result.token, status, kind)


def _explain(exc: BaseException) -> str:
    """An exception on one line: type, message and the line that raised it."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" (at {Path(where.filename).name}:{where.lineno} in {where.name})" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


# -- one process's actors ---------------------------------------------------------------------


def open_runtime(store: str, durability: str = "pause") -> tarry.Runtime:
    rt = tarry.Runtime(store=store, flows=[FLOW], durability=durability)
    rt.subscribe(_listen)
    return rt


def run_actors(
    rt: tarry.Runtime, proc: str, threads: int, seed: int, board: Board, deadline: float
) -> tuple[list[dict[str, Any]], list[str]]:
    """Run `threads` actors until `deadline`; their operations, and the actors that hung."""
    sys.setswitchinterval(SWITCH_INTERVAL)
    actors = [
        Actor(f"{proc}/t{i}", proc, rt, board, random.Random(f"{seed}/{proc}/{i}"), deadline)
        for i in range(threads)
    ]
    workers = [threading.Thread(target=a.loop, name=a.who, daemon=True) for a in actors]
    for w in workers:
        w.start()
    hung = []
    for actor, w in zip(actors, workers, strict=True):
        w.join(max(0.0, deadline + GRACE - time.time()))
        if w.is_alive():
            hung.append(f"{actor.who} still in {actor.current} {GRACE}s after its deadline")
        elif actor.crashed:
            hung.append(f"{actor.who} crashed: {actor.crashed}")
    ops = [op for a in actors for op in a.ops]
    return ops, hung


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--proc", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--durability", default="pause")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rt = open_runtime(args.store, args.durability)
    print("ready", flush=True)
    line = sys.stdin.readline().split()
    # No line: the parent gave up on the campaign, so stop at once.
    begin, deadline = map(float, line) if line else (time.time(), time.time())
    board = Board(session_ids(args.seconds), begin)
    ops, hung = run_actors(rt, args.proc, args.threads, args.seed, board, deadline)
    args.out.write_text(json.dumps({"ops": ops, "hung": hung}))
    rt.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
