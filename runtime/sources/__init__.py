"""Where a run's requests come from: synthetic workloads, traces, a server's clients."""
