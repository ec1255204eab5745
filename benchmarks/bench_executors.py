"""The workload of test_executors.py: a CPU-bound step, defined at the top level of a module so
that a process pool's workers import it by name."""

from __future__ import annotations

import time
from typing import Any

#: Loop rounds of `crunch`: about 1 ms of pure Python on the reference machine.
ROUNDS = 30_000


def crunch(ctx: Any) -> float:
    """About 1 ms of pure Python (it holds the GIL throughout); the CPU seconds it took."""
    start = time.thread_time()
    total = 0
    for i in range(ROUNDS):
        total += i * i
    return time.thread_time() - start
