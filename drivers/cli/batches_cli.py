"""`tarry batches ls`: the provider batches that BatchRequests were submitted in, as the store
records them (tarry.batches)."""

from __future__ import annotations

import argparse
from typing import cast

from tarry.drivers.cli.common import EXIT_OK, runtime_of
from tarry.drivers.cli.mailbox import age
from tarry.drivers.reading.jsonable import dumps
from tarry.snapshots.batch_records import BatchStore


def ls(args: argparse.Namespace) -> int:
    rt = runtime_of(args)
    rows = cast(BatchStore, rt.store).batches(open=not args.all, limit=args.limit)
    now = rt.clock.now()
    if args.json:
        print(
            dumps(
                [
                    {
                        "submission_id": r.submission_id,
                        "via": r.via,
                        "provider_id": r.provider_id,
                        "status": r.status,
                        "total": r.total,
                        "counts": r.counts,
                        "created_at": r.created_at,
                        "ended_at": r.ended_at,
                    }
                    for r in rows
                ]
            )
        )
        return EXIT_OK
    if not rows:
        print("no open batches" if not args.all else "no batches")
        return EXIT_OK
    for r in rows:
        counts = " ".join(f"{k}={v}" for k, v in sorted(r.counts.items())) or "-"
        ended = f", ended {age(now, r.ended_at)} ago" if r.ended_at is not None else ""
        print(
            f"{r.via:<10} {r.provider_id or '(not recorded)':<24} {r.status:<12} "
            f"{r.total:>7} requests  {counts}  age {age(now, r.created_at)}{ended}"
        )
    return EXIT_OK
