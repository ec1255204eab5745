"""The `tarry` command: run and resume flows, inspect and manage sessions, run a worker.

Exit codes: 0 ok, 1 the flow failed (or a store error), 2 usage (bad arguments, unknown
session or token, a refused value), 3 paused. See docs/cli.md.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from tarry.engine.errors import (
    ConcurrentUpdate,
    SnapshotError,
    TarryError,
    TokenAlreadyUsed,
    UnknownToken,
)
from tarry.engine.flow import Flow

from .jsonable import dumps, event_to_dict, session_to_dict
from .outcome import Outcome
from .progress import path_text, show_progress
from .runtime import Runtime
from .stores import open_store
from .worker import FLOW_REF, Worker, load_flow, register_recorded_flows

DEFAULT_STORE = "sqlite:///tarry.db"
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PAUSED = 0, 1, 2, 3
ENDED = ("completed", "failed", "cancelled")
#: What `tarry serve` imports beyond tarry: missing ones mean the 'server' extra is missing.
SERVER_EXTRA = ("starlette", "uvicorn")


class UsageError(Exception):
    """Arguments the command cannot work with: exit 2 with the message."""


def _store_default() -> str:
    return os.environ.get("TARRY_STORE", DEFAULT_STORE)


# --- arguments ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    # `--store` is accepted before and after the command; SUPPRESS keeps a command's parser
    # from overwriting a value given before it with its own default.
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "--store",
        default=argparse.SUPPRESS,
        help="store URL (default: $TARRY_STORE or sqlite:///tarry.db)",
    )
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON instead of text")
    driving = argparse.ArgumentParser(add_help=False)
    driving.add_argument(
        "--durability",
        choices=("pause", "step"),
        default="pause",
        help="'step' persists every completed step (default: pause)",
    )
    driving.add_argument(
        "--lease",
        type=float,
        default=30.0,
        help="seconds before another process may recover a run that died",
    )
    progress = argparse.ArgumentParser(add_help=False)
    progress.add_argument(
        "--no-progress", action="store_true", help="no progress bars or lines on stderr"
    )
    flow_opt = argparse.ArgumentParser(add_help=False)
    flow_opt.add_argument(
        "--flow",
        dest="flow_ref",
        metavar="MODULE:FLOW",
        help="the flow to continue with (default: the one recorded at run)",
    )

    parser = argparse.ArgumentParser(
        prog="tarry",
        description="Run, resume and inspect tarry workflows.",
        epilog="exit codes: 0 ok, 1 error, 2 usage, 3 paused",
    )
    parser.add_argument(
        "--store",
        default=_store_default(),
        help="store URL (default: $TARRY_STORE or sqlite:///tarry.db)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(
        name: str,
        handler: Callable[[argparse.Namespace], int],
        help: str,
        *parents: argparse.ArgumentParser,
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[store, *parents])
        p.set_defaults(handler=handler)
        return p

    p = command("run", _run, "start a session of MODULE:FLOW", as_json, driving, progress)
    p.add_argument("flow_ref", metavar="MODULE:FLOW")
    p.add_argument("--input", metavar="JSON|@FILE", help="the flow input (@- reads stdin)")
    p.add_argument("--session-id", help="choose the session id (starting is then idempotent)")

    p = command(
        "resume",
        _resume,
        "continue a paused or failed session",
        as_json,
        driving,
        progress,
        flow_opt,
    )
    p.add_argument("token")
    p.add_argument("--value", metavar="JSON|@FILE", help="the resume value (@- reads stdin)")
    p.add_argument(
        "--allow-changed",
        action="store_true",
        help="resume with a flow changed since the session started",
    )

    p = command(
        "skip",
        _skip,
        "mark a failed session's failed step done and go on",
        as_json,
        driving,
        progress,
        flow_opt,
    )
    p.add_argument("token")
    p.add_argument("--output", metavar="JSON|@FILE", help="the skipped step's output")

    p = command("cancel", _cancel, "end a paused or failed session", as_json)
    p.add_argument("target", metavar="TOKEN|SESSION")

    p = command("ls", _ls, "list sessions, newest first", as_json)
    p.add_argument("--status")
    p.add_argument("--flow", help="flow name")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--offset", type=int, default=0)

    p = command("show", _show, "a session's status, container stack, pause and error", as_json)
    p.add_argument("session")

    p = command("events", _events, "a session's event log")
    p.add_argument("session")
    p.add_argument("--jsonl", action="store_true", help="one JSON object per line")
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing new events until the session ends",
    )
    p.add_argument("--interval", type=float, default=0.5, help="seconds between reads")

    p = command("due", _due, "sessions whose timer or timeout has come", as_json, driving)
    p.add_argument("--run", action="store_true", help="resume them now")
    p.add_argument("--limit", type=int, default=100)

    p = command("worker", _worker, "resume due and ready sessions, recover dead runs", driving)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between rounds")
    p.add_argument(
        "--flow",
        dest="flows",
        action="append",
        default=[],
        metavar="MODULE:FLOW",
        help="a flow to load at start (repeatable); others are imported on "
        "demand from the MODULE:FLOW their sessions recorded",
    )
    p.add_argument("--once", action="store_true", help="one round, then exit")

    p = command("stats", _stats, "sessions by status, nodes, metrics", as_json)
    p.add_argument("--flow", help="flow name")

    p = command("serve", _serve, "the HTTP API and live monitor")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument(
        "--token",
        default=os.environ.get("TARRY_TOKEN"),
        help="bearer token the API requires (default: $TARRY_TOKEN)",
    )

    p = command("db", _db, "manage the store's schema")
    db_sub = p.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    db_sub.add_parser("upgrade", parents=[store], help="create or migrate the store's schema")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # bad usage: argparse exits 2
    try:
        return args.handler(args)
    except (SnapshotError, ConcurrentUpdate) as exc:
        _err(f"tarry: {exc}")
        return EXIT_ERROR
    except (UsageError, TarryError, ValueError) as exc:
        _err(f"tarry: {exc}")
        return EXIT_USAGE
    except BrokenPipeError:  # `tarry events X | head`: the reader has seen enough
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _runtime(args: argparse.Namespace) -> Runtime:
    # The signing secret comes from the environment only: a flag would show it in `ps`.
    return Runtime(
        store=args.store,
        durability=getattr(args, "durability", "pause"),
        lease=getattr(args, "lease", 30.0),
        secret=os.environ.get("TARRY_SECRET") or None,
    )


def _json_arg(text: str | None, option: str) -> Any:
    """`--input`/`--value`/`--output`: JSON text, `@file` or `@-` (stdin); None when absent."""
    if text is None:
        return None
    if text.startswith("@"):
        name = text[1:]
        try:
            if name == "-":
                text = sys.stdin.read()
            else:
                with open(name, encoding="utf-8") as f:
                    text = f.read()
        except OSError as exc:
            msg = f"cannot read {option} file {name!r}: {exc.strerror or exc}"
            raise UsageError(msg) from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{option} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        raise UsageError(msg) from exc


# --- run, resume, skip -------------------------------------------------------------------------


def _run(args: argparse.Namespace) -> int:
    flow = load_flow(args.flow_ref)
    value = _json_arg(args.input, "--input")
    rt = _runtime(args)
    sid = args.session_id or uuid.uuid4().hex
    with _pause_on_ctrl_c(rt, sid), _progress(rt, sid, (), args):
        out = rt.run_sync(flow, value, session_id=sid, meta={FLOW_REF: args.flow_ref})
    return _print_outcome(out, args)


def _resume(args: argparse.Namespace) -> int:
    value = _json_arg(args.value, "--value")
    rt = _runtime(args)
    sid, flow = _flow_of_token(rt, args.token, args.flow_ref)
    frames = rt.session(sid).state.container_stack
    with _pause_on_ctrl_c(rt, sid), _progress(rt, sid, frames, args):
        out = rt.resume_sync(args.token, value, flow=flow, allow_changed=args.allow_changed)
    return _print_outcome(out, args)


def _skip(args: argparse.Namespace) -> int:
    output = _json_arg(args.output, "--output")
    rt = _runtime(args)
    sid, flow = _flow_of_token(rt, args.token, args.flow_ref)
    rt.register(flow)
    frames = rt.session(sid).state.container_stack
    with _pause_on_ctrl_c(rt, sid), _progress(rt, sid, frames, args):
        out = _settle(rt.skip(args.token, output, flow=flow if args.flow_ref else None))
    return _print_outcome(out, args)


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


def _settle(result: Any) -> Outcome:
    if inspect.isawaitable(result):

        async def wait() -> Outcome:
            return await result

        return asyncio.run(wait())
    return result


@contextmanager
def _pause_on_ctrl_c(rt: Runtime, session_id: str) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) pauses the run at its next checkpoint, resumably; a second one
    interrupts at once (the step in flight then runs again on recovery)."""

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def abort() -> None:
        _err("tarry: stopping at the next checkpoint (again to interrupt now)")
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


