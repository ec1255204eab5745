"""A worker SIGKILLed mid-round (a real subprocess): between the upload and the record no key is
submitted twice; between reading results and delivering them, or between delivering them and
marking the batch ended, no result is lost or applied twice."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from pathlib import Path

import pgserver
import pytest
from batchflows import openai_flow
from tarry import ManualClock, Runtime
from tarry.batches import OpenAIBatch

CHILD = Path(__file__).with_name("crash_child.py")


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    with pgserver.scratch_schema() as schema:
        yield pgserver.schema_dsn(schema)


def _killed_at(point: str, url: str, fake) -> None:
    """Run the child's poll until it stops at `point`, then SIGKILL it."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), url, fake.openai_url, point],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    try:
        line = child.stdout.readline().strip()
        assert line == point, child.stderr.read()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL


def _later(seconds: float = 3600) -> ManualClock:
    return ManualClock(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds))


def _within_lease(rt: Runtime, openai_client, at: dt.datetime) -> Runtime:
    """Another worker on `rt`'s store whose clock stands at `at`, a moment before the killed
    child began: the child's claim (made by the system clock, lasting its lease) holds by this
    clock however long the machine took since (a loaded one may take longer than a lease)."""
    return Runtime(
        rt.store,
        clock=ManualClock(at),
        flows=[openai_flow],
        batches={"openai": OpenAIBatch(openai_client)},
    )


def test_killed_between_upload_and_record(store_url, fake, openai_client):
    rt = Runtime(store_url, batches={"openai": OpenAIBatch(openai_client)})
    out = rt.run(openai_flow, ["a", "b", "c"])
    assert out.paused
    before = dt.datetime.now(dt.UTC)
    _killed_at("upload", store_url, fake)
    assert len(fake.batches) == 1 and set(fake.submitted.values()) == {1}
    [record] = rt.store.batches()
    assert record.provider_id is None  # it died before recording the provider's id
    # Within the lease, nothing happens (the dead worker might still be uploading).
    _within_lease(rt, openai_client, before).poll()
    [record] = rt.store.batches()
    assert record.provider_id is None
    assert len(fake.batches) == 1
    # After it: found again by its metadata, recorded, never uploaded a second time.
    later = Runtime(
        rt.store,
        clock=_later(),
        flows=[openai_flow],
        batches={"openai": OpenAIBatch(openai_client)},
    )
    later.poll()
    later.poll()
    assert len(fake.batches) == 1 and set(fake.submitted.values()) == {1}
    [record] = later.store.batches()
    assert record.provider_id in fake.batches
    fake.complete()
    [done] = later.poll()
    assert done.ok
    assert [r["choices"][0]["message"]["content"] for r in done.output] == ["a", "b", "c"]


@pytest.mark.parametrize("point", ["read", "end"])
def test_killed_between_results_and_delivery(point, store_url, fake, openai_client):
    rt = Runtime(store_url, batches={"openai": OpenAIBatch(openai_client)})
    out = rt.run(openai_flow, ["a", "b", "c"])
    rt.poll()
    fake.complete()
    before = dt.datetime.now(dt.UTC)
    _killed_at(point, store_url, fake)
    # The dead worker's claim on the batch holds until its lease lapses: nothing happens.
    soon = _within_lease(rt, openai_client, before)
    assert soon.poll() == [] and rt.session(out.session_id).status == "paused" or point == "end"
    later = Runtime(
        rt.store,
        clock=_later(),
        flows=[openai_flow],
        batches={"openai": OpenAIBatch(openai_client)},
    )
    later.poll()
    done = rt.session(out.session_id).outcome
    assert done.ok
    assert [r["choices"][0]["message"]["content"] for r in done.output] == ["a", "b", "c"]
    view = rt.session(out.session_id)
    resumed = [e for e in view.events() if e.type == "run.resumed"]
    assert len(resumed) <= 3  # each result applied once (one resume per delivery at most)
    completed = [e for e in view.events() if e.type == "node.completed" and e.path[-1] == "ask"]
    assert len(completed) == 3
    assert rt.mailbox() == []  # nothing left queued to be taken twice
    assert rt.store.batches() == [] and set(fake.submitted.values()) == {1}
