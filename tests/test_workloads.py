"""Synthetic workloads (DESIGN §8): parsing, determinism, exact chained hashes, prefix sharing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wavepp.runtime.kvcache.hashing import block_hashes
from wavepp.runtime.request import Request
from wavepp.runtime.sources.workloads import Workload, WorkloadSpec, fit_prompt_tokens, longest_prompt, parse_workload

B = 64
VOCAB = 1000


def make(name: str, n: int = 24, prompt: int = 2048, seed: int = 7, extra: bytes = b"") -> Workload:
    return Workload(parse_workload(name), n, prompt, B, VOCAB, seed, extra)


def drain(w: Workload) -> list[Request]:
    out: list[Request] = []
    while not w.exhausted:
        out.append(w.next_request(float(len(out))))
    return out


# ---- parsing -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "spec"), [
    ("cold", WorkloadSpec("cold")),
    ("reuse90", WorkloadSpec("reuse90")),
    ("mixed", WorkloadSpec("mixed")),
    ("suffix:4096", WorkloadSpec("suffix", 4096)),
    ("suffix4k", WorkloadSpec("suffix", 4096)),
    ("suffix:1", WorkloadSpec("suffix", 1)),
    (" reuse90 ", WorkloadSpec("reuse90")),
    ("docs:64", WorkloadSpec("docs", 4096, documents=64)),
    ("docs:8:suffix=512:zipf=0", WorkloadSpec("docs", 512, documents=8, zipf=0.0)),
    ("docs:8:zipf=1.5", WorkloadSpec("docs", 4096, documents=8, zipf=1.5)),
])
def test_parse_accepted_forms(text: str, spec: WorkloadSpec) -> None:
    """Each documented form parses to its spec; suffix4k is suffix:4096."""
    assert parse_workload(text) == spec


def test_spec_name_round_trips() -> None:
    """A spec's name parses back to the same spec."""
    for text in ("cold", "reuse90", "mixed", "suffix:4096", "suffix4k", "docs:9", "docs:9:suffix=100:zipf=0.5"):
        spec = parse_workload(text)
        assert parse_workload(spec.name) == spec
    assert parse_workload("suffix4k").name == "suffix:4096"


@pytest.mark.parametrize("text", ["bogus", "suffix:0", "suffix:x", "suffix:", "suffix:-5", "suffix", "",
                                  "suffix:4k", "docs:0", "docs:", "docs:x", "docs:4:zipf=-1", "docs:4:zipf=nan",
                                  "docs:4:suffix=0", "docs:4:colour=red", "docs:２"])
def test_parse_rejects(text: str) -> None:
    """Unknown names and non-positive or non-numeric suffix lengths raise ValueError naming the forms."""
    with pytest.raises(ValueError, match="suffix:N|docs:N|suffix=TOKENS"):
        parse_workload(text)


@pytest.mark.parametrize(("n", "prompt"), [(0, 2048), (4, 2 * B - 1)])
def test_workload_rejects_bad_sizes(n: int, prompt: int) -> None:
    """At least one request and prompts of at least two blocks."""
    with pytest.raises(ValueError):
        Workload(WorkloadSpec("cold"), n, prompt, B, VOCAB, 0)


# ---- determinism and hashes ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cold", "reuse90", "mixed", "suffix:512", "docs:6"])
def test_deterministic_for_a_seed(name: str) -> None:
    """Two instances with one seed give the same ids, tokens, hashes, groups and primed prefixes."""
    a, b = make(name), make(name)
    ra, rb = drain(a), drain(b)
    assert [(r.id, r.tokens, r.block_hashes, r.group) for r in ra] == \
           [(r.id, r.tokens, r.block_hashes, r.group) for r in rb]
    assert a.primed_prompts() == b.primed_prompts()
    assert [r.tokens for r in drain(make(name, seed=8))] != [r.tokens for r in ra]


