"""What every store keeps of provider batches (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import datetime as dt

import pytest
from batchflows import openai_flow
from tarry import Runtime
from tarry.batches import BatchRecord

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)


def _record(sid: str, at: dt.datetime = T0) -> BatchRecord:
    return BatchRecord(sid, "openai", None, "submitting", 0, at, at)


def test_intent_claims_keys_that_wait_and_no_open_submission_holds(store, openai_client):
    from tarry.batches import OpenAIBatch

    rt = Runtime(store, batches={"openai": OpenAIBatch(openai_client)})
    rt.run(openai_flow, ["a", "b", "c"])  # waits on k-a, k-b, k-c
    assert store.batch_intent(_record("s1"), ["k-a", "k-b", "k-zzz"]) == ["k-a", "k-b"]
    assert store.batch_intent(_record("s2", T0 + dt.timedelta(seconds=1)), ["k-a", "k-c"]) == [
        "k-c"
    ]
    assert store.batch_intent(_record("s3"), ["k-a", "k-b"]) == []  # nothing recorded
    assert [r.submission_id for r in store.batches()] == ["s1", "s2"]
    assert [r.total for r in store.batches()] == [2, 1]
    assert store.batch_keys("s1") == ["k-a", "k-b"]
    assert store.batch_submitted(["k-a", "k-c", "k-zzz"]) == {"k-a", "k-c"}

    store.batch_update("s1", status="in_progress", at=T0, provider_id="p1", counts={"total": 2})
    [s1, _] = store.batches()
    assert (s1.provider_id, s1.status, s1.counts) == ("p1", "in_progress", {"total": 2})
    store.batch_update("s1", status="finalizing", at=T0)  # provider id and counts kept
    assert store.batches()[0].provider_id == "p1" and store.batches()[0].counts == {"total": 2}

    # One worker claims; another cannot until the lease lapses; the holder may renew.
    later = T0 + dt.timedelta(seconds=30)
    assert store.batch_claim("s1", "w1", later, T0)
    assert not store.batch_claim("s1", "w2", later, T0)
    assert store.batch_claim("s1", "w1", later, T0)
    assert store.batch_claim(
        "s1", "w2", later + dt.timedelta(seconds=30), later + dt.timedelta(seconds=1)
    )

    store.batch_end("s1", status="completed", at=later, counts={"total": 2, "completed": 2})
    assert [r.submission_id for r in store.batches()] == ["s2"]
    ended = [r for r in store.batches(open=False) if r.submission_id == "s1"][0]
    assert ended.ended_at == later and ended.counts == {"total": 2, "completed": 2}
    assert store.batch_keys("s1") == [] and store.batch_submitted(["k-a", "k-b"]) == set()
    assert not store.batch_claim("s1", "w3", later, later)  # ended: nothing to claim
    # Its keys may go into a new submission now.
    assert store.batch_intent(_record("s4", later), ["k-a"]) == ["k-a"]
    assert [r.submission_id for r in store.batches(via="openai")] == ["s2", "s4"]
    assert store.batches(via="other") == []


# -- turns: whose round it is to check a batch ---------------------------------------------------


def test_a_turn_is_one_owners_per_slot(store):
    assert store.batch_turns(["s1", "s2"], owner="a", slot=7) == {"s1", "s2"}
    assert store.batch_turns(["s1", "s2", "s3"], owner="b", slot=7) == {"s3"}
    assert store.batch_turns(["s1", "s2"], owner="a", slot=7) == {"s1", "s2"}  # kept
    # The next slot's turn goes to whoever asks first.
    assert store.batch_turns(["s1"], owner="b", slot=8) == {"s1"}
    assert store.batch_turns(["s1", "s2"], owner="a", slot=8) == {"s2"}
    assert store.batch_turns([], owner="a", slot=8) == set()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_turns_keep_out_another_store_on_the_same_database(kind, tmp_path):
    import pgserver
    from tarry.snapshots import PostgresStore, SQLiteStore

    if kind == "sqlite":
        one, two = SQLiteStore(tmp_path / "t.db"), SQLiteStore(tmp_path / "t.db")
    else:
        one = pgserver.scratch_store()
        two = PostgresStore(pgserver.server_dsn(), schema=one.schema)
    assert one.batch_turns(["s1"], owner="a", slot=1) == {"s1"}
    assert two.batch_turns(["s1", "s2"], owner="b", slot=1) == {"s2"}
    assert one.batch_turns(["s1", "s2"], owner="a", slot=1) == {"s1"}
    # s1 ended: its turn is given back, and s3's is taken.
    assert one.batch_turns(["s3"], owner="a", slot=1) == {"s3"}
    assert two.batch_turns(["s1", "s3"], owner="b", slot=1) == {"s1"}
    one.close()  # its turns are given back
    assert two.batch_turns(["s1", "s2", "s3"], owner="b", slot=1) == {"s1", "s2", "s3"}
    two.close()
    if kind == "sqlite":  # the lock file's descriptor is closed with its last store
        from tarry.snapshots.batch_turns import FileLocks

        assert not [p for p in FileLocks._files if p.startswith(str(tmp_path.resolve()))]


def test_asking_for_turns_writes_nothing(tmp_path):
    from tarry.snapshots import SQLiteStore

    store = SQLiteStore(tmp_path / "t.db")
    changes = store._db.total_changes
    store.batch_turns(["s1", "s2"], owner="a", slot=1)
    store.batch_turns(["s1", "s2"], owner="a", slot=2)
    assert store._db.total_changes == changes
    store.close()
