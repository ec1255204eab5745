"""The concurrency stress campaign: its quick slice, and its checker catching planted violations."""

from __future__ import annotations

import copy
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import tarry
from proof import stress

actors = stress.actors  # the module the child processes run, as the campaign imported it

# -- the quick slice --------------------------------------------------------------------------


def test_quick_slice_keeps_every_guarantee() -> None:
    result = stress.campaign(seed=11)
    assert result["failures"] == 0, "\n".join(result["failure_examples"])
    f = result["figures"]
    # Not vacuous: actors of several processes really raced on the same tokens.
    assert (f["threads"], f["processes"]) == (16, 4)
    assert f.get("ok.resume", 0) > 50 and f.get("refused.TokenAlreadyUsed", 0) > 50
    assert f["tokens_raced_across_processes"] > 10
    assert f["events_checked"] > 1000


@pytest.mark.skipif(not os.environ.get("TARRY_TEST_POSTGRES"), reason="TARRY_TEST_POSTGRES unset")
def test_quick_slice_on_postgres_keeps_every_guarantee() -> None:
    result = stress.postgres_campaign(seed=11)
    assert result is not None
    assert result["failures"] == 0, "\n".join(result["failure_examples"])
    assert result["figures"]["store"] == "postgresql"
    assert result["figures"].get("ok.resume", 0) > 20


# -- the checker, on a small hand-made history ------------------------------------------------


def _op(who: str, n: int, op: str, **fields: Any) -> dict[str, Any]:
    proc = who.split("/")[0]
    base = {
        "who": who,
        "proc": proc,
        "n": n,
        "op": op,
        "sid": "s1",
        "token": None,
        "exc": None,
        "t0": 10.0 + n,
        "t1": 10.5 + n,
        "events": [],
    }
    return base | fields


def _history() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """s1 started (pausing with T1), T1 learned by a child and resumed there (pausing with T2),
    and T1 refused to a thread of the parent."""
    sessions = {
        "s1": {
            "status": "paused",
            "state_status": "paused",
            "derived_equal": True,
            "live_token": "T2",
            "events": [
                [1, "run.started", "a"],
                [2, "node.started", "b"],
                [3, "run.paused", "c"],
                [4, "run.resumed", "d"],
                [5, "node.completed", "e"],
                [6, "run.paused", "f"],
            ],
        }
    }
    ops = [
        _op(
            "main/t0",
            0,
            "start",
            outcome="paused",
            out_token="T1",
            reason="",
            error=None,
            events=[
                [1, "run.started", "s1", "a"],
                [2, "node.started", "s1", "b"],
                [3, "run.paused", "s1", "c"],
            ],
        ),
        _op("c0/t1", 0, "learn", outcome="paused", out_token="T1", seq=3, status="paused"),
        _op(
            "c0/t1",
            1,
            "resume",
            token="T1",
            outcome="paused",
            out_token="T2",
            reason="more",
            error=None,
            events=[
                [4, "run.resumed", "s1", "d"],
                [5, "node.completed", "s1", "e"],
                [6, "run.paused", "s1", "f"],
            ],
        ),
        _op("main/t1", 0, "resume", token="T1", exc="TokenAlreadyUsed"),
    ]
    return sessions, ops


def _problems(plant: Any) -> list[str]:
    sessions, ops = _history()
    plant(sessions, ops)
    return stress.check(sessions, ops)


def test_a_clean_history_passes() -> None:
    assert _problems(lambda s, o: None) == []


