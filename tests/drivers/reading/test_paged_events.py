"""Paged reading through the public API: `SessionView.events(after_seq, limit)` on every store,
and `tarry events`, which reads a long log a page at a time."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pgserver
import pytest
import tarry
from tarry import Flow, ForEach, Gate, Runtime
from tarry.snapshots import MemoryStore, SQLiteStore


def work(ctx: Any) -> int:
    return ctx.item * 2


LONG = Flow("long", [ForEach("items", lambda ctx: list(range(ctx.input)), [work]), Gate("g")])


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def rt(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runtime]:
    store: Any = {
        "memory": MemoryStore,
        "sqlite": lambda: SQLiteStore(tmp_path / "p.db"),
        "postgres": pgserver.scratch_store,
    }[request.param]()
    yield Runtime(store=store, flows=[LONG])
    close = getattr(store, "close", None)
    if close is not None:
        close()


def test_a_session_log_reads_page_by_page(rt: Runtime) -> None:
    out = rt.run(LONG, 50)
    rt.resume(out.token, True)  # a log written in several writes
    view = rt.session(out.session_id)
    whole = view.events()
    assert [e.seq for e in whole] == list(range(1, len(whole) + 1))
    assert len(whole) > 200
    pages, after = [], 0
    while page := view.events(after, 17):
        assert len(page) <= 17
        pages.append(page)
        after = page[-1].seq
    assert [e for page in pages for e in page] == whole
    assert all(len(page) == 17 for page in pages[:-1])
    assert view.events(after_seq=100, limit=3) == whole[100:103]
    assert view.events(after_seq=len(whole)) == []
    assert view.events(limit=1) == whole[:1]
    assert view.derive_state() == view.state  # folded a page at a time


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"after_seq": -1}, "after_seq"),
        ({"after_seq": "3"}, "after_seq"),
        ({"after_seq": True}, "after_seq"),
        ({"after_seq": 1.0}, "after_seq"),
        ({"limit": 0}, "limit"),
        ({"limit": -5}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": "10"}, "limit"),
    ],
)
def test_bad_page_arguments_are_refused(kwargs: dict[str, Any], word: str) -> None:
    rt = Runtime()
    view = rt.session(rt.run(LONG, 2).session_id)
    with pytest.raises(tarry.InvalidArgument, match=word):
        view.events(**kwargs)


def test_tarry_events_reads_a_long_log_in_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from tarry.drivers.cli import inspecting, main

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    out = Runtime(store=url).run(LONG, 300)
    reads: list[int | None] = []
    events = SQLiteStore.events

    def counted(self: SQLiteStore, session_id: str, after_seq: int = 0, limit: int | None = None):
        reads.append(limit)
        return events(self, session_id, after_seq, limit)

    monkeypatch.setattr(SQLiteStore, "events", counted)
    monkeypatch.delenv("TARRY_STORE", raising=False)
    assert main(["--store", url, "events", out.session_id, "--jsonl"]) == 0
    lines = capsys.readouterr().out.splitlines()
    seqs = [json.loads(line)["seq"] for line in lines]
    assert seqs == list(range(1, len(lines) + 1)) and len(lines) > 2 * inspecting.PAGE
    assert reads and set(reads) == {inspecting.PAGE}
