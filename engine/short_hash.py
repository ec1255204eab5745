"""short_hash: the first 32 hex digits of a text's SHA-256 (flow fingerprints, idempotency keys)."""

from __future__ import annotations

# CPython's own SHA-256, not `hashlib`'s: importing hashlib loads OpenSSL, about a tenth of
# `import tarry`, for one digest that both give alike. `_sha2` since 3.12, `_sha256` before.
try:
    from _sha2 import sha256  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the Python version
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,no-redef]
    except ImportError:  # a build without them: hashlib always has one
        from hashlib import sha256  # type: ignore[assignment]


def short_hash(text: str) -> str:
    """The first 32 hex digits of the SHA-256 of `text` encoded as UTF-8."""
    return sha256(text.encode()).hexdigest()[:32]
