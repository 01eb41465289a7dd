"""The autopilot: the runtime tunes its own scheduling knobs inside the operator's bounds.

Every window of the run it measures the window's figures from the spans (:mod:`.window`), and when the
workload has settled into something it has not tuned for, previews candidate settings on the window's
own arrivals in the calibrated simulator (the what-if's Suggest search, :mod:`.predict`). It applies
the best one only when the predicted gain clears the prediction's measured error by a margin, checks
the next window against the prediction and against the window before, and rolls back when the
run got worse (:mod:`.pilot`, which decides; :mod:`.runner`, which reads the spans and the store and
writes the knobs). What the operator allows (mode, bounds, freeze) is a record in the store
(:mod:`.settings`).
"""
