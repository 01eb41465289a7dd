"""Synthetic, seeded workloads (DESIGN §8), run closed-loop at a concurrency.

* ``cold``     - no shared prefixes;
* ``reuse90``  - 90% of each prompt is a prefix already seen (one of a few documents);
* ``mixed``    - 75% of requests like ``reuse90``, 25% cold;
* ``suffix:N`` - a long cached prefix + N new tokens (``suffix4k`` = ``suffix:4096``).

Prefixes that the workload says are "already seen" are *primed*: computed once into every
stage's cache before the measured run (stages with less room keep fewer of them - that is
where residency starts to diverge). Block hashes are computed at arrival; a shared prefix's
hashes are computed once and the request's own blocks chain on from them.
"""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass

from runtime.hashing import block_hashes
from runtime.request import Request
from runtime.traces import TraceWorkload, load_trace

ALIASES = {"suffix4k": "suffix:4096", "suffix16k": "suffix:16384"}


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    kind: str
    suffix_tokens: int = 0
    sessions: int = 0              # sessions: concurrent multi-turn conversations
    path: str = ""                 # trace: the Mooncake-format file
    on_bad_line: str = "fail"      # trace: skip | fail
    speed: float = 1.0             # trace: replay this many times faster

    @property
    def name(self) -> str:
        if self.kind == "trace":
            return f"trace:{self.path}"
        if self.kind == "sessions":
            return f"sessions:{self.sessions}"
        return f"suffix:{self.suffix_tokens}" if self.kind == "suffix" else self.kind


def parse_workload(name: str) -> WorkloadSpec:
    """``cold | reuse90 | mixed | suffix:N | suffix4k | suffix16k | trace:PATH`` -> spec; ValueError
    with the accepted forms."""
    text = ALIASES.get(name.strip(), name.strip())
    if text.startswith("trace:") and text.removeprefix("trace:"):
        return WorkloadSpec("trace", path=text.removeprefix("trace:"))
    if text in ("cold", "reuse90", "mixed"):
        return WorkloadSpec(text)
    if text.startswith("sessions:"):
        n = text.removeprefix("sessions:")
        if n.isdigit() and int(n) > 0:
            return WorkloadSpec("sessions", sessions=int(n))
    if text.startswith("suffix:"):
        n = text.removeprefix("suffix:")
        if n.isdigit() and int(n) > 0:
            return WorkloadSpec("suffix", int(n))
    raise ValueError(f"unknown workload {name!r} "
                     "(use cold, reuse90, mixed, suffix:N, suffix4k, suffix16k, sessions:N or trace:PATH)")


def make_workload(spec: WorkloadSpec, num_requests: int | None, prompt_tokens: int, block_size: int,
                  vocab_size: int, seed: int) -> Workload | TraceWorkload:
    """The generator for ``spec``: synthetic prompts for a closed loop, or a trace's requests
    arriving open-loop (``num_requests`` caps how many of its rows; None: all)."""
    if spec.kind == "trace":
        trace = load_trace(spec.path, spec.on_bad_line, num_requests)
        return TraceWorkload(trace, block_size, vocab_size, speed=spec.speed)
    if num_requests is None:
        raise ValueError("a synthetic workload needs a number of requests")
    return Workload(spec, num_requests, prompt_tokens, block_size, vocab_size, seed)


JITTER = 0.25          # prompt lengths are drawn in [1 - JITTER, 1 + JITTER] x the typical length
REUSE_SHARE = 0.9      # reuse90: the shared prefix's share of a prompt


