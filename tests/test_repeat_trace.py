"""scripts/repeat_trace.py: a trace played K times, each copy after the last and on blocks of its own."""

from __future__ import annotations

from tests.scripts_loader import load_script

repeat_trace = load_script("repeat_trace.py", "repeat_trace")


def test_each_copy_follows_the_last_with_the_same_prefix_structure_on_fresh_blocks() -> None:
    rows = [{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [0, 1]},
            {"timestamp": 500, "input_length": 1000, "output_length": 2, "hash_ids": [0, 2]}]
    out = list(repeat_trace.repeated(rows, 3))
    assert [r["timestamp"] for r in out] == [0, 500, 10_500, 11_000, 21_000, 21_500]
    assert [r["hash_ids"] for r in out] == [[0, 1], [0, 2], [3, 4], [3, 5], [6, 7], [6, 8]]
    assert [r["input_length"] for r in out] == [1024, 1000] * 3
    assert rows[0]["hash_ids"] == [0, 1]         # the original is left as it was
