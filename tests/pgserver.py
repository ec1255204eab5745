"""The PostgreSQL server the tests use: its DSN, and a fresh schema per test.

The server is `TARRY_TEST_POSTGRES` (a DSN), by default `postgresql://tarry:tarry@127.0.0.1:5432/tarry`
(what `.ci/run` sets up). When it cannot be reached, a test that needs it is skipped — or fails
when `CI=true`, where a missing server is a broken setup, not an optional one.
"""

from __future__ import annotations

import atexit
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pytest

DEFAULT_DSN = "postgresql://tarry:tarry@127.0.0.1:5432/tarry"
#: Every schema a test creates starts with this, so leftovers are easy to find and drop.
PREFIX = "tarry_test_"

_probed: dict[str, str | None] = {}  # dsn -> why it cannot be reached (None: it can)


def server_dsn() -> str:
    """The server's DSN; skips the calling test when it cannot be reached (fails under CI)."""
    dsn = os.environ.get("TARRY_TEST_POSTGRES") or DEFAULT_DSN
    if dsn not in _probed:
        _probed[dsn] = _probe(dsn)
    problem = _probed[dsn]
    if problem is not None:
        msg = (
            f"PostgreSQL not reachable at {_redacted(dsn)} ({problem}): "
            "set TARRY_TEST_POSTGRES or run .ci/run"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return dsn


def _probe(dsn: str) -> str | None:
    try:
        import psycopg
        import psycopg_pool  # noqa: F401  (the store needs it too)
    except ImportError as exc:
        return f"{exc.name} is not installed"
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def _redacted(dsn: str) -> str:
    """The DSN without its password."""
    scheme, sep, rest = dsn.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return dsn
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"


# -- a clean schema per test -------------------------------------------------------------------


def create_schema() -> str:
    """A new, empty schema on the server; its name."""
    import psycopg

    name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    return name


def drop_schema(name: str) -> None:
    """Drop a schema and everything in it."""
    import psycopg

    with psycopg.connect(server_dsn(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def schema_dsn(schema: str, dsn: str | None = None) -> str:
    """The server's URL with `schema` as its search_path: what `Runtime(store=...)` and
    `open_store` take when the store must live in that schema."""
    dsn = dsn or server_dsn()
    option = quote(f"-csearch_path={schema}", safe="")
    return f"{dsn}{'&' if '?' in dsn else '?'}options={option}"


@contextmanager
def scratch_schema() -> Iterator[str]:
    """A fresh schema for the length of the block, then dropped."""
    name = create_schema()
    try:
        yield name
    finally:
        drop_schema(name)


_spare: list[str] = []  # migrated schemas emptied by a closed scratch store, for the next one
_created: list[str] = []  # every schema scratch_store made; dropped when the tests end


def scratch_store(**options: Any) -> Any:
    """A PostgresStore in a schema of its own that no other test sees: a new one, or one that
    an earlier scratch store left empty (reusing them spares the DDL of a migration per test).
    Emptied when the store is closed."""
    from tarry.snapshots import PostgresStore

    class ScratchStore(PostgresStore):
        _emptied = False

        def close(self) -> None:
            if not self._emptied:
                self._emptied = True
                with self._pool.connection() as conn:
                    conn.execute(
                        "TRUNCATE tarry_sessions, tarry_events, tarry_values, tarry_tokens, "
                        "tarry_tallies, tarry_marks, tarry_waits, tarry_mail, tarry_logs, "
                        "tarry_batches, tarry_batch_items, tarry_children"
                    )
                _spare.append(self.schema)
            super().close()

    dsn = server_dsn()
    if not _spare:
        if not _created:
            atexit.register(_drop_created)
        name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
        _created.append(name)
        _spare.append(name)
    return ScratchStore(dsn, schema=_spare.pop(), **options)


def _drop_created() -> None:
    for name in _created:
        try:
            drop_schema(name)
        except Exception:  # the server went away: nothing more to clean
            return
