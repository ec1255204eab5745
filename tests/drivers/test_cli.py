"""The `tarry` command reads sessions from a store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tarry import Flow, ForEach, Gate, Runtime


def tarry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tarry", *args], capture_output=True, text=True,
                          timeout=60, cwd="/")


def test_ls_show_events(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    out = Runtime(store=url).run(Flow("cli", [ForEach("f", [1, 2], Gate("g"))]))
    listed = tarry("--store", url, "ls")
    assert listed.returncode == 0 and out.session_id in listed.stdout and "paused" in listed.stdout
    shown = tarry("--store", url, "show", out.session_id)
    assert "in foreach f: iteration 0, child 0" in shown.stdout
    assert "paused (human) at f/0/g" in shown.stdout
    lines = tarry("--store", url, "events", out.session_id, "--jsonl").stdout.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, len(lines) + 1))


def test_unknown_session_is_a_usage_error(tmp_path: Path) -> None:
    result = tarry("--store", f"sqlite:///{tmp_path / 'x.db'}", "show", "nope")
    assert result.returncode == 2 and "no session 'nope'" in result.stderr
