"""A worker that is killed mid-round (tests/batches/test_batch_crash.py): one `poll()` over the
store at argv[1], with an OpenAIBatch pointed at the fake provider at argv[2], that stops dead at
the point argv[3] names, after printing it, until the test SIGKILLs it:

- "upload": the batch is made at the provider, and its id not yet recorded in the store;
- "read": the ended batch's results were read, and nothing delivered yet;
- "end": the results were delivered, and the batch not yet marked ended.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: batchflows

import openai  # noqa: E402
from batchflows import openai_flow  # noqa: E402
from tarry import Runtime  # noqa: E402
from tarry.batches import OpenAIBatch  # noqa: E402
from tarry.drivers.stores import open_store  # noqa: E402


def stop_here(point: str) -> None:
    print(point, flush=True)
    threading.Event().wait()  # until SIGKILL


class Stopping(OpenAIBatch):
    def __init__(self, client, point: str) -> None:
        super().__init__(client)
        self.point = point

    def submit(self, submission_id, lines):
        made = super().submit(submission_id, lines)
        if self.point == "upload":
            stop_here("upload")
        return made

    def results(self, provider_id, status):
        yield from super().results(provider_id, status)
        if self.point == "read":
            stop_here("read")


def main() -> None:
    url, base, point = sys.argv[1], sys.argv[2], sys.argv[3]
    store = open_store(url)
    if point == "end":
        real_end = store.batch_end

        def batch_end(*args, **kwargs):
            stop_here("end")
            real_end(*args, **kwargs)

        store.batch_end = batch_end
    client = openai.OpenAI(base_url=base, api_key="test", max_retries=0)
    rt = Runtime(store, flows=[openai_flow], batches={"openai": Stopping(client, point)})
    rt.poll()
    print("done", flush=True)


if __name__ == "__main__":
    main()
