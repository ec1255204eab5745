"""BatchRequest through OpenAIBatch and AnthropicBatch, the real SDKs against the fake server."""

from __future__ import annotations

import datetime as dt

import pytest
import tarry
import tarry.snapshots
from tarry import BatchRequest, Flow, ForEach, ManualClock, Runtime
from tarry.batches import AnthropicBatch, OpenAIBatch


def _chat(ctx):
    return {"model": "m", "messages": [{"role": "user", "content": ctx.item}]}


def _params(ctx):
    return {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": ctx.item}]}


def _eval_flow(via="openai", body=_chat, name="eval"):
    return Flow(
        name,
        [
            ForEach(
                "prompts",
                lambda ctx: ctx.input,
                BatchRequest("ask", body, via=via),
                concurrency=None,
            )
        ],
    )


def test_one_poll_submits_one_batch_and_a_later_one_delivers(store, fake, openai_client):
    rt = Runtime(store, batches={"openai": OpenAIBatch(openai_client)})
    out = rt.run(_eval_flow(), ["ab", "cd", "ef"])
    assert out.paused and len(out.pauses) == 3
    assert {p.kind for p in out.pauses} == {"external"}
    assert rt.poll() == []
    assert len(fake.batches) == 1 and fake.count("POST", "/v1/files") == 1
    assert sorted(fake.submitted.values()) == [1, 1, 1]
    [record] = rt.store.batches()
    assert record.total == 3 and record.provider_id in fake.batches
    # Nothing new: a status call, no write, no second submission.
    calls = len(fake.calls)
    assert rt.poll() == []
    assert fake.calls[calls:] == [("GET", f"/v1/batches/{record.provider_id}")]
    fake.complete()
    [done] = rt.poll()
    assert done.ok
    assert [r["choices"][0]["message"]["content"] for r in done.output] == ["ba", "dc", "fe"]
    assert rt.store.batches() == []
    assert rt.store.batches(open=False)[0].status == "completed"
    assert max(fake.submitted.values()) == 1


def test_provider_error_fails_the_element_and_a_retry_submits_it_again(store, fake, openai_client):
    rt = Runtime(store, batches={"openai": OpenAIBatch(openai_client)})
    flow = Flow(
        "one", [BatchRequest("ask", {"model": "m", "messages": []}, via="openai", key="k1")]
    )
    out = rt.run(flow)
    rt.poll()
    fake.fail("k1", "model not found")
    fake.complete()
    [failed] = rt.poll()
    assert failed.failed and failed.error.type == "BatchItemFailed"
    assert failed.error.retryable and "model not found" in failed.error.message
    # A retry: the element waits again, and the next poll submits it in a new batch.
    again = rt.resume(failed.token)
    assert again.paused
    rt.poll()
    assert fake.submitted["k1"] == 2 and len(fake.batches) == 2
    del fake.failures["k1"]
    fake.complete()
    [ok] = rt.poll()
    assert ok.ok and ok.output["object"] == "chat.completion"
    assert out.session_id == ok.session_id


def test_expired_batch_resubmits_what_did_not_finish(store, fake, openai_client):
    clock = ManualClock(dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    rt = Runtime(store, clock=clock, batches={"openai": OpenAIBatch(openai_client)})
    out = rt.run(_eval_flow(), ["a1", "b2", "c3", "d4"])
    rt.poll()
    [first] = fake.open_batches()
    fake.expire(first, answered=1)
    # One delivered (the session still waits on three); the three left are submitted again,
    # in one batch, by the same round.
    [moved] = rt.poll()
    assert moved.paused and len(moved.pauses) == 3
    [second] = fake.open_batches()
    assert len(fake.batches[second]["requests"]) == 3
    assert sorted(fake.submitted.values()) == [1, 2, 2, 2]
    fake.complete()
    [done] = rt.poll()
    assert done.ok
    assert [r["choices"][0]["message"]["content"] for r in done.output] == ["1a", "2b", "3c", "4d"]
    assert out.session_id == done.session_id


def test_batches_split_at_the_adapter_limits(fake, openai_client):
    rt = Runtime(batches={"openai": OpenAIBatch(openai_client, max_requests=2)})
    rt.run(_eval_flow(), ["a", "b", "c", "d", "e"])
    rt.poll()
    assert [len(b["requests"]) for b in fake.batches.values()] == [2, 2, 1]
    fake.complete()
    [done] = rt.poll()
    assert done.ok and len(done.output) == 5


def test_split_by_bytes(fake, openai_client):
    line = len(OpenAIBatch(openai_client).line("k" * 35, _chat(type("C", (), {"item": "xx"}))))
    rt = Runtime(batches={"openai": OpenAIBatch(openai_client, max_bytes=2 * line + 10)})
    rt.run(_eval_flow(), ["aa", "bb", "cc"])
    rt.poll()
    assert [len(b["requests"]) for b in fake.batches.values()] == [2, 1]


def test_anthropic_message_batches(store, fake, anthropic_client):
    rt = Runtime(store, batches={"claude": AnthropicBatch(anthropic_client)})
    out = rt.run(_eval_flow("claude", _params), ["hi", "yo"])
    assert out.paused
    rt.poll()
    assert len(fake.batches) == 1
    fake.complete()
    [done] = rt.poll()
    assert done.ok and [m["content"][0]["text"] for m in done.output] == ["ih", "oy"]


def test_anthropic_error_and_expiry(fake, anthropic_client):
    rt = Runtime(batches={"claude": AnthropicBatch(anthropic_client)})
    flow = Flow(
        "one",
        [
            BatchRequest(
                "ask", {"model": "m", "max_tokens": 1, "messages": []}, via="claude", key="only"
            )
        ],
    )
    rt.run(flow)
    rt.poll()
    [bid] = fake.open_batches()
    fake.expire(bid)
    assert rt.poll() == []  # nothing delivered; submitted again by the same round
    assert fake.submitted["only"] == 2
    fake.fail("only", "prompt too long")
    fake.complete()
    [failed] = rt.poll()
    assert failed.error.type == "BatchItemFailed" and "prompt too long" in failed.error.message


@pytest.mark.parametrize(
    ("element", "problem"),
    [
        (BatchRequest("ask", {"model": "m"}, via="nope"), "names no batch adapter"),
        (BatchRequest("ask", {"model": "m"}, via="openai", key="k" * 65), "custom_id limit of 64"),
        (BatchRequest("ask", {"messages": []}, via="claude", key="ok"), "lacks model, max_tokens"),
        (
            BatchRequest(
                "ask", {"model": "m", "max_tokens": 1, "messages": []}, via="claude", key="a b"
            ),
            "not an Anthropic custom_id",
        ),
        (BatchRequest("ask", lambda ctx: {"x": float("nan")}, via="openai"), "JSON can carry"),
        (BatchRequest("ask", lambda ctx: ["not", "a", "dict"], via="openai"), "a dict"),
    ],
)
def test_bad_input_fails_at_once_and_uploads_nothing(
    fake, openai_client, anthropic_client, element, problem
):
    rt = Runtime(
        batches={"openai": OpenAIBatch(openai_client), "claude": AnthropicBatch(anthropic_client)}
    )
    out = rt.run(Flow("bad", [element]))
    assert out.failed and problem in out.error.message
    assert out.error.type == "InvalidBatchRequest"
    assert not out.error.retryable
    rt.poll()
    assert fake.calls == []


def test_literal_bad_body_is_refused_when_the_flow_is_built():
    with pytest.raises(tarry.InvalidFlow, match="must be a dict"):
        BatchRequest("ask", "text", via="openai")


def test_a_dropped_answer_is_found_again_not_submitted_twice(fake, openai_client):
    clock = ManualClock(dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    rt = Runtime(clock=clock, batches={"openai": OpenAIBatch(openai_client)})
    rt.run(_eval_flow(), ["a", "b"])
    fake.drop("/v1/batches", times=1)  # the batch is made; its answer is lost
    rt.poll()
    [record] = rt.store.batches()
    assert record.provider_id is None and record.status == "submitting"
    rt.poll()  # within the lease: another worker might still be uploading it
    assert len(fake.batches) == 1
    clock.advance(rt.lease + 1)
    rt.poll()  # found by its metadata, recorded, not uploaded again
    [record] = rt.store.batches()
    assert record.provider_id in fake.batches and len(fake.batches) == 1
    assert max(fake.submitted.values()) == 1
    fake.complete()
    [done] = rt.poll()
    assert done.ok


def test_a_lost_upload_is_submitted_again_after_the_lease(fake, openai_client):
    clock = ManualClock(dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    rt = Runtime(clock=clock, batches={"openai": OpenAIBatch(openai_client)})
    rt.run(_eval_flow(), ["a", "b"])
    fake.drop("/v1/files", times=1)  # the file arrives, no batch is made
    rt.poll()
    assert len(fake.batches) == 0
    clock.advance(rt.lease + 1)
    rt.poll()
    assert len(fake.batches) == 1 and max(fake.submitted.values()) == 1
    fake.complete()
    [done] = rt.poll()
    assert done.ok


def test_results_already_delivered_are_not_delivered_again(fake, openai_client):
    """A round that died after delivering and before marking its batch ended: the next one
    finds the delivered keys no longer waiting."""
    rt = Runtime(batches={"openai": OpenAIBatch(openai_client)})
    flow = Flow(
        "two",
        [
            BatchRequest("a", {"model": "m", "messages": []}, via="openai", key="ka"),
            BatchRequest("b", {"model": "m", "messages": []}, via="openai", key="kb"),
        ],
    )
    rt.run(flow)
    rt.poll()
    fake.complete()
    # Deliver as a round would (marked "delivering" first), but do not mark the batch ended
    # (the round "died").
    [record] = rt.store.batches()
    rt.store.batch_update(record.submission_id, status="delivering", at=record.updated_at)
    rt.deliver_many({"ka": {"id": "x"}})
    out = rt.poll()  # reads the results again: "ka" is not waiting any more
    assert out == [] or all(o.paused for o in out)
    assert rt.mailbox() == []


def test_unknown_runtime_argument():
    with pytest.raises(tarry.InvalidArgument, match="batch adapter"):
        Runtime(batches={"openai": object()})


@pytest.mark.parametrize("client", [None, "sk-key", object()])
def test_an_adapter_without_an_sdk_client_is_refused_when_made(client):
    with pytest.raises(tarry.InvalidArgument, match=r"such as openai\.OpenAI\(\)"):
        OpenAIBatch(client)
    with pytest.raises(tarry.InvalidArgument, match=r"such as anthropic\.Anthropic\(\)"):
        AnthropicBatch(client)


@pytest.mark.parametrize("limit", [0, -3, 2.5, "10", True])
def test_an_adapter_limit_must_be_a_positive_int(openai_client, anthropic_client, limit):
    with pytest.raises(tarry.InvalidArgument, match="max_requests"):
        OpenAIBatch(openai_client, max_requests=limit)
    with pytest.raises(tarry.InvalidArgument, match="max_bytes"):
        AnthropicBatch(anthropic_client, max_bytes=limit)


def test_an_adapter_limit_is_capped_at_the_providers(openai_client):
    assert OpenAIBatch(openai_client, max_requests=10**9).max_requests == 50_000
    assert OpenAIBatch(openai_client, max_requests=7).max_requests == 7


def test_a_refused_delivery_keeps_the_batch_open_and_submits_nothing_again(fake, openai_client):
    starter = Runtime(batches={"openai": OpenAIBatch(openai_client)})
    out = starter.run(_eval_flow(name="elsewhere"), ["a", "b"])
    # A worker that does not know the session's flow: it cannot deliver the results.
    worker = Runtime(starter.store, batches={"openai": OpenAIBatch(openai_client)})
    worker.poll()
    fake.complete()
    assert worker.poll() == []
    assert worker.poll() == []
    assert len(worker.store.batches()) == 1 and set(fake.submitted.values()) == {1}
    worker.register(_eval_flow(name="elsewhere"))
    [done] = worker.poll()
    assert done.ok and done.session_id == out.session_id
    assert worker.store.batches() == [] and set(fake.submitted.values()) == {1}


def test_a_poll_with_nothing_new_writes_nothing(tmp_path, fake, openai_client):
    store = tarry.snapshots.SQLiteStore(tmp_path / "s.db")
    rt = Runtime(store, batches={"openai": OpenAIBatch(openai_client, max_requests=2)})
    rt.run(_eval_flow(), ["a", "b", "c", "d", "e"])
    rt.poll()
    assert len(fake.batches) == 3
    changes = store._db.total_changes
    calls = len(fake.calls)
    rt.poll()
    rt.poll()
    assert store._db.total_changes == changes  # not one row written
    # One status call per open batch per poll, nothing else.
    assert sorted(fake.calls[calls:]) == sorted(
        [("GET", f"/v1/batches/{bid}") for bid in fake.batches] * 2
    )


def test_anthropic_lost_answer_is_found_again_by_its_requests(fake, anthropic_client):
    clock = ManualClock(dt.datetime(2030, 1, 1, tzinfo=dt.UTC))
    rt = Runtime(clock=clock, batches={"claude": AnthropicBatch(anthropic_client)})
    rt.run(_eval_flow("claude", _params), ["a", "b", "c"])
    fake.drop("/v1/messages/batches", times=1)  # made, its answer lost
    rt.poll()
    assert len(fake.batches) == 1
    clock.advance(rt.lease + 1)
    rt.poll()  # no metadata: found as the unrecorded batch of three requests
    [record] = rt.store.batches()
    assert record.provider_id in fake.batches and len(fake.batches) == 1
    fake.complete()
    [done] = rt.poll()
    assert done.ok and [m["content"][0]["text"] for m in done.output] == ["a", "b", "c"]
    assert set(fake.submitted.values()) == {1}


def _keyed_flow():
    return Flow(
        "keyed",
        [
            ForEach(
                "prompts",
                lambda ctx: ctx.input,
                BatchRequest("ask", _chat, via="openai", key=lambda ctx: f"k-{ctx.item}"),
                concurrency=None,
            )
        ],
    )


def test_results_of_lanes_a_failure_cancelled_are_kept_for_the_retry(store, fake, openai_client):
    """One request of a concurrent ForEach fails: the session fails and its other lanes stop
    waiting. The results of their requests, already submitted, that come in meanwhile are
    queued under their keys; the retry's lanes take them: only the failed requests (and one
    whose error came in meanwhile: an error is not kept) are submitted again."""
    rt = Runtime(store, batches={"openai": OpenAIBatch(openai_client, max_requests=2)})
    out = rt.run(_keyed_flow(), ["a", "b", "c", "d"])
    rt.poll()
    assert len(fake.batches) == 2
    [with_a] = [b for b, v in fake.batches.items() if "k-a" in dict(v["requests"])]
    [other] = [b for b in fake.batches if b != with_a]
    erring = fake.batches[other]["requests"][0][0]
    fake.fail("k-a", "overloaded")
    fake.fail(erring, "overloaded")
    fake.complete(with_a)
    [failed] = rt.poll()
    assert failed.failed and failed.error.type == "BatchItemFailed"
    fake.complete()  # the other batch ends while the session is failed
    assert rt.poll() == []
    assert rt.store.batches() == []
    assert [m.key for m in rt.mailbox()] == [k for k, _ in fake.batches[other]["requests"][1:]]
    fake.failures.clear()
    again = rt.resume(failed.token)
    waiting = sorted(p.path[1] for p in again.pauses)
    assert again.paused and waiting == sorted([0, "abcd".index(erring[-1])])
    rt.poll()
    fake.complete()
    [done] = rt.poll()
    assert done.ok and done.session_id == out.session_id
    answers = [r["choices"][0]["message"]["content"] for r in done.output]
    assert answers == ["a", "b", "c", "d"]
    twice = {"k-a", erring}
    assert fake.submitted == {f"k-{i}": 2 if f"k-{i}" in twice else 1 for i in "abcd"}
    assert rt.mailbox() == []


def test_a_kept_result_is_queued_once(store, fake, openai_client, monkeypatch):
    """A round that queued the answer of a lane that stopped waiting and died before it marked
    the batch "delivering": the next round finds it queued and queues nothing more."""
    rt = Runtime(store, batches={"openai": OpenAIBatch(openai_client, max_requests=1)})
    rt.run(_keyed_flow(), ["a", "b"])
    rt.poll()
    [with_a] = [b for b, v in fake.batches.items() if "k-a" in dict(v["requests"])]
    fake.fail("k-a", "overloaded")
    fake.complete(with_a)
    [failed] = rt.poll()
    assert failed.failed
    fake.complete()
    real = type(store).batch_update

    def dies_marking(self, submission_id, *, status, **kwargs):
        if status == "delivering":
            raise RuntimeError("the worker died here")
        return real(self, submission_id, status=status, **kwargs)

    monkeypatch.setattr(type(store), "batch_update", dies_marking)
    with pytest.raises(RuntimeError):
        rt.poll()
    monkeypatch.undo()
    assert [(m.key, m.count) for m in rt.mailbox()] == [("k-b", 1)]
    rt.poll()
    assert [(m.key, m.count) for m in rt.mailbox()] == [("k-b", 1)]
    assert rt.store.batches() == []
    fake.failures.clear()
    rt.resume(failed.token)
    rt.poll()
    fake.complete()
    [done] = rt.poll()
    assert done.ok and [r["choices"][0]["message"]["content"] for r in done.output] == ["a", "b"]
    assert fake.submitted == {"k-a": 2, "k-b": 1}
