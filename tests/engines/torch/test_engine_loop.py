"""The torch engine under the shared loop: every request completes with the first token the
Hugging Face reference computes for the whole prompt, through reuse, chunking and both policies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.cli import main
from wavepp.runtime.engines.config import TorchConfig
from wavepp.runtime.engines.torch.check import _reference
from wavepp.runtime.engines.torch.config import DecoderConfig
from wavepp.runtime.engines.torch.engine import TorchEngine
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

CFG = DecoderConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=4, num_heads=4,
                    num_kv_heads=2, max_position=2048)


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(CFG.to_hf_dict()))
    return path


# docs: clients on two documents no stage holds - followers read their producer's K/V as it is computed
# (wavepp), or what it was scheduled for and what retired (vllm-pp), on every stage.
@pytest.mark.parametrize("policy,workload", [(p, w) for p in ("wavepp", "trtllm-pp") for w in ("reuse90", "suffix:40")]
                         + [(p, "docs:2:suffix=40") for p in ("wavepp", "vllm-pp", "trtllm-pp")])
def test_first_tokens_match_the_reference(config_path: Path, policy: str, workload: str) -> None:
    engine = TorchEngine(TorchConfig(str(config_path), pp=2, block_size=16, kv_blocks=[400], seed=3))
    cfg = BenchConfig(parse_workload(workload), [4], [policy], 12, seed=1, prompt_tokens=200)
    cfg.knobs = cfg.knobs.replace(max_wave_tokens=128, min_wave_tokens=64, static_chunk_tokens=64)
    rec = run_one(engine, cfg, policy, 4)
    assert rec.figures.completed == 12 and rec.figures.failed == 0
    assert rec.figures.good_hit_rate is not None and rec.figures.good_hit_rate > 0.5   # prefixes reused
    if (policy, workload) == ("wavepp", "docs:2:suffix=40"):      # K/V read from a running producer checked
        assert any(N.FOLLOWS in s["a"] for s in rec.encoded if s["n"] == N.REQUEST)
    for h in rec.parts.handles:
        h.cache.check()
    reference = _reference(CFG, CFG.to_hf_dict(), engine.weights)
    from wavepp.runtime.sources.workloads import Workload
    prompts = Workload(cfg.workload, 12, 200, 16, CFG.vocab_size, 1)
    tokens = {r.id: r.tokens for r in (prompts.next_request(0.0) for _ in range(12))}
    for c in rec.loop.completions:
        ids = torch.tensor(list(tokens[c.request_id]))[None]
        with torch.inference_mode():
            want = int(reference(ids).logits[0, -1].argmax())
        assert c.first_token == want, c.request_id


def test_bad_model_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({**CFG.to_hf_dict(), "num_key_value_heads": 3}))
    assert main(["bench", "--engine", "torch", "--model", str(bad), "--quiet"]) == 2
    assert main(["check-engine", "--model", str(tmp_path / "missing")]) == 2
    assert main(["bench", "--engine", "torch", "--model", "tiny-llama", "--pp", "9", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("wavepp: error:") for line in err), err


def test_prompt_longer_than_the_context_fails_with_a_clear_error(config_path: Path) -> None:
    engine = TorchEngine(TorchConfig(str(config_path), pp=2, block_size=16, kv_blocks=[600]))
    cfg = BenchConfig(parse_workload("cold"), [2], ["wavepp"], 3, prompt_tokens=4000)   # context is 2048
    rec = run_one(engine, cfg, "wavepp", 2)
    assert rec.figures.failed == 3
    assert all("longer than the model's context (2048)" in e for e in rec.loop.failures.values())


@pytest.mark.parametrize("policy", ["wavepp", "trtllm-pp"])
@pytest.mark.parametrize("kv_blocks", [[32, 64], [64, 32], [20, 20], [17, 48]])
def test_tight_uneven_pools_finish_with_threads(config_path: Path, policy: str, kv_blocks: list[int]) -> None:
    """Issue 14's hang (threads launcher, uneven pools): eight requests leased in one round pinned
    more than the small stage holds, none could escrow, and nothing running would ever free a block.
    A hang fails after the deadline instead of stalling the suite."""
    from tests.test_kv_pressure import assert_clean, finishes_within

    engine = TorchEngine(TorchConfig(str(config_path), pp=2, block_size=16, kv_blocks=kv_blocks, seed=3))
    cfg = BenchConfig(parse_workload("reuse90"), [8], [policy], 16, seed=1, prompt_tokens=200)
    cfg.knobs = cfg.knobs.replace(max_wave_tokens=128, min_wave_tokens=64, static_chunk_tokens=64)
    rec = finishes_within(120, lambda: run_one(engine, cfg, policy, 8))
    assert rec.figures.completed == 16 and rec.figures.failed == 0
    assert_clean(rec)
