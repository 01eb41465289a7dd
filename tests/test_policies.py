"""Policies as compositions of mechanisms: each mechanism does what its docstring says, specs
compose and ablate, and any composition runs through the one loop on the sim and torch engines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from wavepp.dashboard.sources import Snapshot
from wavepp.dashboard.view import make_view
from wavepp.runtime.bench.runs import BenchConfig, run_one
from wavepp.runtime.control.knobs import POLICY_NAMES, KnobError, Knobs
from wavepp.runtime.engines.config import SimConfig
from wavepp.runtime.engines.sim.engine import SimEngine
from wavepp.runtime.kvcache.priming import prime
from wavepp.runtime.mechanisms.token_charge import FromPositionZero, SuffixOnly
from wavepp.runtime.planning.planner import pack_static
from wavepp.runtime.policies import KINDS, POLICIES, get_policy
from wavepp.runtime.request import AdmittedRequest, Chunk, Request
from wavepp.runtime.sources.workloads import parse_workload
from wavepp.telemetry import names as N

B = 64


def adm(rid: str, num_tokens: int, reuse_blocks: int = 0) -> AdmittedRequest:
    return AdmittedRequest(Request(rid, list(range(num_tokens)), 0.0, []), reuse_blocks, 0.0, B)  # type: ignore[arg-type]


# ---- token charge --------------------------------------------------------------------------

def test_charged_from_position_zero_one_long_reused_prompt_fills_a_micro_batch() -> None:
    """max_num_tokens 8192: a 36K-token prompt with a 4K suffix is charged min(8192, 36K) and
    computes its 4K suffix; nothing else fits in that micro-batch."""
    prompts = [adm("a", 36864, reuse_blocks=32768 // B), adm("b", 36864, reuse_blocks=32768 // B)]
    position0 = pack_static(prompts, 8192, B, FromPositionZero().position)
    assert position0 == [Chunk("a", 32768, 4096, 512, True)]
    credited = pack_static(prompts, 8192, B, SuffixOnly().position)
    assert credited == [Chunk("a", 32768, 4096, 512, True), Chunk("b", 32768, 4096, 512, True)]


def test_a_non_last_chunk_after_reuse_is_shifted_not_shrunk() -> None:
    """setPrepopulatedPromptLen moves the window right by the reused amount: a chunk charged 8192
    from position 0 computes 8192 tokens starting at the cached position, its end on a block."""
    a = adm("a", 36864, reuse_blocks=4096 // B)
    assert pack_static([a], 8192, B, FromPositionZero().position) == [Chunk("a", 4096, 8192, 64, False)]
    a.scheduled += 8192             # the next chunk is past the prefix: charged what it computes
    assert FromPositionZero().position(a) == a.scheduled


# ---- composition ---------------------------------------------------------------------------

def test_presets_are_compositions_and_the_knob_lists_them() -> None:
    assert set(POLICY_NAMES) == set(POLICIES.supported_names())
    wavepp, trt, legacy = (POLICIES.get(n) for n in ("wavepp", "trtllm-pp", "trtllm-pp-legacy"))
    assert wavepp.mechanisms() == {"admission": "async", "lookup": "hint-index", "stage-admission": "every-stage",
                                   "charge": "suffix", "chunking": "cost", "ring": "2P", "fill": "on", "relay": "off",
                                   "reserve": "suffix", "host": "none", "return": "direct", "pool": "per-stage",
                                   "share": "follow", "topology": "pp", "lookup-at": "admission",
                                   "publish": "completion"}
    assert trt.mechanisms() == {"admission": "inline", "lookup": "first-stage", "stage-admission": "first-chunk",
                                "charge": "suffix", "chunking": "static", "ring": "P", "fill": "off", "relay": "on",
                                "reserve": "suffix", "host": "lockstep", "return": "ring", "pool": "min",
                                "share": "off", "topology": "pp", "lookup-at": "first-scheduling",
                                "publish": "retire"}
    assert legacy.mechanisms() == {**trt.mechanisms(), "charge": "position0", "reserve": "whole-prompt",
                                   "publish": "completion"}
    vllm, sglang = POLICIES.get("vllm-pp"), POLICIES.get("sglang-pp")
    assert vllm.mechanisms() == {**trt.mechanisms(), "stage-admission": "central", "chunking": "static-16384",
                                 "host": "none", "pool": "central", "share": "planned"}
    assert sglang.mechanisms() == {**trt.mechanisms(), "stage-admission": "central", "chunking": "dynamic-16384",
                                   "pool": "central", "share": "planned"}
    overlap = {"ring": "2P", "return": "direct"}
    assert POLICIES.get("trtllm-tep").mechanisms() == {**trt.mechanisms(), **overlap, "topology": "tep"}
    assert POLICIES.get("vllm-tep").mechanisms() == {**vllm.mechanisms(), **overlap, "topology": "tep-nccl"}
    assert POLICIES.get("sglang-tep").mechanisms() == {**sglang.mechanisms(), **overlap, "topology": "tep-nccl",
                                                       "chunking": "static-16384"}


def test_a_spec_swaps_mechanisms_in_order() -> None:
    p = get_policy("wavepp+lookup=first-stage+ring=P")
    assert p.name == "wavepp+lookup=first-stage+ring=P"
    assert p.mechanisms() == {**POLICIES.get("wavepp").mechanisms(), "lookup": "first-stage", "ring": "P"}
    assert p.ring_size(Knobs(), 4) == 4 and POLICIES.get("wavepp").ring_size(Knobs(), 4) == 8


@pytest.mark.parametrize("spec,message", [
    ("fastest", "unknown policy 'fastest'"),
    ("wavepp+lookup", "'lookup' is not KIND=VARIANT"),
    ("wavepp+colour=red", "unknown mechanism kind 'colour'"),
    ("wavepp+charge=half", "unknown charge variant 'half' (known: suffix, position0)"),
])
def test_a_bad_spec_names_what_is_unknown(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        get_policy(spec)
    with pytest.raises(KnobError, match="^policy: "):
        Knobs().replace(policy=spec)


def test_every_variant_is_reachable_by_name() -> None:
    for kind, variants in KINDS.items():
        for name in variants.supported_names():
            assert get_policy(f"wavepp+{kind}={name}").mechanisms()[kind] == name


# ---- one loop, any composition ------------------------------------------------------------

@pytest.mark.parametrize("spec", ["trtllm-pp-legacy", "wavepp+admission=inline+stage-admission=first-chunk",
                                  "trtllm-pp+lookup=hint-index+ring=2P"])
def test_a_composed_policy_runs_through_the_loop_on_the_sim(spec: str) -> None:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 4, block_size=B, kv_blocks=[600, 300, 600, 600]))
    cfg = BenchConfig(parse_workload("reuse90"), [8], [spec], 32, 0, prompt_tokens=2048)
    rec = run_one(engine, cfg, spec, 8)
    assert rec.figures.completed == 32 and rec.figures.failed == 0
    assert rec.meta["mechanisms"] == get_policy(spec).mechanisms()
    inline = get_policy(spec).mechanisms()["admission"] == "inline"
    rounds = [s for s in rec.saved().spans if s["n"] == N.ADMISSION_ROUND]
    assert rounds and all(s["a"][N.ADMISSION_CRITICAL] == inline for s in rounds)   # the spans say who waited
    # The dashboard asks the policy too (not its name): its figures from the spans are the bench's.
    view = make_view(SimpleNamespace(kind="sim"), Snapshot("r", spec, rec.encoded, 4))  # type: ignore[arg-type]
    assert view.figures is not None
    assert view.figures.admission_critical_path_s_per_request == rec.figures.admission_critical_path_s_per_request
    assert view.figures.idle_causes_s == rec.figures.idle_causes_s
    for h in rec.parts.handles:
        assert h.cache.leases == {} and h.cache.tickets == {}
        h.cache.check()


def test_charging_from_position_zero_costs_the_baseline_waves(tmp_path: Path) -> None:
    """Same schedule, same engine: charged from position 0, the baseline's static waves carry
    fewer computed tokens each, so it needs more of them for the same requests."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, block_size=B, kv_blocks=[4000]))
    cfg = BenchConfig(parse_workload("suffix:256"), [16], [], 48, 0, prompt_tokens=4096)
    cfg.knobs = cfg.knobs.replace(static_chunk_tokens=2048)
    credited = run_one(engine, cfg, "trtllm-pp", 16)
    legacy = run_one(engine, cfg, "trtllm-pp-legacy", 16)
    assert credited.figures.completed == legacy.figures.completed == 48
    assert legacy.figures.waves > credited.figures.waves
    assert legacy.figures.mean_wave_tokens < credited.figures.mean_wave_tokens


