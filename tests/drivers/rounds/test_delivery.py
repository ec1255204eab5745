"""Keyed waits and delivery: `Wait(key=...)`, `rt.deliver`, `deliver_many`, `broadcast`,
`discard` and the mailbox (a queue of messages per key), on every store (the `store` fixture:
memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import tarry
from support import WAIT, Crash
from tarry import Flow, ForEach, ManualClock, Runtime, Wait
from tarry.snapshots import dumps


def keyed(name: str = "keyed", key: Any = "batch-7/item-42") -> Flow:
    return Flow(
        name,
        [
            lambda ctx: "submitted",
            Wait("result", reason="batch", key=key),
            lambda ctx: {"got": ctx.prev},
        ],
    )


def queued(store: Any, key: str) -> list[bytes]:
    """The encoded messages queued on `key`, oldest first."""
    return [m.value for m in store.queued(key=key)]


def stays(rt: Runtime, out: tarry.Outcome) -> None:
    """The session is exactly where `out` left it: paused, same token, never resumed."""
    view = rt.session(out.session_id)
    assert view.status == "paused" and view.outcome.token == out.token
    kinds = [e.type for e in view.events()]
    assert kinds[-1] == "run.paused" and "run.resumed" not in kinds


def test_deliver_resumes_the_session_waiting_on_the_key(store) -> None:
    rt = Runtime(store=store)
    out = rt.run(keyed())
    assert out.paused and out.pause.kind == "external"
    [done] = rt.deliver("batch-7/item-42", {"score": 0.9})
    assert done.session_id == out.session_id
    assert done.ok and done.output == {"got": {"score": 0.9}}
    assert done.meta["trigger"] == "deliver"
    paused = [e for e in rt.session(out.session_id).events() if e.type == "run.paused"]
    assert paused[0].data["key"] == "batch-7/item-42"
    with pytest.raises(tarry.TokenAlreadyUsed):
        rt.resume(out.token, 1)  # the delivery used the wait's token


def test_a_delivery_before_the_wait_is_kept_and_the_wait_does_not_pause(store) -> None:
    rt = Runtime(store=store)
    assert rt.deliver("batch-7/item-42", [1, 2]) == []
    assert queued(store, "batch-7/item-42") == [dumps([1, 2])]
    out = rt.run(keyed())
    assert out.ok and out.output == {"got": [1, 2]}
    assert queued(store, "batch-7/item-42") == []  # consumed, with the session's write
    kinds = [e.type for e in rt.session(out.session_id).events()]
    assert "run.paused" not in kinds
    again = rt.run(keyed())  # the mail went to the first wait only
    assert again.paused


def test_a_dynamic_key_names_the_item(store) -> None:
    rt = Runtime(store=store)
    flow = Flow(
        "items",
        [
            ForEach(
                "items", lambda ctx: ctx.input, [Wait("job", key=lambda ctx: f"job-{ctx.item}")]
            ),
        ],
    )
    rt.deliver("job-b", "B")  # before its wait is reached: kept as mail
    out = rt.run(flow, ["a", "b", "c"])
    assert out.paused and out.pause.path == ("items", 0, "job")
    out = rt.deliver("job-a", "A")[0]
    assert out.paused and out.pause.path == ("items", 2, "job")  # item b took its mail
    [done] = rt.deliver("job-c", "C")
    assert done.ok and done.output == ["A", "B", "C"]


def test_one_message_goes_to_one_of_two_sessions_waiting_on_its_key(store) -> None:
    rt = Runtime(store=store)
    one, two = rt.run(keyed("one", "shared")), rt.run(keyed("two", "shared"))
    [first] = rt.deliver("shared", 5)
    assert first.ok and first.output == {"got": 5}
    assert first.session_id in (one.session_id, two.session_id)
    [second] = rt.deliver("shared", 6)
    assert second.ok and second.output == {"got": 6}
    assert {first.session_id, second.session_id} == {one.session_id, two.session_id}
    assert queued(store, "shared") == []


def test_broadcast_resumes_every_waiter_and_keeps_nothing(store) -> None:
    rt = Runtime(store=store)
    one, two = rt.run(keyed("one", "ready")), rt.run(keyed("two", "ready"))
    outs = rt.broadcast("ready", "go")
    assert sorted(o.session_id for o in outs) == sorted([one.session_id, two.session_id])
    assert all(o.ok and o.output == {"got": "go"} for o in outs)
    assert rt.broadcast("ready", "again") == []
    assert queued(store, "ready") == [] and rt.mailbox() == []


def test_two_early_deliveries_are_two_messages_taken_in_order(store) -> None:
    rt = Runtime(store=store)
    assert rt.deliver("k", "a") == [] and rt.deliver("k", "b") == []
    [info] = rt.mailbox()
    assert (info.key, info.count) == ("k", 2)
    flow = Flow("two", [Wait("m1", key="k"), Wait("m2", key="k"), Wait("m3", key="k")])
    out = rt.run(flow)
    assert out.paused and out.pause.path == ("m3",)
    assert out.pause.partial == {"m1": "a", "m2": "b"}
    [done] = rt.deliver("k", "c")
    assert done.ok and done.output == "c"


def test_one_early_message_is_taken_by_one_wait_only(store) -> None:
    rt = Runtime(store=store)
    rt.deliver("k", "a")
    out = rt.run(Flow("two", [Wait("m1", key="k"), Wait("m2", key="k")]))
    assert out.paused and out.pause.path == ("m2",) and out.pause.partial == {"m1": "a"}
    assert rt.mailbox() == []


def test_a_loop_around_a_keyed_wait_takes_one_message_per_iteration(store) -> None:
    rt = Runtime(store=store)
    rt.deliver("tick", 1)
    rt.deliver("tick", 2)
    flow = Flow(
        "loop",
        [
            tarry.Loop(
                "l",
                [Wait("w", key="tick")],
                until=lambda ctx: ctx.iteration >= 2,
                max_iterations=5,
            )
        ],
    )
    out = rt.run(flow)
    assert out.paused  # two messages for three iterations
    [done] = rt.deliver("tick", 3)
    assert done.ok and done.output == 3
    taken = [
        e.data["output"]
        for e in rt.session(out.session_id).events()
        if e.type == "node.completed" and e.path[-1] == "w"
    ]
    assert taken == [1, 2, 3]


def test_late_mail_for_several_waiting_lanes_reaches_each(store) -> None:
    """Lanes 0 and 1 wait on their keys while lane 2 is still in its step; both keys get
    their messages meanwhile: when the session pauses, each lane takes its own."""
    gate = threading.Event()
    rt = Runtime(store=store)

    def slow(ctx: Any) -> Any:
        if ctx.item == 2:
            # Lanes 0 and 1 are waiting now: their keys' messages are queued for them.
            for i in (0, 1):
                rt.deliver(f"lane-{i}", f"v{i}")
            gate.set()
        return ctx.item

    flow = Flow(
        "lanes",
        [
            ForEach(
                "items",
                [0, 1, 2],
                [slow, Wait("w", key=lambda ctx: f"lane-{ctx.item}")],
                concurrency=3,
            )
        ],
    )
    out = rt.run(flow)
    assert gate.is_set()
    assert out.paused and [p.path for p in out.pauses] == [("items", 2, "w")]
    [done] = rt.deliver("lane-2", "v2")
    assert done.ok and done.output == ["v0", "v1", "v2"]
    assert rt.mailbox() == []


def test_discard_drops_queued_messages(store) -> None:
    rt = Runtime(store=store)
    rt.deliver("early", "value")
    rt.deliver("early", "again")
    assert rt.discard("early") == 2
    assert rt.discard("early") == 0
    assert rt.run(keyed(key="early")).paused
    with pytest.raises(tarry.InvalidArgument, match="key"):
        rt.discard("")


BAD_KEYS = ["", 7, None, b"bytes", ("a",), "x" * 513, "nul\x00", "lone\ud800"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_a_bad_key_is_refused_and_nothing_changes(store, key: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(keyed())
    with pytest.raises(tarry.InvalidArgument, match="key"):
        rt.deliver(key, 1)
    with pytest.raises(tarry.InvalidArgument, match="key"):
        rt.deliver_many({"batch-7/item-42": 1, key: 2})
    with pytest.raises(tarry.InvalidArgument, match="key"):
        rt.broadcast(key, 1)
    stays(rt, out)
    assert queued(store, "batch-7/item-42") == []


@pytest.mark.parametrize("key", ["long", "nul", "lone"])
def test_a_wait_whose_key_the_store_cannot_hold_fails_typed_and_retryable(store, key) -> None:
    rt = Runtime(store=store)
    bad = {"long": "x" * 513, "nul": "nul\x00", "lone": "lone" + chr(0xD800)}
    out = rt.run(Flow("bad", [Wait("w", key=lambda ctx: bad[ctx.input])]), key)
    assert out.failed and out.error.type == "InvalidArgument" and out.error.retryable
    assert rt.session(out.session_id).status == "failed"


def test_a_bad_value_is_refused_and_nothing_changes(store) -> None:
    rt = Runtime(store=store, max_value_bytes=1000)
    out = rt.run(keyed())
    with pytest.raises(tarry.NotSerializable, match="batch-7/item-42"):
        rt.deliver("batch-7/item-42", object())
    with pytest.raises(tarry.PayloadTooLarge):
        rt.deliver("batch-7/item-42", "x" * 2000)
    with pytest.raises(tarry.PayloadTooLarge):
        rt.deliver_many({"nobody": 1, "batch-7/item-42": "x" * 2000})
    stays(rt, out)
    assert queued(store, "nobody") == []  # the good one of the refused batch was not kept
    with pytest.raises(tarry.InvalidArgument, match="mapping"):
        rt.deliver_many([("batch-7/item-42", 1)])  # type: ignore[arg-type]


def test_a_wait_of_an_unknown_flow_refuses_and_nothing_changes(store) -> None:
    out = Runtime(store=store).run(keyed())
    stranger = Runtime(store=store)  # knows no flow
    with pytest.raises(tarry.UnknownFlow):
        stranger.deliver("batch-7/item-42", 1)
    rt = Runtime(store=store, flows=[keyed()])
    stays(rt, out)
    assert queued(store, "batch-7/item-42") == []
    assert rt.deliver("batch-7/item-42", 1)[0].ok


def test_deliver_many_one_resume_per_session_and_mail_for_the_rest(store) -> None:
    rt = Runtime(store=store)
    a, b = rt.run(keyed("a", "k-a")), rt.run(keyed("b", "k-b"))
    done = rt.deliver_many({"k-b": "B", "nobody-yet": "N", "k-a": "A"})
    outs = done.outcomes
    assert [o.session_id for o in outs] == [b.session_id, a.session_id]
    assert [o.output for o in outs] == [{"got": "B"}, {"got": "A"}]
    assert done.applied == {"k-b": b.session_id, "k-a": a.session_id}
    assert done.queued == ["nobody-yet"]
    assert queued(store, "nobody-yet") == [dumps("N")]
    empty = rt.deliver_many({})
    assert (empty.applied, empty.queued, empty.outcomes) == ({}, [], [])
    for sid in (a.session_id, b.session_id):
        kinds = [e.type for e in rt.session(sid).events()]
        assert kinds.count("run.resumed") == 1


def test_a_delivery_racing_a_token_resume_is_applied_once_and_never_lost(store) -> None:
    rt = Runtime(store=store)
    outs = [rt.run(keyed(key=f"race-{i}")) for i in range(12)]
    results: dict[str, Any] = {}
    barrier = threading.Barrier(2)

    def by_token(out: tarry.Outcome) -> None:
        barrier.wait()
        try:
            results["token"] = rt.resume(out.token, "token")
        except (tarry.TokenAlreadyUsed, tarry.SessionNotResumable):
            # (A resume that read the session after the delivery ended it finds it completed.)
            results["token"] = None

    def by_key(i: int) -> None:
        barrier.wait()
        results["key"] = rt.deliver(f"race-{i}", "key")

    for i, out in enumerate(outs):
        results.clear()
        threads = [
            threading.Thread(target=by_token, args=(out,)),
            threading.Thread(target=by_key, args=(i,)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        assert set(results) == {"token", "key"}  # neither thread raised anything else
        view = rt.session(out.session_id)
        assert [e.type for e in view.events()].count("run.resumed") == 1  # never both
        won = view.outcome.output["got"]
        if won == "key":
            assert results["token"] is None and len(results["key"]) == 1
        else:  # the token won: the delivery stays queued, not lost
            assert won == "token" and results["key"] == []
            assert queued(store, f"race-{i}") == [dumps("key")]


def test_mail_posted_while_the_wait_pauses_resumes_it_at_once(store) -> None:
    """A delivery that finds no wait yet and keeps its value as mail, while the Wait that is
    about to pause on the key found no mail a moment before: the drive looks again after its
    write that registers the wait, and resumes it with the mail."""
    posted = []

    class Late:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def claim_mail(self, key: str, session_id: str, skip: Any = ()) -> Any:
            if not posted:  # the Wait's own look: nothing yet; the delivery lands just after
                posted.append(self.inner.post("late", dumps("mail"), ManualClock().now()))
                return None
            return self.inner.claim_mail(key, session_id, skip)

    rt = Runtime(store=Late(store))
    out = rt.run(keyed(key="late"))
    assert len(posted) == 1  # no wait was registered yet: queued
    assert out.ok and out.output == {"got": "mail"}
    assert queued(store, "late") == []


def test_mail_taken_by_a_run_that_died_is_taken_again_on_recovery(store) -> None:
    clock = ManualClock()
    crashed = []

    def after(ctx: Any) -> Any:
        if not crashed:
            crashed.append(True)
            raise Crash
        return {"got": ctx.prev}

    flow = Flow("dies", [Wait("result", key="k"), after])
    rt = Runtime(store=store, clock=clock, lease=30)
    rt.deliver("k", "kept")
    with pytest.raises(Crash):
        rt.run(flow)
    clock.advance(31)
    [out] = Runtime(store=store, clock=clock, flows=[flow]).recover()
    assert out.ok and out.output == {"got": "kept"}
    assert queued(store, "k") == []


def test_messages_older_than_mail_ttl_are_dropped_by_prune(store) -> None:
    from datetime import timedelta

    clock = ManualClock()
    rt = Runtime(store=store, clock=clock, mail_ttl=timedelta(days=1))
    rt.deliver("old", 1)
    clock.advance(2 * 86400)
    rt.deliver("young", 2)
    assert [i.key for i in rt.mailbox()] == ["old", "young"]
    rt.prune(older_than=timedelta(days=7))
    assert [(i.key, i.count) for i in rt.mailbox()] == [("young", 1)]
    for bad in (timedelta(0), 3600, None):
        with pytest.raises(tarry.InvalidArgument, match="mail_ttl"):
            Runtime(store=store, mail_ttl=bad)  # type: ignore[arg-type]
