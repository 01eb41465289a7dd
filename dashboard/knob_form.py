"""The Knobs page's form logic, outside Streamlit so tests can drive the same code path.

Raw form values (strings from text inputs, bools from checkboxes, choices from select boxes) are
parsed and validated with the runtime's own schema (:mod:`runtime.control.knobs`, the one the CLI uses):
every field with a problem gets its message at once, with a bounded echo of what was typed, and
nothing is written unless all fields are valid.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from typing import Any

from wavepp.runtime.control.knobs import Deployment, Knobs, kind, parse_texts, problems


def field_types() -> dict[str, str]:
    """Each knob's input kind: ``int`` (a text field), ``bool`` (a checkbox), ``choice`` (a select box)."""
    return {f.name: kind(f.name) for f in fields(Knobs)}


def stored(values: dict[str, Any]) -> Knobs:
    """A record's values as Knobs, not validated: the form shows what the store holds, even a record
    another client wrote that the runtime refused (its bad fields are flagged on the next Apply)."""
    names = field_types()
    return dataclasses.replace(Knobs(), **{k: v for k, v in values.items() if k in names})


def parse(raw: dict[str, Any], current: Knobs,
          deployment: Deployment | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """Form values -> (changes against ``current``, errors by field). Empty errors means valid."""
    types = field_types()
    values, errors = parse_texts({k: str(v) for k, v in raw.items() if types.get(k, "int") == "int"})
    values |= {k: v for k, v in raw.items() if types.get(k, "int") != "int"}
    changed = {k for k, v in values.items() if getattr(current, k) != v}
    merged = dataclasses.replace(current, **values)
    block_size = deployment.block_size if deployment else None
    for name, message in problems(merged, block_size, changed).items():   # pairs, the block size
        errors.setdefault(name, message)
    return {k: values[k] for k in changed}, errors
