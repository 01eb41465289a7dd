"""``wavepp knobs``: show the scheduling knobs in a store, or change them (validated by the same
code as ``PUT /v1/knobs``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from wavepp.runtime.cli.args import Handler, UsageError, add_set_flag, non_negative_int, set_texts


def register(sub: Any) -> dict[str, Handler]:
    k = sub.add_parser("knobs", help="show the scheduling knobs in a store, or change them (validated)")
    k.add_argument("--store", required=True, help="redis://host:port/db[?cluster=name]")
    add_set_flag(k, "change a knob (repeatable); the runtime applies it at its next wave boundary")
    k.add_argument("--history", type=non_negative_int, default=0, metavar="N", help="also print the last N changes")
    return {"knobs": cmd_knobs}


def cmd_knobs(args: argparse.Namespace) -> int:
    import asyncio

    from wavepp.runtime.control.knobs import KnobError, Knobs, parse_texts, validated_values
    from wavepp.store.base import KnobsRecord, StoreError
    from wavepp.store.open import open_store
    from wavepp.store.urls import parse_store_url

    changes, problems = parse_texts(set_texts(args.changes))   # each value by its knob's type: `8_192` is no integer

    async def run() -> tuple[KnobsRecord, list[dict[str, object]]]:
        store = await open_store(args.store)
        try:
            if problems:                  # the values that parsed are still checked, so every bad one is named
                current = await store.knobs_get()
                try:
                    validated_values(current.values, changes, current.deployment)
                except KnobError as exc:
                    raise KnobError(problems | exc.problems) from None
                raise KnobError(problems)
            record = await store.knobs_set(changes, validate=validated_values) if changes else await store.knobs_get()
            return record, await store.knobs_history(args.history)
        finally:
            await store.close()

    try:
        if parse_store_url(args.store).kind == "memory":
            raise UsageError("knobs live in a shared store: give --store redis://…")
        record, history = asyncio.run(run())
    except (KnobError, StoreError) as exc:
        raise UsageError(str(exc)) from None
    if record.note:
        print(f"wavepp: warning: {record.note}", file=sys.stderr)
    print(f"knobs version {record.version}")
    if record.deployment is not None:
        print(f"  (checked against the running deployment: block size {record.deployment.block_size}, "
              f"{record.deployment.num_stages} stages)")
    for name, value in record.values_or(Knobs().as_dict()).items():
        print(f"  {name:22s} {value}")
    for h in history:
        print(f"  v{h['version']}: {h['changes']}")
    return 0
