"""What one session may hold, in bytes encoded: a value, and its whole state.

The state's size is not measured on every step: the Execution keeps `room`, the bytes the state
may still grow by, and takes from it the size of every value a node adds (known from the check
that encodes the value anyway). Values the state drops are not given back, so `room` only
errs low; when a value does not fit in it, the state is measured exactly (encoded once) and
`room` starts afresh from that. A step then costs a subtraction, and a measurement happens at
most once per `state` bytes of growth while the state is small against its bound.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

UNLIMITED = sys.maxsize


def _nothing(state: Any) -> int:
    return 0


class Bounds:
    """`value`: the most bytes one value may take (a container's gathered output too).
    `state`: the most bytes the session's snapshot may take. `measure(state)`: that snapshot's
    exact size (the driver owns the codec). `held`: at most how many bytes the state a run
    starts from takes, or None when unknown (it is then measured when first needed)."""

    __slots__ = ("value", "state", "measure", "held")

    def __init__(
        self,
        value: int = UNLIMITED,
        state: int = UNLIMITED,
        measure: Callable[[Any], int] = _nothing,
        held: int | None = 0,
    ) -> None:
        self.value = value
        self.state = state
        self.measure = measure
        self.held = held


UNBOUNDED = Bounds()

#: The flow's input and a top-level element's output that take more than this many bytes
#: encoded are kept out of the state (`state.OutOfLine`): stored once, with the event that brings them
#: in, instead of in every snapshot written after it. Smaller ones stay in line, where a resume
#: reads them with the snapshot at no extra cost. A reference costs MARKER_BYTES in the state.
INLINE = 256
MARKER_BYTES = 16

#: Bytes a container's frame takes in the state besides its outputs (the field names and
#: counters), and an output's entry besides its value (its name and the map's overhead).
FRAME_BYTES = 192
ENTRY_BYTES = 8


def frame_bytes(path: tuple[Any, ...]) -> int:
    """What a container's frame at `path` adds to the state, its outputs aside (generous)."""
    # A loop, not sum() over a generator: a container entered per item (a nested Flow in a
    # ForEach) measures its path on every item.
    n = FRAME_BYTES
    for p in path:
        n += len(p) + ENTRY_BYTES if type(p) is str else 9
    return n


def list_header(n: int) -> int:
    """Bytes msgpack puts before a list of `n` items."""
    return 1 if n < 16 else 3 if n < 65536 else 5
