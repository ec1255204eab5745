"""A worker process of tests/batches/test_batch_turns.py: a Runtime on the store at argv[1],
with an OpenAIBatch pointed at the fake provider at argv[2] and a ManualClock at argv[3] (ISO),
driven by lines on stdin, each answered by one line on stdout:

- "poll": one `poll()`; answers the provider ids whose status it asked, comma-separated;
- "advance S": moves its clock S seconds on; answers "ok".
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: batchflows

import openai  # noqa: E402
from batchflows import openai_flow  # noqa: E402
from tarry import ManualClock, Runtime  # noqa: E402
from tarry.batches import OpenAIBatch  # noqa: E402


class Counting(OpenAIBatch):
    def __init__(self, client) -> None:
        super().__init__(client)
        self.asked: list[str] = []

    def status(self, provider_id):
        self.asked.append(provider_id)
        return super().status(provider_id)


def main() -> None:
    url, base, start = sys.argv[1], sys.argv[2], sys.argv[3]
    clock = ManualClock(dt.datetime.fromisoformat(start))
    adapter = Counting(openai.OpenAI(base_url=base, api_key="test", max_retries=0))
    rt = Runtime(url, clock=clock, flows=[openai_flow], batches={"openai": adapter})
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "poll":
            adapter.asked.clear()
            rt.poll()
            print(",".join(adapter.asked), flush=True)
        elif command == "advance":
            clock.advance(float(arg))
            print("ok", flush=True)
        else:
            break
    rt.store.close()


if __name__ == "__main__":
    main()