def _store_hint(args: argparse.Namespace) -> str:
    return "" if args.store == _store_default() else f" --store {shlex.quote(args.store)}"


def _print_outcome(out: Outcome, args: argparse.Namespace) -> int:
    if args.json:
        print(dumps(out))
    else:
        for line in _describe(out, _store_hint(args)):
            print(line)
        if out.failed and out.error is not None and out.error.traceback:
            _err(out.error.traceback.rstrip())
    return EXIT_OK if out.ok else EXIT_PAUSED if out.paused else EXIT_ERROR


def _describe(out: Outcome, store_hint: str = "") -> list[str]:
    """An outcome as lines of text: what happened, the session, and how to go on."""
    if out.ok:
        return ["completed", f"session {out.session_id}", f"output {dumps(out.output)}"]
    if out.paused and out.pause is not None:
        p = out.pause
        lines = [_paused_line(p), f"session {out.session_id}"]
        if p.payload is not None:
            lines.append(f"payload {dumps(p.payload)}")
        if p.wake_at is not None:
            lines.append(f"wakes at {p.wake_at.isoformat()} (a `tarry worker` resumes it)")
        if p.expires_at is not None:
            lines.append(f"times out at {p.expires_at.isoformat()}")
        if out.token and p.wake_at is not None:
            lines += [
                f"token {out.token}",
                f"or resume it now: tarry resume {out.token}{store_hint}",
            ]
        elif out.token:
            lines += [
                f"token {out.token}",
                f"resume with: tarry resume {out.token} --value JSON{store_hint}",
            ]
        return lines
    e = out.error
    lines = [
        f"failed at {path_text(e.path)}: {e.type}: {e.message}" if e else "failed",
        f"session {out.session_id}",
    ]
    if out.token:
        lines += [
            f"token {out.token}",
            f"retry with: tarry resume {out.token}{store_hint}",
            f"or skip the step: tarry skip {out.token} --output JSON{store_hint}",
        ]
    return lines


