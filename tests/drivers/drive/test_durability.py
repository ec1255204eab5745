"""Durability across processes: resume elsewhere, survive SIGKILL, race for one token."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flows import batch, counts, paused_at, resume_racing
from support import WAIT
from tarry import Runtime

FLOWS = str(Path(__file__).resolve().parents[2] / "flows.py")


def python(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, FLOWS, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        **kwargs,
    )


def test_cross_process_resume_runs_every_step_exactly_once(tmp_path: Path) -> None:
    db, log = tmp_path / "runs.db", tmp_path / "effects.log"
    k, n = 7, 12
    token = python("run-to-pause", str(db), str(log), str(k), str(n)).stdout.strip()
    assert token.startswith("tk_")
    seen = counts(log)
    assert sorted(seen["end"]) == list(range(k + 1))  # up to the paused iteration

    status = python("resume", str(db), str(log), str(k), str(n), token).stdout.split()
    assert status == ["ok", str(n)]
    seen = counts(log)
    assert {i: len(v) for i, v in seen["end"].items()} == {i: 1 for i in range(n)}
    view = Runtime(store=f"sqlite:///{db}").session(
        Runtime(store=f"sqlite:///{db}").sessions()[0].session_id
    )
    assert view.status == "completed" and view.derive_state() == view.state


class Later:
    """A clock an hour ahead: every lease taken by the real clock has expired by it."""

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(hours=1)


def crash_trial(tmp_path: Path, trial: int, n: int = 200) -> None:
    db, log = tmp_path / f"crash{trial}.db", tmp_path / f"crash{trial}.log"
    log.touch()
    proc = subprocess.Popen(
        [sys.executable, FLOWS, "batch", str(db), str(log), str(n)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    # Kill once the child is somewhere in the loop: after a random number of started steps.
    target = random.Random(trial).randint(1, n - 20)
    deadline = time.monotonic() + WAIT  # only so that a child that never starts fails
    while time.monotonic() < deadline and proc.poll() is None:
        if log.read_text().count("start") >= target:
            break
        time.sleep(0.001)
    finished_first = proc.poll() is not None  # a loaded machine may let the child finish
    if not finished_first:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    rt = Runtime(store=f"sqlite:///{db}", durability="step", flows=[batch(n)], clock=Later())
    outcomes = rt.recover()
    if finished_first:
        # It ran to its end by itself: it must have completed (anything else is a failure of
        # the child, shown with its exit status and what it printed).
        said = proc.stderr.read() if proc.stderr else ""
        assert outcomes == [], f"the child exited with {proc.returncode} leaving: {said}"
        assert rt.session("crash").state.output == [i * 2 for i in range(n)]
    else:
        assert [o.status for o in outcomes] == ["ok"], proc.stderr.read() if proc.stderr else ""
        assert outcomes[0].output == [i * 2 for i in range(n)]

    seen = counts(log)
    assert sorted(seen["end"]) == list(range(n))  # none lost
    twice = {i: keys for i, keys in seen["start"].items() if len(keys) > 1}
    assert len(twice) <= 1, f"more than the step in flight ran again: {sorted(twice)}"
    for keys in twice.values():
        assert len(keys) == 2 and keys[0] == keys[1]  # same idempotency key both times
    view = rt.session("crash")
    events = view.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    completed = [e.path for e in events if e.type == "node.completed"]
    assert len(completed) == len(set(completed))  # no completed step recorded twice
    assert view.derive_state() == view.state
    assert rt.recover() == []  # nothing left to recover


@pytest.mark.parametrize("trial", range(20))
def test_sigkill_then_recover_loses_nothing_and_repeats_at_most_the_step_in_flight(
    tmp_path: Path, trial: int
) -> None:
    crash_trial(tmp_path, trial)


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(20, 220))
def test_sigkill_campaign(tmp_path: Path, trial: int) -> None:
    crash_trial(tmp_path, trial)


def test_eight_threads_and_four_processes_race_for_one_token(tmp_path: Path) -> None:
    import multiprocessing

    db, log = str(tmp_path / "race.db"), str(tmp_path / "race.log")
    k, n = 3, 6
    rt = Runtime(store=f"sqlite:///{db}")
    out = rt.run(paused_at(k, n), {"log": log})
    start = time.time() + 1.5  # a common start, after the processes have imported tarry
    results: list[str] = []
    lock = threading.Lock()

    def thread() -> None:
        r = resume_racing(db, out.token, start, n, k)
        with lock:
            results.append(r)

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pending = [pool.apply_async(resume_racing, (db, out.token, start, n, k)) for _ in range(4)]
        threads = [threading.Thread(target=thread) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        results += [p.get(WAIT) for p in pending]
    assert sorted(results) == ["lost"] * 11 + ["won"]
    view = rt.session(out.session_id)
    events = view.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert view.status == "completed" and view.derive_state() == view.state
    assert {i: len(v) for i, v in counts(Path(log))["end"].items()} == {i: 1 for i in range(n)}
