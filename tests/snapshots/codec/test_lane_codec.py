"""A parked lane as its wait row keeps it (snapshots/records.py `encode_lane`): any lane round
trips; its pause is written in short when it lies under the lane, and a blob written before the
short form (the pause as a map) still reads."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tarry.engine.errors import SnapshotError
from tarry.engine.state.records import PauseState
from tarry.snapshots.codec.pack import dumps, loads
from tarry.snapshots.codec.wire import lane_from_data, lane_to_data
from tarry.snapshots.records import decode_lane, encode_lane

from .test_envelope import names, paths, pauses


def _lane(path: tuple[Any, ...], child: int, pause: PauseState | None) -> Any:
    return attrs.evolve(lane_from_data({"child": child}, path), pause=pause)


lane_paths = paths.filter(bool)


@st.composite
def lanes(draw: Any) -> Any:
    path = draw(lane_paths)
    pause = draw(st.none() | pauses)
    if pause is not None and draw(st.booleans()):  # most pauses lie under their lane
        pause = attrs.evolve(pause, path=path + draw(paths), key=draw(st.none() | names))
    return _lane(path, draw(st.integers(0, 50)), pause)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lanes())
def test_any_parked_lane_round_trips(lane: Any) -> None:
    assert decode_lane(encode_lane(lane)) == lane


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lanes())
def test_a_lane_written_with_its_pause_as_a_map_still_reads(lane: Any) -> None:
    before = dumps([list(lane.path), lane_to_data(lane)])
    assert decode_lane(before) == lane


def test_a_keyed_wait_s_pause_is_written_in_short() -> None:
    pause = PauseState(
        kind="external", reason="", path=("items", 1191, "w"), key="w/1191", awaits_value=True
    )
    lane = _lane(("items", 1191), 0, pause)
    blob = encode_lane(lane)
    assert loads(blob)[1] == {"child": 0, "p": ["external", ["w"], "w/1191"]}
    assert len(blob) <= 48  # was 132 with the pause as a map of every field
    assert decode_lane(blob) == lane


@pytest.mark.parametrize(
    "blob",
    [dumps([["a"], {"child": 0, "p": "nope"}]), dumps([["a"], {"child": 0, "p": []}]), b"\xc1"],
)
def test_a_malformed_short_pause_is_a_snapshot_error(blob: bytes) -> None:
    with pytest.raises(SnapshotError, match="malformed"):
        decode_lane(blob)
