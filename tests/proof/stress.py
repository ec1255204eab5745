"""Concurrency stress campaign: threads and processes race resume/cancel/abort on shared sessions.

Run: `.venv/bin/python tests/proof/stress.py --json OUT.json [--seed N] [--full]`.

16 threads of this process and 4 child processes (each with a few threads of its own) share
one store (an SQLite file in WAL mode; also PostgreSQL when `TARRY_TEST_POSTGRES` is set).
For a fixed time each actor picks seeded random sessions from one pool of ids and starts,
resumes, skips, cancels or aborts them, or reads them to learn their current token — so many
actors, in several processes, race on the same token. Every attempt is logged with the events
its thread emitted (seen through `Runtime.subscribe`), then `check` — a pure function of the
stored event logs and the operation log — verifies the guarantees:

1. one winner per token, and per event: no token or stored event has two successful users,
   and a token's winner consumed exactly the pause that minted it;
2. no lost event: every session's seqs are 1..N, every event a successful operation emitted is
   stored as emitted, every stored event was emitted by some operation, and a refused
   operation stored nothing;
3. `derive_state(events) == state`, each final status agrees with the session's last event and
   a session left paused or failed still has a live token; a run that stopped as aborted had
   an abort requested before it ended that no earlier stopped run answered;
4. nothing hung: every actor finished within its time plus a grace period.

The races are real thread and process schedules, so a seed fixes the choices, not the
interleaving: a failure example names the seed, actor and operation number to look at, and
`--keep DIR` writes the raw operation log and stored sessions to study.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import tarry

HERE = Path(__file__).resolve().parent
CHILD = HERE / "stress_child.py"
# The actors are imported as the top-level module `stress_child`, as the child processes
# import them, whether this file runs as a script or is imported by the tests.
sys.path.insert(0, str(HERE))
import stress_child as actors  # noqa: E402

QUICK = {"seconds": 3.0, "threads": 16, "processes": 4, "child_threads": 2}
FULL = {"seconds": 60.0, "threads": 16, "processes": 4, "child_threads": 2}
#: What each last event leaves a session as.
FINAL_STATUS = {
    "run.paused": "paused",
    "run.failed": "failed",
    "run.completed": "completed",
    "run.cancelled": "cancelled",
}
CONSUMERS = ("resume", "skip", "cancel")


# -- collecting what is stored ----------------------------------------------------------------


def dump_sessions(rt: tarry.Runtime, space: list[str]) -> dict[str, dict[str, Any]]:
    """Every session of the pool as plain data: its stored events and what its state says."""
    out: dict[str, dict[str, Any]] = {}
    for sid in space:
        try:
            view = rt.session(sid)
        except tarry.UnknownSession:
            continue
        events = view.events()
        out[sid] = {
            "status": view.status,
            "state_status": view.state.status,
            "derived_equal": view.derive_state() == view.state,
            "live_token": view.outcome.token,
            "events": [[e.seq, e.type, actors.digest(e)] for e in events],
        }
    return out


# -- the invariants ---------------------------------------------------------------------------


def _name(op: dict[str, Any]) -> str:
    return f"{op['who']}#{op['n']} {op['op']}({op.get('sid')})"


def check(sessions: dict[str, dict[str, Any]], ops: list[dict[str, Any]]) -> list[str]:
    """Every violation of the guarantees in the stored logs (`sessions`, as `dump_sessions`
    gives them) and the operation log (`ops`, as `actors.Actor.perform` records them). Pure."""
    problems: list[str] = []
    stored: dict[tuple[str, int], tuple[str, str]] = {}
    for sid, s in sessions.items():
        problems += _check_session(sid, s)
        for seq, type_, dig in s["events"]:
            stored[(sid, seq)] = (type_, dig)

    writers: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    refused: dict[tuple[str, int, str], dict[str, Any]] = {}  # what refused calls emitted
    minted: dict[str, tuple[str, int]] = {}  # token -> (session, seq of the pause it stands for)
    for op in ops:
        if op.get("unexpected"):
            problems.append(f"{_name(op)} raised {op['unexpected']}")
        evs = op.get("events", [])
        if op["exc"] is not None:
            for seq, _, sid, dig in evs:
                refused.setdefault((sid, seq, dig), op)
            continue
        for seq, type_, sid, dig in evs:
            writers[(sid, seq)].append(op)
            if stored.get((sid, seq)) != (type_, dig):
                problems.append(
                    f"lost event: {_name(op)} succeeded with {type_} #{seq} of "
                    f"{sid}, stored as {stored.get((sid, seq))}"
                )
        problems += _check_outcome(op, evs)
        token = op.get("out_token")
        if token and (evs or op["op"] == "learn"):
            at = (op["sid"], op["seq"]) if op["op"] == "learn" else (evs[-1][2], evs[-1][0])
            if minted.setdefault(token, at) != at:
                problems.append(
                    f"token {token[:12]}… stands for two pauses: {minted[token]} "
                    f"and {at} ({_name(op)})"
                )

    for (sid, seq), ws in writers.items():
        if len(ws) > 1:
            problems.append(
                f"event #{seq} of {sid} has {len(ws)} successful writers: "
                + ", ".join(map(_name, ws))
            )
    for (sid, seq), (type_, dig) in stored.items():
        if (sid, seq) in writers:
            continue
        culprit = refused.get((sid, seq, dig))
        if culprit is None:
            problems.append(f"event #{seq} ({type_}) of {sid} was emitted by no operation")
        else:  # a refusal must change nothing
            problems.append(
                f"{_name(culprit)} raised {culprit['exc']} but its {type_} #{seq} "
                f"of {sid} is stored"
            )
    problems += _check_tokens(ops, minted, stored)
    problems += _check_aborts(ops)
    return problems


def _check_session(sid: str, s: dict[str, Any]) -> list[str]:
    problems = []
    seqs = [e[0] for e in s["events"]]
    if seqs != list(range(1, len(seqs) + 1)):
        missing = sorted(set(range(1, max(seqs, default=0) + 1)) - set(seqs))
        problems.append(f"{sid}: event seqs are not 1..{len(seqs)} (missing {missing[:5]})")
    if not s["derived_equal"]:
        problems.append(f"{sid}: derive_state(events) != state")
    last = s["events"][-1][1] if s["events"] else None
    expected = FINAL_STATUS.get(last, "running")
    if s["status"] != expected or s["state_status"] != expected:
        problems.append(
            f"{sid}: last event {last} but status {s['status']} "
            f"(state says {s['state_status']}): stuck or inconsistent"
        )
    live = s["live_token"] is not None
    if live != (s["status"] in ("paused", "failed")):
        problems.append(f"{sid}: status {s['status']} with{'' if live else ' no'} live token")
    return problems


def _check_outcome(op: dict[str, Any], evs: list[list[Any]]) -> list[str]:
    """A successful call's result agrees with the events it emitted."""
    kind = op["op"]
    if kind in ("learn", "abort"):
        return []
    types = [e[1] for e in evs]
    if kind == "cancel" and op["outcome"] == "running":
        # A running session (in any process) was asked to stop: the request is stored, and
        # the run it stops emits run.cancelled itself.
        return [f"{_name(op)} asked a running session to stop but emitted {types}"] if types else []
    if op["outcome"] == "error" and op["error"] == "lease_lost":
        return [f"{_name(op)} lost its lease to another worker"]
    if not types:
        return [f"{_name(op)} succeeded but emitted nothing"]
    if {e[2] for e in evs} != {op["sid"]}:
        return [f"{_name(op)} emitted events of another session"]
    first = {
        "start": "run.started",
        "resume": "run.resumed",
        "skip": "run.resumed",
        "cancel": "run.cancelled",
    }[kind]
    end = {"ok": "run.completed", "paused": "run.paused"}.get(op["outcome"])
    if op["outcome"] == "error":
        end = "run.cancelled" if op["error"] == "cancelled" else "run.failed"
    if types[0] != first or types[-1] != end or (kind == "cancel" and len(types) != 1):
        return [f"{_name(op)} returned {op['outcome']} after events {types[0]}…{types[-1]}"]
    return []


