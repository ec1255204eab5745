"""`tarry deliver`: resume the waits on a key (`Wait(key=...)`) with a value, or a whole results
file of them, streamed through `deliver_many` a batch at a time. `--format openai|anthropic`
reads a provider's batch result file as it is (drivers/batches/results.py): each line's
`custom_id` is the key, its response body (or its error, which fails a BatchRequest with
BatchItemFailed) the value; requests the provider did not finish are counted, not delivered."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import IO, Any

from tarry.drivers.batches.results import READERS, UNFINISHED
from tarry.drivers.cli.common import EXIT_ERROR, EXIT_OK, UsageError, err, json_arg, runtime_of
from tarry.drivers.cli.progress import count_progress
from tarry.drivers.cli.text import summary
from tarry.drivers.reading.jsonable import dumps
from tarry.drivers.rounds.delivering import Delivery
from tarry.drivers.runtime import Runtime
from tarry.drivers.worker import deliver_importing
from tarry.engine.errors import TarryError
from tarry.engine.keys import check_key

#: Lines of a results file delivered per `deliver_many` call.
BATCH = 1000


class Tally:
    """What a `tarry deliver` did: sessions resumed, keys whose messages stay queued, lines refused.

    A session that several batches move on (its waits' keys spread over the file) is one
    session: `outcomes` holds its latest outcome, at the place it was first moved."""

    def __init__(self) -> None:
        self.kept = 0
        self.errors: list[tuple[int | None, str]] = []
        self.by_session: dict[str, Any] = {}
        #: Lines of requests the provider did not finish (expired, cancelled): not delivered.
        self.unfinished = 0

    @property
    def delivered(self) -> int:
        """How many sessions the deliveries moved on (each once, however many batches)."""
        return len(self.by_session)

    @property
    def outcomes(self) -> list[Any]:
        return list(self.by_session.values())

    def add(self, done: Delivery) -> None:
        self.kept += len(done.queued)
        for out in done.outcomes:
            self.by_session[out.session_id] = out

    def refused(self, line: int | None, problem: str) -> None:
        self.errors.append((line, problem))
        err(f"line {line}: {problem}" if line is not None else f"tarry: {problem}")


def deliver(args: argparse.Namespace) -> int:
    if (args.key is None) == (args.file is None):
        raise UsageError("give a KEY (with --value) or --file RESULTS.jsonl, not both")
    if args.file is not None and args.value is not None:
        raise UsageError("--value goes with a KEY; a --file gives each line's value")
    if args.batch < 1:
        raise UsageError(f"--batch must be at least 1 (got {args.batch})")
    rt = runtime_of(args)
    rt.tokens.check()  # SecretRequired at once, rather than on every batch
    tally = Tally()
    if args.key is not None:
        value = json_arg(args.value, "--value")
        tally.add(deliver_importing(rt, {args.key: value}, actor=args.actor))
    else:
        _deliver_file(rt, args, tally)
    return _report(args, tally)


def _deliver_file(rt: Runtime, args: argparse.Namespace, tally: Tally) -> None:
    stream, total = _open(args.file)
    tried: set[str] = set()
    shown = None if args.no_progress or args.json else count_progress(total, "deliver")
    try:
        batch: dict[str, Any] = {}
        lines: dict[str, int] = {}
        done = 0
        for number, parsed in _lines(stream, tally, getattr(args, "format", "jsonl")):
            if parsed is None:
                done += 1
                continue
            key, value = parsed
            if key in batch or len(batch) >= args.batch:
                done += _flush(rt, batch, lines, tally, tried, args.actor)
                batch, lines = {}, {}
                if shown is not None:
                    shown.update(done)
            batch[key] = value
            lines[key] = number
        done += _flush(rt, batch, lines, tally, tried, args.actor)
        if shown is not None:
            shown.update(done)
    finally:
        if shown is not None:
            shown.close()
        if stream is not sys.stdin:
            stream.close()


def _open(name: str) -> tuple[IO[str], int | None]:
    """The results file (`-`: stdin) and its number of lines, when it can be counted first."""
    if name == "-":
        return sys.stdin, None
    try:
        with open(name, "rb") as f:
            total = sum(1 for _ in f)
        return open(name, encoding="utf-8"), total  # noqa: SIM115 - closed by the caller
    except OSError as exc:
        msg = f"cannot read --file {name!r}: {exc.strerror or exc}"
        raise UsageError(msg) from exc


def _lines(
    stream: IO[str], tally: Tally, format: str = "jsonl"
) -> Iterator[tuple[int, tuple[str, Any] | None]]:
    """(line number, (key, value)) for each line, read in `format`; None for a blank or
    refused line (reported) or a request the provider did not finish (counted)."""
    read = READERS[format]
    for number, line in enumerate(stream, 1):
        if not line.strip():
            yield number, None
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            tally.refused(number, f"not valid JSON ({exc.msg} at column {exc.colno})")
            yield number, None
            continue
        try:
            key, value = read(item)
        except ValueError as exc:
            tally.refused(number, str(exc))
            yield number, None
            continue
        if value is UNFINISHED:
            tally.unfinished += 1
            yield number, None
            continue
        try:
            check_key(key)
        except TarryError as exc:
            tally.refused(number, str(exc))
            yield number, None
            continue
        yield number, (key, value)


def _flush(
    rt: Runtime,
    batch: dict[str, Any],
    lines: dict[str, int],
    tally: Tally,
    tried: set[str],
    actor: str | None = None,
) -> int:
    """Deliver a batch; if it is refused (nothing changed then), each line on its own, so that
    only the refused ones are reported. How many lines it handled."""
    if not batch:
        return 0
    try:
        tally.add(deliver_importing(rt, batch, tried, actor=actor))
        return len(batch)
    except TarryError:
        pass
    for key, value in batch.items():
        try:
            tally.add(deliver_importing(rt, {key: value}, tried, actor=actor))
        except TarryError as exc:
            tally.refused(lines[key], f"key {key!r}: {exc}")
    return len(batch)


def _report(args: argparse.Namespace, tally: Tally) -> int:
    if args.json:
        print(
            dumps(
                {
                    "delivered": tally.delivered,
                    "kept": tally.kept,
                    "unfinished": tally.unfinished,
                    "errors": [
                        {"line": line, "message": problem} for line, problem in tally.errors
                    ],
                    "outcomes": tally.outcomes,
                }
            )
        )
    else:
        for out in tally.outcomes:
            print(f"session {out.session_id}: {summary(out)}")
        print(
            f"delivered to {tally.delivered} session{'s' * (tally.delivered != 1)}, "
            f"kept {tally.kept} as mail, {len(tally.errors)} refused"
            + (f", {tally.unfinished} not finished by the provider" if tally.unfinished else "")
        )
    return EXIT_ERROR if tally.errors else EXIT_OK
