"""Why a request is refused on arrival, before it waits for admission: a prompt no stage could ever hold or
schedule would otherwise wait forever at the head of the line."""

from __future__ import annotations

from wavepp.runtime.planning.planner import Planner
from wavepp.runtime.request import cdiv


def refusal(num_tokens: int, max_context: int, min_capacity: int, block_size: int, planner: Planner) -> str | None:
    """The one-line reason a prompt of ``num_tokens`` is refused (None: it may wait): longer than the model's
    context, more KV blocks than the smallest stage holds, or longer than the policy's planner schedules
    (a scheduler without chunked prefill)."""
    if num_tokens > max_context:
        return f"prompt of {num_tokens} tokens is longer than the model's context ({max_context})"
    if cdiv(num_tokens, block_size) > min_capacity:
        return (f"prompt of {num_tokens} tokens needs more KV blocks than a stage has "
                f"({min_capacity} x {block_size} tokens)")
    return planner.refusal(num_tokens)
