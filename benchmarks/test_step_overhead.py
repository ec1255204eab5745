"""Workload 1, step overhead: a chain of no-op steps and a ForEach/batch over as many items,
no persistence; tarry, the peers and the floor in the same run."""

from __future__ import annotations

import bench_floor
import bench_tarry
import pytest
from bench_support import Sizes, label
from tarry import Runtime

# -- floor ---------------------------------------------------------------------------------------


def test_floor_plain_loop(benchmark, sizes: Sizes) -> None:
    label(benchmark, "chain", "floor", per=sizes.steps, variant="plain loop")
    benchmark(bench_floor.plain_loop(sizes.steps))


def test_floor_yield_from(benchmark, sizes: Sizes) -> None:
    label(benchmark, "chain", "floor", per=sizes.steps, variant="3-deep yield from")
    out = benchmark(bench_floor.yield_from(sizes.steps))
    assert len(out) == sizes.steps


# -- tarry ---------------------------------------------------------------------------------------


def test_tarry_chain(benchmark, sizes: Sizes) -> None:
    label(benchmark, "chain", "tarry", per=sizes.steps)
    rt, flow = Runtime(), bench_tarry.chain(sizes.steps)
    out = benchmark(rt.run, flow)
    assert out.ok


def test_tarry_foreach(benchmark, sizes: Sizes) -> None:
    label(benchmark, "foreach", "tarry", per=sizes.steps)
    rt, flow = Runtime(), bench_tarry.batch(sizes.steps)
    out = benchmark(rt.run, flow)
    assert out.ok and len(out.output) == sizes.steps


# -- PocketFlow ----------------------------------------------------------------------------------


def test_pocketflow_chain(benchmark, sizes: Sizes) -> None:
    pytest.importorskip("pocketflow")
    import bench_pocketflow

    label(benchmark, "chain", "pocketflow", per=sizes.steps)
    flow = bench_pocketflow.chain(sizes.steps)
    benchmark(flow.run, {})


def test_pocketflow_batch_flow(benchmark, sizes: Sizes) -> None:
    pytest.importorskip("pocketflow")
    import bench_pocketflow

    label(benchmark, "foreach", "pocketflow", per=sizes.steps, variant="BatchFlow")
    flow, shared = bench_pocketflow.batch_flow(sizes.steps)
    benchmark(flow.run, shared)


def test_pocketflow_batch_node(benchmark, sizes: Sizes) -> None:
    pytest.importorskip("pocketflow")
    import bench_pocketflow

    label(benchmark, "foreach", "pocketflow", per=sizes.steps, variant="BatchNode")
    node, shared = bench_pocketflow.batch_node(sizes.steps)
    benchmark(node.run, shared)


# -- LangGraph -----------------------------------------------------------------------------------


def test_langgraph_chain(benchmark, sizes: Sizes) -> None:
    pytest.importorskip("langgraph")
    import bench_langgraph as lg

    label(benchmark, "chain", "langgraph", per=sizes.steps)
    graph = lg.chain(sizes.steps)
    cfg = {"recursion_limit": lg.RECURSION_LIMIT}
    benchmark.pedantic(graph.invoke, ({"x": 0}, cfg), rounds=5, warmup_rounds=1)


def test_langgraph_loop(benchmark, sizes: Sizes) -> None:
    pytest.importorskip("langgraph")
    import bench_langgraph as lg

    label(benchmark, "foreach", "langgraph", per=sizes.steps)
    graph = lg.loop(sizes.steps)
    cfg = {"recursion_limit": lg.RECURSION_LIMIT}
    out = benchmark.pedantic(
        graph.invoke, ({"i": 0, "results": []}, cfg), rounds=5, warmup_rounds=1
    )
    assert len(out["results"]) == sizes.steps
