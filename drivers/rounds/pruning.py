"""Retention: `Runtime.prune`, and the pruning workers do as they go (`Runtime(retention=)`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from tarry.drivers.core import Core, checked_age
from tarry.drivers.limits import log
from tarry.engine.describe import describe
from tarry.engine.errors import InvalidArgument
from tarry.snapshots.store import ENDED

#: Sessions deleted per store transaction: each batch is short, so the writers of other
#: sessions never wait long for a prune.
BATCH = 1000
#: How often `retain` prunes.
RETAIN_EVERY = timedelta(minutes=1)


def prune(core: Core, older_than: Any, status: Any, dry_run: bool) -> int:
    """Delete the ended sessions (of `status`) last updated before now - `older_than` by the
    runtime's clock, a batch at a time; how many (with `dry_run`, how many there are)."""
    age = checked_age(older_than, zero=True)
    statuses = checked_statuses(status)
    now = core.clock.now()
    # Zero: every ended session, one that ended at this very instant too.
    before = now - age if age else now + timedelta(microseconds=1)
    store = core.store
    if dry_run:
        return store.prune(before=before, statuses=statuses, now=now, dry_run=True)
    total = 0
    while True:
        deleted = store.prune(before=before, statuses=statuses, now=now, limit=BATCH)
        total += deleted
        if deleted < BATCH:
            break
    _expire_mail(core)
    return total


def _expire_mail(core: Core) -> int:
    """Drop the messages queued longer than the runtime's `mail_ttl`, a batch at a time."""
    total = 0
    before = core.clock.now() - core.mail_ttl
    while True:
        dropped = core.store.purge_mail(before, BATCH)
        total += dropped
        if dropped < BATCH:
            if total:
                log().info("mailbox: dropped %d messages older than %s", total, core.mail_ttl)
            return total


def checked_statuses(status: Any) -> tuple[str, ...]:
    """The ended statuses `status` names (one str or an iterable of them), in ENDED's order;
    InvalidArgument naming what is not one."""
    given: Iterable[Any] = (status,) if isinstance(status, str) else status
    try:
        named = list(given)
    except TypeError:
        named = []
    if not named or any(s not in ENDED for s in named):
        wrong = status if not named else [s for s in named if s not in ENDED]
        msg = (
            f"status must name ended statuses, some of {ENDED} (got {describe(wrong)}): "
            "running and paused sessions are never pruned"
        )
        raise InvalidArgument(msg)
    return tuple(s for s in ENDED if s in named)


def retain(core: Core) -> int:
    """Prune by the runtime's `retention`, at most once per RETAIN_EVERY (by its clock); the
    sessions deleted (0 when none is set or it is not time yet). Workers call it every round;
    a failure is logged and tried again at the next time."""
    if core.retention is None:
        return 0
    now = core.clock.now()
    if core.retain_at is not None and now < core.retain_at:
        return 0
    core.retain_at = now + RETAIN_EVERY
    try:
        deleted = prune(core, core.retention, ENDED, dry_run=False)
    except Exception:
        log().exception("retention: pruning sessions older than %s failed", core.retention)
        return 0
    if deleted:
        log().info("retention: pruned %d sessions older than %s", deleted, core.retention)
    return deleted
