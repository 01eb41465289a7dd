"""Synthetic, seeded workloads (DESIGN §8), run closed-loop at a concurrency.

* ``cold``     - no shared prefixes;
* ``reuse90``  - 90% of each prompt is a prefix already seen (one of a few documents);
* ``mixed``    - 75% of requests like ``reuse90``, 25% cold;
* ``suffix:N`` - a long cached prefix + N new tokens (``suffix4k`` = ``suffix:4096``);
* ``sessions:N`` - N multi-turn conversations, each prompt its whole history plus a new turn;
* ``docs:N`` - N distinct long documents (lengths uniform in [m/2, 3m/2], m the typical prompt
  length), each request one document, drawn with Zipf popularity (``zipf=S``: rank r weighs
  1/r^S), plus a new question of ``suffix=K`` tokens (default 4096): many long contexts
  competing for the pools. Written ``docs:N[:suffix=K][:zipf=S]``.

Prefixes that the workload says are "already seen" are *primed*: computed once into every
stage's cache before the measured run (stages with less room keep fewer of them - that is
where residency starts to diverge). ``docs`` and ``sessions`` start cold: their working set may
be many times what a stage holds, and priming it would only evict it again. Block hashes are
computed at arrival; a shared prefix's hashes are computed once and the request's own blocks
chain on from them.

A workload reports its *working set* (:meth:`Workload.working_set_tokens`): the distinct tokens
of the shared prefixes its requests used so far - what the stages would need to keep all reuse.
"""

from __future__ import annotations

import itertools
import random
from array import array
from dataclasses import dataclass

from wavepp.runtime.arrivals import ClosedLoop
from wavepp.runtime.kvcache.hashing import block_hashes, random_tokens
from wavepp.runtime.request import Request
from wavepp.runtime.sources.trace_file import load_trace
from wavepp.runtime.sources.traces import TraceWorkload

ALIASES = {"suffix4k": "suffix:4096", "suffix16k": "suffix:16384"}
DOC_SUFFIX_TOKENS = 4096       # docs: the new question after the document
DOC_ZIPF = 1.0                 # docs: popularity exponent (0: uniform)
DOC_SPREAD = 0.5               # docs: lengths uniform in [(1 - s) m, (1 + s) m]
MAX_SESSIONS = 1_000_000       # sessions:N keeps a history per conversation
MAX_DOCUMENTS = 1_000_000      # docs:N
MAX_SUFFIX_TOKENS = 1 << 22    # docs' suffix=K: past any model's context
FORMS = "cold, reuse90, mixed, suffix:N, suffix4k, suffix16k, sessions:N, docs:N[:suffix=K][:zipf=S] or trace:PATH"


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    kind: str
    suffix_tokens: int = 0
    sessions: int = 0              # sessions: concurrent multi-turn conversations
    documents: int = 0             # docs: distinct documents
    zipf: float = DOC_ZIPF         # docs: popularity exponent
    path: str = ""                 # trace: the Mooncake-format file
    on_bad_line: str = "fail"      # trace: skip | fail
    speed: float = 1.0             # trace: replay this many times faster

    @property
    def name(self) -> str:
        if self.kind == "trace":
            return f"trace:{self.path}"
        if self.kind == "sessions":
            return f"sessions:{self.sessions}"
        if self.kind == "docs":
            suffix = f":suffix={self.suffix_tokens}" if self.suffix_tokens != DOC_SUFFIX_TOKENS else ""
            zipf = f":zipf={self.zipf:g}" if self.zipf != DOC_ZIPF else ""
            return f"docs:{self.documents}{suffix}{zipf}"
        return f"suffix:{self.suffix_tokens}" if self.kind == "suffix" else self.kind


