"""Round trips to PostgreSQL per run and per resume, counted in the wire protocol.

libpq's trace logs every message the client sends (F) and receives (B) on a connection. A
round trip is the client sending and then waiting for the server's answer: each switch from
sending to receiving in the trace. The store gets one connection (max_size=1), so the trace
sees every statement of the Runtime. Needs a server (see tests/pgserver.py).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pgserver
import pytest
import tarry
from tarry import Flow, Gate, Runtime, step

#: What a resume may cost: one statement that uses the token (and records the resume), one
#: that writes the run's events, snapshot and waits back.
RESUME_ROUND_TRIPS = 2
#: What a run that pauses may cost: one statement that creates the session, one that writes it.
RUN_ROUND_TRIPS = 2


def noop(ctx: Any) -> None:
    return None


FLOW = Flow("round_trips", [step(noop, "before"), Gate("review"), step(noop, "after")])


class Trace:
    """The libpq trace of a connection, read and emptied by `round_trips()`."""

    def __init__(self, pgconn: Any) -> None:
        from psycopg.pq import Trace as Flags

        self.pgconn = pgconn
        self.fd, self.path = tempfile.mkstemp(prefix="tarry_trace_")
        pgconn.trace(self.fd)
        pgconn.set_trace_flags(Flags.SUPPRESS_TIMESTAMPS | Flags.REGRESS_MODE)

    def round_trips(self) -> int:
        """Switches from sending to receiving since the last call."""
        with open(self.path) as f:
            lines = [line for line in f.read().splitlines() if line[:2] in ("F\t", "B\t")]
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        turns = 0
        for before, after in zip(lines, lines[1:], strict=False):
            if before[0] == "F" and after[0] == "B":
                turns += 1
        return turns

    def close(self) -> None:
        self.pgconn.untrace()
        os.close(self.fd)
        os.unlink(self.path)


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch, ticks: Any) -> Iterator[tuple[Runtime, Trace]]:
    """A Runtime on a one-connection PostgresStore whose connection is traced."""
    # The store's "signed tokens" mark is asked at most once a second (drivers/tokens.py): a
    # slow machine must not see that read inside the counted calls. Nor a drive's tick (once a
    # second: a lease renewal, a stop read, a progress write; `ticks` holds them) or a round
    # of the lease keeper's thread (a renewal).
    from tarry.drivers.drive.lease_keeper import LeaseKeeper

    monkeypatch.setattr(LeaseKeeper, "_run", lambda self: None)
    monkeypatch.setattr("tarry.drivers.tokens.RECHECK_SECONDS", 3600.0)
    store = pgserver.scratch_store(min_size=1, max_size=1)
    rt = Runtime(store=store)
    out = rt.run(FLOW)  # warm: the connection is made, the mark read
    rt.resume(out.token, True)
    with store._pool.connection() as conn:
        trace = Trace(conn.pgconn)
    try:
        yield rt, trace
    finally:
        trace.close()
        store.close()


def test_a_resume_makes_two_round_trips(traced: tuple[Runtime, Trace]) -> None:
    rt, trace = traced
    for _ in range(3):  # the first few prepare their statements on the server
        out = rt.run(FLOW)
        assert out.paused
        trace.round_trips()
        done = rt.resume(out.token, {"approved": True, "by": "ann"})
        assert done.ok
        assert trace.round_trips() <= RESUME_ROUND_TRIPS
    assert [e.type for e in rt.session(done.session_id).events()][-3:] == [
        "node.started",
        "node.completed",
        "run.completed",
    ]


def test_a_run_that_pauses_makes_two_round_trips(traced: tuple[Runtime, Trace]) -> None:
    rt, trace = traced
    for _ in range(3):
        trace.round_trips()
        out = rt.run(FLOW)
        assert out.paused
        assert trace.round_trips() <= RUN_ROUND_TRIPS


def test_a_resume_in_another_runtime_reads_before_it_uses_the_token(
    traced: tuple[Runtime, Trace],
) -> None:
    """A Runtime that did not write the pause reads the token and the session first: two
    round trips more, and the resume is the same."""
    rt, trace = traced
    out = rt.run(FLOW)
    other = Runtime(store=rt.store, flows=[FLOW])
    trace.round_trips()
    done = other.resume(out.token, True)
    assert done.ok
    assert trace.round_trips() <= RESUME_ROUND_TRIPS + 2
    with pytest.raises(tarry.TokenAlreadyUsed):
        rt.resume(out.token, True)