def test_a_composed_policy_runs_on_the_torch_engine(tmp_path: Path) -> None:
    from wavepp.runtime.engines.config import TorchConfig
    from wavepp.runtime.engines.torch.config import DecoderConfig
    from wavepp.runtime.engines.torch.engine import TorchEngine

    cfg_model = DecoderConfig(vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=4, num_heads=4,
                              num_kv_heads=2, max_position=2048)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg_model.to_hf_dict()))
    engine = TorchEngine(TorchConfig(str(path), pp=2, block_size=16, kv_blocks=[200, 120], seed=3))
    spec = "trtllm-pp-legacy+lookup=hint-index"
    cfg = BenchConfig(parse_workload("reuse90"), [4], [spec], 12, seed=1, prompt_tokens=200)
    cfg.knobs = cfg.knobs.replace(max_wave_tokens=128, min_wave_tokens=64, static_chunk_tokens=64)
    rec = run_one(engine, cfg, spec, 4)
    assert rec.figures.completed == 12 and rec.figures.failed == 0
    assert rec.meta["mechanisms"]["charge"] == "position0"


def test_reserving_for_the_whole_prompt_admits_fewer_when_the_pool_binds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompts of 32 blocks reusing ~28 on a 160-block stage 0: the suffix reservation admits
    many at once, the whole-prompt one (before TRT-LLM PR #11490) far fewer - it counts again the
    shared prefix the requests running beside it hold."""
    from wavepp.runtime.kvcache.stage_cache import StageCache
    from wavepp.runtime.mechanisms.reserve import SuffixBlocks, WholePrompt
    assert SuffixBlocks().blocks(2048, 28, 64) == WholePrompt().blocks(2048, 28, 64) == 4
    assert (SuffixBlocks().held_prefix, WholePrompt().held_prefix) == (False, True)
    peak = {"now": 0}
    real = StageCache.escrow_round

    def counting(self: StageCache, items: list[tuple[str, int]], held_prefix: bool = False) -> int:
        n = real(self, items, held_prefix)
        if self.stage == 0:
            peak["now"] = max(peak["now"], len(self.tickets))
        return n

    monkeypatch.setattr(StageCache, "escrow_round", counting)
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, block_size=B, kv_blocks=[160]))
    cfg = BenchConfig(parse_workload("reuse90"), [16], [], 32, 0, prompt_tokens=2048)
    seen = {}
    for spec in ("trtllm-pp", "trtllm-pp+reserve=whole-prompt"):
        peak["now"] = 0
        rec = run_one(engine, cfg, spec, 16)
        assert rec.figures.completed == 32
        seen[spec] = peak["now"]
    assert seen["trtllm-pp+reserve=whole-prompt"] < seen["trtllm-pp"]


def test_the_whole_prompt_reserve_counts_again_only_the_prefix_others_hold() -> None:
    """TensorRT-LLM counts cached blocks nobody uses as free (PR #11731), so a whole-prompt need
    double-counts only reused blocks running requests hold. A lease that pins cached blocks itself
    takes them from the room already; counting them again refused a prompt reusing more than the
    spare room forever (trtllm-pp-legacy stalled on a 40-block stage)."""
    from wavepp.runtime.kvcache.hashing import block_hashes, token_array
    from wavepp.runtime.kvcache.stage_cache import StageCache
    tokens = list(range(30 * B + 10))
    hashes = block_hashes(token_array(tokens), B)                    # 30 full blocks
    cache = StageCache(0, 40, B)
    assert prime(cache, "warm", hashes, len(tokens))                  # all 30 cached, nobody holds them
    assert cache.lease("a", hashes, 28, len(tokens)) == 28
    assert cache.leases["a"].held == 0                               # it pinned them itself
    assert cache.escrow_round([("a", 3)], held_prefix=True) == 1 and cache.tickets["a"] == 3
    assert cache.lease("b", hashes, 20, len(tokens)) == 20 and cache.leases["b"].held == 20
    assert cache.escrow_round([("b", 11)], held_prefix=True) == 0    # 11 + 20 held by a > the 9 left
    assert cache.escrow_round([("b", 9)], held_prefix=False) == 1    # the suffix alone fits
    cache.release("a"), cache.release("b")
    cache.check()


def test_the_legacy_reserve_runs_where_the_pool_is_smaller_than_its_double_count() -> None:
    """2K-token prompts (up to 36 blocks) on a 40-block stage, mixed reuse: every request
    completes under the pre-#11490 reserve, as under the suffix one (it stalled at 2 of 40)."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 3, block_size=B, kv_blocks=[40, 64, 52]))
    cfg = BenchConfig(parse_workload("mixed"), [8], [], 40, 0, prompt_tokens=2048)
    for spec in ("trtllm-pp-legacy", "trtllm-pp"):
        f = run_one(engine, cfg, spec, 8).figures
        assert f.stalled is None and f.completed == 40, (spec, f.stalled)


def test_lockstep_host_work_walks_pending_prompts_on_the_stage_tree() -> None:
    """A radix walk per pending prompt, block by block until the first miss (PR #13095)."""
    import asyncio

    from wavepp.runtime.kvcache.handle import StageHandle
    from wavepp.runtime.kvcache.hashing import block_hashes, token_array
    from wavepp.runtime.kvcache.stage_cache import StageCache
    cache = StageCache(0, 64, B)
    cached = block_hashes(token_array(list(range(640))), B)          # 10 blocks
    assert prime(cache, "p", cached, 640)
    other = block_hashes(token_array([7] * 320), B)                  # 5 blocks, none cached
    walked = asyncio.run(StageHandle(cache).host_iteration([cached + other, other], 1000, 3))
    assert walked == 11 + 1          # 10 hits and the miss that ends the walk; then 1 miss


def test_host_work_costs_the_baseline_only_when_it_outlasts_the_step() -> None:
    """Sensitivity: scaled up far enough, the lockstep host work shows as preparation idle."""
    cfg = BenchConfig(parse_workload("reuse90"), [16], [], 48, 0, prompt_tokens=2048)
    idle = {}
    for scale in (1.0, 3000.0):
        engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, block_size=B, kv_blocks=[2000], host_work_scale=scale))
        f = run_one(engine, cfg, "trtllm-pp", 16).figures
        idle[scale] = sum(st["preparation"] for st in f.idle_causes_s) / f.makespan_s
        wave = run_one(engine, cfg, "wavepp", 16).figures        # wavepp has no lockstep host work
        assert sum(st["preparation"] for st in wave.idle_causes_s) / wave.makespan_s < 0.01
    assert idle[3000.0] > idle[1.0] + 0.05


