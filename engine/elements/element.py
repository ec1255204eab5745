"""The base of every flow element, bodies (element lists), and the body runner."""

from __future__ import annotations

from collections.abc import Generator, Iterable
from time import monotonic
from typing import Any

import attrs
from tarry.engine.context import Scope
from tarry.engine.errors import InvalidFlow
from tarry.engine.execution import Execution
from tarry.engine.signals import Checkpoint
from tarry.engine.state.records import ContainerFrame, OutOfLine

Signal = Any  # Checkpoint | Pause | Await


@attrs.frozen(slots=True)
class Route:
    """What a Graph node returns to choose the next node: `routes[node][action]`."""

    action: str
    value: Any = None


class Detour:
    """What `Element._call` returns when the element cannot finish in place (its call raised,
    interrupted, or returned an awaitable): the attempt so far, for `_run` to take up."""

    __slots__ = ("ctx", "attempt", "result", "exc")

    def __init__(self, ctx: Any, attempt: int, result: Any, exc: BaseException | None) -> None:
        self.ctx = ctx
        self.attempt = attempt
        self.result = result
        self.exc = exc


def unwrap(result: Any) -> Any:
    """The output carried by a node's result (a Route carries it in `value`)."""
    return result.value if type(result) is Route else result


class Element:
    """A step or a container. Subclasses implement `_run` as a generator."""

    kind: str = "element"
    name: str
    #: Whether the labels of `_bodies()` are part of the paths of the elements in them (a
    #: Parallel's branch names are; a Branch's "then"/"otherwise" are not).
    labelled: bool = False
    #: Whether a body runs it with `_call` (a plain call) rather than as a generator: sync
    #: steps, the common case, whose generator is needed only when they wait or retry.
    direct: bool = False

    def _run(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope
    ) -> Generator[Signal, Any, Any]:
        """Run the element (a generator of the signals it waits on); its result."""
        raise NotImplementedError

    def _call(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope, fold: Any = True
    ) -> Any:
        """Run a `direct` element in place: its result, or a Detour for `_detour`. `fold`:
        where its completion records its output (see `Step._call`; `run_body` hands it on)."""
        raise NotImplementedError

    def _detour(
        self, ex: Execution, path: tuple[Any, ...], prev: Any, scope: Scope, detour: Detour
    ) -> Generator[Signal, Any, Any]:
        """Go on, as `_run` would, with what `_call` began and could not finish."""
        raise NotImplementedError

    def _bodies(self) -> Iterable[tuple[str, tuple[Element, ...]]]:
        """Labelled child bodies, for the fingerprint and path lookup."""
        return ()

    def _describe(self) -> tuple[Any, ...]:
        return (
            self.kind,
            self.name,
            tuple((label, tuple(e._describe() for e in body)) for label, body in self._bodies()),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name:
        msg = f"{what} name must be a non-empty str (got {name!r})"
        raise InvalidFlow(msg)
    return name


def resume_prev(body: tuple[Element, ...], child: int, outputs: dict[str, Any], first: Any) -> Any:
    """`ctx.prev` for the element at `child` when a body is resumed there."""
    if child == 0:
        return first
    return outputs.get(body[child - 1].name)


def resume_body(
    ex: Execution,
    body: tuple[Element, ...],
    base: tuple[Any, ...],
    frame: ContainerFrame,
    first: Any,
    scope: Scope,
) -> Generator[Signal, Any, Any]:
    """Run `body` from where `frame` left it when the run stopped: the frame of a sequential
    container's iteration in progress or a concurrent container's lane, which both hold the
    child in progress and the outputs of the children before it (`first`: the body's input)."""
    child = frame.child
    first = resume_prev(body, child, frame.child_outputs, first)
    return run_body(ex, body, base, child, first, scope)


#: How many bases `body_paths` keeps the paths of, per body (a nested Flow under a loop is
#: entered under a new base per iteration: those past the first few are made as they run).
KEPT_BASES = 8


def body_paths(
    kept: dict[tuple[Any, ...], tuple[tuple[Any, ...], ...]],
    body: tuple[Element, ...],
    base: tuple[Any, ...],
) -> tuple[tuple[Any, ...], ...] | None:
    """The paths of `body`'s elements under `base`, made once and kept in `kept` (the body
    owner's) for the next run under the same base; None past KEPT_BASES bases."""
    paths = kept.get(base)
    if paths is None and len(kept) < KEPT_BASES:
        paths = kept[base] = tuple(base + (element.name,) for element in body)
    return paths


def run_body(
    ex: Execution,
    body: tuple[Element, ...],
    base: tuple[Any, ...],
    start: int,
    prev: Any,
    scope: Scope,
    paths: tuple[tuple[Any, ...], ...] | None = None,
    fold: Any = True,
) -> Generator[Signal, Any, Any]:
    """Run `body[start:]` in order; return the last element's result (or `prev` if none ran).
    `paths`: the elements' paths under `base`, when the caller keeps them (see `body_paths`).
    `fold`: the fields of the frame the body's outputs are recorded in (the innermost while
    a step of the body runs: a nested Flow's), for the steps to record their output in
    without looking for it (see `Step._call`); True: let them look."""
    result = prev
    for index in range(start, len(body)):
        element = body[index]
        path = base + (element.name,) if paths is None else paths[index]
        # ex.checkpoint(path), inlined: a call less per element.
        if (ex.watch or len(ex.rows) >= ex.flush_at or monotonic() >= ex.due) and ex.stop(path):
            yield Checkpoint(path)
        if element.direct and not ex.pooled:
            # A sync step, called in place; a generator only if it must wait or retry.
            result = element._call(ex, path, prev, scope, fold)
            if type(result) is Detour:
                result = yield from element._detour(ex, path, prev, scope, result)
        else:
            result = yield from element._run(ex, path, prev, scope)
        prev = result.value if type(result) is Route else result
    if type(result) is OutOfLine:  # nothing ran: `prev` is the result, read it (see flow.py)
        return ex.value(result)
    return result
