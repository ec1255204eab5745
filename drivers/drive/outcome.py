"""Outcomes: what `run` and `resume` return."""

from __future__ import annotations

import operator
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs
from tarry.engine.state.lanes import concurrent, pause_at, pauses
from tarry.engine.state.records import ErrorInfo, OutOfLine, PauseState, SessionState
from tarry.snapshots.records import WaitRecord, decode_lane

OK, PAUSED, ERROR = "ok", "paused", "error"


@attrs.frozen
class PauseInfo:
    """Why a run waits. `partial` holds the outputs of the flow's completed top-level elements
    (a dict; a read-only mapping that reads each when first looked at if some are large and
    kept out of the session's state, see `Partial`)."""

    kind: str
    reason: str
    path: tuple[Any, ...]
    payload: Any = None
    partial: Mapping[str, Any] = attrs.field(factory=dict)
    wake_at: datetime | None = None
    expires_at: datetime | None = None
    #: The single-use token that resumes this wait (`Runtime.resume(pause.token, value)`).
    token: str | None = None
    #: The key a keyed Wait waits on (`Runtime.deliver(key, value)` resumes it); None for a
    #: wait without one.
    key: str | None = None


@attrs.frozen
class Outcome:
    """`ok` (with `output`), `paused` (with `token` and `pause`) or `error` (with `error`, and a
    `token` when resuming may help). A cancelled session's outcome is an error of type
    `"cancelled"`.

    `run()` returns an Outcome when every step it met was sync, and an awaitable of one as soon
    as it met an async step; `arun()` always returns an awaitable."""

    status: str
    session_id: str
    output: Any = None
    token: str | None = None
    pause: PauseInfo | None = None
    error: ErrorInfo | None = None
    meta: dict[str, Any] = attrs.field(factory=dict)
    #: Every waiting branch's PauseInfo, each with its own token: one for a sequential flow,
    #: one per waiting iteration or branch of concurrent containers. `pause`/`token` are the
    #: first of them. A tuple; after a resume of one branch of a session whose other branches
    #: wait parked in the store, a `StoredPauses` sequence that reads them when first looked
    #: at (and compares equal to the tuple of the same PauseInfos).
    pauses: Sequence[PauseInfo] = ()

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def paused(self) -> bool:
        return self.status == PAUSED

    @property
    def failed(self) -> bool:
        return self.status == ERROR

    if TYPE_CHECKING:
        # For type checkers only: `run()` is typed `-> Outcome`, so that sync code reads
        # `out.paused`, and async code may `await rt.run(flow)`, which is right at run time
        # only when the run met an async step (then `run` returns an awaitable of the
        # Outcome). At run time an Outcome is a plain value, never awaitable: code that means
        # to await whatever a run gives uses `arun`/`aresume`.
        def __await__(self) -> Generator[Any, None, Outcome]: ...


#: What a PauseInfo shows of the PauseState it stands for: the fields both declare (a field
#: added to both is shown with no change here), each as (PauseInfo's slot setter, getter).
_SHOWN = tuple(
    (PauseInfo.__dict__[name].__set__, operator.attrgetter(name))
    for name in attrs.fields_dict(PauseInfo)
    if name in attrs.fields_dict(PauseState)
)
_set_partial = PauseInfo.__dict__["partial"].__set__
_set_token = PauseInfo.__dict__["token"].__set__
_new = object.__new__


def pause_info(pause: PauseState, partial: Mapping[str, Any], token: str | None) -> PauseInfo:
    """The public PauseInfo of a session's wait `pause`, with the flow's `partial` outputs and
    the wait's public `token`.

    An outcome lists every wait of its session, so each is made without attrs' `__init__`
    (which has nothing to check or convert here): its fields are set straight into the slots,
    as `snapshots.records.wait_records` does, in fewer instructions than the keyword call."""
    info = _new(PauseInfo)
    for set_field, get in _SHOWN:
        set_field(info, get(pause))
    _set_partial(info, partial)
    _set_token(info, token)
    return info


#: Outcome's slot setters by field (a test checks `_paused` sets every field).
_OUTCOME_SLOTS = {name: Outcome.__dict__[name].__set__ for name in attrs.fields_dict(Outcome)}
_set_status = _OUTCOME_SLOTS["status"]
_set_session_id = _OUTCOME_SLOTS["session_id"]
_set_output = _OUTCOME_SLOTS["output"]
_set_outcome_token = _OUTCOME_SLOTS["token"]
_set_pause = _OUTCOME_SLOTS["pause"]
_set_error = _OUTCOME_SLOTS["error"]
_set_meta = _OUTCOME_SLOTS["meta"]
_set_pauses = _OUTCOME_SLOTS["pauses"]


def _paused(sid: str, first: PauseInfo, meta: dict[str, Any], pauses: Any) -> Outcome:
    """`Outcome(PAUSED, sid, token=first.token, pause=first, meta=meta, pauses=pauses)`, its
    slots set directly: every pause returns one (attrs' frozen `__init__` sets each field
    through `object.__setattr__`)."""
    outcome = _new(Outcome)
    _set_status(outcome, PAUSED)
    _set_session_id(outcome, sid)
    _set_output(outcome, None)
    _set_outcome_token(outcome, first.token)
    _set_pause(outcome, first)
    _set_error(outcome, None)
    _set_meta(outcome, meta)
    _set_pauses(outcome, pauses)
    return outcome


def all_pauses(state: SessionState) -> list[PauseState]:
    """Every wait of a paused session, its own first (a sequential flow has only that one)."""
    if state.pause is not None and not concurrent(state):
        return [state.pause]
    return pauses(state)


CANCELLED = ErrorInfo(type="cancelled", message="the session was cancelled", retryable=False)


