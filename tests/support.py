"""Helpers for tests: drive sync-or-async outcomes to the end; serve an app on loopback; build
store records."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def live(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on a free loopback port in a thread; yields its base URL."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


# --- store records ---------------------------------------------------------------------------

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def rec(sid: str = "s1", **changes: Any) -> Any:
    """A `SessionRecord` for store tests: a running session of flow "f" made at T0."""
    from tarry.snapshots import SessionRecord

    fields: dict[str, Any] = {
        "flow": "f",
        "status": "running",
        "state": b"state",
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(changes)
    return SessionRecord(session_id=sid, **fields)


class Crash(BaseException):
    """Stands for the process dying: nothing in tarry catches it."""
