"""What stops a run going wrong silently: the invariants and the deadlock watchdog."""
