"""Chunked, pipelined prefill with prefix reuse equals transformers' full forward (float32)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from wavepp.runtime.engines.torch.check import run_check
from wavepp.runtime.engines.torch.config import DecoderConfig
from wavepp.runtime.engines.torch.model import ChunkSpec, StageModel, build_stages, split_layers
from wavepp.runtime.engines.torch.weights import random_weights


def small(num_kv_heads: int = 2, **kw: object) -> DecoderConfig:
    base: dict[str, object] = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=4,
                                   num_heads=4, num_kv_heads=num_kv_heads)
    base.update(kw)
    return DecoderConfig(**base)  # type: ignore[arg-type]


def _matrix() -> list[tuple[int, int, int, int, int]]:
    """Every (pp, block, reuse kind) once, chunk sizes and GQA ratios cycled through them: 18 cases
    that cover every pair of pp x chunk, pp x reuse, block x reuse, and each GQA ratio at every pp."""
    cases = []
    chunks, gqa = itertools.cycle((5, 16, 64)), itertools.cycle((1, 2, 4, 2, 4, 1, 4, 1, 2))
    for pp, block in itertools.product((1, 2, 3), (4, 16)):
        for reuse in (0, 2 * block, 2 * block + block // 2 + 1):  # none, on a block boundary, mid-block
            cases.append((pp, block, next(chunks), reuse, next(gqa)))
    return cases


@pytest.mark.parametrize(("pp", "block", "chunk", "reuse", "ratio"), _matrix())
def test_matches_transformers(pp: int, block: int, chunk: int, reuse: int, ratio: int) -> None:
    r = run_check(small(num_kv_heads=4 // ratio), pp=pp, block_size=block, chunk=chunk, reuse=reuse, seed=pp + block)
    assert r.ok, r


@pytest.mark.parametrize(("name", "cfg", "pp", "block", "chunk", "reuse", "prompt_len"), [
    # B identical to A: the last full block cannot be reused, at least one token is recomputed.
    ("whole prompt reused", small(), 2, 4, 3, 24, 24),
    ("one token per chunk", small(num_kv_heads=1), 3, 4, 1, 6, 13),
    ("chunk not dividing the block", small(), 2, 16, 7, 20, 50),
    ("pp = num_layers", small(num_layers=3), 3, 4, 8, 8, None),
    ("qwen2 bias, tied head, theta 1e6, head_dim != hidden/heads",
     small(num_layers=3, model_type="qwen2", attention_bias=True, tie_word_embeddings=True, rope_theta=1e6,
           head_dim=32, num_kv_heads=1), 3, 4, 7, 13, None),
    ("moe, no shared expert, renormalized top-k",
     small(num_layers=2, model_type="qwen2_moe", num_experts=4, experts_per_token=2, moe_intermediate_size=32,
           norm_topk_prob=True), 2, 4, 6, 9, None),
])
def test_edge_cases_match(name: str, cfg: DecoderConfig, pp: int, block: int, chunk: int, reuse: int,
                          prompt_len: int | None) -> None:
    r = run_check(cfg, pp=pp, block_size=block, chunk=chunk, reuse=reuse, seed=7, prompt_len=prompt_len)
    assert r.ok, (name, r)


def test_the_reference_zeroes_what_our_weights_do_not_give(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a shared expert, transformers' Qwen2-MoE still has the shared expert's gate, which our weights
    do not give: built without initialisation, it held whatever memory held - NaN made the reference's
    logits non-finite (seen once in a full run). Uninitialised memory is made NaN here, every time."""
    empty = torch.empty

    def nan_empty(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = empty(*args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out
    monkeypatch.setattr(torch, "empty", nan_empty)
    cfg = small(num_layers=2, model_type="qwen2_moe", num_experts=4, experts_per_token=2, moe_intermediate_size=32,
                norm_topk_prob=True)
    r = run_check(cfg, pp=2, block_size=4, chunk=6, reuse=9, seed=7)
    assert r.ok and r.non_finite is None, r


def test_tiny_moe_profile_matches() -> None:
    r = run_check("tiny-moe", pp=2, block_size=16, chunk=16, reuse=40, seed=3)
    assert r.ok, r


# --- the check detects real errors -------------------------------------------------------------

def _corrupt_first_block(stages: list[StageModel], tables: list[list[list[int]]]) -> None:
    stage = stages[-1]  # the last stage's first layer: both the K/V comparison and the logits see it
    blk = tables[0][-1][0]
    stage.k_cache[0][blk] += 1.0
    stage.v_cache[0][blk] += 1.0


def test_corrupted_reused_block_is_detected() -> None:
    r = run_check(small(), pp=2, block_size=4, chunk=5, reuse=12, seed=1, after_a=_corrupt_first_block)
    assert not r.ok
    assert r.max_rel_err_kv > r.tol and r.max_rel_err_logits > r.tol, r


def test_swapped_reused_blocks_are_detected() -> None:
    def swap(stages: list[StageModel], tables: list[list[list[int]]]) -> None:
        s, (b0, b1) = stages[0], tables[1][0][:2]  # as if B's table listed A's blocks 0 and 1 swapped
        for pool in (*s.k_cache, *s.v_cache):
            pool[[b0, b1]] = pool[[b1, b0]]

    r = run_check(small(), pp=2, block_size=4, chunk=5, reuse=12, seed=1, after_a=swap)
    assert not r.ok and r.max_rel_err_kv > r.tol, r
    # Swapping whole (K, V) pairs of a fully visible prefix permutes the keys attention sums over:
    # the logits cannot see it (K carries its RoPE phase with it). That is why K/V are compared too.
    assert r.max_rel_err_logits <= r.tol, r


def test_blocks_beyond_the_reuse_boundary_are_not_read() -> None:
    def corrupt_unshared(stages: list[StageModel], tables: list[list[list[int]]]) -> None:
        for s, stage in enumerate(stages):  # A's blocks from the first one B does not reuse
            for p in range(len(tables)):
                for pool in (*stage.k_cache, *stage.v_cache):
                    pool[tables[p][s][3:]] = float("nan")

    r = run_check(small(), pp=2, block_size=4, chunk=5, reuse=14, seed=1, after_a=corrupt_unshared)
    assert r.ok, r


# --- stage model contract ----------------------------------------------------------------------

def test_two_chunks_of_one_request_in_one_wave_equal_sequential_waves() -> None:
    cfg = small()
    w = random_weights(cfg, 0)
    x = torch.randint(cfg.vocab_size, (20,), generator=torch.Generator().manual_seed(0))
    table = [5, 2, 7, 0, 3]
    one = build_stages(cfg, 1, [8], 4, w)[0]
    logits_one = one.forward_wave(x, [ChunkSpec(0, 8, table[:2]), ChunkSpec(8, 12, table)])
    seq = build_stages(cfg, 1, [8], 4, w)[0]
    seq.forward_wave(x[:8], [ChunkSpec(0, 8, table[:2])])
    logits_seq = seq.forward_wave(x[8:], [ChunkSpec(8, 12, table)])
    torch.testing.assert_close(logits_one[1], logits_seq[0], rtol=1e-5, atol=1e-6)
    for layer in range(cfg.num_layers):
        torch.testing.assert_close(one.gather_kv(layer, table, 20), seq.gather_kv(layer, table, 20))


def test_outputs_and_pool_shapes() -> None:
    cfg = small()
    stages = build_stages(cfg, 2, [6, 9], 4, random_weights(cfg, 0))
    assert stages[0].k_cache[0].shape == (6, 4, 2, 16) and stages[1].v_cache[1].shape == (9, 4, 2, 16)
    chunks = [ChunkSpec(0, 5, [0, 1]), ChunkSpec(0, 3, [2])]
    h = stages[0].forward_wave(torch.arange(8), chunks)
    assert h.shape == (8, cfg.hidden_size)
    assert stages[1].forward_wave(h, chunks).shape == (2, cfg.vocab_size)


@pytest.mark.parametrize(("chunks", "rows", "fragment"), [
    ([ChunkSpec(0, 9, [0, 1])], 9, "cannot hold 9 tokens"),
    ([ChunkSpec(0, 4, [8])], 4, "out of range"),
    ([ChunkSpec(0, 4, [0])], 5, "sum to 4"),
    ([ChunkSpec(0, 0, [0])], 0, "outside"),
    ([], 0, "at least one chunk"),
])
def test_bad_waves_are_refused(chunks: list[ChunkSpec], rows: int, fragment: str) -> None:
    cfg = small()
    stage = build_stages(cfg, 1, [8], 4, random_weights(cfg, 0))[0]
    with pytest.raises(ValueError, match=fragment):
        stage.forward_wave(torch.zeros(rows, dtype=torch.long), chunks)


def test_layer_split() -> None:
    assert split_layers(8, 3) == [range(0, 3), range(3, 6), range(6, 8)]
    assert split_layers(4, 4) == [range(i, i + 1) for i in range(4)]
    stages = build_stages(small(num_layers=5), 2, [4, 4], 4, random_weights(small(num_layers=5), 0))
    assert [list(s.layer_ids) for s in stages] == [[0, 1, 2], [3, 4]]
    assert [(s.first, s.last) for s in stages] == [(True, False), (False, True)]
    for pp in (0, 5):
        with pytest.raises(ValueError, match="pp must be"):
            split_layers(4, pp)


def test_nan_in_the_cache_fails_the_check_and_says_where() -> None:
    """NaN compares as nothing (``max(0.0, nan)`` is 0.0): it must fail the check, naming the comparison."""
    def poison(stages: list[StageModel], tables: list[list[list[int]]]) -> None:
        stages[-1].k_cache[0][tables[0][-1][0]] = float("nan")

    r = run_check(small(), pp=2, block_size=4, chunk=5, reuse=12, seed=1, after_a=poison)
    assert not r.ok
    assert r.non_finite is not None and "request b0" in r.non_finite, r


def test_check_engine_cli_fails_on_non_finite_values(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The command exits 1 with one line naming where the NaN was, not `… -> OK` and exit 0."""
    from wavepp.runtime.cli import main
    from wavepp.runtime.engines.torch import check
    monkeypatch.setattr(check, "run_check", lambda *a, **k: check.CheckResult(
        0.0, 0.0, 1e-4, False, "logits of request b0 (ours)"))
    assert main(["check-engine"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["wavepp: error: check-engine: NaN or infinity in the logits of request b0 (ours)"]
