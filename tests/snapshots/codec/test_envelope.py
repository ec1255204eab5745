"""The versioned snapshot envelope around a SessionState, and the event encoding."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from typing import Any

import attrs
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tarry.engine.errors import SnapshotError
from tarry.engine.state.events import EVENT_TYPES, NODE_COMPLETED, Event, EventLog, ns_of
from tarry.engine.state.records import (
    CONTAINER_KINDS,
    STATUSES,
    ContainerFrame,
    ErrorInfo,
    PauseState,
    SessionState,
)
from tarry.snapshots import records
from tarry.snapshots.codec.converter import pack_record, unpack_record
from tarry.snapshots.codec.pack import dumps, loads, register
from tarry.snapshots.records import (
    FORMAT,
    MIGRATIONS,
    VERSION,
    decode_event,
    decode_state,
    encode_event,
    encode_events,
    encode_state,
    path_key,
)

IST = dt.timezone(dt.timedelta(hours=5, minutes=30))


@attrs.frozen
class Ticket:
    id: int
    tags: frozenset[str] = frozenset()


register(Ticket, "tests.envelope.Ticket")


def rich_state() -> SessionState:
    outer = ContainerFrame(
        node="tickets",
        kind="foreach",
        path=("tickets",),
        iteration=47,
        child=1,
        completed_iterations=47,
        child_outputs={"triage": (Ticket(47, frozenset({"bug"})), {"p1", "p2"})},
        started=True,
        size=100,
        last_output={"done": (46, True)},
    )
    inner = ContainerFrame(
        node="review",
        kind="graph",
        path=("tickets", 47, "review"),
        child_outputs={"draft": [1, (2, 3)]},
        selected="approve",
        action="default",
    )
    return SessionState(
        session_id="s-1",
        flow="support",
        status="paused",
        input={"project": 7, "since": dt.date(2024, 1, 1)},
        shared={"seen": {1, 2, 3}, "cursor": ("page", 3), "owner": Ticket(1)},
        outputs={"load": [Ticket(1), Ticket(2)], "pair": (1, (2, 3)), "none": None},
        container_stack=(outer, inner),
        pause=PauseState(
            kind="human",
            reason="approve the refund",
            path=("tickets", 47, "review", "gate"),
            payload={"amount": 12.5, "ids": (1, 2)},
            wake_at=dt.datetime(2024, 5, 1, 12, 0, 0, 1, tzinfo=dt.UTC),
            expires_at=dt.datetime(2024, 5, 2, 9, 30, tzinfo=IST),
        ),
        error=ErrorInfo(
            type="timeout",
            message="took too long",
            path=("tickets", 46, "triage"),
            retryable=True,
            attempts=3,
            traceback="Traceback ...",
        ),
        output=None,
        last_seq=812,
        metrics={"tokens": 1234.0, "cost": 0.25},
        resume_values=({"approved": False}, (1,)),
    )


# --- the state round trip ------------------------------------------------------------------------


def test_state_round_trips_through_bytes() -> None:
    state = rich_state()
    back = decode_state(encode_state(state, fingerprint="fp", flow_version=3))
    assert back == state
    # types equality alone would not catch
    assert type(back.container_stack) is tuple
    assert type(back.container_stack[0].path) is tuple
    assert type(back.container_stack[1].path[1]) is int
    assert type(back.shared["cursor"]) is tuple and type(back.shared["seen"]) is set
    assert type(back.container_stack[0].child_outputs["triage"][0].tags) is frozenset
    assert back.pause is not None and back.pause.expires_at is not None
    assert back.pause.expires_at.utcoffset() == dt.timedelta(hours=5, minutes=30)
    assert type(back.resume_values) is tuple and type(back.resume_values[1]) is tuple


def test_minimal_state_round_trips() -> None:
    state = SessionState(session_id="s")
    assert decode_state(encode_state(state)) == state


def test_envelope_holds_format_version_session_and_flow() -> None:
    envelope = loads(encode_state(rich_state(), fingerprint="abc123", flow_version="2024.1"))
    assert envelope["format"] == FORMAT
    assert envelope["v"] == VERSION
    assert envelope["session"] == "s-1"
    assert envelope["flow"] == {"name": "support", "fingerprint": "abc123", "version": "2024.1"}
    assert envelope["state"]["session_id"] == "s-1"


def reencode(change: Any) -> bytes:
    envelope = loads(encode_state(rich_state()))
    change(envelope)
    return dumps(envelope)


@pytest.mark.parametrize("version", [0, -1, VERSION + 1, "1", 1.0, True, None], ids=repr)
def test_unknown_version_is_a_snapshot_error(version: Any) -> None:
    data = reencode(lambda e: e.__setitem__("v", version))
    with pytest.raises(SnapshotError, match="version"):
        decode_state(data)


def test_missing_version_is_a_snapshot_error() -> None:
    with pytest.raises(SnapshotError, match="version"):
        decode_state(reencode(lambda e: e.pop("v")))


@pytest.mark.parametrize("fmt", ["tarry.other", "", None, 1], ids=repr)
def test_wrong_format_is_a_snapshot_error(fmt: Any) -> None:
    with pytest.raises(SnapshotError, match="format"):
        decode_state(reencode(lambda e: e.__setitem__("format", fmt)))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        dumps([FORMAT, 1]),
        dumps({"v": 1}),
        dumps("tarry.snapshot"),
        encode_state(SessionState(session_id="s"))[:-3],
    ],
    ids=repr,
)
def test_not_a_snapshot_is_a_snapshot_error(data: bytes) -> None:
    with pytest.raises(SnapshotError):
        decode_state(data)


@pytest.mark.parametrize(
    "state",
    [None, 5, "state", [], {}, {"session_id": 5, "container_stack": 3}, {"flow": "x"}],
    ids=repr,
)
def test_malformed_state_is_a_snapshot_error(state: Any) -> None:
    with pytest.raises(SnapshotError, match="state"):
        decode_state(reencode(lambda e: e.__setitem__("state", state)))


# --- migrations ----------------------------------------------------------------------------------


def test_migration_from_version_1_is_applied(monkeypatch) -> None:
    old = encode_state(rich_state())  # written as v1
    seen: list[dict[str, Any]] = []

    def one_to_two(envelope: dict[str, Any]) -> dict[str, Any]:
        seen.append(envelope)
        state = dict(envelope["state"], shared={**envelope["state"]["shared"], "migrated": 1})
        return {**envelope, "v": 2, "state": state}

    monkeypatch.setitem(MIGRATIONS, 1, one_to_two)
    monkeypatch.setattr(records, "VERSION", 2)
    back = decode_state(old)
    assert len(seen) == 1 and seen[0]["v"] == 1
    assert back.shared["migrated"] == 1
    assert back == attrs.evolve(rich_state(), shared={**rich_state().shared, "migrated": 1})
    # a v2 snapshot is read as is
    fresh = encode_state(rich_state())
    assert loads(fresh)["v"] == 2
    assert decode_state(fresh) == rich_state()
    assert len(seen) == 1


def test_migrations_chain_up_to_the_current_version(monkeypatch) -> None:
    old = encode_state(SessionState(session_id="s"))
    monkeypatch.setitem(MIGRATIONS, 1, lambda e: {**e, "state": {**e["state"], "flow": "v2"}})
    monkeypatch.setitem(
        MIGRATIONS, 2, lambda e: {**e, "state": {**e["state"], "flow": e["state"]["flow"] + "v3"}}
    )
    monkeypatch.setattr(records, "VERSION", 3)
    assert decode_state(old).flow == "v2v3"


@pytest.mark.parametrize(
    ("migration", "match"),
    [
        (None, "no migration"),
        (lambda e: 1 / 0, "ZeroDivisionError"),
        (lambda e: e["missing"], "KeyError"),
        (lambda e: [e], "not a dict"),
    ],
    ids=["missing", "raises", "key error", "returns a list"],
)
def test_a_broken_migration_is_a_snapshot_error(migration: Any, match: str, monkeypatch) -> None:
    old = encode_state(SessionState(session_id="s"))
    if migration is None:
        monkeypatch.delitem(MIGRATIONS, 1, raising=False)
    else:
        monkeypatch.setitem(MIGRATIONS, 1, migration)
    monkeypatch.setattr(records, "VERSION", 2)
    with pytest.raises(SnapshotError, match=match):
        decode_state(old)


# --- events --------------------------------------------------------------------------------------


def make_event(**changes: Any) -> Event:
    event = Event(
        seq=42,
        type=NODE_COMPLETED,
        session_id="s-1",
        at=dt.datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=dt.UTC),
        path=("tickets", 47, "triage"),
        data={"output": {"ticket": Ticket(47), "labels": ("a", "b"), "seen": {1}}, "n": [1, 2]},
    )
    return attrs.evolve(event, **changes)


def test_event_round_trips() -> None:
    event = make_event()
    back = decode_event(encode_event(event), "s-1")
    assert back == event
    assert back.at.tzinfo is not None and back.at.utcoffset() == dt.timedelta(0)
    assert back.at.microsecond == 123456
    assert type(back.path) is tuple and type(back.path[1]) is int
    assert type(back.data["output"]["labels"]) is tuple
    assert type(back.data["output"]["seen"]) is set


def test_event_takes_the_session_id_it_is_given() -> None:
    assert decode_event(encode_event(make_event()), "other").session_id == "other"


def test_event_time_in_another_zone_comes_back_as_the_same_instant_in_utc() -> None:
    at = dt.datetime(2024, 5, 1, 18, 0, 0, 5, tzinfo=IST)
    back = decode_event(encode_event(make_event(at=at)), "s-1")
    assert back.at == at and back.at.utcoffset() == dt.timedelta(0)


def test_event_written_as_plain_msgpack_is_read() -> None:
    back = decode_event(msgpack.packb([3, "run.started", 1_000_001, ["a", 2], {"k": [1]}]), "s")
    assert back == Event(
        3,
        "run.started",
        "s",
        dt.datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=dt.UTC),
        ("a", 2),
        {"k": [1]},
    )


def test_event_before_the_epoch_round_trips() -> None:
    at = dt.datetime(1969, 7, 20, 20, 17, 40, 999999, tzinfo=dt.UTC)
    assert decode_event(encode_event(make_event(at=at)), "s-1").at == at


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\xc1",
        dumps({"seq": 1}),
        dumps([1, "t", 0, ()]),
        dumps([1, "t", 0, (), {}, 6]),
        dumps(["1", "t", 0, (), {}]),
        dumps([True, "t", 0, (), {}]),
        dumps([1, 2, 0, (), {}]),
        dumps([1, "t", 1.5, (), {}]),
        dumps([1, "t", "0", (), {}]),
        dumps([1, "t", 0, "abc", {}]),
        dumps([1, "t", 0, None, {}]),
        dumps([1, "t", 0, (), []]),
        dumps([1, "t", 2**64 - 1, (), {}]),
        dumps([1, "t", -(2**63), (), {}]),
        encode_event(make_event())[:-1],
    ],
    ids=repr,
)
def test_malformed_event_is_a_snapshot_error(data: bytes) -> None:
    with pytest.raises(SnapshotError, match="event|snapshot"):
        decode_event(data, "s-1")


def test_path_key_tells_paths_apart() -> None:
    assert path_key(("a", 1)) == path_key(("a", 1))
    assert path_key(("a", 1)) != path_key(("a", "1"))
    assert path_key(("a", 1)) != path_key(("a", 1, 0))
    assert bytes.fromhex(path_key(("a", 1))) == dumps(("a", 1))


def test_state_records_pack_through_the_converter() -> None:
    info = ErrorInfo("boom", "it broke", ("a", 1), retryable=True, attempts=2)
    assert unpack_record(pack_record(info), ErrorInfo) == info
    with pytest.raises(SnapshotError):
        unpack_record(dumps({"type": "boom"}), ErrorInfo)
    with pytest.raises(SnapshotError):
        unpack_record(b"\xc1", ErrorInfo)


# --- hypothesis: any state round-trips -----------------------------------------------------------

names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=6)
offsets = st.timedeltas(
    min_value=dt.timedelta(hours=-23, minutes=-59), max_value=dt.timedelta(hours=23, minutes=59)
)
aware = st.datetimes(timezones=st.just(dt.UTC) | st.builds(dt.timezone, offsets))
# an event's time is stored as microseconds since the epoch and read back in UTC, so it must be
# an instant that UTC can show (not 0001-01-01 00:00 at +05:00, which is in year 0)
event_times = st.datetimes(
    min_value=dt.datetime(1, 1, 2),
    max_value=dt.datetime(9999, 12, 30),
    timezones=st.just(dt.UTC) | st.builds(dt.timezone, offsets),
)
paths = st.lists(names | st.integers(0, 10_000), max_size=4).map(tuple)
hashable = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    names,
    st.builds(Ticket, st.integers(0, 99), st.frozensets(names, max_size=2)),
    st.lists(st.integers(-(2**63), 2**64 - 1), max_size=3).map(tuple),
)
user_values = st.recursive(
    hashable | st.binary(max_size=4) | aware | st.dates(),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(names, inner, max_size=3),
        st.dictionaries(hashable, inner, max_size=2),
        st.sets(hashable, max_size=3),
        st.frozensets(hashable, max_size=3),
    ),
    max_leaves=8,
)
outputs = st.dictionaries(names, user_values, max_size=3)
frames = st.builds(
    ContainerFrame,
    node=names,
    kind=st.sampled_from(sorted(CONTAINER_KINDS)),
    path=paths,
    iteration=st.integers(0, 10**6),
    child=st.integers(0, 50),
    completed_iterations=st.integers(0, 10**6),
    child_outputs=outputs,
    selected=st.none() | names,
    started=st.booleans(),
    size=st.none() | st.integers(0, 10**6),
    last_output=user_values,
    action=st.none() | names,
)
pauses = st.builds(
    PauseState,
    kind=st.sampled_from(["human", "external", "system"]),
    reason=st.text(max_size=10),
    path=paths,
    payload=user_values,
    wake_at=st.none() | aware,
    expires_at=st.none() | aware,
    awaits_value=st.booleans(),
)
errors = st.builds(
    ErrorInfo,
    type=names,
    message=st.text(max_size=20),
    path=paths,
    retryable=st.booleans(),
    attempts=st.integers(0, 100),
    traceback=st.none() | st.text(max_size=20),
)
states = st.builds(
    SessionState,
    session_id=names,
    flow=st.text(max_size=6),
    status=st.sampled_from(STATUSES),
    input=user_values,
    shared=outputs,
    outputs=outputs,
    container_stack=st.lists(frames, max_size=4).map(tuple),
    pause=st.none() | pauses,
    error=st.none() | errors,
    output=user_values,
    last_seq=st.integers(0, 2**40),
    metrics=st.dictionaries(names, st.floats(allow_nan=False), max_size=3),
    resume_values=st.lists(user_values, max_size=2).map(tuple),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states, st.text(max_size=8), st.none() | st.integers(0, 10**6) | st.text(max_size=4))
def test_any_state_round_trips(state: SessionState, fingerprint: str, version: Any) -> None:
    data = encode_state(state, fingerprint=fingerprint, flow_version=version)
    assert decode_state(data) == state
    assert loads(data)["flow"] == {
        "name": state.flow,
        "fingerprint": fingerprint,
        "version": version,
    }


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 2**40),
    st.sampled_from(sorted(EVENT_TYPES)),
    event_times,
    paths,
    st.dictionaries(names, user_values, max_size=3),
)
def test_any_event_round_trips(
    seq: int, type_: str, at: dt.datetime, path: tuple, data: dict
) -> None:
    event = Event(seq, type_, "s", at, path, data)
    back = decode_event(encode_event(event), "s")
    assert back == event
    assert back.at.utcoffset() == dt.timedelta(0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(EVENT_TYPES)), event_times, paths, st.booleans()),
        max_size=6,
    )
)
def test_events_encoded_together_are_each_what_encode_event_writes(
    specs: list[tuple[str, dt.datetime, tuple, bool]],
) -> None:
    # runs of events sharing one time object (as a step's do) and times that only compare equal
    events, at = [], None
    for seq, (type_, when, path, same) in enumerate(specs, start=1):
        at = at if same and at is not None else when
        events.append(Event(seq, type_, "s", at, path, {"n": seq}))
    assert encode_events(events) == [encode_event(e) for e in events]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(EVENT_TYPES)), event_times, paths, st.integers(0, 3)),
        max_size=8,
    )
)
def test_engine_rows_encode_as_their_events_do(
    specs: list[tuple[str, dt.datetime, tuple, int]],
) -> None:
    # The engine's rows (an EventLog) share their time and path objects in runs, as a ForEach
    # item's do, and alternate between paths; equal paths and times may also be other objects.
    rows: list[Any] = []
    for seq, (type_, when, path, share) in enumerate(specs, start=1):
        ns = ns_of(when)
        if rows and share & 1:
            ns = rows[-1][2]
        if len(rows) > 1 and share & 2:
            path = rows[-2][3]
        elif share & 2:
            path = tuple(path)  # an equal path, another object
        rows.append((seq, type_, ns, path, {"n": seq}))
    log = EventLog("s", rows)
    assert encode_events(log) == [encode_event(e) for e in log]
    assert [decode_event(b, "s") for b in encode_events(log)] == list(log)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_are_never_a_state_or_event(data: bytes) -> None:
    for decode in (decode_state, lambda d: decode_event(d, "s")):
        started = time.process_time()  # CPU: the work done, whatever else loads the machine
        with contextlib.suppress(SnapshotError):
            decode(data)
        assert time.process_time() - started < 1.0


def test_raw_msgpack_envelope_without_ext_types_is_read() -> None:
    # the envelope is plain msgpack: another tool can write one (tuples as arrays become lists,
    # which the converter turns back into tuples for typed fields)
    state = {"session_id": "s", "container_stack": [{"node": "n", "kind": "loop", "path": ["a"]}]}
    raw = msgpack.packb({"format": FORMAT, "v": 1, "session": "s", "flow": {}, "state": state})
    back = decode_state(raw)
    assert back.container_stack[0].path == ("a",)


@pytest.mark.parametrize("flow_version", [None, "2", 3, ["unhashable"]])
def test_the_envelope_is_its_head_and_its_packed_state_byte_for_byte(flow_version: Any) -> None:
    # encode_state packs the envelope's head once per session (kept for the sessions written
    # last) and appends the packed state: the bytes are those of the whole envelope packed.
    from tarry.snapshots.codec.wire import state_to_data

    pause = PauseState("human", "review", ("items", 3, "work"))
    frame = ContainerFrame(node="items", kind="foreach", path=("items",), iteration=3, size=9)
    for state in (
        SessionState(session_id="s1", flow="f"),
        SessionState(
            session_id="s2",
            flow="f",
            status="paused",
            pause=pause,
            container_stack=(frame,),
            last_seq=12,
        ),
    ):
        whole = dumps(
            {
                "format": FORMAT,
                "v": VERSION,
                "session": state.session_id,
                "flow": {"name": state.flow, "fingerprint": "fp", "version": flow_version},
                "state": state_to_data(state),
            }
        )
        for _ in range(2):  # the head packed, then kept
            blob = encode_state(state, fingerprint="fp", flow_version=flow_version)
            assert blob == whole
            assert decode_state(blob) == state
