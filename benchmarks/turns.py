"""Systems measured in turns: stdlib only (run by any system's Python, see probes.py).

On a shared machine a system timed at one moment and another system timed a minute later see
different loads, and their ratio moves with the load (issue 28: chain ÷ PocketFlow read 1.07
and 1.98 in two runs of the same code). In turns, each round times every system once, one
right after the other (the order rotated every round), and the ratio is taken within the round:
a busy moment weighs on both sides of it alike. The report gives the median of the per-round
ratios.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def median_of_ratios(mine: Sequence[float], theirs: Sequence[float]) -> float:
    """The median over rounds of mine[i] ÷ theirs[i] (not the ratio of the medians)."""
    if len(mine) != len(theirs) or not mine:
        raise ValueError("one time per round on each side, at least one round")
    return statistics.median(a / b for a, b in zip(mine, theirs, strict=True))


def in_turns(
    calls: dict[str, Callable[[], object]],
    rounds: int,
    *,
    warmup: int = 1,
    clock: Callable[[], float] = time.process_time,
) -> dict[str, list[float]]:
    """CPU seconds of each call, once per round, in an order rotated each round."""
    names = list(calls)
    spent: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            started = clock()
            calls[name]()
            took = clock() - started
            if r >= warmup:
                spent[name].append(took)
    return spent


def ratios(spent: dict[str, list[float]], mine: str) -> dict[str, float]:
    """`mine` ÷ each other system, median of the per-round ratios."""
    return {
        name: round(median_of_ratios(spent[mine], times), 3)
        for name, times in spent.items()
        if name != mine
    }