def parse_workload(name: str) -> WorkloadSpec:
    """One of :data:`FORMS` -> spec; ValueError with the accepted forms."""
    text = ALIASES.get(name.strip(), name.strip())
    if text.startswith("trace:") and text.removeprefix("trace:"):
        return WorkloadSpec("trace", path=text.removeprefix("trace:"))
    if text in ("cold", "reuse90", "mixed"):
        return WorkloadSpec(text)
    if text.startswith("sessions:"):
        return WorkloadSpec("sessions", sessions=_count(text, name, "conversations", MAX_SESSIONS))
    if text.startswith("suffix:"):
        # no bound here: a suffix past the model's context is refused with the context named
        return WorkloadSpec("suffix", _count(text, name, "suffix tokens"))
    if text.startswith("docs:"):
        return _docs(text, name)
    raise ValueError(f"unknown workload {name[:80]!r} (use {FORMS})")


def _count(text: str, name: str, what: str, most: int | None = None) -> int:
    """The N of ``FORM:N``, a whole number in [1, most] (None: no bound here); ValueError naming the
    form and its range."""
    form, _, n = text.partition(":")
    if not (n.isascii() and n.isdigit() and 0 < int(n) <= (most or int(n))):
        raise ValueError(f"workload {name[:80]!r}: {form}:N needs a number of {what} "
                         + (f"in [1, {most}]" if most else "of at least 1"))
    return int(n)


def _docs(text: str, name: str) -> WorkloadSpec:
    n, *options = text.removeprefix("docs:").split(":")
    _count(f"docs:{n}", name, "documents", MAX_DOCUMENTS)
    suffix, zipf = DOC_SUFFIX_TOKENS, DOC_ZIPF
    for option in options:
        key, _, value = option.partition("=")
        if key == "suffix" and value.isascii() and value.isdigit() and 0 < int(value) <= MAX_SUFFIX_TOKENS:
            suffix = int(value)
            continue
        if key == "zipf":
            try:
                zipf = float(value)
            except ValueError:
                zipf = -1.0
            if 0 <= zipf <= 10:
                continue
        raise ValueError(f"workload {name[:80]!r}: {option[:40]!r} is not suffix=TOKENS (1 to {MAX_SUFFIX_TOKENS}) "
                         f"or zipf=S (0 to 10)")
    return WorkloadSpec("docs", suffix, documents=int(n), zipf=zipf)


def make_workload(spec: WorkloadSpec, num_requests: int | None, prompt_tokens: int, block_size: int,
                  vocab_size: int, seed: int, prefetch: bool = False) -> Workload | TraceWorkload:
    """The generator for ``spec``: synthetic prompts for a closed loop, or a trace's requests
    arriving open-loop (``num_requests`` caps how many of its rows; None: all). ``prefetch``: a trace's
    prompts are made ahead by a helper process (a virtual-time run, whose clock charges no CPU time, and a
    load generator; a real-time run makes them on its loop, as the what-if replay of it does)."""
    if spec.kind == "trace":
        trace = load_trace(spec.path, spec.on_bad_line, num_requests)
        return TraceWorkload(trace, block_size, vocab_size, speed=spec.speed, prefetch=prefetch)
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
    if spec.kind == "docs":
        return doc_length_bounds(prompt_tokens, block_size)[1] + spec.suffix_tokens
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


