"""The report's sections of tarry alone, each from the run's own benchmarks: PostgreSQL
workers, many things in flight, batch waits, delivery costs, the worker's RSS samples."""

from __future__ import annotations

from report_collect import Bench, pick
from report_render import human


def worker_samples(benches: list[Bench]) -> list[str]:
    lines = []
    for b in benches:
        if b.workload == "rss_worker":
            samples = b.extra.get("rss_samples_kb", [])
            mb = ", ".join(f"{s / 1024:,.1f}" for s in samples)
            lines.append(
                f"- {b.system}, {b.extra['resumes']:,} resumes, RSS (MB) every tenth: {mb}"
            )
    return lines


def pg_workers(benches: list[Bench]) -> list[str]:
    """Worker processes on PostgreSQL, before and after due sessions were claimed."""
    found = [b for b in benches if b.workload == "pg_workers"]
    if not found:
        return []
    sessions = max(b.extra.get("sessions", 0) for b in found)
    lines = [
        "## Workers on PostgreSQL",
        "",
        f"{sessions:,} sessions asleep on a due `Sleep`, resumed by 1, 2 and 4 worker processes "
        "on one PostgreSQL (`test_postgres_resumes_from_worker_processes`). *Before*: how "
        "workers found due sessions until issue 14 — each fetched the same earliest ones and "
        "raced the others for their tokens, and slept the interval (1 s) after every round. "
        "*After*: `Worker` claims due sessions with `FOR UPDATE SKIP LOCKED` (disjoint pages) "
        "and starts the next round at once after a full one. Token attempts: `consume_token` "
        "calls per session resumed (1.0: no worker tried a token another one used).",
        "",
        "| workers | resumes/s before | resumes/s after | token attempts per resume before "
        "| after |",
        "|---|---|---|---|---|",
    ]
    for n in sorted({b.extra["workers"] for b in found}):
        before = pick(found, "pg_workers", "tarry", "before", workers=n)
        after = pick(found, "pg_workers", "tarry", "after", workers=n)

        def get(b: Bench | None, key: str, fmt: str) -> str:
            return "not run" if b is None else fmt.format(b.extra[key])

        lines.append(
            f"| {n} | {get(before, 'resumes_per_second', '{:,.0f}')} "
            f"| {get(after, 'resumes_per_second', '{:,.0f}')} "
            f"| {get(before, 'token_attempts_per_resume', '{:.2f}')} "
            f"| {get(after, 'token_attempts_per_resume', '{:.2f}')} |"
        )
    return [*lines, ""]


