"""The long-running commands, `tarry worker` and `tarry serve`, and `tarry db upgrade`."""

from __future__ import annotations

import argparse
import logging
import signal
from typing import Any

from tarry.drivers.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    SERVER_EXTRA,
    StoreError,
    UsageError,
    err,
    runtime_of,
)
from tarry.drivers.cli.text import summary
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.stores import open_store
from tarry.drivers.worker import Worker, load_adapters
from tarry.engine.errors import TarryError

# --- long-running: worker, serve; the schema -------------------------------------------------


def worker(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        msg = f"--interval must be a positive number of seconds (got {args.interval:g})"
        raise UsageError(msg)
    # A long-running process: its warnings (a flow it cannot import, a failed round) are
    # its log, with times.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    rt = runtime_of(args)
    # A worker without the secret of a store that holds signed tokens would fail every round:
    # refuse at once instead (SecretRequired, exit 2, saying to set TARRY_SECRET).
    rt.tokens.check()
    adapters: dict[str, Any] = {}
    for ref in args.adapters:
        adapters.update(load_adapters(ref))
    rt.adapters = adapters  # InvalidArgument (exit 2) for anything that is not one
    batches: dict[str, Any] = {}
    for ref in getattr(args, "batches", []):
        batches.update(load_adapters(ref))
    rt.batches = batches  # tarry.batches adapters: the worker submits and delivers BatchRequests

    def report(source: str, out: Outcome) -> None:
        print(f"{source} {out.session_id}: {summary(out)}", flush=True)

    metrics = serve_metrics(rt, args)
    worker = Worker(rt, interval=args.interval, report=report, on_round=metrics and metrics.round)
    if args.once:
        worker.run_once()
        return EXIT_OK

    def stop(signum: int, frame: Any) -> None:
        # Nothing is written here: the interrupted code may be writing to the same stream.
        if worker.stopping:  # asked twice: stop now (the step in flight is recovered later)
            raise KeyboardInterrupt
        # The session in progress pauses at its next checkpoint (after the step in flight)
        # and is handed back, due at once for the next worker; no other session starts.
        worker.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    err(f"tarry worker: store {args.store}, a round every {args.interval:g} s")
    worker.run_forever()
    if worker.handed_back:
        ids = ", ".join(worker.handed_back)
        err(f"tarry worker: stopped (the session in progress, {ids}, was paused and handed back)")
    else:
        err("tarry worker: stopped")
    return EXIT_OK


def serve_metrics(rt: Any, args: argparse.Namespace) -> Any:
    """The worker's Prometheus metrics, served on `--metrics-port` (None without it)."""
    port = getattr(args, "metrics_port", None)
    if port is None:
        return None
    if not 0 <= port <= 65535:
        msg = f"--metrics-port must be a port number, 0 to 65535 (got {port})"
        raise UsageError(msg)
    try:
        from tarry.drivers.telemetry.prometheus import Metrics
    except ImportError:
        msg = "--metrics-port needs prometheus_client: pip install 'tarry[prometheus]'"
        raise UsageError(msg) from None
    metrics = Metrics(rt)
    try:
        server = metrics.serve(port, args.metrics_host)
    except OSError as exc:
        msg = f"--metrics-port {port}: cannot listen on {args.metrics_host} ({exc.strerror})"
        raise UsageError(msg) from None
    host, bound = server.server_address[:2]
    err(f"tarry worker: metrics at http://{host}:{bound}/metrics")
    return metrics


def serve(args: argparse.Namespace) -> int:
    try:
        from tarry.drivers.http import serve
        from tarry.drivers.http.users import read_users

        rt = runtime_of(args)  # with the flows of --flow
        users = read_users(args.users) if args.users else None
        serve(
            rt,
            host=args.host,
            port=args.port,
            token=args.token,
            users=users,
            session_hours=args.session_hours,
            forwarded_allow_ips=args.forwarded_allow_ips,
        )
    except OSError as exc:  # the address is in use, or not this machine's: bound before serving
        err(f"tarry: {exc.strerror or exc}")
        return EXIT_ERROR
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in SERVER_EXTRA:
            raise
        msg = f"`tarry serve` needs the 'server' extra: pip install 'tarry[server]' ({exc})"
        raise UsageError(msg) from exc
    return EXIT_OK


def db(args: argparse.Namespace) -> int:
    url = args.store
    try:
        if url.startswith(("postgresql://", "postgres://")):
            # Opened without upgrading, so that the upgrade is this command's, and it can say
            # what it applied.
            from tarry.snapshots.postgres.store import PostgresStore

            store: Any = PostgresStore(url, auto_upgrade=False)
        else:
            store = open_store(url)
    except (TarryError, ValueError):
        raise  # a bad URL: its own message
    except Exception as exc:  # e.g. PostgreSQL not reachable
        msg = f"cannot open the store {url!r}: {type(exc).__name__}: {exc}"
        raise StoreError(msg) from exc
    try:
        upgrade = getattr(store, "upgrade", None)
        if upgrade is None:
            print(f"the {type(store).__name__} needs no migration")
            return EXIT_OK
        applied = upgrade()
        version = store.schema_version() if hasattr(store, "schema_version") else None
        done = f"applied migrations {', '.join(map(str, applied))}" if applied else "up to date"
        print(f"{done}" + (f": schema version {version}" if version is not None else ""))
        return EXIT_OK
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
