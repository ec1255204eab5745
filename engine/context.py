"""`ctx`: what every step (and every `when`/`until`/items callable) is handed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from tarry.engine.errors import PayloadTooLarge
from tarry.engine.execution import Execution
from tarry.engine.read_only_views import LARGE, DictView, ListView, Where, view_of
from tarry.engine.short_hash import short_hash
from tarry.engine.state.lanes import chain_of
from tarry.engine.state.records import OutOfLine, SessionState
from tarry.engine.values import IMMUTABLE, immutable


class Scope:
    """The innermost ForEach item/index and Loop/ForEach iteration around an element.

    Read-only by convention. A plain class rather than a frozen attrs record: one is made per
    iteration, it never reaches a snapshot, and frozen slots cost a call per field to set.
    `view`: the read-only view of a large item, once a step or callable of the iteration read
    `ctx.item` (see `Context.item`).
    """

    __slots__ = ("item", "index", "iteration", "view")

    def __init__(self, item: Any = None, index: int | None = None, iteration: int | None = None):
        self.item = item
        self.index = index
        self.iteration = iteration
        self.view: Any = None

    def __repr__(self) -> str:
        return f"Scope(item={self.item!r}, index={self.index!r}, iteration={self.iteration!r})"


ROOT = Scope()


class Interrupted(BaseException):  # noqa: N818 - a control signal, not an error
    """`ctx.interrupt` without a value yet: unwinds the step so its wrapper can pause.

    A BaseException so that a step's own `except Exception` does not swallow it.
    """

    def __init__(self, kind: str, reason: str, payload: Any) -> None:
        self.kind = kind
        self.reason = reason
        self.payload = payload
        super().__init__(reason)


class Outputs(Mapping[str, Any]):
    """`ctx.outputs`: the latest output of a completed element by name, innermost scope first."""

    __slots__ = ("_ex", "_path")

    def __init__(self, ex: Execution, path: tuple[Any, ...] = ()) -> None:
        self._ex = ex
        #: Where the reader stands: inside a concurrent container, the outputs of its own
        #: lane (its iteration's earlier elements) come first, never a sibling lane's.
        self._path = path

    def _scopes(self) -> list[Mapping[str, Any]]:
        """The output dicts to look names up in, innermost first."""
        state = self._ex.state
        if not self._ex.lanes:
            scopes: list[Mapping[str, Any]] = [
                f.child_outputs for f in reversed(state.container_stack)
            ]
            scopes.append(state.outputs)
            return scopes
        scopes = []
        for scope in chain_of(state, self._path):
            if isinstance(scope, SessionState):  # else a lane (mypy narrows isinstance only)
                stack, own = scope.container_stack, scope.outputs
            else:
                stack, own = scope.stack, scope.child_outputs
            inner = [f.child_outputs for f in stack if f.lanes is None]
            inner.reverse()
            scopes[:0] = inner + [own]  # outer scopes after inner ones
        return scopes

    def __getitem__(self, name: str) -> Any:
        """The output for user code: a copy when small, a read-only view when large (see
        `hand_out`); changing a copy changes nothing else, a view refuses to change."""
        value = self._stored(name)
        kind = type(value)
        if kind in IMMUTABLE:
            return value
        if kind is OutOfLine:  # a large top-level output: a view, built once per run
            return self._ex.view(value, ("ctx.outputs", name))
        return hand_out(self._ex, value, ("ctx.outputs", name))[0]

    def __contains__(self, name: object) -> bool:
        try:
            self._stored(name)  # type: ignore[arg-type]
        except KeyError:
            return False
        return True

    def lookup(self, name: str) -> Any:
        """The output itself, as the session holds it: for the engine, never for user code."""
        value = self._stored(name)
        return value if type(value) is not OutOfLine else self._ex.value(value)

    def _stored(self, name: str) -> Any:
        """The output as the state holds it: an OutOfLine for one kept out of line."""
        state = self._ex.state
        if self._ex.lanes:
            for outputs in self._scopes():
                if name in outputs:
                    return outputs[name]
            raise KeyError(name)
        for frame in reversed(state.container_stack):
            if name in frame.child_outputs:
                return frame.child_outputs[name]
        return state.outputs[name]

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        for scope in self._scopes():
            for name in scope:
                if name not in seen:
                    seen.add(name)
                    yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"Outputs({dict(self)!r})"


_DELETED = object()


class SharedState(MutableMapping[str, Any]):
    """`ctx.state`: the session's shared dict. Top-level assignments are recorded when the step
    completes; a step that fails or pauses leaves the session's state as it was.

    Assigning a key is the one way to change it: reading a key gives a copy of its value (see
    values.py), so changing that in place changes nothing else. A value this step assigned is
    read back as it is, and recorded as it is when the step completes."""

    __slots__ = ("_base", "_changes", "_copy")

    def __init__(self, base: Mapping[str, Any], copy: Any) -> None:
        self._base = base
        self._changes: dict[str, Any] = {}
        self._copy = copy

    def __getitem__(self, key: str) -> Any:
        if key in self._changes:
            value = self._changes[key]
            if value is _DELETED:
                raise KeyError(key)
            return value
        value = self._base[key]
        return value if type(value) in IMMUTABLE else self._copy(value)

    def __contains__(self, key: object) -> bool:
        if key in self._changes:
            return self._changes[key] is not _DELETED
        return key in self._base

    def __setitem__(self, key: str, value: Any) -> None:
        if not isinstance(key, str):
            msg = f"ctx.state keys must be str (got {key!r} that is a {type(key).__name__})"
            raise TypeError(msg)
        self._changes[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._changes[key] = _DELETED

    def __iter__(self) -> Iterator[str]:
        for key in self._base:
            if self._changes.get(key, None) is not _DELETED:
                yield key
        for key, value in self._changes.items():
            if key not in self._base and value is not _DELETED:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"SharedState({dict(self)!r})"

    def effects(self, data: dict[str, Any]) -> None:
        """Add this step's changes to its `node.completed` data."""
        if not self._changes:
            return
        sets = {k: v for k, v in self._changes.items() if v is not _DELETED}
        dels = [k for k, v in self._changes.items() if v is _DELETED]
        if sets:
            data["state"] = sets
        if dels:
            data["state_deleted"] = dels


