"""Recurrent-state snapshots of a hybrid model's stage (DESIGN §2, "Hybrid models").

A linear-attention layer (Kimi-K3's Kimi Delta Attention) keeps no per-token KV: it carries one
recurrent state per sequence (a matrix per head, plus a short-conv tail). To resume a prompt after
``j`` cached blocks, a stage needs the KV of its attention layers for blocks ``[0, j)`` *and* the
state of its linear layers after block ``j - 1``. So a stage keeps a *snapshot* of the state at
every ``interval`` blocks of a computed prompt and at its last full block (the state a request ends
with - SGLang's ``MambaRadixCache`` keeps it at a request's end and at each chunk's 64-aligned end, the
chunked kernel's own granularity, and a block is 64 tokens here), and can resume only at a block
boundary where it holds one; the reuse boundary of a request is the largest boundary ``<= k`` held on
every stage, found by scanning back from ``k``: ``k`` itself, then the interval's multiples below it.

Memory: a snapshot lives in the stage's KV pool, as ``slot_blocks`` blocks taken like any other
(a free block first, else an evicted one), so state competes with KV for the same memory - the
trade-off the interval sets: every snapshot costs a slot, a longer interval recomputes more. A
request being computed holds one more slot for its working state, which becomes its end snapshot.
Snapshots are keyed by the hash of the block they follow, so two requests that computed the same
prefix share one.

Eviction: a snapshot goes with the KV block it follows (evicting that leaf drops it); an unpinned
snapshot of a chain that is still held can also be evicted alone, oldest first, when a stage has
no evictable leaf left - then that stage no longer resumes there while others may.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

# Tokens between two snapshots unless a run says otherwise: one per chunk of the published wave budget
# (M = 16384); a Kimi-K3 stage's state then costs about half the KV of the tokens between two snapshots.
DEFAULT_SNAPSHOT_INTERVAL = 16384


@dataclass(frozen=True, slots=True)
class StateSpec:
    """What a stage's recurrent-state layers cost its cache."""

    slot_blocks: int       # pool blocks one state occupies on this stage (a snapshot or a working state)
    interval_blocks: int   # a snapshot at every multiple of this many blocks of a computed prompt

    def __post_init__(self) -> None:
        if self.slot_blocks < 1 or self.interval_blocks < 1:
            raise ValueError(f"a state needs >= 1 block and an interval >= 1 block, got {self.slot_blocks} "
                             f"and {self.interval_blocks}")

    def positions(self, after: int, upto: int) -> range:
        """Interval boundaries ``j`` (in blocks) with ``after < j < upto`` (``upto``, the prompt's end, keeps
        the working state instead)."""
        step = self.interval_blocks
        return range((after // step + 1) * step, upto, step)


@dataclass(slots=True)
class Snapshot:
    blocks: list[int]          # pool blocks holding the state (owned by the snapshot, not in the tree)
    pins: int = 0              # leases resuming here


@dataclass(slots=True)
class StateSnapshots:
    """One stage's snapshots: keyed by the hash of the block each follows, unpinned ones in LRU order."""

    spec: StateSpec
    by_hash: dict[int, Snapshot] = field(default_factory=dict)
    lru: OrderedDict[int, None] = field(default_factory=OrderedDict)   # unpinned, oldest first
    reclaimable: int = 0                                               # blocks of unpinned snapshots
    probes: int = 0                                                    # lookups (the sim charges for them)

    def resume_point(self, hashes: list[int], upto: int) -> int:
        """The largest snapshot boundary ``j <= upto`` held here - ``upto`` itself (a prompt ended there),
        else the interval's multiples below it (0: start from scratch)."""
        step = self.spec.interval_blocks
        if upto > 0:
            self.probes += 1
            if hashes[upto - 1] in self.by_hash:
                return upto
        j = (upto - 1) - (upto - 1) % step if upto > 0 else 0
        while j > 0:
            self.probes += 1
            if hashes[j - 1] in self.by_hash:
                return j
            j -= step
        return 0

    def needs_room(self, block_hash: int) -> int:
        """Blocks that pinning the snapshot after ``block_hash`` takes out of what is reclaimable."""
        return 0 if self.by_hash[block_hash].pins else self.spec.slot_blocks

    def pin(self, block_hash: int) -> None:
        s = self.by_hash[block_hash]
        s.pins += 1
        if s.pins == 1:
            del self.lru[block_hash]
            self.reclaimable -= len(s.blocks)

    def unpin(self, block_hash: int) -> None:
        s = self.by_hash[block_hash]
        if s.pins <= 0:
            raise AssertionError(f"unpin of an unpinned snapshot after block hash {block_hash}")
        s.pins -= 1
        if s.pins == 0:
            self.lru[block_hash] = None
            self.reclaimable += len(s.blocks)

    def add(self, block_hash: int, blocks: list[int]) -> None:
        assert block_hash not in self.by_hash, "a snapshot is kept once"
        self.by_hash[block_hash] = Snapshot(blocks)
        self.lru[block_hash] = None
        self.reclaimable += len(blocks)

    def drop(self, block_hash: int) -> list[int]:
        """Evict the (unpinned) snapshot after ``block_hash``; returns its blocks, to be freed."""
        s = self.by_hash.pop(block_hash)
        assert s.pins == 0, "a pinned snapshot is never evicted"
        del self.lru[block_hash]
        self.reclaimable -= len(s.blocks)
        return s.blocks

    def oldest(self) -> int:
        """The hash keying the least recently used unpinned snapshot (StopIteration when none)."""
        return next(iter(self.lru))

    @property
    def num_blocks(self) -> int:
        return sum(len(s.blocks) for s in self.by_hash.values())

    def check(self, cached: dict[int, int], pins: dict[int, int]) -> None:
        """Assert the accounting: every snapshot follows a cached block; ``pins``: leases per snapshot hash."""
        unpinned = [h for h, s in self.by_hash.items() if s.pins == 0]
        assert set(unpinned) == set(self.lru) and len(self.lru) == len(unpinned), "snapshot LRU drifted"
        assert self.reclaimable == sum(len(self.by_hash[h].blocks) for h in unpinned), "snapshot room drifted"
        for h, s in self.by_hash.items():
            assert h in cached, "a snapshot outlived the block it follows"
            assert s.pins == pins.get(h, 0), "a snapshot's pins differ from the leases resuming there"
            assert len(s.blocks) == self.spec.slot_blocks
