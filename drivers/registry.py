"""The flows a Runtime knows, by name and fingerprint, and which of them continues a session."""

from __future__ import annotations

import threading

from tarry.engine.elements.flow import Flow
from tarry.engine.errors import FlowMismatch, InvalidFlow, UnknownFlow
from tarry.snapshots.records import SessionRecord


class FlowRegistry:
    """Every flow given to `Runtime(flows=...)`, registered, or run by the Runtime, kept by
    (name, fingerprint): several versions of one flow live side by side, and a session is
    continued by the one whose fingerprint started it.

    A flow registered again is a no-op; another object with the same name and fingerprint (the
    module imported again) takes its place. `get(name)` is the newest registered of a name.
    """

    __slots__ = ("_flows", "_newest", "_lock")

    def __init__(self) -> None:
        self._flows: dict[tuple[str, str], Flow] = {}  # (name, fingerprint) -> flow
        self._newest: dict[str, Flow] = {}  # name -> the flow of that name registered last
        self._lock = threading.Lock()

    def register(self, flow: Flow) -> Flow:
        if not isinstance(flow, Flow):
            msg = f"expected a tarry.Flow (got {flow!r})"
            raise InvalidFlow(msg)
        key = (flow.name, flow.fingerprint)
        if self._flows.get(key) is flow:
            return flow  # the common case (every run registers its flow): no lock
        with self._lock:
            self._flows.pop(key, None)  # re-inserted last: the newest
            self._flows[key] = flow
            self._newest[flow.name] = flow
        # The flows its Child elements start: a process that can run a parent can run its
        # children (a worker that imported the parent's flow runs them too).
        for element in flow.elements():
            if element.kind == "child":
                self.register(element.flow)  # type: ignore[attr-defined]
        return flow

    def get(self, name: str) -> Flow | None:
        """The newest flow registered with this name (what a run by name would use)."""
        return self._newest.get(name)

    def version(self, name: str, fingerprint: str) -> Flow | None:
        """The flow of this name with this fingerprint, if registered."""
        return self._flows.get((name, fingerprint))

    def all(self) -> list[Flow]:
        """Every flow registered, each version of a name, by name then oldest first."""
        flows = list(self._flows.values())
        return sorted(flows, key=lambda f: f.name)  # stable: registration order within a name

    def fingerprints(self, name: str) -> tuple[str, ...]:
        """The fingerprints registered under `name`, oldest first."""
        return tuple(fp for (n, fp) in list(self._flows) if n == name)

    def __contains__(self, name: object) -> bool:
        return name in self._newest

    def matching(self, name: str, fingerprint: str, session_id: str) -> Flow:
        """The registered flow that started session `session_id` (`name`, `fingerprint`):
        UnknownFlow when none has that name, FlowMismatch when none has that fingerprint."""
        flow = self._flows.get((name, fingerprint))
        if flow is not None:
            return flow
        known = self.fingerprints(name)
        if not known:
            raise UnknownFlow(name, session_id=session_id, fingerprint=fingerprint)
        msg = (
            f"session {session_id!r} was started by flow {name!r} with fingerprint "
            f"{fingerprint}, but the flows of that name registered have "
            f"{', '.join(self._described(name, fp) for fp in known)}; register the version "
            f"that started it (Runtime(flows=[...]) holds several side by side), or resume "
            f"with allow_changed=True to continue it with a repaired flow"
        )
        raise FlowMismatch(
            msg, session_id=session_id, flow=name, fingerprint=fingerprint, known=known
        )

    def flow_for(self, record: SessionRecord, flow: Flow | None, allow_changed: bool) -> Flow:
        """The flow that continues `record`: `flow` if given, else the one registered with its
        name and fingerprint. A flow of another name is refused (FlowMismatch) even with
        `allow_changed`; another fingerprint only with it. With `allow_changed` and no `flow`,
        the newest of the name stands in for a missing version. Whether a changed flow fits
        where the session stands is checked by the caller (validate.py)."""
        name, fingerprint, sid = record.flow, record.fingerprint, record.session_id
        if flow is None:
            newest = self._newest.get(name)
            if allow_changed and newest is not None and self.version(name, fingerprint) is None:
                return newest
            return self.matching(name, fingerprint, sid)
        if not isinstance(flow, Flow):
            msg = f"flow= must be a tarry.Flow (got {flow!r})"
            raise InvalidFlow(msg)
        if flow.name != name:
            msg = (
                f"session {sid!r} belongs to flow {name!r}, but the flow given is named "
                f"{flow.name!r}; a session continues only with a flow of its own name (even "
                f"with allow_changed=True)"
            )
            raise FlowMismatch(
                msg, session_id=sid, flow=name, fingerprint=fingerprint, known=(flow.fingerprint,)
            )
        if flow.fingerprint == fingerprint or allow_changed:
            return flow
        msg = (
            f"session {sid!r} was started by flow {name!r} with fingerprint {fingerprint}, but "
            f"the flow given has {flow.fingerprint}; pass allow_changed=True to resume with a "
            f"repaired flow"
        )
        raise FlowMismatch(
            msg, session_id=sid, flow=name, fingerprint=fingerprint, known=(flow.fingerprint,)
        )

    def _described(self, name: str, fingerprint: str) -> str:
        flow = self._flows.get((name, fingerprint))
        version = None if flow is None else flow.version
        return fingerprint if version is None else f"{fingerprint} (version {version!r})"