def test_the_ring_return_path_adds_one_stage_message_before_a_slot_reopens() -> None:
    """With R = P and a return hop per wave, stage 0 waits that hop longer for each slot."""
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, block_size=B, kv_blocks=[2000]))
    cfg = BenchConfig(parse_workload("suffix:256"), [16], [], 48, 0, prompt_tokens=2048)
    direct = run_one(engine, cfg, "trtllm-pp+return=direct", 16).figures
    ring = run_one(engine, cfg, "trtllm-pp", 16).figures
    assert ring.completed == direct.completed == 48
    hop = engine.costs.stage_message_s
    assert ring.makespan_s > direct.makespan_s
    assert ring.makespan_s - direct.makespan_s <= 1.5 * hop * ring.waves


# ---- the cache pool: how an engine provides the stages' caches -----------------------------------

def test_the_policys_pool_sizes_the_caches_and_a_policy_switched_to_runs_on_them() -> None:

    from wavepp.runtime.loop import LoopConfig, PipelineLoop
    from wavepp.runtime.runs.runfile import RunInfo
    from wavepp.runtime.sources.workloads import Workload
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 3, block_size=B, kv_blocks=[900, 500, 700]))
    assert [h.capacity for h in engine.build(get_policy("wavepp").pool).handles] == [900, 500, 700]
    parts = engine.build(get_policy("trtllm-pp").pool)
    assert [h.capacity for h in parts.handles] == [500, 500, 500]     # TensorRT-LLM: allreduce MIN

    async def main() -> None:
        store = await engine.open_store()
        knobs = engine.default_knobs().replace(policy="trtllm-pp")
        workload = Workload(parse_workload("reuse90"), 8, 1024, B, engine.vocab_size, 0)
        tel = engine.telemetry(RunInfo.new("x", "reuse90", 4, "sim", "memory"))
        loop = PipelineLoop(parts, store, knobs, workload, tel, LoopConfig(4))
        loop.set_knobs(knobs.replace(policy="wavepp"))                      # per-stage pools: not these caches
        result = await loop.run()
        assert len(result.completions) == 8 and not result.failures
        assert loop.policy.name == "wavepp" and loop.policy.pool == get_policy("trtllm-pp").pool
        events = [e for s in tel.finished_spans() if s.name == N.WAVE_PLAN for e in s.events
                  if e.name == N.EVENT_KNOBS]
        assert events and events[0].attributes[N.KNOBS_POOL_KEPT] == "min"   # the change says its pool stayed
    with engine.runner() as runner:
        runner.run(main())


