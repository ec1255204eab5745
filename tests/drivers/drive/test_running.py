"""The registry of drives in this process: an abort reaches the drive it was meant for."""

from __future__ import annotations

from types import SimpleNamespace

from tarry.drivers.drive.local_drives import Running


def test_an_abort_for_a_drive_that_is_ending_never_stops_the_next_one() -> None:
    # A drive writes its pause (a new token), and before it leaves the registry another thread
    # uses that token: a second drive of the session begins. An abort asked of the first must
    # not stop the second, and the first's end must not unregister the second.
    running = Running()
    first, second = SimpleNamespace(watch=False), SimpleNamespace(watch=False)
    running.started("s", first)
    assert running.request_abort("s", True)
    assert first.watch  # its engine now asks the drive at every checkpoint
    running.started("s", second)
    assert "s" not in running.aborts
    running.ended("s", first)
    assert running.sessions == {"s": second}
    assert running.request_abort("s", False) and running.aborts == {"s": False}
    running.ended("s", second)
    assert running.sessions == {} and running.aborts == {}
    assert not running.request_abort("s", True)
