"""What every `tarry` command shares: exit codes, usage errors, the runtime its arguments
describe, and JSON arguments."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..runtime import Runtime

DEFAULT_STORE = "sqlite:///tarry.db"
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PAUSED = 0, 1, 2, 3
ENDED = ("completed", "failed", "cancelled")
#: What `tarry serve` imports beyond tarry: missing ones mean the 'server' extra is missing.
SERVER_EXTRA = ("starlette", "uvicorn")


class UsageError(Exception):
    """Arguments the command cannot work with: exit 2 with the message."""


def store_default() -> str:
    return os.environ.get("TARRY_STORE", DEFAULT_STORE)


def err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def os_user() -> str | None:
    """The OS user name (what `--actor` defaults to), or None when there is none."""
    import getpass

    try:
        return getpass.getuser() or None
    except (OSError, KeyError, ImportError):
        return None


def runtime_of(args: argparse.Namespace) -> Runtime:
    # The signing secret comes from the environment only: a flag would show it in `ps`.
    return Runtime(
        store=args.store,
        durability=getattr(args, "durability", "pause"),
        lease=getattr(args, "lease", 30.0),
        secret=os.environ.get("TARRY_SECRET") or None,
        retention=getattr(args, "retention", None),
    )


def json_arg(text: str | None, option: str) -> Any:
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
