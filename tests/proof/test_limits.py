"""The quick slice of the bounds campaign, and proof that its oracles notice a violation."""

from __future__ import annotations

from proof import limits


def test_the_quick_slice_finds_no_failure() -> None:
    result = limits.campaign(seed=7)
    assert result["failures"] == 0, result["failure_examples"]
    figures = result["figures"]
    assert figures["values_accepted"] > 0 and figures["values_refused"] > 0
    assert figures["store_sessions_held_at_most"] <= limits.KEEP


def test_a_limit_enforced_loosely_is_caught() -> None:
    _, failures, _ = limits._limits(seed=1, trials=100, enforced=limits.LIMIT + 150)
    assert any("over the limit" in f for f in failures)


def test_a_limit_enforced_too_strictly_is_caught() -> None:
    _, failures, _ = limits._limits(seed=1, trials=100, enforced=limits.LIMIT - 150)
    assert any("refused" in f for f in failures)


def test_a_growing_worker_is_a_leak() -> None:
    assert limits.late_growth([100, 100, 100, 100, 100]) == 0
    assert limits.late_growth([100, 200, 300, 400, 5000]) > limits.FLAT_KB
