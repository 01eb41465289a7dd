"""Priming: a prompt's blocks put into one stage's cache as if a request had just computed them - caches
warmed before a measurement (the admission bench, tests), through the same lease, escrow, materialize and
complete as any request."""

from __future__ import annotations

from wavepp.runtime.kvcache.stage_cache import StageCache
from wavepp.runtime.request import cdiv


def prime(cache: StageCache, rid: str, hashes: list[int], num_tokens: int) -> bool:
    """Cache the prompt's full blocks under request id ``rid``; False when the prompt does not fit."""
    b = cache.block_size
    k = cache.lease(rid, hashes, cache.prefix_length(hashes, (num_tokens - 1) // b), num_tokens)
    need = cdiv(num_tokens - k * b, b)
    if not cache.can_escrow(need):
        cache.release(rid)
        return False
    cache.escrow(rid, need)
    cache.materialize(rid, k * b, num_tokens - k * b, k)
    cache.complete(rid, hashes)
    return True
