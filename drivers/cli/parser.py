"""The `tarry` command's arguments: one sub-command per handler."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from tarry.drivers.cli import (
    batches_cli,
    completion,
    delivering,
    driving,
    inspecting,
    logs,
    mailbox,
    pruning,
    services,
)
from tarry.drivers.cli.common import ENDED, os_user, store_default

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
    drive_opts = argparse.ArgumentParser(add_help=False)
    drive_opts.add_argument(
        "--durability",
        choices=("pause", "step"),
        default="pause",
        help="'step' persists every completed step (default: pause)",
    )
    drive_opts.add_argument(
        "--lease",
        type=float,
        default=10.0,
        help="seconds before another process may recover a run that died",
    )
    progress = argparse.ArgumentParser(add_help=False)
    progress.add_argument(
        "--no-progress", action="store_true", help="no progress bars or lines on stderr"
    )
    actor = argparse.ArgumentParser(add_help=False)
    actor.add_argument(
        "--actor",
        default=os_user(),
        metavar="NAME",
        help="who does it, recorded in the event it causes (default: your OS user name)",
    )
    flow_opt = argparse.ArgumentParser(add_help=False)
    flow_opt.add_argument(
        "--flow",
        dest="flow_ref",
        metavar="MODULE:FLOW",
        help="the flow to continue with (default: the one recorded at run)",
    )

    # The commands that drive sessions they did not start: a session started from Python
    # records no MODULE:FLOW to import, so its flow is named here.
    flows_opt = argparse.ArgumentParser(add_help=False)
    flows_opt.add_argument(
        "--flow",
        dest="flows",
        action="append",
        default=[],
        metavar="MODULE:FLOW",
        help="a flow to load first (repeatable): needed for sessions started from Python, "
        "which record none; the others' flows are imported from the MODULE:FLOW they recorded",
    )

    parser = argparse.ArgumentParser(
        prog="tarry",
        description="Run, resume and inspect tarry workflows.",
        epilog="exit codes: 0 ok, 1 error, 2 usage, 3 paused",
    )
    parser.add_argument(
        "--store",
        default=store_default(),
        help="store URL (default: $TARRY_STORE or sqlite:///tarry.db)",
    )
    parser.add_argument("--version", action=_Version, help="print tarry's version and exit")
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

    p = command(
        "run", driving.run, "start a session of MODULE:FLOW", as_json, drive_opts, progress, actor
    )
    p.add_argument("flow_ref", metavar="MODULE:FLOW")
    p.add_argument("--input", metavar="JSON|@FILE", help="the flow input (@- reads stdin)")
    p.add_argument("--session-id", help="choose the session id (starting is then idempotent)")

    p = command(
        "resume",
        driving.resume,
        "continue a paused or failed session",
        as_json,
        drive_opts,
        progress,
        flow_opt,
        actor,
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
        driving.skip,
        "mark a failed session's failed step done and go on",
        as_json,
        drive_opts,
        progress,
        flow_opt,
        actor,
    )
    p.add_argument("token")
    p.add_argument("--output", metavar="JSON|@FILE", help="the skipped step's output")

    p = command(
        "fork",
        driving.fork,
        "start a new session from an existing one's state at an earlier point",
        as_json,
        progress,
        flow_opt,
        actor,
    )
    p.add_argument("session", metavar="SESSION")
    at = p.add_mutually_exclusive_group(required=True)
    at.add_argument("--at-seq", type=int, metavar="N", help="the state after the session's event N")
    at.add_argument(
        "--at",
        metavar="PATH",
        help="the state just before the element at PATH first started (tickets/3/triage)",
    )
    p.add_argument("--session-id", help="the new session's id (default: a new one)")

    p = command(
        "recover",
        driving.recover,
        "take over sessions whose process died (stale: their lease lapsed)",
        as_json,
        drive_opts,
        flows_opt,
    )
    p.add_argument("session", nargs="?", metavar="ID", help="only this session")

    p = command(
        "deliver",
        delivering.deliver,
        "resume the waits on a key (Wait(key=...)) with a value, or keep it as mail",
        as_json,
        progress,
        flows_opt,
        actor,
    )
    p.add_argument("key", nargs="?", metavar="KEY", help="the key the waits name")
    p.add_argument("--value", metavar="JSON|@FILE", help="the value (@- reads stdin)")
    p.add_argument(
        "--file",
        metavar="RESULTS.jsonl",
        help='one {"key": ..., "value": ...} per line (- reads stdin), delivered in batches',
    )
    p.add_argument(
        "--batch", type=int, default=delivering.BATCH, help="lines per batch (default: 1000)"
    )
    p.add_argument(
        "--format",
        choices=("jsonl", "openai", "anthropic"),
        default="jsonl",
        help="what --file holds: {key, value} lines (jsonl, the default), or an OpenAI batch "
        "output/error file or an Anthropic message batch results file, as downloaded",
    )

    # `batches` has no handler of its own, as `mail` below.
    about = "the provider batches that BatchRequests were submitted in (tarry.batches)"
    p = sub.add_parser("batches", help=about, description=about, parents=[store])
    batch_commands = p.add_subparsers(required=True)
    p = batch_commands.add_parser(
        "ls",
        parents=[store, as_json],
        help="open batches: adapter, provider id, status, counts and age",
        description="open batches (with --all, ended ones too): adapter, provider id, status, "
        "request counts and age",
    )
    p.set_defaults(handler=batches_cli.ls)
    p.add_argument("--all", action="store_true", help="ended batches too")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default: 100)")

    # `mail` has no handler of its own: argparse requires a sub-command, whose handler runs.
    about = "the messages queued on keys no Wait has taken yet"
    p = sub.add_parser("mail", help=about, description=about, parents=[store])
    mail = p.add_subparsers(required=True)
    p = mail.add_parser(
        "ls",
        parents=[store, as_json],
        help="the keys that hold queued messages, by key: count and oldest",
        description="the keys that hold queued messages, by key: count and oldest",
    )
    p.set_defaults(handler=mailbox.ls)
    p.add_argument("--prefix", help="only keys that start with this text (no wildcards)")
    p.add_argument("--limit", type=int, default=100, help="at most this many keys (default: 100)")
    p = mail.add_parser(
        "discard",
        parents=[store, as_json],
        help="drop the messages queued on KEY",
        description="drop the messages queued on KEY, and say how many",
    )
    p.set_defaults(handler=mailbox.discard)
    p.add_argument("key", metavar="KEY")

    p = command(
        "cancel",
        inspecting.cancel,
        "end a paused or failed session; stop a running one",
        as_json,
        flows_opt,
        actor,
    )
    p.add_argument("target", metavar="TOKEN|SESSION")

    p = command("abort", inspecting.abort, "stop a running session at its next checkpoint", actor)
    p.add_argument("session")
    p.add_argument(
        "--cancel", action="store_true", help="end it as cancelled instead of pausing it"
    )

    p = command("ls", inspecting.ls, "list sessions, newest first", as_json)
    p.add_argument("--status")
    p.add_argument("--flow", help="flow name")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--offset", type=int, default=0)

    p = command(
        "show", inspecting.show, "a session's status, container stack, pause and error", as_json
    )
    p.add_argument("session")

    p = command(
        "children",
        inspecting.children,
        "the sessions a session started with Child elements, with their status",
        as_json,
    )
    p.add_argument("session")

    p = command("events", inspecting.events, "a session's event log")
    p.add_argument("session")
    p.add_argument("--jsonl", action="store_true", help="one JSON object per line")
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing new events until the session ends",
    )
    p.add_argument("--interval", type=float, default=0.5, help="seconds between reads")

    p = command("logs", logs.logs, "the logging records a session's steps emitted")
    p.add_argument("session")
    p.add_argument(
        "--level", metavar="LEVEL", help="only records at LEVEL or above (a name or a number)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing new records until the session ends",
    )
    p.add_argument("--interval", type=float, default=0.5, help="seconds between reads")

    p = command(
        "due",
        inspecting.due,
        "sessions whose timer or timeout has come",
        as_json,
        drive_opts,
        flows_opt,
    )
    p.add_argument("--run", action="store_true", help="resume them now")
    p.add_argument("--limit", type=int, default=100)

    p = command(
        "worker",
        services.worker,
        "resume due and ready sessions, recover dead runs",
        drive_opts,
        flows_opt,
    )
    p.add_argument("--interval", type=float, default=1.0, help="seconds between rounds")
    p.add_argument(
        "--adapters",
        action="append",
        default=[],
        metavar="MODULE:OBJ",
        help="adapters for poll: a dict {pause kind: adapter}, or a callable returning one "
        "(repeatable)",
    )
    p.add_argument(
        "--batches",
        action="append",
        default=[],
        metavar="MODULE:OBJ",
        help="provider batch adapters for BatchRequests: a dict {name: adapter} such as "
        "{'openai': tarry.batches.OpenAIBatch(client)}, or a callable returning one (repeatable)",
    )
    p.add_argument("--once", action="store_true", help="one round, then exit")
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (tarry[prometheus])",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="the address --metrics-port listens on (default 127.0.0.1; 0.0.0.0 for all)",
    )
    p.add_argument(
        "--retention",
        type=pruning.duration,
        metavar="DURATION",
        help="prune sessions that ended longer ago than this (30s, 15m, 12h, 7d), once a minute",
    )

    p = command(
        "prune",
        pruning.prune,
        "delete sessions that ended (completed, cancelled, failed) long enough ago",
        as_json,
    )
    p.add_argument(
        "--older-than",
        type=pruning.duration,
        required=True,
        metavar="DURATION",
        help="last updated longer ago than this: 30s, 15m, 12h, 7d",
    )
    p.add_argument(
        "--status",
        action="append",
        choices=ENDED,
        help="only sessions of this ended status (repeatable; default: all three)",
    )
    p.add_argument("--dry-run", action="store_true", help="count them, delete nothing")

    p = command("stats", inspecting.stats, "sessions by status, nodes, metrics", as_json)
    p.add_argument("--flow", help="flow name")

    p = command("serve", services.serve, "the HTTP API and live monitor")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument(
        "--token",
        default=os.environ.get("TARRY_TOKEN"),
        help="bearer token the API requires, of the user 'admin' (default: $TARRY_TOKEN)",
    )
    p.add_argument(
        "--users",
        metavar="FILE",
        help="named users: one name:token a line, # comments (default: the same lines, or "
        "name:token,name:token, in $TARRY_USERS); each login name is recorded as the actor",
    )
    p.add_argument(
        "--session-hours",
        type=float,
        default=12.0,
        help="how long a login to the page lasts (default: 12)",
    )
    p.add_argument(
        "--forwarded-allow-ips",
        metavar="IPS",
        help="proxies trusted to set X-Forwarded-For/-Proto (comma-separated addresses or "
        "networks, or *); by default those headers are ignored",
    )
    p.add_argument(
        "--flow",
        "--flows",
        dest="flows",
        action="append",
        default=[],
        metavar="MODULE:FLOW",
        help="a flow that POST /api/sessions may start (repeatable)",
    )

    p = command("db", services.db, "manage the store's schema")
    db_sub = p.add_subparsers(dest="db_command", required=True, metavar="COMMAND")
    db_sub.add_parser("upgrade", parents=[store], help="create or migrate the store's schema")

    p = command("completion", completion.completion, "print a shell completion script")
    p.add_argument("shell", choices=completion.SHELLS)
    p.set_defaults(parser=parser)  # the script is made from this very parser
    return parser


class _Version(argparse.Action):
    """`--version`: the installed distribution's version, read only when asked for."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from importlib.metadata import version

        print(f"tarry {version('tarry')}")
        parser.exit()
