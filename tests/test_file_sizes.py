"""No module of the project is over 400 lines (STYLE.md: keep files small; nano-vllm's stay under
~260): a file that grows past it is split by concern, not extended."""

from __future__ import annotations

from pathlib import Path

import wavepp

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = wavepp.SUBPACKAGES
MAX_LINES = 400

# No exceptions: a file that grows past the limit is split.
ALLOWED: set[str] = set()


def test_no_module_is_over_the_line_limit() -> None:
    long = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            lines = len(path.read_text().splitlines())
            if lines > MAX_LINES and name not in ALLOWED:
                long[name] = lines
    assert long == {}, f"over {MAX_LINES} lines (split by concern): {long}"
