"""`tarry logs ID [--level LEVEL] [--follow] [--json]`, through the command itself."""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import WAIT
from tarry import Flow, Gate, ManualClock, Runtime

TARRY = str(Path(sys.executable).parent / "tarry")
log = logging.getLogger("app.cli")
T0 = dt.datetime(2025, 1, 2, 3, 4, 5, 123, tzinfo=dt.UTC)


@pytest.fixture(autouse=True)
def app_logs_enabled() -> Iterator[None]:
    log.setLevel(logging.DEBUG)
    yield
    log.setLevel(logging.NOTSET)


def fetch(ctx: Any) -> None:
    log.info("fetched %d rows", 2)
    log.warning("row 2 has no id")


def report(ctx: Any) -> None:
    log.error("approved by %s", ctx.prev["by"])


FLOW = Flow("logged", [fetch, Gate("ok"), report])


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("TARRY_STORE", "TARRY_TOKEN")}


def tarry(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TARRY, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=_env()
    )


def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [TARRY, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=_env(),
    )


class Lines:
    """A process's stdout read on a thread, so that a test waits for a line with a timeout."""

    def __init__(self, stream: Any) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self._queue.put(x) for x in stream], daemon=True).start()

    def wait_for(self, text: str, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            if text in line:
                return
        raise AssertionError(f"no line with {text!r} within {timeout} s; saw {self.seen!r}")


def url(folder: Path) -> str:
    return f"sqlite:///{folder / 'runs.db'}"


def test_logs_prints_a_line_per_record(tmp_path: Path) -> None:
    out = Runtime(store=url(tmp_path), clock=ManualClock(T0)).run(FLOW)
    shown = tarry("logs", out.session_id, "--store", url(tmp_path), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        "2025-01-02 03:04:05.000123 INFO app.cli fetch: fetched 2 rows",
        "2025-01-02 03:04:05.000123 WARNING app.cli fetch: row 2 has no id",
    ]
    warned = tarry(
        "logs",
        out.session_id,
        "--level",
        "warning",
        "--json",
        "--store",
        url(tmp_path),
        cwd=tmp_path,
    )
    assert warned.returncode == 0, warned.stderr
    (only,) = [json.loads(line) for line in warned.stdout.splitlines()]
    assert only == {
        "seq": 2,
        "at": T0.isoformat(),
        "level": "WARNING",
        "levelno": 30,
        "logger": "app.cli",
        "message": "row 2 has no id",
        "path": ["fetch"],
    }


def test_logs_says_how_many_were_dropped(tmp_path: Path) -> None:
    out = Runtime(store=url(tmp_path), max_logs=1).run(FLOW)
    shown = tarry("logs", out.session_id, "--store", url(tmp_path), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    first, second = shown.stdout.splitlines()
    assert first.startswith("… 1 more records dropped")
    assert second.endswith("WARNING app.cli fetch: row 2 has no id")


def test_logs_follow_stops_when_the_session_ends(tmp_path: Path) -> None:
    rt = Runtime(store=url(tmp_path), flows=[FLOW])
    out = rt.run(FLOW)
    follower = start(
        "logs",
        out.session_id,
        "--follow",
        "--interval",
        "0.1",
        "--store",
        url(tmp_path),
        cwd=tmp_path,
    )
    lines = Lines(follower.stdout)
    lines.wait_for("row 2 has no id")
    assert follower.poll() is None  # still following
    assert rt.resume(out.token, {"approved": True, "by": "ann"}).ok
    lines.wait_for("ERROR app.cli report: approved by ann")
    assert follower.wait(timeout=WAIT) == 0


def test_logs_of_an_unknown_session_or_level_fail(tmp_path: Path) -> None:
    Runtime(store=url(tmp_path)).run(FLOW)
    unknown = tarry("logs", "nope", "--store", url(tmp_path), cwd=tmp_path)
    assert unknown.returncode == 2 and "nope" in unknown.stderr  # as `tarry show`
    sid = Runtime(store=url(tmp_path)).sessions()[0].session_id
    bad = tarry("logs", sid, "--level", "LOUD", "--store", url(tmp_path), cwd=tmp_path)
    assert bad.returncode == 2 and "LOUD" in bad.stderr
    assert "Traceback" not in unknown.stderr + bad.stderr
