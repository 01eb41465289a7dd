"""Kimi-K3's table cost model against NVIDIA's estimator, aiconfigurator 0.12.0, where it has data.

Deployment: one HGX B300 node, PP4, two GPUs a stage (attention and KDA heads TP2, routed experts EP2), as the
sim engine runs it. aiconfigurator cannot estimate Kimi-K3 on TensorRT-LLM from measurements: its TRT-LLM MoE
tables hold no 896-expert row, so the default SILICON mode raises (the first test keeps that fact checked, so
this file says so only while it is true). It does on its SGLang backend, whose B300 collection measured this
model's MoE - with FlashInfer's binding of TensorRT-LLM's trtllm-gen kernel, the curve we vendored
(runtime/engines/sim/hybrid_ops.py). So we compare:

* the whole model, op by op summed (every stage's step, no hop), with aiconfigurator's SGLang static-context
  estimate: within 10% on a grid of x = 1K-16K new tokens after L = 0-128K cached ones. What differs inside
  that, by op (ours vs theirs, per layer at x = 4K, L = 0): the KDA kernel - ours TensorRT-LLM's measured
  gated-delta-net kernel carried to KDA's shape (0.46 ms), theirs its speed of light (0.085 ms; it has no
  TRT-LLM KDA rows and its default SGLang version none either); the short conv - ours TensorRT-LLM's fused
  conv over q, k and v scaled to KDA's channels (0.03 ms), theirs SGLang's three measured calls (0.48 ms,
  launch-bound: 0.44 ms at 1K tokens - the test leaves it out of both sides);
  ``kv_b`` - ours over the cached latents too (TensorRT-LLM's ``forward_context_with_cached_kv``), so ours is
  dearer as L grows; and theirs adds Kimi's attention-residual element-wise ops and the MoE's dispatch /
  combine where we charge TP all-reduces (about 25 ms of 419 in all).
* the MLA core, the same ``context_mla_perf`` rows and prefix correction on both sides: within 1%.
* the KDA kernel plus conv against the kernels aiconfigurator's SGLang collection measured at this exact shape
  (``chunk_kda`` and ``causal_conv1d_fn_qkv3``, 48 heads): ours is 0.6-0.65x - TensorRT-LLM's gated-delta-net
  kernel is that much faster than FLA's KDA kernel at the same state size, after our speed-of-light scaling for
  KDA's per-channel gate and its 48 key heads. Recorded, not tuned: no TRT-LLM KDA kernel has been measured.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest

from wavepp.runtime.engines.sim.costmodel import ChunkShape
from wavepp.runtime.engines.sim.table_cost import load_table_cost_model

api = pytest.importorskip("aiconfigurator.cli.api", reason="aiconfigurator is not installed (pip install -e '.[dev]')")

PERF = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "perf"
pytestmark = pytest.mark.skipif(not (PERF / "b300_sxm").is_dir(), reason="../shared/data/perf is not present")

CHECKPOINT = "moonshotai/Kimi-K3"
PP, TP = 4, 2
MLA_LAYERS = 24
TOKENS = (1024, 4096, 16384)
PREFIXES = (0, 32768, 131072)


def _quiet_estimate(**kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)
        try:
            return api.cli_estimate(CHECKPOINT, "b300_sxm", mode="static_ctx", osl=1, batch_size=1, tp_size=TP,
                                    pp_size=PP, moe_tp_size=1, moe_ep_size=TP, **kwargs)
        finally:
            logging.disable(previous)


def _table() -> Any:
    return load_table_cost_model("kimi-k3", "b300", PP, TP, PERF)


def test_aiconfigurator_has_no_trtllm_measurement_of_this_moe() -> None:
    with pytest.raises(Exception, match="MoE data missing"):
        _quiet_estimate(backend_name="trtllm", backend_version="1.3.0rc20", isl=4096, prefix=0)


def test_whole_model_within_10_percent_of_aiconfigurator_sglang() -> None:
    """Within 10% once the two named differences are taken out: the short conv - the op whose sources differ
    most, launch-bound in SGLang's three calls (0.44 ms a layer at 1K tokens, 0.48 at 4K), always the cheaper
    on our side - from both, and ``kv_b`` over the cached latents from ours (at L = 128K about 1.3 ms a layer,
    11% of the whole step at x = 1K-4K)."""
    table, off = _table(), []
    hybrid, linear = table._hybrid, 93 - MLA_LAYERS
    for x in TOKENS:
        for prefix in PREFIXES:
            ops = _quiet_estimate(backend_name="sglang", isl=prefix + x, prefix=prefix).summary
            latency = ops.get_context_latency_dict()
            their_conv = latency["context_kda_conv1d"]
            theirs = sum(ms for name, ms in latency.items() if name != "context_p2p") - their_conv
            our_conv = linear * hybrid.kda_conv(x, 1) * 1e3
            cached_kv_up = MLA_LAYERS * (hybrid.mla_kv_up(x + prefix) - hybrid.mla_kv_up(x)) * 1e3
            ours = sum(table.step_time(s, [ChunkShape(prefix, x)]) for s in range(PP)) * 1e3 - our_conv - cached_kv_up
            if abs(ours / theirs - 1) > 0.10 or our_conv >= their_conv:
                off.append(f"x={x} L={prefix}: {ours:.1f} vs {theirs:.1f} ms, convs {our_conv:.1f} vs {their_conv:.1f}")
    assert not off, "; ".join(off)


def test_mla_core_and_kda_kernels_against_aiconfigurators_own_lookups() -> None:
    from aiconfigurator_core.sdk import common
    from aiconfigurator_core.sdk import operations as ops
    from aiconfigurator_core.sdk.engine import _evaluate_single_op
    from aiconfigurator_core.sdk.perf_database import get_database

    hybrid = _table()._hybrid
    trtllm, sglang = get_database("b300_sxm", "trtllm", "1.3.0rc20"), get_database("b300_sxm", "sglang", "0.5.16")
    heads = 96 // TP
    mla = ops.ContextMLA("mla", 1, heads, common.KVCacheQuantMode.bfloat16, common.FMHAQuantMode.bfloat16)
    kda = ops.KDAKernel("kda", 1, "chunk_kda", "context", 7168, heads, 128, heads, 128, 4)
    conv = ops.KDAKernel("conv", 1, "causal_conv1d_fn_qkv3", "context", 7168, heads, 128, heads, 128, 4)
    for x in TOKENS:
        for prefix in PREFIXES:
            theirs = float(_evaluate_single_op(trtllm, mla, is_context=True, batch_size=1, s=x, prefix=prefix))
            assert hybrid.mla_attention(prefix, x, 1) * 1e3 == pytest.approx(theirs, rel=0.01)
        measured = sum(float(_evaluate_single_op(sglang, op, is_context=True, batch_size=1, s=x, prefix=0))
                       for op in (kda, conv))
        assert 0.55 <= hybrid.kda_chunk_ops(x, 1) * 1e3 / measured <= 0.70, f"x={x}"
