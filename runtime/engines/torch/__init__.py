"""The real-compute engine: a Llama-family decoder split into pipeline stages with paged KV.

``check`` (the comparison against transformers) is not imported here: it pulls in transformers.
"""

from wavepp.runtime.engines.torch.config import PROFILES, DecoderConfig, load_config
from wavepp.runtime.engines.torch.model import ChunkSpec, StageModel, build_stages, default_device_dtype, split_layers
from wavepp.runtime.engines.torch.weights import load_hf_dir, random_weights

__all__ = [
    "PROFILES",
    "ChunkSpec",
    "DecoderConfig",
    "StageModel",
    "build_stages",
    "default_device_dtype",
    "load_config",
    "load_hf_dir",
    "random_weights",
    "split_layers",
]
