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

EVER_COMPUTED_CAP = 4_000_000   # block hashes remembered of completed requests (oldest forgotten first)
EVER_ARRIVED_CAP = 1_000_000    # block hashes remembered of arrived ones, with their first request


class PrefixLedger:
    """Block hashes of completed requests and of arrived ones (module doc), each at most its cap, the
    oldest forgotten first (:class:`runtime.figures.recent_hashes.RecentHashes`: 16-24 bytes a hash once
    there are many). Block hashes are chained (a block's hash names its whole prefix), so the request
    that first brought a block brought every block before it."""

    def __init__(self, block_size: int, computed_cap: int = EVER_COMPUTED_CAP,
                 arrived_cap: int = EVER_ARRIVED_CAP) -> None:
        self.block_size = block_size
        self._computed = RecentHashes(computed_cap, values=False)
        self._arrived = RecentHashes(arrived_cap)   # block hash -> the first request that arrived with it
        self._ids: list[str] = []                   # ... by its number in arrival order

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
            attrs[N.SHARED_WITH] = self._ids[self._arrived.value(hashes[shared - 1])]
        self._ids.append(req.id)
        self._arrived.add(req.block_hashes[shared:], len(self._ids) - 1)
        return attrs


def split_reuse(reuse_blocks: int, reusable_blocks: int) -> tuple[int, int]:
    """A request's reused prefix (blocks) split into (blocks a completed request had computed when it
    arrived, blocks taken from a request still computing them - sharing in flight). Both are
    prefixes of the prompt, so the first part is the smaller of the two and never exceeds what was
    reusable: good-hit <= 1 by construction."""
    good = min(reuse_blocks, reusable_blocks)
    return good, reuse_blocks - good
