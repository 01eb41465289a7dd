"""The model names each engine takes, as the ``--model`` helps list them: read from the registries
(the sim's profiles, the models its kernel tables cover), so a model added there is in every list.
Kept free of torch imports: the CLI builds its help from here cheaply."""

from __future__ import annotations

from collections.abc import Iterable

from wavepp.runtime.engines.sim.profiles import MODELS
from wavepp.runtime.engines.sim.table_choices import SPECS

#: the torch engine's built-in profiles (``runtime.engines.torch.config.PROFILES``, which imports torch
#: with its package; tests/test_docs_claims.py keeps the two equal)
TORCH_BUILT_INS = ("tiny-llama", "tiny-moe")


def listed(names: Iterable[str], default: str | None = None) -> str:
    """``a, b (default), c``."""
    return ", ".join(f"{n} (default)" if n == default else n for n in names)


def sim_models(default: str | None = None) -> str:
    return listed(MODELS, default)


def table_models(default: str | None = None) -> str:
    """The sim's models that the kernel tables cover (``wavepp cost-table``)."""
    return listed(SPECS, default)


def torch_models(default: str | None = "tiny-llama") -> str:
    return f"{listed(TORCH_BUILT_INS, default)}, a config.json or a Hugging Face model directory"
