"""Policies by name."""

from runtime.policies.base import Policy
from runtime.policies.trtllm_pp import TrtllmPP
from runtime.policies.wavepp import WavePP

POLICIES: dict[str, type[Policy]] = {p.name: p for p in (WavePP, TrtllmPP)}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(sorted(POLICIES))})") from None


__all__ = ["POLICIES", "Policy", "get_policy"]
