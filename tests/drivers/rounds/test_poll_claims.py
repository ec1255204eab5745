"""Workers fed by one bulk adapter do not herd: a poll claims the sessions of the ready waits
before it resumes them (`SessionStore.claim_waits`), so of several workers that hear of the same
ready waits each resumes a different share, and no token is tried twice.

Several workers are threads, each with a Runtime and a store of its own on one database (one
SQLite file, one PostgreSQL schema; the memory store is one object they share). Their clock
stands still, so no claim lapses while the test runs, however slow the machine: what they do
is decided by barriers and events alone.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tarry import Flow, ForEach, ManualClock, Outcome, ResumeRequest, Runtime, Wait
from tarry.drivers.rounds import polling
from tarry.drivers.rounds.boundary import Round

WORKERS = 4
SESSIONS = 30


def job_key(ctx: Any) -> str:
    return f"job-{ctx.input}"


JOB = Flow("claimed_job", [Wait("result", reason="batch", key=job_key), lambda ctx: ctx.prev])


def lane_key(ctx: Any) -> str:
    return f"lane-{ctx.item}"


WIDE = Flow(
    "claimed_wide",
    [ForEach("items", list(range(6)), [Wait("w", key=lane_key)], concurrency=None)],
)


class Attempts:
    """Token attempts on a store, by token: `consume_token` calls and the tokens given to
    `consume_tokens` (shared by every worker's store)."""

    def __init__(self) -> None:
        self.by_token: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.watched: list[Any] = []

    def watch(self, store: Any) -> Any:
        with self.lock:
            if any(store is seen for seen in self.watched):
                return store  # the memory store the workers share: watched once
            self.watched.append(store)
        consume, consume_many = store.consume_token, store.consume_tokens

        def consume_token(token: str, **kwargs: Any) -> bool:
            with self.lock:
                self.by_token[token] += 1
            return consume(token, **kwargs)

        def consume_tokens(tokens: Any, **kwargs: Any) -> dict[str, str]:
            with self.lock:
                self.by_token.update(tokens)
            return consume_many(tokens, **kwargs)

        store.consume_token = consume_token
        store.consume_tokens = consume_tokens
        return store


def opener(store: Any) -> Callable[[], Any]:
    """A new store on `store`'s database (for memory: `store` itself, which threads share)."""
    from tarry.snapshots import MemoryStore, PostgresStore, SQLiteStore

    if isinstance(store, MemoryStore):
        return lambda: store
    if isinstance(store, SQLiteStore):
        return lambda: SQLiteStore(store.path)
    assert isinstance(store, PostgresStore)
    import pgserver

    return lambda: PostgresStore(pgserver.server_dsn(), schema=store.schema, max_size=2)


class Herd:
    """A bulk adapter whose answers are set by the test; the first round of each worker waits
    at a barrier until every worker was asked, so that all of them hear of the same ready
    waits before any resumes one (the herd at its worst)."""

    def __init__(self, workers: int, answer: Callable[[list[ResumeRequest]], dict[str, Any]]):
        self.answer = answer
        self.together = threading.Barrier(workers)
        self.met: set[int] = set()

    def many(self, requests: list[ResumeRequest]) -> dict[str, Any]:
        me = threading.get_ident()
        if me not in self.met:
            self.met.add(me)
            self.together.wait(timeout=60)
        return self.answer(requests)


def run_workers(
    store: Any, flows: list[Flow], adapter: Any, attempts: Attempts, workers: int = WORKERS
) -> list[Outcome]:
    """`workers` threads, each a Runtime on a store of its own, polling until a round resumes
    nothing; every outcome they returned."""
    make = opener(store)
    clock = ManualClock(datetime.now(UTC))  # stands still: no claim lapses
    done: list[Outcome] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work() -> None:
        mine = attempts.watch(make())
        try:
            rt = Runtime(store=mine, flows=flows, clock=clock, adapters={"external": adapter})
            while got := rt.poll():
                with lock:
                    done.extend(got)
        except BaseException as exc:
            errors.append(exc)
            adapter.together.abort()
        finally:
            if mine is not store:
                mine.close()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    return done


def test_workers_resume_each_ready_wait_once_and_try_each_token_once(store: Any) -> None:
    starter = Runtime(store=store)
    outs = [starter.run(JOB, i) for i in range(SESSIONS)]
    attempts = Attempts()
    herd = Herd(WORKERS, AllReady().many)
    done = run_workers(store, [JOB], herd, attempts)
    resumed = Counter(o.session_id for o in done)
    assert sorted(resumed) == sorted(o.session_id for o in outs)
    assert set(resumed.values()) == {1}  # each session resumed by one worker, once
    for i, out in enumerate(outs):
        view = starter.session(out.session_id)
        assert view.status == "completed" and view.outcome.output == f"result of job-{i}"
        assert [e.type for e in view.events()].count("run.resumed") == 1
    # No worker tried a token another one used: one attempt per token, one token per session.
    keys = {starter._core.tokens.key(o.token) for o in outs}
    assert set(attempts.by_token) == keys and set(attempts.by_token.values()) == {1}


def test_claims_compose_with_waiting_lanes_parked_in_their_rows(store: Any) -> None:
    """One wide session (six lanes parked in their wait rows) and some narrow ones: ready lanes
    of one session are claimed and resumed together; a lone ready lane is resumed from the
    record the claim returned and its wait row; every token is tried once."""
    starter = Runtime(store=store)
    wide = starter.run(WIDE)
    assert wide.paused and len(wide.pauses) == 6
    narrow = [starter.run(JOB, i) for i in range(4)]
    stages = [{"lane-0", "lane-2", "lane-4", "job-0", "job-1"}, {"lane-1"}, {"lane-3", "job-2"}]
    stage = {"now": stages[0]}
    attempts = Attempts()
    herd = Herd(3, lambda requests: {r.key: r.key for r in requests if r.key in stage["now"]})
    for ready in stages:
        stage["now"] = ready
        herd.met.clear()
        done = run_workers(store, [WIDE, JOB], herd, attempts, workers=3)
        touched = Counter(o.session_id for o in done)
        assert set(touched.values()) == {1}
        assert (wide.session_id in touched) == any(k.startswith("lane") for k in ready)
    view = starter.session(wide.session_id)
    assert view.status == "paused"
    assert [p.path for p in view.outcome.pauses] == [("items", 5, "w")]  # lane 5 waits on
    assert set(attempts.by_token.values()) == {1}
    assert len(attempts.by_token) == 5 + 3  # lanes 0 to 4, jobs 0 to 2
    for i, out in enumerate(narrow):
        assert starter.session(out.session_id).status == ("completed" if i < 3 else "paused")


class AllReady:
    """A bulk adapter that answers every request asked, by key."""

    def many(self, requests: list[ResumeRequest]) -> dict[str, Any]:
        return {r.key: f"result of {r.key}" for r in requests}


def test_a_round_that_stops_gives_back_what_it_claimed_and_did_not_start(store: Any) -> None:
    handled: list[str] = []
    flow = Flow(
        "claimed_stop",
        [Wait("result", key=job_key), lambda ctx: handled.append(ctx.session_id)],
    )
    starter = Runtime(store=store)
    sids = [starter.run(flow, i).session_id for i in range(5)]
    rt = Runtime(store=store, flows=[flow], adapters={"external": AllReady()})
    # The round claims the five (one page) and stops once it has resumed one.
    [first] = polling.ask_adapters(rt._core, Round(stopping=lambda: bool(handled)))
    assert handled == [first.session_id]
    for sid in sids:
        if sid != first.session_id:  # given back at once: free for any other round
            assert store.load(sid).lease_owner is None
    others = Runtime(store=store, flows=[flow], adapters={"external": AllReady()}).poll()
    assert sorted(o.session_id for o in others) == sorted(set(sids) - {first.session_id})


def test_a_claim_whose_worker_died_lapses_with_its_lease(store: Any) -> None:
    out = Runtime(store=store).run(JOB, 7)
    clock = ManualClock(datetime.now(UTC))
    rt = Runtime(store=store, flows=[JOB], clock=clock, lease=30, adapters={"external": AllReady()})
    key = rt._core.tokens.key(out.token)
    now = clock.now()
    # A worker claimed it, and died before it resumed it.
    assert list(store.claim_waits([key], "dead worker", now + timedelta(seconds=30), now)) == [key]
    assert rt.poll() == []  # held: passed over, no token tried
    assert rt.session(out.session_id).status == "paused"
    clock.advance(30)
    [done] = rt.poll()
    assert done.session_id == out.session_id and done.output == "result of job-7"
