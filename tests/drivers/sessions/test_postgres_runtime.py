"""A Runtime on PostgreSQL, end to end: pause in one process, resume in another.

This file is also the script the child processes run:
    python test_postgres_runtime.py run DSN LOG        -> prints the token of the Gate's pause
    python test_postgres_runtime.py resume DSN TOKEN   -> prints the outcome's status and output
    python test_postgres_runtime.py race DSN TOKEN     -> prints "ready" once connected, resumes
                                                          when a line comes on stdin; prints
                                                          won/lost
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tarry import Flow, ForEach, Gate, Runtime, TokenAlreadyUsed

N, K = 6, 3  # iterations, and the one that asks for approval


def work(ctx):
    """A side effect per iteration, counted in the log file: completed steps must never repeat."""
    with open(ctx.input["log"], "a") as f:
        f.write(f"{ctx.index} {os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())
    return ctx.item * 10


def approve_one(ctx):
    return ctx.index == K


def total(ctx):
    return sum(ctx.outputs["items"])


def make_flow() -> Flow:
    from tarry import Branch

    return Flow(
        "pg_e2e",
        [
            ForEach(
                "items",
                list(range(N)),
                [Branch("ask", when=approve_one, then=Gate("decision", "ship it?")), work],
            ),
            total,
        ],
    )


# -- the tests ---------------------------------------------------------------------------------

HERE = str(Path(__file__).resolve())


def child(*args: str, timeout: float = 60) -> str:
    result = subprocess.run(
        [sys.executable, HERE, *args], capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture
def dsn() -> Iterator[str]:
    """A postgresql:// URL whose search_path is a fresh schema, dropped after the test."""
    import pgserver

    with pgserver.scratch_schema() as schema:
        yield pgserver.schema_dsn(schema)


def logged(log: Path) -> list[int]:
    return sorted(int(line.split()[0]) for line in log.read_text().splitlines())


@pytest.mark.parametrize("durability", ["pause", "step"])
def test_pause_here_resume_in_another_runtime(dsn: str, tmp_path: Path, durability: str) -> None:
    log = tmp_path / "effects.log"
    first = Runtime(store=dsn, durability=durability)
    out = first.run(make_flow(), {"log": str(log)})
    assert out.paused and out.pause.kind == "human"
    assert logged(log) == list(range(K))

    second = Runtime(store=dsn, durability=durability, flows=[make_flow()])
    done = second.resume(out.token, {"approved": True, "by": "ann"})
    assert done.ok
    assert done.output == sum(i * 10 for i in range(N))
    assert logged(log) == list(range(N))  # each iteration exactly once
    with pytest.raises(TokenAlreadyUsed):
        first.resume(out.token, True)

    view = first.session(out.session_id)
    assert view.status == "completed"
    events = view.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert view.derive_state() == view.state
    for rt in (first, second):
        rt.store.close()


def test_pause_in_one_process_resume_in_another(dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    token = child("run", dsn, str(log))
    assert token.startswith("tk_")
    assert logged(log) == list(range(K))
    status, output = child("resume", dsn, token).split(maxsplit=1)
    assert status == "ok"
    assert output == str(sum(i * 10 for i in range(N)))
    lines = log.read_text().splitlines()
    assert sorted(int(line.split()[0]) for line in lines) == list(range(N))
    assert len({line.split()[1] for line in lines}) == 2  # two processes did the work

    rt = Runtime(store=dsn)
    [summary] = rt.sessions()
    view = rt.session(summary.session_id)
    assert view.status == "completed" and view.derive_state() == view.state
    rt.store.close()


def test_processes_racing_for_one_token_resume_it_once(dsn: str, tmp_path: Path) -> None:
    log = tmp_path / "effects.log"
    token = child("run", dsn, str(log))
    procs = [
        subprocess.Popen(
            [sys.executable, HERE, "race", dsn, token],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    # A barrier: every child has started and connected before any of them resumes.
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(out.strip())
    assert sorted(results) == ["lost", "lost", "lost", "won"]
    assert logged(log) == list(range(N))


# -- the child processes -----------------------------------------------------------------------


def test_a_final_save_on_a_dropped_connection_is_retried_on_a_fresh_one(dsn: str) -> None:
    import uuid

    import pgserver
    import psycopg

    app = f"tarry_cut_{uuid.uuid4().hex[:8]}"  # names this test's connections, and no others

    def cut(ctx):
        # The server drops every connection of the store's pool while the step runs (a
        # restart, a network cut): the run's final save meets a dead pooled connection.
        with psycopg.connect(pgserver.server_dsn(), autocommit=True) as admin:
            (dropped,) = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (app,),
            ).fetchone()
        return dropped

    rt = Runtime(store=f"{dsn}&application_name={app}")
    out = rt.run(Flow("cut", [cut, lambda ctx: {"dropped": ctx.prev}]))
    assert out.ok and out.output["dropped"] >= 1
    view = rt.session(out.session_id)
    assert view.status == "completed" and view.derive_state() == view.state
    rt.store.close()


def _main(command: str, dsn: str, arg: str) -> None:
    rt = Runtime(store=dsn, flows=[make_flow()])
    try:
        if command == "run":
            out = rt.run(make_flow(), {"log": arg})
            assert out.paused, out
            print(out.token)
        elif command == "resume":
            out = rt.resume(arg, {"approved": True})
            print(out.status, out.output if out.ok else out.error)
        elif command == "race":
            rt.store.find_token(arg)  # connected: the pool holds a live connection
            print("ready", flush=True)
            sys.stdin.readline()  # the parent's "go", sent to every child at once
            try:
                rt.resume(arg, True)
                print("won")
            except TokenAlreadyUsed:
                print("lost")
        else:
            raise SystemExit(f"unknown command {command!r}")
    finally:
        rt.store.close()


if __name__ == "__main__":
    _main(*sys.argv[1:])
