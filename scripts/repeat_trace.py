"""A Mooncake-format trace played ``K`` times in a row, each copy with fresh hash ids: a longer run of the
same workload (each copy's prefix structure is the original's; no copy reuses another's blocks), to see
how a replay's wall time and peak memory grow with its length.

    python scripts/repeat_trace.py ../shared/data/traces/mooncake_synthetic_trace.jsonl 3 /tmp/mooncake_x3.jsonl
    /usr/bin/time -f "%e s %M KB" wavepp bench --engine sim --model glm-5.2 --hardware b300 --pp 4 \\
        --workload trace:/tmp/mooncake_x3.jsonl --requests N --policy wavepp --quiet --json out.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

GAP_MS = 10_000       # between the last arrival of one copy and the first of the next


def repeated(rows: list[dict[str, Any]], copies: int) -> Iterator[dict[str, Any]]:
    """The rows ``copies`` times: copy ``k``'s timestamps shifted past copy ``k - 1``'s last one (plus
    :data:`GAP_MS`), its hash ids shifted past every id of the original."""
    ids = 1 + max((h for r in rows for h in r["hash_ids"]), default=-1)
    period = max((r["timestamp"] for r in rows), default=0) + GAP_MS
    for k in range(copies):
        for r in rows:
            yield dict(r, timestamp=r["timestamp"] + k * period, hash_ids=[h + k * ids for h in r["hash_ids"]])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("copies", type=int)
    ap.add_argument("out")
    args = ap.parse_args()
    with open(args.trace) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    with open(args.out, "w") as f:
        for row in repeated(rows, args.copies):
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