def longest_prompt(spec: WorkloadSpec, prompt_tokens: int, block_size: int) -> int:
    """An upper bound on the tokens of any prompt (primed prefix or request) the workload makes
    (a trace's prompts are its own: not bounded here)."""
    if spec.kind == "trace":
        raise ValueError("a trace's prompt lengths are in the trace")
    top = round(prompt_tokens * (1 + JITTER))
    if spec.kind == "cold":
        return top
    if spec.kind == "sessions":     # a history past 2 x the typical prompt starts over; then one more turn
        return 2 * prompt_tokens + round((prompt_tokens // 8) * (1 + JITTER))
    share = 1.0 if spec.kind == "suffix" else REUSE_SHARE
    prefix = int(top * share) // block_size * block_size
    if spec.kind == "suffix":
        return prefix + spec.suffix_tokens
    reuse = prefix + round((prefix // 9) * (1 + JITTER))
    return max(reuse, top) if spec.kind == "mixed" else reuse


def fit_prompt_tokens(spec: WorkloadSpec, requested: int | None, default: int, context: int, block_size: int) -> int:
    """The typical prompt length of a run: ``requested`` when its longest prompt fits the model's
    context (else ValueError naming the limit), or the largest length up to ``default`` that fits."""
    if requested is not None:
        longest = longest_prompt(spec, requested, block_size)
        if longest > context:
            raise ValueError(f"workload {spec.name} with --prompt-tokens {requested} makes prompts of up to "
                             f"{longest} tokens; the model's context is {context}")
        return requested
    tokens = default
    while tokens >= 2 * block_size and longest_prompt(spec, tokens, block_size) > context:
        tokens = int(tokens * 0.95) // block_size * block_size
    if tokens < 2 * block_size:
        raise ValueError(f"workload {spec.name} does not fit the model's context of {context} tokens "
                         f"(even with prompts of {2 * block_size} tokens)")
    return tokens


@dataclass(frozen=True, slots=True)
class _Prefix:
    tokens: array
    hashes: list[int]


class Workload:
    """Generates ``num_requests`` requests for a closed loop; deterministic for ``seed``."""

    NUM_GROUPS = 8
    open_loop = False

    def __init__(self, spec: WorkloadSpec, num_requests: int, prompt_tokens: int, block_size: int,
                 vocab_size: int, seed: int, extra: bytes = b"") -> None:
        if num_requests < 1:
            raise ValueError(f"requests must be >= 1, got {num_requests}")
        if prompt_tokens < 2 * block_size:
            raise ValueError(f"prompt tokens must be >= 2 blocks ({2 * block_size}), got {prompt_tokens}")
        self.spec = spec
        self.num_requests = num_requests
        self.prompt_tokens = prompt_tokens
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.extra = extra
        self.rng = random.Random(seed)
        self.issued = 0
        shared = spec.kind in ("reuse90", "mixed", "suffix")
        self.prefixes = [self._make_prefix() for _ in range(self.NUM_GROUPS)] if shared else []
        self.histories: list[array] = [array("I") for _ in range(spec.sessions)]

    def _tokens(self, n: int) -> array:
        raw = array("I", self.rng.randbytes(4 * n))
        v = self.vocab_size
        return array("I", [t % v for t in raw])

    def _jitter(self, n: int, spread: float = JITTER) -> int:
        return max(1, round(n * self.rng.uniform(1 - spread, 1 + spread)))

    def _make_prefix(self) -> _Prefix:
        share = 1.0 if self.spec.kind == "suffix" else REUSE_SHARE
        blocks = max(1, int(self._jitter(self.prompt_tokens) * share) // self.block_size)
        tokens = self._tokens(blocks * self.block_size)
        return _Prefix(tokens, block_hashes(tokens, self.block_size, self.extra))

    def primed_prompts(self) -> list[tuple[array, list[int]]]:
        """The prefixes to compute into the caches before the run: (tokens, block hashes)."""
        return [(p.tokens, p.hashes) for p in self.prefixes]

    @property
    def exhausted(self) -> bool:
        return self.issued >= self.num_requests

    def next_request(self, now: float) -> Request:
        i = self.issued
        self.issued += 1
        kind = self.spec.kind
        if kind == "sessions":
            return self._next_turn(i, now)
        if kind == "mixed":
            kind = "reuse90" if self.rng.random() < 0.75 else "cold"
        if kind == "cold":
            tokens = self._tokens(self._jitter(self.prompt_tokens))
            return Request(f"r{i:06d}", tokens, now, block_hashes(tokens, self.block_size, self.extra), "cold")
        g = self.rng.randrange(len(self.prefixes))
        prefix = self.prefixes[g]
        own = self.spec.suffix_tokens if kind == "suffix" else self._jitter(len(prefix.tokens) // 9)
        suffix = self._tokens(own)
        tokens = prefix.tokens + suffix
        hashes = prefix.hashes + block_hashes(suffix, self.block_size, self.extra, parent=prefix.hashes[-1])
        return Request(f"r{i:06d}", tokens, now, hashes, f"g{g}")

    def _next_turn(self, i: int, now: float) -> Request:
        """Multi-turn sessions: a random conversation's next prompt is its whole history (earlier
        prompts and their answers) plus a new user turn. The working set grows with every turn
        and with the number of sessions, past what the stages can keep, so they evict - each by
        its own LRU and capacity. A conversation longer than twice the typical prompt starts over."""
        g = self.rng.randrange(len(self.histories))
        history = self.histories[g]
        if len(history) > 2 * self.prompt_tokens:
            history = self.histories[g] = array("I")
        first = not history
        turn = self._tokens(self._jitter(self.prompt_tokens // (4 if first else 8)))
        tokens = history + turn
        answer = self._tokens(self._jitter(max(1, self.prompt_tokens // 16)))
        self.histories[g] = tokens + answer
        return Request(f"r{i:06d}", tokens, now, block_hashes(tokens, self.block_size, self.extra), f"s{g}")
