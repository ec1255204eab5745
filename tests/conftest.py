"""Shared fixtures. The tests folder (not the repo root) is put on sys.path for `support`,
so the installed package is what gets tested."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tarry

sys.path.insert(0, str(Path(__file__).parent))

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    pass
else:
    # No example may fail for taking long on the wall clock (a loaded CI machine): hypothesis's
    # per-example deadline and its too-slow health check are off. A test that bounds the work
    # of an example bounds its CPU time (time.process_time), which load does not change.
    settings.register_profile("tarry", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("tarry")


@pytest.fixture
def rt() -> tarry.Runtime:
    return tarry.Runtime()


@pytest.fixture
def ticks(monkeypatch: pytest.MonkeyPatch) -> object:
    """A drive's ticks moved by hand (support.Ticks): `ticks.advance(TICK)` makes the next
    checkpoint of every drive in this process tick. Stands in for the monotonic clock of the
    engine (which asks a drive at a checkpoint once its tick is due) and of drive.py."""
    import time
    import types

    from support import Ticks
    from tarry.drivers.drive import drive

    made = Ticks()
    for name, module in list(sys.modules.items()):
        if name.startswith("tarry.") and getattr(module, "monotonic", None) is time.monotonic:
            monkeypatch.setattr(module, "monotonic", made.monotonic)
    monkeypatch.setattr(drive, "time", types.SimpleNamespace(monotonic=made.monotonic))
    return made
