"""Topology: how a policy lays the model over the deployment's GPUs; the engine builds its stages from it.

A pipeline policy runs the engine's ``P`` stages of ``G`` GPUs each. A tensor/expert-parallel deployment runs
one stage over all ``P x G`` GPUs of the node: every layer's attention and linear-attention heads split over
them (TP), the routed experts spread over them (EP), two all-reduces per layer in place of ``P - 1`` hops and
no pipeline to fill. With TP attention the tokens are on every rank, so the experts' combine is an all-reduce
too (no all-to-all: that comes with attention data parallelism, which none of these deployments uses).

``comm`` names the all-reduce: ``custom`` - TensorRT-LLM's own kernel (``custom_allreduce_perf``, as
aiconfigurator prices TRT-LLM); ``nccl`` - NCCL's ``all_reduce`` (``nccl_perf``): vLLM's and SGLang's custom
all-reduce kernels take only small messages (vLLM ``CustomAllreduce`` ``max_size`` 8 MiB), and a prefill
wave's ``tokens x hidden`` activations are far larger, so theirs go to NCCL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wavepp.runtime.registry import Registry


class Topology(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def comm(self) -> str: ...

    def layout(self, pp: int, gpus_per_stage: int) -> tuple[int, int]:
        """(stages, GPUs per stage) on the deployment of ``pp`` stages of ``gpus_per_stage`` GPUs."""
        ...


TOPOLOGY = Registry[Topology]("topology", doc="how the model is laid over the deployment's GPUs")


@TOPOLOGY.register
@dataclass(frozen=True, slots=True)
class Pipeline:
    """The engine's own stages (every PP policy)."""

    name: str = "pp"
    comm: str = "custom"

    def layout(self, pp: int, gpus_per_stage: int) -> tuple[int, int]:
        return pp, gpus_per_stage


@TOPOLOGY.register
@dataclass(frozen=True, slots=True)
class TensorExpert:
    """One stage over every GPU: TP attention, EP experts, all-reduces of ``comm``."""

    name: str = "tep"
    comm: str = "custom"

    def layout(self, pp: int, gpus_per_stage: int) -> tuple[int, int]:
        return 1, pp * gpus_per_stage


TEP_NCCL = TOPOLOGY.register(TensorExpert("tep-nccl", "nccl"))
