"""The quick slice of the poison campaign, and proof that its oracle notices a violation."""

from __future__ import annotations

import random
from pathlib import Path

from proof import poison


def test_the_quick_slice_finds_no_failure() -> None:
    result = poison.campaign(seed=3)
    assert result["failures"] == 0, result["failure_examples"]
    f = result["figures"]
    for store in ("sqlite", "postgres"):
        if f.get("postgres") and store == "postgres":
            continue  # no server on this laptop (the campaign fails under CI instead)
        assert all(f[f"{store}_poisoned_{k}"] >= 1 for k in poison.KINDS)
        assert f[f"{store}_healthy_completed"] == f[f"{store}_sessions"] - f[f"{store}_poisoned"]
        assert f[f"{store}_rounds_raised"] == 0


def _set_up(tmp_path: Path) -> tuple[str, dict[str, str], Path, dict]:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    ledger = tmp_path / "ledger"
    poisoned = poison.setup(url, 20, random.Random(1), ledger)
    return url, poisoned, ledger, poison._before(url, 20)


def test_sessions_nobody_resumed_are_reported(tmp_path: Path) -> None:
    url, poisoned, ledger, before = _set_up(tmp_path)
    failures, counts = poison.check(url, 20, poisoned, ledger, before)
    assert counts["healthy_completed"] == 0
    assert sum("healthy" in f for f in failures) == 20 - len(poisoned)


def test_a_step_run_twice_and_a_touched_poisoned_session_are_reported(tmp_path: Path) -> None:
    url, poisoned, ledger, before = _set_up(tmp_path)
    poison.worker_round(url)  # one clean round resumes every healthy session once
    healthy = next(f"p{i:05d}" for i in range(20) if f"p{i:05d}" not in poisoned)
    with ledger.open("a") as f:
        f.write(healthy + "\n")  # as if its step had run a second time
    missing = next(sid for sid, kind in poisoned.items() if kind == "missing")
    before[missing] = (b"other", "paused", 0)  # as if something had written to it
    failures, _ = poison.check(url, 20, poisoned, ledger, before)
    assert any(healthy in f and "2 times" in f for f in failures)
    assert any(missing in f and "was changed" in f for f in failures)
