"""Crash campaign: SIGKILL a durable run at seeded random points, recover, prove nothing was lost.

Each trial runs the flow of `crash_child` (nested containers, two gates, an interrupt, a retried
step; every step writes one row per execution to a SQLite ledger) on a fresh SQLite store with
`durability="step"`, in a chain of forked generations. Each generation either finishes the
session or is killed with SIGKILL: by itself at the n-th ledger write of its process (at one of
`crash_child.PHASES`), or by the parent after a random delay (which lands anywhere: in store
writes, the engine, `recover()` itself). The next generation recovers the session once its lease
has run out. When the session is complete, `check` compares the event log and the ledger with an
uninterrupted reference run.

    .venv/bin/python tests/proof/crash.py --json OUT.json [--seed N] [--full] [--trial T --keep]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

if __package__ in (None, ""):  # run as a script: make `proof` importable as in the tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proof import crash_child as child  # noqa: E402
from tarry import Event, Runtime  # noqa: E402
from tarry.snapshots import SQLiteStore  # noqa: E402

QUICK, FULL = 30, 1000
MAX_GENERATIONS = 12
#: Trials between two measurements of an uninterrupted run's duration.
REMEASURE = 50

#: (idempotency key, path, attempt, generation): one execution of a step, in commit order.
LedgerRow = tuple[str, tuple[Any, ...], int, int]


@attrs.frozen
class Reference:
    """What the uninterrupted run did."""

    output: Any
    positions: frozenset[tuple[Any, ...]]  # every path with a node.completed
    steps: frozenset[tuple[Any, ...]]  # the paths of the steps among them
    writes: int  # ledger rows
    seconds: float  # how long its generation ran


@attrs.frozen
class Observed:
    """What a trial left behind, as read back from its store and ledger."""

    status: str
    output: Any
    events: Sequence[Event]
    rows: Sequence[LedgerRow]
    killed: frozenset[int]  # generations that died of SIGKILL
    consistent: bool  # SessionView.derive_state() == SessionView.state
    #: The last stored seq when each generation started (the parent reads it between two).
    boundaries: tuple[int, ...] = (0,)
    released: bool = True  # no lease left on the session: nothing for recover() to take


# -- the checker -------------------------------------------------------------------------------
def check(obs: Observed, ref: Reference) -> list[str]:
    """Every way `obs` departs from an exact recovery of the reference run (empty: none).

    Order comes from the generations, not from clocks: events with seq <= `obs.boundaries[g]`
    were durable before generation g started, and those after it up to the next boundary were
    written by generation g."""
    bad: list[str] = []
    events = obs.events
    # 1. the outcome
    if obs.status != "completed":
        bad.append(f"session ended {obs.status!r}, not 'completed'")
    if obs.output != ref.output:
        bad.append(f"output differs from the uninterrupted run: {obs.output!r}")
    if not events or events[-1].type != "run.completed":
        bad.append("the log does not end with run.completed")
    if not obs.released:
        bad.append("the completed session still holds a lease")
    # 2. the log
    seqs = [e.seq for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        gaps = sorted(set(range(1, max(seqs, default=0) + 1)) - set(seqs))
        bad.append(f"event seqs are not 1..{len(seqs)} (missing {gaps[:5]}, order {seqs[:3]}...)")
    if not obs.consistent:
        bad.append("derive_state() differs from the stored state")
    # 5. exactly one completion per position, the same positions as the reference
    completed: dict[tuple[Any, ...], list[Event]] = defaultdict(list)
    for e in events:
        if e.type == "node.completed":
            completed[e.path].append(e)
    for path, done in completed.items():
        if len(done) > 1:
            bad.append(f"{_p(path)} completed {len(done)} times (seqs {[e.seq for e in done]})")
    if set(completed) != ref.positions:
        lost = sorted(ref.positions - set(completed), key=str)
        extra = sorted(set(completed) - ref.positions, key=str)
        bad.append(f"completed positions differ: lost {_ps(lost)}, extra {_ps(extra)}")
    # 3. the ledger against the completions: no loss, no repeat once a completion was durable
    by_path: dict[tuple[Any, ...], list[LedgerRow]] = defaultdict(list)
    for row in obs.rows:
        by_path[row[1]].append(row)
    for path in sorted(ref.steps, key=str):
        done = completed.get(path)
        if not done:
            continue
        gens = [r[3] for r in by_path.get(path, [])]
        writer = bisect.bisect_left(obs.boundaries, done[0].seq) - 1
        if writer not in gens:
            bad.append(
                f"{_p(path)} was completed by generation {writer} without its side "
                f"effect there (lost; executions in generations {gens})"
            )
        late = [g for g in gens if g < len(obs.boundaries) and obs.boundaries[g] >= done[0].seq]
        if late:
            bad.append(
                f"{_p(path)} ran again after its completion was written "
                f"(seq {done[0].seq}; in generations {late})"
            )
    for path in sorted(set(by_path) - ref.steps, key=str):
        bad.append(f"the ledger has executions of {_p(path)}, which the reference never ran")
    # 4. repeats: same key, only across killed generations, one step in flight per kill
    keys: dict[str, tuple[Any, ...]] = {}
    in_flight: dict[int, set[tuple[Any, ...]]] = defaultdict(set)
    for path, rows in by_path.items():
        found = {r[0] for r in rows}
        if len(found) > 1:
            bad.append(f"{_p(path)} ran under {len(found)} idempotency keys")
        for key in found:
            if keys.setdefault(key, path) != path:
                bad.append(f"{_p(path)} and {_p(keys[key])} share idempotency key {key}")
        by_attempt: dict[int, list[int]] = defaultdict(list)
        for row in rows:  # in ledger (commit) order
            by_attempt[row[2]].append(row[3])
        for attempt, gens in by_attempt.items():
            if gens != sorted(set(gens)):
                bad.append(
                    f"{_p(path)} attempt {attempt} ran twice in one process or out of "
                    f"order (generations {gens})"
                )
            for gen in gens[:-1]:
                in_flight[gen].add(path)
                if gen not in obs.killed:
                    bad.append(
                        f"{_p(path)} attempt {attempt} ran again after generation {gen}, "
                        f"which was not killed (generations {gens})"
                    )
    for gen, paths in sorted(in_flight.items()):
        if len(paths) > 1:
            bad.append(f"generation {gen} left {len(paths)} steps to run again: {_ps(paths)}")
    return bad


def reruns(rows: Sequence[LedgerRow]) -> int:
    """Executions beyond the first of each (step, attempt): the in-flight steps run again."""
    counts = Counter((r[1], r[2]) for r in rows)
    return sum(n - 1 for n in counts.values())


def _p(path: tuple[Any, ...]) -> str:
    return "/".join(map(str, path))


def _ps(paths: Any) -> str:
    return "[" + ", ".join(_p(p) for p in list(paths)[:5]) + "]"


# -- generations -------------------------------------------------------------------------------
def spawn(plan: child.Plan, db: str, ledger: str) -> tuple[str, str, float]:
    """Fork one generation; returns ("done" | "killed" | "error", detail, seconds it ran
    after reporting ready)."""
    ready_r, ready_w = os.pipe()
    err = f"{db}.gen{plan.generation}.err"
    pid = os.fork()
    if pid == 0:  # the child: never return into the caller's stack
        code = 0
        try:
            os.close(ready_r)
            child.main(plan, db, ledger, ready_w)
        except BaseException:
            code = 2
            with open(err, "w") as f:
                f.write(traceback.format_exc())
        os._exit(code)
    os.close(ready_w)
    try:
        deadline = time.monotonic() + child.GENERATION_TIMEOUT
        ready, _, _ = select.select([ready_r], [], [], child.GENERATION_TIMEOUT)
        began = time.perf_counter()
        if plan.delay is not None and ready:
            # After the ready byte, the pipe's only news is its end: the child exited (its
            # copy of the write end closed with it). Waited for up to the delay, so that a run
            # that ends first is timed exactly (see `Trial.uninterrupted`).
            os.read(ready_r, 1)
            ended, _, _ = select.select([ready_r], [], [], plan.delay)
            if not ended:
                os.kill(pid, signal.SIGKILL)  # harmless if it exited meanwhile (not yet reaped)
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "error", f"generation {plan.generation} hung ({plan.describe()})", 0.0
            time.sleep(0.0005)
        ran = time.perf_counter() - began
    finally:
        os.close(ready_r)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return "killed", plan.describe(), ran
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return "done", "", ran
    detail = Path(err).read_text() if os.path.exists(err) else f"status {status}"
    return "error", f"generation {plan.generation} failed ({plan.describe()}):\n{detail}", ran


def make_plan(rng: random.Random, generation: int, ref: Reference, durability: str) -> child.Plan:
    """A seeded kill: half self-kills at a ledger write, half external kills after a delay.
    Later generations are killed early, so that recovery itself is hit."""
    first = generation == 0
    if rng.random() < 0.5:
        write = rng.randint(1, ref.writes if first else 6)
        phase = rng.choice(child.PHASES)
        return child.Plan(generation, write=write, phase=phase, durability=durability)
    if rng.random() < 0.25:
        delay = rng.uniform(0.0, 0.01)  # inside recover() or the first steps
    else:
        delay = rng.uniform(0.0, ref.seconds if first else ref.seconds / 2)
    return child.Plan(generation, delay=delay, durability=durability)


@attrs.frozen
class Trial:
    """How one trial went: what it left behind, what the checker found, what was killed."""

    number: int
    observed: Observed | None
    violations: list[str]
    plans: list[str]  # what each generation was told, and how it ended
    kills: Counter
    #: Seconds the first generation ran when its kill came too late to land: then it ran to
    #: its end, an uninterrupted run timed as the reference is (None: it was killed).
    uninterrupted: float | None = None


def run_trial(
    seed: int, number: int, ref: Reference, workdir: Path, durability: str = "step"
) -> Trial:
    rng = random.Random(f"crash/{seed}/{number}")
    db, ledger = str(workdir / "runs.db"), str(workdir / "ledger.db")
    kills_left = rng.randint(1, 3)
    killed: set[int] = set()
    plans: list[str] = []
    kills: Counter = Counter()
    boundaries: list[int] = []
    uninterrupted = None
    for generation in range(MAX_GENERATIONS):
        boundaries.append(stored_seq(db))
        if kills_left:
            plan = make_plan(rng, generation, ref, durability)
        else:
            plan = child.Plan(generation, durability=durability)
        kills_left -= plan.kills
        how, detail, ran = spawn(plan, db, ledger)
        plans.append(f"gen {generation}: {plan.describe()} -> {how}")
        if how == "error":
            return Trial(number, None, [detail], plans, kills)
        if how == "done":
            kills["planned_not_landed"] += plan.kills  # the run ended before the kill
            if generation == 0:
                uninterrupted = ran
            break
        killed.add(generation)
        kind = plan.phase if plan.write is not None else "external"
        kills[kind] += 1
        if generation:
            kills["during_recovery"] += 1
    else:
        return Trial(
            number, None, [f"not complete after {MAX_GENERATIONS} generations"], plans, kills
        )
    observed = observe(db, ledger, frozenset(killed), tuple(boundaries))
    return Trial(number, observed, check(observed, ref), plans, kills, uninterrupted)


def stored_seq(db: str) -> int:
    """The last event seq the session has in the store (0 before it exists)."""
    if not os.path.exists(db):
        return 0
    store = SQLiteStore(db)
    try:
        events = store.events(child.SESSION)
        return events[-1].seq if events else 0
    finally:
        store.close()  # no connection may be open across the next fork


def observe(
    db: str, ledger: str, killed: frozenset[int], boundaries: tuple[int, ...] = (0,)
) -> Observed:
    store = SQLiteStore(db)
    try:
        view = Runtime(store=store).session(child.SESSION)
        state = view.state
        record = store.load(child.SESSION)
        return Observed(
            view.status,
            state.output,
            view.events(),
            child.read_ledger(ledger),
            killed,
            view.derive_state() == state,
            boundaries,
            record is not None and record.lease_owner is None,
        )
    finally:
        store.close()  # no connection may be open across the next fork


def reference_run(workdir: Path, runs: int = 3) -> Reference:
    """Uninterrupted generations, forked like the others. The quickest one's duration scales
    the external kill delays: on a loaded machine a slow outlier would make most of them land
    after the run has ended."""
    seconds = []
    for n in range(runs):
        db, ledger = str(workdir / f"ref{n}.db"), str(workdir / f"ref{n}-ledger.db")
        how, detail, ran = spawn(child.Plan(0), db, ledger)
        if how != "done":
            msg = f"the uninterrupted reference run failed: {detail}"
            raise child.CampaignError(msg)
        seconds.append(ran)
    return reference_of(observe(db, ledger, frozenset()), min(seconds))


def reference_seconds(base: Path, number: int) -> float:
    """How long an uninterrupted run takes now (the machine's load changes during a campaign);
    only the kill delays depend on it, never which kills are drawn."""
    db, ledger = str(base / f"again{number}.db"), str(base / f"again{number}-ledger.db")
    how, detail, ran = spawn(child.Plan(0), db, ledger)
    if how != "done":
        msg = f"an uninterrupted run failed: {detail}"
        raise child.CampaignError(msg)
    return ran


def reference_of(obs: Observed, seconds: float) -> Reference:
    """The reference an uninterrupted run's observation gives; refused if it is not clean."""
    positions = frozenset(e.path for e in obs.events if e.type == "node.completed")
    steps = frozenset(
        e.path for e in obs.events if e.type == "node.started" and e.data.get("kind") == "step"
    )
    ref = Reference(obs.output, positions, steps, len(obs.rows), seconds)
    problems = check(obs, ref)
    # One execution per step, plus the failed first attempt of `flaky`.
    if problems or reruns(obs.rows) or len(obs.rows) != len(steps) + 1:
        msg = f"the reference run is not clean: {problems} ({len(obs.rows)} ledger rows)"
        raise child.CampaignError(msg)
    return ref


# -- the campaign ------------------------------------------------------------------------------
def campaign(
    *,
    seed: int,
    budget: int = QUICK,
    only: int | None = None,
    keep: Path | None = None,
    durability: str = "step",
) -> dict:
    """Run `budget` trials (or just trial `only`); returns the proof-harness result dict.

    `keep`: copy every trial's files there. `durability="pause"` runs the same campaign on the
    weaker mode, which loses completed steps on a kill: the checks must then fail."""
    if threading.active_count() > 1:
        # Forking a process with other threads can copy a lock (SQLite's, logging's) that one
        # of them holds; run the trials in a fresh single-threaded interpreter instead.
        return _in_subprocess(seed=seed, budget=budget, only=only, durability=durability)
    started = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="tarry-crash-"))
    failures: list[str] = []
    totals: Counter = Counter()
    numbers = [only] if only is not None else list(range(budget))
    try:
        ref = reference_run(base)
        for number in numbers:
            if number and number % REMEASURE == 0:
                ref = attrs.evolve(ref, seconds=min(ref.seconds, reference_seconds(base, number)))
                totals["processes"] += 1
            workdir = base / f"t{number}"
            workdir.mkdir()
            trial = run_trial(seed, number, ref, workdir, durability)
            _tally(totals, trial)
            if trial.uninterrupted is not None:
                # A first generation outran its kill: the machine runs faster now than when
                # the reference was timed (the load dropped), and most kill delays drawn from
                # that reference would land after the run has ended; the quick slice (fewer
                # trials than REMEASURE) would then fall short of its kills. This run was an
                # uninterrupted one: it times the machine as it is now, for free.
                ref = attrs.evolve(ref, seconds=min(ref.seconds, trial.uninterrupted))
            if trial.violations:
                failures.append(
                    f"seed={seed} trial={number}: {'; '.join(trial.violations[:3])} "
                    f"[{' | '.join(trial.plans)}] (rerun: tests/proof/crash.py --seed {seed} "
                    f"--trial {number} --keep{'' if durability == 'step' else ' --durability pause'})"
                )
            if keep is None and not trial.violations:
                shutil.rmtree(workdir, ignore_errors=True)
    finally:
        if keep is not None:
            shutil.copytree(base, keep, dirs_exist_ok=True)
        shutil.rmtree(base, ignore_errors=True)
    seconds = time.perf_counter() - started
    figures: dict[str, Any] = {
        "trials": len(numbers),
        "sigkills": totals["sigkills"],
        "self_kills": totals["sigkills"] - totals["external"],
        **{f"self_kills_{phase}": totals[phase] for phase in child.PHASES},
        "external_kills": totals["external"],
        "kills_of_recovering_processes": totals["during_recovery"],
        "planned_kills_not_landed": totals["planned_not_landed"],
        "max_kills_in_one_trial": totals["max_kills"],
        "recoveries": totals["recoveries"],
        "gate_and_interrupt_resumes": totals["resumes"],
        "processes": totals["processes"] + 3,  # + the reference runs
        "steps_per_run": ref.writes - 1,
        "ledger_rows": totals["rows"],
        "steps_executed_again": totals["reruns"],
        "max_executions_of_one_step_attempt": totals["max_runs"],
        "events_checked": totals["events"],
        "durability": durability,
        "lease_seconds": child.LEASE,
        "reference_run_seconds": round(ref.seconds, 3),
        "seconds_per_trial": round(seconds / max(1, len(numbers)), 3),
    }
    return {
        "name": "crash",
        "trials": len(numbers),
        "failures": len(failures),
        "seconds": round(seconds, 2),
        "seed": seed,
        "figures": figures,
        "failure_examples": failures[:5],
    }


