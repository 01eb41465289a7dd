"""Suite-wide settings."""

from hypothesis import settings

# The suite runs on shared, loaded machines: a property test's example may be descheduled for a
# second. Speed is measured by benchmarks, never by a test's clock, so no per-example deadline.
settings.register_profile("wavepp", deadline=None)
settings.load_profile("wavepp")
