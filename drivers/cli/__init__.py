"""The `tarry` command: run and resume flows, inspect and manage sessions, run a worker.

Exit codes: 0 ok, 1 the flow failed (or a store error), 2 usage (bad arguments, unknown
session or token, a refused value), 3 paused. See docs/cli.md.
"""

from __future__ import annotations

import sys

from tarry.drivers.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    StoreError,
    UsageError,
    cli_spelling,
    err,
)
from tarry.drivers.cli.parser import build_parser
from tarry.engine.errors import ConcurrentUpdate, SnapshotError, TarryError

__all__ = ["build_parser", "main"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # bad usage: argparse exits 2
    try:
        return args.handler(args)
    except (SnapshotError, ConcurrentUpdate, StoreError) as exc:
        err(f"tarry: {cli_spelling(str(exc))}")
        return EXIT_ERROR
    except (UsageError, TarryError, ValueError) as exc:
        err(f"tarry: {cli_spelling(str(exc))}")
        return EXIT_USAGE
    except BrokenPipeError:  # `tarry events X | head`: the reader has seen enough
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
