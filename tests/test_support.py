"""The test helpers' own promises (tests/support.py)."""

from __future__ import annotations

from typing import Any

import pytest
import support
from hypothesis.errors import FlakyStrategyDefinition


def _machine_runs(monkeypatch: pytest.MonkeyPatch, ends: list[BaseException | None]) -> list[Any]:
    """Stand in for hypothesis's runner: each run ends as `ends` says (None: it passes)."""
    import hypothesis.stateful

    runs: list[Any] = []

    def run(factory: Any, *, settings: Any) -> None:
        runs.append((factory, settings))
        end = ends[len(runs) - 1]
        if end is not None:
            raise end

    monkeypatch.setattr(hypothesis.stateful, "run_state_machine_as_test", run)
    return runs


def test_a_machine_cut_short_by_inconsistent_generation_runs_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = _machine_runs(monkeypatch, [FlakyStrategyDefinition("replayed"), None])
    support.run_machine("factory", "settings")
    assert runs == [("factory", "settings")] * 2


def test_a_machine_cut_short_every_time_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _machine_runs(monkeypatch, [FlakyStrategyDefinition("replayed")] * 3)
    with pytest.raises(FlakyStrategyDefinition):
        support.run_machine("factory", "settings")
    assert len(runs) == support.MACHINE_ATTEMPTS


def test_a_broken_promise_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _machine_runs(monkeypatch, [AssertionError("message taken twice"), None])
    with pytest.raises(AssertionError, match="taken twice"):
        support.run_machine("factory", "settings")
    assert len(runs) == 1
