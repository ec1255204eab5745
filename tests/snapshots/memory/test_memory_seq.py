"""MemoryStore checks that a run's rows follow the session's log: in O(1) for an EventLog (gap-free
by construction), and still names the first seq that does not follow."""

from __future__ import annotations

import pytest
import support
from tarry.engine.errors import ConcurrentUpdate
from tarry.engine.state.events import NODE_COMPLETED, EventLog
from tarry.snapshots import MemoryStore


def rows(*seqs: int) -> EventLog:
    return EventLog("s1", [(seq, NODE_COMPLETED, 1_000, ("a",), {"output": seq}) for seq in seqs])


def test_rows_that_follow_are_appended() -> None:
    store = MemoryStore()
    store.create(support.rec("s1"))
    store.append_events("s1", rows(1, 2, 3))
    store.append_events("s1", rows(4))
    assert [e.seq for e in store.events("s1")] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("seqs", "named"),
    [((2, 3), "seq 2 does not follow 0"), ((1, 3), "seq 3 does not follow 1")],
)
def test_rows_that_do_not_follow_are_refused_and_change_nothing(
    seqs: tuple[int, ...], named: str
) -> None:
    store = MemoryStore()
    store.create(support.rec("s1"))
    with pytest.raises(ConcurrentUpdate, match=named):
        store.append_events("s1", rows(*seqs))
    assert store.events("s1") == []
    store.append_events("s1", rows(1))
    assert [e.seq for e in store.events("s1")] == [1]


def test_a_record_made_without_its_class_sets_every_field_as_the_class_does() -> None:
    # records.record_of sets the slots itself (the memory store's copies, the drive's next
    # record): a field added to SessionRecord must be added there too.
    import datetime as dt

    import attrs
    from tarry.snapshots.records import SessionRecord, record_of

    names = [f.name for f in attrs.fields(SessionRecord)]
    at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    values = [
        "s",
        "f",
        "paused",
        b"x",
        3,
        "fp",
        2,
        "tk",
        at,
        "w",
        at,
        at,
        at,
        {"m": 1},
        "step",
        "abort",
    ]
    assert len(values) == len(names)
    made = record_of(*values)
    assert made == SessionRecord(*values)
    assert [getattr(made, n) for n in names] == values


def test_a_pause_s_wait_row_is_the_record_the_class_makes() -> None:
    # records.wait_record sets the slots itself: equal to the class's record, field for field.
    import datetime as dt

    import attrs
    from tarry.engine.state.records import PauseState
    from tarry.snapshots.codec.pack import dumps
    from tarry.snapshots.records import WaitRecord, wait_record

    at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    for pause, wake, payload in (
        (PauseState("human", "r", ("a", 1)), None, b""),
        (PauseState("external", "x", ("b",), {"p": 1}, None, at, key="k"), at, dumps({"p": 1})),
        (PauseState("system", "", (), None, at, None), at, b""),
    ):
        made = wait_record("tk", "s", pause)
        built = WaitRecord(
            "tk", "s", pause.path, pause.kind, pause.key, wake, pause.reason, payload
        )
        assert made == built
        assert [getattr(made, f.name) for f in attrs.fields(WaitRecord)] == list(
            attrs.astuple(built)
        )
