"""Resume adapters and poll(): a batch job's completion detected without a human."""

from __future__ import annotations

import copy
import logging
import pickle
import threading
from pathlib import Path
from typing import Any

import attrs
import pytest
import tarry
from tarry import NOT_READY, Flow, Gate, ManualClock, ResumeRequest, Runtime, Sleep, Wait
from tarry.snapshots import SQLiteStore


class Batch:
    """An external batch job: not ready `polls` times, then its results."""

    def __init__(self, polls: int = 2) -> None:
        self.polls = polls
        self.requests: list[ResumeRequest] = []
        self.lock = threading.Lock()

    def __call__(self, request: ResumeRequest) -> Any:
        with self.lock:
            self.requests.append(request)
            if len(self.requests) <= self.polls:
                return NOT_READY
            return {"batch": request.payload["batch_id"], "results": [1, 2, 3]}


def batch_flow() -> Flow:
    return Flow(
        "eval",
        [
            lambda ctx: "submitted",
            Wait("results", reason="batch", payload={"batch_id": "b-7"}),
            lambda ctx: sum(ctx.prev["results"]),
        ],
    )


def test_not_ready_twice_then_a_value_resumes_exactly_once() -> None:
    batch = Batch(polls=2)
    rt = Runtime(adapters={"external": batch})
    out = rt.run(batch_flow())
    assert out.paused and out.meta["pause_kind"] == "external"
    assert rt.poll() == []
    assert rt.poll() == []
    [done] = rt.poll()
    assert done.ok and done.output == 6
    assert done.meta["pause_kind"] == "external" and done.meta["trigger"] == "adapter"
    assert rt.poll() == []
    assert len(batch.requests) == 3
    request = batch.requests[0]
    assert request.token == out.token
    assert request.session_id == out.session_id
    assert (request.kind, request.reason, request.path) == ("external", "batch", ("results",))
    assert request.payload == {"batch_id": "b-7"}
    resumed = [e for e in rt.session(out.session_id).events() if e.type == "run.resumed"]
    assert len(resumed) == 1


def test_adapters_are_asked_only_about_their_pause_kind() -> None:
    asked: list[str] = []

    def human(request: ResumeRequest) -> Any:
        asked.append(request.kind)
        return {"approved": True, "by": "bot"}

    rt = Runtime(adapters={"human": human})
    gate = rt.run(Flow("g", [Gate("g")]))
    wait = rt.run(Flow("w", [Wait("w")]))
    [done] = rt.poll()
    assert done.session_id == gate.session_id and done.output == {"approved": True, "by": "bot"}
    assert asked == ["human"]
    assert rt.session(wait.session_id).status == "paused"


def test_poll_also_resumes_due_timers() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock, adapters={"external": Batch(polls=0)})
    sleeper = rt.run(Flow("s", [Sleep("s", 5), lambda ctx: "slept"]))
    waiter = rt.run(batch_flow())
    clock.advance(5)
    outs = {o.session_id: o for o in rt.poll()}
    assert outs[sleeper.session_id].output == "slept"
    assert outs[waiter.session_id].output == 6


def test_a_failing_adapter_is_logged_and_the_session_stays_paused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(request: ResumeRequest) -> Any:
        raise RuntimeError("batch API down")

    rt = Runtime(adapters={"external": broken})
    out = rt.run(batch_flow())
    with caplog.at_level(logging.ERROR, logger="tarry"):
        assert rt.poll() == []
    assert "batch API down" in caplog.text
    assert rt.session(out.session_id).status == "paused"
    assert rt.resume(out.token, {"results": [1]}).output == 1  # the token still works


def test_a_value_the_element_refuses_leaves_the_session_paused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rt = Runtime(adapters={"human": lambda request: "yes please"})
    out = rt.run(Flow("g", [Gate("g")]))
    with caplog.at_level(logging.ERROR, logger="tarry"):
        assert rt.poll() == []
    assert "refused" in caplog.text
    view = rt.session(out.session_id)
    assert view.status == "paused" and view.outcome.token == out.token