def _check_tokens(
    ops: list[dict[str, Any]],
    minted: dict[str, tuple[str, int]],
    stored: dict[tuple[str, int], tuple[str, str]],
) -> list[str]:
    """One winner per token, and the winner consumed the pause that minted it."""
    problems = []
    winners: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for op in ops:
        if op["exc"] is not None or op["op"] not in (*CONSUMERS, "abort") or not op["events"]:
            continue
        seq = op["events"][0][0]
        if stored.get((op["sid"], seq - 1), ("",))[0] not in ("run.paused", "run.failed"):
            problems.append(f"{_name(op)} wrote #{seq}, which follows no pause")
        if op["token"] is None:
            continue
        winners[op["token"]].append(op)
        at = minted.get(op["token"])
        if at is not None and at != (op["sid"], seq - 1):
            problems.append(
                f"{_name(op)} used token {op['token'][:12]}… of the pause at "
                f"#{at[1]} but consumed the pause at #{seq - 1}"
            )
    for token, ws in winners.items():
        if len(ws) > 1:
            names = ", ".join(map(_name, ws))
            problems.append(f"token {token[:12]}… has {len(ws)} winners: {names}")
    return problems


def _check_aborts(ops: list[dict[str, Any]]) -> list[str]:
    """A run stopped by an abort had one requested before it ended, which no earlier stopped
    run answered: in its own process, or in any process through the store (an abort, or a
    cancel of the running session). A request that a run did not see before it paused stays
    stored with the session (API.md), so the next run of it may be the one it stops."""
    aborts = defaultdict(list)
    for op in ops:
        if op["exc"] is not None:
            continue
        if op["op"] == "abort":
            aborts[op["sid"]].append(op)
        elif op["op"] == "cancel" and op.get("outcome") == "running":
            aborts[op["sid"]].append({**op, "resumable": False})
    problems = []
    answered: set[int] = set()  # the requests a stopped run used up (by id of their op)
    runs = [
        op
        for op in ops
        if op["exc"] is None
        and op["op"] in ("start", "resume", "skip")
        and (
            (op.get("reason") == "aborted" and op["outcome"] == "paused")
            or op.get("error") == "cancelled"
        )
    ]
    for op in sorted(runs, key=lambda op: op["t1"]):
        stopped = op.get("reason") == "aborted"
        fits = [
            a
            for a in aborts[op["sid"]]
            if id(a) not in answered and a["t0"] <= op["t1"] and (stopped or not a["resumable"])
        ]
        if not fits:
            what = "paused as aborted" if stopped else "was cancelled"
            problems.append(f"{_name(op)} {what} with no abort requested before it ended")
            continue
        # One asked while it ran if any, else the oldest left over from an earlier run. A
        # run that paused as aborted answered an abort when one fits: a cancel stored beside
        # it stays stored for the next run (SessionStore.save keeps a request not honoured).
        # A run that paused as aborted answered an abort, not a cancel, whenever one fits
        # (asked while it ran or left over): a cancel asked meanwhile is the next run's.
        during = [a for a in fits if a["t1"] >= op["t0"]]
        pool = during or fits
        if stopped:
            aborts_ = [a for a in fits if a.get("resumable", True)]
            pool = [a for a in aborts_ if a["t1"] >= op["t0"]] or aborts_ or pool
        answered.add(id(min(pool, key=lambda a: a["t0"])))
    return problems


