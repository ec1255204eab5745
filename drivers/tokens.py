"""Resume tokens: opaque, unguessable, single-use, and optionally signed.

A store keeps one *key* per live token. Without a secret the token is the key itself: 256
random bits from `os.urandom` (what `secrets` uses), found in the store by an index lookup.
With a secret (`Runtime(secret=...)`) the token is the key plus an HMAC-SHA256 of it, and the
store keeps only the key. Whoever reads the store (a leaked backup, a read-only database role)
then holds keys, not tokens, and cannot compute a token without the secret; a token whose
signature does not match is refused, compared in constant time, before the store is asked at
all.

Signing fails closed. The first Runtime with a secret that uses a store marks it
(`store.mark("signed_tokens")`); a process without the secret then refuses that store's keys
with `SecretRequired` — to accept them as tokens, to hand them out as tokens, to start or
resume sessions that would store unsigned ones — instead of quietly running unsigned on a store
whose keys are meant to be worthless without the secret.
"""

from __future__ import annotations

import binascii
import os
from collections.abc import Sequence
from time import monotonic as _monotonic
from typing import Any

from tarry.engine.errors import InvalidArgument, SecretRequired

#: `base64.urlsafe_b64encode` is binascii's encoding and this translation; the `base64` module
#: itself would also load `struct` with `import tarry`.
_URLSAFE = bytes.maketrans(b"+/", b"-_")


def b64url(data: bytes) -> str:
    """`data` in unpadded URL-safe base64, as `base64.urlsafe_b64encode(data)` without "="."""
    return binascii.b2a_base64(data, newline=False).rstrip(b"=").translate(_URLSAFE).decode("ascii")


PREFIX = "tk_"
#: 32 random bytes: 256 bits, far above the 128 bits a guess would need to be hopeless.
NBYTES = 32
#: Longer strings are no token of ours; refused before any hashing or store lookup.
MAX_LENGTH = 200
_SEPARATOR = "."
# Bound into every signature, so a MAC made with the same secret for another purpose can never
# pass for a token's.
_DOMAIN = b"tarry resume token v1\x00"
#: The store mark of a store that holds signed tokens.
SIGNED_MARK = "signed_tokens"
#: Seconds a process without a secret takes a store it found unmarked to be still unmarked:
#: it asks the store again at most this often, so the check costs one read a second at most.
RECHECK_SECONDS = 1.0


def new_token() -> str:
    # secrets.token_urlsafe(NBYTES) without importing secrets (and random, hmac, hashlib with
    # it) into every process that imports tarry.
    return PREFIX + b64url(os.urandom(NBYTES))


def looks_like_token(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


class Tokens:
    """Mints tokens and maps them to and from the keys a store keeps.

    `secret` is None (tokens are keys), a str or bytes, or a non-empty sequence of them for
    rotation: the first signs new tokens, every one is accepted when checking a token, so
    tokens issued before a rotation stay valid until the old secret is dropped. `store`: the
    store whose keys these are, marked or checked so that signing fails closed (see `check`).
    """

    __slots__ = ("_secrets", "_store", "_settled", "_refused", "_unmarked_until")

    def __init__(
        self, secret: str | bytes | Sequence[str | bytes] | None = None, store: Any = None
    ) -> None:
        self._secrets: tuple[bytes, ...] = _secrets(secret)
        # A store of an older protocol has no marks: nothing to mark or ask then.
        self._store = store if hasattr(store, "marked") else None
        #: Nothing (more) to check: no store, or the store is marked (with a secret).
        self._settled = self._store is None
        #: Without a secret: the store holds signed tokens (for good: marks are never removed).
        self._refused = False
        #: Without a secret: until when (`_monotonic`) the store counts as unmarked.
        self._unmarked_until = 0.0

    @property
    def signed(self) -> bool:
        return bool(self._secrets)

    def check(self) -> None:
        """Fail closed. With a secret, mark the store as holding signed tokens (once per
        process). Without one, raise `SecretRequired` if the store is so marked (asked at most
        once a second; a mark is remembered for good). Runs on every token minted, handed out
        or taken in, so its usual path is two attribute reads and a clock read."""
        if self._settled:
            return
        if self._refused:
            raise SecretRequired()
        store = self._store
        if self._secrets:
            store.mark(SIGNED_MARK)
            self._settled = True
            return
        now = _monotonic()
        if now < self._unmarked_until:
            return
        if store.marked(SIGNED_MARK):
            self._refused = True
            raise SecretRequired()
        self._unmarked_until = now + RECHECK_SECONDS

    def new_key(self) -> str:
        """A fresh key for the store (and, unsigned, the token too). With a secret, the store
        is marked before the first key goes into it; without, `SecretRequired` on a store that
        holds signed tokens."""
        self.check()
        return new_token()

    def token(self, key: str) -> str:
        """The token a caller gets for `key`; `SecretRequired` without a secret on a store
        that holds signed tokens."""
        self.check()
        if not self._secrets:
            return key
        return key + _SEPARATOR + _mac(self._secrets[0], key)

    def key(self, token: object) -> str | None:
        """The store key of `token`, or None when it cannot be one of ours (wrong type, shape or
        signature): callers turn None into `UnknownToken`. `SecretRequired` without a secret on
        a store that holds signed tokens."""
        self.check()
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
    return b64url(digest)


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
