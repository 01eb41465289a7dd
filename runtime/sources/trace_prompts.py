"""A trace row's prompt: its tokens and KV block hashes, made from its hash ids alone.

Each trace block's tokens come from a generator seeded by the block's hash id, so equal ids give equal
tokens and therefore equal chained block hashes at any block size that divides the trace's blocks. A
replay (:class:`runtime.sources.traces.TraceWorkload`) makes them in its own process or has a helper
process make them ahead (:mod:`runtime.sources.prompt_worker`); both run this code, so the prompts are the
same either way.

Imports nothing of the runtime beyond the hashing: the helper process starts in a tenth of a second.
"""

from __future__ import annotations

import functools
import random
from array import array
from collections.abc import Sequence

from wavepp.runtime.kvcache.hashing import ROOT_HASH, block_hashes, random_tokens

# Trace blocks whose tokens, and whose KV block hashes under each parent, are remembered: the most
# recently used (a popular prefix is generated and hashed once). Bounded, so a replay's memory does not
# grow with the trace: the 3,993-row Mooncake trace names 43,924 distinct blocks (~2.2 KB of tokens each,
# 92 MB unbounded). Making its requests took 1.0 s unbounded, 1.25 s at this cap (~40 MB), 1.94 s at 4,096.
TRACE_BLOCK_MEMO = 16384


class TracePrompts:
    """Tokens and KV block hashes of trace rows, with bounded memos of the blocks (TRACE_BLOCK_MEMO)."""

    def __init__(self, block_tokens: int, block_size: int, vocab_size: int, extra: bytes = b"") -> None:
        self.block_tokens = block_tokens
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.extra = extra
        self._rng = random.Random(0)           # seeded again with each block's id (_make_block)
        # Bounded memos of pure functions: a block forgotten is made again, the same.
        self._block = functools.lru_cache(maxsize=TRACE_BLOCK_MEMO)(self._make_block)
        self._hashed = functools.lru_cache(maxsize=TRACE_BLOCK_MEMO)(self._hash_block)

    def prompt(self, hash_ids: Sequence[int], length: int) -> tuple[array[int], list[int]]:
        """The first ``length`` tokens of the blocks ``hash_ids`` and their KV block hashes."""
        tokens = self.tokens(hash_ids, length)
        return tokens, self.hashes(hash_ids, tokens)

    def tokens(self, hash_ids: Sequence[int], length: int) -> array[int]:
        tokens = array("I")
        for h in hash_ids:
            tokens.extend(self._block(h))
        del tokens[length:]
        return tokens

    def hashes(self, hash_ids: Sequence[int], tokens: array[int]) -> list[int]:
        """``block_hashes(tokens)``, each whole trace block's KV block hashes remembered by (parent hash,
        hash id): a prefix many requests share is hashed once, as a workload generator hashes only a
        prompt's new suffix."""
        size = self.block_tokens
        out: list[int] = []
        parent = ROOT_HASH
        whole = len(tokens) // size
        for h in hash_ids[:whole]:
            hashes = self._hashed(parent, h)
            out += hashes
            parent = hashes[-1]
        return out + block_hashes(tokens[whole * size:], self.block_size, self.extra, parent)

    def _make_block(self, hash_id: int) -> array[int]:
        """The tokens of trace block ``hash_id``: from a generator seeded by the id alone (one generator
        seeded again each block: its state is the seed's, as a new one's is, without making one)."""
        self._rng.seed(hash_id)
        return random_tokens(self._rng, self.block_tokens, self.vocab_size)

    def _hash_block(self, parent: int, hash_id: int) -> list[int]:
        """The KV block hashes of trace block ``hash_id`` after the prefix whose last hash is ``parent``."""
        return block_hashes(self._block(hash_id), self.block_size, self.extra, parent)
