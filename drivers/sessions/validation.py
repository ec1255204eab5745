"""The last check before a stored session is continued: its state fits the flow it goes on with.

`resuming.prepare` runs it before the session's token is used and `recovery.recover` before it
writes anything, so a snapshot that cannot be continued is refused with a typed error and left
exactly as it was, instead of using up its token and failing half-way (an IndexError deep in a
container, a frame silently ignored and its container run again).
"""

from __future__ import annotations

from tarry.engine.elements.flow import Flow
from tarry.engine.errors import FlowMismatch, InconsistentSnapshot
from tarry.engine.state.consistency import inconsistency
from tarry.engine.state.records import SessionState


def validate(session_id: str, fingerprint: str, state: SessionState, flow: Flow) -> None:
    """Raise unless `state` (of session `session_id`, whose flow has `fingerprint`) can be
    continued with `flow`: InconsistentSnapshot when it does not fit the flow that wrote it,
    FlowMismatch when `flow` is a changed one that does not fit where the session stands.
    Reads nothing from the store: O(depth of the container stack).

    (A ForEach's items and results live in the store, read by index as the run needs them;
    one found missing fails that ForEach with SnapshotError, see engine/containers/foreach.py.)"""
    if state.session_id != session_id:
        raise InconsistentSnapshot(session_id, f"it holds session {state.session_id!r}")
    problem = inconsistency(flow, state)
    if problem is not None:
        if flow.fingerprint == fingerprint:
            raise InconsistentSnapshot(session_id, problem)
        msg = (
            f"session {session_id!r} cannot continue with the changed flow {flow.name!r} "
            f"(fingerprint {flow.fingerprint}; it was started with {fingerprint}): {problem}"
        )
        raise FlowMismatch(
            msg,
            session_id=session_id,
            flow=flow.name,
            fingerprint=fingerprint,
            known=(flow.fingerprint,),
        )
