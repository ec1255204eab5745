"""What stores keep: a session's row, and how states and events become bytes."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import msgpack
from tarry.engine.errors import SnapshotError
from tarry.engine.state.events import (
    ITEM_STARTED,
    ITERATION_COMPLETED,
    ITERATION_STARTED,
    NODE_COMPLETED,
    NODE_STARTED,
    RUN_RESUMED,
    STEP_STARTED_DATA,
    Event,
    EventLog,
    Row,
    new_event,
)
from tarry.engine.state.lanes import unpark
from tarry.engine.state.records import ContainerFrame, PauseState, SessionState
from tarry.engine.state.reducer import apply
from tarry.snapshots.codec.pack import dumps, loads
from tarry.snapshots.codec.wire import (
    lane_from_data,
    lane_to_data,
    state_from_data,
    state_to_data,
)

FORMAT = "tarry.snapshot"
VERSION = 1

#: Migrations of the envelope, by the version they upgrade *from*: `MIGRATIONS[1]` turns a v1
#: envelope (a dict) into a v2 one. `decode_state` applies them in order up to VERSION.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@attrs.define(slots=True)
class SessionRecord:
    """One session as a store keeps it: indexed columns plus the encoded state.

    `version` is the compare-and-set counter: each `save` must name the version it read.
    `token` is the one live resume token (None when none is live). `wake_at` is the earliest
    time a timer, back-off or deadline is due. `lease_owner`/`lease_until` mark a running
    session's worker; an expired lease means that worker died. `durability` is the session's
    own ("pause" or "step"), kept by every process that continues it. `stop` is a stop request
    ("abort" or "cancel") stored for a running session by any process (`request_stop`); a
    store never takes it from a record it is given, and clears it when a save ends the run.
    """

    session_id: str
    flow: str
    status: str
    state: bytes
    version: int = 0
    fingerprint: str = ""
    flow_version: Any = None
    token: str | None = None
    wake_at: dt.datetime | None = None
    lease_owner: str | None = None
    lease_until: dt.datetime | None = None
    created_at: dt.datetime = attrs.field(factory=lambda: dt.datetime.now(dt.UTC))
    updated_at: dt.datetime = attrs.field(factory=lambda: dt.datetime.now(dt.UTC))
    meta: dict[str, Any] = attrs.field(factory=dict)
    durability: str = "pause"
    stop: str | None = None


_new = object.__new__


def record_of(
    session_id: str,
    flow: str,
    status: str,
    state: bytes,
    version: int,
    fingerprint: str,
    flow_version: Any,
    token: str | None,
    wake_at: dt.datetime | None,
    lease_owner: str | None,
    lease_until: dt.datetime | None,
    created_at: dt.datetime,
    updated_at: dt.datetime,
    meta: dict[str, Any],
    durability: str,
    stop: str | None,
) -> SessionRecord:
    """`SessionRecord(...)` of every field, in order, its slots set here: the class's call
    (attrs' `__init__`, through `type.__call__`) costs some 1,500 instructions more, and a
    resume copies a record two or three times (the memory store's copies, the drive's next
    record). A test checks that it sets each field the class has."""
    r = _new(SessionRecord)
    r.session_id = session_id
    r.flow = flow
    r.status = status
    r.state = state
    r.version = version
    r.fingerprint = fingerprint
    r.flow_version = flow_version
    r.token = token
    r.wake_at = wake_at
    r.lease_owner = lease_owner
    r.lease_until = lease_until
    r.created_at = created_at
    r.updated_at = updated_at
    r.meta = meta
    r.durability = durability
    r.stop = stop
    return r


#: What `request_stop` may store: stop resumably (a system pause), or cancel.
STOPS = ("abort", "cancel")


@attrs.frozen(slots=True)
class TokenInfo:
    """What a store knows of a token: whose it is, and whether it was consumed."""

    session_id: str
    used: bool


@attrs.frozen(slots=True)
class WaitRecord:
    """One waiting branch of a paused session: a live token and what a poll or a delivery needs.

    `token` is the store key of the wait's token (as `SessionRecord.token` is); `path` the path
    of the waiting node; `kind` "human", "external" or "system"; `key` the name the outside
    world delivers to (`Wait(key=...)`), if any; `wake_at` when its timer fires or its timeout
    passes; `payload` the pause payload as `snapshots.dumps` wrote it (b"" for None): what an
    adapter is shown. A store keeps one until its token is used or its session ends.

    `lane`: the waiting lane of a concurrent container, as `encode_lane` wrote it, when the
    session's snapshot left it out (a *parked* lane, see engine/state/lanes.py); b"" for a
    wait the snapshot holds. Polls and deliveries never read it: `wait` and `waits` do.
    """

    token: str
    session_id: str
    path: tuple[Any, ...]
    kind: str
    key: str | None = None
    wake_at: dt.datetime | None = None
    reason: str = ""
    payload: bytes = b""
    lane: bytes = b""


def wait_record(token: str, session_id: str, pause: PauseState) -> WaitRecord:
    """The wait row of `pause` (a PauseState, or the Pause signal a node yielded) under the
    store key `token`: due at its timer, else at its deadline; its payload encoded. Made as
    `wait_records` makes them, its slots set directly (every pause makes one: attrs' frozen
    `__init__` by keyword costs some 10,000 instructions)."""
    payload = b"" if pause.payload is None else dumps(pause.payload)
    record = _new(WaitRecord)
    _set_token(record, token)
    _set_session_id(record, session_id)
    _set_path(record, pause.path)
    _set_kind(record, pause.kind)
    _set_key(record, pause.key)
    _set_wake_at(record, pause.wake_at or pause.expires_at)
    _set_reason(record, pause.reason)
    _set_payload(record, payload)
    _set_lane(record, b"")
    return record


def wait_records(
    rows: Sequence[Sequence[Any]], when: Callable[[Any], dt.datetime], *, skip_bad: bool = False
) -> list[WaitRecord]:
    """WaitRecords of store rows `(token, session_id, path, kind, key, wake_at, reason,
    payload)`, with `path` as `encode_path` wrote it and `wake_at` None or what `when` reads.

    A poll reads one per waiting branch, so each is made without attrs' `__init__` (its fields
    set straight into the slots: about half the cost); a path that is not a msgpack array
    raises SnapshotError, as `decode_path` says — or, with `skip_bad` (a page of every session's
    waits, which no one session's trouble may stop), is logged once and left out."""
    made: list[WaitRecord] = []
    append = made.append
    try:
        for token, sid, path, kind, key, wake_at, reason, payload in rows:
            found = _unpack(path)
            if type(found) is not list:
                raise SnapshotError("not an array")  # noqa: TRY301 - the slow path names it
            record = _new(WaitRecord)
            _set_token(record, token)
            _set_session_id(record, sid)
            _set_path(record, tuple(found))
            _set_kind(record, kind)
            _set_key(record, key)
            _set_wake_at(record, None if wake_at is None else when(wake_at))
            _set_reason(record, reason)
            _set_payload(record, payload)
            _set_lane(record, b"")
            append(record)
    except Exception:  # msgpack raises many types: read each path again, to say which and why
        if not skip_bad:
            for row in rows:
                decode_path(row[2])
            raise
        return _readable(rows, when)
    return made


#: Tokens of wait rows found unreadable, each logged once (bounded: a store's worth of them
#: would otherwise grow without end).
_REPORTED: set[str] = set()


def _readable(
    rows: Sequence[Sequence[Any]], when: Callable[[Any], dt.datetime]
) -> list[WaitRecord]:
    """The rows that decode, one at a time; each one that does not is logged once."""
    made: list[WaitRecord] = []
    for token, sid, path, kind, key, wake_at, reason, payload in rows:
        try:
            decoded = decode_path(path)
        except SnapshotError as exc:
            if token not in _REPORTED and len(_REPORTED) < 10_000:
                import logging  # only now: `import tarry` loads no logging

                _REPORTED.add(token)
                logging.getLogger("tarry").error(
                    "wait %s of session %r cannot be read and is skipped: %s", token[:12], sid, exc
                )
            continue
        made.append(
            WaitRecord(
                token,
                sid,
                decoded,
                kind,
                key,
                None if wake_at is None else when(wake_at),
                reason,
                payload,
            )
        )
    return made


_unpack = functools.partial(msgpack.unpackb, raw=False)
(
    _set_token,
    _set_session_id,
    _set_path,
    _set_kind,
    _set_key,
    _set_wake_at,
    _set_reason,
    _set_payload,
    _set_lane,
) = (WaitRecord.__dict__[field.name].__set__ for field in attrs.fields(WaitRecord))


def with_lanes(
    rows: Sequence[Sequence[Any]], when: Callable[[Any], dt.datetime]
) -> list[WaitRecord]:
    """WaitRecords of store rows of `wait_records`' columns and then the `lane` column (a
    session's own waits, read whole: `SessionStore.wait` and `waits`)."""
    made = wait_records([row[:8] for row in rows], when)
    for record, row in zip(made, rows, strict=True):
        _set_lane(record, bytes(row[8]))
    return made


def encode_path(path: Sequence[Any]) -> bytes:
    """A wait's path as a store keeps it: a plain msgpack array (as in an event), which decodes
    several times faster than a tuple's ext value. Stores order waits by these bytes."""
    return dumps(list(path))


def decode_path(blob: bytes) -> tuple[Any, ...]:
    """The path `encode_path` wrote; SnapshotError for anything else.

    A path holds names and indexes only, so it is read by msgpack alone: a poll decodes one
    per waiting branch, and `loads` would cost three times as much. (An ext value, which no
    path holds, would come back as msgpack's ExtType, never as an object of ours.)"""
    try:
        found = msgpack.unpackb(blob, raw=False)
    except Exception as exc:  # msgpack raises many types for bad input
        msg = f"malformed wait path ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc
    if type(found) is not list:
        msg = f"malformed wait path (expected an array, got a {type(found).__name__})"
        raise SnapshotError(msg)
    return tuple(found)


def encode_state(state: SessionState, *, fingerprint: str = "", flow_version: Any = None) -> bytes:
    """The versioned envelope around a state."""
    try:
        head = _envelope_head(VERSION, state.session_id, state.flow, fingerprint, flow_version)
    except TypeError:  # a flow version that cannot be a key: the envelope packed whole
        head = None
    if head is not None:
        return head + dumps(state_to_data(state))
    envelope = {
        "format": FORMAT,
        "v": VERSION,
        "session": state.session_id,
        "flow": {"name": state.flow, "fingerprint": fingerprint, "version": flow_version},
        "state": state_to_data(state),
    }
    return dumps(envelope)


@functools.lru_cache(maxsize=256)
def _envelope_head(
    version: int, session_id: str, flow: str, fingerprint: str, flow_version: Any
) -> bytes:
    """The envelope's bytes up to its state (the state is its last entry): the same for every
    snapshot of a session, packed once for the sessions written last. msgpack writes a map's
    entries one after the other, so the head and the packed state are the whole envelope,
    byte for byte (a test checks it)."""
    envelope = {
        "format": FORMAT,
        "v": version,
        "session": session_id,
        "flow": {"name": flow, "fingerprint": fingerprint, "version": flow_version},
        "state": None,
    }
    packed = dumps(envelope)
    return packed[:-1]  # less the state's nil (one byte, 0xc0)


def decode_state(data: bytes) -> SessionState:
    """The state inside an envelope, migrated up to VERSION; SnapshotError for anything else."""
    envelope = loads(data)
    if not isinstance(envelope, dict) or envelope.get("format") != FORMAT:
        msg = "not a tarry snapshot (missing or wrong 'format')"
        raise SnapshotError(msg)
    version = envelope.get("v")
    if type(version) is not int or version < 1 or version > VERSION:  # not bool: True == 1
        msg = (
            f"snapshot format version {version!r} is not supported (this tarry reads 1..{VERSION})"
        )
        raise SnapshotError(msg)
    while version < VERSION:
        envelope = _migrate(envelope, version)
        version += 1
    try:
        return state_from_data(envelope["state"])
    except Exception as exc:
        msg = f"snapshot state is malformed ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc


def encode_lane(lane: ContainerFrame) -> bytes:
    """A parked lane as its wait row keeps it (`WaitRecord.lane`): its path, then what the
    snapshot would hold of it (codec/wire.py `lane_to_data`), its pause in short (`p`, see
    `_short_pause`): a wide start writes one per waiting branch, and a row of a SQLite file's
    1 KB pages that outgrows 231 bytes spills to a page of its own."""
    data = lane_to_data(lane)
    pause = lane.pause
    if pause is not None and pause.path[: len(lane.path)] == lane.path:
        del data["pause"]
        data["p"] = _short_pause(pause, len(lane.path))
    return dumps([list(lane.path), data])


#: The fields of a pause in a parked lane's short form, after its kind and the rest of its
#: path, each with the value it has when left out (a short form drops its trailing defaults).
_SHORT_PAUSE = (
    ("key", None),
    ("reason", ""),
    ("payload", None),
    ("wake_at", None),
    ("expires_at", None),
    ("awaits_value", True),
    ("on_timeout", None),
)


def _short_pause(pause: PauseState, prefix: int) -> list[Any]:
    """[kind, the path past the lane's, then the fields of _SHORT_PAUSE up to the last that
    differs from its default]: 25 bytes for a keyed Wait, where codec/wire.py's map of every
    field by name takes 110."""
    short = [pause.kind, list(pause.path[prefix:])]
    short.extend(getattr(pause, name) for name, _ in _SHORT_PAUSE)
    while len(short) > 2 and short[-1] == _SHORT_PAUSE[len(short) - 3][1]:
        short.pop()
    return short


def _long_pause(short: Sequence[Any], path: Sequence[Any]) -> dict[str, Any]:
    """The pause of `_short_pause`'s list, in codec/wire.py's map (`pause_from_data` reads)."""
    if type(short) is not list or len(short) < 2 or type(short[1]) is not list:
        msg = f"a parked lane is malformed (a short pause is [kind, path, ...], not {short!r:.40})"
        raise SnapshotError(msg)
    kind, rest, *fields = short
    found = {"kind": kind, "path": [*path, *rest]}
    for i, (name, default) in enumerate(_SHORT_PAUSE):
        found[name] = fields[i] if i < len(fields) else default
    return found


def decode_lane(blob: bytes) -> ContainerFrame:
    """The lane `encode_lane` wrote (or, before the short pause, with the pause as a map);
    SnapshotError for anything else."""
    try:
        path, data = loads(blob)
        if "p" in data:
            data = dict(data)
            data["pause"] = _long_pause(data.pop("p"), path)
        return lane_from_data(data, tuple(path))
    except SnapshotError:
        raise
    except Exception as exc:
        msg = f"a parked lane is malformed ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc


def fold_stored(state: SessionState, events: Iterable[Event]) -> SessionState:
    """`state`, a stored snapshot, folded with `events` written after it. The `run.resumed`
    event of a lane parked in its wait row carries that lane (`lane`, as `encode_lane` wrote
    it; the row went with the token's use): it is put back before the event applies, so a
    snapshot that parked it and the events after it make the state a fold of every event
    makes."""
    for event in events:
        if event.type == RUN_RESUMED:
            blob = event.data.get("lane")
            if type(blob) is bytes:
                # (Not parked in this snapshot: it came back before the snapshot was written.)
                with contextlib.suppress(SnapshotError):
                    state = unpark(state, decode_lane(blob))
        state = apply(state, event)
    return state


def _migrate(envelope: dict[str, Any], version: int) -> dict[str, Any]:
    """`envelope` (at `version`) upgraded by one version."""
    migration = MIGRATIONS.get(version)
    if migration is None:
        msg = f"no migration from snapshot format version {version} to {version + 1}"
        raise SnapshotError(msg)
    try:
        upgraded = migration(envelope)
    except Exception as exc:
        msg = f"migrating a snapshot from version {version} failed ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc
    if not isinstance(upgraded, dict):
        msg = (
            f"the migration from version {version} returned a {type(upgraded).__name__}, not a dict"
        )
        raise SnapshotError(msg)
    return upgraded


_MICROSECOND = dt.timedelta(microseconds=1)


def _micros(at: dt.datetime) -> int:
    # Exact, from the normalised parts of the difference: a fraction of what dividing one
    # timedelta by another costs (that converts both to Python ints of microseconds first).
    d = at - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def encode_event(event: Event) -> bytes:
    """An event as a compact msgpack array: [seq, type, at (µs since epoch, UTC), path, data]."""
    return encode_events((event,))[0]


def event_arrays(events: Sequence[Event]) -> list[list[Any]]:
    """Each event as the array `encode_event` writes: [seq, type, at, path, data]. The path is a
    plain array (decoded back to a tuple): no nested ext document per event. The events of one
    step share their time (see Execution.emit), so a time is converted once for the run of
    events that carry it."""
    arrays: list[list[Any]] = []
    if type(events) is EventLog:  # the engine's rows: (seq, type, at in ns, path, data)
        # The rows of a step or a ForEach item share their time and their paths (the same
        # objects): each is converted once for the run of rows that carries it, and the
        # arrays of one path share its list (msgpack writes it alike each time).
        append = arrays.append
        last_ns = last_path = micros = plain = None
        for seq, type_, ns, path, data in events.rows:
            if ns is not last_ns:
                last_ns, micros = ns, ns // 1000
            if path is not last_path:
                last_path, plain = path, list(path)
            append([seq, type_, micros, plain, data])
        return arrays
    last_at = micros = None
    for event in events:
        at = event.at
        if at is not last_at:
            last_at, micros = at, _micros(at)
        arrays.append([event.seq, event.type, micros, list(event.path), event.data])
    return arrays


# --- a batch of events, with a ForEach item's four in one array ---------------------------------
#
# A MemoryStore keeps the events of one write as one msgpack array (memory/entry.py). A ForEach
# item whose body is one step records four events: iteration_started, the step's node.started
# and node.completed, iteration_completed. In a batch they take one item array, which reads back
# as the same four events: msgpack's cost is per object packed, and the four event arrays hold
# 44 objects (a path of one name) where the item array holds 9. Any element of a batch is either
# `encode_event`'s array (5 elements) or an item array (8 or 9): a batch written before item
# arrays existed reads as it did. Only the MemoryStore writes them: a durable store keeps a row
# per event.
#
# An item array: [seq, at, path, index, item, name, output, at2(, output2)]: seq and at (ns) of
# the iteration's start, which the step's start shares (seq + 1); the ForEach's path; the step's
# name (its path is path + (index, name)); its output, and at2, the time of its completion and of
# the iteration's (seq + 2 and seq + 3). output2, the iteration's output, only when it is not the
# step's output itself (the same object, as the engine records it).

#: The sizes of an item array, and the first byte of each (a msgpack array of 8 or 9 elements).
ITEM_SIZES = (8, 9)
_ITEM_HEADS = frozenset({0x98, 0x99})
#: The size of a step array (a step's node.started and node.completed): [seq, at, path,
#: output, at2, "step"], times in ns; its first byte.
STEP_SIZE = 6
_STEP_HEAD = 0x96
#: What batch_arrays reads past the last row: no part of an item.
_NO_ROW: Row = (0, "", 0, (), {})


def batch_arrays(events: Sequence[Event]) -> list[list[Any]]:
    """`event_arrays(events)`, except that the four events of a ForEach item of one step,
    recorded in place (their first row's type is events.ITEM_STARTED), take one item array,
    and a step's node.started and node.completed in a row take one step array, when they read
    back exactly as they are. Items are looked for only when their EventLog says they may hold
    them (`EventLog.items`); a step's start is known by its data (STEP_STARTED_DATA).

    The in-place path (containers/foreach.py) records the iteration's start {"index", "item"},
    the step's start at path + (index, name) with the shared STEP_STARTED_DATA at the same time
    (the same int), the step's completion, and the iteration's {"index", "output"} at `path` at
    the step's completion time (the same int). What can come between or differ is checked: a
    stop or a tick (the step's start not next, or at a time of its own), a retry or a pause
    (no completion next), and the completion's data (its output alone). A step pair: the
    start's row (type node.started, data STEP_STARTED_DATA), then at once the completion's at
    the same path (the same object), the next seq, with its output alone."""
    if type(events) is not EventLog:
        return event_arrays(events)
    arrays: list[list[Any]] = []
    append = arrays.append
    last_ns = last_path = micros = plain = None
    marker = ITEM_STARTED if events.items else None
    step_data = STEP_STARTED_DATA
    held: Row | None = None  # a step's start, its completion looked for in the next row
    rows = iter(events.rows)
    for row in rows:
        if held is not None:
            if (
                row[1] is NODE_COMPLETED
                and row[3] is held[3]
                and row[0] == held[0] + 1
                and len(data := row[4]) == 1
                and "output" in data
            ):
                path = row[3]
                if path is not last_path:
                    last_path, plain = path, list(path)
                append([held[0], held[2], plain, data["output"], row[2], "step"])
                held = None
                continue
            seq, type_, ns, path, data = held
            held = None
            if ns is not last_ns:
                last_ns, micros = ns, ns // 1000
            if path is not last_path:
                last_path, plain = path, list(path)
            append([seq, type_, micros, plain, data])
        if row[4] is step_data and row[1] == NODE_STARTED:
            held = row
            continue
        if row[1] is marker:
            started = next(rows, _NO_ROW)
            done = next(rows, _NO_ROW)
            ended = next(rows, _NO_ROW)
            at = row[2]
            if (
                started[4] is STEP_STARTED_DATA
                and started[2] is at
                and done[1] is NODE_COMPLETED
                and ended[1] is ITERATION_COMPLETED
                and ended[2] is done[2]
                and len(d2 := done[4]) == 1
                and "output" in d2
            ):
                path = row[3]
                if path is not last_path:
                    last_path, plain = path, list(path)
                data = row[4]
                output = d2["output"]
                name = started[3][-1]
                array = [row[0], at, plain, data["index"], data["item"], name, output, ended[2]]
                if ended[4]["output"] is not output:
                    array.append(ended[4]["output"])
                append(array)
                continue
            # Not an item's four in a row (a stop, a retry, a pause, the end of the rows):
            # each row as an event, as below.
            for seq, type_, ns, path, data in (row, started, done, ended):
                if type_:  # not _NO_ROW
                    if ns is not last_ns:
                        last_ns, micros = ns, ns // 1000
                    if path is not last_path:
                        last_path, plain = path, list(path)
                    append([seq, type_, micros, plain, data])
            continue
        seq, type_, ns, path, data = row
        if ns is not last_ns:
            last_ns, micros = ns, ns // 1000
        if path is not last_path:
            last_path, plain = path, list(path)
        append([seq, type_, micros, plain, data])
    if held is not None:  # a step's start last (a pause, a stop)
        seq, type_, ns, path, data = held
        if ns is not last_ns:
            micros = ns // 1000
        if path is not last_path:
            plain = list(path)
        append([seq, type_, micros, plain, data])
    return arrays


def batch_element_events(element: bytes) -> int:
    """How many events one element of a batch (its bytes) holds: 4 for an item array, 2 for a
    step array, else 1."""
    head = element[0]
    return 4 if head in _ITEM_HEADS else 2 if head == _STEP_HEAD else 1


def decode_batch_element(data: bytes, session_id: str) -> list[Event]:
    """The events of one element of a batch: `decode_event`'s, or the four of an item array;
    SnapshotError for anything else."""
    if data[:1] and data[0] not in _ITEM_HEADS:
        if data[0] == _STEP_HEAD:
            return _step_events(data, session_id)
        return [decode_event(data, session_id)]
    fields = loads(data)
    if type(fields) is not list or len(fields) not in ITEM_SIZES:
        msg = "malformed events (expected an event or a ForEach item's four)"
        raise SnapshotError(msg)
    seq, nanos, path, index, item, name, output, nanos2 = fields[:8]
    if (
        type(seq) is not int
        or type(nanos) is not int
        or type(nanos2) is not int
        or type(path) not in (tuple, list)
        or type(index) is not int
        or type(name) is not str
    ):
        msg = "malformed events (a ForEach item's four with a field of the wrong type)"
        raise SnapshotError(msg)
    at, at2 = _times(nanos, nanos2)
    path = tuple(path)
    cpath = path + (index, name)
    output2 = fields[8] if len(fields) == 9 else output
    return [
        new_event(seq, ITERATION_STARTED, session_id, at, path, {"index": index, "item": item}),
        new_event(seq + 1, NODE_STARTED, session_id, at, cpath, {"kind": "step"}),
        new_event(seq + 2, NODE_COMPLETED, session_id, at2, cpath, {"output": output}),
        new_event(
            seq + 3, ITERATION_COMPLETED, session_id, at2, path, {"index": index, "output": output2}
        ),
    ]


def _times(nanos: int, nanos2: int) -> tuple[dt.datetime, dt.datetime]:
    """The two times of a compact array (the engine's, in ns) as events' times (in µs);
    SnapshotError when one is out of range."""
    try:
        return (
            _EPOCH + dt.timedelta(microseconds=nanos // 1000),
            _EPOCH + dt.timedelta(microseconds=nanos2 // 1000),
        )
    except OverflowError as exc:
        msg = f"malformed events (time {nanos} or {nanos2} ns since the epoch is out of range)"
        raise SnapshotError(msg) from exc


def _step_events(data: bytes, session_id: str) -> list[Event]:
    """The two events of a step array: [seq, at, path, output, at2, kind] (times in ns)."""
    fields = loads(data)
    if type(fields) is not list or len(fields) != STEP_SIZE:
        msg = "malformed events (expected a step's start and completion)"
        raise SnapshotError(msg)
    seq, nanos, path, output, nanos2, kind = fields
    if (
        type(seq) is not int
        or type(nanos) is not int
        or type(nanos2) is not int
        or type(path) not in (tuple, list)
        or kind != "step"
    ):
        msg = "malformed events (a step's start and completion with a field of the wrong type)"
        raise SnapshotError(msg)
    at, at2 = _times(nanos, nanos2)
    path = tuple(path)
    return [
        new_event(seq, NODE_STARTED, session_id, at, path, {"kind": kind}),
        new_event(seq + 1, NODE_COMPLETED, session_id, at2, path, {"output": output}),
    ]


def encode_events(events: Sequence[Event]) -> list[bytes]:
    """`encode_event` of each event, each time converted once."""
    return [dumps(fields) for fields in event_arrays(events)]


def decode_event(data: bytes, session_id: str) -> Event:
    """The event `encode_event` wrote; SnapshotError for anything else."""
    fields = loads(data)
    if type(fields) is not list or len(fields) != 5:
        msg = "malformed event (expected [seq, type, at, path, data])"
        raise SnapshotError(msg)
    seq, type_, micros, path, payload = fields
    if (
        type(seq) is not int
        or type(type_) is not str
        or type(micros) is not int
        or type(path) not in (tuple, list)  # a list if another tool wrote plain msgpack
        or type(payload) is not dict
    ):
        msg = (
            "malformed event (expected int, str, int, array, map; got "
            f"{', '.join(type(f).__name__ for f in fields)})"
        )
        raise SnapshotError(msg)
    try:
        at = _EPOCH + dt.timedelta(microseconds=micros)
    except OverflowError as exc:
        msg = f"malformed event (time {micros} µs since the epoch is out of range)"
        raise SnapshotError(msg) from exc
    return Event(seq, type_, session_id, at, tuple(path), payload)


@functools.lru_cache(maxsize=4096)
def path_key(path: tuple[Any, ...]) -> str:
    """A container path as a store key (names and indexes, unambiguous). Remembered for the
    paths last asked for: a resume asks again for the keys of the loop it continues."""
    return dumps(path).hex()
