"""How a completed request's reused tokens split: the one definition the run's figures
(:mod:`runtime.figures.report`) and the metrics (:mod:`telemetry.metrics`) share, so good-hit and sharing in flight
read the same wherever they are shown."""

from __future__ import annotations


def token_split(input_tokens: int, reused: int, reusable: int) -> tuple[int, int, int, int]:
    """(input, reused from the cache, reusable, shared in flight) of one completed request. Reused and reusable
    are both prefixes of its prompt: the reused part a completed request had computed before is the smaller
    one, the rest came from a request computing it at the same time (``runtime.figures.prefix_ledger``)."""
    good = min(reused, reusable)
    return input_tokens, good, reusable, reused - good
