"""Every pause registers its wait in the store (what a poll or a delivery reads without the
snapshot), and a resume, an end or a cancel takes it away."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import tarry
from tarry.snapshots import WaitRecord, dumps


def flow() -> tarry.Flow:
    return tarry.Flow(
        "waits",
        [
            tarry.Wait("job", kind="external", reason="batch", payload={"id": 7}, timeout=60),
            tarry.Gate("ok", "approve?"),
        ],
    )


def test_a_pause_registers_its_wait_and_a_resume_drops_it(store: Any) -> None:
    clock = tarry.ManualClock()
    rt = tarry.Runtime(store=store, clock=clock)
    out = rt.run(flow(), session_id="s1")
    (wait,) = store.waiting()
    assert wait == WaitRecord(
        wait.token, "s1", out.pause.path, "external", None,
        clock.now() + dt.timedelta(seconds=60), "batch", dumps({"id": 7}),
    )  # fmt: skip
    assert store.waits("s1") == [wait]
    assert store.load("s1").token == wait.token
    out = rt.resume(out.token, "done")
    (gate,) = store.waiting()
    assert (gate.kind, gate.reason, gate.wake_at) == ("human", "approve?", None)
    assert tarry.snapshots.loads(gate.payload) == {"message": "approve?", "assignee": None}
    assert gate.token != wait.token
    rt.resume(out.token, True)
    assert store.waiting() == []


def test_a_cancelled_session_leaves_no_wait(store: Any) -> None:
    rt = tarry.Runtime(store=store)
    out = rt.run(flow(), session_id="s1")
    rt.cancel(out.token)
    assert store.waiting() == []
    with pytest.raises(tarry.TokenAlreadyUsed):
        rt.resume(out.token, "late")
