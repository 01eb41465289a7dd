"""A bounded ``repr`` for messages about values someone else wrote (a knob, a stored record).

It lives in the store layer because the store quotes what it found in a corrupt record, and the
store may not import the runtime; :mod:`runtime.control.knobs` re-exports it for its own messages.
"""

from __future__ import annotations

from typing import Any

ECHO_CHARS = 24                       # the most of a bad value a message repeats


def echo(value: Any) -> str:
    """``repr(value)``, cut to :data:`ECHO_CHARS` characters with its full length named."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {len(str(abs(value))) if value.bit_length() < 4000 else 'over 1200'} digits"
    text = repr(value)
    if len(text) <= ECHO_CHARS:
        return text
    return f"{text[:ECHO_CHARS]}… ({len(text)} characters)"
