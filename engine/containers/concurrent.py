"""Many iterations in flight: the multiplexer behind `ForEach(concurrency=N)` and `Parallel`.

A concurrent container stays one generator. It holds one child generator per lane (an
iteration in flight) and steps each until it yields; what the lanes need is gathered into one
signal for the driver, and each answer goes back to the lane that asked:

- an async step's awaitable (`Await`) and a sync step's call become one `Select` of
  everything in flight; the driver answers with what finished, and the lanes it belongs to go
  on. A sync step of a lane starts its call on the driver's thread pool at once (`Offload`,
  answered with the call's handle, a container having at most N calls in flight) and waits for
  it with a `Select` of its own, which the container merges into its own. The container starts
  no thread and awaits nothing itself;
- a lane that pauses waits; its siblings go on. When nothing can go on, the container yields
  `PauseMany` with the waits that began here (each gets its own token);
- a lane that stops at a checkpoint (an abort) stays where it is; no new lane starts, the
  others finish their step; then the container stops at its own checkpoint;
- a lane that fails: no new lane starts, the others finish the step they are in (every
  checkpoint then stops them), and the failure goes up.

The driver stays one pump: only the container knows that several children exist. A nested
concurrent container's `Select` or `PauseMany` reaches the outer one through its lane and is
merged into the outer one's.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any

from tarry.engine.errors import InvalidFlow
from tarry.engine.execution import Execution
from tarry.engine.failure import NodeFailure
from tarry.engine.observed import last_path
from tarry.engine.signals import Await, Backoff, Checkpoint, Pause, PauseMany, Select
from tarry.engine.state.records import ContainerFrame

Signal = Any
Lane = tuple[Any, Generator[Signal, Any, Any]]

#: `start()` says so when a checkpoint before a new lane stops the run (an abort).
STOP = object()


def _stop_all(path: tuple[Any, ...]) -> bool:
    return True


def check_concurrency(value: Any, owner: str) -> int | None:
    """`concurrency` as given: a positive int, or None for no bound; else InvalidFlow."""
    if value is None or (type(value) is int and value >= 1):
        return value
    msg = f"{owner}: concurrency must be an int >= 1 or None (got {value!r})"
    raise InvalidFlow(msg)


def lanes_of(frame: ContainerFrame) -> tuple[list[tuple[Any, ContainerFrame]], int]:
    """The lanes a resumed concurrent container's `frame` holds: those that go on, as (name,
    lane frame) for `resume_body` to take up, and how many still wait (those in `lanes` with
    a pause, and those parked in the store)."""
    going: list[tuple[Any, ContainerFrame]] = []
    waiting = frame.parked
    for name, lane in (frame.lanes or {}).items():
        if lane.pause is None:
            going.append((name, lane))
        else:
            waiting += 1
    return going, waiting


def multiplex(
    ex: Execution,
    path: tuple[Any, ...],
    concurrency: int | None,
    start: Callable[[], Lane | object | None],
    done: Callable[[Any, Any], None],
    restored: list[Lane],
    waiting: int,
) -> Generator[Signal, Any, None]:
    """Run lanes until every one has completed; `start()` makes the next new lane (None when
    there are no more, STOP when the run stops before it), `done(name, output)` records one
    that completed. `restored`: the lanes of a resumed container that go on; `waiting`: how
    many of its lanes still wait (from an earlier drive). Returns when all are done."""
    gens: dict[Any, Generator[Signal, Any, Any]] = {}
    ready: deque[tuple[Any, Any, BaseException | None]] = deque()
    for name, gen in restored:
        gens[name] = gen
        ready.append((name, None, None))
    old = waiting
    new: dict[Any, tuple[Pause, ...]] = {}
    stopped: set[Any] = set()
    # What each lane waits for: (True for a step's own Await, answered with its value; False
    # for a Select, answered with the list of what finished), the requests and their paths.
    pending: dict[Any, tuple[bool, tuple[Any, ...], tuple[Any, ...]]] = {}
    failure: NodeFailure | None = None
    stopping = exhausted = False
    stop = ex.stop
    ex.lanes += 1
    try:
        while True:
            while not (exhausted or stopping or failure) and (
                concurrency is None or len(gens) + old + len(new) + len(stopped) < concurrency
            ):
                lane = start()
                if lane is None:
                    exhausted = True
                elif lane is STOP:
                    stopping = True
                else:
                    name, gen = lane  # type: ignore[misc]
                    gens[name] = gen
                    ready.append((name, None, None))
            if ready:
                name, value, exc = ready.popleft()
                gen = gens[name]
                outer, ex.pooled = ex.pooled, True
                try:
                    signal = gen.send(value) if exc is None else gen.throw(exc)
                except StopIteration as finished:
                    del gens[name]
                    try:
                        done(name, finished.value)
                    except NodeFailure as exc_:
                        failure = failure or exc_
                        ex.stop = _stop_all
                    continue
                except NodeFailure as exc_:
                    del gens[name]
                    failure = failure or exc_
                    ex.stop = _stop_all  # the others stop at their next checkpoint
                    continue
                finally:
                    ex.pooled = outer
                kind = type(signal)
                if kind is Await:
                    # The step that asked is the lane's latest event's: nothing ran since.
                    pending[name] = (True, (signal,), (last_path(ex),))
                elif kind is Select:
                    pending[name] = (False, signal.items, signal.paths)
                elif kind is Pause:
                    del gens[name]
                    new[name] = (signal,)
                elif kind is PauseMany:
                    del gens[name]
                    new[name] = signal.pauses
                elif kind is Checkpoint:
                    del gens[name]
                    stopped.add(name)
                elif kind is Backoff:  # a short back-off: waited in place, for all lanes
                    yield signal
                    ready.append((name, None, None))
                else:  # an Offload, which the driver answers at once with the call's handle
                    ready.append((name, (yield signal), None))
                continue
            if pending:
                items: list[Any] = []
                paths: list[Any] = []
                owners: list[tuple[Any, int]] = []
                for name, (_, asked, where) in pending.items():
                    for i, item in enumerate(asked):
                        items.append(item)
                        owners.append((name, i))
                    paths.extend(where)
                answers = yield Select(tuple(items), tuple(paths))
                got: dict[Any, list[tuple[int, bool, Any]]] = {}
                for position, ok, value in answers:
                    name, i = owners[position]
                    got.setdefault(name, []).append((i, ok, value))
                for name, mine in got.items():
                    one, _, _ = pending.pop(name)
                    if one:
                        _, ok, value = mine[0]
                        ready.append((name, value, None) if ok else (name, None, value))
                    else:  # a nested container: it asks again for what is left
                        ready.append((name, mine, None))
                continue
            break
    finally:
        ex.lanes -= 1
        ex.stop = stop
    if failure is not None:
        raise failure
    if stopping or stopped:
        # In-flight lanes finished their step; the run stops here, and a resume goes on with
        # every lane that does not wait.
        yield Checkpoint(path)
        msg = "a stopped container was sent a value; resume builds a new run instead"
        raise RuntimeError(msg)
    if new or old:
        yield PauseMany(tuple(p for pauses in new.values() for p in pauses))
        msg = "a paused container was sent a value; resume builds a new run instead"
        raise RuntimeError(msg)
