"""GET /api/sessions/{sid}/items: the items of an open ForEach, a page at a time, each with its
status by index (done, running, waiting, failed, not_started), costing the page shown."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import tarry
from support import WAIT
from tarry import Flow, ForEach, Gate

pytest.importorskip("starlette")

from starlette.testclient import TestClient  # noqa: E402
from tarry.drivers.http import create_app  # noqa: E402


def client(rt: tarry.Runtime) -> TestClient:
    return TestClient(create_app(rt), base_url="http://127.0.0.1:8765", client=("127.0.0.1", 1))


def statuses(body: dict[str, Any]) -> list[str]:
    assert [i["index"] for i in body["items"]] == list(
        range(body["offset"], body["offset"] + len(body["items"]))
    )
    return [i["status"] for i in body["items"]]


def gate_at_two(ctx):
    return ctx.item


SEQUENTIAL = Flow(
    "sequential",
    [
        ForEach(
            "items",
            list(range(5)),
            [gate_at_two, tarry.Branch("third", when=lambda c: c.index == 2, then=Gate("ok"))],
        )
    ],
)


def test_a_sequential_foreach_paused_at_its_third_item() -> None:
    rt = tarry.Runtime(flows=[SEQUENTIAL])
    out = rt.run(SEQUENTIAL)
    assert out.paused
    body = client(rt).get(f"/api/sessions/{out.session_id}/items?path=items").json()
    assert statuses(body) == ["done", "done", "waiting", "not_started", "not_started"]
    assert body["size"] == 5 and body["path"] == "items"
    assert body["counts"] == {
        "done": 2,
        "running": 0,
        "waiting": 1,
        "failed": 0,
        "not_started": 2,
    }
    page = client(rt).get(f"/api/sessions/{out.session_id}/items?path=items&offset=1&limit=2")
    assert statuses(page.json()) == ["done", "waiting"]


WIDE = Flow(
    "wide",
    [
        ForEach(
            "items",
            list(range(30)),
            [tarry.Branch("check", when=lambda c: c.index % 3 == 0, then=Gate("ok"))],
            concurrency=4,
        )
    ],
)


def test_a_concurrent_foreach_with_waiting_lanes_kept_in_wait_rows(tmp_path: Path) -> None:
    rt = tarry.Runtime(store=f"sqlite:///{tmp_path / 'w.db'}", flows=[WIDE])
    out = rt.run(WIDE)
    assert out.paused
    api = client(rt)
    body = api.get(f"/api/sessions/{out.session_id}/items?path=items&limit=30").json()
    # Four lanes wait (0, 3, 6, 9: the concurrency, so no more start); the snapshot parked
    # them in their wait rows, which say their indexes.
    expected = ["waiting" if i % 3 == 0 else "done" for i in range(10)] + ["not_started"] * 20
    assert statuses(body) == expected
    assert body["counts"] == {
        "done": 6,
        "running": 0,
        "waiting": 4,
        "failed": 0,
        "not_started": 20,
    }
    page = api.get(f"/api/sessions/{out.session_id}/items?path=items&offset=3&limit=4").json()
    assert statuses(page) == ["waiting", "done", "done", "waiting"]


def boom(ctx):
    if ctx.index == 1:
        raise ValueError("item 1 is bad")
    return ctx.index


FRAGILE = Flow("fragile", [ForEach("items", list(range(4)), boom)])


def test_the_failed_item_is_marked() -> None:
    rt = tarry.Runtime(flows=[FRAGILE])
    out = rt.run(FRAGILE)
    assert out.failed
    body = client(rt).get(f"/api/sessions/{out.session_id}/items?path=items").json()
    assert statuses(body) == ["done", "failed", "not_started", "not_started"]
    assert body["counts"]["failed"] == 1


RELEASE = threading.Event()
ENTERED = threading.Event()


def slow(ctx):
    if ctx.index == 2:
        ENTERED.set()
        RELEASE.wait(WAIT)
    return ctx.index


RUNNING = Flow("running_items", [ForEach("items", list(range(5)), slow)])


def test_a_running_item() -> None:
    RELEASE.clear()
    ENTERED.clear()
    rt = tarry.Runtime(flows=[RUNNING])
    runner = threading.Thread(target=lambda: rt.run(RUNNING, durability="step"), daemon=True)
    runner.start()
    try:
        assert ENTERED.wait(WAIT)
        (sid,) = [s.session_id for s in rt.sessions()]
        body = client(rt).get(f"/api/sessions/{sid}/items?path=items").json()
        assert statuses(body) == ["done", "done", "running", "not_started", "not_started"]
        assert body["counts"]["running"] == 1
    finally:
        RELEASE.set()
        runner.join(WAIT)


class Counting:
    """A store that counts the reads of out-of-line values and of wait rows."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.store, name)
        if name in ("get_value", "get_values", "waits"):
            self.calls.append(name)
        return found


def test_a_page_reads_no_item_nor_result_however_long_the_foreach() -> None:
    big = Flow("big", [ForEach("items", list(range(20_000)), [Gate("ok")])])
    rt = tarry.Runtime(flows=[big])
    out = rt.run(big)
    counting = Counting(rt.store)
    view = rt.session(out.session_id)
    view._store = counting  # noqa: SLF001 - count what the page reads
    from tarry.drivers.reading.items import items_page

    page = items_page(view, "items", offset=19_990, limit=50)
    assert [i["status"] for i in page.items] == ["not_started"] * 10
    assert page.counts["not_started"] == 19_999 and page.counts["waiting"] == 1
    assert counting.calls == []  # no item, no result, no wait row read


def test_bad_requests() -> None:
    rt = tarry.Runtime(flows=[SEQUENTIAL])
    out = rt.run(SEQUENTIAL)
    api = client(rt)
    sid = out.session_id
    missing = api.get(f"/api/sessions/{sid}/items")
    assert missing.status_code == 400 and missing.json()["error"] == "BadRequest"
    closed = api.get(f"/api/sessions/{sid}/items?path=nope")
    assert closed.status_code == 400 and "open ones: items" in closed.json()["message"]
    assert api.get(f"/api/sessions/{sid}/items?path=items&limit=0").status_code == 400
    assert api.get(f"/api/sessions/{sid}/items?path=items&limit=1001").status_code == 400
    assert api.get("/api/sessions/nosuch/items?path=items").status_code == 404
