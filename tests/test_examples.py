"""The examples run end to end, as `make demo` and `make demo-batch` run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_batch_eval_answers_grades_and_publishes_a_thousand_prompts(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'eval.db'}"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "batch_eval.py"), store],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "paused with 1000 waits" in lines[1]
    assert "one resume_many of 1000 grades" in lines[2]
    assert "'published': True" in lines[-1] and "'graded': 1000" in lines[-1]

    # The session it left: completed, every grade given once, the state the fold of its log.
    import tarry

    rt = tarry.Runtime(store=store)
    [summary] = rt.sessions()
    view = rt.session(summary.session_id)
    assert view.status == "completed"
    events = view.events()
    resumed = [e for e in events if e.type == "run.resumed" and e.path[0] == "grade"]
    assert sorted(e.path[1] for e in resumed) == list(range(1000))
    assert view.derive_state() == view.state


def test_openai_batch_eval_sends_a_thousand_prompts_as_one_batch(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'eval.db'}"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "openai_batch_eval.py"), store],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "paused with 1000 BatchRequests waiting" in lines[0]
    assert "1 file upload, 1 batch" in lines[1] and "1000 requests" in lines[1]
    assert "delivered 1000 answers" in lines[3]
    assert "'right': 1000" in lines[-1]

    import tarry

    rt = tarry.Runtime(store=store)
    [summary] = rt.sessions()
    view = rt.session(summary.session_id)
    assert view.status == "completed"
    [batch] = rt.store.batches(open=False)
    assert batch.status == "completed" and batch.total == 1000 and batch.ended_at is not None
    assert view.derive_state() == view.state
