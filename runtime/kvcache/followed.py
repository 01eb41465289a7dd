"""The blocks a follower reads on one stage: those a running producer computes there (a lease that follows,
:meth:`runtime.kvcache.stage_cache.StageCache.lease`).

A follower pins them when it prepares its first chunk on the stage - the producer's chunks ran there first,
since every stage runs waves in order - or, when the producer completes before that, the producer pins them
for it on its way out (the tree may hold them by then, but nothing else could find them for the follower).
"""

from __future__ import annotations

from collections.abc import Mapping

from wavepp.runtime.kvcache.block_pool import BlockPool
from wavepp.runtime.kvcache.hybrid_states import Lease


class DescriptorMismatch(Exception):
    """A chunk descriptor disagrees with what this stage holds for the request."""


class FollowedBlocks:
    def __init__(self, stage: int, pool: BlockPool) -> None:
        self.stage = stage
        self.pool = pool
        self.handed: dict[str, list[int]] = {}     # follower -> its blocks, pinned by a producer that completed

    def take(self, rid: str, lease: Lease, tables: Mapping[str, list[int]]) -> list[int]:
        """Follower ``rid``'s blocks ``[followed_from, reuse_blocks)``, pinned for it; raises
        :class:`DescriptorMismatch` where the producer holds fewer here."""
        handed = self.handed.pop(rid, None)
        if handed is not None:
            return handed
        theirs = tables.get(lease.producer or "", [])
        if len(theirs) < lease.reuse_blocks:
            raise DescriptorMismatch(f"stage {self.stage}: request {rid} follows {lease.producer}, which holds "
                                     f"{len(theirs)} of the {lease.reuse_blocks} blocks here")
        followed = theirs[lease.followed_from:lease.reuse_blocks]
        for bid in followed:
            self.pool.pin(bid)
        return followed

    def hand_over(self, producer: str, table: list[int], leases: Mapping[str, Lease],
                  tables: Mapping[str, list[int]]) -> None:
        """``producer`` completes: its followers with no chunk prepared here yet get their blocks pinned now."""
        for fid, f in leases.items():
            if f.producer == producer and fid not in tables:
                self.handed[fid] = followed = table[f.followed_from:f.reuse_blocks]
                for bid in followed:
                    self.pool.pin(bid)

    def release(self, rid: str, lease: Lease, table: list[int]) -> None:
        """A failed follower lets go of the blocks it pinned (``table``: its block table here, if any)."""
        pinned = self.handed.pop(rid, table[lease.followed_from:lease.reuse_blocks] if lease.producer else [])
        self.pool.unpin_many(reversed(pinned))
