"""The flows a Runtime knows, and which of them may continue a stored session."""

from __future__ import annotations

from tarry.engine.errors import FlowMismatch, InvalidFlow, UnknownFlow
from tarry.engine.flow import Flow
from tarry.engine.state import SessionState
from tarry.snapshots.records import SessionRecord


class FlowRegistry:
    """Flows by name: every flow given to `Runtime(flows=...)` or run by the Runtime."""

    __slots__ = ("_flows",)

    def __init__(self) -> None:
        self._flows: dict[str, Flow] = {}

    def register(self, flow: Flow) -> Flow:
        if not isinstance(flow, Flow):
            msg = f"expected a tarry.Flow (got {flow!r})"
            raise InvalidFlow(msg)
        self._flows[flow.name] = flow
        return flow

    def get(self, name: str) -> Flow | None:
        return self._flows.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._flows

    def flow_for(
        self, record: SessionRecord, flow: Flow | None, allow_changed: bool, state: SessionState
    ) -> Flow:
        """The flow that continues `record`: `flow` if given, else the one registered by its
        name; FlowMismatch when its fingerprint differs and `allow_changed` is not set."""
        if flow is None:
            flow = self._flows.get(record.flow)
            if flow is None:
                raise UnknownFlow(record.flow)
        elif not isinstance(flow, Flow):
            msg = f"flow= must be a tarry.Flow (got {flow!r})"
            raise InvalidFlow(msg)
        if flow.fingerprint == record.fingerprint:
            return flow
        if not allow_changed:
            msg = (
                f"session {record.session_id!r} was started by flow {record.flow!r} with "
                f"fingerprint {record.fingerprint}, but the flow given has {flow.fingerprint}; "
                f"pass allow_changed=True to resume with a repaired flow"
            )
            raise FlowMismatch(msg)
        check_position(flow, state)
        return flow


def check_position(flow: Flow, state: SessionState) -> None:
    """A repaired flow must still contain every container entered and the paused element."""
    for frame in state.container_stack:
        element = flow.find(frame.path)
        if element is None or element.kind != frame.kind:
            msg = f"the repaired flow has no {frame.kind} at {'/'.join(map(str, frame.path))}"
            raise FlowMismatch(msg)
    for name in state.outputs:
        if flow.find((name,)) is None:
            msg = f"the repaired flow has no top-level element {name!r}, which already completed"
            raise FlowMismatch(msg)
    # The element where the run waits for a value, or where it failed, must still be there.
    if state.pause is not None and state.pause.awaits_value:
        at, where = state.pause.path, "waits"
    elif state.error is not None:
        at, where = state.error.path, "failed"
    else:
        return
    if at and flow.find(at) is None:
        msg = f"the repaired flow has no element at {'/'.join(map(str, at))}, where the run {where}"
        raise FlowMismatch(msg)
