"""`import tarry` costs no more instructions than `import pocketflow` (callgrind, whole process).

Slow (it builds the wheel and runs 21 processes under valgrind) and skipped without valgrind
or PocketFlow (the `bench` extra). What a first program then loads (`from tarry import Flow,
Runtime, step`, a first run) is measured too and kept in the test's properties, unasserted:
see docs/performance.md ("Import cost").
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import import_instructions
import pytest

pytestmark = pytest.mark.slow


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
@pytest.mark.skipif(
    importlib.util.find_spec("pocketflow") is None, reason="needs pocketflow (bench extra)"
)
def test_import_tarry_costs_no_more_than_import_pocketflow(
    tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    counts = import_instructions.measure(import_instructions.install_wheel(tmp_path))
    for workload, systems in counts.items():
        for system, n in systems.items():
            record_property(f"{workload}.{system}", n)
    assert counts["import"]["tarry"] <= counts["import"]["pocketflow"], counts
