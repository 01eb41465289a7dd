"""Bad input, one case per entry of ``tests/data/bad_inputs/cases.json`` (with the model configs and
cost profiles beside it): each ends in exactly one line ``wavepp: error: …`` naming what is wrong,
with exit 2 (refused up front) or 1 (failed during the run), and no traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wavepp.runtime.cli import main

DATA = Path(__file__).parent / "data" / "bad_inputs"
CASES: list[dict[str, Any]] = json.loads((DATA / "cases.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['issue']}: {c['case']}" for c in CASES])
def test_bad_input_is_one_line(case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.replace("{data}", str(DATA)).replace("{tmp}", str(tmp_path)) for a in case["argv"]]
    rc = main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith("wavepp: error: "), err
    assert case["says"] in lines[0], lines[0]
    assert "never" not in case or case["never"] not in err, err
    assert rc == case["exit"], lines[0]


def test_verbose_adds_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """--verbose (before or after the command) prints the traceback above the same one line."""
    for argv in (["--verbose", "bench", "--store", "redis://127.0.0.1:1/0"],
                 ["bench", "--store", "redis://127.0.0.1:1/0", "--verbose"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" in err and err.splitlines()[-1].startswith("wavepp: error: cannot reach redis")