def inflight(benches: list[Bench]) -> list[str]:
    """Issue 15: concurrent ForEach, many pauses per session, resume_many
    (benchmarks/test_inflight.py), each beside its baseline from the same run."""
    sleep = pick(benches, "inflight_sleep", "tarry")
    noop = pick(benches, "inflight_noop", "tarry")
    many = {kind: pick(benches, f"resume_many_{kind}", "tarry") for kind in ("memory", "sqlite")}
    waiting = sorted(
        (b for b in benches if b.workload == "waiting_bytes"), key=lambda b: b.extra["waiting"]
    )
    if not (sleep or noop or any(many.values()) or waiting):
        return []
    lines = [
        "## Many things in flight",
        "",
        "`benchmarks/test_inflight.py`: concurrent `ForEach`, many waits in one session and "
        "`resume_many`, each beside its baseline measured in the same run.",
        "",
        "| workload | tarry | baseline | tarry ÷ baseline | target | met |",
        "|---|---|---|---|---|---|",
    ]

    def met(value: float, target: float) -> str:
        return "yes" if value <= target else "**no**"

    if sleep is not None:
        e = sleep.extra
        lines.append(
            f"| {e['steps']} async steps of `asyncio.sleep({e['sleep_s']})`, concurrency="
            f"{e['concurrency']}: wall ÷ one sleep | {e['wall_over_sleep']:.2f} | "
            f"{e['gather_over_sleep']:.2f} (`asyncio.gather`) | {e['ratio_to_gather']:.2f} | "
            f"≤ 1.5 | {met(e['wall_over_sleep'], 1.5)} |"
        )
    if noop is not None:
        e = noop.extra
        us = noop.per_unit * 1e6
        lines.append(
            f"| {noop.extra['per']:,} async no-op steps, concurrency={e['concurrency']}: "
            f"µs per item | {us:,.1f} | {e['gather_us_per_item']:,.1f} (`asyncio.gather`); "
            f"{e['throttled_gather_us_per_item']:,.1f} (gather, semaphore of "
            f"{e['concurrency']}) | {e['ratio_to_gather']:.2f}; "
            f"{e['ratio_to_throttled_gather']:.2f} | — | |"
        )
    for kind, b in many.items():
        if b is None:
            continue
        e = b.extra
        where = "in memory" if kind == "memory" else "SQLite"
        target = " ≤ 30 | " + met(e["us_per_branch"], 30.0) if kind == "sqlite" else " — | "
        lines.append(
            f"| {e['branches']:,} waiting iterations, one `resume_many` of every token, "
            f"{where}: µs per branch (total {e['resume_many_s']:.2f} s; "
            f"{e['bytes_per_resumed_branch']:,.0f} bytes written per branch) | "
            f"{e['us_per_branch']:,.1f} | {e['round_trip_us']:,.1f} (one sequential "
            f"pause → resume round trip) | {e['ratio_branch_to_round_trip']:.3f} |{target} |"
        )
    for kind, b in many.items():
        if b is None:
            continue
        e = b.extra
        where = "in memory" if kind == "memory" else "SQLite"
        lines.append(
            f"| the run that pauses those {e['branches']:,} iterations, {where}: seconds "
            f"(bytes written per pause: {e['bytes_per_pause']:,.0f}) | "
            f"{e['run_to_pauses_s']:.2f} | — | — | — | |"
        )
    if waiting:
        lines += [
            "",
            "One branch's resume beside many waiting (SQLite): the branch resumes, runs a step "
            "and waits again — one resume and one pause, in one write. The snapshot holds a "
            "lane per waiting branch, so it grows with the number waiting by the lane's own "
            "entry; the rest of the write (events, values, the wait) does not grow.",
            "",
            "| branches waiting | bytes per pause (the run) | bytes one resume writes | "
            "of which the snapshot | the rest | snapshot bytes per waiting branch "
            "| ms per resume |",
            "|---|---|---|---|---|---|---|",
        ]
        for b in waiting:
            e = b.extra
            lines.append(
                f"| {e['waiting']:,} | {e['bytes_per_pause']:,.0f} | {e['resume_bytes']:,} | "
                f"{e['snapshot_bytes']:,} | {e['resume_bytes_beside_snapshot']:,} | "
                f"{e['snapshot_bytes_per_waiting']:,.1f} | {b.median * 1e3:,.1f} |"
            )
    return [*lines, ""]


