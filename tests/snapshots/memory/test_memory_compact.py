"""MemoryStore deflates the state and event blobs of a session left idle (IDLE_AFTER writes of
the store since its own last write), and hands back the same bytes and events as before."""

from __future__ import annotations

from support import at, rec
from tarry import Flow, Gate, Runtime
from tarry.engine.state.events import NODE_COMPLETED, RUN_STARTED, Event
from tarry.snapshots import MemoryStore
from tarry.snapshots.memory import store as memory_store
from tarry.snapshots.memory.entry import IN_STATE, _Entry


def ev(seq: int, sid: str = "s1") -> Event:
    type_ = RUN_STARTED if seq == 1 else NODE_COMPLETED
    return Event(seq, type_, sid, at(seq + 0.000123), ("root", seq), {"n": seq, "ok": True})


def _packed(entry: _Entry) -> bool:
    return entry.record.state[:1] == b"\xc1"


def _ticket() -> Flow:
    return Flow("ticket", [lambda ctx: 1, lambda ctx: 2, Gate("approve"), lambda ctx: 3])


def test_an_idle_session_is_packed_and_reads_back_alike() -> None:
    store = MemoryStore()
    rt = Runtime(store=store)
    flow = _ticket()
    first = rt.run(flow)
    state, events = store.load(first.session_id).state, store.events(first.session_id)
    entry = store._sessions[first.session_id]
    others = [rt.run(flow)]
    assert not _packed(entry)  # written a few writes ago: kept raw
    others += [rt.run(flow) for _ in range(memory_store.IDLE_AFTER)]
    assert _packed(entry)
    assert entry.batches is IN_STATE  # its one write of events: packed with its state
    assert len(entry.record.state) < len(state) // 2
    read = store.bytes_read
    assert store.load(first.session_id).state == state
    assert store.bytes_read - read == len(state)  # the bytes a durable store would hand out
    assert store.load_many([first.session_id])[first.session_id].state == state
    assert store.events(first.session_id) == events
    assert store.events(first.session_id, 3, 2) == events[3:5]
    # A resume writes on after the packed blobs; the run reads its whole log back.
    done = rt.resume(first.token, True)
    assert done.ok and done.output == 3
    after = store.events(first.session_id)
    assert after[: len(events)] == events
    assert [e.seq for e in after] == list(range(1, len(after) + 1))
    assert all(rt.resume(o.token, True).ok for o in others)


def _write(store: MemoryStore, session_id: str) -> None:
    """One write of the store: the session saved again as it is."""
    record = store.load(session_id)
    store.save(record, record.version)


def test_a_session_written_again_is_packed_only_once_idle_again(monkeypatch) -> None:
    monkeypatch.setattr(memory_store, "IDLE_AFTER", 4)
    store = MemoryStore()
    rt = Runtime(store=store)
    flow = _ticket()
    out, other = rt.run(flow), rt.run(flow)
    entry = store._sessions[out.session_id]
    for _ in range(3):
        _write(store, other.session_id)
    _write(store, out.session_id)  # written again: its earlier writes no longer count
    for _ in range(3):
        _write(store, other.session_id)
    assert not _packed(entry)
    _write(store, other.session_id)  # the 4th write since its last
    assert _packed(entry)
    assert rt.resume(out.token, True).ok
    assert not _packed(entry)  # the resume wrote it raw
    assert rt.resume(other.token, True).ok


def test_waits_share_their_flow_path_and_an_empty_gate_payload() -> None:
    store = MemoryStore()
    rt = Runtime(store=store)
    flow = _ticket()
    a, b = rt.run(flow), rt.run(flow)
    wa, wb = store.wait(a.token), store.wait(b.token)
    assert wa.path == ("approve",) and wa.path is wb.path
    assert wa.payload is wb.payload and wa.payload  # one object, equal to what was written
    assert rt.resume(a.token, True).ok and rt.resume(b.token, True).ok


def test_a_payload_with_values_is_not_shared() -> None:
    store = MemoryStore()
    rt = Runtime(store=store)
    flow = Flow("asks", [Gate("approve", message="refund order 17?")])
    a, b = rt.run(flow), rt.run(flow)
    wa, wb = store.wait(a.token), store.wait(b.token)
    assert wa.payload == wb.payload and wa.payload is not wb.payload
    assert len(store._paths) == 1


def _idle(store: MemoryStore, n: int = 0) -> None:
    """IDLE_AFTER writes of other sessions: every session written before is idle."""
    for i in range(memory_store.IDLE_AFTER):
        store.create(rec(f"filler{n}-{i}", status="completed"))


