"""What earlier requests hold of a new request's prompt prefix, asked once per request at its
arrival (:meth:`PrefixLedger.arrive`) and told of each completion (:meth:`PrefixLedger.completed`).

Two questions, two figures (docs/figures.md):

* **computed before**: the leading blocks some *completed* request had computed when this one
  arrived - what a cache could serve it (``wavepp.reuse.reusable_tokens``, the good-hit rate's
  denominator). Reuse beyond them was taken from a request still computing them: sharing in flight
  (counted at completion, :func:`split_reuse`).
* **arrived before**: the leading blocks any earlier request arrived with, whatever became of it,
  and the first request that brought them (``wavepp.reuse.shared_prefix_tokens`` and
  ``wavepp.reuse.shared_with``): the run's prefix structure, which the what-if rebuilds its prompts
  from (:func:`runtime.whatif.replay.rebuild_trace`) - in-flight sharing included, which the
  completed-only view does not see.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wavepp.runtime.figures.recent_hashes import RecentHashes
from wavepp.runtime.request import Request
from wavepp.telemetry import names as N

# Hashes each view holds (two generations of half as many, runtime.figures.recent_hashes): at least this,
# and at least POOLS_HELD times the largest stage's pool. A block that 2 pools' worth of newer or more
# recently used blocks went by is one no stage's cache (at most one pool) still holds, short of a pin
# that long; the floor keeps a small-pool run's figures those of an unbounded ledger up to 500,000
# distinct hashes (32M tokens at 64-token blocks), every grid and bench run in this repository included.
LEDGER_MIN_HASHES = 1_000_000
POOLS_HELD = 4


class PrefixLedger:
    """Block hashes of completed requests and of arrived ones (module doc), each view in a window over
    recency (:class:`runtime.figures.recent_hashes.RecentHashes`, ``cap`` hashes: :data:`LEDGER_MIN_HASHES`
    or :data:`POOLS_HELD` times the largest pool), so its memory is bounded by the deployment, not the
    run. Block hashes are chained (a block's hash names its whole prefix), so the request that first
    brought a block brought every block before it."""

    def __init__(self, block_size: int, largest_pool_blocks: int = 0) -> None:
        self.block_size = block_size
        cap = max(LEDGER_MIN_HASHES, POOLS_HELD * largest_pool_blocks)
        self._computed = RecentHashes(cap, values=False)
        self._arrived = RecentHashes(cap)           # block hash -> the id of the first request that arrived with it

    def completed(self, hashes: Sequence[int]) -> None:
        """A request completed: its blocks are reusable from now on."""
        self._computed.add(hashes)

    def arrive(self, req: Request) -> dict[str, Any]:
        """``req`` arrives: sets its ``reusable_blocks`` and returns its request span's reuse attributes.
        Only blocks before the last token count (that one is always computed: it yields the logits)."""
        hashes = req.block_hashes[: (req.num_tokens - 1) // self.block_size]
        req.reusable_blocks = self._computed.prefix(hashes)
        shared = self._arrived.prefix(hashes)
        attrs: dict[str, Any] = {N.REUSABLE_TOKENS: req.reusable_blocks * self.block_size,
                                 N.SHARED_PREFIX_TOKENS: shared * self.block_size}
        if shared:
            attrs[N.SHARED_WITH] = self._arrived.value(hashes[shared - 1])
        self._arrived.add(req.block_hashes, req.id)     # the shared ones keep their first request, used again
        return attrs


def split_reuse(reuse_blocks: int, reusable_blocks: int) -> tuple[int, int]:
    """A request's reused prefix (blocks) split into (blocks a completed request had computed when it
    arrived, blocks taken from a request still computing them - sharing in flight). Both are
    prefixes of the prompt, so the first part is the smaller of the two and never exceeds what was
    reusable: good-hit <= 1 by construction."""
    good = min(reuse_blocks, reusable_blocks)
    return good, reuse_blocks - good
