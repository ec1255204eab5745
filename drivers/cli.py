"""The `tarry` command: inspect sessions in a store."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tarry.engine.errors import TarryError

from .runtime import Runtime

DEFAULT_STORE = "sqlite:///tarry.db"


def _json(value: Any) -> str:
    return json.dumps(value, default=repr, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tarry", description="Inspect tarry sessions.")
    parser.add_argument("--store", default=os.environ.get("TARRY_STORE", DEFAULT_STORE),
                        help="store URL (default: $TARRY_STORE or sqlite:///tarry.db)")
    sub = parser.add_subparsers(dest="command", required=True)
    ls = sub.add_parser("ls", help="list sessions, newest first")
    ls.add_argument("--status")
    ls.add_argument("--flow")
    ls.add_argument("--limit", type=int, default=50)
    show = sub.add_parser("show", help="a session's status, container stack, pause and error")
    show.add_argument("session")
    events = sub.add_parser("events", help="a session's event log")
    events.add_argument("session")
    events.add_argument("--jsonl", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)

    try:
        rt = Runtime(store=args.store)
        if args.command == "ls":
            for s in rt.sessions(status=args.status, flow=args.flow, limit=args.limit):
                print(f"{s.session_id}  {s.flow:<20} {s.status:<10} {s.updated_at:%Y-%m-%d %H:%M:%S}")
        elif args.command == "show":
            view = rt.session(args.session)
            state = view.state
            print(f"session {view.session_id}  flow {view.flow}  status {view.status}")
            for frame in state.container_stack:
                print(f"  in {frame.kind} {'/'.join(map(str, frame.path))}: iteration "
                      f"{frame.iteration}, child {frame.child}, "
                      f"{frame.completed_iterations} iterations done")
            if state.pause:
                p = state.pause
                print(f"  paused ({p.kind}) at {'/'.join(map(str, p.path))}: {p.reason}")
            if state.error:
                e = state.error
                print(f"  failed at {'/'.join(map(str, e.path))}: {e.type}: {e.message}")
        elif args.command == "events":
            for e in rt.session(args.session).events():
                if args.jsonl:
                    print(_json({"seq": e.seq, "type": e.type, "at": e.at.isoformat(),
                                 "path": list(e.path), "data": e.data}))
                else:
                    print(f"{e.seq:>6} {e.at:%H:%M:%S.%f} {e.type:<30} {'/'.join(map(str, e.path))}")
    except (TarryError, ValueError) as exc:
        print(f"tarry: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `tarry events X | head`: the reader has seen enough
        sys.stderr.close()
    return 0
