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

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from runtime.engines.torch.config import PROFILES, DecoderConfig, load_config, read_hf_dict
from runtime.engines.torch.model import ChunkSpec, StageModel, build_stages
from runtime.engines.torch.weights import load_hf_dir, random_weights

TOL_FP32 = 1e-4

# Called after every A request ran, before any B starts: (stages, A's block tables [prompt][stage]).
# Tests use it to corrupt the cache and prove the comparison notices.
AfterA = Callable[[list[StageModel], list[list[list[int]]]], None]


@dataclass(frozen=True, slots=True)
class CheckResult:
    max_rel_err_logits: float
    max_rel_err_kv: float
    tol: float
    ok: bool


@dataclass(slots=True)
class _Request:
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
              after_a: AfterA | None = None) -> CheckResult:
    """Compare chunked, pipelined prefill with reuse against transformers (float32, CPU).

    ``model_spec``: a profile name or config path (random weights from ``seed``), a Hugging Face
    directory (its weights), or a ``DecoderConfig``. Prompts have ``prompt_len`` tokens (default
    ``3 * block_size + 5 + reuse``); B recomputes at least its last token, so at most
    ``(prompt_len - 1) // block_size`` blocks are reused.
    """
    cfg, hf_dict, weights = _model(model_spec, seed)
    length = prompt_len if prompt_len is not None else 3 * block_size + 5 + reuse
    if not 0 <= reuse <= length or chunk < 1 or num_prompts < 1:
        raise ValueError(f"need 0 <= reuse <= prompt_len, chunk >= 1, num_prompts >= 1 (reuse={reuse}, "
                         f"prompt_len={length}, chunk={chunk}, num_prompts={num_prompts})")
    reused_blocks = min(reuse // block_size, (length - 1) // block_size)
    blocks_per_prompt = -(-length // block_size)
    pools = [num_prompts * 2 * blocks_per_prompt + s for s in range(pp)]  # uneven, like real stages
    stages = build_stages(cfg, pp, pools, block_size, weights)
    gen = torch.Generator().manual_seed(seed + 1)
    free = [torch.randperm(n, generator=gen).tolist() for n in pools]

    requests_a, requests_b = [], []
    for _ in range(num_prompts):
        a_tokens = torch.randint(cfg.vocab_size, (length,), generator=gen)
        b_tokens = torch.cat([a_tokens[:reuse], torch.randint(cfg.vocab_size, (length - reuse,), generator=gen)])
        a = _Request(a_tokens, [[] for _ in range(pp)], 0)
        requests_a.append(a)
        requests_b.append(_Request(b_tokens, [[] for _ in range(pp)], reused_blocks * block_size, after=a))
    _run(stages, requests_a, chunk, free, stagger=True)
    if after_a is not None:
        after_a(stages, [a.tables for a in requests_a])
    for a, b in zip(requests_a, requests_b, strict=True):  # B's tables start with A's reused blocks
        b.tables = [t[:reused_blocks] for t in a.tables]
    _run(stages, requests_b, chunk, free, stagger=False)

    reference = _reference(cfg, hf_dict, weights)
    err_logits = err_kv = 0.0
    with torch.no_grad():
        for b in requests_b:
            out = reference(input_ids=b.tokens[None], use_cache=True, logits_to_keep=1)
            assert b.logits is not None
            err_logits = max(err_logits, _rel_err(b.logits, out.logits[0, -1]))
            for stage, table in zip(stages, b.tables, strict=True):
                for layer in stage.layer_ids:
                    k, v = stage.gather_kv(layer, table, length)  # (L, nkv, hd)
                    ref = out.cache.layers[layer]
                    err_kv = max(err_kv, _rel_err(k, ref.keys[0].transpose(0, 1)),
                                 _rel_err(v, ref.values[0].transpose(0, 1)))
    return CheckResult(err_logits, err_kv, TOL_FP32, err_logits <= TOL_FP32 and err_kv <= TOL_FP32)


def _run(stages: list[StageModel], requests: list[_Request], chunk: int, free: list[list[int]],
         stagger: bool) -> None:
    """Waves of the next chunk of every ready request until all finish (request i joins at wave i if staggered)."""
    B = stages[0].block_size
    wave_id = 0
    while not all(r.finished for r in requests):
        batch = [r for i, r in enumerate(requests)
                 if not r.finished and (r.after is None or r.after.finished) and (not stagger or i <= wave_id)]
        specs: list[list[ChunkSpec]] = [[] for _ in stages]
        spans = []
        for r in batch:
            start, n = r.done, min(chunk, r.tokens.numel() - r.done)
            for s, table in enumerate(r.tables):  # materialize: enough blocks for [0, start + n)
                while len(table) * B < start + n:
                    table.append(free[s].pop())
                specs[s].append(ChunkSpec(start, n, list(table)))
            spans.append((start, n))
        x = torch.cat([r.tokens[s:s + n] for r, (s, n) in zip(batch, spans, strict=True)])
        for stage, stage_specs in zip(stages, specs, strict=True):
            x = stage.forward_wave(x, stage_specs)
        for row, (r, (start, n)) in enumerate(zip(batch, spans, strict=True)):  # x: (num_chunks, vocab)
            r.done = start + n
            if r.finished:
                r.logits = x[row].float()
        wave_id += 1


def _model(spec: str | Path | DecoderConfig, seed: int) -> tuple[DecoderConfig, dict[str, Any], dict[str, Tensor]]:
    """Config, the config.json dict the reference is built from, and float32 weights."""
    if isinstance(spec, DecoderConfig):
        return spec, spec.to_hf_dict(), random_weights(spec, seed)
    if isinstance(spec, str) and spec in PROFILES:
        return PROFILES[spec], PROFILES[spec].to_hf_dict(), random_weights(PROFILES[spec], seed)
    cfg = load_config(spec)
    # The reference reads the file's own config.json, so a mapping slip in from_hf_dict shows.
    hf_dict = read_hf_dict(spec)
    if Path(spec).is_dir():
        return cfg, hf_dict, {k: t.float() for k, t in load_hf_dir(spec, cfg).items()}
    return cfg, hf_dict, random_weights(cfg, seed)


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
    if cfg.tie_word_embeddings:
        model.tie_weights()
    return model.eval()


def _rel_err(ours: Tensor, ref: Tensor) -> float:
    """max |ours - ref| / max |ref| (float32)."""
    ref = ref.float()
    return float((ours.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))

