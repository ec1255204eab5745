"""PostgresStore beyond the conformance suite: migrations, the pool, URLs, processes, the
optional dependency. Needs a server (see tests/pgserver.py)."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pgserver
import pytest
from support import T0, WAIT, rec, wait_until
from tarry.drivers.stores import open_store
from tarry.engine.errors import InvalidArgument, SnapshotError
from tarry.snapshots import SessionStore, TokenInfo


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh, empty schema, dropped after the test."""
    with pgserver.scratch_schema() as name:
        yield name


@pytest.fixture
def module() -> Any:
    """The PostgresStore module, for the tests that need no server (its import needs psycopg)."""
    pytest.importorskip("psycopg")
    from tarry.snapshots.postgres import store as postgres

    return postgres


@pytest.fixture
def postgres(module: Any) -> Any:
    """The PostgresStore module, with a server to use it on."""
    pgserver.server_dsn()
    return module


def tables(schema: str) -> set[str]:
    import psycopg

    with psycopg.connect(pgserver.server_dsn()) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
    return {name for (name,) in rows}


def applied(schema: str) -> list[int]:
    import psycopg

    with psycopg.connect(pgserver.server_dsn()) as conn:
        rows = conn.execute(f'SELECT version FROM "{schema}".tarry_schema ORDER BY version')
        return [v for (v,) in rows.fetchall()]


# -- migrations --------------------------------------------------------------------------------


def test_a_fresh_schema_is_migrated_to_the_current_version(postgres: Any, schema: str) -> None:
    assert tables(schema) == set()
    with postgres.PostgresStore(pgserver.server_dsn(), schema=schema) as store:
        assert isinstance(store, SessionStore)
        assert store.schema_version() == postgres.latest_version() >= 1
    assert tables(schema) == {
        "tarry_schema", "tarry_sessions", "tarry_events", "tarry_values", "tarry_tokens",
        "tarry_tallies",
        "tarry_marks",
        "tarry_waits", "tarry_mail", "tarry_logs",
        "tarry_batches", "tarry_batch_items", "tarry_children",
    }  # fmt: skip
    assert applied(schema) == [m.version for m in postgres.MIGRATIONS]


