"""WavePP: admission off the critical path."""

from runtime.policies.base import Policy


class WavePP(Policy):
    """Async admission rounds beside the loop; hint index over all stages; lease + escrow on
    every stage; MPU wave budget with hysteresis; a ring of R = 2P waves in flight; a wave smaller
    than b_min waits for more work while P waves keep the stages busy."""

    name = "wavepp"
