"""Every error tarry raises on purpose: one base, subclassed by what the caller can do."""

from __future__ import annotations

from typing import Any

from tarry.engine.describe import describe


class TarryError(Exception):
    """Base of every error tarry raises on purpose."""


# --- defining flows --------------------------------------------------------------------------


class InvalidFlow(TarryError):
    """A flow definition is malformed (duplicate names, unknown route target, bad argument)."""


class InvalidArgument(TarryError, ValueError):
    """A Runtime method or option was given a value it cannot take (also a ValueError)."""


# --- starting and resuming -------------------------------------------------------------------


class SessionExists(TarryError):
    """`run(..., session_id=X)` when a session X already exists; nothing was changed."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {describe(session_id)} already exists")


class UnknownSession(TarryError):
    """No session with this id is in the store."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"no session {describe(session_id)} in the store")


class UnknownToken(TarryError):
    """The token was never issued by this store (or its session was deleted)."""

    def __init__(self, token: str | None = None) -> None:
        #: The token refused, when one of several was (`resume_many`): shortened, so that an
        #: error message never carries a whole live token.
        self.token = token
        super().__init__("unknown resume token" + _naming(token))


class TokenAlreadyUsed(TarryError):
    """The token was consumed already; tokens are single-use."""

    def __init__(self, session_id: str, token: str | None = None) -> None:
        self.session_id = session_id
        self.token = token
        super().__init__(f"resume token{_naming(token)} of session {session_id!r} was already used")


def _naming(token: str | None) -> str:
    """' tk_AbCdEf…' for a token named in a message: enough to tell which, never all of it."""
    if token is None:
        return ""
    shown = token[:10] + "…" if len(token) > 10 else token
    return f" {shown!r}"


class SecretRequired(TarryError):
    """The store holds signed tokens (a Runtime with a secret uses it) and this process has no
    secret: it refuses to hand out or accept the store's keys as tokens (fail closed)."""

    def __init__(self) -> None:
        super().__init__(
            "this store holds signed resume tokens (a Runtime with secret= uses it), but this "
            "process has no secret: set TARRY_SECRET (the tarry command, worker and server) or "
            "pass Runtime(secret=...) with the store's secret; without it, what the store holds "
            "would pass for tokens"
        )


class UnknownFlow(TarryError):
    """`resume` found no flow of the session's name: pass `flow=` or register it."""

    def __init__(
        self, name: str, *, session_id: str | None = None, fingerprint: str | None = None
    ) -> None:
        self.name = name
        self.session_id = session_id
        self.fingerprint = fingerprint
        which = (
            ""
            if session_id is None
            else (
                f"session {session_id!r} was started by flow {name!r} (fingerprint {fingerprint}), "
                f"but "
            )
        )
        super().__init__(
            f"{which}no flow named {name!r} is registered; pass flow= to resume, or "
            f"Runtime(flows=[...])"
        )


