"""What the docs say about the code's names is what the code has: a policy's chunking, the models
each ``--model`` takes (read from the registries, never a list kept by hand)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from wavepp.dashboard.calibration import TYPICAL
from wavepp.runtime.cli import build_parser
from wavepp.runtime.engines.model_names import TORCH_BUILT_INS
from wavepp.runtime.engines.sim.profiles import MODELS
from wavepp.runtime.engines.sim.table_choices import SPECS
from wavepp.runtime.engines.torch.config import PROFILES
from wavepp.runtime.policies import get_policy
from wavepp.runtime.serve.config import OPTIONS

ROOT = Path(__file__).resolve().parents[1]


def test_the_store_page_names_each_policys_own_chunking() -> None:
    text = " ".join((ROOT / "docs" / "store.md").read_text().split())
    m = re.search(r"the chunking is the policy's own \(`([\w-]+)` for `wavepp`, `([\w-]+)` for the TensorRT-LLM "
                  r"presets\)", text)
    assert m is not None, "docs/store.md no longer says which chunking each policy runs"
    assert (m.group(1), m.group(2)) == (get_policy("wavepp").chunking.name, get_policy("trtllm-pp").chunking.name)


def _model_help(command: str) -> str:
    """The help of a ``wavepp`` subcommand's ``--model`` (or ``--models``) flag."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    [flag] = [a for a in sub.choices[command]._actions if {"--model", "--models"} & set(a.option_strings)]
    return str(flag.help)


@pytest.mark.parametrize(("command", "names"), [
    ("bench", MODELS), ("cost-table", SPECS), ("dashboard", MODELS), ("grid", MODELS),
])
def test_every_model_is_in_each_model_flags_help(command: str, names: dict[str, object]) -> None:
    missing = [n for n in names if n not in _model_help(command)]
    assert not missing, f"wavepp {command} --help does not name {missing}"


def test_every_model_is_in_serves_model_setting() -> None:
    [model] = [o for o in OPTIONS if o.dest == "model"]
    assert all(n in model.help for n in MODELS) and all(n in model.help for n in PROFILES)


@pytest.mark.parametrize(("page", "listing", "names"), [
    ("bench-and-grid.md", r"\| `--model` \|([^|]*)\|", MODELS),
    ("serve.md", r"\| `--model` \| `WAVEPP_MODEL` \| - \|([^|]*)\|", MODELS),
    ("engines.md", r"Its models:([^;]*);", MODELS),
    ("engines.md", r"wavepp cost-table --model (\S+) --hardware h200\|b300", SPECS),
])
def test_every_model_is_in_each_model_list_of_the_docs(page: str, listing: str, names: dict[str, object]) -> None:
    found = re.findall(listing, " ".join((ROOT / "docs" / page).read_text().split()))
    assert len(found) == 1, f"docs/{page}: {listing!r} matches {len(found)} times"
    missing = [n for n in names if n not in found[0]]
    assert not missing, f"docs/{page}: the list {found[0]!r} does not name {missing}"


def test_the_torch_built_ins_named_without_torch_are_its_profiles() -> None:
    assert TORCH_BUILT_INS == tuple(PROFILES)


def test_the_calibration_time_says_what_it_depends_on() -> None:
    """README and the Knobs page quote one figure (dashboard/calibration.py TYPICAL): the CPU work, and
    the wall time it makes on idle cores: a wall time alone does not hold beside a loaded demo."""
    assert "CPU-minutes" in TYPICAL and "idle cores" in TYPICAL
    assert TYPICAL in " ".join((ROOT / "README.md").read_text().split())
