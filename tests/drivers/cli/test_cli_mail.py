"""`tarry mail ls` and `tarry mail discard`: the keys holding queued messages, and dropping
them, through the real `tarry` command against a SQLite file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tarry import ManualClock, Runtime

TARRY = str(Path(sys.executable).parent / "tarry")
#: When the messages of these tests were queued (a ManualClock: no waiting in a test).
QUEUED_AT = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


def tarry(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TARRY_STORE", "TARRY_TOKEN")}
    return subprocess.run(
        [TARRY, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )


def store(folder: Path) -> str:
    return f"sqlite:///{folder / 'runs.db'}"


def queue(folder: Path, deliveries: list[tuple[str, object]], at: datetime = QUEUED_AT) -> None:
    """Queue each (key, value) as a message: nothing waits on these keys."""
    rt = Runtime(store=store(folder), clock=ManualClock(at))
    for key, value in deliveries:
        assert rt.deliver(key, value) == []


@pytest.fixture
def mail(tmp_path: Path) -> Path:
    queue(
        tmp_path,
        [("batch-7/a", 1), ("batch-7/a", 2), ("batch-7/b", 3), ("other", 4), ("has space", 5)],
    )
    return tmp_path


def lines(stdout: str) -> list[str]:
    return stdout.splitlines()


# --- ls ----------------------------------------------------------------------------------------


def test_ls_prints_one_line_per_key_by_key(mail: Path) -> None:
    r = tarry("mail", "ls", "--store", store(mail), cwd=mail)
    assert r.returncode == 0, r.stderr
    shown = lines(r.stdout)
    # A key with a space (or anything unprintable) is shown as a JSON string.
    assert [line.split("  ")[0].strip() for line in shown] == [
        "batch-7/a",
        "batch-7/b",
        '"has space"',
        "other",
    ]
    assert "2 messages" in shown[0] and "1 message " in shown[1]
    assert all("oldest 2024-05-06 07:08:09 UTC" in line for line in shown)


def test_ls_shows_how_old_the_oldest_message_is(tmp_path: Path) -> None:
    queue(tmp_path, [("late", 1)], at=datetime.now(UTC) - timedelta(hours=2, minutes=1))
    r = tarry("mail", "ls", "--store", store(tmp_path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("(2h 1m ago)"), r.stdout


def test_ls_prefix_and_limit(mail: Path) -> None:
    r = tarry("mail", "ls", "--prefix", "batch-7/", "--store", store(mail), cwd=mail)
    assert [line.split()[0] for line in lines(r.stdout)] == ["batch-7/a", "batch-7/b"]
    r = tarry("mail", "ls", "--limit", "1", "--store", store(mail), cwd=mail)
    assert [line.split()[0] for line in lines(r.stdout)] == ["batch-7/a"]
    # A prefix is literal text: no wildcards.
    r = tarry("mail", "ls", "--prefix", "batch-_", "--store", store(mail), cwd=mail)
    assert r.returncode == 0 and r.stdout == ""


def test_ls_json(mail: Path) -> None:
    r = tarry("--store", store(mail), "mail", "ls", "--prefix", "batch", "--json", cwd=mail)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [
        {"key": "batch-7/a", "count": 2, "oldest_at": QUEUED_AT.isoformat()},
        {"key": "batch-7/b", "count": 1, "oldest_at": QUEUED_AT.isoformat()},
    ]
    empty = tarry("mail", "ls", "--prefix", "zzz", "--json", "--store", store(mail), cwd=mail)
    assert empty.returncode == 0 and json.loads(empty.stdout) == []


@pytest.mark.parametrize("limit", ["0", "10001", "-3"])
def test_ls_refuses_a_limit_out_of_range(mail: Path, limit: str) -> None:
    r = tarry("mail", "ls", "--limit", limit, "--store", store(mail), cwd=mail)
    assert r.returncode == 2
    assert r.stderr.startswith("tarry: limit must be an int from 1 to 10000"), r.stderr


def test_mail_needs_a_sub_command(mail: Path) -> None:
    r = tarry("mail", "--store", store(mail), cwd=mail)
    assert r.returncode == 2 and "ls" in r.stderr and "discard" in r.stderr


# --- discard -----------------------------------------------------------------------------------


def test_discard_drops_a_keys_messages_and_says_how_many(mail: Path) -> None:
    r = tarry("mail", "discard", "batch-7/a", "--store", store(mail), cwd=mail)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "discarded 2 messages from batch-7/a\n"
    left = tarry("mail", "ls", "--json", "--store", store(mail), cwd=mail)
    assert [m["key"] for m in json.loads(left.stdout)] == ["batch-7/b", "has space", "other"]
    again = tarry("mail", "discard", "batch-7/a", "--json", "--store", store(mail), cwd=mail)
    assert again.returncode == 0 and json.loads(again.stdout) == {
        "key": "batch-7/a",
        "discarded": 0,
    }
    one = tarry("mail", "discard", "has space", "--store", store(mail), cwd=mail)
    assert one.stdout == 'discarded 1 message from "has space"\n'


@pytest.mark.parametrize("key", ["", "x" * 513])
def test_discard_refuses_a_bad_key(mail: Path, key: str) -> None:
    r = tarry("mail", "discard", key, "--store", store(mail), cwd=mail)
    assert r.returncode == 2
    assert r.stderr.startswith("tarry: a delivery key must be a str of 1 to 512 characters")
    left = tarry("mail", "ls", "--json", "--store", store(mail), cwd=mail)
    assert sum(m["count"] for m in json.loads(left.stdout)) == 5
