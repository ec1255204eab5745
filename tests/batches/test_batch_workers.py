"""Many workers on one store: every waiting request is submitted once, whatever the number of
workers polling at once; a worker (`Worker.run_once`, `tarry worker --batches`) runs the round."""

from __future__ import annotations

import openai
import pgserver
import pytest
import storekit
from batchflows import openai_flow
from tarry import Runtime
from tarry.batches import OpenAIBatch
from tarry.drivers.worker import Worker

WORKERS = 4


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    with pgserver.scratch_schema() as schema:
        yield pgserver.schema_dsn(schema)


def test_workers_polling_at_once_submit_each_request_once(url, fake):
    def runtime() -> Runtime:
        client = openai.OpenAI(base_url=fake.openai_url, api_key="x", max_retries=0)
        return Runtime(
            url, flows=[openai_flow], batches={"openai": OpenAIBatch(client, max_requests=7)}
        )

    first = runtime()
    items = [f"i{n}" for n in range(30)]
    out = first.run(openai_flow, items)
    assert out.paused
    workers = [runtime() for _ in range(WORKERS)]
    for _ in range(3):
        storekit.race(WORKERS, lambda i: workers[i].poll())
    assert set(fake.submitted.values()) == {1} and len(fake.submitted) == 30
    fake.complete()
    for _ in range(2):
        storekit.race(WORKERS, lambda i: workers[i].poll())
    # A result delivered while another worker's round was running the session stays queued
    # for it, and the next round takes it.
    first.poll()
    view = first.session(out.session_id)
    assert view.status == "completed"
    answers = [r["choices"][0]["message"]["content"] for r in view.outcome.output]
    assert answers == [item[::-1] for item in items]
    assert set(fake.submitted.values()) == {1}
    assert first.store.batches() == [] and first.mailbox() == []


def test_a_worker_round_submits_and_delivers(fake, openai_client):
    rt = Runtime(batches={"openai": OpenAIBatch(openai_client)})
    out = rt.run(openai_flow, ["x", "y"])
    worker = Worker(rt, interval=1)
    worker.run_once()
    assert len(fake.batches) == 1
    fake.complete()
    worker.run_once()
    assert rt.session(out.session_id).status == "completed"