def hand_out(ex: Execution, value: Any, where: Where) -> tuple[Any, bool]:
    """What user code reads of `value`, a changeable value the session holds, and whether that
    is a view: a private copy of a small value (values.py), a read-only view of a large one,
    over `LARGE` bytes encoded (read_only_views.py). The size of the output the last node
    completed with is known; any other value is measured by the codec's `take`, which packs it
    as a copy would and then is the copy of a small one: no read costs more than it did."""
    if value is ex.out_value:
        if ex.out_size <= LARGE:
            return ex.copy(value), False
    else:
        kind = type(value)
        if (kind is tuple or kind is frozenset) and immutable(value):
            return value, False
        try:
            own, size = ex.take(value, where[0])
        except PayloadTooLarge:  # larger than one value may be (a limit lowered since)
            pass
        else:
            if size <= LARGE:
                return own, False
    return view_of(value, ex.copy, where), True


def idempotency_key(session_id: str, path: tuple[Any, ...]) -> str:
    raw = session_id + "\x1f" + "\x1f".join(map(str, path))
    return short_hash(raw)


class Context:
    """The `ctx` argument of a step. See the API reference for every attribute.

    `input`, `item`, `prev` and `outputs[name]` are values a step may only read: a large one
    (over 256 bytes encoded) is a read-only view, not copied per read (a dict view is a dict,
    a list view a list; a change raises a TypeError saying to copy it), a small one a private
    copy on each read. `state[key]` is always a copy: change it by assigning the key. See
    read_only_views.py.
    """

    # `_began`: set (on the pool thread) when a concurrent lane's sync step starts running,
    # not before: read with getattr (see executors.py `timed`) so no other step pays for it.
    __slots__ = (
        "_ex",
        "path",
        "prev",
        "_scope",
        "attempt",
        "_state",
        "_metrics",
        "_interrupts",
        "_began",
    )

    def __init__(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope, attempt: int = 1
    ) -> None:
        # Step._call sets these same fields itself (a call less per step): keep them in step.
        self._ex = ex
        self.path = path
        self.prev = prev
        self._scope = scope
        self.attempt = attempt
        self._state: SharedState | None = None
        self._metrics: dict[str, float] | None = None
        self._interrupts = 0

    # What a step reads of the session cannot change what later steps, a resume or a recovery
    # see: a small value is a private copy (values.py); a large one, over `LARGE` bytes
    # encoded, a read-only view that is not copied per read (read_only_views.py). Not
    # `ctx.state`: a step changes it by reading, changing and assigning, so it reads copies.
    # Values that cannot change are handed on as they are, after one type check.

    @property
    def input(self) -> Any:
        """The flow's input: a read-only view when large (over 256 bytes encoded, the inputs
        the session keeps out of line: built once per run), else a private copy."""
        value = self._ex.state.input
        if type(value) in IMMUTABLE:
            return value
        if type(value) is OutOfLine:
            return self._ex.view(value, _INPUT)
        return self._ex.copy(value)

    @property
    def item(self) -> Any:
        """The innermost ForEach's item: a read-only view when large (over 256 bytes encoded:
        measured at the iteration's first read, then built once), else a private copy."""
        scope = self._scope
        value = scope.item
        if type(value) in IMMUTABLE:
            return value
        view = scope.view
        if view is not None:
            return view
        value, large = hand_out(self._ex, value, _ITEM)
        if large:
            scope.view = value
        return value

    @property
    def index(self) -> int | None:
        return self._scope.index

    @property
    def iteration(self) -> int | None:
        return self._scope.iteration

    @property
    def session_id(self) -> str:
        return self._ex.session_id

    @property
    def ending(self) -> str | None:
        """In a flow's `cleanup=` body: how its body ended, "completed", "failed",
        "cancelled" or "deadline_exceeded". None anywhere else."""
        return self._ex.state.ending

    @property
    def outputs(self) -> Outputs:
        """The latest output of a completed element by name, innermost scope first: a
        read-only view when large (over 256 bytes encoded), else a private copy."""
        return Outputs(self._ex, self.path)

    @property
    def state(self) -> SharedState:
        if self._state is None:
            self._state = SharedState(self._ex.state.shared, self._ex.copy)
        return self._state

    @property
    def idempotency_key(self) -> str:
        """Stable for this step position across retries, re-runs and processes."""
        return idempotency_key(self._ex.session_id, self.path)

    def metric(self, name: str, value: float) -> None:
        """Add `value` to the metric `name`, summed per node and per run."""
        if not isinstance(name, str) or not name:
            msg = f"ctx.metric name must be a non-empty str (got {name!r})"
            raise TypeError(msg)
        if isinstance(value, bool) or not isinstance(value, int | float):
            msg = f"ctx.metric({name!r}, ...) takes a number (got {value!r})"
            raise TypeError(msg)
        if self._metrics is None:
            self._metrics = {}
        self._metrics[name] = self._metrics.get(name, 0) + value

    def interrupt(self, reason: str = "", *, kind: str = "human", payload: Any = None) -> Any:
        """Pause the run here; on resume the step runs again and this returns the value.

        Several interrupts in one step are matched to resume values by order.
        """
        number = self._interrupts
        self._interrupts += 1
        values = self._ex.scope(self.path).resume_values
        if number < len(values):
            value = values[number]
            return value if type(value) in IMMUTABLE else self._ex.copy(value)
        if kind not in ("human", "external", "system"):
            msg = f"interrupt kind must be 'human', 'external' or 'system' (got {kind!r})"
            raise ValueError(msg)
        raise Interrupted(kind, reason, payload)

    def effects(self, data: dict[str, Any]) -> dict[str, Any]:
        """Add the state changes and metrics of this step to its completion data."""
        if self._state is not None:
            self._state.effects(data)
        if self._metrics:
            data["metrics"] = self._metrics
        return data

    def __repr__(self) -> str:
        return f"<Context {'/'.join(map(str, self.path))} attempt={self.attempt}>"


