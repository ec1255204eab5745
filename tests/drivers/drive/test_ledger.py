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


def test_results_appended_to_the_sink_are_put_results_across_reads_and_takes() -> None:
    from tarry.engine.execution import result_sink

    store, ledger = _ledger()
    path, other = ("items",), ("other",)
    put = result_sink(ledger)
    put((path, 0, "a"))
    put((other, 0, "o"))
    put((path, 1, "b"))
    # Reading the results writes this ForEach's unwritten ones; the sink still takes more.
    assert ledger.results(path, 2) == ["a", "b"]
    put((path, 2, "c"))
    taken = ledger.take()
    assert taken == [
        (RESULTS + path_key(other), 0, dumps("o")),
        (RESULTS + path_key(path), 2, dumps("c")),
    ]
    put((path, 3, "d"))
    assert ledger.take() == [(RESULTS + path_key(path), 3, dumps("d"))]


def test_a_ledger_without_a_list_of_unwritten_results_is_given_them_by_put_result() -> None:
    from tarry.engine.execution import result_sink

    got = []

    class Bare:
        def put_result(self, path: tuple[object, ...], index: int, value: object) -> None:
            got.append((path, index, value))

    result_sink(Bare())((("items",), 4, "x"))  # type: ignore[arg-type]
    assert got == [(("items",), 4, "x")]
