"""`tarry cancel`, `abort`, `ls`, `show`, `events`, `due` and `stats`: manage and inspect sessions."""

from __future__ import annotations

import argparse
import json
import time

from tarry.drivers.cli.common import ENDED, EXIT_OK, runtime_of
from tarry.drivers.cli.progress import path_text
from tarry.drivers.cli.text import paused_line, summary
from tarry.drivers.reading.jsonable import dumps, event_to_dict, session_to_dict
from tarry.drivers.worker import FLOW_REF, register_recorded_flows

# --- managing and inspecting ---------------------------------------------------------------


def cancel(args: argparse.Namespace) -> int:
    out = runtime_of(args).cancel(args.target, actor=args.actor)
    if args.json:
        print(dumps(out))
    elif out.status == "running":
        print(f"cancel requested: session {out.session_id} stops at its next checkpoint")
    else:
        print(f"cancelled session {out.session_id}")
    return EXIT_OK


def abort(args: argparse.Namespace) -> int:
    """Works on a session running in any process that shares the store: the request is
    stored, and that process stops the run within a second (or after its step in flight)."""
    rt = runtime_of(args)
    rt.abort(args.session, resumable=not args.cancel, actor=args.actor)
    status = rt.session(args.session).status
    if status == "running":
        action = "cancel" if args.cancel else "abort"
        print(f"{action} requested: session {args.session} stops at its next checkpoint")
    else:
        print(f"session {args.session} is {status}")
    return EXIT_OK


def ls(args: argparse.Namespace) -> int:
    rows = runtime_of(args).sessions(
        status=args.status, flow=args.flow, limit=args.limit, offset=args.offset
    )
    if args.json:
        print(dumps(rows))
        return EXIT_OK
    for s in rows:
        print(f"{s.session_id}  {s.flow:<20} {s.status:<10} {s.updated_at:%Y-%m-%d %H:%M:%S}")
    return EXIT_OK


def children(args: argparse.Namespace) -> int:
    """`tarry children ID`: the sessions a session started with Child elements, in the order
    it started them, each with its status (`pruned` for one no longer stored)."""
    rt = runtime_of(args)
    view = rt.session(args.session)
    ids = view.children
    found = rt.store.load_many(ids) if ids else {}
    rows = [(cid, found[cid].status if cid in found else "pruned") for cid in ids]
    if args.json:
        print(dumps([{"session_id": cid, "status": status} for cid, status in rows]))
        return EXIT_OK
    if view.parent:
        print(f"session {view.session_id} is a child of {view.parent}")
    if not rows:
        print(f"session {view.session_id} started no child sessions")
    for cid, status in rows:
        print(f"{status:<10} {cid}")
    return EXIT_OK


def show(args: argparse.Namespace) -> int:
    rt = runtime_of(args)
    view = rt.session(args.session)
    state = view.state
    out = view.outcome
    if args.json:
        print(dumps(session_to_dict(view)))
        return EXIT_OK
    stale = view.stale(rt.clock.now())
    print(
        f"session {view.session_id}  flow {view.flow}  status {'stale' if stale else view.status}"
    )
    if stale:
        assert view.lease_until is not None
        print(
            f"  its process stopped renewing its lease at {view.lease_until:%Y-%m-%d %H:%M:%S}"
            f" (died or stalled): tarry recover {view.session_id}"
        )
    if view.meta.get(FLOW_REF):
        print(f"  flow_ref {view.meta[FLOW_REF]}")
    if view.parent:
        print(f"  child of {view.parent}")
    print(
        f"  created {view.created_at:%Y-%m-%d %H:%M:%S}  updated "
        f"{view.updated_at:%Y-%m-%d %H:%M:%S}"
    )
    for frame in state.container_stack:
        print(
            f"  in {frame.kind} {path_text(frame.path)}: iteration "
            f"{frame.iteration}, child {frame.child}, "
            f"{frame.completed_iterations} iterations done"
        )
    if view.status == "paused":
        for p in out.pauses:
            print(f"  {paused_line(p)}")
            if p.wake_at:
                print(f"  wakes at {p.wake_at.isoformat()}")
            if len(out.pauses) > 1 and p.token:
                print(f"    token {p.token}")
    if state.error:
        e = state.error
        print(f"  failed at {path_text(e.path)}: {e.type}: {e.message}")
    if view.status == "completed":
        print(f"  output {dumps(state.output)}")
    if out.token:
        print(f"  token {out.token}")
    return EXIT_OK


#: Events `tarry events` reads at a time: a long log prints as it is read, in flat memory.
PAGE = 500


def events(args: argparse.Namespace) -> int:
    rt = runtime_of(args)
    after = 0
    while True:
        view = rt.session(args.session)  # read the status first: events up to it follow
        while True:
            page = view.events(after, PAGE)
            for event in page:
                after = event.seq
                if args.jsonl:
                    print(json.dumps(event_to_dict(event), ensure_ascii=False), flush=args.follow)
                else:
                    print(
                        f"{event.seq:>6} {event.at:%H:%M:%S.%f} {event.type:<30} "
                        f"{'/'.join(map(str, event.path))}",
                        flush=args.follow,
                    )
            if len(page) < PAGE:
                break
        if not args.follow or view.status in ENDED:
            return EXIT_OK
        time.sleep(args.interval)


def due(args: argparse.Namespace) -> int:
    rt = runtime_of(args)
    records = rt.store.due(rt.clock.now(), args.limit)
    if args.run:
        register_recorded_flows(rt, records)
        outcomes = rt.resume_due(limit=args.limit)
        if args.json:
            print(dumps(outcomes))
        for out in [] if args.json else outcomes:
            print(f"resumed {out.session_id}: {summary(out)}")
        return EXIT_OK
    if args.json:
        print(
            dumps(
                [
                    {"session_id": r.session_id, "flow": r.flow, "wake_at": r.wake_at}
                    for r in records
                ]
            )
        )
        return EXIT_OK
    for r in records:
        print(f"{r.session_id}  {r.flow:<20} due {r.wake_at:%Y-%m-%d %H:%M:%S}")
    return EXIT_OK


def stats(args: argparse.Namespace) -> int:
    stats = runtime_of(args).stats(flow=args.flow)
    if args.json:
        print(dumps(stats))
        return EXIT_OK
    print("sessions  " + "  ".join(f"{k} {v}" for k, v in sorted(stats.by_status.items())))
    if stats.flows:
        # Nodes by flow and path (one name in two flows is two rows); waiting apart from runs.
        print(
            f"{'flow':<16} {'node':<30} {'runs':>8} {'failures':>8} {'mean s':>10} "
            f"{'waits':>6} {'mean wait s':>12}"
        )
        for flow, nodes in sorted(stats.flows.items()):
            for path, node in sorted(nodes.items()):
                print(
                    f"{flow:<16} {path:<30} {node.executions:>8} {node.failures:>8} "
                    f"{node.mean_seconds:>10.4f} {node.waits:>6} {node.mean_waiting_seconds:>12.4f}"
                )
    if stats.metrics:
        print("metrics  " + "  ".join(f"{k} {v:g}" for k, v in sorted(stats.metrics.items())))
    return EXIT_OK