class CopyingContext(Context):
    """The `ctx` of an element whose `prev` may change: reading `ctx.prev` gives a copy (a
    read-only view when large, see `hand_out`). A class of its own so that a `prev` that cannot
    change (the common case) stays a plain attribute, read at no cost. Whoever makes a `ctx`
    picks the class (`context_for`)."""

    __slots__ = ()

    @property
    def prev(self) -> Any:
        value = _PREV.__get__(self)
        ex = self._ex
        if value is ex.out_value and ex.out_size <= LARGE:  # the common case, `hand_out` inlined
            return ex.copy(value)
        kind = type(value)
        if kind is DictView or kind is ListView:  # read before by this step: see below
            return value
        if kind is OutOfLine:  # a large top-level output, handed on unread (flow.py)
            view = ex.view(value, _PREV_WHERE)
        elif value is self._scope.item:  # a ForEach body's first element: its item
            return self.item
        else:
            view, large = hand_out(ex, value, _PREV_WHERE)
            if not large:
                return view
        _PREV.__set__(self, view)  # the step's later reads: the view, at no cost
        return view

    @prev.setter
    def prev(self, value: Any) -> None:
        _PREV.__set__(self, value)


#: The slot that holds `prev`, under CopyingContext's property.
_PREV = Context.__dict__["prev"]

#: How views name what they show, in errors (read_only_views.py).
_INPUT: Where = ("ctx.input",)
_ITEM: Where = ("ctx.item",)
_PREV_WHERE: Where = ("ctx.prev",)


def context_for(prev: Any) -> type[Context]:
    """The class of the `ctx` to build for an element handed `prev` (see `CopyingContext`)."""
    return Context if type(prev) in IMMUTABLE else CopyingContext
