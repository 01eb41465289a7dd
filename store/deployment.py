"""What a running deployment fixes, as the store keeps it beside the knobs.

The runtime publishes it at start (``Store.deployment_put``); a knob write that does not bring
its own is validated against it. It is the store's record, so it lives here, below the runtime;
:mod:`runtime.control.knobs` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wavepp.store.echo import echo


@dataclass(frozen=True, slots=True)
class Deployment:
    """What a running deployment fixes: knob values must fit it (the runtime publishes it at start)."""

    block_size: int                     # token budgets are whole blocks
    num_stages: int

    def as_dict(self) -> dict[str, int]:
        return {"block_size": self.block_size, "num_stages": self.num_stages}

    @classmethod
    def from_dict(cls, values: Any) -> Deployment:
        """Decode a stored record; ValueError when it is not one (a corrupt or foreign entry)."""
        if not isinstance(values, dict) or set(values) != {"block_size", "num_stages"}:
            raise ValueError(f"expected {{block_size, num_stages}}, got {echo(values)}")
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {echo(value)}")
        return cls(values["block_size"], values["num_stages"])
