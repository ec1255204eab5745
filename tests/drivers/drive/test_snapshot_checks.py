"""A snapshot that cannot be continued is refused before its token is used.

Corrupt bytes, wrong types, and positions the flow does not have (a frame of no container, a
child past the end of its body (a nested Flow's too), an iteration past the items, a Graph node
or Branch side that does not exist, a pause where the run does not stand) raise SnapshotError from `resume`,
`resume_due` and `recover` — never IndexError, KeyError or TypeError — and the session stays
exactly as it was: its token unused, its snapshot, events and lease untouched. Restoring the
snapshot shows nothing was lost. Every test runs on memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import Crash
from tarry import (
    Branch,
    ConcurrentUpdate,
    Event,
    Flow,
    ForEach,
    Gate,
    Graph,
    Loop,
    ManualClock,
    Route,
    Runtime,
    SessionNotResumable,
    Sleep,
    SnapshotError,
    TarryError,
    step,
)
from tarry.snapshots import MemoryStore, dumps, loads

# --- flows, each paused somewhere inside a container --------------------------------------------


def nest() -> Flow:
    """Paused at items/0/ok: a ForEach frame (size 3, iteration 0 started, child 1)."""
    return Flow(
        "nest",
        [
            step(lambda ctx: "prepared", "prep"),
            ForEach("items", [1, 2, 3], [step(lambda ctx: ctx.item * 2, "double"), Gate("ok")]),
            step(lambda ctx: ctx.prev, "total"),
        ],
    )


def branchy() -> Flow:
    """Paused at br/yes: a Branch frame on its 'then' side."""
    return Flow(
        "branchy", [Branch("br", when=lambda ctx: True, then=Gate("yes"), otherwise=Gate("no"))]
    )


def graphy() -> Flow:
    """Paused at g/1/gate: a Graph frame at node 'gate', its second iteration."""
    route = step(lambda ctx: Route("next", 1), "route")
    return Flow(
        "graphy",
        [Graph("g", [route, Gate("gate")], start="route", routes={"route": {"next": "gate"}})],
    )


def deep() -> Flow:
    """Paused at outer/0/inner/0/g: a Loop frame inside a ForEach frame."""
    inner = Loop("inner", Gate("g"), until=lambda ctx: True, max_iterations=3)
    return Flow("deep", [ForEach("outer", [1, 2], inner)])


def nested() -> Flow:
    """Paused at outer/0/inner/g: a nested Flow's frame inside a ForEach frame."""
    return Flow("nested", [ForEach("outer", [1, 2], Flow("inner", [Gate("g")]))])


FLOWS = {"nest": nest, "branchy": branchy, "graphy": graphy, "deep": deep, "nested": nested}
DONE = {
    "nest": [{"approved": True}] * 3,
    "branchy": {"approved": True},
    "graphy": {"approved": True},
    "deep": [{"approved": True}, {"approved": True}],
    "nested": [{"approved": True}, {"approved": True}],
}


