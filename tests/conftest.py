"""Shared fixtures. The tests folder (not the repo root) is put on sys.path for `support`,
so the installed package is what gets tested."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tarry

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def rt() -> tarry.Runtime:
    return tarry.Runtime()
