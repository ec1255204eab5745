"""The flow registry: versions by (name, fingerprint), the newest by name."""

from __future__ import annotations

import pytest
from tarry import Flow, Gate, InvalidFlow
from tarry.drivers.registry import FlowRegistry


def version(n: int) -> Flow:
    return Flow("job", [Gate("ok")], version=n)


def test_every_version_is_kept_and_get_is_the_newest_registered() -> None:
    flows = FlowRegistry()
    v1, v2 = version(1), version(2)
    flows.register(v1)
    flows.register(v2)
    assert flows.get("job") is v2
    assert flows.version("job", v1.fingerprint) is v1
    assert flows.version("job", v2.fingerprint) is v2
    assert flows.fingerprints("job") == (v1.fingerprint, v2.fingerprint)
    assert "job" in flows and "other" not in flows and flows.get("other") is None

    flows.register(v1)  # the same flow again: a no-op, v2 stays the newest
    assert flows.get("job") is v2
    assert flows.fingerprints("job") == (v1.fingerprint, v2.fingerprint)

    again = version(1)  # the same version as another object (a module imported again)
    flows.register(again)
    assert flows.version("job", v1.fingerprint) is again and flows.get("job") is again
    assert flows.fingerprints("job") == (v2.fingerprint, v1.fingerprint)


def test_only_flows_are_registered() -> None:
    with pytest.raises(InvalidFlow):
        FlowRegistry().register("job")  # type: ignore[arg-type]
