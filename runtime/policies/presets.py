"""The policy presets, registered by name (:data:`POLICIES`): WavePP; TensorRT-LLM's, SGLang's and vLLM's PP
loops; the three engines' tensor/expert-parallel deployments.
A new preset is one composition here (or in a module of its own registered here)."""

from wavepp.runtime.policies.base import Policy
from wavepp.runtime.policies.sglang_pp import SGLANG_PP
from wavepp.runtime.policies.tep import SGLANG_TEP, TRTLLM_TEP, VLLM_TEP
from wavepp.runtime.policies.trtllm_pp import TRTLLM_PP, TRTLLM_PP_DEFAULT, TRTLLM_PP_LEGACY
from wavepp.runtime.policies.vllm_pp import VLLM_PP
from wavepp.runtime.policies.wavepp import WAVEPP
from wavepp.runtime.registry import Registry

POLICIES = Registry[Policy]("policy", doc="a preset composition of mechanisms")
for preset in (WAVEPP, TRTLLM_PP, TRTLLM_PP_LEGACY, TRTLLM_PP_DEFAULT, SGLANG_PP, VLLM_PP,
               TRTLLM_TEP, SGLANG_TEP, VLLM_TEP):
    POLICIES.register(preset)
