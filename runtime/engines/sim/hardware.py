"""Hardware profiles for the simulated engine: per-GPU figures of each system, from the copied system YAMLs.

Every number is vendored (the runtime never reads ``../shared/data``); each cites the YAML field it came from,
and ``tests/engines/sim/test_profiles.py`` checks them against the YAMLs whenever they are present.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """Per-GPU figures of one accelerator system (raw peak values; efficiencies kept separate)."""

    name: str
    dense_flops: float  # bf16 tensor-core FLOP/s per GPU (dense)
    fp8_flops: float  # fp8 tensor-core FLOP/s per GPU (dense)
    hbm_bytes_per_s: float  # raw peak HBM bandwidth; the achievable fraction is hbm_efficiency
    hbm_efficiency: float
    mem_capacity_bytes: float
    link_bytes_per_s: float  # inter-stage link (intra-node NVLink per GPU, single direction)
    p2p_latency_s: float
    launch_overhead_s: float  # fixed per-step overhead (see _STEP_LAUNCH_S)
    gpus_per_node: int
    op_latency_s: float  # fixed latency of one element-wise kernel
    reserve_bytes_per_gpu: float  # runtime memory not available to weights or KV
    nccl_mem_bytes: tuple[tuple[int, float], ...]  # (group size, NCCL buffer bytes per GPU)

    def nccl_reserve_bytes(self, num_gpus: int) -> float:
        """NCCL buffer bytes per GPU for a communicator of ``num_gpus`` (largest listed size <= it)."""
        best = 0.0
        for size, nbytes in self.nccl_mem_bytes:
            if size <= num_gpus:
                best = nbytes
        return best


# A fixed per-step cost for launching the stage's forward (CUDA-graph replay plus host bookkeeping).
# Assumption, not measured: to be replaced by calibration against the torch engine.
_STEP_LAUNCH_S = 20e-6
# misc.nccl_mem and misc.other_mem are identical in h200_sxm.yaml and b300_sxm.yaml.
_NCCL_MEM = ((1, 0.0), (2, 358612992.0), (4, 411041792.0), (8, 411041792.0))  # misc.nccl_mem
_OTHER_MEM = 3758096384.0  # misc.other_mem

HARDWARE: dict[str, HardwareProfile] = {
    # ../shared/data/perf/h200_sxm.yaml
    "h200": HardwareProfile(
        name="h200",
        dense_flops=989e12,  # gpu.bfloat16_tc_flops
        fp8_flops=1978e12,  # gpu.fp8_tc_flops
        hbm_bytes_per_s=4.8e12,  # gpu.mem_bw
        hbm_efficiency=0.8,  # gpu.mem_bw_empirical_scaling_factor
        mem_capacity_bytes=151397597184.0,  # gpu.mem_capacity
        link_bytes_per_s=450e9,  # node.intra_node_bw
        p2p_latency_s=1e-5,  # node.p2p_latency
        launch_overhead_s=_STEP_LAUNCH_S,
        gpus_per_node=8,  # node.num_gpus_per_node
        op_latency_s=3e-6,  # gpu.mem_empirical_constant_latency
        reserve_bytes_per_gpu=_OTHER_MEM,
        nccl_mem_bytes=_NCCL_MEM,
    ),
    # ../shared/data/perf/b300_sxm.yaml
    "b300": HardwareProfile(
        name="b300",
        dense_flops=2250e12,  # gpu.bfloat16_tc_flops
        fp8_flops=4500e12,  # gpu.fp8_tc_flops
        hbm_bytes_per_s=7.75e12,  # gpu.mem_bw
        hbm_efficiency=0.8,  # gpu.mem_bw_empirical_scaling_factor
        mem_capacity_bytes=288400343040.0,  # gpu.mem_capacity
        link_bytes_per_s=900e9,  # node.intra_node_bw
        p2p_latency_s=1e-5,  # node.p2p_latency
        launch_overhead_s=_STEP_LAUNCH_S,
        gpus_per_node=8,  # node.num_gpus_per_node
        op_latency_s=3e-6,  # gpu.mem_empirical_constant_latency
        reserve_bytes_per_gpu=_OTHER_MEM,
        nccl_mem_bytes=_NCCL_MEM,
    ),
}


def get_hardware(name: str) -> HardwareProfile:
    """The hardware profile called ``name``; ValueError naming the known systems otherwise."""
    try:
        return HARDWARE[name]
    except KeyError:
        raise ValueError(f"unknown hardware {name!r} (known: {', '.join(sorted(HARDWARE))})") from None
