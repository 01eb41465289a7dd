"""Policies by name: presets (:data:`POLICIES`), and ablations written ``NAME+KIND=VARIANT[+…]``
(e.g. ``wavepp+lookup=first-stage``, ``trtllm-pp+charge=position0``)."""

import functools

from wavepp.runtime.policies.base import KINDS, Policy
from wavepp.runtime.policies.presets import POLICIES


@functools.lru_cache(maxsize=256)
def get_policy(spec: str) -> Policy:
    """A preset by name, with any ``+KIND=VARIANT`` swaps applied in order; ValueError names
    what is unknown or malformed. Cached: a policy is frozen, and stages look up each request's
    own by name."""
    name, *swaps = spec.split("+")
    try:
        policy = POLICIES.get(name)
    except ValueError:
        raise ValueError(f"unknown policy {name[:40]!r} (known: {', '.join(POLICIES.supported_names())})") from None
    for swap in swaps:
        kind, sep, variant = swap.partition("=")
        if not sep or not kind or not variant:
            raise ValueError(f"policy {spec[:60]!r}: {swap[:40]!r} is not KIND=VARIANT "
                             f"(kinds: {', '.join(KINDS)})")
        policy = policy.with_mechanism(kind, variant)
    return policy


__all__ = ["KINDS", "POLICIES", "Policy", "get_policy"]