def _tally(totals: Counter, trial: Trial) -> None:
    totals["processes"] += len(trial.plans)
    kills = sum(n for k, n in trial.kills.items() if k in child.PHASES or k == "external")
    totals["sigkills"] += kills
    totals["max_kills"] = max(totals["max_kills"], kills)
    for key in (*child.PHASES, "external", "during_recovery", "planned_not_landed"):
        totals[key] += trial.kills[key]
    obs = trial.observed
    if obs is None:
        return
    for e in obs.events:
        if e.type == "run.resumed":
            totals["recoveries" if e.data.get("recovered") else "resumes"] += 1
    totals["rows"] += len(obs.rows)
    totals["reruns"] += reruns(obs.rows)
    totals["events"] += len(obs.events)
    per_step = Counter((r[1], r[2]) for r in obs.rows)
    totals["max_runs"] = max(totals["max_runs"], max(per_step.values(), default=0))


def _in_subprocess(*, seed: int, budget: int, only: int | None, durability: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="tarry-crash-") as tmp:
        out = Path(tmp) / "crash.json"
        args = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--json",
            str(out),
            "--seed",
            str(seed),
            "--trials",
            str(budget),
            "--durability",
            durability,
        ]
        if only is not None:
            args += ["--trial", str(only)]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=3600)
        if not out.exists():
            msg = f"the campaign process failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
            raise child.CampaignError(msg)
        return json.loads(out.read_text())