def _second_winner(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    rival = copy.deepcopy(o[2]) | {"who": "c3/t0", "proc": "c3", "n": 5}
    o.append(rival)


def _seq_gap(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    del s["s1"]["events"][4]


def _success_without_its_events(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    # The resume said it succeeded, but the store has nothing after the first pause.
    s["s1"]["events"] = s["s1"]["events"][:3]
    s["s1"]["live_token"] = "T1"


def _refusal_that_wrote(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    o[2]["exc"] = "ConcurrentUpdate"


def _phantom_event(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    s["s1"]["events"].append([7, "run.cancelled", "g"])
    s["s1"].update(status="cancelled", state_status="cancelled", live_token=None)


def _derived_differs(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    s["s1"]["derived_equal"] = False


def _stuck(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    s["s1"].update(status="running", live_token=None)


def _unreachable(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    s["s1"]["live_token"] = None


def _token_for_two_pauses(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    o[1]["seq"] = 6


def _cancel_of_a_used_token(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    # cancel(T1) after T1's resume: it consumed the next pause (T2's) instead of refusing.
    o.append(
        _op(
            "c1/t0",
            0,
            "cancel",
            token="T1",
            outcome="error",
            out_token=None,
            reason=None,
            error="cancelled",
            events=[[7, "run.cancelled", "s1", "g"]],
        )
    )
    s["s1"]["events"].append([7, "run.cancelled", "g"])
    s["s1"].update(status="cancelled", state_status="cancelled", live_token=None)


def _outcome_contradicts_events(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    o[2]["outcome"] = "ok"


def _unexpected_exception(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    o[3].update(exc="KeyError", unexpected="KeyError: 'x' (at runtime.py:1 in resume)")


def _stopped_without_abort(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
    o[2]["reason"] = "aborted"
    # An abort after the run, or one that was refused, cannot have stopped it.
    o.append(_op("main/t2", 0, "abort", resumable=True, t0=50.0, t1=50.1))
    o.append(_op("c0/t0", 9, "abort", resumable=True, exc="UnknownSession"))


PLANTS = [
    (_second_winner, "has 2 winners"),
    (_second_winner, "has 2 successful writers"),
    (_seq_gap, "event seqs are not 1..5 (missing [5])"),
    (_success_without_its_events, "lost event: c0/t1#1 resume(s1) succeeded with run.resumed #4"),
    (_refusal_that_wrote, "raised ConcurrentUpdate but its run.resumed #4 of s1 is stored"),
    (_phantom_event, "event #7 (run.cancelled) of s1 was emitted by no operation"),
    (_derived_differs, "derive_state(events) != state"),
    (_stuck, "last event run.paused but status running"),
    (_unreachable, "status paused with no live token"),
    (_token_for_two_pauses, "stands for two pauses"),
    (_cancel_of_a_used_token, "consumed the pause at #6"),
    (_cancel_of_a_used_token, "has 2 winners"),
    (_outcome_contradicts_events, "returned ok after events run.resumed…run.paused"),
    (_unexpected_exception, "raised KeyError: 'x'"),
    (_stopped_without_abort, "paused as aborted with no abort requested"),
]


@pytest.mark.parametrize(("plant", "expected"), PLANTS, ids=[p.__name__[1:] for p, _ in PLANTS])
def test_the_checker_reports_a_planted_violation(plant: Any, expected: str) -> None:
    problems = _problems(plant)
    assert any(expected in p for p in problems), problems


def test_an_abort_in_the_same_process_while_the_run_ran_explains_its_stop() -> None:
    def plant(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
        o[2]["reason"] = "aborted"
        o.append(_op("c0/t0", 0, "abort", resumable=True, t0=11.2, t1=11.3))

    assert _problems(plant) == []


def test_an_abort_or_cancel_from_another_process_while_the_run_ran_explains_its_stop() -> None:
    # Stop requests go through the store: whichever process asked, the run sees them.
    def aborted(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
        o[2]["reason"] = "aborted"
        o.append(_op("main/t3", 0, "abort", resumable=True, t0=11.2, t1=11.3))

    def cancelled(s: dict[str, Any], o: list[dict[str, Any]]) -> None:
        o[2].update(outcome="error", error="cancelled", reason=None)
        o[2]["events"][-1][1] = "run.cancelled"
        s["s1"]["events"][-1][1] = "run.cancelled"
        s["s1"].update(status="cancelled", state_status="cancelled", live_token=None)
        o.append(_op("main/t3", 0, "cancel", sid="s1", outcome="running", t0=11.2, t1=11.3))

    assert _problems(aborted) == []
    assert [p for p in _problems(cancelled) if "no abort requested" in p] == []


def test_a_run_paused_as_aborted_answers_a_left_over_abort_not_a_cancel_asked_meanwhile() -> None:
    """An abort left over from before, then a cancel asked while a run ran: the run pauses as
    aborted (it answered the abort), and the cancel, still stored, ends the next run."""

    def op(who: str, kind: str, t0: float, t1: float, **more: Any) -> dict[str, Any]:
        return {"who": who, "n": 0, "op": kind, "sid": "s1", "exc": None, "t0": t0, "t1": t1} | more

    ops = [
        op("c1/t0", "abort", 0.0, 0.1, resumable=True),
        op("main/t0", "cancel", 1.0, 5.0, outcome="running"),
        op("c2/t0", "resume", 2.0, 3.0, outcome="paused", reason="aborted"),
        op("main/t1", "resume", 6.0, 7.0, outcome="error", error="cancelled", reason=None),
    ]
    assert stress._check_aborts(ops) == []


def test_an_actor_stuck_past_its_grace_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    class Stuck:
        """A runtime whose every call blocks until the test ends."""

        def __getattr__(self, name: str) -> Any:
            return lambda *args, **kwargs: release.wait(5.0)

    monkeypatch.setattr(actors, "GRACE", 0.2)
    board = actors.Board(actors.session_ids(1.0), time.time())
    try:
        ops, hung = actors.run_actors(Stuck(), "main", 1, 1, board, time.time() + 0.5)
    finally:
        release.set()
    assert ops == [] and len(hung) == 1 and "0.2s after its deadline" in hung[0], hung


def test_an_actor_that_crashes_is_reported() -> None:
    class Broken:
        """A runtime whose calls return something that is not an Outcome."""

        def __getattr__(self, name: str) -> Any:
            return lambda *args, **kwargs: object()

    board = actors.Board(actors.session_ids(1.0), time.time())
    ops, hung = actors.run_actors(Broken(), "main", 1, 1, board, time.time() + 0.2)
    # Each odd result is an unexpected failure of its operation, which the checker reports.
    assert ops and hung == []
    assert any("raised AttributeError" in p for p in stress.check({}, ops))


def test_a_child_process_that_dies_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = tmp_path / "dead_child.py"
    dead.write_text("import sys\nsys.exit(3)\n")
    monkeypatch.setattr(stress, "CHILD", dead)
    result = stress.run_campaign(
        f"sqlite:///{tmp_path / 'runs.db'}",
        seed=1,
        seconds=0.3,
        threads=1,
        processes=1,
        child_threads=1,
        workdir=tmp_path,
    )
    examples = "\n".join(result["failure_examples"])
    assert "child c0 did not start" in examples and "exited with code 3" in examples, examples


def test_the_campaign_fails_on_a_store_that_loses_events(tmp_path: Path) -> None:
    class Leaky(tarry.snapshots.SQLiteStore):
        """Drops the last event of every third write that carries several."""

        writes = 0

        def save(self, record: Any, expected_version: int, **kw: Any) -> int:
            events = list(kw.pop("events", ()))
            self.writes += 1
            if len(events) > 1 and self.writes % 3 == 0:
                events = events[:-1]
            return super().save(record, expected_version, events=events, **kw)

    result = stress.run_campaign(
        Leaky(tmp_path / "runs.db"),
        seed=2,
        seconds=1.0,
        threads=4,
        processes=0,
        child_threads=0,
        workdir=tmp_path,
    )
    # Sessions whose log misses events: the fold differs from the state, statuses disagree.
    assert result["failures"] > 0 and result["failure_examples"]
    assert any("derive_state(events) != state" in e for e in result["failure_examples"])


# -- races the campaign found, replayed deterministically ---------------------------------------

LOOP = tarry.Flow(
    "gates",
    [tarry.Loop("l", [lambda ctx: 1, tarry.Gate("g")], until=lambda ctx: False, max_iterations=5)],
)


def test_an_abort_that_arrives_as_a_run_ends_does_not_stop_the_next_run() -> None:
    # Drive._finish used to pop the session's abort flag, then leave `_running`, without the
    # Runtime's lock; an abort between the two found the session running and kept a flag
    # that the session's next run, which nobody asked to abort, stopped on.
    rt = tarry.Runtime()
    token = rt.run(LOOP).token

    class LateAbort(dict):  # type: ignore[type-arg]
        """Sends another thread's abort just before the finished run leaves the running set."""

        armed = True

        def pop(self, sid: str, *default: object) -> object:
            if self.armed:
                self.armed = False
                other = threading.Thread(target=rt.abort, args=(sid,))
                other.start()
                other.join(0.5)  # a fixed Runtime may hold its lock here: the abort waits
            return super().pop(sid, *default)

    rt._core.running.sessions = LateAbort()
    first = rt.resume(token, True)
    assert first.paused and first.pause.reason == ""
    rt._core.running.sessions = {}
    second = rt.resume(first.token, True)  # no abort is requested during this call
    assert second.pause.reason != "aborted"


def test_cancel_with_a_token_used_meanwhile_is_refused() -> None:
    # Runtime.cancel checked the token it was given, then loaded the session and consumed the
    # token the session held then: if the given one was used (and the run paused again) in
    # between, cancel succeeded, and the token had two winners.
    rt = tarry.Runtime(store=tarry.snapshots.MemoryStore())
    t1 = rt.run(LOOP).token
    load = rt.store.load
    resumed: list[tarry.Outcome] = []

    def racing_load(sid: str) -> Any:  # another thread resumes T1 just before cancel loads
        rt.store.load = load  # type: ignore[method-assign]
        resumed.append(rt.resume(t1, True))
        return load(sid)

    rt.store.load = racing_load  # type: ignore[method-assign]
    try:
        rt.cancel(t1)
    except tarry.TokenAlreadyUsed:
        pass
    else:
        raise AssertionError("cancel(T1) succeeded after T1 was used by a resume")
    assert resumed[0].paused and rt.session(resumed[0].session_id).status == "paused"
