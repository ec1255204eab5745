"""What `Runtime(...)` refuses: a store or clock it cannot use is a typed InvalidArgument at
construction, with what it expected, never an error at the first run."""

from __future__ import annotations

import pytest
from tarry import InvalidArgument, ManualClock, Runtime, TarryError
from tarry.snapshots import MemoryStore


@pytest.mark.parametrize(
    ("store", "says"),
    [
        ("foo://x", "unknown store URL 'foo://x'"),
        ("sqlite://", "unknown store URL"),
        ("sqlite:///", "names no file"),
        ("runs.db", "unknown store URL"),
        (5, "store must be a URL"),
        (object(), "store must be a URL"),
        ({"sessions": []}, "store must be a URL"),
    ],
)
def test_a_store_that_is_neither_a_url_nor_a_store_is_refused(store, says):
    with pytest.raises(InvalidArgument, match=says) as caught:
        Runtime(store)
    assert isinstance(caught.value, TarryError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("clock", [5, "now", object()])
def test_a_clock_without_now_is_refused(clock):
    with pytest.raises(InvalidArgument, match="clock must have a now"):
        Runtime(clock=clock)


def test_a_store_object_and_a_clock_object_are_taken():
    store, clock = MemoryStore(), ManualClock()
    rt = Runtime(store, clock=clock)
    assert rt.store is store and rt.clock is clock
