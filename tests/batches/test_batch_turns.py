"""One provider status check per open batch per round, whatever the number of workers: four
worker processes on one store (PostgreSQL, SQLite) poll together against the fake provider,
which counts the status calls; the round is a slot of each worker's ManualClock (its `lease`
seconds long), so nothing depends on time. A worker killed while it holds the checks stops none:
the next round's checks are taken by another, in the same slot."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pgserver
import pytest
import storekit
from batchflows import openai_flow
from tarry import ManualClock, Runtime
from tarry.batches import OpenAIBatch

CHILD = Path(__file__).with_name("turn_child.py")
WORKERS = 4
#: The start of a round slot (the lease of 10 s divides it).
START = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    with pgserver.scratch_schema() as schema:
        yield pgserver.schema_dsn(schema)


class Workers:
    def __init__(self, url: str, fake) -> None:
        self.procs = [
            subprocess.Popen(
                [sys.executable, str(CHILD), url, fake.openai_url, START.isoformat()],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONPATH": ""},
            )
            for _ in range(WORKERS)
        ]

    def alive(self) -> list[subprocess.Popen]:
        return [p for p in self.procs if p.poll() is None]

    def ask(self, command: str) -> list[str]:
        """Send `command` to every live worker at once (they run it together); their answers."""
        alive = self.alive()
        for proc in alive:
            proc.stdin.write(command + "\n")
            proc.stdin.flush()
        answers = []
        for proc in alive:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            answers.append(line.strip())
        return answers

    def round(self) -> list[list[str]]:
        """One poll by every live worker at once: the provider ids each one checked."""
        return [[b for b in answer.split(",") if b] for answer in self.ask("poll")]

    def kill(self, proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def close(self) -> None:
        for proc in self.alive():
            proc.stdin.close()
        for proc in self.procs:
            proc.wait(30)
            for stream in (proc.stdout, proc.stderr):
                stream.close()


def test_one_status_check_per_open_batch_per_round_whatever_the_workers(url, fake, tmp_path):
    client_rt = Runtime(
        url,
        clock=ManualClock(START),
        batches={"openai": OpenAIBatch(_client(fake), max_requests=4)},
    )
    out = client_rt.run(openai_flow, [f"i{n}" for n in range(10)])
    client_rt.poll()  # three batches, submitted; no checks yet
    assert len(fake.batches) == 3
    batches = sorted(fake.batches)
    workers = Workers(url, fake)
    try:
        lease = client_rt.lease
        checked_by: dict[int, list[str]] = {}  # pid -> the provider ids it checked last round
        for n in range(4):
            if n == 2:
                workers.ask(f"advance {lease}")  # the next round slot
            if n == 3:
                # The worker that holds the most checks dies holding them: the others take
                # them over in the same slot, once its locks are gone.
                holder = max(workers.alive(), key=lambda p: len(checked_by[p.pid]))
                workers.kill(holder)
                _until_released(
                    client_rt.store,
                    checked_by[holder.pid],
                    START + dt.timedelta(seconds=lease),
                    lease,
                )
            alive = workers.alive()
            checked = workers.round()
            checked_by = {p.pid: c for p, c in zip(alive, checked, strict=True)}
            per_batch = Counter(b for c in checked for b in c)
            # Each open batch: one status call this round, from one of the workers.
            assert per_batch == Counter(batches), (n, checked)
        assert len(workers.alive()) == WORKERS - 1
        fake.complete()
        workers.round()
        client_rt.poll()  # a result queued while another worker ran the session
        view = client_rt.session(out.session_id)
        assert view.status == "completed"
        assert set(fake.submitted.values()) == {1}
    finally:
        workers.close()


def test_threads_sharing_a_memory_store_check_each_batch_once_a_round(fake):
    """In one process (a MemoryStore, Runtimes in threads) the store object holds the turns; a
    runtime that stops polling holds its turns until the round slot ends."""
    clock = ManualClock(START)
    first = Runtime(clock=clock, batches={"openai": OpenAIBatch(_client(fake), max_requests=4)})
    first.run(openai_flow, [f"i{n}" for n in range(10)])
    first.poll()
    runtimes = [
        Runtime(first.store, clock=clock, batches={"openai": _Counting(_client(fake))})
        for _ in range(WORKERS)
    ]
    for n in range(4):
        if n == 2:
            clock.advance(first.lease)
        for rt in runtimes:
            rt._core.batches["openai"].asked.clear()
        storekit.race(WORKERS, lambda i: runtimes[i].poll())
        asked = Counter(b for rt in runtimes for b in rt._core.batches["openai"].asked)
        assert asked == Counter(sorted(fake.batches)), n
    # A runtime that took every check of a new slot, then stopped polling: the others check
    # again from the next slot on.
    clock.advance(first.lease)
    stopped = runtimes.pop(0)
    stopped.poll()
    for rt in runtimes:
        rt._core.batches["openai"].asked.clear()
    storekit.race(len(runtimes), lambda i: runtimes[i].poll())
    assert not any(rt._core.batches["openai"].asked for rt in runtimes)
    clock.advance(first.lease)
    storekit.race(len(runtimes), lambda i: runtimes[i].poll())
    asked = Counter(b for rt in runtimes for b in rt._core.batches["openai"].asked)
    assert asked == Counter(sorted(fake.batches))


def _until_released(store, provider_ids: list[str], at: dt.datetime, lease: float) -> None:
    """On PostgreSQL, wait (blocked on the lock itself, never by time) until the server has
    dropped the dead worker's turns of the slot of `at`: those of the batches `provider_ids`
    it checked in that slot. Only those: a live worker that took the others' turns holds them
    to the slot's end. The operating system drops a dead process's file locks before its
    parent sees it exit."""
    from tarry.snapshots import PostgresStore
    from tarry.snapshots.batch_turns import lock_key

    if not isinstance(store, PostgresStore):
        return
    with store._pool.connection() as conn:
        [(namespace,)] = conn.execute("SELECT current_schema()").fetchall()
        conn.execute("SET lock_timeout = '60s'")
        slot = int(at.timestamp() // lease)
        for record in store.batches():
            if record.provider_id not in provider_ids:
                continue
            key = lock_key(namespace, record.submission_id, slot)
            conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        conn.execute("RESET lock_timeout")


class _Counting(OpenAIBatch):
    def __init__(self, client) -> None:
        super().__init__(client)
        self.asked: list[str] = []

    def status(self, provider_id):
        self.asked.append(provider_id)
        return super().status(provider_id)


def _client(fake):
    import openai

    return openai.OpenAI(base_url=fake.openai_url, api_key="test", max_retries=0)


def test_a_store_that_cannot_say_whose_turn_it_is_has_every_batch_checked(fake, caplog):
    """Asking for turns failed (the PostgreSQL connection of turns is down, say): every open
    batch is checked, a check too many rather than none, and the trouble is logged once."""
    rt = Runtime(batches={"openai": _Counting(_client(fake))})
    rt.run(openai_flow, ["a", "b"])
    rt.poll()

    def broken(*args, **kwargs):
        raise OSError("no turns today")

    rt.store.batch_turns = broken
    for _ in range(3):
        rt.poll()
    assert rt._core.batches["openai"].asked == sorted(fake.batches) * 3
    assert caplog.text.count("whose turn it is") == 1


def test_a_runtime_without_the_adapter_takes_no_turn(fake, anthropic_client, openai_client):
    """Runtimes with different adapters on one store: the one without a batch's adapter never
    holds its turn, so the one with it checks it."""
    from tarry.batches import AnthropicBatch

    clock = ManualClock(START)
    rt = Runtime(clock=clock, batches={"openai": _Counting(openai_client)})
    rt.run(openai_flow, ["a"])
    rt.poll()
    other = Runtime(rt.store, clock=clock, batches={"claude": AnthropicBatch(anthropic_client)})
    other.poll()  # first to ask, this slot
    rt._core.batches["openai"].asked.clear()
    rt.poll()
    assert rt._core.batches["openai"].asked == list(fake.batches)


def test_a_failed_check_gives_the_turn_back(fake, openai_client):
    """The runtime whose turn it is cannot check (its credentials, its network): another
    checks the batch at its round, in the same slot."""

    class Broken(OpenAIBatch):
        def status(self, provider_id):
            raise OSError("unreachable from here")

    clock = ManualClock(START)
    rt = Runtime(clock=clock, batches={"openai": _Counting(openai_client)})
    rt.run(openai_flow, ["a"])
    rt.poll()
    broken = Runtime(rt.store, clock=clock, batches={"openai": Broken(openai_client)})
    clock.advance(rt.lease)
    broken.poll()  # first to ask in this slot: takes the turn, fails, gives it back
    rt._core.batches["openai"].asked.clear()
    rt.poll()
    assert rt._core.batches["openai"].asked == list(fake.batches)
