"""Server-sent events: the wire format, the response that streams them, and one session's feed.

A feed reads from the store, never from the events a subscriber is handed: another process
sharing the store may be the one writing, and an event is only real once it is stored. The
runtime's subscribers serve as a wake-up, so in-process runs show up at once; a poll catches
everything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send
from tarry.drivers.reading.jsonable import dumps, event_to_dict
from tarry.engine.state.events import Event

log = logging.getLogger("tarry.server")

#: After a wake-up, poll this often for a while: with durability="pause" the events a
#: subscriber hears of reach the store only when the run pauses or ends.
FAST_POLL = 0.1
FAST_WINDOW = 2.0
#: How long a browser waits before reconnecting a dropped stream (milliseconds).
RETRY_MS = 1000
#: The most events a stream reads from the store at once: a stream from the start of a long log
#: reads it a page at a time, as fast as the client takes them, and holds one page at most.
PAGE = 500

KEEP_ALIVE = b": keep-alive\n\n"


def message(data: Any, *, id: str | int | None = None, event: str | None = None) -> bytes:
    """One SSE message. `data` is sent as compact JSON, which never holds a line break."""
    lines = []
    if event is not None:
        lines.append(f"event: {event}")
    if id is not None:
        lines.append(f"id: {id}")
    text = data if isinstance(data, str) else dumps(data)
    lines.append(f"data: {text}")
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def event_message(event: Event, id: str | int | None = None) -> bytes:
    """An event of a session's log as an SSE message; its id is `seq` unless given."""
    return message(event_to_dict(event), id=event.seq if id is None else id)


def retry_hint() -> bytes:
    return f"retry: {RETRY_MS}\n\n".encode("ascii")


def silence(quiet_since: float, heartbeat: float) -> bool:
    """Whether a stream quiet since `quiet_since` (monotonic) is due a keep-alive."""
    return time.monotonic() - quiet_since >= heartbeat


class Wakeup:
    """Wakes one stream's coroutine from any thread (a run's subscriber callback, a watcher)."""

    def __init__(self, *, fast: bool = True) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        #: Poll fast for a while after each wake-up (for streams that read the store).
        self._fast = fast
        self.fast_until = 0.0

    def fire(self, *_: Any) -> None:
        # A closed loop raises RuntimeError: its stream is gone, there is nothing to wake.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, poll: float) -> None:
        """Until fired, or a poll interval passed. Shortly after a wake-up, polls are fast."""
        timeout = FAST_POLL if time.monotonic() < self.fast_until else poll
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return
        finally:
            # Cleared before the caller reads, so a fire during the read is not lost.
            self._event.clear()
        if self._fast:
            self.fast_until = time.monotonic() + FAST_WINDOW


class EventStreamResponse(StreamingResponse):
    """A `text/event-stream` response that ends its body (and runs `on_close`) as soon as the
    client goes away, whatever ASGI version the server speaks: a quiet stream would otherwise
    only notice at its next write."""

    media_type = "text/event-stream"

    def __init__(
        self, content: AsyncIterator[bytes], *, on_close: Callable[[], None] | None = None
    ) -> None:
        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        super().__init__(content, headers=headers)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    with contextlib.suppress(OSError):  # the client went away mid-write
                        await self.stream_response(send)
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
            if self._on_close is not None:
                self._on_close()


class Streams:
    """The open streams of one app, so that a server shutting down can end them at once
    (a browser's EventSource never hangs up by itself)."""

    def __init__(self) -> None:
        self.closing = False
        self._open: set[Wakeup] = set()

    def opened(self, wakeup: Wakeup) -> None:
        self._open.add(wakeup)

    def closed(self, wakeup: Wakeup) -> None:
        self._open.discard(wakeup)

    def close_all(self) -> None:
        """End every stream after its current message (call on the server's loop)."""
        self.closing = True
        for wakeup in list(self._open):
            wakeup.fire()


async def session_feed(
    read: Callable[[int, int], list[Event]],
    after: int,
    wakeup: Wakeup,
    streams: Streams,
    *,
    poll: float,
    heartbeat: float,
) -> AsyncIterator[bytes]:
    """One session's events with seq > `after`, then each new one as it is stored.

    `read(after_seq, limit)` reads a page of the store (it runs in a worker thread); a full
    page is followed by the next at once. The stream ends only when the client leaves or the
    server shuts down. A comment goes out after `heartbeat` seconds of silence, so proxies and
    browsers keep the connection open.
    """
    yield retry_hint()
    quiet_since = time.monotonic()
    while True:
        try:
            events = await anyio.to_thread.run_sync(read, after, PAGE)
        except Exception:  # a busy or briefly unreachable store: try again at the next poll
            log.exception("tarry event stream: reading the store failed")
            events = []
        for event in events:
            if event.seq <= after:  # defensive: a store must not repeat, a stream never does
                continue
            yield event_message(event)
            after = event.seq
        if events:
            quiet_since = time.monotonic()
        elif silence(quiet_since, heartbeat):
            yield KEEP_ALIVE
            quiet_since = time.monotonic()
        if len(events) < PAGE:  # caught up: wait for more
            await wakeup.wait(min(poll, heartbeat))
        if streams.closing:
            return
