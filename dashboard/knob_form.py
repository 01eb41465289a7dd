"""The Knobs page's form logic, outside Streamlit so tests can drive the same code path.

Raw form values (strings from text inputs, bools from checkboxes) are parsed and validated with
the runtime's own schema; every field with a problem gets its message, and nothing is written
unless all fields are valid.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from runtime.knobs import PLANNERS, POLICY_NAMES, KnobError, Knobs, from_changes

CHOICES = {"policy": POLICY_NAMES, "planner": PLANNERS}


def field_types() -> dict[str, str]:
    return {f.name: "bool" if f.type in ("bool", bool) else "choice" if f.name in CHOICES else "int"
            for f in fields(Knobs)}


def parse(raw: dict[str, Any], current: Knobs) -> tuple[dict[str, Any], dict[str, str]]:
    """Form values -> (changes against ``current``, errors by field). Empty errors means valid."""
    types, errors, values = field_types(), {}, {}
    for name, value in raw.items():
        kind = types.get(name)
        if kind is None:
            errors[name] = "unknown knob"
        elif kind == "int":
            text = str(value).strip()
            try:
                values[name] = int(text)
            except ValueError:
                errors[name] = f"expected an integer, got {text!r}"
        else:
            values[name] = value
    if not errors:
        try:
            from_changes(current, values)                       # ranges and cross-field rules
        except KnobError as exc:
            errors[exc.field] = str(exc).removeprefix(f"{exc.field}: ")
    changes = {k: v for k, v in values.items() if getattr(current, k) != v}
    return changes, errors