def doc_length_bounds(prompt_tokens: int, block_size: int) -> tuple[int, int]:
    """docs: the shortest and longest document, whole blocks around the mean ``prompt_tokens``."""
    lo = max(block_size, int(prompt_tokens * (1 - DOC_SPREAD)) // block_size * block_size)
    hi = max(lo, int(prompt_tokens * (1 + DOC_SPREAD)) // block_size * block_size)
    return lo, hi


@dataclass(frozen=True, slots=True)
class _Prefix:
    tokens: array[int]
    hashes: list[int]


class Workload(ClosedLoop):
    """Generates ``num_requests`` requests for a closed loop; deterministic for ``seed``."""

    NUM_GROUPS = 8

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
        self.seed = seed
        self.issued = 0
        shared = spec.kind in ("reuse90", "mixed", "suffix")
        self.prefixes = [self._make_prefix() for _ in range(self.NUM_GROUPS)] if shared else []
        self.histories: list[array[int]] = [array("I") for _ in range(spec.sessions)]
        self._used: set[int] = set()               # shared prefixes (or documents) requests used so far
        self._session_tokens = 0                   # sessions: distinct history tokens so far
        if spec.kind == "docs":
            lo, hi = doc_length_bounds(prompt_tokens, block_size)
            self.doc_lengths = [self.rng.randrange(lo, hi + 1, block_size) for _ in range(spec.documents)]
            weights = [1.0 / (rank + 1) ** spec.zipf for rank in range(spec.documents)]
            self._doc_cum = list(itertools.accumulate(weights))
            self._docs: dict[int, _Prefix] = {}

    def _tokens(self, n: int) -> array[int]:
        return random_tokens(self.rng, n, self.vocab_size)

    def _jitter(self, n: int, spread: float = JITTER) -> int:
        return max(1, round(n * self.rng.uniform(1 - spread, 1 + spread)))

    def _make_prefix(self) -> _Prefix:
        share = 1.0 if self.spec.kind == "suffix" else REUSE_SHARE
        blocks = max(1, int(self._jitter(self.prompt_tokens) * share) // self.block_size)
        tokens = self._tokens(blocks * self.block_size)
        return _Prefix(tokens, block_hashes(tokens, self.block_size, self.extra))

    def primed_prompts(self) -> list[tuple[array[int], list[int]]]:
        """The prefixes to compute into the caches before the run: (tokens, block hashes)."""
        return [(p.tokens, p.hashes) for p in self.prefixes]

    def working_set_tokens(self) -> int:
        """Distinct tokens of the shared prefixes the requests issued so far used (documents, the
        groups' prefixes, conversation histories): what the stages would have to keep for all reuse."""
        if self.spec.kind == "docs":
            return sum(self.doc_lengths[d] for d in self._used)
        if self.spec.kind == "sessions":
            return self._session_tokens
        return sum(len(self.prefixes[g].tokens) for g in self._used)

    def _document(self, d: int) -> _Prefix:
        """Document ``d``'s tokens and hashes, made when first asked for (from its own seed, so a
        document is the same whatever order requests come in)."""
        doc = self._docs.get(d)
        if doc is None:
            tokens = random_tokens(random.Random(f"{self.seed}/doc/{d}"), self.doc_lengths[d], self.vocab_size)
            doc = self._docs[d] = _Prefix(tokens, block_hashes(tokens, self.block_size, self.extra))
        return doc

    @property
    def exhausted(self) -> bool:
        return self.issued >= self.num_requests

    def next_request(self, now: float) -> Request:
        i = self.issued
        self.issued += 1
        kind = self.spec.kind
        if kind == "sessions":
            return self._next_turn(i, now)
        if kind == "docs":
            d = self.rng.choices(range(self.spec.documents), cum_weights=self._doc_cum)[0]
            self._used.add(d)
            doc = self._document(d)
            suffix = self._tokens(self.spec.suffix_tokens)
            hashes = doc.hashes + block_hashes(suffix, self.block_size, self.extra, parent=doc.hashes[-1])
            return Request(f"r{i:06d}", doc.tokens + suffix, now, hashes, f"d{d}")
        if kind == "mixed":
            kind = "reuse90" if self.rng.random() < 0.75 else "cold"
        if kind == "cold":
            tokens = self._tokens(self._jitter(self.prompt_tokens))
            return Request(f"r{i:06d}", tokens, now, block_hashes(tokens, self.block_size, self.extra), "cold")
        g = self.rng.randrange(len(self.prefixes))
        self._used.add(g)
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
        self._session_tokens += len(turn)
        answer = self._tokens(self._jitter(max(1, self.prompt_tokens // 16)))
        self._session_tokens += len(answer)
        self.histories[g] = tokens + answer
        return Request(f"r{i:06d}", tokens, now, block_hashes(tokens, self.block_size, self.extra), f"s{g}")
