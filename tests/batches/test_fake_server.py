"""The fake provider server (tests/batchfake.py) answers the official SDKs with their own types."""

from __future__ import annotations

import io
import json

import anthropic
import httpx
import openai
import pytest
from anthropic.types.messages import MessageBatch, MessageBatchIndividualResponse
from batchfake import FakeProvider
from openai.types import Batch, FileObject


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


def _openai(fake: FakeProvider) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.openai_url, api_key="test", max_retries=0)


def _anthropic(fake: FakeProvider) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.anthropic_url, api_key="test", max_retries=0)


def _lines(*ids: str) -> bytes:
    return b"".join(
        json.dumps(
            {
                "custom_id": i,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": [{"role": "user", "content": i}]},
            }
        ).encode()
        + b"\n"
        for i in ids
    )


def test_openai_files_and_batches_round_trip(fake):
    client = _openai(fake)
    file = client.files.create(
        file=("in.jsonl", io.BytesIO(_lines("a", "b", "c"))), purpose="batch"
    )
    FileObject.model_validate(fake.files[file.id]["meta"])
    fake.fail("b", "bad model")
    batch = client.batches.create(
        input_file_id=file.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"tarry_submission": "sub-1"},
    )
    Batch.model_validate(fake.batches[batch.id]["obj"])
    assert batch.status == "in_progress" and batch.metadata == {"tarry_submission": "sub-1"}
    assert fake.submitted == {"a": 1, "b": 1, "c": 1}
    fake.complete(batch.id)
    done = client.batches.retrieve(batch.id)
    Batch.model_validate(fake.batches[batch.id]["obj"])
    assert done.status == "completed"
    assert done.request_counts.completed == 2 and done.request_counts.failed == 1
    out = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
    assert [
        (o["custom_id"], o["response"]["body"]["choices"][0]["message"]["content"]) for o in out
    ] == [
        ("a", "a"),
        ("c", "c"),
    ]
    errors = client.files.content(done.error_file_id).text.splitlines()
    assert json.loads(errors[0])["response"]["body"]["error"]["message"] == "bad model"
    listed = list(client.batches.list(limit=1))
    assert [b.id for b in listed] == [batch.id]


def test_openai_expire_and_cancel(fake):
    client = _openai(fake)
    file = client.files.create(file=("in.jsonl", io.BytesIO(_lines("a", "b"))), purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    fake.expire(batch.id, answered=1)
    done = client.batches.retrieve(batch.id)
    assert done.status == "expired"
    err = json.loads(client.files.content(done.error_file_id).text.splitlines()[0])
    assert err["custom_id"] == "b" and err["error"]["code"] == "batch_expired"
    second = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert client.batches.cancel(second.id).status == "cancelled"
    assert fake.submitted == {"a": 2, "b": 2}


def test_anthropic_message_batches_round_trip(fake):
    client = _anthropic(fake)
    fake.fail("y", "too long")
    batch = client.messages.batches.create(
        requests=[
            {
                "custom_id": i,
                "params": {
                    "model": "m",
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": i}],
                },
            }
            for i in ("x", "y", "z")
        ]
    )
    MessageBatch.model_validate(fake.batches[batch.id]["obj"])
    assert batch.processing_status == "in_progress"
    fake.expire(batch.id, answered=2)
    done = client.messages.batches.retrieve(batch.id)
    MessageBatch.model_validate(fake.batches[batch.id]["obj"])
    assert done.processing_status == "ended" and done.request_counts.expired == 1
    results = list(client.messages.batches.results(batch.id))
    for line in fake.batches[batch.id]["results"].splitlines():
        MessageBatchIndividualResponse.model_validate(json.loads(line))
    assert [(r.custom_id, r.result.type) for r in results] == [
        ("x", "succeeded"),
        ("y", "errored"),
        ("z", "expired"),
    ]
    assert results[0].result.message.content[0].text == "x"
    assert [b.id for b in client.messages.batches.list()] == [batch.id]


def test_dropped_connection_acts_but_does_not_answer(fake):
    client = _anthropic(fake)
    fake.drop("/v1/messages/batches", times=1)
    with pytest.raises((anthropic.APIConnectionError, httpx.HTTPError)):
        client.messages.batches.create(
            requests=[{"custom_id": "k", "params": {"model": "m", "max_tokens": 1, "messages": []}}]
        )
    assert fake.submitted == {"k": 1}  # the batch was made: only the answer was lost
    assert len(list(client.messages.batches.list())) == 1
