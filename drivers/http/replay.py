"""`GET /api/sessions/{sid}/replay`: a session's stored events again, at a playback speed.

Each event is sent after the gap that separated it from the one before, divided by `speed`,
and never more than MAX_GAP seconds of playback (a run that waited a day for a person
replays that wait in two seconds). `speed=0` or `max`: no delay. The stream reads the store a
page at a time and ends with an `end` event whose data is `{"last_seq": n}`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio
from tarry.drivers.http.sse import PAGE, Streams, event_message, message, retry_hint
from tarry.engine.state.events import Event

#: The longest pause between two replayed events, in seconds of playback.
MAX_GAP = 2.0
#: The largest speed accepted.
MAX_SPEED = 1_000_000.0


def replay_feed(
    read: Callable[[int, int], list[Event]],
    after: int,
    speed: float,
    streams: Streams,
    *,
    page: int = PAGE,
    sleep: Callable[[float], object] = anyio.sleep,
) -> AsyncIterator[bytes]:
    """The events with seq > `after`, paced by their stored times; `speed` 0: at once."""

    async def feed() -> AsyncIterator[bytes]:
        nonlocal after
        yield retry_hint()
        previous = None
        while not streams.closing:
            events = await anyio.to_thread.run_sync(read, after, page)
            for event in events:
                if previous is not None and speed > 0:
                    gap = (event.at - previous).total_seconds() / speed
                    if gap > 0:
                        await sleep(min(gap, MAX_GAP))  # type: ignore[misc]
                previous = event.at
                yield event_message(event)
                after = event.seq
                if streams.closing:
                    return
            if len(events) < page:
                break
        yield message({"last_seq": after}, event="end")

    return feed()
