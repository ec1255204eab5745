"""The poison campaign: one bad session never stops the others.

    .venv/bin/python tests/proof/poison.py --json OUT.json [--seed N] [--full]

Many sessions wait on a timer that is due (1,000 with `--full`, on SQLite and on PostgreSQL when
a server is reachable); 5% of them are poisoned at random, one of five ways:

- `corrupt`: the stored snapshot is garbage bytes;
- `inconsistent`: the snapshot decodes, but points where the flow has nothing (a container
  frame whose child index is past the end of its body);
- `changed`: the session was started by another version of the flow (its fingerprint differs
  from every flow the workers know);
- `missing`: the session's flow is one no worker knows;
- `raises`: the step after the timer raises.

Four worker processes then run `Worker.run_once()` rounds over the same store until a few rounds
in a row resume nothing. The oracle: every healthy session completed, its step run exactly
once (a ledger of side effects); every poisoned session was left exactly as it was (token
unused, nothing written) or failed with a typed error (`raises`: failed with the step's own
error type); and no round raised.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import tarry  # noqa: E402
from tarry.snapshots.records import decode_state, encode_state  # noqa: E402

KINDS = ("corrupt", "inconsistent", "changed", "missing", "raises")
WORKERS = 4
#: Rounds in a row that resume nothing before a worker stops; the most rounds a worker runs.
IDLE_ROUNDS, MAX_ROUNDS = 3, 400


def make_flow() -> tarry.Flow:
    """A timer that is due at once, then a side effect counted in the ledger."""

    def effect(ctx: Any) -> str:
        if ctx.input.get("raise"):
            msg = "a step that raises when its session is resumed"
            raise RuntimeError(msg)
        with open(ctx.input["ledger"], "a") as f:
            f.write(ctx.session_id + "\n")
        return "done"

    return tarry.Flow(
        "poison",
        [
            tarry.Loop(
                "wrap",
                [tarry.Sleep("nap", seconds=0), tarry.step(effect, name="effect")],
                until=lambda ctx: True,
                max_iterations=1,
            )
        ],
    )


# -- setting up: sessions, then poison ---------------------------------------------------------


def setup(url: str, n: int, rng: random.Random, ledger: Path) -> dict[str, str]:
    """`n` sessions paused on a due timer; returns the poisoned ones: id -> kind."""
    rt = tarry.Runtime(store=url)
    flow = make_flow()
    # 5% of the sessions, each kind of poison as often as the others (in a random order).
    chosen = sorted(rng.sample(range(n), max(len(KINDS), n // 20)))
    kinds = [KINDS[j % len(KINDS)] for j in range(len(chosen))]
    rng.shuffle(kinds)
    kind_of = dict(zip(chosen, kinds, strict=True))
    poisoned: dict[str, str] = {}
    for i in range(n):
        kind = kind_of.get(i)
        sid = f"p{i:05d}"
        value = {"ledger": str(ledger), "raise": kind == "raises"}
        out = rt.run(flow, value, session_id=sid)
        assert out.paused and out.pause.kind == "system", out
        if kind is not None:
            poisoned[sid] = kind
    store = rt.store
    for sid, kind in poisoned.items():
        record = store.load(sid)
        if kind == "corrupt":
            record.state = bytes(rng.getrandbits(8) for _ in range(len(record.state)))
        elif kind == "inconsistent":
            state = decode_state(record.state)
            frame = state.container_stack[0]
            frame = type(frame)(**{**_fields(frame), "child": 7})
            state = type(state)(**{**_fields(state), "container_stack": (frame,)})
            record.state = encode_state(
                state, fingerprint=record.fingerprint, flow_version=record.flow_version
            )
        elif kind == "changed":
            record.fingerprint = "0" * len(record.fingerprint)
        elif kind == "missing":
            record.flow = "a_flow_no_worker_knows"
        if kind != "raises":
            store.save(record, record.version)
    close = getattr(store, "close", None)
    if close is not None:
        close()
    return poisoned


def _fields(record: Any) -> dict[str, Any]:
    import attrs

    return {f.name: getattr(record, f.name) for f in attrs.fields(type(record))}


# -- the workers ---------------------------------------------------------------------------------


def worker(url: str) -> None:
    """One worker process: rounds until IDLE_ROUNDS rounds in a row resume nothing. Prints
    JSON: rounds, sessions resumed, rounds that raised (with the first error)."""
    from tarry.drivers.worker import Worker

    rt = tarry.Runtime(store=url, flows=[make_flow()])
    w = Worker(rt, interval=0.01, import_flows=False)
    rounds = resumed = raised = idle = 0
    first_error = None
    while idle < IDLE_ROUNDS and rounds < MAX_ROUNDS:
        rounds += 1
        try:
            got = w.run_once()
        except Exception as exc:  # a round that raised: what the campaign forbids
            raised += 1
            first_error = first_error or f"{type(exc).__name__}: {exc}"
            got = []
        resumed += len(got)
        idle = 0 if got else idle + 1
    print(
        json.dumps(
            {"rounds": rounds, "resumed": resumed, "raised": raised, "first_error": first_error}
        ),
        flush=True,
    )


def worker_round(url: str) -> list[Any]:
    """One worker round in this process (for the oracle's own tests)."""
    from tarry.drivers.worker import Worker

    return Worker(tarry.Runtime(store=url, flows=[make_flow()]), import_flows=False).run_once()


def run_workers(url: str) -> list[dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "worker", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(WORKERS)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            results.append(
                {
                    "rounds": 0,
                    "resumed": 0,
                    "raised": 1,
                    "first_error": f"worker exited {proc.returncode}: {err[-400:]}",
                }
            )
        else:
            results.append(json.loads(out.strip().splitlines()[-1]))
    return results


# -- the oracle ----------------------------------------------------------------------------------


def check(
    url: str, n: int, poisoned: dict[str, str], ledger: Path, before: dict[str, Any]
) -> tuple[list[str], dict[str, int]]:
    rt = tarry.Runtime(store=url)
    store = rt.store
    failures: list[str] = []
    counts = {"healthy_completed": 0, "poisoned_left_as_they_were": 0, "poisoned_failed_typed": 0}
    effects: dict[str, int] = {}
    for line in ledger.read_text().split() if ledger.exists() else []:
        effects[line] = effects.get(line, 0) + 1
    for i in range(n):
        sid = f"p{i:05d}"
        record = store.load(sid)
        kind = poisoned.get(sid)
        if kind is None:
            if record.status != "completed" or effects.get(sid) != 1:
                failures.append(
                    f"healthy {sid}: {record.status}, its step ran {effects.get(sid, 0)} times"
                )
            else:
                counts["healthy_completed"] += 1
        elif kind == "raises":
            state = decode_state(record.state)
            if (
                record.status != "failed"
                or state.error is None
                or state.error.type != "RuntimeError"
            ):
                failures.append(f"poisoned ({kind}) {sid}: {record.status}")
            else:
                counts["poisoned_failed_typed"] += 1
        else:
            token_used = store.find_token(record.token).used if record.token else True
            unchanged = (record.state, record.status, record.version) == before[
                sid
            ] and not token_used
            if not unchanged or sid in effects:
                failures.append(
                    f"poisoned ({kind}) {sid} was changed: {record.status}, token used {token_used}"
                )
            else:
                counts["poisoned_left_as_they_were"] += 1
    close = getattr(store, "close", None)
    if close is not None:
        close()
    return failures, counts


def _before(url: str, n: int) -> dict[str, Any]:
    rt = tarry.Runtime(store=url)
    seen = {}
    for i in range(n):
        record = rt.store.load(f"p{i:05d}")
        seen[record.session_id] = (record.state, record.status, record.version)
    close = getattr(rt.store, "close", None)
    if close is not None:
        close()
    return seen


def one_store(
    name: str, url: str, n: int, seed: int, folder: Path
) -> tuple[list[str], dict[str, Any]]:
    rng = random.Random(seed)
    ledger = folder / f"{name}.ledger"
    poisoned = setup(url, n, rng, ledger)
    before = _before(url, n)
    started = time.perf_counter()
    workers = run_workers(url)
    seconds = time.perf_counter() - started
    failures, counts = check(url, n, poisoned, ledger, before)
    for w in workers:
        if w["raised"]:
            failures.append(f"{name}: {w['raised']} worker rounds raised ({w['first_error']})")
    by_kind = {k: sum(1 for v in poisoned.values() if v == k) for k in KINDS}
    figures = {
        f"{name}_sessions": n,
        f"{name}_poisoned": len(poisoned),
        **{f"{name}_poisoned_{k}": v for k, v in by_kind.items()},
        **{f"{name}_{k}": v for k, v in counts.items()},
        f"{name}_worker_rounds": sum(w["rounds"] for w in workers),
        f"{name}_rounds_raised": sum(w["raised"] for w in workers),
        f"{name}_seconds": round(seconds, 1),
    }
    return [f"{name}: {f}" for f in failures], figures


def campaign(*, seed: int = 0, full: bool = False, folder: Path | None = None) -> dict[str, Any]:
    import tempfile

    started = time.perf_counter()
    n = 1000 if full else 100
    failures: list[str] = []
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = folder or Path(tmp)
        got, figs = one_store("sqlite", f"sqlite:///{folder / 'poison.db'}", n, seed, folder)
        failures += got
        figures.update(figs)
        pg = _postgres()
        if pg is not None:
            import pgserver

            with pgserver.scratch_schema() as schema:
                got, figs = one_store("postgres", pgserver.schema_dsn(schema), n, seed, folder)
            failures += got
            figures.update(figs)
        else:
            figures["postgres"] = "not reachable: not run"
    return {
        "name": "poison",
        "trials": sum(v for k, v in figures.items() if k.endswith("_sessions")),
        "failures": len(failures),
        "seconds": round(time.perf_counter() - started, 1),
        "seed": seed,
        "figures": figures,
        "failure_examples": failures[:5],
    }


def _postgres() -> str | None:
    """The test server's DSN, or None when it cannot be reached (an error under CI)."""
    import pgserver

    dsn = os.environ.get("TARRY_TEST_POSTGRES") or pgserver.DEFAULT_DSN
    problem = pgserver._probe(dsn)
    if problem is None:
        return dsn
    if os.environ.get("CI") == "true":
        msg = f"PostgreSQL is not reachable under CI: {problem}"
        raise SystemExit(msg)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args(argv)
    result = campaign(seed=args.seed, full=args.full)
    Path(args.json).write_text(json.dumps(result, indent=2))
    f = result["figures"]
    print(
        f"poison: {result['trials']} due sessions, "
        f"{sum(v for k, v in f.items() if k.endswith('_poisoned'))} poisoned; "
        f"failures: {result['failures']}"
    )
    for example in result["failure_examples"]:
        print(f"  {example}")
    return 0 if result["failures"] == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        worker(sys.argv[2])
        sys.exit(0)
    sys.exit(main())