def frame(n: int, **changes: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state["container_stack"][n].update(changes)

    return change


def pause_at(*path: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state["pause"]["path"] = list(path)

    return change


def set_(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state[key] = value

    return change


def output(name: str) -> Callable[[dict[str, Any]], None]:
    def change(state: dict[str, Any]) -> None:
        state["outputs"][name] = 1

    return change


#: (flow, change of the state in the snapshot's envelope, a word the error must say)
INCONSISTENT = {
    "child past the end of the body": ("nest", frame(0, child=9), "child 9"),
    "negative child": ("nest", frame(0, child=-1), "negative"),
    "iteration past the items": ("nest", frame(0, iteration=9), "iteration 9"),
    "iteration in progress at the end of the items": ("nest", frame(0, iteration=3), "iteration 3"),
    "frame naming no element": ("nest", frame(0, path=["nope"], node="nope"), "nope"),
    "frame of another kind": ("nest", frame(0, kind="loop"), "foreach"),
    "frame path of unhashable parts": ("nest", frame(0, path=[{"x": 1}]), "names and indexes"),
    "pause at no element": ("nest", pause_at("items", 0, "ghost"), "ghost"),
    "pause in another iteration": ("nest", pause_at("items", 2, "ok"), "items/2/ok"),
    "pause path of unhashable parts": ("nest", pause_at("items", [0], "ok"), "names and indexes"),
    "completed outputs the flow does not have first": ("nest", output("total"), "total"),
    "state of another session": ("nest", set_("session_id", "someone else"), "someone else"),
    "state of another flow": ("nest", set_("flow", "other"), "other"),
    "graph node that does not exist": ("graphy", frame(0, selected="ghost"), "ghost"),
    "graph node of another type": ("graphy", frame(0, selected=["gate"]), "node"),
    "branch side that does not exist": ("branchy", frame(0, selected="maybe"), "maybe"),
    "nested frame of another iteration": (
        "deep",
        frame(1, path=["outer", 1, "inner"]),
        "outer/1/inner",
    ),
    "nested frame of a container not begun": ("deep", frame(0, started=False), "no iteration"),
    "nested flow's child past its body": ("nested", frame(1, child=9), "child 9"),
    "nested flow's frame of another kind": ("nested", frame(1, kind="loop"), "has a flow"),
    "nested flow's frame in another iteration": (
        "nested",
        frame(1, path=["outer", 1, "inner"]),
        "outer/1/inner",
    ),
}

#: (flow, change of the snapshot's bytes)
UNREADABLE = {
    "truncated": ("nest", lambda blob: blob[:-7]),
    "garbage": ("nest", lambda blob: b"\x93\x01\xc1\xff"),
    "empty map": ("nest", lambda blob: dumps({})),
    "not a map": ("nest", lambda blob: dumps([1, 2, 3])),
    "child of the wrong type": ("nest", lambda blob: _edit(blob, frame(0, child="1"))),
    "frames of the wrong type": ("nest", lambda blob: _edit(blob, set_("container_stack", 5))),
    "a frame without its kind": ("nest", lambda blob: _edit(blob, _drop_kind)),
}


def _drop_kind(state: dict[str, Any]) -> None:
    del state["container_stack"][0]["kind"]


def _edit(blob: bytes, change: Callable[[dict[str, Any]], None]) -> bytes:
    envelope = loads(blob)
    change(envelope["state"])
    return dumps(envelope)


def write(store: Any, sid: str, blob: bytes) -> None:
    record = store.load(sid)
    record.state = blob
    store.save(record, record.version)


def unchanged(store: Any, sid: str, token_key: str) -> tuple[Any, ...]:
    record = store.load(sid)
    return (
        record.status,
        record.state,
        record.version,
        record.token,
        record.lease_owner,
        record.lease_until,
        store.find_token(token_key),
        [e.seq for e in store.events(sid)],
    )


def bad(name: str) -> tuple[str, Callable[[bytes], bytes], str]:
    if name in INCONSISTENT:
        flow, change, word = INCONSISTENT[name]
        return flow, lambda blob: _edit(blob, change), word
    flow, corrupt = UNREADABLE[name]
    return flow, corrupt, ""


CASES = sorted(INCONSISTENT) + sorted(UNREADABLE)


# --- resume ----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_resume_refuses_a_bad_snapshot_before_using_its_token(store, case: str) -> None:
    which, corrupt, word = bad(case)
    flow = FLOWS[which]()
    rt = Runtime(store=store)
    out = rt.run(flow)
    assert out.paused
    sid, key = out.session_id, rt.tokens.key(out.token)
    good = store.load(sid).state
    write(store, sid, corrupt(good))
    before = unchanged(store, sid, key)

    fresh = Runtime(store=store, flows=[flow])
    with pytest.raises(SnapshotError) as refused:
        fresh.resume(out.token, True)
    assert sid in str(refused.value) and word in str(refused.value)
    assert unchanged(store, sid, key) == before
    assert not store.find_token(key).used

    write(store, sid, good)  # nothing was lost: the session goes on from where it stood
    assert resume_to_end(fresh, out.token).output == DONE[which]


def resume_to_end(rt: Runtime, token: str) -> Any:
    out = rt.resume(token, True)
    while out.paused:
        out = rt.resume(out.token, True)
    return out


# --- timers ----------------------------------------------------------------------------------


def napping() -> Flow:
    return Flow(
        "naps",
        [ForEach("items", [1, 2], [Sleep("nap", seconds=60), step(lambda ctx: ctx.item, "after")])],
    )


@pytest.mark.parametrize("case", ["child past the end of the body", "truncated"])
def test_a_timer_of_a_bad_snapshot_leaves_it_as_it_was(store, case: str) -> None:
    clock = ManualClock()
    flow = napping()
    rt = Runtime(store=store, clock=clock, flows=[flow])
    out = rt.run(flow)
    sid, key = out.session_id, rt.tokens.key(out.token)
    good = store.load(sid).state
    _, corrupt, _ = bad(case)
    write(store, sid, corrupt(good))
    before = unchanged(store, sid, key)
    clock.advance(61)

    worker = Runtime(store=store, clock=clock, flows=[flow])
    try:  # the round reports the refusal, or logs it and skips the session
        assert worker.resume_due() == []
    except SnapshotError as exc:
        assert sid in str(exc)
    assert unchanged(store, sid, key) == before

    write(store, sid, good)
    [woken] = worker.resume_due()
    assert woken.paused and woken.pause.path == ("items", 1, "nap")


# --- recovery --------------------------------------------------------------------------------


def crashing(crashes: list[int]) -> Flow:
    def work(ctx):
        if ctx.item == 1 and not crashes:
            crashes.append(1)
            raise Crash
        return ctx.item

    return Flow("rc", [ForEach("items", [1, 2], [Gate("ok"), step(work, "work")])])


@pytest.mark.parametrize(
    "case",
    [
        "child past the end of the body",
        "iteration past the items",
        "frame naming no element",
        "truncated",
        "child of the wrong type",
    ],
)
def test_recover_leaves_a_bad_snapshot_alone_and_its_lease_expired(store, case: str) -> None:
    clock = ManualClock()
    crashes: list[int] = []
    rt = Runtime(store=store, clock=clock, lease=30)
    out = rt.run(crashing(crashes))
    with pytest.raises(Crash):
        rt.resume(out.token, True)  # dies in the step after the Gate: recover() continues it
    sid, key = out.session_id, rt.tokens.key(out.token)
    good = store.load(sid).state
    _, corrupt, _ = bad(case)
    write(store, sid, corrupt(good))
    clock.advance(31)
    before = unchanged(store, sid, key)

    worker = Runtime(store=store, clock=clock, flows=[crashing(crashes)])
    assert worker.recover() == []
    assert worker.recover() == []  # every round: no exception, nothing taken
    assert unchanged(store, sid, key) == before
    assert store.load(sid).lease_owner == rt.owner  # still expired: recoverable once repaired

    write(store, sid, good)
    [recovered] = worker.recover()
    assert recovered.paused and recovered.pause.path == ("items", 1, "ok")
    assert resume_to_end(worker, recovered.token).output == [1, 2]


def test_recover_leaves_alone_a_session_whose_events_do_not_apply(store) -> None:
    clock = ManualClock()
    crashes: list[int] = []
    rt = Runtime(store=store, clock=clock, lease=30)
    out = rt.run(crashing(crashes))
    with pytest.raises(Crash):
        rt.resume(out.token, True)
    sid, key = out.session_id, rt.tokens.key(out.token)
    last = store.events(sid)[-1]
    # An iteration of no container: the reducer cannot fold it into the state.
    store.append_events(
        sid, [Event(last.seq + 1, "container.iteration_started", sid, last.at, (), {})]
    )
    clock.advance(31)
    before = unchanged(store, sid, key)
    worker = Runtime(store=store, clock=clock, flows=[crashing(crashes)])
    assert worker.recover() == []
    assert unchanged(store, sid, key) == before


# --- random corruption -------------------------------------------------------------------------

_VALUES = st.one_of(
    st.integers(-2, 12),
    st.none(),
    st.booleans(),
    st.sampled_from(
        ["then", "otherwise", "ok", "items", "outer", "inner", "g", "gate", "route", "ghost"]
    ),
    st.lists(
        st.one_of(st.integers(-1, 3), st.sampled_from(["items", "outer", "inner", "g", "ok"])),
        max_size=5,
    ),
    st.dictionaries(st.sampled_from(["ok", "double", "g"]), st.integers(0, 3), max_size=2),
)
_FRAME_FIELDS = st.sampled_from(
    [
        "node",
        "kind",
        "path",
        "iteration",
        "child",
        "completed_iterations",
        "child_outputs",
        "selected",
        "started",
        "size",
        "last_output",
        "action",
    ]
)


@st.composite
def corruptions(draw: st.DrawFn) -> tuple[str, list[tuple[str, Any, Any]]]:
    """A flow, and changes to its paused state: (where, field, value)."""
    which = draw(st.sampled_from(sorted(FLOWS)))
    changes = []
    for _ in range(draw(st.integers(1, 3))):
        where = draw(
            st.sampled_from(["frame 0", "frame 1", "frame -1", "pause", "outputs", "state"])
        )
        if where.startswith("frame"):
            field = draw(_FRAME_FIELDS)
        elif where == "pause":
            field = draw(st.sampled_from(["path", "kind", "awaits_value"]))
        elif where == "outputs":
            field = draw(st.sampled_from(["prep", "items", "total", "g", "outer"]))
        else:
            field = draw(st.sampled_from(["status", "retries", "resume_values", "last_seq"]))
        changes.append((where, field, draw(_VALUES)))
    return which, changes


def _corrupt(state: dict[str, Any], changes: list[tuple[str, Any, Any]]) -> None:
    for where, field, value in changes:
        if where.startswith("frame"):
            frames = state["container_stack"]
            n = int(where.split()[1])
            if frames and -len(frames) <= n < len(frames):
                frames[n][field] = value
        elif where == "pause":
            state["pause"][field] = value
        elif where == "outputs":
            state["outputs"][field] = value
        elif field != "last_seq" or type(value) is not int:  # a wrong last_seq is refused too,
            state[field] = value  # but by the store (ConcurrentUpdate), not by the snapshot


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corruptions())
def test_a_randomly_corrupted_snapshot_resumes_or_is_refused_with_its_token_unused(case) -> None:
    which, changes = case
    flow = FLOWS[which]()
    store = MemoryStore()
    rt = Runtime(store=store)
    out = rt.run(flow)
    sid, key = out.session_id, rt.tokens.key(out.token)
    good = store.load(sid).state
    write(store, sid, _edit(good, lambda state: _corrupt(state, changes)))
    before = unchanged(store, sid, key)
    fresh = Runtime(store=store, flows=[flow])
    try:
        resumed = fresh.resume(out.token, True)
    except SnapshotError as exc:
        assert sid in str(exc)
        assert unchanged(store, sid, key) == before
        write(store, sid, good)
        assert resume_to_end(fresh, out.token).output == DONE[which]
    else:  # the change left a position the flow has: it goes on from there, to an outcome
        assert resumed.status in ("ok", "paused", "error")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(FLOWS)),
    st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=3
    ),
    st.one_of(st.none(), st.floats(0, 1)),
)
def test_a_snapshot_with_random_bytes_changed_resumes_or_is_refused_with_its_token_unused(
    which: str, flips: list[tuple[float, int]], cut: float | None
) -> None:
    flow = FLOWS[which]()
    store = MemoryStore()
    rt = Runtime(store=store)
    out = rt.run(flow)
    sid, key = out.session_id, rt.tokens.key(out.token)
    good = store.load(sid).state
    blob = bytearray(good)
    for where, byte in flips:
        blob[int(where * len(blob))] = byte
    if cut is not None:
        blob = blob[: int(cut * len(blob))]
    write(store, sid, bytes(blob))
    before = unchanged(store, sid, key)
    fresh = Runtime(store=store, flows=[flow])
    try:
        resumed = fresh.resume(out.token, True)
    except TarryError as exc:
        # SnapshotError; or, when the bytes changed still decode, what the state then says:
        # an empty snapshot is a session that never paused (SessionNotResumable), a changed
        # last_seq does not continue the stored log (ConcurrentUpdate). Nothing is written.
        assert isinstance(exc, SnapshotError | SessionNotResumable | ConcurrentUpdate), exc
        assert unchanged(store, sid, key) == before
    else:
        assert resumed.status in ("ok", "paused", "error")