def test_any_state_reads_back_as_given_packed_or_not() -> None:
    store = MemoryStore()
    states = {
        "junk": b"\xc1\x01\x00\x00\x00\x09 not ours",  # what a packed blob starts with
        "short": b"\xc1",
        "plain": b"\xc1\x00",
        "empty": b"",
        "state": b"\x85 any bytes",
    }
    for sid, state in states.items():
        store.create(rec(sid, status="paused", state=state, token=f"tk_{sid}"), events=[ev(1, sid)])
    for sid, state in states.items():
        assert store.load(sid).state == state
    _idle(store)
    for sid, state in states.items():
        assert store._sessions[sid].record.state[:1] == b"\xc1"  # packed now
        assert store.load(sid).state == state
        assert store.load_many([sid])[sid].state == state
        assert store.claim_waits([f"tk_{sid}"], "w", at(60), at(1)) == {}  # no waits
        assert store.events(sid) == [ev(1, sid)]


def test_a_packed_log_of_many_writes_reads_back_and_grows() -> None:
    store = MemoryStore()
    store.create(rec(token="tk_1", wake_at=at(5)), events=[ev(1)])
    big = [ev(s) for s in range(2, 40)]  # too big to join the first blob: a second one
    version = store.save(rec(status="paused", token="tk_1", wake_at=at(5)), 0, events=big)
    assert type(store._sessions["s1"].batches) is list
    _idle(store)
    entry = store._sessions["s1"]
    assert all(blob[:1] == b"\xc1" for blob in entry.batches)
    everything = [ev(s) for s in range(1, 40)]
    assert store.events("s1") == everything
    assert store.events("s1", 20, 5) == everything[20:25]
    [due] = store.due(at(6))
    assert due.state == b"state"
    # A write after the packed blobs, packed in turn when idle again: each blob once.
    store.save(rec(status="paused"), version, events=[ev(40)])
    assert entry.batches[-1][:1] != b"\xc1"
    _idle(store, 1)
    assert entry.batches[-1][:1] == b"\xc1"
    assert store.events("s1", 35) == [ev(s) for s in range(36, 41)]


def test_a_joined_session_takes_events_and_a_token_use() -> None:
    store = MemoryStore()
    store.create(rec(status="paused", token="tk_1"), events=[ev(1)])
    _idle(store)
    assert store._sessions["s1"].batches is IN_STATE
    assert store.consume_token("tk_1", owner="w", until=at(9), events=[ev(2)])
    assert store.events("s1") == [ev(1), ev(2)]
    assert store.load("s1").state == b"state"
    store.append_events("s1", [ev(3)])
    assert store.events("s1") == [ev(1), ev(2), ev(3)]


def test_a_joined_session_saved_under_another_flow_version_keeps_its_log() -> None:
    store = MemoryStore()
    store.create(rec(status="paused", fingerprint="v1"), events=[ev(1)])
    _idle(store)
    assert store._sessions["s1"].batches is IN_STATE
    store.save(rec(status="paused", fingerprint="v2", state=b"new"), 0, events=[ev(2)])
    _idle(store, 1)
    assert store.events("s1") == [ev(1), ev(2)]
    assert store.load("s1").state == b"new" and store.load("s1").fingerprint == "v2"


def test_a_running_session_is_not_packed() -> None:
    store = MemoryStore()
    store.create(rec(status="running"), events=[ev(1)])
    _idle(store)
    assert store._sessions["s1"].batches is not IN_STATE
    assert not _packed(store._sessions["s1"])
    assert store.events("s1") == [ev(1)]


def test_a_wait_whose_path_cannot_be_hashed_is_kept_as_given() -> None:
    from tarry.snapshots.records import WaitRecord

    store = MemoryStore()
    store.create(rec(token="tk_1"))
    odd = WaitRecord("tk_w", "s1", ("items", ["a"], "w"), "external")
    store.save(rec(status="paused", token="tk_1"), 0, waits=[odd])
    assert store.wait("tk_w") == odd


def test_only_a_paused_session_is_packed() -> None:
    # An ended session waits for nothing: packing it would tax every run by what it wrote
    # (a ForEach item by some 15,000 instructions, deflating its events later).
    store = MemoryStore()
    for status in ("completed", "failed", "cancelled", "paused"):
        store.create(rec(status, status=status, state=b"\x85 state"), events=[ev(1, status)])
    _idle(store)
    packed = {sid: _packed(store._sessions[sid]) for sid in ("completed", "failed", "cancelled")}
    assert packed == {"completed": False, "failed": False, "cancelled": False}
    assert _packed(store._sessions["paused"])
