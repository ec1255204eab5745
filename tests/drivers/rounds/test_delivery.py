"""Keyed waits and delivery: `Wait(key=...)`, `rt.deliver`, `deliver_many`, `discard` and the
mailbox, on every store (the `store` fixture: memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import tarry
from support import Crash
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
    assert store.mail("batch-7/item-42") == dumps([1, 2])
    out = rt.run(keyed())
    assert out.ok and out.output == {"got": [1, 2]}
    assert store.mail("batch-7/item-42") is None  # consumed, with the session's write
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


def test_two_sessions_waiting_on_one_key_are_both_resumed(store) -> None:
    rt = Runtime(store=store)
    one, two = rt.run(keyed("one", "shared")), rt.run(keyed("two", "shared"))
    outs = rt.deliver("shared", 5)
    assert sorted(o.session_id for o in outs) == sorted([one.session_id, two.session_id])
    assert all(o.ok and o.output == {"got": 5} for o in outs)
    assert store.mail("shared") is None


def test_discard_drops_kept_mail(store) -> None:
    rt = Runtime(store=store)
    rt.deliver("early", "value")
    assert rt.discard("early") is True
    assert rt.discard("early") is False
    assert rt.run(keyed(key="early")).paused
    with pytest.raises(tarry.InvalidResumeValue, match="key"):
        rt.discard("")


@pytest.mark.parametrize("key", ["", 7, None, b"bytes", ("a",)])
def test_a_bad_key_is_refused_and_nothing_changes(store, key: Any) -> None:
    rt = Runtime(store=store)
    out = rt.run(keyed())
    with pytest.raises(tarry.InvalidResumeValue, match="key"):
        rt.deliver(key, 1)
    with pytest.raises(tarry.InvalidResumeValue, match="key"):
        rt.deliver_many({"batch-7/item-42": 1, key: 2})
    stays(rt, out)
    assert store.mail("batch-7/item-42") is None


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
    assert store.mail("nobody") is None  # the good one of the refused batch was not kept
    with pytest.raises(tarry.InvalidArgument, match="mapping"):
        rt.deliver_many([("batch-7/item-42", 1)])  # type: ignore[arg-type]


def test_a_wait_of_an_unknown_flow_refuses_and_nothing_changes(store) -> None:
    out = Runtime(store=store).run(keyed())
    stranger = Runtime(store=store)  # knows no flow
    with pytest.raises(tarry.UnknownFlow):
        stranger.deliver("batch-7/item-42", 1)
    rt = Runtime(store=store, flows=[keyed()])
    stays(rt, out)
    assert store.mail("batch-7/item-42") is None
    assert rt.deliver("batch-7/item-42", 1)[0].ok


def test_deliver_many_one_resume_per_session_and_mail_for_the_rest(store) -> None:
    rt = Runtime(store=store)
    a, b = rt.run(keyed("a", "k-a")), rt.run(keyed("b", "k-b"))
    outs = rt.deliver_many({"k-b": "B", "nobody-yet": "N", "k-a": "A"})
    assert [o.session_id for o in outs] == [b.session_id, a.session_id]
    assert [o.output for o in outs] == [{"got": "B"}, {"got": "A"}]
    assert store.mail("nobody-yet") == dumps("N")
    assert rt.deliver_many({}) == []
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
            t.join(30)
        assert set(results) == {"token", "key"}  # neither thread raised anything else
        view = rt.session(out.session_id)
        assert [e.type for e in view.events()].count("run.resumed") == 1  # never both
        won = view.outcome.output["got"]
        if won == "key":
            assert results["token"] is None and len(results["key"]) == 1
        else:  # the token won: the delivery went to the mailbox, not lost
            assert won == "token" and results["key"] == []
            assert store.mail(f"race-{i}") == dumps("key")


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

        def take_mail(self, keys: Any, session_id: str) -> dict[str, bytes]:
            if not posted:  # the Wait's own look: nothing yet; the delivery lands just after
                posted.append(self.inner.post("late", dumps("mail"), ManualClock().now()))
                return {}
            return self.inner.take_mail(keys, session_id)

    rt = Runtime(store=Late(store))
    out = rt.run(keyed(key="late"))
    assert posted == [[]]  # no wait was registered yet: kept as mail
    assert out.ok and out.output == {"got": "mail"}
    assert store.mail("late") is None


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
    assert store.mail("k") is None
