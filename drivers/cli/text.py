"""Outcomes as the lines `tarry` prints: what happened, the session, and how to go on."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from tarry.drivers.cli.common import EXIT_ERROR, EXIT_OK, EXIT_PAUSED, err, store_default
from tarry.drivers.cli.progress import path_text
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.reading.jsonable import dumps


def store_hint(args: argparse.Namespace) -> str:
    return "" if args.store == store_default() else f" --store {shlex.quote(args.store)}"


def print_outcome(out: Outcome, args: argparse.Namespace) -> int:
    if args.json:
        print(dumps(out))
    else:
        for line in describe_outcome(out, store_hint(args)):
            print(line)
        if out.failed and out.error is not None and out.error.traceback:
            err(out.error.traceback.rstrip())
    return EXIT_OK if out.ok else EXIT_PAUSED if out.paused else EXIT_ERROR


#: The waits an outcome's text lists by name; the rest are counted.
SHOWN_WAITS = 10


def describe_outcome(out: Outcome, store_hint: str = "") -> list[str]:
    """An outcome as lines of text: what happened, the session, and how to go on."""
    if out.ok:
        return ["completed", f"session {out.session_id}", f"output {dumps(out.output)}"]
    if out.paused and out.pause is not None:
        p = out.pause
        lines = [paused_line(p), f"session {out.session_id}"]
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
        elif out.token and p.kind == "system":
            # An abort (or a back-off): it takes no value, it just goes on.
            lines += [
                f"token {out.token}",
                f"resume with: tarry resume {out.token}{store_hint}",
            ]
        elif out.token:
            lines += [
                f"token {out.token}",
                f"resume with: tarry resume {out.token} --value JSON{store_hint}",
            ]
        if len(out.pauses) > 1:  # concurrent branches wait too, each with its own token
            lines.append(f"{len(out.pauses)} branches wait; each has its own token:")
            shown = out.pauses[:SHOWN_WAITS]
            lines += [f"  {path_text(w.path)} ({w.kind}) token {w.token}" for w in shown]
            if len(out.pauses) > SHOWN_WAITS:
                lines.append(
                    f"  ... and {len(out.pauses) - SHOWN_WAITS} more (tarry show {out.session_id})"
                )
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


def paused_line(pause: Any) -> str:
    """`paused (kind) at path: reason` (of a PauseInfo or a PauseState)."""
    where = f"paused ({pause.kind}) at {path_text(pause.path)}"
    return f"{where}: {pause.reason}" if pause.reason else where


def summary(out: Outcome) -> str:
    """An outcome in one line, without its token (for worker logs)."""
    if out.ok:
        return "ok"
    if out.paused and out.pause is not None:
        return paused_line(out.pause)
    e = out.error
    return f"failed at {path_text(e.path)}: {e.type}: {e.message}" if e else out.status