# -- the campaign ----------------------------------------------------------------------------


def _spawn(
    store: str, proc: str, threads: int, seed: int, seconds: float, durability: str, out: Path
) -> subprocess.Popen[str]:
    args = [
        sys.executable,
        str(CHILD),
        "--store",
        store,
        "--proc",
        proc,
        "--threads",
        str(threads),
        "--seed",
        str(seed),
        "--seconds",
        repr(seconds),
        "--durability",
        durability,
        "--out",
        str(out),
    ]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def run_campaign(
    store: Any,
    *,
    seed: int,
    seconds: float,
    threads: int,
    processes: int,
    child_threads: int,
    workdir: Path,
    keep: Path | None = None,
) -> dict[str, Any]:
    """The whole campaign on one store URL; the result record (see `campaign`). With no child
    processes, `store` may also be a store object (the tests hand it a broken one)."""
    started = time.time()
    space = actors.session_ids(seconds)
    rt = actors.open_runtime(store)
    # Children first: they take a moment to import; then all actors start at one instant.
    # Odd children persist every step (durability="step"), so both write paths race.
    children = [
        _spawn(
            store,
            f"c{i}",
            child_threads,
            seed,
            seconds,
            ("pause", "step")[i % 2],
            workdir / f"c{i}.json",
        )
        for i in range(processes)
    ]
    hung: list[str] = []
    board = actors.Board(space, time.time())
    setup = actors.Actor("main/setup", "main", rt, board, random.Random(seed), 0.0)
    for sid in space[: actors.WINDOW]:  # the first window, started before the race begins
        rec = {
            "who": setup.who,
            "proc": "main",
            "n": len(setup.ops),
            "op": "start",
            "sid": sid,
            "token": None,
        }
        setup.perform(rec, lambda sid=sid: rt.run(actors.FLOW, {"by": "setup"}, session_id=sid))
    for i, child in enumerate(children):
        if child.stdout is None or child.stdout.readline().strip() != "ready":
            hung.append(f"child c{i} did not start")
    begin = time.time()
    deadline = begin + seconds
    for child in children:
        try:
            if child.stdin is not None:
                child.stdin.write(f"{begin!r} {deadline!r}\n")
                child.stdin.close()
        except BrokenPipeError:
            pass  # it died before the start: its exit code says so below
    board.begin = begin  # the window slides from now on
    ops, stuck = actors.run_actors(rt, "main", threads, seed, board, deadline)
    ops = setup.ops + ops
    hung += stuck
    for i, child in enumerate(children):
        try:
            child.wait(max(1.0, deadline + actors.GRACE - time.time()))
        except subprocess.TimeoutExpired:
            child.kill()
            hung.append(f"child c{i} did not finish {actors.GRACE}s after its deadline")
            continue
        out = workdir / f"c{i}.json"
        if child.returncode != 0 or not out.exists():
            hung.append(f"child c{i} exited with code {child.returncode} (its stderr is above)")
            continue
        report = json.loads(out.read_text())
        ops += report["ops"]
        hung += report["hung"]
    actor_seconds = time.time() - begin
    sessions = dump_sessions(rt, space)
    problems = hung + check(sessions, ops)
    if keep is not None:  # the raw material, to study a failure
        keep.mkdir(parents=True, exist_ok=True)
        (keep / "ops.json").write_text(json.dumps(ops))
        (keep / "sessions.json").write_text(json.dumps(sessions))
    rt.store.close()
    return _result(
        store,
        seed,
        started,
        actor_seconds,
        threads,
        processes,
        child_threads,
        sessions,
        ops,
        problems,
    )


