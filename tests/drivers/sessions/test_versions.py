"""Versions side by side: a session is resumed, timed and recovered with the flow whose
fingerprint started it; a changed flow only with allow_changed=True, and only of its name.

Every test runs on memory, SQLite and PostgreSQL (a fresh schema per test)."""

from __future__ import annotations

from typing import Any

import pytest
from support import Crash
from tarry import (
    Flow,
    FlowMismatch,
    ForEach,
    Gate,
    ManualClock,
    Runtime,
    Sleep,
    UnknownFlow,
    step,
)
from tarry.snapshots import loads


def finish(tag: str) -> Any:
    return step(lambda ctx: (tag, ctx.prev), "finish")


def gated(tag: str, *extra: Any, version: Any = None) -> Flow:
    """A flow "job" that waits at a Gate; `extra` elements make it another version."""
    return Flow("job", [Gate("ok"), finish(tag), *extra], version=version)


def sleeper(tag: str, *extra: Any) -> Flow:
    return Flow("nap", [Sleep("nap", seconds=60), finish(tag), *extra])


def extra_step(ran: list[str]) -> Any:
    def extra(ctx):
        ran.append("extra")
        return ctx.prev

    return extra


def unchanged(store: Any, sid: str) -> tuple[Any, ...]:
    """What the store holds of a session, to show that a refused call changed nothing."""
    record = store.load(sid)
    used = None if record.token is None else store.find_token(record.token)
    return (
        record.status,
        record.state,
        record.version,
        record.fingerprint,
        record.meta,
        record.lease_owner,
        used,
        [e.seq for e in store.events(sid)],
    )


# --- resume ----------------------------------------------------------------------------------


def test_two_versions_side_by_side_each_session_resumes_with_its_own(store) -> None:
    v1 = gated("v1")
    v2 = gated("v2", step(lambda ctx: ("v2 after", ctx.prev), "after"))
    assert v1.fingerprint != v2.fingerprint
    first = Runtime(store=store).run(v1)
    second = Runtime(store=store).run(v2)

    for flows in ([v1, v2], [v2, v1], [v1, v2, v1, v2]):  # order and repeats do not matter
        rt = Runtime(store=store, flows=flows)
        a, b = rt.run(v1), rt.run(v2)
        assert rt.resume(a.token, True).output == ("v1", {"approved": True})
        assert rt.resume(b.token, True).output == ("v2 after", ("v2", {"approved": True}))

    rt = Runtime(store=store, flows=[v2, v1])
    assert rt.resume(first.token, True).output == ("v1", {"approved": True})
    assert rt.resume(second.token, True).output == ("v2 after", ("v2", {"approved": True}))


def test_a_deploy_that_changed_the_flow_refuses_the_resume_and_names_both_fingerprints(
    store,
) -> None:
    v1 = gated("v1")
    out = Runtime(store=store).run(v1)
    ran: list[str] = []
    v2 = gated("v1", extra_step(ran), version="2")
    deployed = Runtime(store=store, flows=[v2])
    before = unchanged(store, out.session_id)

    with pytest.raises(FlowMismatch) as refused:
        deployed.resume(out.token, True)
    message = str(refused.value)
    assert out.session_id in message and "'job'" in message
    assert v1.fingerprint in message and v2.fingerprint in message and "'2'" in message
    assert refused.value.fingerprint == v1.fingerprint
    assert refused.value.known == (v2.fingerprint,)
    assert unchanged(store, out.session_id) == before

    # With the version that started it registered beside the new one, it goes on with that one.
    both = Runtime(store=store, flows=[v2, v1])
    assert both.resume(out.token, True).output == ("v1", {"approved": True})
    assert ran == []


def test_no_flow_of_the_name_is_unknown_flow_naming_the_session(store) -> None:
    out = Runtime(store=store).run(gated("v1"))
    before = unchanged(store, out.session_id)
    other = Runtime(store=store, flows=[Flow("other", [Gate("ok")])])
    with pytest.raises(UnknownFlow) as refused:
        other.resume(out.token, True)
    assert out.session_id in str(refused.value) and gated("v1").fingerprint in str(refused.value)
    assert unchanged(store, out.session_id) == before


def test_allow_changed_refuses_a_flow_of_another_name(store) -> None:
    rt = Runtime(store=store)
    out = rt.run(gated("v1"))
    before = unchanged(store, out.session_id)
    impostor = Flow("another", [Gate("ok"), finish("x")])
    for flow in (impostor, Flow("another", gated("v1").body)):
        with pytest.raises(FlowMismatch) as refused:
            rt.resume(out.token, True, flow=flow, allow_changed=True)
        assert "'another'" in str(refused.value) and "'job'" in str(refused.value)
        assert unchanged(store, out.session_id) == before
    assert rt.resume(out.token, True).ok


def test_allow_changed_records_the_new_flow_its_version_and_module_reference(store) -> None:
    v1 = Flow("job", [Gate("a"), Gate("b"), finish("v1")], version=1)
    rt = Runtime(store=store)
    out = rt.run(v1, meta={"flow_ref": "jobs:job", "owner": "ops"})
    v2 = Flow("job", [Gate("a"), Gate("b"), finish("v2")], version=2)

    second = Runtime(store=store).resume(
        out.token, True, flow=v2, allow_changed=True, meta={"flow_ref": "jobs_v2:job"}
    )
    assert second.paused and second.pause.path == ("b",)
    record = store.load(out.session_id)
    assert (record.fingerprint, record.flow_version) == (v2.fingerprint, 2)
    assert loads(record.state)["flow"] == {
        "name": "job",
        "fingerprint": v2.fingerprint,
        "version": 2,
    }
    assert record.meta == {"flow_ref": "jobs_v2:job", "owner": "ops"}
    assert rt.session(out.session_id).meta["flow_ref"] == "jobs_v2:job"

    # From now on the session belongs to v2: v1 alone no longer resumes it, v2 does, unasked.
    before = unchanged(store, out.session_id)
    with pytest.raises(FlowMismatch):
        Runtime(store=store, flows=[v1]).resume(second.token, True)
    assert unchanged(store, out.session_id) == before
    done = Runtime(store=store, flows=[v1, v2]).resume(second.token, True)
    assert done.output == ("v2", {"approved": True})


