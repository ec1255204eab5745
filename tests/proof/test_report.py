"""The proof report fills docs/guarantees.md from the campaigns' results, and never hides one."""

from __future__ import annotations

import json
from pathlib import Path

from proof import report

PAGE = "# Guarantees\n\nprose\n\n<!-- proof:start -->\nold\n<!-- proof:end -->\n\nafter\n"


def _result(name: str, failures: int = 0) -> dict:
    return {
        "name": name,
        "trials": 1000,
        "failures": failures,
        "seconds": 12.5,
        "seed": 3,
        "figures": {"sigkills": 1234},
        "failure_examples": ["trial 9"] if failures else [],
    }


def test_the_figures_replace_only_the_marked_block(tmp_path: Path) -> None:
    for name in report.CAMPAIGNS:
        (tmp_path / f"{name}.json").write_text(json.dumps(_result(name)))
    page = tmp_path / "guarantees.md"
    page.write_text(PAGE)
    assert report.main([str(tmp_path), str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Guarantees\n\nprose\n") and text.endswith("\n\nafter\n")
    assert "old" not in text and "1,000" in text and "sigkills: 1,234" in text


def test_a_missing_or_failed_campaign_is_shown_and_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "crash.json").write_text(json.dumps(_result("crash", failures=2)))
    page = tmp_path / "guarantees.md"
    page.write_text(PAGE)
    assert report.main([str(tmp_path), str(page)]) == 1
    text = page.read_text()
    assert "FAILURE: trial 9" in text and text.count("not run") == len(report.CAMPAIGNS) - 1


def test_the_real_page_has_the_block() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "guarantees.md"
    assert report.START in page.read_text() and report.END in page.read_text()
