"""Eight threads and four processes race over the tokens of ONE session's 50 waiting branches,
through `Runtime.resume` and `resume_many`, on SQLite and PostgreSQL (issue 15).

Every branch is resumed exactly once, its step runs exactly once, the session completes with
the right output and a gap-free log whose fold is its state; a call that loses sees
`TokenAlreadyUsed` only (a batch holding a token another call used is refused whole, and the
racer tries its other tokens alone). Resumes of one session's branches take turns: a call
refused because another branch was being resumed at that moment (ConcurrentUpdate,
SessionNotResumable) breaks the contract; the racer tries such a token again, so the test can
still say whether anything was lost before it fails.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
            pool.apply_async(race, (store_url, tokens, N, 100 + i, start)) for i in range(PROCESSES)
        ]
        threads = [threading.Thread(target=thread, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for p in pending:
            results.extend(p.get(60))

    outcomes = Counter(what for what, _ in results)
    untyped = [what for what in outcomes if what.startswith("untyped")]
    assert not untyped, outcomes
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

    # A loser sees TokenAlreadyUsed only: resumes of one session's branches take turns, and
    # none is refused because another branch was being resumed at that moment.
    assert set(outcomes) <= {"won", "used"}, outcomes


def test_a_token_used_while_resume_many_reads_its_session_is_reported_used(
    tmp_path: Path,
) -> None:
    """A race the test above met now and then, made certain: resume_many checks a token,
    then reads its wait; another call uses the token in between. The call must say
    TokenAlreadyUsed (and change nothing), not that the session cannot be resumed."""
    from tarry import TokenAlreadyUsed
    from tarry.snapshots import MemoryStore

    class Racing(MemoryStore):
        before_waits: Any = None

        def wait(self, token: str) -> Any:
            hook, self.before_waits = self.before_waits, None
            if hook is not None:
                hook()
            return super().wait(token)

    log = tmp_path / "effects.log"
    log.touch()
    store = Racing()
    rt = Runtime(store=store)
    out = rt.run(branches(3), {"log": str(log)})
    first, second = out.pauses[0], out.pauses[1]
    store.before_waits = lambda: rt.resume(first.token, 0)
    with pytest.raises(TokenAlreadyUsed):
        rt.resume_many({first.token: 0, second.token: 1})
    view = rt.session(out.session_id)
    assert [p.path for p in view.outcome.pauses] == [("items", 1, "result"), ("items", 2, "result")]
    assert rt.resume_many({second.token: 1})[0].paused  # still valid: nothing was used
