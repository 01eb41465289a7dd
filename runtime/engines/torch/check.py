"""Exactness check: our pipeline stages and paged KV against transformers' own model.

For each random prompt pair: request A runs chunk by chunk through every stage, allocating
blocks; request B shares A's first ``reuse`` tokens, reuses A's first ``reuse // B`` *full*
blocks on every stage (a partial block is recomputed), and computes the rest in chunks. B's
last-position logits and B's K/V on every layer (read back through B's block tables) are
compared with transformers' full forward of B's tokens and its cache.

Waves mix requests (A of prompt p+1 runs beside B of prompt p, at other offsets), and every
stage draws its blocks from its own shuffled free list, so block tables differ between stages
and are never contiguous: the paths the runtime takes, not a convenient special case.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from wavepp.runtime.engines.torch.config import PROFILES, DecoderConfig, load_config, read_hf_dict
from wavepp.runtime.engines.torch.executor import TorchExecutor
from wavepp.runtime.engines.torch.model import StageModel, build_stages, split_layers
from wavepp.runtime.engines.torch.processes.launch import LAUNCHERS
from wavepp.runtime.engines.torch.processes.leader import start_processes
from wavepp.runtime.engines.torch.processes.stage_server import StageSpec
from wavepp.runtime.engines.torch.weights import load_hf_dir, random_weights
from wavepp.runtime.request import Chunk, Wave, cdiv

TOL_FP32 = 1e-4

# Called after every A request ran, before any B starts: (stages, A's block tables [prompt][stage]).
# Tests use it to corrupt the cache and prove the comparison notices.
AfterA = Callable[[list[StageModel], list[list[list[int]]]], None]


@dataclass(frozen=True, slots=True)
class CheckResult:
    max_rel_err_logits: float          # over the comparisons with finite values on both sides
    max_rel_err_kv: float
    tol: float
    ok: bool
    non_finite: str | None = None      # the first comparison with a NaN or an infinity (it fails the check)


@dataclass(slots=True)
class _Worst:
    """The largest relative error so far. ``max(0.0, nan)`` is 0.0, so NaN would pass silently:
    a non-finite value is recorded apart, with where it was seen."""

    value: float = 0.0
    non_finite: str | None = None

    def add(self, ours: Tensor, ref: Tensor, where: str) -> None:
        if not (torch.isfinite(ours).all() and torch.isfinite(ref).all()):
            side = "ours" if not torch.isfinite(ours).all() else "reference"
            self.non_finite = self.non_finite or f"{where} ({side})"
            return
        self.value = max(self.value, _rel_err(ours, ref))


@dataclass(slots=True)
class _Request:
    id: str
    tokens: Tensor  # (L,)
    tables: list[list[int]]  # per stage
    done: int  # tokens already in the cache (the reused prefix for B)
    after: _Request | None = None  # runs only once this one is complete
    logits: Tensor | None = None

    @property
    def finished(self) -> bool:
        return self.done == self.tokens.numel()


def run_check(model_spec: str | Path | DecoderConfig, pp: int, block_size: int, chunk: int, reuse: int,
              seed: int, num_prompts: int = 2, prompt_len: int | None = None,
              after_a: AfterA | None = None, launcher: str = "threads") -> CheckResult:
    """Compare chunked, pipelined prefill with reuse against transformers (float32, CPU).

    ``model_spec``: a profile name or config path (random weights from ``seed``), a Hugging Face
    directory (its weights), or a ``DecoderConfig``. Prompts have ``prompt_len`` tokens (default
    ``3 * block_size + 5 + reuse``); B recomputes at least its last token, so at most
    ``(prompt_len - 1) // block_size`` blocks are reused. ``launcher``: the stages as threads of
    this process, or as ``torch.distributed`` processes (``spawn``, ``torchrun``) - the same
    executors the engine runs, activations going stage to stage.
    """
    cfg, hf_dict, weights, hf_dir = _model(model_spec, seed)
    length = prompt_len if prompt_len is not None else 3 * block_size + 5 + reuse
    if not 0 <= reuse <= length or chunk < 1 or num_prompts < 1:
        raise ValueError(f"need 0 <= reuse <= prompt_len, chunk >= 1, num_prompts >= 1 (reuse={reuse}, "
                         f"prompt_len={length}, chunk={chunk}, num_prompts={num_prompts})")
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    if after_a is not None and launcher != "threads":
        raise ValueError("after_a reaches into the stages' pools: threads only")
    if not 1 <= pp <= cfg.num_layers:
        raise ValueError(f"pp must be in [1, num_layers={cfg.num_layers}], got {pp}")
    reused_blocks = min(reuse // block_size, (length - 1) // block_size)
    blocks_per_prompt = cdiv(length, block_size)
    pools = [num_prompts * 2 * blocks_per_prompt + s for s in range(pp)]  # uneven, like real stages
    gen = torch.Generator().manual_seed(seed + 1)
    free = [torch.randperm(n, generator=gen).tolist() for n in pools]

    requests_a, requests_b = [], []
    for i in range(num_prompts):
        a_tokens = torch.randint(cfg.vocab_size, (length,), generator=gen)
        b_tokens = torch.cat([a_tokens[:reuse], torch.randint(cfg.vocab_size, (length - reuse,), generator=gen)])
        a = _Request(f"a{i}", a_tokens, [[] for _ in range(pp)], 0)
        requests_a.append(a)
        requests_b.append(_Request(f"b{i}", b_tokens, [[] for _ in range(pp)], reused_blocks * block_size, after=a))

    if launcher == "threads":
        executor: Any = TorchExecutor(build_stages(cfg, pp, pools, block_size, weights), cfg.max_position,
                                      keep_logits=True)
    else:
        executor = start_processes([StageSpec(cfg, hf_dir, seed, pp, n, block_size, "float32") for n in pools],
                                   launcher, torch.device("cpu"), keep_logits=True)
    try:
        asyncio.run(_run(executor, pp, block_size, requests_a, chunk, free, stagger=True))
        if after_a is not None:
            after_a(executor.stages, [a.tables for a in requests_a])
        for a, b in zip(requests_a, requests_b, strict=True):  # B's tables start with A's reused blocks
            b.tables = [t[:reused_blocks] for t in a.tables]
        asyncio.run(_run(executor, pp, block_size, requests_b, chunk, free, stagger=False))
        kv = [[[executor.gather_kv(s, layer, table, length) for layer in layers]
               for s, (table, layers) in enumerate(zip(b.tables, split_layers(cfg.num_layers, pp), strict=True))]
              for b in requests_b]
    finally:
        executor.close()

    reference = _reference(cfg, hf_dict, weights)
    logits, kv_err = _Worst(), _Worst()
    with torch.no_grad():
        for b, b_kv in zip(requests_b, kv, strict=True):
            out = reference(input_ids=b.tokens[None], use_cache=True, logits_to_keep=1)
            assert b.logits is not None
            logits.add(b.logits, out.logits[0, -1], f"logits of request {b.id}")
            for layers, stage_kv in zip(split_layers(cfg.num_layers, pp), b_kv, strict=True):
                for layer, (k, v) in zip(layers, stage_kv, strict=True):
                    ref = out.cache.layers[layer]
                    kv_err.add(k, ref.keys[0].transpose(0, 1), f"stored keys of request {b.id}, layer {layer}")
                    kv_err.add(v, ref.values[0].transpose(0, 1), f"stored values of request {b.id}, layer {layer}")
    non_finite = logits.non_finite or kv_err.non_finite
    ok = non_finite is None and logits.value <= TOL_FP32 and kv_err.value <= TOL_FP32
    return CheckResult(logits.value, kv_err.value, TOL_FP32, ok, non_finite)


async def _run(executor: Any, pp: int, block_size: int, requests: list[_Request], chunk: int,
               free: list[list[int]], stagger: bool) -> None:
    """Waves of the next chunk of every ready request until all finish (request i joins at wave i if
    staggered); each wave runs stage by stage, activations moved by the executor's transfer."""
    prompts = {r.id: array("I", r.tokens.tolist()) for r in requests}
    wave_id = 0
    while not all(r.finished for r in requests):
        batch = [r for i, r in enumerate(requests)
                 if not r.finished and (r.after is None or r.after.finished) and (not stagger or i <= wave_id)]
        chunks = []
        tables: list[dict[str, list[int]]] = [{} for _ in range(pp)]
        for r in batch:
            start, n = r.done, min(chunk, r.tokens.numel() - r.done)
            for s, table in enumerate(r.tables):  # materialize: enough blocks for [0, start + n)
                while len(table) * block_size < start + n:
                    table.append(free[s].pop())
                tables[s][r.id] = list(table)
            chunks.append(Chunk(r.id, start, n, 0, start + n == r.tokens.numel(), tokens=prompts[r.id]))
        wave = Wave(wave_id, chunks, sum(c.length for c in chunks), 0.0)
        for s in range(pp):
            await executor.execute(s, wave_id, chunks, tables[s])
            if s < pp - 1:
                await executor.transfer(s, wave)
        for r, c in zip(batch, chunks, strict=True):
            r.done = c.start + c.length
            if r.finished:
                r.logits = executor.logits(r.id)
        wave_id += 1


