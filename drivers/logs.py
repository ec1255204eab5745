"""Capturing the Python `logging` records that a session's steps emit.

How, at no cost to a step that logs nothing:

- One `logging` record factory for the process (`install`, idempotent), wrapping the one in
  place: logging calls it only for a record its logger is enabled for, after the level check.
  It asks one context variable (`engine.observed.WATCHER`) for the drive that runs in this
  context and, when there is none, hands the record back at once. A factory rather than a
  handler on the root logger, because a handler there would silence `logging.lastResort` and
  turn `logging.basicConfig()` into a no-op for the whole program.
- A drive sets that variable once, for as long as it runs (`StepLogs.around`), and every step
  it runs inherits it: a sync step in place, an async step where the drive awaits it, a
  concurrent lane's sync step on the shared pool and async step as its own task (the
  concurrent container passes the drive's context on, see engine/containers/concurrent.py).
  The path of the step is read when a record comes, not set per step (`engine.observed`).
- The drive buffers the records (its last `max_logs`) and hands them to its next write of the
  session (`SessionStore.save(logs=...)`): no commit of their own.

Not captured: records below the Runtime's `log_level`; records of the "tarry" loggers (the
runtime's own); records logged outside a drive, by another session's drive, or by a thread a
step starts itself (a new thread does not inherit the step's context; pass it with
`contextvars.copy_context().run` to have its records captured); records logged after the drive
ended (a task the step left running).
"""

from __future__ import annotations

import collections
import sys
import threading
from typing import TYPE_CHECKING, Any

from tarry.engine.describe import describe
from tarry.engine.errors import InvalidArgument
from tarry.engine.is_awaitable import is_awaitable
from tarry.engine.observed import STEP_PATH, WATCHER, last_path
from tarry.snapshots.log_records import LogBatch, LogRecord

if TYPE_CHECKING:
    import logging
    from collections.abc import Awaitable, Callable

    from tarry.drivers.clock import Clock

#: Records kept per session by default (the last ones: older ones are dropped and counted).
MAX_LOGS = 1000
#: The longest message kept, in bytes of UTF-8 (the traceback included); longer ones are cut.
MAX_MESSAGE_BYTES = 4096
#: logging.INFO, without importing logging.
INFO = 20

_installed = False
_install_lock = threading.Lock()
#: Guards every capture's buffer (lanes log from the pool's threads): one lock for all, taken
#: only for a captured record or a write that has some, rather than one made per drive.
_lock = threading.Lock()


def level_number(value: Any, name: str = "log_level") -> int:
    """A logging level given as a number or a name ("WARNING", "warning"), as a number;
    InvalidArgument for anything else."""
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, str):
        import logging

        number = logging.getLevelName(value.upper())
        if type(number) is int:
            return number
    msg = (
        f"{name} must be a logging level: an int >= 0 or a level name such as 'WARNING' "
        f"(got {describe(value)})"
    )
    raise InvalidArgument(msg)


class LogSettings:
    """A Runtime's capture settings: records at `level` or above, the last `keep` per session."""

    __slots__ = ("level", "keep")

    def __init__(self, level: Any, keep: Any) -> None:
        self.level = level_number(level)
        if type(keep) is not int or keep < 0:
            msg = f"max_logs must be an int >= 0, 0 to capture nothing (got {describe(keep)})"
            raise InvalidArgument(msg)
        self.keep = keep

    def watch(self, ex: Any, clock: Clock) -> StepLogs | None:
        """The capture of one drive of the Execution `ex`; None when nothing is captured."""
        if not self.keep:
            return None
        if not _installed and "logging" in sys.modules:
            # Installed once logging is in use: a program that never imports it pays nothing.
            install()
        return StepLogs(ex, clock, self.level, self.keep)


class StepLogs:
    """The records one drive captures until its next write (thread-safe: lanes log from the
    pool's threads)."""

    __slots__ = ("ex", "clock", "level", "keep", "records", "skipped", "open")

    def __init__(self, ex: Any, clock: Clock, level: int, keep: int) -> None:
        self.ex = ex
        self.clock = clock
        self.level = level
        self.keep = keep
        #: Made with the first record: most drives capture none, and pay for nothing.
        self.records: collections.deque[LogRecord] | None = None
        #: Records dropped from `records` (over `keep`) since the last `take`.
        self.skipped = 0
        self.open = True

    def around(self, drive: Callable[..., Any], *args: Any) -> Any:
        """`drive(*args)` with this capture watching; an awaitable result watched too, when
        it is awaited (in whichever task awaits it)."""
        token = WATCHER.set(self)
        try:
            result = drive(*args)
        finally:
            WATCHER.reset(token)
        if is_awaitable(result):
            return self._watching(result)
        return result

    async def _watching(self, awaitable: Awaitable[Any]) -> Any:
        token = WATCHER.set(self)
        try:
            return await awaitable
        finally:
            WATCHER.reset(token)

    def capture(self, record: logging.LogRecord) -> None:
        levelno = record.levelno
        name = record.name
        if levelno < self.level or not self.open or name == "tarry" or name.startswith("tarry."):
            return
        path = STEP_PATH.get()
        if path is None:
            path = last_path(self.ex)
        entry = LogRecord(
            0, self.clock.now(), record.levelname, levelno, name, _message(record), path
        )
        with _lock:
            records = self.records
            if records is None:
                records = self.records = collections.deque(maxlen=self.keep)
            elif len(records) == self.keep:
                self.skipped += 1
            records.append(entry)

    def take(self) -> LogBatch | None:
        """What was captured since the last take, for the drive's write; None if nothing."""
        if not self.records:
            return None
        with _lock:
            batch = LogBatch(tuple(self.records), self.skipped, self.keep)
            self.records.clear()
            self.skipped = 0
        return batch

    def close(self) -> None:
        """The drive ended: records that come later (a task or thread it left) are not its."""
        self.open = False


def _message(record: logging.LogRecord) -> str:
    try:
        message = record.getMessage()
    except Exception as exc:  # a bad format: logging would print a traceback instead
        message = f"{record.msg!r} % {record.args!r} (unformattable: {type(exc).__name__})"
    if record.exc_info and record.exc_info[0] is not None:
        import logging

        message = f"{message}\n{logging.Formatter().formatException(record.exc_info)}"
    elif record.exc_text:
        message = f"{message}\n{record.exc_text}"
    encoded = message.encode("utf-8", "replace")
    if len(encoded) > MAX_MESSAGE_BYTES:
        cut = encoded[: MAX_MESSAGE_BYTES - 40].decode("utf-8", "ignore")
        message = f"{cut} … [{len(encoded) - len(cut.encode())} bytes cut]"
    return message


def install() -> None:
    """Wrap logging's record factory, once per process (idempotent)."""
    global _installed
    import logging

    with _install_lock:
        if _installed:
            return
        previous = logging.getLogRecordFactory()
        watcher = WATCHER.get

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            watch = watcher()
            if watch is not None:
                watch.capture(record)
            return record

        logging.setLogRecordFactory(factory)
        _installed = True
