"""What the docs say about the code's names is what the code has: a policy's chunking, the models
each ``--model`` takes (read from the registries, never a list kept by hand)."""

from __future__ import annotations

import re
from pathlib import Path

from wavepp.runtime.policies import get_policy

ROOT = Path(__file__).resolve().parents[1]


def test_the_store_page_names_each_policys_own_chunking() -> None:
    text = " ".join((ROOT / "docs" / "store.md").read_text().split())
    m = re.search(r"the chunking is the policy's own \(`([\w-]+)` for `wavepp`, `([\w-]+)` for the TensorRT-LLM "
                  r"presets\)", text)
    assert m is not None, "docs/store.md no longer says which chunking each policy runs"
    assert (m.group(1), m.group(2)) == (get_policy("wavepp").chunking.name, get_policy("trtllm-pp").chunking.name)
