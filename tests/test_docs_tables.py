"""A table the docs quote from a ``wavepp`` command is what the command prints now: every
``<!-- generated: wavepp … -->`` block of README.md and docs/*.md is compared with the code's output
(``scripts/docs_tables.py`` rewrites them), so a cost model change cannot leave a stale table behind."""

from __future__ import annotations

from typing import Any

import pytest

from tests.scripts_loader import load_script
from wavepp.runtime.engines.sim.perf_tables import default_perf_dir

docs_tables = load_script("docs_tables.py", "docs_tables")
BLOCKS = [b for page in docs_tables.PAGES for b in docs_tables.blocks(page)]


def test_the_cost_tables_of_the_engines_page_are_generated() -> None:
    commands = [b.command for b in BLOCKS if b.page.name == "engines.md"]
    assert commands == ["wavepp cost-table --model glm-5.2 --hardware b300 --pp 4",
                        "wavepp cost-table --model minimax-m2.7 --hardware b300 --pp 4"]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b.page.name}: {b.command}")
def test_a_generated_table_is_what_the_code_prints(block: Any) -> None:
    if not default_perf_dir().is_dir():
        pytest.skip(f"no kernel tables at {default_perf_dir()} (../shared/data/perf): cost-table cannot run")
    assert docs_tables.printed_table(block.command) == block.quoted, (
        f"{block.page.name}: the table of `{block.command}` is stale: run scripts/docs_tables.py")
