"""What every `tarry` command shares: exit codes, usage errors, the runtime its arguments
describe, and JSON arguments."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from tarry.drivers.runtime import Runtime
from tarry.drivers.stores import slashes_hint, sqlite_path
from tarry.drivers.worker import load_flow
from tarry.engine.errors import TarryError

DEFAULT_STORE = "sqlite:///tarry.db"
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PAUSED = 0, 1, 2, 3
ENDED = ("completed", "failed", "cancelled")
#: What `tarry serve` imports beyond tarry: missing ones mean the 'server' extra is missing.
SERVER_EXTRA = ("starlette", "uvicorn")


#: The commands that may create the store they are given (a new SQLite file): the others read
#: or change sessions that must be in it already, so a store that is not there is an error.
CREATING = frozenset({"run", "deliver", "worker", "serve", "db"})

#: How the Python API's advice reads on the command line (errors name Runtime arguments).
_CLI_SPELLING = (
    ("pass flow= to resume, or Runtime(flows=[...])", "pass --flow MODULE:FLOW"),
    ("allow_changed=True", "--allow-changed"),
)


class UsageError(Exception):
    """Arguments the command cannot work with: exit 2 with the message."""


class StoreError(Exception):
    """The store cannot be reached or read (a database down, a file that is no store): exit 1."""


def cli_spelling(message: str) -> str:
    """An error's message with the Python API's advice spelled as the command's options."""
    for python, cli in _CLI_SPELLING:
        message = message.replace(python, cli)
    return message


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
    """The Runtime over the store the arguments name. A command that does not create stores
    (`CREATING`) refuses a SQLite file that is not there rather than create an empty one: it
    gets a stand-in (`_NoStore`) that says so when first used, so that the command's own checks
    of its arguments still come first."""
    store: Any = args.store
    if getattr(args, "command", None) not in CREATING:
        missing = missing_store(args)
        if missing is not None:
            store = _NoStore(missing)
    try:
        # The signing secret comes from the environment only: a flag would show it in `ps`.
        rt = Runtime(
            store=store,
            durability=getattr(args, "durability", "pause"),
            lease=getattr(args, "lease", 10.0),
            secret=os.environ.get("TARRY_SECRET") or None,
            retention=getattr(args, "retention", None),
        )
    except (TarryError, ValueError):
        raise  # a bad URL or option: its own message
    except Exception as exc:  # e.g. PostgreSQL not reachable
        msg = f"cannot open the store {args.store!r}: {type(exc).__name__}: {exc}"
        raise StoreError(msg) from exc
    for ref in getattr(args, "flows", ()):  # --flow MODULE:FLOW, of the commands that take it
        rt.register(load_flow(ref))
    return rt


def missing_store(args: argparse.Namespace) -> str | None:
    """When `--store` names a SQLite file that does not exist: the message that says so, and
    what the command looked for (a session, a token) and where. None when there is one."""
    path = sqlite_path(args.store)
    if path is None or path == ":memory:" or os.path.exists(path):
        return None
    if getattr(args, "token", None) is not None:
        what = "unknown resume token: "
    elif getattr(args, "session", None) is not None:
        what = f"no session {args.session!r}: "
    elif getattr(args, "target", None) is not None:
        what = f"no session or token {args.target!r}: "
    else:
        what = ""
    msg = (
        f"{what}no store at {os.path.abspath(path)} ({args.store}): nothing has run with it "
        f"yet; name another with --store or $TARRY_STORE"
    )
    return msg + slashes_hint(path)


class _NoStore:
    """Stands in for a store that is not there: every method it is asked for raises UsageError
    with `message` when called (the Runtime is built without calling any)."""

    def __init__(self, message: str) -> None:
        self._message = message

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._refuse

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise UsageError(self._message)


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
