"""Helpers for tests: drive sync-or-async outcomes to the end; serve an app on loopback; wait for
a condition or move a drive's ticks by hand (no test depends on the machine's speed); build
store records."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import tarry


def settle(result: Any) -> tarry.Outcome:
    """An Outcome from `run`/`resume`, awaiting it on a fresh loop if it is awaitable."""
    if inspect.isawaitable(result):
        return asyncio.run(_await(result))
    return result


async def _await(aw: Any) -> Any:
    return await aw


#: Runs of a state machine that may end early because hypothesis found its data generation
#: inconsistent (see run_machine) before the test fails.
MACHINE_ATTEMPTS = 3


def run_machine(factory: Any, settings: Any) -> None:
    """`run_state_machine_as_test(factory, settings=settings)`, run again when hypothesis stops
    it with FlakyStrategyDefinition: a step of a concurrent lane runs on a thread, so on a
    loaded machine an example that hypothesis replays can take another path through the lanes
    (another lane done before a crash; another rule enabled after it). That ends the search; it
    is no broken promise, which a rule's or an invariant's AssertionError reports (and a failure
    that does not happen again on replay is FlakyFailure, which fails the test at once). The
    run is repeated, up to MACHINE_ATTEMPTS times in all; it fails if every run ends so."""
    from hypothesis.errors import FlakyStrategyDefinition
    from hypothesis.stateful import run_state_machine_as_test

    for attempt in range(1, MACHINE_ATTEMPTS + 1):
        try:
            run_state_machine_as_test(factory, settings=settings)
            return
        except FlakyStrategyDefinition:
            if attempt == MACHINE_ATTEMPTS:
                raise


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
    wait_until(lambda: server.started, "uvicorn to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()


# --- waiting without depending on the machine's speed -----------------------------------------

#: How long a test waits for something that normally takes milliseconds. A bound against a
#: hang, not a speed requirement: the wait ends as soon as the condition holds, so a fast
#: machine loses nothing and a loaded one (CI under stress-ng) does not fail.
WAIT = 60.0


def wait_until(condition: Any, what: str, timeout: float = WAIT, every: float = 0.02) -> Any:
    """Poll `condition()` until it returns something true, and return that; fails naming
    `what` after `timeout` seconds (a hang, not a slow machine)."""
    deadline = time.monotonic() + timeout
    while not (got := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(every)
    return got


class Ticks:
    """The monotonic clock a drive ticks by, moved only by hand (`advance`).

    A drive reads stored stop requests (`Runtime.abort`/`cancel` from another Runtime or
    process), writes its progress and renews its lease at its first checkpoint a TICK after
    the last (drivers/drive/drive.py): with this clock that happens when the test says so,
    not when a second of the machine's time has passed. Install it with the `ticks` fixture
    (tests/conftest.py): it stands in for `time.monotonic` in drive.py and in the engine
    modules that check whether a tick is due. A lease keeper thread (which renews the leases
    of long steps by the real clock) is unaffected."""

    def __init__(self) -> None:
        self.now = time.monotonic()
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


# --- a headless browser on a live server -----------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
#: ms, for every wait on a page (Playwright's unit): WAIT, a bound against a hang.
PAGE_TIMEOUT = int(WAIT * 1000)


def need_chromium() -> Any:
    """playwright.sync_api; skips the calling test without Chromium or Playwright (fails under
    CI without Chromium)."""
    import pytest

    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing")
        pytest.skip(f"{CHROMIUM} is missing")
    return pytest.importorskip("playwright.sync_api")


def bounded_expect(sync_api: Any) -> Any:
    """playwright.sync_api's `expect`, every assertion of it bounded by PAGE_TIMEOUT (the
    option is global: set by each module that asserts on a page). A page's
    `set_default_timeout` does not reach `expect`, whose assertions otherwise give up after
    5 s: on a loaded machine a page may take longer to show what it will show."""
    sync_api.expect.set_options(timeout=PAGE_TIMEOUT)
    return sync_api.expect


@attrs.frozen
class Browsing:
    base: str  # the live server's URL
    page: Any  # a Playwright page, every wait bounded by PAGE_TIMEOUT
    expect: Any  # playwright.sync_api.expect
    errors: list[str]  # the page's uncaught errors


@contextmanager
def browsing(app: Any, width: int = 1360, height: int = 900) -> Iterator[Browsing]:
    """Serve `app` (`live`) and open a page of headless Chromium on it."""
    sync_api = need_chromium()
    with live(app) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.set_default_timeout(PAGE_TIMEOUT)
            yield Browsing(base, page, bounded_expect(sync_api), errors)
        finally:
            browser.close()


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
