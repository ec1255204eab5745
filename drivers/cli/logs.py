"""`tarry logs`: the `logging` records a session's steps emitted (see drivers/logs.py)."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from tarry.drivers.cli.common import ENDED, EXIT_OK, runtime_of
from tarry.drivers.reading.jsonable import log_to_dict

#: Records read per call.
PAGE = 500


def logs(args: argparse.Namespace) -> int:
    """Print the records, oldest first; with --follow, keep printing new ones until the session
    ends. Records the session did not keep (over its bound) are said to be dropped, once."""
    rt = runtime_of(args)
    level: Any = args.level
    if level is not None and level.isdigit():
        level = int(level)
    after = 0
    while True:
        status = rt.session(args.session).status  # first: the records up to it follow
        while True:
            page = rt.logs(args.session, level=level, after=after, limit=PAGE)
            dropped = rt.dropped_logs(args.session)
            if dropped > after:  # dropped before they were read
                _dropped(dropped - after, args.json, args.follow)
                after = dropped
                continue
            for record in page:
                after = record.seq
                if args.json:
                    print(json.dumps(log_to_dict(record), ensure_ascii=False), flush=args.follow)
                else:
                    print(line(record), flush=args.follow)
            if len(page) < PAGE:
                break
        if not args.follow or status in ENDED:
            return EXIT_OK
        time.sleep(args.interval)


def line(record: Any) -> str:
    """`at level logger path: message`, e.g.
    `2025-01-02 03:04:05.000123 WARNING app.jobs items/3/fetch: only 2 rows`."""
    path = "/".join(map(str, record.path))
    return (
        f"{record.at:%Y-%m-%d %H:%M:%S.%f} {record.level} {record.logger} {path}: {record.message}"
    )


def _dropped(count: int, as_json: bool, follow: bool) -> None:
    if as_json:
        print(json.dumps({"dropped": count}), flush=follow)
    else:
        print(f"… {count} more records dropped (a session keeps its last max_logs)", flush=follow)
