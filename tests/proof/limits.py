"""The bounds campaign: the size limits hold exactly, and a worker's memory stays flat.

    .venv/bin/python tests/proof/limits.py --json OUT.json [--seed N] [--full]

1. Size limits: random values (text, bytes, lists, maps, nested) of sizes around
   `max_value_bytes` are returned by a step. The oracle is exact: the step completes when the
   value's encoding is at most the limit, and fails with PayloadTooLarge otherwise; a resume
   value over the limit is refused and leaves the session as it was.
2. Memory: a worker runs start → pause → resume → end over and over (100,000 times with
   `--full`) with `MemoryStore(max_sessions=1000)`, in a process of its own; its RSS over the
   second half must not grow by more than `FLAT_KB`, and the store must hold at most 1,000
   sessions.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import tarry  # noqa: E402
from tarry.snapshots.codec.pack import dumps  # noqa: E402

LIMIT = 4096
#: Growth allowed over the second half of the worker run: allocator noise, not a leak (a leak
#: of even 100 bytes a resume is 5 MB over 50,000 resumes).
FLAT_KB = 2048
KEEP = 1_000


def _value(rng: random.Random, size: int) -> Any:
    """A value whose encoding is about `size` bytes, of a random shape."""
    shape = rng.choice(["ascii", "text", "bytes", "list", "map", "nested"])
    if shape == "ascii":
        return "a" * size
    if shape == "text":
        return "é" * (size // 2)
    if shape == "bytes":
        return bytes(size)
    if shape == "list":
        return list(range(size // 3))
    if shape == "map":
        return {f"k{i}": i for i in range(size // 8)}
    return {"rows": [{"id": i, "name": f"n{i}", "tags": ("x", "y")} for i in range(size // 40)]}


def _limits(seed: int, trials: int, enforced: int = LIMIT) -> tuple[int, list[str], dict[str, int]]:
    """`trials` values around LIMIT; the oracle expects LIMIT, the runtime enforces `enforced`
    (the tests plant a different one to show the oracle notices)."""
    rng = random.Random(seed)
    rt = tarry.Runtime(max_value_bytes=enforced)
    failures: list[str] = []
    counts = {"accepted": 0, "refused": 0}
    for trial in range(trials):
        value = _value(rng, rng.randint(LIMIT - 200, LIMIT + 200))
        size = len(dumps(value))
        out = rt.run(tarry.Flow("limits", [tarry.step(lambda ctx, v=value: v, name="emit")]))
        fits = size <= LIMIT
        if fits and not out.ok:
            failures.append(f"trial {trial}: {size} B refused ({out.error})")
        elif not fits and (not out.failed or out.error.type != "PayloadTooLarge"):
            failures.append(f"trial {trial}: {size} B over the limit gave {out.status}")
        counts["accepted" if out.ok else "refused"] += 1

        paused = rt.run(tarry.Flow("waits", [tarry.Wait("answer")]))
        before = rt.session(paused.session_id).events()
        try:
            rt.resume(paused.token, value)
        except tarry.PayloadTooLarge:
            if fits or rt.session(paused.session_id).events() != before:
                failures.append(f"trial {trial}: resume value of {size} B refused wrongly")
        else:
            if not fits:
                failures.append(f"trial {trial}: resume value of {size} B over the limit taken")
    return trials * 2, failures, counts


def _worker(resumes: int) -> tuple[dict[str, Any], list[str]]:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import bench_memory as m; "
        "r = m.tarry_worker(int(sys.argv[2])); import gc; print(json.dumps(r))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "benchmarks"), str(resumes)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT / "benchmarks",
    )
    if done.returncode != 0:
        return {}, [f"worker process failed: {done.stderr.strip()[-400:]}"]
    result = json.loads(done.stdout.splitlines()[-1])
    samples = result["rss_samples_kb"]
    late = late_growth(samples)
    figures = {
        "worker_resumes": resumes,
        "worker_rss_start_kb": samples[0],
        "worker_rss_end_kb": samples[-1],
        "worker_rss_growth_second_half_kb": late,
        "worker_seconds": round(result["seconds"], 1),
    }
    failures = [] if late <= FLAT_KB else [f"worker RSS grew {late} kB over the second half"]
    return figures, failures


def late_growth(samples: list[int]) -> int:
    """RSS growth (kB) over the second half of a run: zero once every cache is warm."""
    return samples[-1] - samples[len(samples) // 2]


def _store_bound(sessions: int) -> tuple[dict[str, Any], list[str]]:
    from tarry.snapshots import MemoryStore

    store = MemoryStore(max_sessions=KEEP)
    rt = tarry.Runtime(store=store)
    flow = tarry.Flow("kept", [tarry.Gate("ok")])
    most = 0
    for _ in range(sessions):
        rt.run(flow)
        most = max(most, len(store._sessions))
    failures = [] if most <= KEEP else [f"MemoryStore held {most} sessions, over {KEEP}"]
    return {"store_sessions_created": sessions, "store_sessions_held_at_most": most}, failures


def campaign(*, seed: int = 0, full: bool = False) -> dict[str, Any]:
    started = time.perf_counter()
    trials, failures, counts = _limits(seed, 2000 if full else 200)
    worker, worker_failures = _worker(100_000 if full else 3_000)
    store, store_failures = _store_bound(20_000 if full else 3_000)
    failures += worker_failures + store_failures
    return {
        "name": "limits",
        "trials": trials + 2,
        "failures": len(failures),
        "seconds": round(time.perf_counter() - started, 1),
        "seed": seed,
        "figures": {
            "value_limit_bytes": LIMIT,
            "values_tried": trials,
            "values_accepted": counts["accepted"],
            "values_refused": counts["refused"],
            **worker,
            **store,
        },
        "failure_examples": failures[:5],
    }


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
        f"limits: {f['values_tried']} values around {f['value_limit_bytes']} B "
        f"({f['values_refused']} refused), worker RSS grew "
        f"{f.get('worker_rss_growth_second_half_kb')} kB over the second half of "
        f"{f.get('worker_resumes')} resumes, MemoryStore held at most "
        f"{f['store_sessions_held_at_most']} sessions; failures: {result['failures']}"
    )
    return 0 if result["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