def _model(spec: str | Path | DecoderConfig,
           seed: int) -> tuple[DecoderConfig, dict[str, Any], dict[str, Tensor], str | None]:
    """Config, the config.json dict the reference is built from, float32 weights, and the weights'
    directory (None: seeded random weights, which every stage process draws the same way)."""
    if isinstance(spec, DecoderConfig):
        return spec, spec.to_hf_dict(), random_weights(spec, seed), None
    if isinstance(spec, str) and spec in PROFILES:
        return PROFILES[spec], PROFILES[spec].to_hf_dict(), random_weights(PROFILES[spec], seed), None
    cfg = load_config(spec)
    # The reference reads the file's own config.json, so a mapping slip in from_hf_dict shows.
    hf_dict = read_hf_dict(spec)
    if Path(spec).is_dir():
        return cfg, hf_dict, {k: t.float() for k, t in load_hf_dir(spec, cfg).items()}, str(spec)
    return cfg, hf_dict, random_weights(cfg, seed), None


def _reference(cfg: DecoderConfig, hf_dict: dict[str, Any], weights: dict[str, Tensor]) -> torch.nn.Module:
    """transformers' model of the same architecture, float32, eager attention, with our weights."""
    import transformers  # heavy, and only the check needs it
    from transformers.initialization import no_init_weights

    names = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
             "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM")}[cfg.model_type]
    hf_cfg = getattr(transformers, names[0]).from_dict({k: v for k, v in hf_dict.items() if k != "torch_dtype"})
    with no_init_weights():  # every tensor is overwritten below; random init would dominate the check's time
        model = getattr(transformers, names[1])._from_config(hf_cfg, attn_implementation="eager", dtype=torch.float32)
    missing, unexpected = model.load_state_dict(weights, strict=False, assign=True)  # shares, no copy
    # A tied head has no tensor of its own; an absent shared expert is zero-sized in transformers.
    bad = [k for k in missing if not (k == "lm_head.weight" and cfg.tie_word_embeddings)
           and not (".shared_expert" in k and cfg.shared_expert_intermediate_size == 0)] + list(unexpected)
    if bad:
        raise ValueError(f"reference model does not take our weights: first mismatch {bad[0]}")
    # What our weights do not give was made without initialisation (whatever memory held, NaN included): the
    # absent shared expert's gate multiplies its zero output, so zeros leave the model as ours.
    state = model.state_dict()
    with torch.no_grad():
        for k in missing:
            if k != "lm_head.weight":
                state[k].zero_()
    if cfg.tie_word_embeddings:
        model.tie_weights()
    evaluated: torch.nn.Module = model.eval()
    return evaluated


def _rel_err(ours: Tensor, ref: Tensor) -> float:
    """max |ours - ref| / max |ref| (float32)."""
    ref = ref.float()
    return float((ours.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))

