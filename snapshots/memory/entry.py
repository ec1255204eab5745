"""MemoryStore's session entries: private copies of records, and events kept as one encoded
batch per write."""

from __future__ import annotations

import bisect
import builtins
import collections
import functools
import zlib
from collections.abc import Sequence
from typing import Any

import msgpack
from tarry.engine.errors import SnapshotError
from tarry.engine.state.events import Event
from tarry.snapshots.codec.pack import dumps
from tarry.snapshots.log_records import LogBatch, LogRecord, numbered
from tarry.snapshots.records import (
    SessionRecord,
    batch_arrays,
    batch_element_events,
    decode_batch_element,
    record_of,
)
from tarry.snapshots.tally import Tally

_ENDED = frozenset({"completed", "failed", "cancelled"})

#: The meta of every kept record that has none. Never mutated, never handed out.
_NO_META: dict[str, Any] = {}


def _keep(record: SessionRecord, version: int) -> SessionRecord:
    """The store's own copy of a record it is given, at `version`."""
    meta = dict(record.meta) if record.meta else _NO_META
    state = record.state
    if state[:1] == _MARK:  # no snapshot starts so, but the store keeps what it is given
        state = _pack(state)
    return _copy(record, version, meta, state)


def _copy(
    record: SessionRecord,
    version: int | None = None,
    meta: dict[str, Any] | None = None,
    state: bytes | None = None,
) -> SessionRecord:
    """A record that shares no mutable part with `record` (as a durable store's would), with
    `state` instead of its own if given.

    `record_of`, not `attrs.evolve` nor the class: a copy is made on every load and save,
    and evolve costs four times as much.
    """
    return record_of(
        record.session_id,
        record.flow,
        record.status,
        _unpack(record.state, record) if state is None else state,
        record.version if version is None else version,
        record.fingerprint,
        record.flow_version,
        record.token,
        record.wake_at,
        record.lease_owner,
        record.lease_until,
        record.created_at,
        record.updated_at,
        dict(record.meta) if meta is None else meta,
        record.durability,
        record.stop,
    )


#: The first byte of a packed blob: 0xC1, a byte msgpack never uses, so that no blob the codec
#: wrote starts with it (a state that starts with it anyway is packed as it is kept: `_keep`).
_MARK = b"\xc1"
#: A packed blob: _PLAIN and the deflated blob; or _JOINED, the length of the state (4 bytes),
#: and the state and the session's one blob of events deflated together (`_join`).
_PLAIN = b"\xc1\x00"
_JOINED = b"\xc1\x01"


class _InState:
    """The type of IN_STATE."""

    __slots__ = ()


#: The `batches` of an entry whose one blob of events is packed with its state (`_join`).
IN_STATE = _InState()


def _zdict() -> bytes:
    """The preset dictionary of `_pack`: the keys and names every snapshot and event log
    holds, in the order the codec writes them, and no value of any session (a deflated blob
    of a small session is mostly its ids, times and values)."""
    sid = "0" * 32
    pause = {
        "kind": "human",
        "reason": "",
        "path": [],
        "payload": {"message": "", "assignee": None},
        "wake_at": None,
        "expires_at": None,
        "awaits_value": True,
        "key": None,
        "on_timeout": None,
    }
    state = {
        "session_id": sid,
        "flow": "",
        "status": "paused",
        "input": None,
        "shared": {},
        "outputs": {},
        "container_stack": [],
        "pause": pause,
        "error": None,
        "output": None,
        "last_seq": 0,
        "metrics": {},
        "resume_values": [],
        "retries": 0,
    }
    envelope = {
        "format": "tarry.snapshot",
        "v": 1,
        "session": sid,
        "flow": {"name": "", "fingerprint": sid, "version": None},
        "state": state,
    }
    t = 1 << 60
    events = [
        [1, "node.failed", t, [], {"error": None}],
        [1, "node.retrying", t, [], {}],
        [1, "container.iteration_started", t, [], {}],
        [1, "container.iteration_completed", t, [], {}],
        [1, "run.resumed", t, [], {"value": None}],
        [1, "run.completed", t, [], {"output": None}],
        [1, "run.started", t, [], {"input": None, "flow": ""}],
        [2, "node.started", t, [""], {"kind": "step"}],
        [3, "node.completed", t, [""], {"output": None}],
        [8, "node.started", t, [""], {"kind": "gate"}],
        [9, "run.paused", t, [""], {"kind": "human", "reason": "", "payload": pause["payload"]}],
    ]
    return msgpack.packb(events) + msgpack.packb(envelope)