def _result(
    store: Any,
    seed: int,
    started: float,
    actor_seconds: float,
    threads: int,
    processes: int,
    child_threads: int,
    sessions: dict[str, dict[str, Any]],
    ops: list[dict[str, Any]],
    problems: list[str],
) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "store": store.split(":", 1)[0] if isinstance(store, str) else type(store).__name__,
        "threads": threads,
        "processes": processes,
        "threads_per_process": child_threads,
        "actor_seconds": round(actor_seconds, 2),
        "operations": len(ops),
        "operations_per_second": round(len(ops) / max(actor_seconds, 1e-9)),
        "sessions": len(sessions),
        "events_checked": sum(len(s["events"]) for s in sessions.values()),
    }
    for op, n in sorted(Counter(op["op"] for op in ops if op["exc"] is None).items()):
        figures[f"ok.{op}"] = n
    for exc, n in sorted(Counter(op["exc"] for op in ops if op["exc"]).items()):
        figures[f"refused.{exc}"] = n
    tries: dict[str, set[str]] = defaultdict(set)
    procs: dict[str, set[str]] = defaultdict(set)
    for op in ops:
        if op["op"] in CONSUMERS and op["token"]:
            tries[op["token"]].add(op["who"])
            procs[op["token"]].add(op["proc"])
    figures["tokens_tried"] = len(tries)
    figures["tokens_raced_by_2+_actors"] = sum(len(w) > 1 for w in tries.values())
    figures["tokens_raced_across_processes"] = sum(len(p) > 1 for p in procs.values())
    figures["runs_stopped_by_abort"] = sum(
        op["exc"] is None and op.get("reason") == "aborted" and op["op"] != "learn" for op in ops
    )
    figures["final_statuses"] = ", ".join(
        f"{k}={v}" for k, v in sorted(Counter(s["status"] for s in sessions.values()).items())
    )
    slowest = max((op["t1"] - op["t0"] for op in ops), default=0.0)
    figures["slowest_operation_seconds"] = round(slowest, 3)
    return {
        "name": "stress",
        "trials": len(ops),
        "failures": len(problems),
        "seconds": round(time.time() - started, 2),
        "seed": seed,
        "figures": figures,
        "failure_examples": [f"seed {seed}: {p}" for p in problems[:5]],
    }