# ---- one manager for every stage (vLLM, SGLang) --------------------------------------------------

def test_one_manager_decides_for_every_stage_so_no_request_falls_back() -> None:
    """vllm-pp and sglang-pp under pressure on uneven pools: every pool is the smallest's, the stages past
    the first keep nothing of their own, and a hit holds on every stage - no fallback - where TensorRT-LLM's
    per-rank pools, evicting on their own schedules, fall back late."""
    from wavepp.runtime.kvcache.pools import MirrorCache
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 3, block_size=B, kv_blocks=[420, 260, 330]))
    cfg = BenchConfig(parse_workload("mixed"), [8], [], 64, 0, prompt_tokens=2048)
    for spec in ("vllm-pp", "sglang-pp"):
        rec = run_one(engine, cfg, spec, 8)
        assert rec.figures.completed == 64 and rec.figures.failed == 0
        assert rec.figures.fallbacks == 0 and sum(rec.figures.evictions) > 0, spec
        assert [h.capacity for h in rec.parts.handles] == [260] * 3
        central, *mirrors = (h.cache for h in rec.parts.handles)
        assert all(isinstance(m, MirrorCache) and m.central is central for m in mirrors)
        assert all(not m.pool.by_hash and not m.tables for m in mirrors)
        central.check()
    assert run_one(engine, cfg, "trtllm-pp", 8).figures.fallbacks > 0


def test_a_policy_switched_to_on_a_central_pool_finds_the_mirrors_agreeing() -> None:
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 3, block_size=B, kv_blocks=[420, 260, 330]))
    cfg = BenchConfig(parse_workload("reuse90"), [8], [], 32, 0, prompt_tokens=2048)
    for spec in ("wavepp+pool=central", "trtllm-pp+pool=central"):
        rec = run_one(engine, cfg, spec, 8)
        assert rec.figures.completed == 32 and rec.figures.failed == 0, spec
