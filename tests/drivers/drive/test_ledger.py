"""The ledger hands the store each unwritten item and result once, under its ForEach's key."""

from __future__ import annotations

from tarry.drivers.drive.ledger import ITEMS, RESULTS, StoreLedger
from tarry.snapshots import MemoryStore
from tarry.snapshots.codec.pack import dumps, loads
from tarry.snapshots.records import SessionRecord, path_key


def _ledger() -> tuple[MemoryStore, StoreLedger]:
    store = MemoryStore()
    store.create(SessionRecord("s", "f", "running", b"x"))
    return store, StoreLedger(store, "s")


def test_results_of_one_foreach_are_taken_under_its_key_in_order() -> None:
    _, ledger = _ledger()
    path = ("items",)
    ledger.put_items(path, ["a", "b"])
    for i, out in enumerate([None, 7, {"k": (1, 2)}]):
        ledger.put_result(path, i, out)
    taken = ledger.take()
    key_i, key_r = ITEMS + path_key(path), RESULTS + path_key(path)
    assert taken == [
        (key_i, 0, dumps("a")),
        (key_i, 1, dumps("b")),
        (key_r, 0, dumps(None)),
        (key_r, 1, dumps(7)),
        (key_r, 2, dumps({"k": (1, 2)})),
    ]
    assert ledger.take() == []  # taken once


def test_results_of_several_foreachs_keep_each_its_own_key() -> None:
    store, ledger = _ledger()
    outer, inner = ("outer",), ("outer", 0, "inner")
    # Equal paths that are other objects count as the same ForEach.
    puts = [(inner, 0, "x"), (tuple(list(inner)), 1, "y"), (outer, 0, ["x", "y"]), (inner, 0, "z")]
    for p, i, v in puts:
        ledger.put_result(p, i, v)
    taken = ledger.take()
    assert taken == [(RESULTS + path_key(p), i, dumps(v)) for p, i, v in puts]
    store.put_values("s", taken)
    assert [loads(b) for b in store.get_values("s", RESULTS + path_key(inner), 2)] == ["z", "y"]
    assert [loads(b) for b in store.get_values("s", RESULTS + path_key(outer), 1)] == [["x", "y"]]
