"""Helpers for tests: drive sync-or-async outcomes to the end."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import tarry


def settle(result: Any) -> tarry.Outcome:
    """An Outcome from `run`/`resume`, awaiting it on a fresh loop if it is awaitable."""
    if inspect.isawaitable(result):
        return asyncio.run(_await(result))
    return result


async def _await(aw: Any) -> Any:
    return await aw


def resume_all(rt: tarry.Runtime, out: tarry.Outcome, value: Any = None) -> tarry.Outcome:
    """Resume with `value` until the session stops pausing."""
    while out.paused:
        out = settle(rt.resume(out.token, value))
    return out
