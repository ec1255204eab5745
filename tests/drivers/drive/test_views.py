"""Large values are read through read-only views: `ctx.input`, `ctx.item`, `ctx.prev` and
`ctx.outputs[...]` of a value over 256 bytes encoded are not copied per read, read like the
value, and refuse every change with a TypeError that says to copy them. Small values are
private copies, as before (test_values.py). Either way nothing a step does to what it read
changes what later steps, a resume or a recovery see."""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import tarry
from support import Crash, settle
from tarry import Flow, ForEach, ManualClock, Runtime, Wait, step
from tarry.snapshots import MemoryStore

#: Large: 200 rows of about 40 bytes encoded each.
ROWS = [{"id": i, "name": f"row {i}", "tags": ["a", "b"]} for i in range(200)]
BIG = {"rows": ROWS, "limits": {"max": 5}}
SMALL = {"rows": [{"id": 1, "tags": ["a"]}], "limits": {"max": 5}}


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


def node(fn: Callable[[Any], Any], name: str, mode: str) -> Any:
    """`fn` as a step named `name`, sync or async."""
    if mode == "sync":
        return step(fn, name)

    async def run(ctx: Any) -> Any:
        await asyncio.sleep(0)
        return fn(ctx)

    return step(run, name)


def run(rt: Runtime, flow: Flow, input: Any = None, **kwargs: Any) -> Any:
    return settle(rt.run(flow, input, **kwargs))


def refused(change: Callable[[], Any]) -> str:
    """The message of the error `change` raises: a TypeError and a TarryError."""
    with pytest.raises(TypeError) as info:
        change()
    assert isinstance(info.value, tarry.TarryError)
    return str(info.value)


# -- ctx.input -----------------------------------------------------------------------------------


def test_a_large_input_is_one_view_however_often_it_is_read(mode: str) -> None:
    seen: list[Any] = []

    def read(ctx):
        seen.extend([ctx.input, ctx.input, ctx.input["rows"], ctx.input["rows"]])

    flow = Flow("inp", [node(read, "a", mode), node(read, "b", mode)])
    assert run(Runtime(), flow, BIG).ok
    first = seen[0]
    assert all(view is first for view in seen[0::4] + seen[1::4])  # one per run, not per read
    assert all(rows is seen[2] for rows in seen[2::4])  # nested views too


def test_a_large_input_reads_like_the_value(mode: str) -> None:
    def read(ctx):
        inp = ctx.input
        rows = inp["rows"]
        return {
            "eq": inp == BIG and rows == ROWS and rows[-1] == ROWS[-1],
            "len": len(inp) == 2 and len(rows) == 200,
            "types": isinstance(inp, dict) and isinstance(rows, list),
            "json": json.loads(json.dumps(inp)) == BIG,
            "iter": [r["id"] for r in rows] == list(range(200)),
            "items": dict(inp.items())["limits"] == {"max": 5},
            "get": inp.get("nope", 7) == 7 and inp.get("limits") == {"max": 5},
            "in": "rows" in inp and ROWS[3] in rows,
            "slice": rows[1:3] == ROWS[1:3] and rows[::-1][0] == ROWS[-1],
            "reversed": next(reversed(rows)) == ROWS[-1],
            "sorted": sorted(rows, key=lambda r: -r["id"])[0]["id"] == 199,
            "concat": (rows + [1])[-1] == 1 and ([1] + rows)[1] == ROWS[0],
            "merge": (inp | {"x": 1})["x"] == 1 and ({"x": 1} | inp)["rows"] == ROWS,
            "unpack": {**inp}["limits"] == {"max": 5},
            "pickle": pickle.loads(pickle.dumps(inp)) == BIG,
        }

    out = run(Runtime(), Flow("inp", [node(read, "read", mode)]), BIG)
    assert out.ok, out.error
    assert out.output == {key: True for key in out.output}