def _paused_line(pause: Any) -> str:
    """`paused (kind) at path: reason` (of a PauseInfo or a PauseState)."""
    where = f"paused ({pause.kind}) at {path_text(pause.path)}"
    return f"{where}: {pause.reason}" if pause.reason else where


def _summary(out: Outcome) -> str:
    """An outcome in one line, without its token (for worker logs)."""
    if out.ok:
        return "ok"
    if out.paused and out.pause is not None:
        return _paused_line(out.pause)
    e = out.error
    return f"failed at {path_text(e.path)}: {e.type}: {e.message}" if e else out.status


# --- managing and inspecting ---------------------------------------------------------------


def _cancel(args: argparse.Namespace) -> int:
    out = _runtime(args).cancel(args.target)
    print(dumps(out) if args.json else f"cancelled session {out.session_id}")
    return EXIT_OK


def _ls(args: argparse.Namespace) -> int:
    rows = _runtime(args).sessions(
        status=args.status, flow=args.flow, limit=args.limit, offset=args.offset
    )
    if args.json:
        print(dumps(rows))
        return EXIT_OK
    for s in rows:
        print(f"{s.session_id}  {s.flow:<20} {s.status:<10} {s.updated_at:%Y-%m-%d %H:%M:%S}")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    view = _runtime(args).session(args.session)
    state = view.state
    out = view.outcome
    if args.json:
        print(dumps(session_to_dict(view)))
        return EXIT_OK
    print(f"session {view.session_id}  flow {view.flow}  status {view.status}")
    if view.meta.get(FLOW_REF):
        print(f"  flow_ref {view.meta[FLOW_REF]}")
    print(
        f"  created {view.created_at:%Y-%m-%d %H:%M:%S}  updated "
        f"{view.updated_at:%Y-%m-%d %H:%M:%S}"
    )
    for frame in state.container_stack:
        print(
            f"  in {frame.kind} {path_text(frame.path)}: iteration "
            f"{frame.iteration}, child {frame.child}, "
            f"{frame.completed_iterations} iterations done"
        )
    if state.pause and view.status == "paused":
        p = state.pause
        print(f"  {_paused_line(p)}")
        if p.wake_at:
            print(f"  wakes at {p.wake_at.isoformat()}")
    if state.error:
        e = state.error
        print(f"  failed at {path_text(e.path)}: {e.type}: {e.message}")
    if view.status == "completed":
        print(f"  output {dumps(state.output)}")
    if out.token:
        print(f"  token {out.token}")
    return EXIT_OK


