"""The engine a config describes: :func:`build_engine` (torch is imported only for a :class:`TorchConfig`)."""

from __future__ import annotations

from typing import Any

from wavepp.runtime.engines.config import EngineConfig, TorchConfig


def build_engine(config: EngineConfig) -> Any:
    if isinstance(config, TorchConfig):
        from wavepp.runtime.engines.torch.engine import TorchEngine
        return TorchEngine(config)
    from wavepp.runtime.engines.sim.engine import SimEngine
    return SimEngine(config)