@pytest.mark.parametrize(
    "change",
    [
        lambda inp: inp.__setitem__("x", 1),
        lambda inp: inp.pop("rows"),
        lambda inp: inp.update(x=1),
        lambda inp: inp.setdefault("x", []),
        lambda inp: inp.clear(),
        lambda inp: inp["limits"].__setitem__("max", 0),
        lambda inp: inp["rows"].append({}),
        lambda inp: inp["rows"].sort(key=id),
        lambda inp: inp["rows"].__delitem__(0),
        lambda inp: inp["rows"][0]["tags"].append("c"),
        lambda inp: inp["rows"][0].__setitem__("id", -1),
        lambda inp: [r for r in inp["rows"]][0]["tags"].pop(),
        lambda inp: list(inp["rows"])[0]["tags"].extend("x"),
        lambda inp: copy.copy(inp)["rows"].reverse(),
        lambda inp: dict(inp)["limits"].popitem(),
    ],
)
def test_changing_a_large_input_is_refused_and_changes_nothing(change: Any) -> None:
    messages: list[str] = []

    def tamper(ctx):
        messages.append(refused(lambda: change(ctx.input)))

    flow = Flow("inp", [step(tamper, "tamper"), step(lambda ctx: ctx.input, "read")])
    rt = Runtime()
    out = run(rt, flow, BIG)
    assert out.ok and out.output == BIG
    assert type(out.output) is dict and type(out.output["rows"]) is list  # stored as plain values
    assert "ctx.input" in messages[0] and "copy" in messages[0]
    assert rt.session(out.session_id).state.input == BIG


def test_the_error_names_what_was_changed() -> None:
    def tamper(ctx):
        ctx.input["rows"][3]["tags"].append("c")

    out = run(Runtime(), Flow("inp", [step(tamper, "tamper")]), BIG)
    assert out.failed and out.error.type == "ReadOnlyView"
    assert "ctx.input['rows'][3]['tags'] is read-only" in out.error.message
    assert "append() cannot change it" in out.error.message
    assert "copy.deepcopy(ctx.input['rows'][3]['tags'])" in out.error.message


def test_a_copy_of_a_view_is_the_steps_own(mode: str) -> None:
    def change(ctx):
        mine = copy.deepcopy(ctx.input)
        mine["rows"][0]["tags"].append("c")
        mine["x"] = 1
        shallow = dict(ctx.input)
        shallow["y"] = 2
        return [type(mine["rows"]) is list, mine["rows"][0]["tags"], sorted(shallow)]

    flow = Flow("inp", [node(change, "change", mode), node(lambda ctx: ctx.input, "read", mode)])
    rt = Runtime()
    out = run(rt, flow, BIG)
    assert rt.session(out.session_id).state.outputs["change"] == [
        True,
        ["a", "b", "c"],
        ["limits", "rows", "y"],
    ]
    assert out.output == BIG


def test_a_small_input_is_still_a_private_copy_per_read(mode: str) -> None:
    seen: list[Any] = []

    def tamper(ctx):
        seen.append(ctx.input is ctx.input)
        ctx.input["rows"][0]["tags"].append("b")  # a copy: allowed, and changes nothing
        inp = ctx.input
        inp["x"] = 1
        seen.append(inp)

    flow = Flow("inp", [node(tamper, "tamper", mode), node(lambda ctx: ctx.input, "read", mode)])
    out = run(Runtime(), flow, SMALL)
    assert out.output == SMALL and seen == [False, {**SMALL, "x": 1}]


# -- ctx.item, ctx.prev, ctx.outputs -------------------------------------------------------------


def test_a_large_item_is_a_view_a_small_one_a_copy(mode: str) -> None:
    items = [{"id": 0, "blob": ROWS[:20]}, {"id": 1, "blob": []}]  # large, small
    seen: list[Any] = []

    def read(ctx):
        item = ctx.item
        seen.append((item is ctx.item, item is ctx.prev))
        try:
            item["id"] = -1
        except TypeError:
            seen.append("refused")
        return ctx.item["id"]

    flow = Flow("items", [ForEach("each", items, [node(read, "read", mode)])])
    out = run(Runtime(), flow)
    assert out.output == [0, 1]
    assert seen == [(True, True), "refused", (False, False)]


def test_large_outputs_read_as_prev_and_by_name_are_views(mode: str) -> None:
    seen: list[Any] = []

    def read(ctx):
        seen.append((type(ctx.prev).__name__, ctx.prev is ctx.prev, ctx.outputs["load"] == ROWS))
        refused(lambda: ctx.prev.append(1))
        refused(lambda: ctx.outputs["load"][0].update(id=5))
        return len(ctx.outputs["load"])

    flow = Flow(
        "outs",
        [node(lambda ctx: ROWS, "load", mode), node(read, "read", mode)],
    )
    rt = Runtime()
    out = run(rt, flow)
    assert out.output == 200 and seen == [("ListView", True, True)]
    assert rt.session(out.session_id).state.outputs["read"] == 200