def test_sessions_paused_before_waits_get_one_on_migration(
    postgres: Any, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tarry.snapshots import WaitRecord

    with monkeypatch.context() as before:
        before.setattr(postgres, "MIGRATIONS", postgres.MIGRATIONS[:4])  # as made before waits
        with postgres.PostgresStore(pgserver.server_dsn(), schema=schema) as store:
            # `create` writes only what schema 4 had.
            store.create(rec("human", status="paused", token="tk_h", meta={"pause_kind": "human"}))
            store.create(rec("plain", status="paused", token="tk_p", wake_at=T0))
            store.create(rec("used", status="paused", token="tk_u"))
            store.create(rec("done", status="completed", token="tk_d"))
            with store._pool.connection() as conn:
                conn.execute("UPDATE tarry_tokens SET used = true WHERE token = 'tk_u'")
    with postgres.PostgresStore(pgserver.server_dsn(), schema=schema) as store:
        assert applied(schema)[-1] == postgres.latest_version()
        assert store.waiting() == [
            WaitRecord("tk_h", "human", (), "human"),
            WaitRecord("tk_p", "plain", (), "external", wake_at=T0),
        ]
        assert store.consume_token("tk_h") is True
        assert [w.token for w in store.waiting()] == ["tk_p"]


def test_the_store_creates_a_missing_schema(postgres: Any) -> None:
    name = f"{pgserver.PREFIX}new_{time.time_ns()}"
    try:
        with postgres.PostgresStore(pgserver.server_dsn(), schema=name) as store:
            store.create(rec())
            assert store.load("s1") == rec()
        assert "tarry_sessions" in tables(name)
    finally:
        pgserver.drop_schema(name)


def test_upgrade_twice_is_a_no_op(postgres: Any, schema: str) -> None:
    with postgres.PostgresStore(pgserver.server_dsn(), schema=schema) as store:
        store.create(rec(token="tk_1"))
        assert store.upgrade() == []
        assert store.upgrade() == []
        assert store.schema_version() == postgres.latest_version()
        assert store.load("s1") == rec(token="tk_1")
    # Reopening an up-to-date schema changes nothing either.
    with postgres.PostgresStore(pgserver.server_dsn(), schema=schema) as store:
        assert store.find_token("tk_1") == TokenInfo("s1", False)
    assert applied(schema) == [m.version for m in postgres.MIGRATIONS]


def test_concurrent_upgrades_apply_each_migration_once(postgres: Any, schema: str) -> None:
    n = 6
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n

    def open_one(i: int) -> None:
        barrier.wait(timeout=300)
        try:
            store = postgres.PostgresStore(pgserver.server_dsn(), schema=schema, auto_upgrade=False)
            try:
                results[i] = store.upgrade()
            finally:
                store.close()
        except Exception as exc:  # reported below
            results[i] = exc

    threads = [threading.Thread(target=open_one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    everything = [m.version for m in postgres.MIGRATIONS]
    assert sorted(results, key=len) == [[]] * (n - 1) + [everything], results
    assert applied(schema) == everything


def test_concurrent_opens_of_a_new_database_all_succeed(postgres: Any, schema: str) -> None:
    n = 4
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def open_one() -> None:
        barrier.wait(timeout=300)
        try:
            postgres.PostgresStore(pgserver.server_dsn(), schema=schema).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert applied(schema) == [m.version for m in postgres.MIGRATIONS]


def test_a_new_migration_is_applied_in_order_and_once(
    postgres: Any, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = pgserver.server_dsn()
    with postgres.PostgresStore(dsn, schema=schema) as store:
        store.create(rec())
    latest = postgres.latest_version()
    later = (
        postgres.Migration(
            latest + 1, "a column", ("ALTER TABLE tarry_sessions ADD COLUMN x int",)
        ),
        postgres.Migration(latest + 2, "a default", ("UPDATE tarry_sessions SET x = 7",)),
    )
    monkeypatch.setattr(postgres, "MIGRATIONS", (*postgres.MIGRATIONS, *later))
    with postgres.PostgresStore(dsn, schema=schema, auto_upgrade=False) as store:
        assert store.schema_version() == latest
        assert store.upgrade() == [latest + 1, latest + 2]
        assert store.upgrade() == []
        assert store.schema_version() == latest + 2
        assert store.load("s1") == rec()  # existing rows survive
    import psycopg

    with psycopg.connect(dsn) as conn:
        assert conn.execute(f'SELECT x FROM "{schema}".tarry_sessions').fetchall() == [(7,)]


def test_a_failing_migration_leaves_the_schema_as_it_was(
    postgres: Any, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = pgserver.server_dsn()
    postgres.PostgresStore(dsn, schema=schema).close()
    latest = postgres.latest_version()
    broken = (
        postgres.Migration(latest + 1, "fine", ("ALTER TABLE tarry_sessions ADD COLUMN y int",)),
        postgres.Migration(latest + 2, "broken", ("ALTER TABLE no_such_table ADD COLUMN z int",)),
    )
    monkeypatch.setattr(postgres, "MIGRATIONS", (*postgres.MIGRATIONS, *broken))
    import psycopg

    with pytest.raises(psycopg.errors.UndefinedTable):
        postgres.PostgresStore(dsn, schema=schema)
    assert applied(schema) == [m.version for m in postgres.MIGRATIONS[:-2]]
    with psycopg.connect(dsn) as conn:
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'tarry_sessions'",
            (schema,),
        ).fetchall()
    assert ("y",) not in columns


def test_without_auto_upgrade_nothing_is_created_until_upgrade(postgres: Any, schema: str) -> None:
    with postgres.PostgresStore(pgserver.server_dsn(), schema=schema, auto_upgrade=False) as store:
        assert store.schema_version() == 0
        assert tables(schema) == set()
        assert store.upgrade() == [m.version for m in postgres.MIGRATIONS]
        store.create(rec())
        assert store.load("s1") == rec()


def test_a_newer_schema_is_refused(postgres: Any, schema: str) -> None:
    dsn = pgserver.server_dsn()
    postgres.PostgresStore(dsn, schema=schema).close()
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute(
            f"INSERT INTO \"{schema}\".tarry_schema (version, description) VALUES (999, 'future')"
        )
    for auto_upgrade in (True, False):
        with pytest.raises(SnapshotError, match="schema version 999"):
            postgres.PostgresStore(dsn, schema=schema, auto_upgrade=auto_upgrade)


def test_mail_kept_before_the_queue_becomes_one_message_per_row(
    postgres: Any, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    dsn = pgserver.server_dsn()
    with monkeypatch.context() as before:
        before.setattr(postgres, "MIGRATIONS", postgres.MIGRATIONS[:6])  # one row per key
        postgres.PostgresStore(dsn, schema=schema).close()
    with psycopg.connect(dsn) as conn:  # as the store of schema 6 left them
        conn.cursor().executemany(
            f'INSERT INTO "{schema}".tarry_mail (key, claimed_by, value, at) VALUES (%s, %s, %s, %s)',
            [
                ("job", "", b"later", T0 + dt.timedelta(seconds=2)),
                ("job", "s1", b"claimed", T0 + dt.timedelta(seconds=1)),
                ("other", "", b"alone", T0),
            ],
        )
    with postgres.PostgresStore(dsn, schema=schema) as store:
        assert store.schema_version() == postgres.latest_version()
        (later,) = store.queued(key="job")
        (alone,) = store.queued(key="other")
        second = T0 + dt.timedelta(seconds=2)
        assert (later.value, later.at, later.target) == (b"later", second, None)
        assert (alone.value, alone.at) == (b"alone", T0)
        claimed = store.claim_mail("job", "s1")  # the claim is kept, and came first
        assert claimed is not None and claimed[1] == b"claimed" and claimed[0] < later.id
        assert store.claim_mail("job", "s2") == (later.id, b"later")
        assert store.post("job", b"new", T0) > max(later.id, alone.id, claimed[0])


# -- the mailbox as PostgreSQL keeps it --------------------------------------------------------


def test_a_claim_passes_over_a_locked_message_without_waiting(postgres: Any, schema: str) -> None:
    import psycopg

    dsn = pgserver.server_dsn()
    with postgres.PostgresStore(dsn, schema=schema) as store:
        first = store.post("job", b"a", T0)
        second = store.post("job", b"b", T0)
        with psycopg.connect(dsn) as locker:  # another claimant, or a token's use, holds it
            locker.execute(
                f'SELECT 1 FROM "{schema}".tarry_mail WHERE id = %s FOR UPDATE', (first,)
            )
            started = time.monotonic()
            assert store.claim_mail("job", "s1") == (second, b"b")
            assert store.claim_mail("job", "s2") is None  # the only one left is held
            assert time.monotonic() - started < WAIT  # (a call that waited would hang here)
        assert store.claim_mail("job", "s2") == (first, b"a")  # free again with the lock


def test_a_message_is_taken_once_by_a_claim_or_a_tokens_use(postgres: Any) -> None:
    from storekit import race
    from tarry.snapshots import WaitRecord
    from tarry.snapshots.store import MailGone

    n = 8
    with pgserver.scratch_store(max_size=n) as store:
        for i in range(n):
            store.create(rec(f"s{i}"))
            wait = WaitRecord(f"tk_{i}", f"s{i}", (), "external", key="job")
            store.save(rec(f"s{i}", status="paused", token=f"tk_{i}"), 0, waits=[wait])
        for _ in range(3):
            message = store.post("job", b"v", T0)

            def take(i: int, message: int = message) -> bool:
                if i % 2:
                    return store.claim_mail("job", f"c{i}") == (message, b"v")
                try:
                    return store.consume_token(f"tk_{i}", mail=message)
                except MailGone:
                    return False

            assert sum(race(n, take)) == 1
            assert store.queued(key="job") == []
            used = [i for i in range(n) if store.find_token(f"tk_{i}").used]
            for i in range(n):  # a token whose message was gone stays live, its session paused
                assert store.load(f"s{i}").status == ("running" if i in used else "paused")
            for i in range(1, n, 2):  # the claims of this round end (as a save would end them)
                store.delete(f"c{i}")
            store.discard("job")


def test_a_mailbox_prefix_is_a_range_at_any_code_point(postgres: Any, schema: str) -> None:
    from tarry.snapshots.postgres.waits import _past_prefix

    keys = ["a\U0010ffff", "a\U0010ffffz", "b", "\ud7ff", "\ud7ffx", "\ue000", "\U0010ffff"]
    with postgres.PostgresStore(pgserver.server_dsn(), schema=schema) as store:
        for key in keys:
            store.post(key, b"v", T0)
        for prefix in ("a\U0010ffff", "\ud7ff", "\U0010ffff", "", "a", "%"):
            found = [info.key for info in store.mailbox(prefix=prefix)]
            assert found == sorted(k for k in keys if k.startswith(prefix)), prefix
    assert _past_prefix("ab") == "ac"
    assert _past_prefix("a\U0010ffff") == "b"
    assert _past_prefix("\ud7ff") == "\ue000"  # past the surrogates, which are no characters
    assert _past_prefix("\U0010ffff") is None
    assert _past_prefix("") is None


# -- options and the pool ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"schema": "bad-name"},
        {"schema": 'x"; DROP TABLE y; --'},
        {"schema": ""},
        {"min_size": 3, "max_size": 2},
        {"max_size": 0, "min_size": 0},
        {"min_size": -1},
        {"max_size": "10"},
    ],
)
def test_bad_options_are_refused_before_connecting(module: Any, options: dict) -> None:
    with pytest.raises(InvalidArgument):
        module.PostgresStore("postgresql://nobody@127.0.0.1:1/none", **options)


def test_an_unreachable_server_fails_at_once_with_the_reason(module: Any) -> None:
    import psycopg

    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError, match="127.0.0.1"):
        module.PostgresStore("postgresql://tarry:tarry@127.0.0.1:1/tarry", connect_timeout=2)
    assert time.monotonic() - started < WAIT  # no retries without end (a bound, not a speed)


def test_the_pool_shares_at_most_max_size_connections(postgres: Any, schema: str) -> None:
    import psycopg

    dsn = pgserver.server_dsn()
    name = f"tarry-pool-test-{schema}"
    probe_dsn = f"{dsn}{'&' if '?' in dsn else '?'}application_name={name}"
    store = postgres.PostgresStore(probe_dsn, schema=schema, min_size=1, max_size=3)
    try:
        store.create(rec(token="tk_1"))
        barrier = threading.Barrier(12)
        seen: list[int] = []

        def work() -> None:
            barrier.wait(timeout=300)
            for _ in range(20):
                store.load("s1")
                store.find_token("tk_1")
            with psycopg.connect(dsn) as conn:
                (count,) = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
                ).fetchone()
            seen.append(count)

        threads = [threading.Thread(target=work) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(seen) == 12
        assert 1 <= max(seen) <= 3
    finally:
        store.close()
    with psycopg.connect(dsn) as conn:

        def none_left() -> bool:
            (left,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchone()
            return left == 0

        # the server notices closed connections a moment later
        wait_until(none_left, "the server to see the store's connections closed")


def test_a_dropped_connection_fails_one_call_and_is_replaced(postgres: Any, schema: str) -> None:
    import psycopg

    dsn = pgserver.server_dsn()
    name = f"tarry-drop-test-{schema}"
    probe_dsn = f"{dsn}{'&' if '?' in dsn else '?'}application_name={name}"
    with postgres.PostgresStore(probe_dsn, schema=schema, min_size=1, max_size=1) as store:
        store.create(rec())
        with psycopg.connect(dsn, autocommit=True) as admin:  # as a server restart would
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            )
        with pytest.raises(psycopg.OperationalError):
            store.load("s1")
        assert store.load("s1") == rec()


def test_a_closed_store_refuses_calls(postgres: Any, schema: str) -> None:
    store = postgres.PostgresStore(pgserver.server_dsn(), schema=schema)
    store.close()
    with pytest.raises(Exception, match="closed"):
        store.load("s1")


def test_two_stores_on_one_schema_share_sessions(postgres: Any, schema: str) -> None:
    dsn = pgserver.server_dsn()
    with (
        postgres.PostgresStore(dsn, schema=schema) as one,
        postgres.PostgresStore(dsn, schema=schema) as two,
    ):
        one.create(rec(token="tk_1"))
        assert two.load("s1") == rec(token="tk_1")
        assert two.consume_token("tk_1") is True
        assert one.consume_token("tk_1") is False


def test_schemas_keep_stores_apart(postgres: Any) -> None:
    dsn = pgserver.server_dsn()
    with (
        pgserver.scratch_schema() as a,
        pgserver.scratch_schema() as b,
        postgres.PostgresStore(dsn, schema=a) as one,
        postgres.PostgresStore(dsn, schema=b) as two,
    ):
        one.create(rec())
        assert two.load("s1") is None
        two.create(rec())  # no SessionExists: another schema


# -- values as PostgreSQL keeps them ------------------------------------------------------------


def test_datetimes_are_instants_returned_in_utc(postgres: Any, schema: str) -> None:
    plus2 = dt.timezone(dt.timedelta(hours=2))
    wake = dt.datetime(2024, 5, 1, 14, 0, 1, 7, tzinfo=plus2)  # 12:00:01.000007 UTC
    with postgres.PostgresStore(pgserver.server_dsn(), schema=schema) as store:
        store.create(
            rec(status="paused", wake_at=wake, created_at=dt.datetime(1, 1, 2, tzinfo=dt.UTC))
        )
        loaded = store.load("s1")
        assert loaded.wake_at == wake
        assert loaded.wake_at.tzinfo is dt.UTC
        assert loaded.created_at == dt.datetime(1, 1, 2, tzinfo=dt.UTC)
        assert [r.session_id for r in store.due(T0 + dt.timedelta(seconds=1, microseconds=7))] == [
            "s1"
        ]
        assert store.due(T0 + dt.timedelta(seconds=1, microseconds=6)) == []


def test_ids_order_by_code_point_whatever_the_database_collation(
    postgres: Any, schema: str
) -> None:
    ids = ["a", "B", "_", "é", "Z9", "z"]
    with postgres.PostgresStore(pgserver.server_dsn(), schema=schema) as store:
        for sid in ids:
            store.create(rec(sid))
        assert [r.session_id for r in store.list()] == sorted(ids, reverse=True)


def test_repr_hides_the_password(postgres: Any, schema: str) -> None:
    with postgres.PostgresStore(pgserver.server_dsn(), schema=schema) as store:
        text = repr(store)
    assert schema in text
    assert ":tarry@" not in text and "password" not in text


# -- URLs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["postgresql://", "postgres://"])
def test_open_store_takes_a_postgres_url(postgres: Any, schema: str, scheme: str) -> None:
    url = pgserver.schema_dsn(schema).replace("postgresql://", scheme, 1)
    assert url.startswith(scheme)
    store = open_store(url)
    try:
        assert isinstance(store, postgres.PostgresStore)
        store.create(rec())
    finally:
        store.close()
    # The tables went into the schema named by the URL's search_path.
    assert "tarry_sessions" in tables(schema)


# -- processes ---------------------------------------------------------------------------------


def _consume_in_process(dsn: str, schema: str, token: str, barrier: Any, results: Any) -> None:
    from tarry.snapshots import PostgresStore

    with PostgresStore(dsn, schema=schema) as store:
        barrier.wait(timeout=300)
        results.put(store.consume_token(token))


def _claim_in_process(dsn: str, schema: str, owner: str, barrier: Any, results: Any) -> None:
    from tarry.snapshots import PostgresStore

    with PostgresStore(dsn, schema=schema) as store:
        barrier.wait(timeout=300)
        until = T0 + dt.timedelta(seconds=30)
        results.put((owner, store.claim("s1", owner, until=until, now=T0)))


@pytest.mark.parametrize("target", [_consume_in_process, _claim_in_process])
def test_races_across_processes_have_one_winner(
    postgres: Any, schema: str, monkeypatch: pytest.MonkeyPatch, target: Any
) -> None:
    dsn = pgserver.server_dsn()
    with postgres.PostgresStore(dsn, schema=schema) as store:
        store.create(rec(token="tk_1"))
    # Spawned children import this module by name: make the repository root importable.
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[3]))
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    arg = "tk_1" if target is _consume_in_process else None
    procs = [
        ctx.Process(target=target, args=(dsn, schema, arg or f"w{i}", barrier, results))
        for i in range(4)
    ]
    for p in procs:
        p.start()
    outcome = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    with postgres.PostgresStore(dsn, schema=schema) as store:
        if target is _consume_in_process:
            assert sorted(outcome) == [False, False, False, True]
            assert store.find_token("tk_1") == TokenInfo("s1", True)
        else:
            winners = [owner for owner, won in outcome if won]
            assert len(winners) == 1
            assert store.load("s1").lease_owner == winners[0]


