"""The paused Outcome is made with its slots set directly (drivers/drive/outcome.py `_paused`):
it is the Outcome the class makes, every field set."""

from __future__ import annotations

import attrs
from tarry import Flow, Gate, Runtime
from tarry.drivers.drive.outcome import _OUTCOME_SLOTS, Outcome, _paused


def test_paused_sets_every_field_as_the_class_would() -> None:
    assert set(_OUTCOME_SLOTS) == set(attrs.fields_dict(Outcome))  # a new field: set it there
    out = Runtime().run(Flow("f", [Gate("approve")]))
    assert out.paused
    made = _paused(out.session_id, out.pause, out.meta, out.pauses)
    expected = Outcome(
        "paused",
        out.session_id,
        token=out.pause.token,
        pause=out.pause,
        meta=out.meta,
        pauses=out.pauses,
    )
    assert made == expected
    assert attrs.asdict(made, recurse=False) == attrs.asdict(expected, recurse=False)
    assert out == expected  # what a run returns is that Outcome too


def test_memory_find_token_gives_the_token_info_the_class_makes() -> None:
    # MemoryStore.find_token sets the slots of its TokenInfo directly (every cold resume reads
    # one): it is the record the class makes, before and after the token's use.
    from tarry.snapshots import MemoryStore
    from tarry.snapshots.memory.tokens import _token_info
    from tarry.snapshots.records import TokenInfo

    assert set(attrs.fields_dict(TokenInfo)) == {"session_id", "used"}  # a new field: set it
    assert _token_info("s", True) == TokenInfo("s", True)
    store = MemoryStore()
    rt = Runtime(store=store)
    out = rt.run(Flow("f", [Gate("approve")]))
    key = rt._core.tokens.key(out.token)
    assert store.find_token(key) == TokenInfo(out.session_id, False)
    rt.resume(out.token, True)
    assert store.find_token(key) == TokenInfo(out.session_id, True)


def test_a_keyed_waits_pause_names_its_key() -> None:
    """What `deliver` resumes it by, in each waiting branch's PauseInfo; None without a key."""
    from tarry import ForEach, Wait

    rt = Runtime()
    flow = Flow(
        "keyed",
        [
            ForEach(
                "each", ["a", "b"], Wait("w", key=lambda ctx: f"job/{ctx.item}"), concurrency=2
            ),
            Gate("ok"),
        ],
    )
    out = rt.run(flow)
    assert sorted(p.key for p in out.pauses) == ["job/a", "job/b"]
    [out] = rt.deliver_many({"job/a": 1, "job/b": 2}).outcomes
    assert out.pause.path == ("ok",) and out.pause.key is None
