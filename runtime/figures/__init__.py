"""The figures of DESIGN §7, computed from a run's spans."""
