"""Resume tokens: opaque, unguessable, single-use, and optionally signed.

A store keeps one *key* per live token. Without a secret the token is the key itself: 256
random bits from `os.urandom` (what `secrets` uses), found in the store by an index lookup.
With a secret (`Runtime(secret=...)`) the token is the key plus an HMAC-SHA256 of it, and the
store keeps only the key. Whoever reads the store (a leaked backup, a read-only database role)
then holds keys, not tokens, and cannot compute a token without the secret; a token whose
signature does not match is refused, compared in constant time, before the store is asked at
all.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence

from tarry.engine.errors import InvalidArgument

PREFIX = "tk_"
#: 32 random bytes: 256 bits, far above the 128 bits a guess would need to be hopeless.
NBYTES = 32
#: Longer strings are no token of ours; refused before any hashing or store lookup.
MAX_LENGTH = 200
_SEPARATOR = "."
# Bound into every signature, so a MAC made with the same secret for another purpose can never
# pass for a token's.
_DOMAIN = b"tarry resume token v1\x00"


def new_token() -> str:
    # secrets.token_urlsafe(NBYTES) without importing secrets (and random, hmac, hashlib with
    # it) into every process that imports tarry.
    return PREFIX + base64.urlsafe_b64encode(os.urandom(NBYTES)).rstrip(b"=").decode("ascii")


def looks_like_token(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


class Tokens:
    """Mints tokens and maps them to and from the keys a store keeps.

    `secret` is None (tokens are keys), a str or bytes, or a non-empty sequence of them for
    rotation: the first signs new tokens, every one is accepted when checking a token, so
    tokens issued before a rotation stay valid until the old secret is dropped.
    """

    __slots__ = ("_secrets",)

    def __init__(self, secret: str | bytes | Sequence[str | bytes] | None = None) -> None:
        self._secrets: tuple[bytes, ...] = _secrets(secret)

    @property
    def signed(self) -> bool:
        return bool(self._secrets)

    def new_key(self) -> str:
        """A fresh key for the store (and, unsigned, the token too)."""
        return new_token()

    def token(self, key: str) -> str:
        """The token a caller gets for `key`."""
        if not self._secrets:
            return key
        return key + _SEPARATOR + _mac(self._secrets[0], key)

    def key(self, token: object) -> str | None:
        """The store key of `token`, or None when it cannot be one of ours (wrong type, shape or
        signature). Never raises: callers turn None into `UnknownToken`."""
        if (
            type(token) is not str
            or len(token) > MAX_LENGTH
            or not token.startswith(PREFIX)
            or not token.isascii()  # ours are; and compare_digest takes only ASCII str
        ):
            return None
        if not self._secrets:
            return token
        key, sep, mac = token.rpartition(_SEPARATOR)
        if not sep or not key:
            return None
        # Check against every secret without stopping early, so the time taken does not tell
        # which secret (if any) matched.
        import hmac  # signed tokens only

        good = False
        for secret in self._secrets:
            good |= hmac.compare_digest(_mac(secret, key), mac)
        return key if good else None


def _mac(secret: bytes, key: str) -> str:
    # surrogatepass: a key is ASCII when we made it; anything else still signs as itself.
    import hashlib  # signed tokens only (imported once; later imports are a dict lookup)
    import hmac

    data = _DOMAIN + key.encode("utf-8", "surrogatepass")
    digest = hmac.new(secret, data, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _secrets(secret: str | bytes | Sequence[str | bytes] | None) -> tuple[bytes, ...]:
    if secret is None:
        return ()
    many = secret if isinstance(secret, list | tuple) else [secret]
    if not many:
        msg = "secret must be a non-empty str or bytes, or a non-empty list of them (got [])"
        raise InvalidArgument(msg)
    out: list[bytes] = []
    for one in many:
        if isinstance(one, str):
            one = one.encode("utf-8")
        if not isinstance(one, bytes) or len(one) < 16:
            what = f"{len(one)} bytes" if isinstance(one, bytes) else f"a {type(one).__name__}"
            msg = (
                "secret must be str or bytes of at least 16 bytes (use secrets.token_bytes(32)); "
                f"got {what}"
            )
            raise InvalidArgument(msg)
        out.append(one)
    return tuple(out)