def test_a_meta_that_is_not_a_dict_or_not_encodable_is_refused_before_the_token_is_used(
    store,
) -> None:
    from tarry import InvalidArgument, NotSerializable

    rt = Runtime(store=store)
    out = rt.run(gated("v1"))
    before = unchanged(store, out.session_id)
    with pytest.raises(InvalidArgument):
        rt.resume(out.token, True, meta=["flow_ref"])
    with pytest.raises(NotSerializable):
        rt.resume(out.token, True, meta={"flow_ref": object()})
    assert unchanged(store, out.session_id) == before


# --- timers ----------------------------------------------------------------------------------


def test_timers_wake_each_version_with_its_own_and_leave_a_changed_one_untouched(store) -> None:
    clock = ManualClock()
    ran: list[str] = []
    v1, v2 = sleeper("v1"), sleeper("v2", extra_step(ran))
    rt = Runtime(store=store, clock=clock)
    a, b = rt.run(v1), rt.run(v2)
    clock.advance(61)

    # Only v2 deployed: the v1 session is not run with it (whether the round reports the
    # refusal or skips it), and stays exactly as it was.
    only_v2 = Runtime(store=store, clock=clock, flows=[v2])
    before = unchanged(store, a.session_id)
    try:
        outcomes = only_v2.resume_due()
    except FlowMismatch as exc:
        assert a.session_id in str(exc)
    else:
        assert [o.session_id for o in outcomes] == [b.session_id]
        assert ran == ["extra"]
    assert unchanged(store, a.session_id) == before

    both = Runtime(store=store, clock=clock, flows=[v2, v1])
    woken = {o.session_id: o.output for o in both.resume_due()}
    assert woken[a.session_id] == ("v1", None)
    assert rt.session(b.session_id).status == "completed"
    assert ran == ["extra"]  # the v2 step ran for the v2 session only


# --- recovery --------------------------------------------------------------------------------


def crashing(ran: list[Any], tag: str, *extra: Any, crash_at: int | None = None) -> Flow:
    def work(ctx):
        ran.append((tag, ctx.item))
        if ctx.item == crash_at and ran.count((tag, ctx.item)) == 1:
            raise Crash
        return ctx.item * 10

    return Flow(
        "rec", [ForEach("items", [1, 2, 3], work), step(lambda ctx: (tag, ctx.prev), "end"), *extra]
    )


def test_recover_checks_the_fingerprint_and_leaves_a_changed_flows_session_alone(store) -> None:
    clock = ManualClock()
    ran: list[Any] = []
    v1 = crashing(ran, "v1", crash_at=2)
    dead = Runtime(store=store, durability="step", clock=clock, lease=30)
    with pytest.raises(Crash):
        dead.run(v1)
    [sid] = [s.session_id for s in dead.sessions()]
    clock.advance(31)

    extras: list[str] = []
    v2 = crashing(ran, "v2", extra_step(extras))
    assert v2.fingerprint != v1.fingerprint
    changed = Runtime(store=store, durability="step", clock=clock, flows=[v2])
    before = unchanged(store, sid)
    assert changed.recover() == []
    assert unchanged(store, sid) == before  # its lease is not taken: still the dead one's
    assert store.load(sid).lease_owner == dead.owner
    assert ran == [("v1", 1), ("v1", 2)] and extras == []

    # With the version that started it registered beside the changed one, it goes on with v1.
    both = Runtime(store=store, durability="step", clock=clock, flows=[v2, crashing(ran, "v1")])
    [out] = both.recover()
    assert out.ok and out.output == ("v1", [10, 20, 30])
    assert ran == [("v1", 1), ("v1", 2), ("v1", 2), ("v1", 3)] and extras == []
    view = both.session(sid)
    assert view.derive_state() == view.state


def test_recover_continues_a_repaired_resume_with_the_repaired_flow(store) -> None:
    clock = ManualClock()
    ran: list[Any] = []

    def flow_of(tag: str, version: int, crash_at: int | None = None) -> Flow:
        def work(ctx):
            ran.append((tag, ctx.item))
            if ctx.item == crash_at and ran.count((tag, ctx.item)) == 1:
                raise Crash
            return (tag, ctx.item)

        return Flow("fix", [Gate("ok"), ForEach("items", [1, 2], work)], version=version)

    rt = Runtime(store=store, durability="step", clock=clock, lease=30)
    out = rt.run(flow_of("v1", 1))
    with pytest.raises(Crash):
        rt.resume(out.token, True, flow=flow_of("v2", 2, crash_at=2), allow_changed=True)
    clock.advance(31)

    # The row still says v1 (the run never wrote it), but the resume recorded v2 in its log.
    assert store.load(out.session_id).fingerprint == flow_of("v1", 1).fingerprint
    old_only = Runtime(store=store, durability="step", clock=clock, flows=[flow_of("v1", 1)])
    assert old_only.recover() == []
    repaired = Runtime(store=store, durability="step", clock=clock, flows=[flow_of("v2", 2)])
    [done] = repaired.recover()
    assert done.ok and done.output == [("v2", 1), ("v2", 2)]
    assert store.load(out.session_id).fingerprint == flow_of("v2", 2).fingerprint
    assert [tag for tag, _ in ran] == ["v2", "v2", "v2"]
