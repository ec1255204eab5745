"""What provider batches cost (issue 26): 10,000 `BatchRequest`s in one ForEach through
OpenAIBatch, the official SDK against the fake provider server (tests/batchfake.py).

- **One upload**: the poll that finds them waiting submits one file and one batch.
- **Delivery**: CPU seconds of the poll that finds the batch ended (a status call, the output
  file streamed and parsed, the results delivered), beside a `deliver_many` of the same values
  to an identical session: the promise is a ratio of at most 2. The fake server runs in this
  process, so its share of the work (serving the file) is counted against tarry.
- **A poll with nothing new**: wall seconds, and one status call.

Numbers land in `extra_info`. `make test` runs it once at a tiny size (--benchmark-disable).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import openai
from bench_support import label

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from batchfake import FakeProvider  # noqa: E402
from tarry import BatchRequest, Flow, ForEach, Runtime  # noqa: E402
from tarry.batches import OpenAIBatch  # noqa: E402


def _body(ctx: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": ctx.item}]}


def _key(ctx: Any) -> str:
    return f"bench-{ctx.index}"


FLOW = Flow(
    "bench_batch",
    [
        ForEach(
            "ask",
            lambda ctx: ctx.input,
            BatchRequest("a", _body, via="openai", key=_key),
            concurrency=None,
        )
    ],
)


def test_ten_thousand_batch_requests(benchmark: Any, sizes: Any) -> None:
    n = 10_000 if sizes.full else 50
    prompts = [f"prompt {i}" for i in range(n)]
    figures: dict[str, Any] = {}

    def run() -> None:
        with FakeProvider() as fake:
            client = openai.OpenAI(base_url=fake.openai_url, api_key="x", max_retries=0)
            rt = Runtime(batches={"openai": OpenAIBatch(client)})
            out = rt.run(FLOW, prompts)
            assert out.paused
            rt.poll()
            figures["uploads"] = fake.count("POST", "/v1/files")
            figures["batches"] = len(fake.batches)
            calls = len(fake.calls)
            start = time.perf_counter()
            assert rt.poll() == []
            figures["idle_poll_seconds"] = round(time.perf_counter() - start, 4)
            figures["idle_poll_calls"] = len(fake.calls) - calls
            fake.complete()
            start = time.process_time()
            [done] = rt.poll()
            figures["poll_cpu"] = time.process_time() - start
            assert done.ok and len(done.output) == n
            values = done.output

            # The same values by deliver_many, to an identical session (no provider involved).
            plain = Runtime(batches={"openai": OpenAIBatch(client)})
            again = plain.run(FLOW, prompts)
            assert again.paused
            start = time.process_time()
            report = plain.deliver_many({f"bench-{i}": v for i, v in enumerate(values)})
            figures["deliver_many_cpu"] = time.process_time() - start
            assert report.outcomes[0].ok

    benchmark.pedantic(run, rounds=1, iterations=1)
    ratio = figures["poll_cpu"] / max(figures["deliver_many_cpu"], 1e-9)
    label(
        benchmark,
        "batch_requests",
        "tarry",
        variant="openai",
        per=n,
        requests=n,
        uploads=figures["uploads"],
        batches=figures["batches"],
        idle_poll_seconds=figures["idle_poll_seconds"],
        idle_poll_calls=figures["idle_poll_calls"],
        poll_cpu_seconds=round(figures["poll_cpu"], 4),
        deliver_many_cpu_seconds=round(figures["deliver_many_cpu"], 4),
        ratio=round(ratio, 2),
        target_ratio=2,
    )
    assert figures["uploads"] == 1 and figures["batches"] == 1
    assert figures["idle_poll_calls"] == 1
    if sizes.full:
        assert ratio <= 2, benchmark.extra_info


def test_status_calls_per_round_by_workers(benchmark: Any, sizes: Any, tmp_path: Path) -> None:
    """Status calls per open batch per round, with 1, 2, 4 and 8 runtimes polling one SQLite
    file together (each its own store, as worker processes would: turns are taken through the
    file's locks): one, whatever the number (before: one per worker). Also the store writes
    of those idle rounds: none."""
    import threading

    from tarry import ManualClock
    from tarry.snapshots import SQLiteStore

    counts = (1, 2, 4, 8)
    figures: dict[str, Any] = {}

    def run() -> None:
        with FakeProvider() as fake:
            client = openai.OpenAI(base_url=fake.openai_url, api_key="x", max_retries=0)
            path = tmp_path / f"w{len(figures)}.db"
            clock = ManualClock()
            first = Runtime(
                SQLiteStore(path),
                clock=clock,
                batches={"openai": OpenAIBatch(client, max_requests=5)},
            )
            first.run(FLOW, [f"p{i}" for i in range(20)])
            first.poll()
            open_batches = len(fake.batches)
            for workers in counts:
                stores = [SQLiteStore(path) for _ in range(workers)]
                runtimes = [
                    Runtime(s, clock=clock, batches={"openai": OpenAIBatch(client)}) for s in stores
                ]
                clock.advance(first.lease)  # a new round slot: every turn is free
                changes = [s._db.total_changes for s in stores]
                calls = len(fake.calls)
                for _ in range(3):  # three rounds of every worker at once
                    barrier = threading.Barrier(workers)

                    def poll(rt: Runtime, barrier: threading.Barrier = barrier) -> None:
                        barrier.wait(10)
                        rt.poll()

                    threads = [threading.Thread(target=poll, args=(rt,)) for rt in runtimes]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                made = len(fake.calls) - calls
                figures[workers] = made / (3 * open_batches)
                figures[f"writes_{workers}"] = sum(
                    s._db.total_changes - c for s, c in zip(stores, changes, strict=True)
                )
                for s in stores:
                    s.close()

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update(
        {f"status_calls_per_batch_round_{w}_workers": figures[w] for w in counts},
        idle_round_writes=sum(figures[f"writes_{w}"] for w in counts),
    )
    assert all(figures[w] == 1 for w in counts), figures
    assert all(figures[f"writes_{w}"] == 0 for w in counts), figures
