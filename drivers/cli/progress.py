"""How far each running ForEach is, while `tarry run`/`resume` drives a session.

Rich progress bars on a terminal (rich comes with the `cli` extra), plain lines otherwise; both
on stderr, so stdout keeps only the outcome. Fed by `Runtime.subscribe`: a ForEach's
`node.started` event carries its size and each `container.iteration_completed` moves it on.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from tarry.drivers.runtime import Runtime
from tarry.engine.state import events as ev
from tarry.engine.state.events import Event
from tarry.engine.state.records import ContainerFrame

Path = tuple[Any, ...]


def path_text(path: Iterable[Any]) -> str:
    """A run path as `items/3/check`; the flow itself is `(flow)`."""
    return "/".join(map(str, path)) or "(flow)"


@contextmanager
def show_progress(
    rt: Runtime, session_id: str, frames: Iterable[ContainerFrame] = ()
) -> Iterator[None]:
    """Show the progress of the session's ForEach loops while the block runs. `frames`: the
    container stack of a session about to be resumed, whose loops are already under way."""
    shown: Progress = PlainProgress()
    if sys.stderr.isatty():
        bars = RichProgress()
        if bars.available:
            shown = bars
    for frame in frames:
        if frame.kind == "foreach" and frame.size is not None:
            shown.start(frame.path, frame.size, frame.completed_iterations)
    unsubscribe = rt.subscribe(shown.on_event, session_id=session_id)
    try:
        with shown:
            yield
    finally:
        unsubscribe()


class Progress:
    """Follows a session's events and counts each running ForEach's finished iterations."""

    def __init__(self) -> None:
        self.loops: dict[Path, tuple[int, int]] = {}  # path -> (done, size)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def on_event(self, event: Event) -> None:
        path = tuple(event.path)
        if event.type == ev.NODE_STARTED and event.data.get("kind") == "foreach":
            self.start(path, int(event.data.get("size") or 0), 0)
        elif path in self.loops and event.type == ev.ITERATION_COMPLETED:
            done, size = self.loops[path]
            self.loops[path] = (done + 1, size)
            self.advance(path, done + 1, size)
        elif path in self.loops and event.type in (ev.NODE_COMPLETED, ev.NODE_FAILED):
            done, size = self.loops.pop(path)
            self.finish(path, done, size, event.type == ev.NODE_COMPLETED)

    def start(self, path: Path, size: int, done: int) -> None:
        self.loops[tuple(path)] = (done, size)

    def advance(self, path: Path, done: int, size: int) -> None:
        pass

    def finish(self, path: Path, done: int, size: int, ok: bool) -> None:
        pass


class PlainProgress(Progress):
    """A line when a ForEach starts, at every tenth of it, and when it ends: a log, not a
    display, so a loop of 10,000 items still writes a dozen lines. Loops nested in a running
    ForEach are counted but not written (there is one per outer iteration)."""

    def start(self, path: Path, size: int, done: int) -> None:
        super().start(path, size, done)
        if not self._nested(path):
            _line(f"{path_text(path)} {done}/{size}")

    def advance(self, path: Path, done: int, size: int) -> None:
        if done < size and done % max(1, math.ceil(size / 10)) == 0 and not self._nested(path):
            _line(f"{path_text(path)} {done}/{size}")

    def finish(self, path: Path, done: int, size: int, ok: bool) -> None:
        if not self._nested(path):
            _line(f"{path_text(path)} {done}/{size} {'done' if ok else 'failed'}")

    def _nested(self, path: Path) -> bool:
        return any(len(outer) < len(path) and path[: len(outer)] == outer for outer in self.loops)


class RichProgress(Progress):
    """A bar per running ForEach. A nested loop's bar goes when the loop ends (there is one
    per outer iteration); a top-level loop's stays, full."""

    def __init__(self) -> None:
        super().__init__()
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as Bars
        except ImportError:  # the `cli` extra is not installed
            self.available = False
            return
        self.available = True
        self._tasks: dict[Path, Any] = {}
        self._bars = Bars(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )

    def __enter__(self) -> RichProgress:
        self._bars.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._bars.stop()

    def start(self, path: Path, size: int, done: int) -> None:
        super().start(path, size, done)
        self._tasks[tuple(path)] = self._bars.add_task(path_text(path), total=size, completed=done)

    def advance(self, path: Path, done: int, size: int) -> None:
        self._bars.update(self._tasks[path], completed=done)

    def finish(self, path: Path, done: int, size: int, ok: bool) -> None:
        task = self._tasks.pop(path)
        if len(path) > 1:
            self._bars.remove_task(task)
        else:
            self._bars.update(task, completed=done)


def _line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- a count of work done: `tarry deliver --file` ----------------------------------------------


class Counted:
    """How much of a counted job is done: a rich bar on a terminal, else a line per update."""

    def __init__(self, total: int | None, label: str) -> None:
        self.total = total
        self.label = label
        self._bars: Any = None
        if sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
                from rich.progress import Progress as Bars
            except ImportError:  # the `cli` extra is not installed
                return
            self._bars = Bars(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=Console(stderr=True),
            )
            self._task = self._bars.add_task(label, total=total)
            self._bars.start()

    def update(self, done: int) -> None:
        if self._bars is not None:
            self._bars.update(self._task, completed=done)
        else:
            of = f"/{self.total:,}" if self.total is not None else ""
            _line(f"{self.label} {done:,}{of} lines")

    def close(self) -> None:
        if self._bars is not None:
            self._bars.stop()


def count_progress(total: int | None, label: str) -> Counted:
    """Progress of a job of `total` units (None: not known in advance) on stderr."""
    return Counted(total, label)