@pytest.mark.parametrize("name", ["cold", "reuse90", "mixed", "suffix:100", "docs:5:suffix=100"])
@pytest.mark.parametrize("extra", [b"", b"rev-2"])
def test_hashes_equal_full_recomputation(name: str, extra: bytes) -> None:
    """A request's hashes (prefix hashes + chained suffix) equal block_hashes of its tokens from scratch."""
    w = make(name, extra=extra)
    for r in drain(w):
        assert r.block_hashes == block_hashes(r.tokens, B, extra)
    for tokens, hashes in w.primed_prompts():
        assert hashes == block_hashes(tokens, B, extra)


@pytest.mark.parametrize("name", ["cold", "reuse90", "mixed", "suffix:333"])
def test_tokens_below_vocab_size(name: str) -> None:
    """Every token id is a valid vocabulary index."""
    w = make(name)
    for r in drain(w):
        assert max(r.tokens) < VOCAB and min(r.tokens) >= 0
    for tokens, _ in w.primed_prompts():
        assert max(tokens) < VOCAB


def test_ids_are_unique_and_count_is_exact() -> None:
    """Exactly num_requests requests, with distinct ids, then exhausted."""
    w = make("mixed", n=30)
    reqs = drain(w)
    assert len(reqs) == 30 and len({r.id for r in reqs}) == 30
    assert w.exhausted


# ---- shape of each kind --------------------------------------------------------------------

def _primed_prefix_of(w: Workload, r: Request) -> list[int] | None:
    for tokens, hashes in w.primed_prompts():
        if r.tokens[: len(tokens)] == tokens:
            return hashes
    return None


