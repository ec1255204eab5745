"""`tarry deliver --file --format openai|anthropic` and `tarry batches ls`."""

from __future__ import annotations

import json
import sys

import pytest
from batchflows import claude_flow, openai_flow
from tarry import Runtime
from tarry.__main__ import main
from tarry.batches import AnthropicBatch, OpenAIBatch


@pytest.fixture(autouse=True)
def _own_sys_path(monkeypatch):
    """The CLI runs in this process here, and puts the working directory on sys.path when it
    imports a MODULE:FLOW (as `python -m` would): undone after each test."""
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_deliver_an_openai_output_file(tmp_path, capsys, fake, openai_client):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    rt = Runtime(db, batches={"openai": OpenAIBatch(openai_client)})
    out = rt.run(openai_flow, ["ab", "cd", "ef"], meta={"flow_ref": "batchflows:openai_flow"})
    rt.poll()
    [bid] = fake.open_batches()
    fake.fail("k-cd", "no such model")
    fake.expire(bid, answered={"k-ab", "k-cd"})
    batch = fake.batches[bid]["obj"]
    # The files as a user downloads them: output, then errors (with an expired request).
    results = tmp_path / "results.jsonl"
    results.write_bytes(
        fake.files[batch["output_file_id"]]["content"]
        + fake.files[batch["error_file_id"]]["content"]
    )
    code = main(["deliver", "--file", str(results), "--format", "openai", "--store", db, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["unfinished"] == 1 and report["errors"] == []
    # "k-ab" resumed the session's lane; "k-cd" failed it: the session failed with it.
    view = Runtime(db).session(out.session_id)
    assert view.status == "failed"
    assert view.outcome.error.type == "BatchItemFailed"
    assert "no such model" in view.outcome.error.message


def test_deliver_an_anthropic_results_file(tmp_path, capsys, fake, anthropic_client):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    rt = Runtime(db, batches={"claude": AnthropicBatch(anthropic_client)})
    out = rt.run(claude_flow, ["hi", "yo"], meta={"flow_ref": "batchflows:claude_flow"})
    rt.poll()
    [bid] = fake.open_batches()
    fake.complete(bid)
    results = tmp_path / "results.jsonl"
    results.write_bytes(fake.batches[bid]["results"] + b'{"custom_id": "x"}\n')
    code = main(["deliver", "--file", str(results), "--format", "anthropic", "--store", db])
    printed = capsys.readouterr()
    assert code == 1  # the last line is refused; the others are delivered
    assert "line 3" in printed.err and "delivered to 1 session" in printed.out
    view = Runtime(db).session(out.session_id)
    assert view.status == "completed"
    assert [m["content"][0]["text"] for m in view.outcome.output] == ["ih", "oy"]


def test_batches_ls(tmp_path, capsys, fake, openai_client):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    rt = Runtime(db, batches={"openai": OpenAIBatch(openai_client)})
    rt.run(openai_flow, ["a", "b"])
    assert main(["batches", "ls", "--store", db]) == 0
    assert "no open batches" in capsys.readouterr().out
    rt.poll()
    [bid] = fake.open_batches()
    assert main(["batches", "ls", "--store", db]) == 0
    line = capsys.readouterr().out
    assert "openai" in line and bid in line and "in_progress" in line and "2 requests" in line
    fake.complete()
    rt.poll()
    assert main(["batches", "ls", "--store", db, "--all", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["provider_id"] == bid and row["status"] == "completed" and row["ended_at"]


def test_worker_with_batches(tmp_path, capsys, monkeypatch, fake, openai_client):
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    monkeypatch.setenv("TARRY_FAKE_OPENAI", fake.openai_url)
    rt = Runtime(db, batches={"openai": OpenAIBatch(openai_client)})
    out = rt.run(openai_flow, ["ab"], meta={"flow_ref": "batchflows:openai_flow"})
    once = ["worker", "--once", "--batches", "batchflows:make_batches", "--store", db]
    assert main(once) == 0
    assert len(fake.batches) == 1
    fake.complete()
    assert main(once) == 0
    assert f"delivered {out.session_id}: ok" in capsys.readouterr().out
    assert Runtime(db).session(out.session_id).status == "completed"
