"""Eight threads and four processes race over the tokens of ONE session's 50 waiting branches,
through `Runtime.resume` and `resume_many`, on SQLite and PostgreSQL (issue 15).

Every branch is resumed exactly once, its step runs exactly once, the session completes with
the right output and a gap-free log whose fold is its state; a call that loses sees
`TokenAlreadyUsed` (a batch holding a token another call used is refused whole, and the racer
tries its other tokens alone). A call refused because another branch of the session was being
resumed at that moment (ConcurrentUpdate, SessionNotResumable "running": nothing changed, the
token still unused) is tried again, and then the test ends as an expected failure after checking
that nothing was lost: the contract allows only TokenAlreadyUsed (resumes of one session's
branches take turns). On PostgreSQL, `consume_token` and `consume_tokens` of one session's
tokens can deadlock (an untyped psycopg error; the victim is rolled back): an expected failure
too, until the store is fixed.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from branch_race import BUSY, branches, race
from tarry import Runtime

N = 50
THREADS, PROCESSES = 8, 4


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'race.db'}"
        return
    import pgserver

    with pgserver.scratch_schema() as schema:
        yield pgserver.schema_dsn(schema)


def test_threads_and_processes_race_over_the_branches_of_one_session(
    store_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects.log"
    log.touch()
    rt = Runtime(store=store_url)
    out = rt.run(branches(N), {"log": str(log)})
    assert out.paused and len(out.pauses) == N
    tokens = [(p.token, p.path[1]) for p in out.pauses]

    start = time.time() + 2.0  # a common start, after the processes have imported tarry
    results: list[tuple[str, list[str]]] = []
    lock = threading.Lock()

    def thread(seed: int) -> None:
        got = race(store_url, tokens, N, seed, start)
        with lock:
            results.extend(got)

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(PROCESSES) as pool:
        pending = [
            pool.apply_async(race, (store_url, tokens, N, 100 + i, start))
            for i in range(PROCESSES)
        ]
        threads = [threading.Thread(target=thread, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for p in pending:
            results.extend(p.get(60))

    outcomes = Counter(what for what, _ in results)
    untyped = {what: count for what, count in outcomes.items() if what.startswith("untyped")}
    if set(untyped) == {"untyped psycopg.errors.DeadlockDetected"}:
        # PostgresStore: consume_token and consume_tokens of one session's tokens lock its row,
        # its token rows and its events in different orders and deadlock. The victim is rolled
        # back (nothing written), but the error escapes untyped. (Before issue15's 1d6a3ab the
        # final save of a drive deadlocked too, and left the session "running" until recovered.)
        # Reported to the lead (issue 16's stores).
        pytest.xfail(f"PostgreSQL deadlocks between token uses of one session: {untyped}")
    assert set(outcomes) <= {"won", "used", *BUSY}, outcomes
    won = Counter(token for what, batch in results if what == "won" for token in batch)
    missing = {t: [w for w, b in results if t in b] for t, _ in tokens if t not in won}
    assert not missing, (outcomes, missing)
    assert set(won.values()) == {1}, "a token was used twice"

    view = rt.session(out.session_id)
    assert view.status == "completed", view.status
    assert view.outcome.output == [i * 10 for i in range(N)]
    ran = Counter(int(line.split()[0]) for line in log.read_text().splitlines())
    assert ran == {i: 1 for i in range(N)}, "a branch's step ran twice or never"
    events = view.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert view.derive_state() == view.state

    busy = {what: count for what, count in outcomes.items() if what in BUSY}
    if busy:
        # Nothing was lost and no token was used twice (checked above), but a caller resuming
        # a token nobody else used was refused because another branch of the same session was
        # being resumed at that moment: the contract says only TokenAlreadyUsed (resumes of one
        # session's branches take turns).
        pytest.xfail(f"calls refused while another branch was being resumed: {busy}")