def test_two_pollers_resume_a_ready_session_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    flow = batch_flow()
    sids = [Runtime(store=url).run(flow).session_id for _ in range(12)]
    batch = Batch(polls=0)
    pollers = [Runtime(store=url, flows=[flow], adapters={"external": batch}) for _ in range(3)]
    results: list[tarry.Outcome] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(pollers))

    def work(rt: Runtime) -> None:
        barrier.wait()
        for _ in range(3):
            got = rt.poll()
            with lock:
                results.extend(got)

    threads = [threading.Thread(target=work, args=(p,)) for p in pollers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(o.session_id for o in results) == sorted(sids)
    for sid in sids:
        kinds = [e.type for e in pollers[0].session(sid).events()]
        assert kinds.count("run.resumed") == 1 and kinds[-1] == "run.completed"


def test_adapters_must_map_pause_kinds_to_callables() -> None:
    with pytest.raises(tarry.InvalidArgument):
        Runtime(adapters={"robot": lambda request: None})
    with pytest.raises(tarry.InvalidArgument):
        Runtime(adapters={"external": "not callable"})


def test_every_resume_path_reports_the_pause_kind() -> None:
    clock = ManualClock()
    rt = Runtime(clock=clock)
    human = rt.run(Flow("h", [Gate("g")]))
    assert rt.resume(human.token, True).meta["pause_kind"] == "human"
    external = rt.run(Flow("e", [Wait("w")]))
    assert rt.resume(external.token, 1).meta["pause_kind"] == "external"
    assert rt.run(Flow("s", [Sleep("s", 1)])).pause.kind == "system"
    clock.advance(1)
    assert rt.resume_due()[0].meta["pause_kind"] == "system"
    # A resume that pauses again names the new pause's kind, and the kind it resumed.
    two = rt.run(Flow("two", [Wait("w"), Gate("g")]))
    again = rt.resume(two.token, 1)
    assert again.meta["pause_kind"] == "human" and again.meta["resumed_kind"] == "external"


# --- bulk adapters and write-free polls ----------------------------------------------------------


class BulkBatch:
    """A batch API asked once per round about every waiting request: answers some by token,
    some by key, and names a few things nobody asked about."""

    def __init__(self) -> None:
        self.asked: list[list[ResumeRequest]] = []
        self.answer: dict[str, Any] = {}

    def many(self, requests: list[ResumeRequest]) -> dict[str, Any]:
        self.asked.append(list(requests))
        return dict(self.answer)


def keyed_flow(name: str = "prompts") -> Flow:
    return Flow(
        name,
        [
            Wait(
                "result",
                reason="batch",
                payload={"prompt": "p"},
                key=lambda ctx: f"prompt-{ctx.input}",
            ),
            lambda ctx: {"answer": ctx.prev},
        ],
    )


def test_a_bulk_adapter_is_asked_once_per_round_with_every_request(
    store, caplog: pytest.LogCaptureFixture
) -> None:
    bulk = BulkBatch()
    rt = Runtime(store=store, adapters={"external": bulk})
    outs = [rt.run(keyed_flow(), i) for i in range(5)]
    human = rt.run(Flow("g", [Gate("g")]))
    assert rt.poll() == []
    [requests] = bulk.asked
    assert sorted(r.session_id for r in requests) == sorted(o.session_id for o in outs)
    by_sid = {r.session_id: r for r in requests}
    first = by_sid[outs[0].session_id]
    assert first.token == outs[0].token and first.key == "prompt-0"
    assert (first.kind, first.reason, first.path) == ("external", "batch", ("result",))
    assert first.payload == {"prompt": "p"}
    assert "tk_" not in repr(first)  # the token stays out of logs
    bulk.answer = {
        outs[0].token: "by token",
        "prompt-3": "by key",
        "prompt-4": NOT_READY,
        "prompt-99": "nobody waits on this",
        "tk_unknown": "nor on this",
    }
    with caplog.at_level(logging.WARNING, logger="tarry"):
        done = rt.poll()
    assert len(bulk.asked) == 2
    assert {o.session_id: o.output for o in done} == {
        outs[0].session_id: {"answer": "by token"},
        outs[3].session_id: {"answer": "by key"},
    }
    assert all(o.meta["trigger"] == "adapter" for o in done)
    assert "2 tokens or keys" in caplog.text and "prompt-99" in caplog.text
    assert "tk_unknown" not in caplog.text
    for out in (outs[1], outs[2], outs[4]):
        assert rt.session(out.session_id).outcome.token == out.token
    assert rt.session(human.session_id).status == "paused"
    bulk.answer = {}
    assert rt.poll() == []
    assert len(bulk.asked[-1]) == 3  # the resumed ones are not asked about again


def test_a_bulk_adapter_that_raises_is_logged_and_the_round_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Down:
        def many(self, requests: list[ResumeRequest]) -> dict[str, Any]:
            raise RuntimeError("batch API down")

    class Garbled:
        def many(self, requests: list[ResumeRequest]) -> Any:
            return ["not", "a", "dict"]

    rt = Runtime(adapters={"external": Down(), "human": lambda request: True})
    out = rt.run(keyed_flow(), 1)
    gate = rt.run(Flow("g", [Gate("g")]))
    with caplog.at_level(logging.ERROR, logger="tarry"):
        [approved] = rt.poll()
    assert approved.session_id == gate.session_id and approved.ok
    assert "batch API down" in caplog.text
    assert rt.session(out.session_id).outcome.token == out.token
    rt.adapters = {"external": Garbled()}
    with caplog.at_level(logging.ERROR, logger="tarry"):
        assert rt.poll() == []
    assert "must return a dict" in caplog.text
    assert rt.resume(out.token, "fine").output == {"answer": "fine"}


class Counting:
    """A store that counts the calls to its methods that write."""

    WRITES = frozenset(
        {
            "create",
            "save",
            "delete",
            "prune",
            "append_events",
            "put_values",
            "consume_token",
            "consume_tokens",
            "request_stop",
            "claim",
            "claim_waits",
            "release",
            "post",
            "claim_mail",
            "purge_mail",
            "discard",
            "mark",
        }
    )

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name in self.WRITES:

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.writes.append(name)
                return attr(*args, **kwargs)

            return counted
        return attr


def test_poll_writes_nothing_for_requests_that_are_not_ready(store) -> None:
    counting = Counting(store)
    flow = keyed_flow()
    outs = [Runtime(store=store).run(flow, i) for i in range(10)]
    ready = {outs[2].token: "two", "prompt-7": "seven"}
    asked = []

    def one(request: ResumeRequest) -> Any:
        asked.append(request.key)
        return ready.get(request.token, ready.get(request.key, NOT_READY))

    rt = Runtime(store=counting, flows=[flow], adapters={"external": one})
    total = getattr(store, "_db", None)
    changes = total.total_changes if total is not None else None
    ready_now, ready = ready, {}
    assert rt.poll() == []
    assert counting.writes == []
    assert sorted(asked) == sorted(f"prompt-{i}" for i in range(10))  # once per request
    if total is not None:  # SQLite: not one row changed
        assert total.total_changes == changes
    ready = ready_now
    done = rt.poll()
    assert sorted(o.output["answer"] for o in done) == ["seven", "two"]
    # The ready ones' sessions were claimed (one call for the page) and resumed: nothing given
    # back, and no other session claimed or written.
    assert counting.writes.count("claim_waits") == 1
    assert "claim" not in counting.writes and "release" not in counting.writes
    for i, out in enumerate(outs):
        if i not in (2, 7):
            assert rt.session(out.session_id).outcome.token == out.token


def test_a_request_decodes_its_payload_only_when_read_and_looks_like_any_other(
    tmp_path: Path,
) -> None:
    bulk = BulkBatch()
    rt = Runtime(store=SQLiteStore(tmp_path / "p.db"), adapters={"external": bulk})
    out = rt.run(keyed_flow(), 1)
    assert rt.poll() == []
    [[request]] = bulk.asked
    assert isinstance(request, ResumeRequest)
    assert repr(request).startswith("ResumeRequest(") and "tk_" not in repr(request)
    assert request.payload == {"prompt": "p"}
    assert request.payload is request.payload  # decoded once
    eager = ResumeRequest(
        out.token, out.session_id, "external", "batch", {"prompt": "p"}, ("result",), "prompt-1"
    )
    assert request == eager and eager == request
    assert attrs.evolve(request, key="k").payload == {"prompt": "p"}
    assert pickle.loads(pickle.dumps(request)) == eager == copy.deepcopy(request)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        request.payload = 1  # type: ignore[misc]


def _spoil_payload(path: Path, session_id: str) -> None:
    import sqlite3

    with sqlite3.connect(path) as db:
        db.execute("UPDATE waits SET payload = X'c1' WHERE session_id = ?", (session_id,))


def test_a_payload_that_cannot_be_read_fails_only_the_adapters_that_read_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bulk = BulkBatch()
    store = SQLiteStore(tmp_path / "p.db")
    rt = Runtime(store=store, adapters={"external": bulk})
    outs = [rt.run(keyed_flow(), i) for i in range(3)]
    _spoil_payload(tmp_path / "p.db", outs[0].session_id)
    bulk.answer = {"prompt-0": "a", "prompt-1": "b"}  # reads keys only: all are asked
    done = rt.poll()
    assert sorted(o.output["answer"] for o in done) == ["a", "b"]

    def reader(request: ResumeRequest) -> Any:
        return request.payload["prompt"]

    rt2 = Runtime(store=store, adapters={"external": reader})
    _spoil_payload(tmp_path / "p.db", outs[2].session_id)
    more = [rt2.run(keyed_flow(), i) for i in range(3, 5)]
    with caplog.at_level(logging.ERROR, logger="tarry"):
        done = rt2.poll()
    assert sorted(o.session_id for o in done) == sorted(o.session_id for o in more)
    assert outs[2].session_id in caplog.text and "cannot be read" in caplog.text
    assert rt2.session(outs[2].session_id).status == "paused"
