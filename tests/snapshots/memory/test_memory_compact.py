"""MemoryStore deflates the state and event blobs of a session left idle (IDLE_AFTER writes of
the store since its own last write), and hands back the same bytes and events as before."""

from __future__ import annotations

from tarry import Flow, Gate, Runtime
from tarry.snapshots import MemoryStore
from tarry.snapshots.memory import store as memory_store
from tarry.snapshots.memory.entry import IN_STATE, _Entry


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