def _events(args: argparse.Namespace) -> int:
    rt = _runtime(args)
    after = 0
    while True:
        view = rt.session(args.session)  # read the status first: events up to it follow
        for event in view.events(after):
            after = event.seq
            if args.jsonl:
                print(json.dumps(event_to_dict(event), ensure_ascii=False), flush=args.follow)
            else:
                print(
                    f"{event.seq:>6} {event.at:%H:%M:%S.%f} {event.type:<30} "
                    f"{'/'.join(map(str, event.path))}",
                    flush=args.follow,
                )
        if not args.follow or view.status in ENDED:
            return EXIT_OK
        time.sleep(args.interval)


def _due(args: argparse.Namespace) -> int:
    rt = _runtime(args)
    records = rt.store.due(rt.clock.now(), args.limit)
    if args.run:
        register_recorded_flows(rt, records)
        outcomes = rt.resume_due(limit=args.limit)
        if args.json:
            print(dumps(outcomes))
        for out in [] if args.json else outcomes:
            print(f"resumed {out.session_id}: {_summary(out)}")
        return EXIT_OK
    if args.json:
        print(
            dumps(
                [
                    {"session_id": r.session_id, "flow": r.flow, "wake_at": r.wake_at}
                    for r in records
                ]
            )
        )
        return EXIT_OK
    for r in records:
        print(f"{r.session_id}  {r.flow:<20} due {r.wake_at:%Y-%m-%d %H:%M:%S}")
    return EXIT_OK


def _stats(args: argparse.Namespace) -> int:
    stats = _runtime(args).stats(flow=args.flow)
    if args.json:
        print(dumps(stats))
        return EXIT_OK
    print("sessions  " + "  ".join(f"{k} {v}" for k, v in sorted(stats.by_status.items())))
    if stats.nodes:
        print(f"{'node':<30} {'runs':>8} {'failures':>8} {'mean s':>10}")
        for name, node in sorted(stats.nodes.items()):
            print(f"{name:<30} {node.executions:>8} {node.failures:>8} {node.mean_seconds:>10.4f}")
    if stats.metrics:
        print("metrics  " + "  ".join(f"{k} {v:g}" for k, v in sorted(stats.metrics.items())))
    return EXIT_OK


# --- long-running: worker, serve; the schema -------------------------------------------------


def _worker(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        msg = f"--interval must be a positive number of seconds (got {args.interval:g})"
        raise UsageError(msg)
    # A long-running process: its warnings (a flow it cannot import, a failed round) are
    # its log, with times.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    rt = _runtime(args)
    for ref in args.flows:
        rt.register(load_flow(ref))

    def report(source: str, out: Outcome) -> None:
        print(f"{source} {out.session_id}: {_summary(out)}", flush=True)

    worker = Worker(rt, interval=args.interval, report=report)
    if args.once:
        worker.run_once()
        return EXIT_OK

    def stop(signum: int, frame: Any) -> None:
        # Nothing is written here: the interrupted code may be writing to the same stream.
        if worker.stopping:  # asked twice: stop now (the step in flight is recovered later)
            raise KeyboardInterrupt
        worker.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _err(f"tarry worker: store {args.store}, a round every {args.interval:g} s")
    worker.run_forever()
    _err("tarry worker: stopped after the round in progress")
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    try:
        from .server import serve

        serve(_runtime(args), host=args.host, port=args.port, token=args.token)
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in SERVER_EXTRA:
            raise
        msg = f"`tarry serve` needs the 'server' extra: pip install 'tarry[server]' ({exc})"
        raise UsageError(msg) from exc
    return EXIT_OK


def _db(args: argparse.Namespace) -> int:
    url = args.store
    if url.startswith(("postgresql://", "postgres://")):
        # Opened without upgrading, so that the upgrade is this command's, and it can say
        # what it applied.
        from tarry.snapshots.postgres import PostgresStore

        store: Any = PostgresStore(url, auto_upgrade=False)
    else:
        store = open_store(url)
    try:
        upgrade = getattr(store, "upgrade", None)
        if upgrade is None:
            print(f"the {type(store).__name__} needs no migration")
            return EXIT_OK
        applied = upgrade()
        version = store.schema_version() if hasattr(store, "schema_version") else None
        done = f"applied migrations {', '.join(map(str, applied))}" if applied else "up to date"
        print(f"{done}" + (f": schema version {version}" if version is not None else ""))
        return EXIT_OK
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