class Partial(Mapping[str, Any]):
    """`PauseInfo.partial` of a session whose state refers to top-level outputs kept out of
    line (engine.state.OutOfLine): a read-only mapping of the outputs by name that reads such
    an output when it is first looked at, so that a pause or a resume never reads them for it.
    It compares equal to the dict of the same outputs."""

    __slots__ = ("_outputs", "_read")

    def __init__(self, outputs: dict[str, Any], read: Callable[[OutOfLine], Any]) -> None:
        self._outputs = dict(outputs)
        self._read = read

    def __getitem__(self, name: str) -> Any:
        value = self._outputs[name]
        if type(value) is OutOfLine:
            value = self._outputs[name] = self._read(value)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._outputs)

    def __len__(self) -> int:
        return len(self._outputs)

    def __repr__(self) -> str:
        return repr(dict(self))


def _partial(
    outputs: dict[str, Any], read: Callable[[OutOfLine], Any] | None
) -> dict[str, Any] | Partial:
    if read is not None and OutOfLine in map(type, outputs.values()):
        return Partial(outputs, read)
    return dict(outputs)


def outcome_of(
    state: SessionState,
    token: str | None,
    meta: dict[str, Any] | None = None,
    tokens: dict[tuple[Any, ...], str] | None = None,
    read: Callable[[OutOfLine], Any] | None = None,
    waits: list[PauseState] | None = None,
    stored: Callable[[], tuple[PauseInfo, ...]] | None = None,
) -> Outcome:
    """The outcome a session's state stands for; `meta` says how its drive began (a paused
    outcome's own `pause_kind` takes precedence over the kind it resumed). A paused one lists
    every wait (`pauses`; `waits` when given, else those the state holds), with its token from
    `tokens` (by the wait's path; `token` for the first when `tokens` has none for it).
    `stored`: the waits are also lanes parked in the store, which `stored()` reads: `pauses`
    then calls it when first looked at (see `StoredPauses`), and `waits` is the first wait.
    `read(ref)` reads a top-level output kept out of line, when `partial` is looked at (see
    `Partial`)."""
    status = state.status
    sid = state.session_id
    meta = dict(meta or {})
    if state.cleanup_error is not None:  # its flow's cleanup failed (the session's end stands)
        meta["cleanup_error"] = state.cleanup_error
    if status == "completed":
        return Outcome(OK, sid, output=state.output, meta=meta)
    if status == "paused":
        if waits is None:
            waits = all_pauses(state)
        if waits:
            partial = _partial(state.outputs, read)  # one, shared by every PauseInfo
            tokens = tokens or {}
            own = waits[0]
            infos: tuple[PauseInfo, ...] = (pause_info(own, partial, tokens.get(own.path, token)),)
            if len(waits) > 1:
                infos += tuple(pause_info(p, partial, tokens.get(p.path)) for p in waits[1:])
            first = infos[0]
            meta["pause_kind"] = first.kind
            pauses = infos if stored is None else StoredPauses(stored)
            return _paused(sid, first, meta, pauses)
    if status == "failed" and state.error is not None:
        return Outcome(ERROR, sid, token=token, error=state.error, meta=meta)
    if status == "cancelled":
        return Outcome(ERROR, sid, error=CANCELLED, meta=meta)
    return Outcome(status, sid, meta=meta)


class StoredPauses(Sequence[PauseInfo]):
    """`Outcome.pauses` of a session whose waiting lanes are parked in the store (a wide
    session resumed one branch at a time): read from the store when first looked at, then
    kept. A resume of one branch then reads nothing for the branches that go on waiting; code
    that looks at `pauses` pays for every one of them, once. It compares equal to the tuple of
    the same PauseInfos."""

    __slots__ = ("_read", "_infos")

    def __init__(self, read: Callable[[], tuple[PauseInfo, ...]]) -> None:
        self._read: Callable[[], tuple[PauseInfo, ...]] | None = read
        self._infos: tuple[PauseInfo, ...] = ()

    def _all(self) -> tuple[PauseInfo, ...]:
        if self._read is not None:
            self._infos, self._read = self._read(), None
        return self._infos

    def __getitem__(self, index: Any) -> Any:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[PauseInfo]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StoredPauses | tuple | list):
            return self._all() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._all())


def stored_pauses(
    store: Any,
    tokens: Any,
    state: SessionState,
    read: Callable[[OutOfLine], Any] | None = None,
    order: Callable[[tuple[Any, ...]], Any] | None = None,
    first: tuple[Any, ...] | None = None,
) -> tuple[PauseInfo, ...]:
    """Every wait of a paused session whose lanes may be parked: the one at path `first` (the
    outcome's `pause`) or else the session's own wait first, then the others in the order of
    the tree (`order`: a sort key of a path, the flow's) or, without one, as the store lists
    them (by path); each with its public token (`tokens.token`)."""
    partial = _partial(state.outputs, read)
    infos: list[PauseInfo] = []
    own = state.pause
    for wait in store.waits(state.session_id):
        pause = pause_of(wait, state)
        if pause is not None:
            infos.append(pause_info(pause, partial, tokens.token(wait.token)))
    if order is not None:
        infos.sort(key=lambda info: order(info.path))
    lead = first if first is not None else None if own is None else own.path
    for i, info in enumerate(infos):
        if info.path == lead:
            infos.insert(0, infos.pop(i))
            break
    return tuple(infos)


def pause_of(wait: WaitRecord, state: SessionState) -> PauseState | None:
    """The wait a wait row stands for: its parked lane's, or the one `state` holds at its path
    (None when neither has it)."""
    if wait.lane:
        return decode_lane(wait.lane).pause
    return pause_at(state, wait.path)
