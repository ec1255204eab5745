"""What mypy must refuse (tests/test_typing.py): each line marked `# refused` is an error, so the
types it checks are not `Any`."""

from __future__ import annotations

from tarry import Flow, Gate, Runtime

rt = Runtime()
flow = Flow("f", [Gate("g")])
out = rt.run(flow)
count: int = rt.run(flow)  # refused
print(out.no_such_attribute)  # refused
rt.resume(out.token, flow="f")  # refused
rt.run(flow, session_id=7)  # refused