_ZDICT = _zdict()


#: deflate's window (2 ** _WBITS bytes, a raw stream) and hash memory level: small, so that its
#: working memory (some 32 KB here, 256 KB by default) is a block malloc hands back and reuses,
#: not one that scatters the heap. A session left idle is mostly small: little is lost.
_WBITS = 12
_MEMLEVEL = 5


def _deflate(data: bytes, zdict: bytes = _ZDICT) -> bytes:
    deflate = zlib.compressobj(6, zlib.DEFLATED, -_WBITS, _MEMLEVEL, zlib.Z_DEFAULT_STRATEGY, zdict)
    return deflate.compress(data) + deflate.flush()


def _inflate(data: bytes, zdict: bytes = _ZDICT) -> bytes:
    inflate = zlib.decompressobj(-_WBITS, zdict)
    return inflate.decompress(data) + inflate.flush()


@functools.lru_cache(maxsize=256)
def _flow_zdict(flow: str, fingerprint: str) -> bytes:
    """`_ZDICT` and the flow's name and fingerprint where its every snapshot and log holds
    them: made again from those two whenever needed, so a cache of a few is enough."""
    flow_map = {"name": flow, "fingerprint": fingerprint, "version": None}
    names = {"flow": flow_map, "state": {"session_id": "", "flow": flow}}
    started = [[1, "run.started", 1 << 60, [], {"input": None, "flow": flow}]]
    return _ZDICT + msgpack.packb(names) + msgpack.packb(started)


def _record_zdict(record: SessionRecord) -> bytes:
    """The dictionary of a record's joined blob: its flow's, and its session id (twice in
    every snapshot, and as random as the blob gets)."""
    return _flow_zdict(record.flow, record.fingerprint) + msgpack.packb(record.session_id)


def _pack(blob: bytes) -> bytes:
    """A state or events blob deflated against `_ZDICT`, for a session left idle (always
    packed, so that a blob that does not shrink is not packed again at the next compaction:
    deflate adds a few bytes at most)."""
    return _PLAIN + _deflate(blob)


def _join(record: SessionRecord, events: bytes) -> bytes:
    """The record's state and the session's one blob of events packed together (they share
    names), against the dictionary of its flow (its name and fingerprint stay with the record
    that holds the blob: a save that brings others brings a state of its own)."""
    zdict = _record_zdict(record)
    state = record.state
    return _JOINED + len(state).to_bytes(4, "big") + _deflate(state + events, zdict)


def _unpack(blob: bytes, record: SessionRecord | None = None) -> bytes:
    """The blob `_pack` was given, or the state `_join` was (`record` the one holding it); a
    blob not packed as it is."""
    if blob[:1] != _MARK:
        return blob
    head = blob[:2]
    if head == _PLAIN:
        return _inflate(blob[2:])
    if head == _JOINED and record is not None:
        zdict = _record_zdict(record)
        return _inflate(blob[6:], zdict)[: int.from_bytes(blob[2:6], "big")]
    return blob  # none of ours


def _joined_events(record: SessionRecord) -> bytes:
    """The blob of events `_join` packed with the record's state."""
    state = record.state
    zdict = _record_zdict(record)
    return _inflate(state[6:], zdict)[int.from_bytes(state[2:6], "big") :]


def _encode_batch(events: Sequence[Event]) -> tuple[bytes, int]:
    """The events of one write as one msgpack array of `batch_arrays`' arrays, and how many
    bytes those arrays take (the blob less the array's header).

    One encoder call per write instead of one per event halves the cost of encoding a pause's
    events, and a session holds one bytes object per write instead of one per event. The
    elements are byte for byte what `encode_event` writes (a test checks it), so the bytes
    counted are the same as a durable store's, except for the four events of a ForEach item of
    one step, which take one array (records.batch_arrays: a fraction of their four arrays'
    bytes), and a step's start and completion in a row, which take one step array.
    """
    arrays = batch_arrays(events)
    blob = dumps(arrays)
    n = len(arrays)  # less the array's header (see _header)
    return blob, len(blob) - (1 if n < 16 else 3 if n < 0x10000 else 5)


