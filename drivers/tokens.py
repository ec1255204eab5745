"""Resume tokens: opaque, unguessable, single-use."""

from __future__ import annotations

import secrets

PREFIX = "tk_"
#: 32 random bytes: 256 bits, far above the 128 bits a guess would need to be hopeless.
NBYTES = 32


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(NBYTES)


def looks_like_token(value: str) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)
