"""The reducer on its own: each event type's effect, purity, and folding."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from tarry.engine import apply, derive_state
from tarry.engine.state.events import Event
from tarry.engine.state.records import SessionState
from tarry.engine.state.reducer import own

AT = datetime(2030, 1, 1, tzinfo=UTC)


def stream(*specs: tuple) -> list[Event]:
    return [Event(i, t, "s", AT, path, data) for i, (t, path, data) in enumerate(specs, start=1)]


FOREACH_PAUSED = stream(
    ("run.started", (), {"input": {"n": 2}, "flow": "f"}),
    ("node.started", ("each",), {"kind": "foreach", "size": 2}),
    ("container.iteration_started", ("each",), {"index": 0, "item": "a"}),
    ("node.started", ("each", 0, "x"), {"kind": "step"}),
    ("node.completed", ("each", 0, "x"), {"output": 1, "state": {"k": 1}, "metrics": {"m": 2}}),
    ("container.iteration_completed", ("each",), {"index": 0, "output": 1}),
    ("container.iteration_started", ("each",), {"index": 1, "item": "b"}),
    ("node.started", ("each", 1, "x"), {"kind": "step"}),
    ("node.completed", ("each", 1, "x"), {"output": 2, "metrics": {"m": 3}}),
    ("node.started", ("each", 1, "g"), {"kind": "gate"}),
    ("run.paused", ("each", 1, "g"), {"kind": "human", "reason": "ok?"}),
)


def test_a_foreach_paused_mid_iteration() -> None:
    state = derive_state(FOREACH_PAUSED)
    assert state.status == "paused" and state.input == {"n": 2} and state.flow == "f"
    [frame] = state.container_stack
    assert (frame.node, frame.kind, frame.size) == ("each", "foreach", 2)
    assert (frame.iteration, frame.started, frame.child, frame.completed_iterations) == (
        1,
        True,
        1,
        1,
    )
    assert frame.child_outputs == {"x": 2}  # reset per ForEach iteration
    assert state.shared == {"k": 1} and state.metrics == {"m": 5}
    assert state.pause.path == ("each", 1, "g") and state.last_seq == len(FOREACH_PAUSED)


def test_resume_value_then_completion_pops_the_frame() -> None:
    more = stream(
        *[(e.type, e.path, e.data) for e in FOREACH_PAUSED],
        ("run.resumed", ("each", 1, "g"), {"value": True}),
        ("node.started", ("each", 1, "g"), {"kind": "gate"}),
    )
    state = derive_state(more)
    assert state.status == "running" and state.resume_values == (True,)
    done = apply(
        state,
        Event(
            state.last_seq + 1,
            "node.completed",
            "s",
            AT,
            ("each", 1, "g"),
            {"output": {"approved": True}},
        ),
    )
    assert done.resume_values == ()  # consumed by the node that completed
    finish = apply(
        done,
        Event(
            done.last_seq + 1,
            "container.iteration_completed",
            "s",
            AT,
            ("each",),
            {"index": 1, "output": 3},
        ),
    )
    out = apply(
        finish, Event(finish.last_seq + 1, "node.completed", "s", AT, ("each",), {"output": [1, 3]})
    )
    assert out.container_stack == () and out.outputs == {"each": [1, 3]}


def test_loop_and_graph_scopes_keep_outputs_across_iterations() -> None:
    for kind in ("loop", "graph"):
        events = stream(
            ("run.started", (), {}),
            ("node.started", ("c",), {"kind": kind}),
            ("container.iteration_started", ("c",), {"index": 0, "item": "a"}),
            ("node.completed", ("c", 0, "a"), {"output": 1, "action": "go"}),
            ("container.iteration_completed", ("c",), {"index": 0, "output": 1, "next": "b"}),
        )
        [frame] = derive_state(events).container_stack
        assert frame.child_outputs == {"a": 1} and frame.last_output == 1
        if kind == "graph":
            assert frame.selected == "b"


def test_cancel_and_failure() -> None:
    base = stream(("run.started", (), {}), ("node.started", ("x",), {"kind": "step"}))
    failed = apply(
        derive_state(base),
        Event(
            3,
            "run.failed",
            "s",
            AT,
            ("x",),
            {
                "error": {
                    "type": "ValueError",
                    "message": "m",
                    "path": ("x",),
                    "retryable": True,
                    "attempts": 1,
                    "traceback": None,
                }
            },
        ),
    )
    assert failed.status == "failed" and failed.error.type == "ValueError"
    assert apply(failed, Event(4, "run.cancelled", "s", AT, (), {})).status == "cancelled"


values = st.recursive(
    st.none() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(values, min_size=1, max_size=6))
def test_apply_never_changes_its_input(outputs: list) -> None:
    events = list(FOREACH_PAUSED[:3])
    for i, output in enumerate(outputs):
        events.append(
            Event(
                len(events) + 1,
                "node.completed",
                "s",
                AT,
                ("each", 0, f"c{i}"),
                {"output": output, "state": {f"k{i}": output}},
            )
        )
    state = SessionState("s")
    for event in events:
        before = copy.deepcopy(state)
        new = apply(state, event)
        assert state == before  # pure: the old state is untouched
        state = new
    assert state == derive_state(events)
    assert state.container_stack[0].child == len(outputs)


BRANCH_AND_GRAPH = stream(
    ("run.started", (), {"input": 1}),
    ("node.started", ("b",), {"kind": "branch"}),
    ("container.iteration_started", ("b",), {"index": 0, "item": "then"}),
    ("node.skipped", ("b", "no"), {"reason": "branch_not_taken"}),
    ("node.started", ("b", "g"), {"kind": "graph"}),
    ("container.iteration_started", ("b", "g"), {"index": 0, "item": "n"}),
    ("node.completed", ("b", "g", 0, "n"), {"output": 1, "action": "go"}),
    ("container.iteration_completed", ("b", "g"), {"index": 0, "output": 1, "next": None}),
    ("node.completed", ("b", "g"), {"output": 1, "selected": "n"}),
    ("container.iteration_completed", ("b",), {"index": 0, "output": 1}),
    ("node.completed", ("b",), {"output": 1, "selected": "then"}),
    ("run.completed", (), {"output": 1}),
)


def test_an_owned_fold_changes_its_state_in_place_and_equals_the_pure_one() -> None:
    for events in (FOREACH_PAUSED, BRANCH_AND_GRAPH):
        for cut in range(len(events)):
            # A live run that starts from a restored state (the pure fold of the first events).
            restored = derive_state(events[:cut]) if cut else SessionState("s")
            before = copy.deepcopy(restored)
            live = own(restored)
            start = live
            for event in events[cut:]:
                live = apply(live, event, True)
            assert live is start and live == derive_state(events)
            # The state it was made from is untouched: the driver may keep and reuse it.
            assert restored == before
            assert all(
                a == b
                for a, b in zip(restored.container_stack, before.container_stack, strict=True)
            )


def test_a_value_kept_out_of_line_becomes_a_reference_to_its_event() -> None:
    from tarry.engine.state.records import OutOfLine

    events = stream(
        ("run.started", (), {"input": "i" * 500, "flow": "f", "out_of_line": True}),
        ("node.started", ("big",), {"kind": "step"}),
        ("node.completed", ("big",), {"output": "o" * 500, "out_of_line": True}),
        ("node.started", ("small",), {"kind": "step"}),
        ("node.completed", ("small",), {"output": 1}),
        ("node.started", ("g",), {"kind": "gate"}),
        (
            "run.paused",
            ("g",),
            {"kind": "human", "reason": "ok?", "key": "k", "on_timeout": "approve"},
        ),
    )
    state = derive_state(events)
    assert state.input == OutOfLine(1)
    assert state.outputs == {"big": OutOfLine(3), "small": 1}
    assert (state.pause.key, state.pause.on_timeout) == ("k", "approve")
    live = own(SessionState("s"))
    for event in events:
        live = apply(live, event, True)
    assert live == state


def test_a_frame_made_without_its_class_equals_the_class_s_field_for_field() -> None:
    # new_frame sets every field itself (no attrs __init__): a field added to ContainerFrame
    # must be added there too, with its default.
    import attrs
    from tarry.engine.state.records import ContainerFrame, new_frame

    for size, started in ((None, False), (7, True)):
        made = new_frame("n", "foreach", ("a", 1, "n"), size, started)
        built = ContainerFrame(
            node="n", kind="foreach", path=("a", 1, "n"), size=size, started=started
        )
        assert made == built
        assert made.__dict__.keys() == {f.name for f in attrs.fields(ContainerFrame)}
        assert made.child_outputs is not new_frame("n", "foreach", ()).child_outputs


def test_a_pause_read_from_its_event_equals_the_class_s_record() -> None:
    # pause_from_data sets the slots itself: each field as the class sets it, defaults included.
    from tarry.engine.state.records import PauseState, pause_from_data, pause_to_data

    at = datetime(2026, 1, 2, tzinfo=UTC)
    for pause in (
        PauseState("human", "r", ("a", 1)),
        PauseState("external", "x", ("b",), {"p": 1}, at, at, False, "k", "approve"),
        PauseState("system", "", (), None, at),
    ):
        back = pause_from_data(pause.path, pause_to_data(pause))
        assert back == pause and type(back) is PauseState
    assert pause_from_data(("c",), {"kind": "human"}) == PauseState("human", "", ("c",))
