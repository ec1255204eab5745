"""Read-only views of large values: what user code reads of a large value the session holds
(`ctx.input`, `ctx.item`, `ctx.prev`, `ctx.outputs[...]`) instead of a copy of it.

A value read from `ctx` must not let a step change what later steps, a resume or a recovery see
(values.py). A small value is handed out as a private copy, as always; a copy of a large one
costs as much as the value on every read, so a per-item callable reading a 10,000-row input
made a run O(rows × items). A large value is handed out as a view instead: it reads like the
value and refuses every change with `ReadOnlyView`, so it never needs copying.

A view of a dict is a `dict`, of a list a `list` (subclasses), so `isinstance`, `==`, `len`,
`in`, `repr`, `json.dumps` and the C readers of other libraries see the value: each holds a
shallow copy of its container's top level (pointers, copied in C once, when the view is
built), which C code reads directly. What Python code reads through it — an item, a value,
iteration — is wrapped on the way out: a nested dict or list as a view of its own (built when
first read, then kept by its parent), a tuple as a tuple of views, a set as a frozenset, any
other changeable value (a registered record) as a fresh copy; values that cannot change are
handed out as they are. A shallow copy (`dict(view)`, `list(view)`, `view.copy()`,
`copy.copy(view)`) is a plain dict or list of such read-only items; `copy.deepcopy(view)` is a
plain copy of the whole value, free to change. The codec stores a view as the value it shows.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, ValuesView
from typing import Any, NoReturn

from tarry.engine.bounds import INLINE
from tarry.engine.errors import ReadOnlyView
from tarry.engine.values import IMMUTABLE, immutable

#: A value over this many bytes encoded is large: user code reads it through a view. The line
#: the engine already draws between a value the state holds and one it keeps out of line
#: (bounds.INLINE): a flow input or top-level output that large is stored once, out of line,
#: and handed out as a view, with no measuring. It is also where copying stops being cheap: a
#: copy of a value this large costs more than a step's own overhead.
LARGE = INLINE

Where = tuple[Any, ...]


def view_of(value: Any, copy: Callable[[Any], Any], where: Where) -> Any:
    """A read-only view of `value`, a value the session holds. `copy` makes a private copy of
    a value (the engine's `Execution.copy`), for parts that cannot be viewed; `where` names the
    value in errors: the name user code read it by (`("ctx.input",)`), then keys or indexes."""
    return _wrap(value, copy, where)[0]


def underlying(view: DictView | ListView) -> Any:
    """The value a view shows, as the session holds it: for the codec, never for user code."""
    return view._value


def _wrap(value: Any, copy: Callable[[Any], Any], where: Where) -> tuple[Any, bool]:
    """What a view hands out for `value`, and whether its parent may keep it (views and
    values that cannot change may; a fresh copy may not: whoever reads it may change it)."""
    kind = type(value)
    if kind in IMMUTABLE:
        return value, True
    if kind is dict:
        return DictView(value, copy, where), True
    if kind is list:
        return ListView(value, copy, where), True
    if kind is tuple:
        if immutable(value):
            return value, True
        return tuple(_wrap(x, copy, where + (i,))[0] for i, x in enumerate(value)), True
    if kind is set or kind is frozenset:
        return (value if kind is frozenset else frozenset(value)), True
    if kind is DictView or kind is ListView:
        return value, True
    return copy(value), False


def _name(where: Where) -> str:
    return str(where[0]) + "".join(f"[{key!r}]" for key in where[1:])


def _refuse(method: str) -> Callable[..., NoReturn]:
    """A method of dict or list that changes it, refusing to."""
    operation = _OPERATIONS.get(method, f"{method}()")

    def refuse(self: DictView | ListView, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyView(_name(self._where), operation, LARGE)

    refuse.__name__ = method
    return refuse


_OPERATIONS = {
    "__setitem__": "item assignment",
    "__delitem__": "item deletion",
    "__ior__": "|=",
    "__iadd__": "+=",
    "__imul__": "*=",
}


class DictView(dict):  # type: ignore[type-arg]
    """A read-only view of a dict (see the module's docstring)."""

    __slots__ = ("_value", "_copy", "_where", "_views")

    def __init__(self, value: dict[Any, Any], copy: Callable[[Any], Any], where: Where) -> None:
        dict.__init__(self, value)  # the top level, for C readers: copied in C, once
        self._value = value
        self._copy = copy
        self._where = where
        #: Views of the nested values read so far, by key: each is built once.
        self._views: dict[Any, Any] | None = None

    def _child(self, key: Any, value: Any) -> Any:
        views = self._views
        if views is None:
            views = self._views = {}
        else:
            view = views.get(key)
            if view is not None:
                return view
        view, keep = _wrap(value, self._copy, self._where + (key,))
        if keep:
            views[key] = view
        return view

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        return value if type(value) in IMMUTABLE else self._child(key, value)

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            value = dict.__getitem__(self, key)
        except KeyError:
            return default
        return value if type(value) in IMMUTABLE else self._child(key, value)

    def __iter__(self) -> Iterator[Any]:
        # The keys, as a dict's. Defined here so that dict(view), {**view} and f(**view) read
        # the values through __getitem__ (CPython copies a dict whose __iter__ is its own
        # straight from its table).
        return dict.__iter__(self)

    def values(self) -> ValuesView[Any]:  # type: ignore[override]
        return ValuesView(self)

    def items(self) -> ItemsView[Any, Any]:  # type: ignore[override]
        return ItemsView(self)

    def copy(self) -> dict[Any, Any]:
        """A plain dict of this view's items (nested ones stay read-only views)."""
        return {key: self[key] for key in dict.__iter__(self)}

    def __copy__(self) -> dict[Any, Any]:
        return self.copy()

    def __deepcopy__(self, memo: Any) -> Any:
        """A plain copy of the whole value, free to change."""
        return self._copy(self._value)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (dict, (self._value,))  # pickled as the plain value

    def __or__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        merged = self.copy()
        merged.update(other)
        return merged

    def __ror__(self, other: Any) -> Any:
        if not isinstance(other, dict):
            return NotImplemented
        merged = dict(other)
        merged.update(self)
        return merged

    __setitem__ = _refuse("__setitem__")
    __delitem__ = _refuse("__delitem__")
    __ior__ = _refuse("__ior__")
    clear = _refuse("clear")
    pop = _refuse("pop")
    popitem = _refuse("popitem")
    setdefault = _refuse("setdefault")
    update = _refuse("update")


class ListView(list):  # type: ignore[type-arg]
    """A read-only view of a list (see the module's docstring)."""

    __slots__ = ("_value", "_copy", "_where", "_views")

    def __init__(self, value: list[Any], copy: Callable[[Any], Any], where: Where) -> None:
        list.__init__(self, value)  # the top level, for C readers: copied in C, once
        self._value = value
        self._copy = copy
        self._where = where
        #: Views of the nested values read so far, by index: each is built once.
        self._views: dict[int, Any] | None = None

    def _child(self, index: int, value: Any) -> Any:
        views = self._views
        if views is None:
            views = self._views = {}
        else:
            view = views.get(index)
            if view is not None:
                return view
        view, keep = _wrap(value, self._copy, self._where + (index,))
        if keep:
            views[index] = view
        return view

    def __getitem__(self, index: Any) -> Any:
        value = list.__getitem__(self, index)
        if type(value) in IMMUTABLE:
            return value
        if type(index) is slice:  # a plain list (a shallow copy), of read-only items
            return [self[i] for i in range(*index.indices(len(self)))]
        index = index.__index__()
        return self._child(index if index >= 0 else index + len(self), value)

    def __iter__(self) -> Iterator[Any]:
        child = self._child
        for index, value in enumerate(list.__iter__(self)):
            yield value if type(value) in IMMUTABLE else child(index, value)

    def __reversed__(self) -> Iterator[Any]:
        for index in range(len(self) - 1, -1, -1):
            yield self[index]

    def copy(self) -> list[Any]:
        """A plain list of this view's items (nested ones stay read-only views)."""
        return list(self)

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: Any) -> Any:
        """A plain copy of the whole value, free to change."""
        return self._copy(self._value)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (list, (self._value,))  # pickled as the plain value

    # list's own would copy the top level in C and hand out the nested values themselves.
    def __add__(self, other: Any) -> Any:
        if not isinstance(other, list):
            return NotImplemented
        return list(self) + other

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, list):
            return NotImplemented
        return other + list(self)

    def __mul__(self, n: Any) -> Any:
        return list(self) * n

    __rmul__ = __mul__

    __setitem__ = _refuse("__setitem__")
    __delitem__ = _refuse("__delitem__")
    __iadd__ = _refuse("__iadd__")
    __imul__ = _refuse("__imul__")
    append = _refuse("append")
    extend = _refuse("extend")
    insert = _refuse("insert")
    pop = _refuse("pop")
    remove = _refuse("remove")
    clear = _refuse("clear")
    sort = _refuse("sort")
    reverse = _refuse("reverse")
