"""The crash campaign's quick slice, and proof that its checker catches each planted violation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from proof import crash
from proof import crash_child as child

SCRIPT = Path(crash.__file__)


def test_quick_slice_recovers_exactly_from_every_kill() -> None:
    result = crash.campaign(seed=2024, budget=crash.QUICK)
    assert result["failures"] == 0, "\n".join(result["failure_examples"])
    f = result["figures"]
    assert result["trials"] == crash.QUICK == f["trials"]
    # The slice must really crash, recover and re-run: a campaign that never kills proves nothing.
    assert f["sigkills"] >= crash.QUICK
    assert f["self_kills"] > 0 and f["external_kills"] > 0
    assert f["kills_of_recovering_processes"] > 0
    assert f["recoveries"] > 0 and f["steps_executed_again"] > 0


def test_the_same_campaign_fails_on_the_weaker_pause_durability() -> None:
    # durability="pause" loses every step completed since the last pause. Seed 17's trial 0
    # kills its first process right after the side effect of ledger write 26 (a self-kill: no
    # timing involved), eight steps after the last pause: the checks must see them run again.
    result = crash.campaign(seed=17, only=0, durability="pause")
    assert result["failures"] == 1, result
    [example] = result["failure_examples"]
    assert "generation 0 left 9 steps to run again" in example, example
    assert "self-kill at write 26 (after_effect)" in example
    # The same trial on durability="step" loses nothing.
    assert crash.campaign(seed=17, only=0)["failures"] == 0


def test_script_writes_the_result_and_exits_zero(tmp_path: Path) -> None:
    out = tmp_path / "crash.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(out), "--seed", "5", "--trials", "2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert {"name", "trials", "failures", "seconds", "seed", "figures", "failure_examples"} <= set(
        result
    )
    assert (result["name"], result["trials"], result["failures"], result["seed"]) == (
        "crash",
        2,
        0,
        5,
    )
    assert "crash campaign" in proc.stdout


# -- the checker against doctored observations ------------------------------------------------
@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> tuple[crash.Observed, crash.Reference]:
    """One uninterrupted run, in this process: its observation and the reference it gives."""
    d = tmp_path_factory.mktemp("clean")
    db, ledger = str(d / "runs.db"), str(d / "ledger.db")
    ready_r, ready_w = os.pipe()
    try:
        child.main(child.Plan(0), db, ledger, ready_w)
    finally:
        os.close(ready_r)
        os.close(ready_w)
    obs = crash.observe(db, ledger, frozenset())
    return obs, crash.reference_of(obs, 0.0)


def renumber(events: list) -> list:
    return [attrs.evolve(e, seq=i) for i, e in enumerate(events, start=1)]


def first(obs: crash.Observed, pred: Callable) -> int:
    return next(i for i, e in enumerate(obs.events) if pred(e))


def step_path(ref: crash.Reference, name: str) -> tuple:
    return next(p for p in sorted(ref.steps, key=str) if p[-1] == name)


def rows_of(obs: crash.Observed, path: tuple) -> list[int]:
    return [i for i, r in enumerate(obs.rows) if r[1] == path]


def test_a_clean_run_passes(clean) -> None:
    obs, ref = clean
    assert crash.check(obs, ref) == []
    assert crash.reruns(obs.rows) == 0
    assert len(ref.steps) == 30 and ref.output["units"] == sum(child.INPUT["qty"])


def test_a_duplicated_completion_is_reported(clean) -> None:
    obs, ref = clean
    path = step_path(ref, "note")
    i = first(obs, lambda e: e.type == "node.completed" and e.path == path)
    events = renumber([*obs.events[: i + 1], obs.events[i], *obs.events[i + 1 :]])
    found = crash.check(attrs.evolve(obs, events=events), ref)
    assert any("completed 2 times" in v for v in found), found


def test_a_seq_gap_is_reported(clean) -> None:
    obs, ref = clean
    i = first(obs, lambda e: e.type == "container.iteration_started")
    found = crash.check(attrs.evolve(obs, events=[*obs.events[:i], *obs.events[i + 1 :]]), ref)
    assert found and all("event seqs are not" in v for v in found), found


def test_a_lost_step_is_reported(clean) -> None:
    obs, ref = clean
    path = step_path(ref, "price")
    # Its execution vanished from the ledger...
    [row] = rows_of(obs, path)
    found = crash.check(attrs.evolve(obs, rows=[*obs.rows[:row], *obs.rows[row + 1 :]]), ref)
    assert any("without its side effect there (lost" in v for v in found), found
    # ... or its completion vanished from the log.
    events = renumber(
        [e for e in obs.events if not (e.path == path and e.type.startswith("node."))]
    )
    found = crash.check(attrs.evolve(obs, events=events), ref)
    assert any("lost [" + "/".join(map(str, path)) in v for v in found), found


def test_a_different_output_or_state_is_reported(clean) -> None:
    obs, ref = clean
    found = crash.check(attrs.evolve(obs, output={**obs.output, "units": 0}), ref)
    assert any("output differs" in v for v in found), found
    found = crash.check(attrs.evolve(obs, consistent=False), ref)
    assert any("derive_state" in v for v in found), found
    found = crash.check(attrs.evolve(obs, status="failed"), ref)
    assert any("ended 'failed'" in v for v in found), found
    found = crash.check(attrs.evolve(obs, released=False), ref)
    assert found == ["the completed session still holds a lease"], found


def rerun(obs: crash.Observed, *paths: tuple, key: str | None = None) -> crash.Observed:
    """`obs` as if generation 0 had run each of `paths` and died before writing its completion
    (only run.started, seq 1, was stored), and generation 1 had then run everything."""
    first_runs = []
    for path in paths:
        [i] = rows_of(obs, path)
        k, p, attempt, _ = obs.rows[i]
        first_runs.append((key or k, p, attempt, 0))
    rows = first_runs + [(k, p, a, 1) for k, p, a, _ in obs.rows]
    return attrs.evolve(obs, rows=rows, boundaries=(0, 1))


def test_an_in_flight_rerun_is_allowed_only_after_a_kill(clean) -> None:
    obs, ref = clean
    again = rerun(obs, ("prepare",))
    # Generation 0 died while the step was in flight: running it again is the guarantee.
    assert crash.check(attrs.evolve(again, killed=frozenset({0})), ref) == []
    # The same re-run after a generation that was never killed is a repeat.
    found = crash.check(attrs.evolve(again, killed=frozenset()), ref)
    assert any("which was not killed" in v for v in found), found


def test_a_run_after_the_completion_was_written_is_reported(clean) -> None:
    obs, ref = clean
    path = step_path(ref, "hold")
    [row] = rows_of(obs, path)
    # Generation 0 wrote everything and died; generation 1 ran `hold` once more.
    late = attrs.evolve(
        obs,
        rows=[*obs.rows, (obs.rows[row][0], path, 1, 1)],
        boundaries=(0, len(obs.events)),
        killed=frozenset({0}),
    )
    found = crash.check(late, ref)
    assert any("ran again after its completion was written" in v for v in found), found


def test_two_steps_in_flight_for_one_kill_are_reported(clean) -> None:
    obs, ref = clean
    again = rerun(obs, ("prepare",), step_path(ref, "note"))
    found = crash.check(attrs.evolve(again, killed=frozenset({0})), ref)
    assert any("generation 0 left 2 steps to run again" in v for v in found), found


def test_a_rerun_under_another_idempotency_key_is_reported(clean) -> None:
    obs, ref = clean
    again = rerun(obs, ("prepare",), key="0" * 32)
    found = crash.check(attrs.evolve(again, killed=frozenset({0})), ref)
    assert any("under 2 idempotency keys" in v for v in found), found


def test_a_completion_by_a_process_that_did_not_run_the_step_is_reported(clean) -> None:
    obs, ref = clean
    # Every completion after seq 1 was written by generation 1, which ran nothing.
    found = crash.check(attrs.evolve(obs, boundaries=(0, 1), killed=frozenset({0})), ref)
    assert any("completed by generation 1 without its side effect" in v for v in found), found
