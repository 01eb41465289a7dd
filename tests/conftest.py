"""Suite-wide settings and fixtures."""

import os
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from hypothesis import settings

# The suite runs on shared, loaded machines: a property test's example may be descheduled for a
# second. Speed is measured by benchmarks, never by a test's clock, so no per-example deadline.
settings.register_profile("wavepp", deadline=None)
# `make test-reliability`: the stateful machines and property tests at length (see the Makefile).
settings.register_profile("reliability", deadline=None, max_examples=2500, stateful_step_count=60)
settings.load_profile(os.environ.get("WAVEPP_HYPOTHESIS_PROFILE", "wavepp"))
# An embedded torch dashboard would calibrate this machine in the background (minutes of CPU beside
# the tests): off for every dashboard the suite starts; tests/dashboard/test_calibration.py covers it.
os.environ["WAVEPP_BACKGROUND_CALIBRATION"] = "off"


@pytest.fixture
def redis_cluster() -> Iterator[Callable[[str], str]]:
    """Store URLs on the local Redis (db 13), each under a cluster of its own named ``PREFIX-<hex>``;
    every key of those clusters is deleted after the test."""
    clusters: list[str] = []

    def make(prefix: str) -> str:
        clusters.append(f"{prefix}-{uuid.uuid4().hex[:8]}")
        return f"redis://127.0.0.1:6379/13?cluster={clusters[-1]}"

    client = redis.Redis(db=13)
    try:
        yield make
    finally:
        for cluster in clusters:
            keys = list(client.scan_iter(match=f"wavepp:{{{cluster}}}:*"))
            if keys:
                client.delete(*keys)
        client.close()