def campaign(
    *,
    seed: int,
    budget: float | None = None,
    full: bool = False,
    store: str | None = None,
    keep: Path | None = None,
) -> dict[str, Any]:
    """Run the campaign: `budget` seconds of racing (default: the quick slice, or 60 s with
    `full`) on an SQLite file, or on `store` (a URL) when given. Returns the result record:
    name, trials (operations attempted), failures (violations found), seconds, seed, figures,
    failure_examples (at most 5)."""
    size = dict(FULL if full else QUICK)
    if budget is not None:
        size["seconds"] = float(budget)
    with tempfile.TemporaryDirectory(prefix="tarry-stress-") as tmp:
        url = store or f"sqlite:///{Path(tmp) / 'stress.db'}"
        return run_campaign(url, seed=seed, workdir=Path(tmp), keep=keep, **size)


def postgres_campaign(
    *, seed: int, budget: float | None = None, full: bool = False
) -> dict[str, Any] | None:
    """The same campaign on PostgreSQL, in a schema of its own, when `TARRY_TEST_POSTGRES`
    names a server; None otherwise."""
    dsn = os.environ.get("TARRY_TEST_POSTGRES")
    if not dsn:
        return None
    import uuid
    from urllib.parse import quote

    import psycopg

    schema = f"tarry_stress_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        option = quote(f"-csearch_path={schema}", safe="")
        url = f"{dsn}{'&' if '?' in dsn else '?'}options={option}"
        result = campaign(seed=seed, budget=budget, full=full, store=url)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    result["name"] = "stress-postgres"
    return result


def summary(result: dict[str, Any]) -> str:
    f = result["figures"]
    ok = sum(v for k, v in f.items() if k.startswith("ok."))
    text = (
        f"{result['name']}: {f['threads']} threads + {f['processes']} processes "
        f"(x{f['threads_per_process']} threads) raced for {f['actor_seconds']} s on "
        f"{f['sessions']} sessions: {result['trials']} operations ({ok} succeeded, "
        f"{f['tokens_raced_by_2+_actors']} tokens raced by several actors, "
        f"{f['tokens_raced_across_processes']} across processes, "
        f"{f['runs_stopped_by_abort']} runs stopped by abort), {f['events_checked']} events "
        f"checked; {result['failures']} violations (seed {result['seed']})."
    )
    for example in result["failure_examples"]:
        text += f"\n  - {example}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the result record here")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--full", action="store_true", help="the `make proof` size (60 s)")
    parser.add_argument("--seconds", type=float, help="racing time (overrides the size)")
    parser.add_argument("--keep", type=Path, help="write the raw operation log and sessions here")
    args = parser.parse_args(argv)
    results = [campaign(seed=args.seed, budget=args.seconds, full=args.full, keep=args.keep)]
    pg = postgres_campaign(seed=args.seed, budget=args.seconds, full=args.full)
    if pg is not None:
        results.append(pg)
    for result in results:
        print(summary(result))
    if args.json:
        record = results[0] if len(results) == 1 else _merge(results)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
    return 0 if all(r["failures"] == 0 for r in results) else 1


def _merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One record for SQLite and PostgreSQL: summed counts, figures prefixed by store."""
    merged = dict(results[0])
    merged["figures"] = {}
    for r in results:
        prefix = "sqlite." if r["name"] == "stress" else "postgres."
        merged["figures"].update({prefix + k: v for k, v in r["figures"].items()})
    merged["trials"] = sum(r["trials"] for r in results)
    merged["failures"] = sum(r["failures"] for r in results)
    merged["seconds"] = round(sum(r["seconds"] for r in results), 2)
    merged["failure_examples"] = [e for r in results for e in r["failure_examples"]][:5]
    return merged


if __name__ == "__main__":
    sys.exit(main())
