"""`tarry mail ls` and `tarry mail discard`: the keys that hold queued messages (deliveries no
Wait has taken yet), and dropping a key's messages."""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from tarry.drivers.cli.common import EXIT_OK, runtime_of
from tarry.drivers.reading.jsonable import dumps

#: The widest key column of `mail ls`: a longer key pushes only its own line's columns right.
KEY_COLUMN = 40


def ls(args: argparse.Namespace) -> int:
    rt = runtime_of(args)
    rows = rt.mailbox(prefix=args.prefix, limit=args.limit)
    if args.json:
        print(dumps(rows))
        return EXIT_OK
    now = rt.clock.now()
    keys = [shown_key(m.key) for m in rows]
    width = max((len(k) for k in keys if len(k) <= KEY_COLUMN), default=0)
    for key, m in zip(keys, rows, strict=True):
        print(
            f"{key:<{width}}  {m.count:>6} {'message ' if m.count == 1 else 'messages'}  "
            f"oldest {m.oldest_at:%Y-%m-%d %H:%M:%S} UTC ({age(now, m.oldest_at)} ago)"
        )
    return EXIT_OK


def discard(args: argparse.Namespace) -> int:
    count = runtime_of(args).discard(args.key)
    if args.json:
        print(dumps({"key": args.key, "discarded": count}))
    else:
        print(f"discarded {count} message{'s' * (count != 1)} from {shown_key(args.key)}")
    return EXIT_OK


def shown_key(key: str) -> str:
    """`key` as a line shows it: bare, or as a JSON string when bare text would mislead (it
    holds blanks or characters that do not print, or starts with a quote)."""
    plain = key.isprintable() and not any(c.isspace() for c in key) and not key.startswith('"')
    return key if plain else json.dumps(key, ensure_ascii=False)


def age(now: datetime, then: datetime) -> str:
    """How long ago `then` was, in its largest unit and the next: `45s`, `12m 5s`, `3h 0m`,
    `2d 1h` (`0s` for a time ahead of `now`: the clocks of two machines may differ)."""
    seconds = max(0, int((now - then).total_seconds()))
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    first = next(i for i, (_, size) in enumerate(units) if seconds >= size or size == 1)
    parts = []
    for unit, size in units[first : first + 2]:
        parts.append(f"{seconds // size}{unit}")
        seconds %= size
    return " ".join(parts)
