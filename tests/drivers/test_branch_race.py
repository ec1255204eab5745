"""Eight threads and four processes race over the tokens of ONE session's 50 waiting branches,
through `Runtime.resume` and `resume_many`, on SQLite and PostgreSQL (issue 15).

Every branch is resumed exactly once, its step runs exactly once, the session completes with
the right output and a gap-free log whose fold is its state; a call that loses sees
`TokenAlreadyUsed` (a batch holding a token another call used is refused whole, and the racer
tries its other tokens alone), never any other error.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from branch_race import branches, race
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
    assert set(outcomes) <= {"won", "used"}, outcomes
    won = Counter(token for what, batch in results if what == "won" for token in batch)
    assert sorted(won) == sorted(token for token, _ in tokens)
    assert set(won.values()) == {1}, "a token was used twice"

    view = rt.session(out.session_id)
    assert view.status == "completed", view.status
    assert view.outcome.output == [i * 10 for i in range(N)]
    ran = Counter(int(line.split()[0]) for line in log.read_text().splitlines())
    assert ran == {i: 1 for i in range(N)}, "a branch's step ran twice or never"
    events = view.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert view.derive_state() == view.state