class FlowMismatch(TarryError):
    """The flow given to resume (or the ones registered) is not the flow the session started
    with, or a repaired flow does not fit where the session stands.

    `session_id`, `flow` (the session's flow name), `fingerprint` (the one it was started with)
    and `known` (the fingerprints of the flows of that name at hand) are set when known."""

    def __init__(
        self,
        message: str,
        *,
        session_id: str | None = None,
        flow: str | None = None,
        fingerprint: str | None = None,
        known: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.flow = flow
        self.fingerprint = fingerprint
        self.known = known


class InvalidResumeValue(TarryError):
    """The value given to resume does not fit what the paused node waits for."""


class ChildFailed(TarryError):
    """A `Child` element's session ended failed: the element fails with this, naming the child
    (`session_id`) and carrying its error (`error`: the child's error as data, with `type`,
    `message` and `path`)."""

    def __init__(self, session_id: str, error: dict[str, Any] | None) -> None:
        self.session_id = session_id
        self.error = dict(error or {})
        what = self.error.get("type", "an error")
        message = self.error.get("message", "")
        super().__init__(f"child session {session_id!r} failed with {what}: {message}")


class SessionNotResumable(TarryError):
    """The session is in a status that does not allow this operation."""

    def __init__(self, session_id: str, status: str, action: str) -> None:
        self.session_id = session_id
        self.status = status
        self.action = action
        super().__init__(f"cannot {action} session {session_id!r}: it is {status}")


class ConcurrentUpdate(TarryError):
    """Another process changed the session between our read and our write (compare-and-set)."""


class AsyncInSyncContext(TarryError):
    """`run_sync`/`resume_sync` was called inside a running event loop."""


# --- values ----------------------------------------------------------------------------------


class NotSerializable(TarryError):
    """A value that must outlive a step cannot be encoded by the snapshot codec."""

    def __init__(self, path: str, value: Any) -> None:
        self.path = path
        self.type_name = f"{type(value).__module__}.{type(value).__qualname__}"
        super().__init__(
            f"{path} must be encodable by the snapshot codec "
            f"(got a {self.type_name}; register attrs classes and dataclasses with "
            f"tarry.snapshots.register)"
        )


class PayloadTooLarge(NotSerializable):
    """A value is larger, encoded, than the runtime allows one value in an event
    (`Runtime(max_value_bytes=...)`)."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        TarryError.__init__(
            self,
            f"{path} is {size} bytes encoded, more than the limit of {limit} bytes for one "
            f"value (Runtime(max_value_bytes=...)); keep large data outside the session and "
            f"pass a reference to it",
        )
        self.path = path
        self.size = size
        self.limit = limit
        self.type_name = ""


class NotSendable(TarryError):
    """A sync step of a concurrent lane cannot run on the Runtime's executor, which runs steps
    in other processes (`Runtime(executor=ProcessPoolExecutor(...))`, a Dask cluster): its
    function, its `ctx` or its output does not pickle, or it used what only the driving process
    has (`ctx.outputs`). Never retried: sending it again fails again."""

    def __init__(self, path: tuple[Any, ...], what: str, reason: str) -> None:
        #: The step's path, what could not be sent (or used), and why.
        self.path = tuple(path)
        self.what = what
        self.reason = reason
        super().__init__(
            f"step {'/'.join(map(str, self.path))} cannot run on an executor in another "
            f"process: {what} {reason}"
        )

    def __reduce__(self) -> Any:  # raised in a worker process, it travels back pickled
        return (NotSendable, (self.path, self.what, self.reason))


class ReadOnlyView(TarryError, TypeError):
    """A step tried to change a large value it read from `ctx` (`input`, `item`, `prev`,
    `outputs[...]`), which it is handed as a read-only view (see engine/read_only_views.py). Also a
    TypeError, as changing any immutable value is."""

    def __init__(self, what: str, operation: str, large: int) -> None:
        self.what = what
        self.operation = operation
        super().__init__(
            f"{what} is read-only (part of a large value, over {large} bytes encoded, that "
            f"steps read through a view instead of a copy): {operation} cannot change it; "
            f"copy it to change it: copy.deepcopy({what}), or dict(...) / list(...) of it for "
            f"a shallow copy"
        )


class SnapshotTooLarge(TarryError):
    """A session's snapshot grew larger than the runtime allows (`Runtime(max_snapshot_bytes=...)`).

    With `path`, the node there would have made it so: it fails instead, and the session keeps
    everything it held before, and a token (skip the node with a smaller output)."""

    def __init__(self, session_id: str, size: int, limit: int, path: str | None = None) -> None:
        if path is None:
            what = f"its snapshot is {size} bytes"
            then = "the run stops here"
        else:
            what = f"the output of {path} would make its snapshot {size} bytes"
            then = "the node fails: skip it with a smaller output, or keep large data outside"
        super().__init__(
            f"session {session_id!r}: {what}, more than the limit of {limit} bytes "
            f"(Runtime(max_snapshot_bytes=...)); {then}"
        )
        self.session_id = session_id
        self.size = size
        self.limit = limit
        self.path = path


class SnapshotError(TarryError):
    """Snapshot bytes are malformed, truncated, too large, or of an unknown version."""


class InconsistentSnapshot(SnapshotError):
    """A snapshot decodes, but what it holds does not fit the flow that wrote it (a frame of no
    container, an index past the end of what it counts, a pause where the run does not stand)
    or the store (a ForEach's items or results missing). Raised before the session's token is
    used: nothing was changed."""

    def __init__(self, session_id: str, problem: str) -> None:
        self.session_id = session_id
        self.problem = problem
        super().__init__(f"session {session_id!r}: its snapshot cannot be resumed: {problem}")


class UnknownRoute(TarryError):
    """A Graph node returned an action that its routes do not name."""

    def __init__(self, graph: str, node: str, action: str, known: list[str]) -> None:
        self.graph = graph
        self.node = node
        self.action = action
        self.known = known
        super().__init__(
            f"Graph {graph!r}: node {node!r} returned action {action!r}, "
            f"but routes[{node!r}] names only {known!r}"
        )


# --- provider batch APIs (tarry.batches) ----------------------------------------------------


class BatchItemFailed(TarryError):
    """A provider's batch answered one `BatchRequest` with an error (`error`: what the provider
    said, a dict). Retryable: resuming the failed session submits that request again, in a
    later batch."""

    def __init__(self, message: str, *, key: str | None = None, error: Any = None) -> None:
        super().__init__(message)
        self.key = key
        self.error = error


class InvalidBatchRequest(TarryError, ValueError):
    """A `BatchRequest` that cannot be submitted as it is: a body the provider's format cannot
    carry, a `via` naming no registered adapter, or a key over the provider's `custom_id`
    limit. Not retryable: nothing was uploaded."""
