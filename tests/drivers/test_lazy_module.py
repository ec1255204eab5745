"""lazy_module: a Runtime family imported on first use, safely when threads race to it."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from tarry.drivers.lazy_module import lazy_module


def test_threads_that_race_to_first_use_all_see_the_whole_module(
    tmp_path: Path, monkeypatch
) -> None:
    # The module takes a while to run, so that the other threads arrive while it is in
    # sys.modules but not yet initialised; each must wait for it, not read it half-built.
    (tmp_path / "slow_family.py").write_text(
        "import time\ntime.sleep(0.3)\ndef answer():\n    return 42\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_family", raising=False)
    family = lazy_module("slow_family")
    results: list[object] = []

    def call() -> None:
        try:
            results.append(family.answer())
        except Exception as exc:  # the failure this test is about
            results.append(exc)

    threads = [threading.Thread(target=call) for _ in range(8)]
    threads[0].start()
    while "slow_family" not in sys.modules:  # the first thread is inside the import
        pass
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [42] * 8


def test_reads_see_a_patched_module(monkeypatch) -> None:
    import tarry.drivers.sessions.control as control

    family = lazy_module("tarry.drivers.sessions.control")
    assert family.abort is control.abort
    monkeypatch.setattr(control, "abort", "patched")
    assert family.abort == "patched"