def test_a_renewal_waits_for_a_row_lock_instead_of_failing(postgres: Any, schema: str) -> None:
    import psycopg

    dsn = pgserver.server_dsn()
    with postgres.PostgresStore(dsn, schema=schema) as store:
        store.create(rec())
        until = T0 + dt.timedelta(seconds=30)
        assert store.claim("s1", "a", until=until, now=T0) is True
        with psycopg.connect(dsn) as locker:
            locker.execute(f'SELECT 1 FROM "{schema}".tarry_sessions FOR NO KEY UPDATE')
            # Another claimant does not wait: the row is locked, and the lease is not its.
            started = time.monotonic()
            assert store.claim("s1", "b", until=until, now=T0 + dt.timedelta(seconds=40)) is False
            assert time.monotonic() - started < WAIT  # (a call that waited would hang here)
            # The owner's renewal waits for the lock to go, then succeeds.
            threading.Timer(0.3, locker.commit).start()
            later = T0 + dt.timedelta(seconds=60)
            assert store.claim("s1", "a", until=later, now=T0 + dt.timedelta(seconds=10)) is True
        assert store.load("s1").lease_until == later


# -- the optional dependency -------------------------------------------------------------------


def test_tarry_imports_without_psycopg() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["psycopg"] = None  # as if it were not installed
        sys.modules["psycopg_pool"] = None
        import tarry, tarry.snapshots
        from tarry.snapshots import MemoryStore, SQLiteStore
        assert "PostgresStore" not in tarry.snapshots.__all__
        for attempt in (
            lambda: tarry.snapshots.PostgresStore,
            lambda: tarry.Runtime(store="postgresql://u@127.0.0.1/db"),
        ):
            try:
                attempt()
            except ImportError as exc:
                assert "pip install 'tarry[postgres]'" in str(exc), exc
            else:
                raise AssertionError("no ImportError")
        try:
            tarry.snapshots.NoSuchThing
        except AttributeError:
            pass
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