def batch_waits(benches: list[Bench]) -> list[str]:
    """Batch waits (issue 16): poll rounds over many keyed waits, and deliver_many."""
    polls = [b for b in benches if b.workload == "poll_keyed"]
    delivers = [
        b
        for b in benches
        if b.workload in ("deliver_many", "deliver_many_mailbox", "deliver_many_branches")
    ]
    counted = [b for b in benches if b.workload == "deliver_many_statements"]
    herds = [b for b in benches if b.workload == "poll_workers"]
    if not polls and not delivers and not counted and not herds:
        return []
    targets = {"sqlite": 0.050, "postgres": 0.200}
    lines = [
        "## Batch waits",
        "",
        "Sessions each paused at a `Wait(key=...)`, as a batch job's prompts are "
        "(`benchmarks/test_batch.py`; docs/batch.md). *Idle round*: `poll()` with a bulk "
        "adapter that has nothing ready (median); rows written counted by SQLite's "
        "`total_changes`, write calls by a wrapper around the store. *Ready round*: one "
        "`poll()` in which some of them are ready. Before issue 16 an idle round over "
        "10,000 waiting sessions took 2.4–3.2 s on SQLite and 14–18 s on PostgreSQL and "
        "wrote 20,000 rows (a claim and a release per session).",
        "",
        "| store | waiting | idle round | target | met | write calls idle | ready | ready round "
        "| write calls per ready |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for b in sorted(polls, key=lambda b: b.variant or ""):
        target = targets.get(b.variant or "")
        met = "" if target is None else ("yes" if b.median <= target else "**no**")
        lines.append(
            f"| {b.variant} | {b.extra['waiting']:,} | {human(b.median)} "
            f"| {'—' if target is None else human(target)} | {met} | {b.extra['idle_writes']} "
            f"| {b.extra['ready']} | {human(b.extra['ready_round_s'])} "
            f"| {b.extra['writes_per_ready']} |"
        )
    if delivers:
        lines += [
            "",
            "| `deliver_many` of results | store | results | total | per result |",
            "|---|---|---|---|---|",
        ]
        shapes = {
            "deliver_many": "to as many waiting sessions",
            "deliver_many_mailbox": "to one session's sequential ForEach (mailbox)",
            "deliver_many_branches": "to one session's waiting branches "
            "(ForEach(concurrency=None))",
        }
        for b in sorted(delivers, key=lambda b: (b.workload, b.variant or "")):
            lines.append(
                f"| {shapes[b.workload]} | {b.variant} | {b.extra['per']:,} | {human(b.median)} "
                f"| {human(b.per_unit)} |"
            )
    if counted:
        lines += [
            "",
            "Statements sent to PostgreSQL by one `deliver_many` to as many sessions, each "
            "waiting on a key of its own, from a Runtime that did not pause them "
            "(`benchmarks/test_postgres_delivery.py`; counted around the store's pool, BEGIN "
            "and COMMIT included). Before issue 24: 14 a session (two reads of the session, one "
            "of its token, one of its key's waits, one of its queue, a transaction of eight "
            "statements to use the token, and the save).",
            "",
            "| sessions | statements | per session | target | met | total | per session |",
            "|---|---|---|---|---|---|---|",
        ]
        for b in counted:
            e = b.extra
            target = e["target_statements_per_session"]
            met = "yes" if e["statements_per_session"] <= target else "**no**"
            lines.append(
                f"| {e['sessions']:,} | {e['statements']:,} | {e['statements_per_session']:.2f} "
                f"| ≤ {target} | {met} | {human(b.median)} | {human(b.per_unit)} |"
            )
    if herds:
        lines += [
            "",
            "Workers (threads, each with a Runtime and a store of its own) polling one bulk "
            "adapter that answers every waiting session at once (`benchmarks/test_poll_workers.py`"
            "): token attempts (`consume_token` calls and tokens given to `consume_tokens`) and "
            "store calls (one statement each on PostgreSQL, one transaction on SQLite) per "
            "resume. Before issue 24, every worker tried every ready token: 1.00 / 1.58 / 2.67 "
            "/ 4.36 attempts and 5.0 / 8.4 / 14.9 / 27.1 statements per resume at 1 / 2 / 4 / 8 "
            "workers on PostgreSQL (1.00 / 1.03 / 1.14 / 1.43 and 5.0 / 7.1 / 11.3 / 19.9 on "
            "SQLite).",
            "",
            "| store | sessions | workers | token attempts per resume | statements per resume "
            "| met (at most workers) |",
            "|---|---|---|---|---|---|",
        ]
        for b in sorted(herds, key=lambda b: b.variant or ""):
            e = b.extra
            attempts, statements = e["attempts_per_resume"], e["statements_per_resume"]
            met = (
                "yes"
                if attempts[-1] <= e["target_attempts_per_resume"]
                and statements[-1] <= e["target_statements_per_resume"]
                else "**no**"
            )
            lines.append(
                f"| {b.variant} | {e['sessions']:,} | {' / '.join(map(str, e['workers']))} "
                f"| {' / '.join(f'{a:.2f}' for a in attempts)} "
                f"| {' / '.join(f'{s:.2f}' for s in statements)} "
                f"| {met} (targets {e['target_attempts_per_resume']:.2f} and "
                f"≤ {e['target_statements_per_resume']:g}) |"
            )
    return [*lines, ""]


#: The benchmarks of benchmarks/test_delivery_costs.py and test_view_reads.py, by test name: a
#: line each, what it measures, and the extra_info keys it shows.
_DELIVERY_COSTS = (
    (
        "test_trickling_results_to_one_wide_session",
        "trickle N results into one session, one `deliver` each: CPU seconds",
        ("branches", "cpu_seconds", "ratio", "target_ratio"),
    ),
    (
        "test_a_resume_of_one_branch_costs_the_same_at_any_width",
        "deliver to one branch of N waiting",
        ("branches", "bytes_read", "bytes_written", "sqlite_wal_bytes", "ratios", "target_ratio"),
    ),
    (
        "test_queued_messages_are_taken_at_a_flat_cost",
        "queued messages taken by Waits",
        ("messages", "cpu_us_per_message", "ratio"),
    ),
    (
        "test_sqlite_wal_bytes_per_delivery",
        "SQLite WAL per delivery",
        ("wal_bytes_per_delivery", "ratio_to_floor", "target_bytes"),
    ),
    (
        "test_sqlite_bytes_written_by_a_wide_start",
        "SQLite bytes written by a wide start",
        ("branches", "data_bytes", "bytes_written", "ratio", "target_ratio"),
    ),
)


def delivery_costs(benches: list[Bench]) -> list[str]:
    """Issue 24's costs of delivery (benchmarks/test_delivery_costs.py): each as its figures."""
    found = {b.name: b for b in benches}
    lines = []
    for name, title, keys in _DELIVERY_COSTS:
        b = found.get(name)
        if b is None:
            continue
        shown = "; ".join(f"{k}: {b.extra[k]}" for k in keys if k in b.extra)
        lines.append(f"| {title} | {shown} |")
    if not lines:
        return []
    return [
        "### Delivery costs",
        "",
        "What moves, not what waits (`benchmarks/test_delivery_costs.py`, one run; see "
        "docs/batch.md).",
        "",
        "| measure | figures |",
        "|---|---|",
        *lines,
        "",
    ]


def batch_requests(benches: list[Bench]) -> list[str]:
    """Issue 26: provider batches (benchmarks/test_batch_requests.py), from the run."""
    found = [b for b in benches if b.workload == "batch_requests"]
    if not found:
        return []
    lines = [
        "## Provider batches",
        "",
        "`BatchRequest`s in one `ForEach` through `OpenAIBatch`, the official SDK against the "
        "project's fake provider server in this process (`benchmarks/test_batch_requests.py`; "
        "docs/batch.md). *Delivery*: CPU seconds of the poll that finds the batch ended (a "
        "status call, the output file streamed and parsed, the results delivered) beside a "
        "`deliver_many` of the same values to an identical session; the fake server's share "
        "(serving the file) is counted against tarry.",
        "",
        "| requests | uploads | batches | idle poll | calls per idle poll | delivery poll CPU "
        "| `deliver_many` CPU | ratio | target | met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for b in found:
        e = b.extra
        met = "yes" if e["ratio"] <= e["target_ratio"] else "**no**"
        lines.append(
            f"| {e['requests']:,} | {e['uploads']} | {e['batches']} "
            f"| {human(e['idle_poll_seconds'])} | {e['idle_poll_calls']} "
            f"| {human(e['poll_cpu_seconds'])} | {human(e['deliver_many_cpu_seconds'])} "
            f"| {e['ratio']:.2f} | ≤ {e['target_ratio']} | {met} |"
        )
    return [*lines, ""]
