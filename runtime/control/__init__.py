"""The control plane: the knobs, and the runtime's side of the shared store."""
