"""Resume adapters: code that decides, for a waiting request, whether it can go on and with what.

An adapter is a callable, asked once per waiting request (`adapter(request)` -> a value or
`NOT_READY`), or an object with `many(requests) -> {token or key: value}`, asked once per
`poll()` with every waiting request of its pause kind (see polling.py).
"""

from __future__ import annotations

from typing import Any

import attrs


class _NotReady:
    """The adapter's answer "not yet": the session stays paused."""

    _instance: _NotReady | None = None

    def __new__(cls) -> _NotReady:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "tarry.NOT_READY"

    def __bool__(self) -> bool:
        return False


NOT_READY = _NotReady()


@attrs.frozen
class ResumeRequest:
    """What an adapter is asked about: one wait of a paused session. The token is left out of
    the repr, so an adapter that logs its request (or fails with it in a message) does not
    leak it. `key`: the wait's delivery key (`Wait(key=...)`), or None."""

    token: str = attrs.field(repr=False)
    session_id: str
    kind: str
    reason: str
    payload: Any
    path: tuple[Any, ...]
    key: str | None = None


def is_bulk(adapter: Any) -> bool:
    """Whether `adapter` answers in bulk: it has a callable `many`."""
    return callable(getattr(adapter, "many", None))
