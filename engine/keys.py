"""Keys of waits and messages: what a key may be, checked the same way wherever one is made."""

from __future__ import annotations

from typing import Any

from tarry.engine.describe import describe
from tarry.engine.errors import InvalidArgument

#: The longest key, in characters (every store keeps it in an indexed text column).
MAX_KEY = 512


def key_problem(key: Any) -> str | None:
    """What is wrong with `key` as a key, or None: a key is a str of 1 to MAX_KEY characters,
    valid UTF-8 (no lone surrogate), without NUL."""
    if type(key) is not str:
        return "a str"
    if not key or len(key) > MAX_KEY:
        return f"a str of 1 to {MAX_KEY} characters"
    if "\x00" in key:
        return "a str without NUL"
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return "valid UTF-8, without lone surrogates"
    return None


def check_key(key: Any, what: str = "a delivery key") -> str:
    """`key` if it is one (see `key_problem`), else InvalidArgument naming it."""
    problem = key_problem(key)
    if problem is not None:
        shown = (
            describe(key) if type(key) is not str or len(key) <= 80 else f"{len(key)} characters"
        )
        msg = f"{what} must be {problem} (got {shown})"
        raise InvalidArgument(msg)
    checked: str = key
    return checked
