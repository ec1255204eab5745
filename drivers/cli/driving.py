"""`tarry run`, `tarry resume`, `tarry skip` and `tarry fork`: drive a session in this process, with
progress on stderr and Ctrl-C pausing it at its next checkpoint."""

from __future__ import annotations

import argparse
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from tarry.drivers.cli.common import UsageError, err, json_arg, runtime_of
from tarry.drivers.cli.progress import show_progress
from tarry.drivers.cli.text import print_outcome
from tarry.drivers.drive.pump import settle
from tarry.drivers.runtime import Runtime
from tarry.drivers.worker import FLOW_REF, load_flow
from tarry.engine.elements.flow import Flow
from tarry.engine.errors import TokenAlreadyUsed, UnknownToken

# --- run, resume, skip -------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    flow = load_flow(args.flow_ref)
    value = json_arg(args.input, "--input")
    rt = runtime_of(args)
    sid = args.session_id or uuid.uuid4().hex
    with _pause_on_ctrl_c(rt, sid), _progress(rt, sid, (), args):
        out = rt.run_sync(
            flow, value, session_id=sid, meta={FLOW_REF: args.flow_ref}, actor=args.actor
        )
    return print_outcome(out, args)


def resume(args: argparse.Namespace) -> int:
    value = json_arg(args.value, "--value")
    rt = runtime_of(args)
    sid, flow = _flow_of_token(rt, args.token, args.flow_ref)
    frames = rt.session(sid).state.container_stack
    with _pause_on_ctrl_c(rt, sid), _progress(rt, sid, frames, args):
        out = rt.resume_sync(
            args.token,
            value,
            flow=flow,
            allow_changed=args.allow_changed,
            meta=_ref(args),
            actor=args.actor,
        )
    return print_outcome(out, args)


def skip(args: argparse.Namespace) -> int:
    output = json_arg(args.output, "--output")
    rt = runtime_of(args)
    sid, flow = _flow_of_token(rt, args.token, args.flow_ref)
    rt.register(flow)
    frames = rt.session(sid).state.container_stack
    with _pause_on_ctrl_c(rt, sid), _progress(rt, sid, frames, args):
        out = settle(
            rt.skip(
                args.token,
                output,
                flow=flow if args.flow_ref else None,
                meta=_ref(args),
                actor=args.actor,
            )
        )
    return print_outcome(out, args)


def fork(args: argparse.Namespace) -> int:
    """A new session from an existing one's state after event `--at-seq`, or just before the
    element at `--at` first started, run from there (Runtime.fork)."""
    rt = runtime_of(args)
    at = None if args.at is None else at_path(args.at)
    view = rt.session(args.session)
    ref = args.flow_ref or view.meta.get(FLOW_REF)
    if not ref:
        msg = (
            f"session {view.session_id!r} (flow {view.flow!r}) records no MODULE:FLOW, "
            f"since `tarry run` did not start it; pass --flow MODULE:FLOW"
        )
        raise UsageError(msg)
    flow = load_flow(ref)
    sid = args.session_id or uuid.uuid4().hex
    with _pause_on_ctrl_c(rt, sid), _progress(rt, sid, (), args):
        out = settle(
            rt.fork(
                args.session,
                at_seq=args.at_seq,
                at=at,
                session_id=sid,
                flow=flow,
                meta=_ref(args),
                actor=args.actor,
            )
        )
    return print_outcome(out, args)


def at_path(text: str) -> tuple[Any, ...]:
    """An element's path as `--at` gives it: names and indexes joined by "/" (a part of digits
    is an index: `tickets/3/triage`), or a JSON array (`["tickets", 3, "triage"]`)."""
    if text.lstrip().startswith("["):
        found = json_arg(text, "--at")
        if not isinstance(found, list):
            raise UsageError(f"--at must be a JSON array or a/b/c (got {text!r})")
        return tuple(found)
    return tuple(int(part) if part.isdigit() else part for part in text.split("/"))


def _ref(args: argparse.Namespace) -> dict[str, str] | None:
    """The session's new MODULE:FLOW when `--flow` gave one: the session records it, so the
    next `tarry resume` and the worker import the flow it now continues with."""
    return {FLOW_REF: args.flow_ref} if args.flow_ref else None


def _flow_of_token(rt: Runtime, token: str, ref: str | None) -> tuple[str, Flow]:
    """The session a token belongs to and the flow to continue it with: `--flow`, else the
    MODULE:FLOW the session recorded when `tarry run` started it."""
    key = rt.tokens.key(token)
    info = rt.store.find_token(key) if key is not None else None
    if info is None:
        raise UnknownToken()
    if info.used:
        raise TokenAlreadyUsed(info.session_id)
    view = rt.session(info.session_id)
    ref = ref or view.meta.get(FLOW_REF)
    if not ref:
        msg = (
            f"session {view.session_id!r} (flow {view.flow!r}) records no MODULE:FLOW, "
            f"since `tarry run` did not start it; pass --flow MODULE:FLOW"
        )
        raise UsageError(msg)
    return view.session_id, load_flow(ref)


@contextmanager
def _pause_on_ctrl_c(rt: Runtime, session_id: str) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) pauses the run at its next checkpoint, resumably; a second one
    interrupts at once (the step in flight then runs again on recovery)."""

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def abort() -> None:
        err("tarry: stopping at the next checkpoint (again to interrupt now)")
        rt.abort(session_id)

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # The interrupted code may hold a lock abort() takes, or be writing to stderr (a
        # reentrant write raises): act from another thread.
        threading.Thread(target=abort, daemon=True).start()

    previous = signal.signal(signal.SIGINT, handler), signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def _progress(
    rt: Runtime, session_id: str, frames: Any, args: argparse.Namespace
) -> AbstractContextManager[None]:
    """ForEach progress on stderr, unless asked for none (or for JSON)."""
    if args.no_progress or args.json:
        return nullcontext()
    return show_progress(rt, session_id, frames)
