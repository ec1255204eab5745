"""The only values an element's generator ever yields to the driver.

Every element of a flow runs as a generator; containers drive their children with
`yield from`, so whatever a step deep inside a loop yields reaches the driver directly.
The driver dispatches on `type(signal) is X`; anything else is a bug and is reported as such.
The engine never sleeps, awaits or starts a thread by itself: it yields `Await`, `Backoff`,
`Offload` and `Select`, and the driver (sync or async) does the waiting.
"""

from __future__ import annotations

from typing import Any

import attrs
from tarry.engine.state.records import PauseState


@attrs.frozen(slots=True)
class Checkpoint:
    """The run stops here, before an iteration or a child, because the driver said so.

    At every checkpoint the engine asks the driver (`Execution.stop`) whether to go on, and
    yields this only when the answer is to stop: a step that goes on costs a call, not a trip
    up and down the generator chain.
    """

    path: tuple[Any, ...]


@attrs.frozen(slots=True)
class Pause(PauseState):
    """A node wants to wait: the run stops and resumes here with a value.

    Its fields are those of the state's record of a wait, `PauseState`, declared there only:
    a pause has one shape from the node that asks for it to the store. A class of its own all
    the same, so that the driver tells a signal by its type (and a state's record yielded by
    mistake is reported as the bug it is)."""


class _NoMail:
    """The type of NO_MAIL."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NO_MAIL"


#: What `Execution.mailbox(key)` returns when no value was delivered for `key`: the Wait on it
#: pauses. (None cannot say so: None is a value one may deliver.)
NO_MAIL = _NoMail()


_new = object.__new__
#: (slot setter, default) of each field of a Pause after `kind`, `reason`, `path`, `payload`.
_set_kind, _set_reason, _set_path, _set_payload, *_REST = (
    PauseState.__dict__[field.name].__set__ for field in attrs.fields(PauseState)
)
_DEFAULTS = tuple(
    (set_field, field.default)
    for set_field, field in zip(_REST, attrs.fields(PauseState)[4:], strict=True)
)


def new_pause(kind: str, reason: str, path: tuple[Any, ...], payload: Any) -> Pause:
    """`Pause(kind, reason, path, payload)`, its other fields at their defaults: the pause a
    step's `ctx.interrupt` yields, its slots set directly (attrs' frozen `__init__` sets each
    through `object.__setattr__`, a few thousand instructions more per pause)."""
    pause = _new(Pause)
    _set_kind(pause, kind)
    _set_reason(pause, reason)
    _set_path(pause, path)
    _set_payload(pause, payload)
    for set_field, default in _DEFAULTS:
        set_field(pause, default)
    return pause


@attrs.frozen(slots=True)
class Await:
    """An async step produced an awaitable; the driver awaits it and sends the result back."""

    awaitable: Any
    timeout: float | None = None


@attrs.frozen(slots=True)
class Backoff:
    """A step waits `seconds` in place before its next attempt (a short retry back-off).

    The driver sleeps (`asyncio.sleep` in async runs) on the Runtime's clock, then sends None.
    """

    seconds: float


@attrs.frozen(slots=True)
class Offload:
    """A sync step of a concurrent container's lane: `fn(ctx)` is to start on the driver's
    thread pool. The driver answers at once with the call's handle (a
    `concurrent.futures.Future`), and the step waits for it with a `Select`, beside what the
    lane's siblings wait for."""

    fn: Any
    ctx: Any


@attrs.frozen(slots=True)
class Select:
    """A concurrent container (or a sync step of one of its lanes) waits for any of `items` to
    finish: `Await`s of async steps and handles of calls started by `Offload`. The driver
    awaits an `Await` (within its timeout) from the first Select that asks for it (a Select
    asks again, with the same objects, for what is still in flight), and answers with a list
    of `(position in items, succeeded, value or exception)`, one per item that finished (at
    least one). With no `Await` among them, a sync run waits for the threads in place.

    `paths[i]` is the path of the step that asked for `items[i]`: what it logs while it runs
    is that step's (drivers/logs.py)."""

    items: tuple[Any, ...]
    paths: tuple[tuple[Any, ...], ...]


@attrs.frozen(slots=True)
class PauseMany:
    """Every lane of a concurrent container that can still go on waits: the run pauses with
    `pauses`, the waits that began in this drive (earlier ones keep theirs and their tokens).
    Empty when the only waits left began in an earlier drive."""

    pauses: tuple[Pause, ...]
