"""The policy presets, registered by name (:data:`POLICIES`): WavePP and the TensorRT-LLM PP loop.
A new preset is one composition here (or in a module of its own registered here)."""

from wavepp.runtime.policies.base import Policy
from wavepp.runtime.policies.trtllm_pp import TRTLLM_PP, TRTLLM_PP_LEGACY
from wavepp.runtime.policies.wavepp import WAVEPP
from wavepp.runtime.registry import Registry

POLICIES = Registry[Policy]("policy", doc="a preset composition of mechanisms")
for preset in (WAVEPP, TRTLLM_PP, TRTLLM_PP_LEGACY):
    POLICIES.register(preset)
