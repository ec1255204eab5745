"""What a container's frame is counted for in the state's bound."""

from __future__ import annotations

from tarry.engine.bounds import ENTRY_BYTES, FRAME_BYTES, frame_bytes


def test_a_frame_counts_each_name_of_its_path_by_length_and_each_index_alike() -> None:
    assert frame_bytes(()) == FRAME_BYTES
    assert frame_bytes(("items",)) == FRAME_BYTES + 5 + ENTRY_BYTES
    assert frame_bytes(("items", 12345, "inner")) == FRAME_BYTES + 5 + 5 + 2 * ENTRY_BYTES + 9
