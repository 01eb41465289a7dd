"""How a long-running WavePP process runs CPython's garbage collector: a runtime serving requests in real
time (``wavepp serve``, the dashboard's embedded runtime) and the dashboard itself.

A full collection walks every object the collector tracks, and every reference they hold, with the
interpreter stopped - a runtime's event loop included. Two settings, once its start-up is done:

* What start-up made (imported modules, classes, functions, the engine's tables) is moved to the
  permanent generation (:func:`gc.freeze`): it lives as long as the process, and no collection walks it
  again. The garbage is collected first, so nothing frozen is already garbage.
* The young generation is collected every :data:`LONG_RUNNING_GEN0` allocations instead of CPython's
  700; a full collection comes after ten young rounds (and a quarter more long-lived objects), so
  that many times less often.

Measured on the embedded sim demo's runtime (llama-3-8b, H200, PP4, c = 64) with a 5 ms ticker on its
loop, 150 s each, twice (``scripts/bench_loop_lag.py [--as-started]``): with CPython's defaults 5 full
collections of 56-148 ms and the loop up to 139-151 ms late; with these settings none, the loop up to
97-121 ms late in its first minute (start-up) and 57-62 ms after.
"""

from __future__ import annotations

import gc

LONG_RUNNING_GEN0 = 10_000


def collect_as_long_running() -> None:
    """Freeze what the process holds now and raise the young threshold (the older two kept)."""
    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(max(LONG_RUNNING_GEN0, threshold[0]), *threshold[1:])
