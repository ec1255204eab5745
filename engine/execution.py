"""One run of a flow in progress: the live state, its new events, and the driver's services.

`Execution` is the only object the element generators talk to. It turns what they report into
events, folds each through the reducer and keeps them for the driver to persist. What touches
storage, encoding or control (`ledger`, `take`, `copy`, `bounds`, `stop`) is injected by the
driver: the engine imports none of it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from time import monotonic
from typing import Any, Protocol

from tarry.engine.bounds import UNBOUNDED, Bounds
from tarry.engine.errors import PayloadTooLarge
from tarry.engine.read_only_views import Where, view_of
from tarry.engine.state.events import Event, EventLog, Row, event_of, ns_of
from tarry.engine.state.lanes import frames, scope_of
from tarry.engine.state.records import LANE, ContainerFrame, OutOfLine, SessionState
from tarry.engine.state.reducer import REDUCERS, apply, own
from tarry.engine.values import deep_copy, take_copy


class Ledger(Protocol):
    """Out-of-line storage for a ForEach's items and results, addressed by container path, and
    the values the state refers to (`held(seq)`: the input or output that the session's event
    `seq` carries, see state.OutOfLine). `item`, `results` and `held` raise SnapshotError for
    what the store does not hold."""

    def put_items(self, path: tuple[Any, ...], items: list[Any]) -> None: ...
    def item(self, path: tuple[Any, ...], index: int) -> Any: ...
    def put_result(self, path: tuple[Any, ...], index: int, value: Any) -> None: ...
    # Optional: `unwritten_results`, the list of the (path, index, value) put and not written
    # yet, one list for the ledger's life: appending to it is `put_result` (see `result_sink`).
    # Optional: `items(path, indexes) -> {index: item}`, many at once (see `items_of`).
    def results(self, path: tuple[Any, ...], stop: int) -> list[Any]: ...
    def held(self, seq: int) -> Any: ...


def items_of(ledger: Ledger, path: tuple[Any, ...], indexes: list[int]) -> dict[int, Any]:
    """The items at `indexes` of the ForEach at `path`, by index: through the ledger's
    `items(path, indexes)` when it has one (a read for all of them), else `item` for each."""
    many = getattr(ledger, "items", None)
    if many is not None:
        return many(path, indexes)  # type: ignore[no-any-return]
    return {i: ledger.item(path, i) for i in indexes}


def result_sink(ledger: Ledger) -> Callable[[tuple[tuple[Any, ...], int, Any]], None]:
    """`put_result` taking (path, index, value) as one tuple: the `append` of the ledger's
    `unwritten_results` when it has them (a C call, not a Python one, per ForEach item)."""
    unwritten = getattr(ledger, "unwritten_results", None)
    if unwritten is not None:
        return unwritten.append  # type: ignore[no-any-return]
    put = ledger.put_result
    return lambda result: put(*result)


def _go_on(path: tuple[Any, ...]) -> bool:
    return False


def _restoring(stack: tuple[ContainerFrame, ...]) -> dict[tuple[Any, ...], ContainerFrame]:
    """The frames to fast-forward into, by path: those of `stack` and of its lanes' stacks,
    lanes themselves left out. A stack without lanes (most) is walked without a generator."""
    found = {}
    for frame in stack:
        if frame.lanes is not None:
            return {f.path: f for f in frames(stack) if f.kind != LANE}
        if frame.kind != LANE:
            found[frame.path] = frame
    return found


class Execution:
    """The live side of a session while its generator tree runs.

    It owns its `state`: a copy of the state handed in (see `reducer.own`), which the reducer
    updates in place. The state handed in is never changed.
    """

    __slots__ = (
        "session_id",
        "state",
        "fields",
        "now",
        "ns",
        "at",
        "rows",
        "items",
        "restoring",
        "ledger",
        "take",
        "copy",
        "bounds",
        "room",
        "out_value",
        "out_size",
        "stop",
        "watch",
        "due",
        "flush_at",
        "listener",
        "retry",
        "lanes",
        "pooled",
        "mailbox",
        "mail_taken",
        "batch_check",
        "children",
        "held",
        "views",
    )

    def __init__(
        self,
        state: SessionState,
        *,
        now: Callable[[], datetime],
        ledger: Ledger,
        take: Callable[[Any, Any], tuple[Any, int]] = take_copy,
        copy: Callable[[Any], Any] = deep_copy,
        bounds: Bounds = UNBOUNDED,
        stop: Callable[[tuple[Any, ...]], bool] = _go_on,
        listener: Callable[[Event], None] | None = None,
        retry: Any = None,
        mailbox: Callable[[str], Any] | None = None,
        ns: Callable[[], int] | None = None,
        children: Callable[[str, Any, Any], Any] | None = None,
    ) -> None:
        self.session_id = state.session_id
        self.state = own(state, copy)
        #: The live state's fields, which the reducer changes in place (see reducer.own).
        self.fields = self.state.__dict__
        self.now = now
        #: The time of events, in nanoseconds since the epoch: `now`'s, read as an int (a
        #: driver hands in a cheaper reading of the same clock).
        self.ns: Callable[[], int] = ns if ns is not None else (lambda: ns_of(now()))
        #: The time of the last event (ns). The next event reuses it unless time may have
        #: passed since: whoever runs user code, waits or writes sets it to None, and the next
        #: event reads the clock. A step then costs one clock read, not one per event.
        self.at: int | None = None
        #: The events not handed to the driver yet, as rows (see events.EventLog): an `Event`
        #: is built only for whoever looks (`log`, a listener).
        self.rows: list[Row] = []
        #: Whether `rows` may hold a ForEach item recorded in place (events.ITEM_STARTED): set
        #: by that path; the driver hands it on with the rows (`EventLog(session_id, rows,
        #: items)`) and clears both when it takes them.
        self.items = False
        # Frames of the containers to fast-forward into, by path; emptied as they are entered.
        self.restoring: dict[tuple[Any, ...], ContainerFrame] = _restoring(
            self.state.container_stack
        )
        self.ledger = ledger
        #: take(value, where) -> (private copy, encoded size): what a value entering the session
        #: becomes, or NotSerializable (PayloadTooLarge) naming `where`, a str or a (path, key)
        #: pair formatted only if the check fails. See values.py.
        self.take = take
        #: copy(value): a copy of a value the session holds, for user code to read.
        self.copy = copy
        self.bounds = bounds
        #: Bytes the state may still grow by before it must be measured (see bounds.py).
        self.room = -1 if bounds.held is None else bounds.state - bounds.held
        #: The output the last node completed with, and its encoded size: a container asks for
        #: the size of its child's output, which the child's check already measured.
        self.out_value: Any = None
        self.out_size = 1
        #: stop(path) is asked at every checkpoint (before each iteration and each child): True
        #: stops the run there (an abort, a lost lease). The driver may also write there.
        self.stop = stop
        #: When the engine asks `stop` (see `checkpoint`): at every checkpoint while `watch` is
        #: set (an abort asked, a lost lease, or a bare Execution given a `stop`), else once
        #: `flush_at` events are unwritten or the monotonic clock reaches `due`. A driver
        #: keeps them; asking costs a call, not asking a few comparisons.
        self.watch = stop is not _go_on
        self.due = math.inf
        self.flush_at = sys.maxsize
        self.listener = listener
        #: The retry policy of steps that have none of their own (the Runtime's default).
        self.retry = retry
        #: mailbox(key): a value delivered for `key` before a Wait on it was reached, or
        #: signals.NO_MAIL. A keyed Wait asks it when reached and, given a value, completes
        #: with it instead of pausing, and adds the key to `mail_taken` (the driver removes
        #: those deliveries from the store with the session's next write).
        self.mailbox = mailbox
        self.mail_taken: list[str] = []
        #: batch_check(via, key, body): what is wrong with a BatchRequest for the batch adapter
        #: registered as `via`, or None (set by a driver that has batch adapters; None: not
        #: checked here, the batch round refuses it instead).
        self.batch_check: Callable[[str, str, Any], str | None] | None = None
        #: children(path, session_id, flow, input, lookup=False): a `Child` element reached
        #: asks the driver to start its session (any worker runs it) unless it exists: (its id,
        #: the end of one that had ended already as `child_end` data or signals.NO_MAIL,
        #: whether it existed). With `lookup`, nothing is started: a child that does not
        #: exist gives (its id, NO_MAIL, False). None: no driver starts children (a bare
        #: Execution), and a Child fails.
        self.children = children
        #: The values kept out of the state that this run has met, by the seq of the event that
        #: carries them (see state.OutOfLine): each is read from the ledger once per run.
        self.held: dict[int, Any] = {}
        #: Read-only views of those values, as user code reads them (see `view`).
        self.views: dict[tuple[int, Where], Any] = {}
        #: How many concurrent containers are in progress: while none is, the state's own
        #: fields are the scope of every node (see `scope`).
        self.lanes = 0
        #: True while a concurrent container steps one of its lanes: a sync step then starts
        #: its call on the driver's thread pool (`Offload`) instead of calling it in place.
        self.pooled = False

    def scope(self, path: tuple[Any, ...]) -> Any:
        """Where the node at `path` keeps its resume values, retry count and pause: the state,
        or the lane of a concurrent container that `path` lies in (see engine/state/lanes.py)."""
        if not self.lanes:
            return self.state
        return scope_of(self.state, path)

    def checkpoint(self, path: tuple[Any, ...]) -> bool:
        """Whether the run stops at the checkpoint before `path` (an iteration or a child):
        `stop(path)`, asked only when the driver wants to be (see `watch`). The containers
        inline this test on their per-iteration path."""
        if self.watch or len(self.rows) >= self.flush_at or monotonic() >= self.due:
            return self.stop(path)
        return False

    @property
    def log(self) -> EventLog:
        """The events not handed to the driver yet, as `Event`s."""
        return EventLog(self.session_id, self.rows)

    def emit(self, type: str, path: tuple[Any, ...], data: dict[str, Any]) -> int:
        """Record one event: fold it into the live state and keep it for the driver. Returns
        its seq."""
        fields = self.fields
        seq = fields["last_seq"] = fields["last_seq"] + 1
        at = self.at
        if at is None:
            at = self.at = self.ns()
        # The live state is ours alone: the reducer updates it in place.
        reduce = REDUCERS.get(type)
        if reduce is not None:
            reduce(fields, seq, path, data, True)
        row = (seq, type, at, path, data)
        self.rows.append(row)
        if self.listener is not None:
            self.listener(event_of(row, self.session_id))
            self.at = None  # a subscriber may take its time
        return seq

    def step_started(self, path: tuple[Any, ...], data: dict[str, Any]) -> None:
        """`emit(NODE_STARTED, path, data)` for a step, which changes nothing in the state but
        its last seq: the first event of every step, so it skips the reducer."""
        fields = self.fields
        seq = fields["last_seq"] = fields["last_seq"] + 1
        at = self.at
        if at is None:
            at = self.at = self.ns()
        row = (seq, "node.started", at, path, data)
        self.rows.append(row)
        if self.listener is not None:
            self.listener(event_of(row, self.session_id))
            self.at = None

    def fits(self, size: int, type: str, path: tuple[Any, ...], data: dict[str, Any]) -> bool:
        """Whether the state may take the event (type, path, data), which adds at most `size`
        bytes to it; if so they are counted. When `room` (an estimate that errs low) is not
        enough, the state the event would leave is measured exactly: what the event drops
        (a closing frame, an iteration's outputs) is then counted as well."""
        if size <= self.room:
            self.room -= size
            return True
        state = self.state
        event = event_of((state.last_seq + 1, type, self.at or 0, path, data), self.session_id)
        after = apply(state, event)
        self.room = self.bounds.state - self.bounds.measure(after)
        return self.room >= 0

    def size_of(self, value: Any) -> int:
        """The encoded size of a node's output: known when it is the output the last node
        completed with (the common case: a container's last child), else measured."""
        if value is self.out_value:
            return self.out_size
        try:
            return self.take(value, "output")[1]
        except PayloadTooLarge as exc:  # a measure, not a check: the caller bounds it
            return exc.size

    def value(self, ref: OutOfLine) -> Any:
        """The value `ref` stands for: the session's own, for the engine to read and hand on
        (user code gets a copy, as of any value). Read once per run, then kept."""
        held = self.held
        seq = ref.seq
        if seq not in held:
            held[seq] = self.ledger.held(seq)
        return held[seq]

    def view(self, ref: OutOfLine, where: Where) -> Any:
        """A read-only view of the large value `ref` stands for, for user code that reads it
        as `where` (`("ctx.input",)`, see read_only_views.py): built once per run, then kept."""
        key = (ref.seq, where)
        view = self.views.get(key)
        if view is None:
            view = self.views[key] = view_of(self.value(ref), self.copy, where)
        return view

    def remember(self, events: Sequence[Event]) -> None:
        """Keep the values kept out of line by `events` (written before this run began, in the
        same process): the run then never reads them back."""
        for event in events:
            data = event.data
            if data.get("out_of_line"):
                self.held[event.seq] = data.get("output", data.get("input"))

    def take_frame(self, path: tuple[Any, ...]) -> ContainerFrame | None:
        """The frame this container left when the run stopped, if it is being resumed.

        Taken before the container emits anything: the frame is then changed in place.
        """
        if self.restoring:
            return self.restoring.pop(path, None)
        return None
