"""Policies by name: presets, and ablations written ``NAME+KIND=VARIANT[+…]``
(e.g. ``wavepp+lookup=first-stage``, ``trtllm-pp+charge=position0``)."""

import functools

from wavepp.runtime.policies.base import KIND_FIELDS, VARIANTS, Policy
from wavepp.runtime.policies.trtllm_pp import TRTLLM_PP, TRTLLM_PP_LEGACY
from wavepp.runtime.policies.wavepp import WAVEPP

POLICIES: dict[str, Policy] = {p.name: p for p in (WAVEPP, TRTLLM_PP, TRTLLM_PP_LEGACY)}


@functools.lru_cache(maxsize=256)
def get_policy(spec: str) -> Policy:
    """A preset by name, with any ``+KIND=VARIANT`` swaps applied in order; ValueError names
    what is unknown. Cached: a policy is frozen, and stages look up each request's own by name."""
    name, *swaps = spec.split("+")
    try:
        policy = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(sorted(POLICIES))})") from None
    for swap in swaps:
        kind, sep, variant = swap.partition("=")
        if not sep:
            raise ValueError(f"policy {spec!r}: {swap!r} is not KIND=VARIANT")
        policy = policy.with_mechanism(kind, variant)
    return policy


__all__ = ["KIND_FIELDS", "POLICIES", "VARIANTS", "Policy", "get_policy"]