def test_a_large_prev_inside_a_container_is_a_view_too(mode: str) -> None:
    def read(ctx):
        return [type(ctx.prev).__name__, type(ctx.outputs["make"]).__name__, ctx.prev == ROWS]

    body = [node(lambda ctx: ROWS, "make", mode), node(read, "read", mode)]
    out = run(Runtime(), Flow("nested", [ForEach("each", [1, 2], body)]))
    assert out.output == [["ListView", "ListView", True]] * 2


def test_a_large_top_level_output_read_inside_a_concurrent_foreach(mode: str) -> None:
    def read(ctx):
        return [ctx.outputs["load"][ctx.item]["id"], type(ctx.outputs["load"]).__name__]

    flow = Flow(
        "lanes",
        [
            node(lambda ctx: ROWS, "load", mode),
            ForEach("each", [3, 4, 5], node(read, "read", mode), concurrency=3),
        ],
    )
    out = run(Runtime(), flow)
    assert out.ok, out.error
    assert out.output == [[3, "ListView"], [4, "ListView"], [5, "ListView"]]


def test_state_stays_a_copy_to_change_and_assign_even_when_large(mode: str) -> None:
    def setup(ctx):
        ctx.state["rows"] = ctx.input["rows"]  # a view assigned: stored as the plain value

    def change(ctx):
        rows = ctx.state["rows"]
        rows.append({"id": 200})
        ctx.state["rows"] = rows

    flow = Flow(
        "state",
        [
            node(setup, "setup", mode),
            node(change, "change", mode),
            node(lambda ctx: len(ctx.state["rows"]), "read", mode),
        ],
    )
    rt = Runtime()
    out = run(rt, flow, BIG)
    assert out.output == 201
    assert type(rt.session(out.session_id).state.shared["rows"]) is list


# -- per-item callables, resume and recovery -----------------------------------------------------


def test_views_in_wait_key_callables_and_after_resume(mode: str) -> None:
    views: list[Any] = []

    def key(ctx):
        views.append(ctx.input)
        return f"{ctx.input['rows'][ctx.item]['name']}/{ctx.item}"

    def read(ctx):
        refused(lambda: ctx.input["rows"].clear())
        return [ctx.input == BIG, ctx.prev]

    flow = Flow(
        "keyed",
        [
            ForEach("each", list(range(5)), Wait("w", key=key), concurrency=None),
            node(read, "read", mode),
        ],
    )
    rt = Runtime(store=MemoryStore())
    out = run(rt, flow, BIG)
    assert out.paused and len(out.pauses) == 5
    assert all(view is views[0] for view in views)  # one view for the whole run
    for i in range(5):
        [done] = rt.deliver(f"row {i}/{i}", i)
    done = settle(done)
    assert done.ok and done.output == [True, [0, 1, 2, 3, 4]]


def test_a_recovered_run_sees_the_values_the_normal_run_saw(mode: str) -> None:
    def make(hook: Callable[[], None]) -> Flow:
        def tamper(ctx):
            refused(lambda: ctx.input["rows"][0].clear())
            refused(lambda: ctx.item["blob"].pop())
            return [ctx.item["id"], len(ctx.input["rows"])]

        def late(ctx):
            hook()
            return [ctx.input == BIG, ctx.outputs["each"]]

        items = [{"id": 0, "blob": ROWS[:20]}, {"id": 1, "blob": ROWS[20:40]}]
        return Flow(
            "recover",
            [ForEach("each", items, node(tamper, "tamper", mode)), node(late, "late", mode)],
        )

    normal = run(Runtime(), make(lambda: None), BIG)
    assert normal.ok and normal.output == [True, [[0, 200], [1, 200]]]

    store, clock, died = MemoryStore(), ManualClock(), []

    def hook() -> None:
        if not died:
            died.append(True)
            raise Crash

    rt = Runtime(store=store, durability="step", clock=clock)
    with pytest.raises(Crash):
        run(rt, make(hook), BIG)
    clock.advance(3600)
    other = Runtime(store=store, durability="step", clock=clock, flows=[make(lambda: None)])
    [recovered] = other.recover()
    recovered = settle(recovered)
    assert recovered.ok and recovered.output == normal.output
    view = other.session(recovered.session_id)
    assert view.state.input == BIG and view.derive_state() == view.state
