"""Resume adapters: code that decides, for a waiting request, whether it can go on and with what.

An adapter is a callable, asked once per waiting request (`adapter(request)` -> a value or
`NOT_READY`), or an object with `many(requests) -> {token or key: value}`, asked once per
`poll()` with every waiting request of its pause kind (see polling.py).
"""

from __future__ import annotations

from collections.abc import Callable
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


#: The slot ResumeRequest keeps its payload in (a `_Decoding` request reads it lazily).
_PAYLOAD = ResumeRequest.__dict__["payload"]
_SET = {name: ResumeRequest.__dict__[name].__set__ for name in attrs.fields_dict(ResumeRequest)}


class _Decoding(ResumeRequest):
    """A ResumeRequest whose payload is decoded from the wait's bytes when first read: a poll
    asks about every waiting request, and a bulk adapter that looks only at keys or tokens then
    decodes nothing. It compares, hashes and prints as a ResumeRequest with the same fields."""

    __slots__ = ("_blob", "_decode")
    _blob: bytes
    _decode: Callable[[bytes, ResumeRequest], Any]

    @property
    def payload(self) -> Any:
        try:
            return _PAYLOAD.__get__(self)
        except AttributeError:  # not read yet
            value = self._decode(self._blob, self)
            _PAYLOAD.__set__(self, value)
            return value

    @payload.setter
    def payload(self, value: Any) -> None:  # the attrs __init__ of attrs.evolve's copy
        _PAYLOAD.__set__(self, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ResumeRequest):
            return NotImplemented
        return attrs.astuple(self, recurse=False) == attrs.astuple(other, recurse=False)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = ResumeRequest.__hash__

    def __reduce__(self) -> tuple[Any, ...]:  # pickled or copied: a plain ResumeRequest
        return ResumeRequest, attrs.astuple(self, recurse=False)


_Decoding.__qualname__ = _Decoding.__name__ = "ResumeRequest"  # its repr is a request's


def decoding_request(
    token: str,
    session_id: str,
    kind: str,
    reason: str,
    blob: bytes,
    decode: Any,
    path: tuple[Any, ...],
    key: str | None,
) -> ResumeRequest:
    """A ResumeRequest whose payload is `decode(blob, request)`, called when the payload is
    first read (an error it raises is raised to the reader, each time it reads)."""
    request = _new(_Decoding)
    _token(request, token)
    _session_id(request, session_id)
    _kind(request, kind)
    _reason(request, reason)
    _path(request, path)
    _key(request, key)
    _blob(request, blob)
    _decode(request, decode)
    return request


_new = object.__new__
_token, _session_id, _kind, _reason, _path, _key = (
    _SET[name] for name in ("token", "session_id", "kind", "reason", "path", "key")
)
_blob = _Decoding.__dict__["_blob"].__set__
_decode = _Decoding.__dict__["_decode"].__set__


def is_bulk(adapter: Any) -> bool:
    """Whether `adapter` answers in bulk: it has a callable `many`."""
    return callable(getattr(adapter, "many", None))
