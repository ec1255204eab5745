"""Async use as a user with `mypy --strict` writes it (tests/test_typing.py): `run`/`resume`
may be awaited whether or not an async step was met."""

from __future__ import annotations

import asyncio

import tarry
from tarry import Context, Flow, Gate, Outcome, Runtime, step


@step(timeout=5.0)
async def fetch(ctx: Context) -> int:
    await asyncio.sleep(0)
    return 1


def plain(ctx: Context) -> int:
    return 2


flow = Flow("fetching", [fetch, Gate("approve"), plain])


async def main() -> None:
    rt = Runtime()
    out = await rt.run(flow)
    if out.paused:
        done = await rt.resume(out.token, True)
        print(done.output)
    other: Outcome = await rt.arun(flow, session_id="other")
    again: Outcome = await rt.aresume(other.token, {"approved": True, "by": "ann"})
    many: list[Outcome] = await rt.aresume_many({p.token: True for p in again.pauses if p.token})
    print(len(many))
    module_level = await tarry.run(flow, {"x": 1})
    if module_level.paused:
        print((await tarry.resume(module_level.token, True, flow=flow)).ok)


asyncio.run(main())
