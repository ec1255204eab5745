"""Who may log in to the HTTP API: named tokens, the login cookie, and the login rate limit.

Users come from `--users FILE` / `$TARRY_USERS` (one `name:token` per line, `#` comments; the
environment variable may also hold `name:token,name:token`), or from a single `--token`, whose
user is named `admin`. A request's user is the one whose token it carries (a bearer token) or
whose login cookie it holds; that name is recorded as the `actor` of every control action and
the `by` of every Gate decision made through the API.

The login cookie is `name.expires.mac`: the user name, when it expires (epoch seconds), and an
HMAC of both keyed by that user's token. So it names one user, is useless as a bearer token,
cannot be stretched past its expiry, and stops working when the user's token changes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
import time
from collections import deque
from pathlib import Path

#: The user name of a single `--token`.
ADMIN = "admin"
#: A user name: letters, digits and `._@-`, up to 64 characters.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
#: Shortest token accepted for a named user.
MIN_TOKEN = 8


class UsersError(ValueError):
    """A users file or `$TARRY_USERS` that cannot be read as `name:token` lines."""


def parse_users(text: str, source: str) -> dict[str, str]:
    """`{name: token}` from `name:token` lines (or `name:token,name:token`); UsersError naming
    the line for anything else: a malformed line, a bad name, a short token, a name or token
    given twice."""
    users: dict[str, str] = {}
    tokens: set[str] = set()
    entries: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        entries += [(number, part.strip()) for part in line.split(",") if part.strip()]
    for number, entry in entries:
        name, sep, token = entry.partition(":")
        name, token = name.strip(), token.strip()
        where = f"{source}, line {number}"
        if not sep:
            msg = f"{where}: expected name:token (got {entry[:20]!r}...)"
            raise UsersError(msg)
        if not NAME.fullmatch(name):
            msg = (
                f"{where}: a user name is 1-64 letters, digits or ._@- starting with a "
                f"letter or digit (got {name!r})"
            )
            raise UsersError(msg)
        if len(token) < MIN_TOKEN:
            msg = f"{where}: the token of {name!r} must have at least {MIN_TOKEN} characters"
            raise UsersError(msg)
        if name in users:
            msg = f"{where}: user {name!r} is given twice"
            raise UsersError(msg)
        if token in tokens:
            msg = f"{where}: the token of {name!r} is also another user's"
            raise UsersError(msg)
        users[name] = token
        tokens.add(token)
    if not users:
        msg = f"{source} names no user (expected name:token lines)"
        raise UsersError(msg)
    return users


def read_users(path: str | Path) -> dict[str, str]:
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"cannot read the users file {str(path)!r}: {exc}"
        raise UsersError(msg) from exc
    return parse_users(text, str(path))


class Users:
    """The users of one server: who a token or a cookie belongs to."""

    def __init__(self, users: dict[str, str], *, session_seconds: float) -> None:
        self._users = dict(users)
        self.session_seconds = session_seconds

    def __bool__(self) -> bool:
        return bool(self._users)

    def by_token(self, given: str) -> str | None:
        """The user whose token this is. Every token is compared, in constant time each, so
        the time taken does not tell which user (or how much of a token) matched."""
        found = None
        for name, token in self._users.items():
            if hmac.compare_digest(given.encode(), token.encode()):
                found = name
        return found

    def cookie(self, name: str, now: float | None = None) -> str:
        expires = int((time.time() if now is None else now) + self.session_seconds)
        return f"{name}.{expires}.{self._mac(name, expires)}"

    def by_cookie(self, value: str, now: float | None = None) -> str | None:
        """The user a login cookie names, if its MAC holds and it has not expired; None for
        anything else, whatever the cookie holds (total: it never raises). The expiry is 1 to
        12 ASCII digits (`²` is a digit to `str.isdigit`, and int() refuses 4,300 of them)."""
        name, _, rest = value.rpartition(".")
        name, _, expires = name.rpartition(".")
        if name not in self._users:
            return None
        if not (expires.isascii() and expires.isdigit() and len(expires) <= 12):
            return None
        if not (rest.isascii() and len(rest) == 64):  # a hex SHA-256 (compare_digest: ASCII)
            return None
        if int(expires) <= (time.time() if now is None else now):
            return None
        return name if hmac.compare_digest(rest, self._mac(name, int(expires))) else None

    def _mac(self, name: str, expires: int) -> str:
        key = self._users[name].encode()
        return hmac.new(
            key, f"tarry monitor cookie {name} {expires}".encode(), hashlib.sha256
        ).hexdigest()


class LoginLimit:
    """At most `failures` failed logins per `window` seconds per client address: the next one
    is refused (429) until the oldest failure leaves the window. Bounded memory: addresses
    with no recent failure are forgotten."""

    def __init__(self, failures: int = 5, window: float = 60.0, *, clients: int = 10_000) -> None:
        self.failures = failures
        self.window = window
        self._clients = clients
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, client: str, now: float | None = None) -> int:
        """Seconds until `client` may try again (0: now)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            seen = self._recent(client, now)
            if seen is None or len(seen) < self.failures:
                return 0
            return max(1, int(seen[0] + self.window - now + 0.999))

    def failed(self, client: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            seen = self._recent(client, now)
            if seen is None:
                if len(self._seen) >= self._clients:
                    self._forget(now)
                seen = self._seen[client] = deque()
            seen.append(now)

    def _recent(self, client: str, now: float) -> deque[float] | None:
        seen = self._seen.get(client)
        while seen and seen[0] <= now - self.window:
            seen.popleft()
        return seen

    def _forget(self, now: float) -> None:
        for client in [c for c, s in self._seen.items() if not s or s[-1] <= now - self.window]:
            del self._seen[client]
        if len(self._seen) >= self._clients:  # all recent: drop the oldest half
            for client in sorted(self._seen, key=lambda c: self._seen[c][-1])[: self._clients // 2]:
                del self._seen[client]
