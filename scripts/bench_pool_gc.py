"""What a stage's block pool costs a full garbage collection: four pools of N cached blocks (prompts
of 64 blocks, other allocations between them, as a real heap is scattered), then the best of five
``gc.collect()``. The figure in ``runtime/kvcache/block_pool.py``'s docstring.

    .venv/bin/python scripts/bench_pool_gc.py [--blocks 499200]
"""

from __future__ import annotations

import argparse
import gc
import random
import time

from wavepp.runtime.kvcache.block_pool import BlockPool

PROMPT_BLOCKS = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=499_200, help="blocks a pool (a multiple of 64)")
    args = parser.parse_args()
    rng = random.Random(1)
    n = args.blocks - args.blocks % PROMPT_BLOCKS
    pools, other = [], []
    for _ in range(4):
        pool = BlockPool(n)
        for _ in range(0, n, PROMPT_BLOCKS):
            table = pool.take(PROMPT_BLOCKS, [])
            pool.attach_chain(table, [rng.getrandbits(64) for _ in table], 0, PROMPT_BLOCKS, [])
            other.append([object() for _ in range(8)])
        pool.unpin_many(range(n))
        pools.append(pool)
    del other
    gc.collect()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        gc.collect()
        best = min(best, time.perf_counter() - start)
    print(f"{4 * n:,} blocks cached in 4 pools: a full collection {best * 1000:.0f} ms "
          f"({len(gc.get_objects()):,} objects tracked)")


if __name__ == "__main__":
    main()
