"""`tarry prune`: delete sessions that ended long enough ago; and the durations it reads."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

from tarry.drivers.cli.common import ENDED, EXIT_OK, runtime_of
from tarry.drivers.reading.jsonable import dumps

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"([0-9]+)([smhd])")


def duration(text: str) -> timedelta:
    """`30s`, `15m`, `12h`, `7d` as a timedelta (an argparse type: anything else is a usage
    error, exit 2)."""
    found = _DURATION.fullmatch(text.strip())
    problem = None
    if found is None or int(found[1]) == 0:
        problem = "expected a whole number above 0 and a unit: s, m, h or d (30s, 15m, 12h, 7d)"
    else:
        try:
            return timedelta(seconds=int(found[1]) * _UNITS[found[2]])
        except OverflowError:
            problem = "it is longer than any date can be away"
    msg = f"invalid duration {text!r}: {problem}"
    raise argparse.ArgumentTypeError(msg)


def prune(args: argparse.Namespace) -> int:
    statuses = tuple(s for s in ENDED if s in (args.status or ENDED))
    count = runtime_of(args).prune(
        older_than=args.older_than, status=statuses, dry_run=args.dry_run
    )
    if args.json:
        print(
            dumps(
                {
                    "sessions": count,
                    "dry_run": args.dry_run,
                    "older_than_seconds": args.older_than.total_seconds(),
                    "status": list(statuses),
                }
            )
        )
        return EXIT_OK
    verb = "would prune" if args.dry_run else "pruned"
    noun = "session" if count == 1 else "sessions"
    print(f"{verb} {count} {noun} ({', '.join(statuses)}) last updated over {args.older_than} ago")
    return EXIT_OK