def summary(result: dict) -> str:
    f = result["figures"]
    head = (
        f"crash campaign (seed {result['seed']}, durability={f['durability']}): "
        f"{result['trials']} trials, {result['failures']} failures, in {result['seconds']} s. "
        f"{f['sigkills']} SIGKILLs ({f['self_kills']} self-inflicted around a ledger write, "
        f"{f['external_kills']} external after a random delay; "
        f"{f['kills_of_recovering_processes']} of a process that was itself recovering), "
        f"{f['recoveries']} recoveries over {f['processes']} processes; "
        f"{f['steps_executed_again']} in-flight steps ran again. "
    )
    if result["failures"]:
        return head + "Some trials broke a guarantee: see the examples."
    return head + (
        "In every trial: no completed step lost or repeated, every repeat under the same "
        "idempotency key, event seqs gap-free, derived state equal to the stored one, and "
        "the output equal to the uninterrupted run's."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the result here")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--full", action="store_true", help=f"{FULL} trials (make proof)")
    parser.add_argument("--trials", type=int, help=f"number of trials (default {QUICK})")
    parser.add_argument("--trial", type=int, help="run only this trial")
    parser.add_argument("--keep", action="store_true", help="keep the trials' files")
    parser.add_argument(
        "--durability",
        choices=("step", "pause"),
        default="step",
        help="pause: the weaker mode, on which the checks must fail",
    )
    args = parser.parse_args(argv)
    budget = args.trials or (FULL if args.full else QUICK)
    keep = Path(tempfile.mkdtemp(prefix=f"tarry-crash-{args.seed}-")) if args.keep else None
    result = campaign(
        seed=args.seed, budget=budget, only=args.trial, keep=keep, durability=args.durability
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(summary(result))
    for example in result["failure_examples"]:
        print(" -", example)
    if keep is not None:
        print(f"files kept in {keep}")
    return 0 if result["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