def test_suffix_is_primed_prefix_plus_exactly_n_tokens() -> None:
    """suffix:N: every prompt is one primed, block-aligned prefix followed by exactly N new tokens."""
    w = make("suffix:300")
    assert len(w.primed_prompts()) == Workload.NUM_GROUPS
    for r in drain(w):
        matches = [t for t, _ in w.primed_prompts() if r.tokens[: len(t)] == t]
        assert len(matches) == 1
        prefix = matches[0]
        assert len(prefix) % B == 0
        assert r.num_tokens == len(prefix) + 300
        assert r.block_hashes[: len(prefix) // B] == block_hashes(prefix, B)


def test_reuse90_shares_about_ninety_percent_with_a_primed_prefix() -> None:
    """reuse90: each prompt starts with a primed prefix covering 85-95% of it (suffix ≈ prefix / 9)."""
    w = make("reuse90", n=40, prompt=8192)
    for r in drain(w):
        hashes = _primed_prefix_of(w, r)
        assert hashes is not None, r.id
        shared = len(hashes) * B
        assert 0.85 <= shared / r.num_tokens <= 0.95, (shared, r.num_tokens)
        assert r.block_hashes[: len(hashes)] == hashes
        assert r.group.startswith("g")


def test_reuse90_requests_of_one_group_share_the_prefix_blocks() -> None:
    """Two reuse90 requests of the same group share exactly the prefix's block hashes."""
    w = make("reuse90", n=40)
    reqs = drain(w)
    by_group: dict[str, list[Request]] = {}
    for r in reqs:
        by_group.setdefault(r.group, []).append(r)
    pairs = [g for g in by_group.values() if len(g) >= 2]
    assert pairs
    for a, b, *_ in pairs:
        prefix = _primed_prefix_of(w, a)
        assert prefix is not None and _primed_prefix_of(w, b) == prefix
        assert set(a.block_hashes) & set(b.block_hashes) == set(prefix)


def test_cold_prompts_share_no_block() -> None:
    """cold: no block hash is common to two prompts, nothing is primed, and lengths vary."""
    w = make("cold", n=30)
    reqs = drain(w)
    assert w.primed_prompts() == []
    seen: set[int] = set()
    for r in reqs:
        assert r.group == "cold"
        assert not seen & set(r.block_hashes)
        seen |= set(r.block_hashes)
    lengths = [r.num_tokens for r in reqs]
    assert min(lengths) >= 0.75 * 2048 - 1 and max(lengths) <= 1.25 * 2048 + 1
    assert len(set(lengths)) > 1


def test_mixed_is_mostly_warm() -> None:
    """mixed: about 75% of requests reuse a primed prefix, the rest are cold."""
    w = make("mixed", n=200, prompt=256)
    reqs = drain(w)
    warm = [r for r in reqs if r.group != "cold"]
    assert 0.6 <= len(warm) / len(reqs) <= 0.9
    assert all(_primed_prefix_of(w, r) is not None for r in warm)
    assert all(_primed_prefix_of(w, r) is None for r in reqs if r.group == "cold")


def test_a_session_turn_extends_the_previous_prompt_of_its_conversation() -> None:
    spec = parse_workload("sessions:3")
    assert spec.name == "sessions:3"
    w = Workload(spec, 40, 1024, 16, 32000, 0)
    last: dict[str, list[int]] = {}
    grew = 0
    for _ in range(40):
        r = w.next_request(0.0)
        prev = last.get(r.group)
        if prev is not None and len(r.tokens) > len(prev):
            assert list(r.tokens[:len(prev)]) == prev          # history (prompt + answer) is the prefix
            assert r.block_hashes[:len(prev) // 16] == block_hashes(prev, 16)[:len(prev) // 16]
            grew += 1
        last[r.group] = list(r.tokens)
    assert grew > 20 and len(last) == 3


def test_sessions_outgrow_uneven_pools_and_the_stages_evict_differently() -> None:
    from wavepp.runtime.bench.runs import BenchConfig, run_one
    from wavepp.runtime.engines.config import SimConfig
    from wavepp.runtime.engines.sim.engine import SimEngine
    engine = SimEngine(SimConfig("llama-3-8b", "h200", 2, block_size=64, kv_blocks=[300, 200]))
    cfg = BenchConfig(parse_workload("sessions:12"), [4], ["wavepp"], 120, 0, prompt_tokens=2048)
    # trtllm-pp's ranks store a running context's blocks each when its wave retired there, at different moments:
    # under the rule of completion (the legacy loop's) the two ranks are exactly alike.
    for policy in ("wavepp", "trtllm-pp+publish=completion"):
        rec = run_one(engine, cfg, policy, 4)
        assert rec.figures.completed == 120
        evictions = [h.cache.pool.num_evictions for h in rec.parts.handles]
        assert min(evictions) > 0
        if policy == "wavepp":                 # its own pool per stage: the smaller one evicts more
            assert evictions[0] < evictions[1]
        else:                                  # pool=min: both ranks the smaller pool, in lockstep - alike
            assert [h.capacity for h in rec.parts.handles] == [200, 200] and evictions[0] == evictions[1]
        assert rec.figures.evictions == evictions           # nothing primed: the spans saw every eviction
        assert rec.figures.good_hit_rate is not None and 0 < rec.figures.good_hit_rate < 1


@pytest.mark.parametrize("name", ["cold", "reuse90", "mixed", "suffix:300", "suffix:4096", "sessions:3",
                                  "docs:20:suffix=300"])
@pytest.mark.parametrize("seed", range(4))
def test_longest_prompt_bounds_every_prompt(name: str, seed: int) -> None:
    """No primed prefix and no request is longer than ``longest_prompt`` says (the up-front check
    against the model's context relies on it)."""
    spec = parse_workload(name)
    w = Workload(spec, 300, 1000, 16, 1000, seed)
    lengths = [len(t) for t, _ in w.primed_prompts()] + [w.next_request(0.0).num_tokens for _ in range(300)]
    assert max(lengths) <= longest_prompt(spec, 1000, 16)


def test_the_default_workload_of_every_built_in_model_fits_its_context() -> None:
    """The default prompt length shrinks so that the default workload fits the context: llama-3-8b
    (8192) on suffix4k used to fail 47 of 64 requests."""
    from wavepp.runtime.engines.sim.profiles import MODELS
    from wavepp.runtime.engines.torch.config import PROFILES
    contexts = {name: (m.max_context, min(32768, m.max_context // 2), "suffix4k") for name, m in MODELS.items()}
    contexts |= {name: (c.max_position, min(1024, c.max_position // 2), "reuse90") for name, c in PROFILES.items()}
    for name, (context, default, workload) in contexts.items():
        spec = parse_workload(workload)
        tokens = fit_prompt_tokens(spec, None, default, context, 64)
        assert longest_prompt(spec, tokens, 64) <= context, name
        assert tokens > 0.5 * default or name == "llama-3-8b", name          # shrunk only where needed


def test_a_requested_prompt_length_that_does_not_fit_is_refused() -> None:
    with pytest.raises(ValueError, match="makes prompts of up to .* the model's context is 8192"):
        fit_prompt_tokens(parse_workload("suffix4k"), 4096, 4096, 8192, 64)


# ---- docs: many distinct long contexts ----------------------------------------------------------

def test_docs_requests_are_a_document_plus_a_new_question_of_the_suffix_length() -> None:
    w = Workload(parse_workload("docs:10:suffix=200"), 60, 1000, B, VOCAB, 3)
    for r in drain(w):
        d = int(r.group.removeprefix("d"))
        doc = w.doc_lengths[d]
        assert r.num_tokens == doc + 200
        assert r.tokens[:doc] == w._document(d).tokens             # the same document every time
        assert 448 <= doc <= 1472 and doc % B == 0                 # [m/2, 3m/2], whole blocks (rounded down)
    assert w.primed_prompts() == []                                # docs start cold


def test_docs_popularity_follows_zipf_and_the_working_set_counts_each_used_document_once() -> None:
    n, draws = 20, 4000
    w = Workload(parse_workload("docs:20:zipf=1"), draws, 640, B, VOCAB, 1)
    counts = [0] * n
    for r in drain(w):
        counts[int(r.group.removeprefix("d"))] += 1
    harmonic = sum(1 / (k + 1) for k in range(n))
    for rank in (0, 1, 4):                                         # P(rank r) = (1/(r+1)) / H_n
        expected = draws / (rank + 1) / harmonic
        assert abs(counts[rank] - expected) < 4 * expected ** 0.5 + 5, (rank, counts[rank], expected)
    assert counts[0] > counts[1] > counts[9]
    used = [d for d in range(n) if counts[d]]
    assert w.working_set_tokens() == sum(w.doc_lengths[d] for d in used)
    uniform = Workload(parse_workload("docs:20:zipf=0"), draws, 640, B, VOCAB, 1)
    spread = [0] * n
    for r in drain(uniform):
        spread[int(r.group.removeprefix("d"))] += 1
    assert all(abs(c - draws / n) < 5 * (draws / n) ** 0.5 for c in spread), spread   # zipf=0: all alike


def test_a_document_is_the_same_whatever_the_order_of_requests() -> None:
    a = Workload(parse_workload("docs:30"), 10, 640, B, VOCAB, 5)
    b = Workload(parse_workload("docs:30"), 10, 640, B, VOCAB, 5)
    b._document(29)                                                # made out of order
    assert a._document(29) == b._document(29) and a._document(3) == b._document(3)


def test_the_working_set_of_the_shared_prefix_workloads() -> None:
    w = make("reuse90", n=200)
    drain(w)
    assert w.working_set_tokens() == sum(len(t) for t, _ in w.primed_prompts())   # all 8 groups drawn
    assert make("cold").working_set_tokens() == 0


def test_a_bench_reports_the_working_set_beside_each_stages_pool(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from wavepp.runtime.cli import main
    out = tmp_path / "b.json"
    assert main(["bench", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "2", "--workload",
                 "docs:6:suffix=128", "--prompt-tokens", "1024", "--kv-blocks", "60,40", "--concurrency", "2",
                 "--requests", "12", "--policy", "wavepp", "--quiet", "--json", str(out)]) == 0
    [run] = json.loads(out.read_text())["runs"]
    assert run["capacity_tokens"] == [60 * 64, 40 * 64]
    w = Workload(parse_workload("docs:6:suffix=128"), 12, 1024, 64, 128256, 0)   # the bench's seed and sizes
    drain(w)
    assert run["working_set_tokens"] == w.working_set_tokens() > 40 * 64          # more than a stage holds
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("working set"))
    assert f"{w.working_set_tokens():,} tokens" in line and "the smallest stage's pool (pools 3,840, 2,560" in line
