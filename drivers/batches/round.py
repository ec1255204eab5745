"""The batch round: on `poll()` and in workers, submit the waiting `BatchRequest`s that no open
batch holds, check each open batch once, and deliver the results of the ended ones by key.

Submitted once. A submission is written to the store (`batch_intent`: its record and its keys,
each key in at most one open submission, so two workers gathering the same waits split them)
before anything is uploaded, and the batch carries its submission id. A worker that dies between
the upload and recording the provider's id leaves a record "submitting": once its lease has
passed, the next round asks the provider for a batch carrying that id (`find`) and records it,
and only when there is none uploads it again. So no key is ever in two live batches.

Delivered once. An ended batch is claimed (leased to one runtime, so that of many workers one
delivers it), the waits are read after the claim, and its results go through `deliver_many`,
the exactly-once road, to the keys that still wait and hold no queued message; then the
submission is marked ended and its keys are freed (one write). A round that dies between the two reads the results again, and
finds the keys already delivered no longer waiting. Keys the provider did not finish (the batch
expired or was cancelled) are left waiting, and the next round submits them again.

Kept, not dropped. The answers for keys that no longer wait when their batch ends (their lane
was cancelled: a concurrent ForEach failed with its session) are queued under their keys by
the first round that delivers the batch, which then marks it "delivering" before it delivers
to the waiting keys; a retry's lanes take them instead of submitting again. A round that
takes over a batch marked "delivering" queues nothing (what no longer waits was delivered).

One check per batch per round. Of the runtimes on one store, one checks each open batch in a
round: the one whose turn it is (`BatchStore.batch_turns`, snapshots/batch_turns.py: a slot of
the clock, `lease` seconds long, taken without a write by the first to ask).

Costs: a round with nothing new reads the waits and the open submissions, asks for its turns,
makes one status call per open batch whose turn it holds, and writes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, cast

from tarry.drivers.batches.adapter import BatchStatus, split
from tarry.drivers.batches.results import UNFINISHED
from tarry.drivers.core import Core
from tarry.drivers.drive.outcome import Outcome
from tarry.drivers.limits import log
from tarry.drivers.rounds.boundary import Round
from tarry.drivers.rounds.delivering import Delivery, deliver_many, waiting
from tarry.engine.elements.batch_request import BATCH_ERROR, REASON
from tarry.engine.errors import TarryError
from tarry.engine.short_hash import short_hash
from tarry.snapshots.batch_records import BatchRecord, BatchStore
from tarry.snapshots.codec.pack import loads
from tarry.snapshots.records import WaitRecord

#: How results are delivered: {key: value} -> Delivery.
Deliver = Callable[[dict[str, Any]], Delivery]

#: The status of a submission recorded before its upload (no provider id yet).
SUBMITTING = "submitting"

#: The status of an ended submission whose results a round began to deliver: a later round
#: (its worker died) delivers to the keys that still wait, and queues nothing more.
DELIVERING = "delivering"

#: Results delivered per deliver_many call (a whole Anthropic batch: one resume per session).
DELIVER_CHUNK = 100_000


def batch_round(
    core: Core, round: Round | None = None, deliver: Deliver | None = None
) -> list[Outcome]:
    """Check the open batches (delivering the results of the ended ones), then submit what
    waits and no open batch holds. The outcomes of the sessions the results moved on.
    `deliver`: how results are delivered ({key: value} -> Delivery; `deliver_many` by
    default, a worker's imports the flows of sessions it does not know)."""
    if not core.batches:
        return []
    round = round or Round()
    deliver = deliver or partial(deliver_many, core)
    # 1. One status call per open batch (a write only when its status changed). A batch that
    # ended, or a submission never given a provider id, is claimed (leased to this runtime):
    # of many workers, one delivers it (or uploads it again).
    # Of many runtimes on one store, only the one whose turn it is checks a batch this round.
    ended: list[tuple[BatchRecord, BatchStatus]] = []
    unrecorded: list[BatchRecord] = []
    failed: set[str] = set()
    records = _store(core).batches(open=True)
    # (A runtime without the batch's adapter takes no turn of it: one that has it checks.)
    turns = _turns(
        core,
        [r.submission_id for r in records if r.provider_id is not None and r.via in core.batches],
    )
    for record in records:
        if round.stopping():
            return []
        try:
            if record.provider_id is None:
                if _stale(core, record) and _claim(core, record):
                    unrecorded.append(record)
                continue
            if record.submission_id not in turns:
                continue  # another runtime checks it this round
            status = _check(core, record)
            if status is not None and _claim(core, record):
                ended.append((record, status))
        except Exception:
            log().exception("batches: checking %s (%s) failed", record.submission_id, record.via)
            failed.add(record.submission_id)
    if failed:
        # A check that failed here (this runtime's credentials, its network) is given back:
        # another runtime takes the turn at its round, instead of none checking until the
        # slot ends.
        _turns(core, sorted(turns - failed))
    # 2. What waits now: read after the claims, so that what a worker delivered before its
    # claim lapsed is seen as delivered.
    rows = [
        row
        for row in waiting(core, kind="external")
        if row.key is not None and row.reason.startswith(REASON)
    ]
    by_key = {row.key: row for row in rows if row.key is not None}
    for record in unrecorded:
        try:
            _recover(core, core.batches[record.via], record, by_key)
        except Exception:
            log().exception("batches: recovering %s (%s) failed", record.submission_id, record.via)
    # 3. The results of every batch that ended, delivered together: one resume per session
    # touched, however many batches its requests were split into.
    # Results of keys that no longer wait (their lane was cancelled: a concurrent ForEach
    # failed, its session failed) are queued under their keys, kept for a retry's waits:
    # only by the first round that delivers the batch, which marks it "delivering" first.
    results: dict[str, Any] = {}
    orphans: dict[str, Any] = {}
    read: list[tuple[BatchRecord, BatchStatus, list[str]]] = []
    mark: list[str] = []  # the batches that deliver something for the first time
    for record, status in ended:
        try:
            first = record.status != DELIVERING
            had = len(orphans)
            keys = _read(core, record, status, by_key, results, orphans if first else None)
            read.append((record, status, keys))
            if first and (keys or len(orphans) > had):
                mark.append(record.submission_id)
        except Exception:
            log().exception("batches: reading %s (%s) failed", record.submission_id, record.via)
    outcomes: list[Outcome] = []
    if orphans:
        outcomes += _deliver(core, orphans, deliver)[0]
    for sid in mark:
        _store(core).batch_update(sid, status=DELIVERING, at=core.clock.now())
    delivered, refused = _deliver(core, results, deliver)
    outcomes += delivered
    for record, status, keys in read:
        if refused.intersection(keys):
            continue  # kept open: the next round reads its results and tries them again
        _store(core).batch_end(
            record.submission_id, status=status.status, at=core.clock.now(), counts=status.counts
        )
    # 4. Submit what waits and no open batch holds.
    if rows and not round.stopping():
        rest = [row for row in rows if row.key not in results]
        _submit_waiting(core, rest)
    return outcomes


def _store(core: Core) -> BatchStore:
    """The runtime's store, as what it keeps of batches (every tarry store does)."""
    return cast(BatchStore, core.store)


def _claim(core: Core, record: BatchRecord) -> bool:
    now = core.clock.now()
    until = now + dt.timedelta(seconds=core.lease)
    return bool(_store(core).batch_claim(record.submission_id, core.owner, until, now))


def slot(core: Core) -> int:
    """The round, as the store's turns count them: a slot of the runtime's clock, `lease`
    seconds long (snapshots/batch_turns.py)."""
    return int(core.clock.now().timestamp() // max(core.lease, 0.001))


def _turns(core: Core, submission_ids: list[str]) -> set[str]:
    """The open batches whose status check is this runtime's this round: those whose turn it
    holds or takes now. Every one when the store keeps no turns, or when asking it failed (a
    check too many rather than none)."""
    ask = getattr(core.store, "batch_turns", None)
    if ask is None:
        return set(submission_ids)
    try:
        mine = set(ask(submission_ids, owner=core.owner, slot=slot(core)))
    except Exception:
        if core.reported.first(TURNS, "failed"):  # once, until it works again
            log().exception("batches: whose turn it is to check could not be asked; checking all")
        return set(submission_ids)
    core.reported.forget(TURNS)
    return mine


#: Where the trouble of asking for turns is remembered (logged once, not every round).
TURNS = "batch-turns"


def _stale(core: Core, record: BatchRecord) -> bool:
    """Whether a submission never given a provider id was left by a worker that died (or lost
    the answer): its lease has passed since it was written."""
    return record.updated_at + dt.timedelta(seconds=core.lease) <= core.clock.now()


# -- submitting ----------------------------------------------------------------------------------


def _submit_waiting(core: Core, rows: list[WaitRecord]) -> None:
    """Submit the waiting requests that no open submission holds, a batch per adapter (split at
    the adapter's limits)."""
    keys = [row.key for row in rows if row.key is not None]
    held = _store(core).batch_submitted(keys)
    by_via: dict[str, list[tuple[str, bytes]]] = {}
    seen: set[str] = set()
    for row in rows:
        key = row.key
        if key is None or key in held or key in seen:
            continue
        seen.add(key)
        via = row.reason[len(REASON) :]
        adapter = core.batches.get(via)
        if adapter is None:
            if core.reported.first(row.session_id, "batch-via"):
                log().error(
                    "batches: session %s waits on %r, not registered here", row.session_id, via
                )
            continue
        try:
            body = loads(row.payload)["body"]
        except Exception:
            if core.reported.first(row.session_id, "batch-body"):
                log().exception(
                    "batches: session %s: the request of %r cannot be read", row.session_id, key
                )
            continue
        problem = adapter.problem(key, body)
        if problem is not None:
            if core.reported.first(row.session_id, "batch-problem"):
                log().error("batches: session %s: %s", row.session_id, problem)
            continue
        by_via.setdefault(via, []).append((key, adapter.line(key, body)))
    for via, items in by_via.items():
        adapter = core.batches[via]
        for group in split(items, adapter.max_requests, adapter.max_bytes):
            _submit(core, via, adapter, group)


def submission_id(via: str, keys: list[str], at: dt.datetime) -> str:
    """tarry's id of a submission: derived from what it holds and when it was made."""
    return "tarry-" + short_hash(f"{via}\n{at.isoformat()}\n" + "\n".join(keys))[:24]


def _submit(core: Core, via: str, adapter: Any, group: list[tuple[str, bytes]]) -> None:
    now = core.clock.now()
    keys = [key for key, _ in group]
    sid = submission_id(via, keys, now)
    record = BatchRecord(sid, via, None, SUBMITTING, len(keys), now, now)
    free = set(_store(core).batch_intent(record, keys))
    if not free:
        return  # another worker holds them all
    lines = [line for key, line in group if key in free]
    _upload(core, adapter, record, lines)


def _upload(core: Core, adapter: Any, record: BatchRecord, lines: list[bytes]) -> None:
    try:
        provider_id, status = adapter.submit(record.submission_id, lines)
    except Exception:
        # The batch may have been made all the same (a lost answer): the record stays
        # "submitting", and once its lease passes a round looks for it before uploading again.
        log().exception("batches: submitting %s to %s failed", record.submission_id, record.via)
        return
    _store(core).batch_update(
        record.submission_id,
        status=status.status,
        at=core.clock.now(),
        provider_id=provider_id,
        counts=status.counts,
    )


# -- checking ------------------------------------------------------------------------------------


def _check(core: Core, record: BatchRecord) -> BatchStatus | None:
    """One status call for an open batch (a write only if its status changed); its status
    when it has ended."""
    adapter = core.batches.get(record.via)
    if adapter is None or record.provider_id is None:
        return None
    status: BatchStatus = adapter.status(record.provider_id)
    if not status.ended:
        if status.status != record.status or status.counts != record.counts:
            _store(core).batch_update(
                record.submission_id,
                status=status.status,
                at=core.clock.now(),
                counts=status.counts,
            )
        return None
    return status


def _recover(
    core: Core, adapter: Any, record: BatchRecord, by_key: Mapping[str, WaitRecord]
) -> None:
    """A submission recorded but never given a provider id, whose worker died (or lost the
    answer) and which this runtime claimed: the provider's batch carrying it, else upload it
    again."""
    now = core.clock.now()
    taken = {r.provider_id for r in _store(core).batches(open=False, via=record.via, limit=100_000)}
    found = adapter.find(record, {t for t in taken if t})
    if found is not None:
        log().warning("batches: %s was submitted as %s; recorded now", record.submission_id, found)
        _store(core).batch_update(record.submission_id, status="found", at=now, provider_id=found)
        return
    keys = _store(core).batch_keys(record.submission_id)
    lines = []
    for key in keys:
        row = by_key.get(key)
        if row is not None:
            lines.append(adapter.line(key, loads(row.payload)["body"]))
    if not lines:
        _store(core).batch_end(record.submission_id, status="abandoned", at=now, counts={})
        return
    _store(core).batch_update(record.submission_id, status=SUBMITTING, at=now)
    _upload(core, adapter, record, lines)


def _read(
    core: Core,
    record: BatchRecord,
    status: BatchStatus,
    by_key: Mapping[str, WaitRecord],
    results: dict[str, Any],
    orphans: dict[str, Any] | None = None,
) -> list[str]:
    """Add an ended batch's results for its keys that still wait to `results` (streamed); the
    keys added. With `orphans`, the answers (not the errors) of its keys that wait no more
    are added there."""
    assert record.provider_id is not None
    adapter = core.batches[record.via]
    mine = set(_store(core).batch_keys(record.submission_id))
    added = []
    for key, value in adapter.results(record.provider_id, status):
        if value is UNFINISHED or key not in mine:
            continue
        if key in by_key:
            results[key] = value
            added.append(key)
        elif orphans is not None and not _is_error(value):
            orphans[key] = value
    return added


def _is_error(value: Any) -> bool:
    return type(value) is dict and len(value) == 1 and BATCH_ERROR in value


def _deliver(
    core: Core, results: dict[str, Any], deliver: Deliver
) -> tuple[list[Outcome], set[str]]:
    """Deliver `results` by key through deliver_many, a chunk at a time; the outcomes, and the
    keys whose delivery was refused (logged). A key that holds a queued message already was
    delivered by a round that died before it marked its batch ended (its session was busy
    then): never a second message."""
    outcomes: list[Outcome] = []
    refused: set[str] = set()
    keys = list(results)
    for start in range(0, len(keys), DELIVER_CHUNK):
        chunk = keys[start : start + DELIVER_CHUNK]
        queued = core.store.queued_keys(chunk)
        fresh = {key: results[key] for key in chunk if key not in queued}
        if not fresh:
            continue
        try:
            outcomes += deliver(fresh).outcomes
        except TarryError:
            # deliver_many refuses the whole chunk for one bad key (a session whose flow is
            # not registered here, a value its element refuses): deliver each on its own.
            for key, value in fresh.items():
                try:
                    outcomes += deliver({key: value}).outcomes
                except TarryError as exc:
                    refused.add(key)
                    if core.reported.first(by_session(key), "batch-deliver"):
                        log().error("batches: the result for %r was refused: %s", key, exc)
    return outcomes, refused


def by_session(key: str) -> str:
    return f"batch-key:{key}"