#: A write of a session's events joins its first blob instead of starting one of its own while
#: that blob is its only one and under MERGE_FIRST bytes (the run's start, written by
#: `create`), and the two take at most MERGE_BYTES: a session that paused once holds one blob.
#: Never later (merging on would copy at every write of a long session), and bounded, so the
#: copy stays O(1).
MERGE_BYTES = 1024
MERGE_FIRST = 128


def _header(n: int) -> bytes:
    """The msgpack header of an array of `n` elements."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _elements(blob: bytes) -> int:
    """How many elements the array `blob` (an `_encode_batch` blob) holds, read from its
    header (an element is one event or a ForEach item's four)."""
    head = blob[0]
    if head & 0xF0 == 0x90:
        return head & 0x0F
    return int.from_bytes(blob[1:3] if head == 0xDC else blob[1:5], "big")


def _merged(last: bytes, blob: bytes) -> bytes:
    """One `_encode_batch` blob of the events of `last` then `blob`'s."""
    n_last, n_blob = _elements(last), _elements(blob)
    return _header(n_last + n_blob) + last[len(_header(n_last)) :] + blob[len(_header(n_blob)) :]


def _tokens_of(entry: _Entry) -> tuple[str, ...] | list[str]:
    tokens = entry.tokens
    return () if tokens is None else (tokens,) if type(tokens) is str else tokens


def _decode_batch(
    blob: bytes, session_id: str, skip: int = 0, limit: int | None = None
) -> builtins.list[Event]:
    """The events of a blob `_encode_batch` wrote, each element decoded by
    `decode_batch_element`: the first `skip` events are passed over (the elements that hold
    only those undecoded), and no more than `limit` (if given) are decoded."""
    unpacker = msgpack.Unpacker(max_buffer_size=len(blob))
    unpacker.feed(blob)
    events: builtins.list[Event] = []
    try:
        count = unpacker.read_array_header()
        start = unpacker.tell()
        for _ in range(count):
            unpacker.skip()
            end = unpacker.tell()
            element = blob[start:end]
            start = end
            if skip:
                held = batch_element_events(element)
                if held <= skip:
                    skip -= held
                    continue
                found = decode_batch_element(element, session_id)[skip:]
                skip = 0
            else:
                found = decode_batch_element(element, session_id)
            events += found
            if limit is not None and len(events) >= limit:
                del events[limit:]
                break
    except (ValueError, IndexError, msgpack.OutOfData) as exc:  # as a durable store's bad blob
        msg = f"session {session_id!r}: malformed events ({type(exc).__name__}: {exc})"
        raise SnapshotError(msg) from exc
    return events


class _Extra:
    """What few sessions have, kept apart from their entries (see `_Entry`)."""

    __slots__ = ("firsts", "values", "tally", "wakes", "logs")

    def __init__(self) -> None:
        self.firsts: list[int] | None = None
        self.values: dict[str, dict[int, bytes]] | None = None
        self.tally: Tally | None = None
        self.wakes: list[tuple[Any, str]] | None = None
        self.logs: collections.deque[LogRecord] | None = None


def _extra(name: str) -> Any:
    """A property of `_Entry` kept on its `_Extra`: None while it has none, which a None set
    does not make."""

    def get(entry: _Entry) -> Any:
        extra = entry.extra
        return None if extra is None else getattr(extra, name)

    def put(entry: _Entry, value: Any) -> None:
        extra = entry.extra
        if extra is None:
            if value is None:
                return
            extra = entry.extra = _Extra()
        setattr(extra, name, value)

    return property(get, put)


class _Entry:
    """A session in a MemoryStore: what it costs in memory is what a paused session costs,
    so what most sessions do not use is made when first used, and out of the entry."""

    __slots__ = ("record", "batches", "last_seq", "tokens", "ordered", "extra")

    def __init__(self, record: SessionRecord) -> None:
        self.record = record
        #: One _encode_batch blob per write, in order: None before the first, the blob itself
        #: while it is the only one (most sessions that wait wrote once), then a list.
        #: IN_STATE: that one blob is packed with the state (see `_compact`).
        self.batches: bytes | list[bytes] | _InState | None = None
        self.last_seq = 0
        #: The tokens it was given: one as itself, more as a list (most sessions have one).
        self.tokens: str | list[str] | None = None
        #: (encoded path, token) of each live wait, sorted: `waits` in the stores' order (a
        #: live wait's token is in the store's `_tokens`, its only index by token). One wait
        #: is kept as its token alone: one needs no order. None: no wait.
        self.ordered: str | list[tuple[bytes, str]] | None = None
        self.extra: _Extra | None = None  # made when one of the five below is first set

    #: With a list of batches: the seq of each one's first event (to find a page). A
    #: session's first event is seq 1, so one blob needs none.
    firsts = _extra("firsts")
    #: Its node tallies, brought up to date by `stats()`.
    tally = _extra("tally")
    #: Its out-of-line values by key and index, made when the first is put.
    values = _extra("values")
    #: A heap of (wake_at, token) of its waits with a time (gone ones popped lazily).
    wakes = _extra("wakes")
    #: Its last log records, if any.
    logs = _extra("logs")


def _compact(entry: _Entry) -> None:
    """Deflate what the entry holds raw: its state, and the event blobs written since it was
    last compacted (the raw ones at the end: each blob is packed once, however long the log).
    A state and a session's only blob of events are packed together."""
    record = entry.record
    batches = entry.batches
    if record.state[:1] != _MARK:
        if type(batches) is bytes and batches[:1] != _MARK:
            record.state = _join(record, batches)
            entry.batches = IN_STATE
            return
        record.state = _pack(record.state)
    if type(batches) is bytes:
        if batches[:1] != _MARK:
            entry.batches = _pack(batches)
    elif type(batches) is list:
        i = len(batches) - 1
        while i >= 0 and batches[i][:1] != _MARK:
            batches[i] = _pack(batches[i])
            i -= 1


def _split(entry: _Entry) -> None:
    """Before a write of events or of a new state: the entry's blob of events as one blob of
    its own again, if it is packed with the state."""
    if entry.batches is IN_STATE:
        entry.batches = _joined_events(entry.record)


def _pages(entry: _Entry, after_seq: int) -> tuple[builtins.list[bytes], builtins.list[int]]:
    """The entry's batches from the one holding seq after_seq + 1 on, and their first seqs:
    found by bisection, so a page decodes only the writes it spans, wherever it is in the log."""
    batches = entry.batches
    if batches is None:
        return [], []
    if batches is IN_STATE:
        return [_joined_events(entry.record)], [1]
    if type(batches) is not list:
        return [batches], [1]  # type: ignore[list-item]
    firsts = entry.firsts
    assert firsts is not None
    first = max(bisect.bisect_right(firsts, after_seq + 1) - 1, 0)
    return batches[first:], firsts[first:]


def _keep_logs(entry: _Entry, batch: LogBatch) -> None:
    """Number the records of `batch` after the entry's last and keep its last `batch.keep`."""
    logs = entry.logs
    if logs is None:
        logs = entry.logs = collections.deque()
    logs.extend(numbered(batch, logs[-1].seq if logs else 0))
    drop = logs[-1].seq - batch.keep  # by seq, as the SQL stores do
    while logs[0].seq <= drop:
        logs.popleft()


def _read_logs(entry: _Entry, levelno: int, after: int, limit: int) -> builtins.list[LogRecord]:
    logs = entry.logs
    if not logs or limit < 1:
        return []
    start = max(after + 1 - logs[0].seq, 0)  # seqs are gap-free: index by seq
    found = []
    for i in range(start, len(logs)):
        record = logs[i]
        if record.levelno >= levelno:
            found.append(record)
            if len(found) == limit:
                break
    return found


def _dropped_logs(entry: _Entry) -> int:
    return entry.logs[0].seq - 1 if entry.logs else 0
