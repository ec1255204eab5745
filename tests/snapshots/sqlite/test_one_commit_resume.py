"""A resume of a Wait, Gate or Sleep with nothing to run before the drive's next write is one
SQLite commit: that save uses the token (`token_used=`) and consumes the message
(`mail_used=`); a resume with a step to run uses the token first, on its own, before the step
starts. A save whose token or message another took first writes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tarry
from support import rec
from tarry import Flow, ForEach, Gate, Runtime, Wait
from tarry.engine.errors import ConcurrentUpdate, TokenAlreadyUsed
from tarry.snapshots import SQLiteStore
from tarry.snapshots.store import MailGone


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "s.db") as store:
        yield store


class Commits:
    """The commits a store's connection runs, and the statements."""

    def __init__(self, store: SQLiteStore) -> None:
        self.seen: list[str] = []
        store._db.set_trace_callback(self.seen.append)

    @property
    def commits(self) -> int:
        return self.seen.count("COMMIT")


def test_a_delivery_that_ends_the_run_is_one_commit(store: SQLiteStore) -> None:
    rt = Runtime(store=store)
    flow = Flow("one", [Wait("w", key=lambda ctx: f"k/{ctx.input}")])
    out = rt.run(flow, 1)
    counted = Commits(store)
    [done] = rt.deliver("k/1", {"v": 1})
    assert done.ok and done.output == {"v": 1}
    assert counted.commits == 1
    assert store.find_token(rt._core.tokens.key(out.token)).used
    assert store.waits(out.session_id) == []
    types = [e.type for e in store.events(out.session_id)]
    assert "run.resumed" in types and types[-1] == "run.completed"


def test_a_resume_that_pauses_again_is_one_commit(store: SQLiteStore) -> None:
    rt = Runtime(store=store)
    flow = Flow("two", [Gate("a"), Gate("b")])
    first = rt.run(flow)
    counted = Commits(store)
    second = rt.resume(first.token, True)
    assert second.paused and second.pause.path == ("b",)
    assert counted.commits == 1
    with pytest.raises(tarry.TokenAlreadyUsed):
        rt.resume(first.token, True)
    assert rt.resume(second.token, True).ok


def test_a_queued_message_taken_by_a_resume_is_consumed_in_its_one_commit(
    store: SQLiteStore,
) -> None:
    rt = Runtime(store=store)
    flow = Flow("branches", [ForEach("i", [0, 1], [Wait("w", key=lambda ctx: f"b/{ctx.item}")])])
    out = rt.run(flow)  # sequential: waits on b/0
    assert out.paused
    counted = Commits(store)
    [moved] = rt.deliver("b/0", "zero")
    # The claim of b/1's queue (empty: it writes nothing) and the one save: no use of the
    # token in a transaction of its own.
    assert moved.paused and counted.commits == 2
    assert not any(sql.startswith("UPDATE tokens SET used = 1 WHERE token = '") and
                   "session_id" not in sql for sql in counted.seen)  # fmt: skip
    [done] = rt.deliver("b/1", "one")
    assert done.ok and done.output == ["zero", "one"]
    assert store.queued(key="b/0") == [] and store.queued(key="b/1") == []


def test_a_step_after_the_wait_runs_after_the_token_is_used(store: SQLiteStore) -> None:
    rt = Runtime(store=store)
    seen: list[bool] = []
    keys: dict[str, str] = {}

    def after(ctx: Any) -> Any:
        seen.append(store.find_token(keys["token"]).used)
        return ctx.prev

    out = rt.run(Flow("stepped", [Wait("w", key="s/1"), after]))
    keys["token"] = rt._core.tokens.key(out.token)
    counted = Commits(store)
    [done] = rt.deliver("s/1", 5)
    assert done.ok and seen == [True]  # used (and durable) before the step ran
    assert counted.commits == 2


class _Racing(SQLiteStore):
    """A store whose next save that uses a token finds it used by another store first."""

    other: SQLiteStore | None = None

    def save(self, record: Any, expected_version: int, **parts: Any) -> int:
        token = parts.get("token_used")
        if token is not None and self.other is not None:
            other, self.other = self.other, None
            assert other.consume_token(token) is True
        return super().save(record, expected_version, **parts)


def test_a_token_used_by_another_before_the_save_refuses_the_resume(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    store = _Racing(path)
    rt = Runtime(store=store)
    out = rt.run(Flow("raced", [Gate("g")]))
    version = store.load(out.session_id).version
    store.other = SQLiteStore(path)
    with pytest.raises(tarry.TokenAlreadyUsed):
        rt.resume(out.token, True)
    found = store.load(out.session_id)
    # Nothing of it written: the other use (which leased nothing, recorded no event) stands.
    assert found.version == version and found.status == "running"
    assert [e.type for e in store.events(out.session_id)][-1] == "run.paused"
    store.close()


def test_save_with_a_used_token_or_a_taken_message_writes_nothing(store: SQLiteStore) -> None:
    store.create(rec("s1"))
    v = store.save(rec("s1", status="paused", token="tk_1"), 0)
    mid = store.post("k", b"m", rec("s1").updated_at)
    assert store.consume_token("tk_1") is True
    with pytest.raises(TokenAlreadyUsed):
        store.save(rec("s1", status="completed"), v, token_used="tk_1")
    assert store.load("s1").version == v
    store.create(rec("s2"))
    w = store.save(rec("s2", status="paused", token="tk_2"), 0)
    with pytest.raises(TokenAlreadyUsed):  # not the session's token
        store.save(rec("s1", status="completed"), v, token_used="tk_2")
    store.discard("k")
    with pytest.raises(MailGone):
        store.save(rec("s2", status="completed"), w, token_used="tk_2", mail_used=mid)
    assert store.load("s2").version == w and not store.find_token("tk_2").used
    with pytest.raises(ConcurrentUpdate):  # the version moved: the token stays live
        store.save(rec("s2", status="completed"), w + 5, token_used="tk_2")
    assert not store.find_token("tk_2").used
    assert store.save(rec("s2", status="completed"), w, token_used="tk_2") == w + 1
    assert store.find_token("tk_2").used
