"""What the operator allows the autopilot: its mode, which knobs it may move and how far, and
whether it is frozen. One record, kept in the store beside the knobs, so the dashboard can switch it
while the runtime runs; validated on every write and on every read (a foreign writer may differ).

* ``off``    - measures nothing, decides nothing.
* ``advise`` - measures and decides, writes its recommendation to its decision span; never a knob.
* ``on``     - applies what it decides, within ``bounds``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from wavepp.runtime.control.knobs import Knobs, int_range, kind

MODES = ("off", "advise", "on")
#: the knobs Suggest's search moves (runtime.whatif.suggest.suggest_grid): the autopilot's default bounds
TUNED = ("max_wave_tokens", "min_wave_tokens", "ring")
DEFAULT_WINDOW_S = 30.0
DEFAULT_MARGIN = 0.02          # a predicted gain must clear the prediction's error by this much
DEFAULT_COOLDOWN = 2           # windows without an apply after a rollback
DEFAULT_SEARCH_S = 60.0        # wall-clock limit of one search (Suggest's time limit)


class SettingsError(ValueError):
    """An autopilot record that cannot be used: one line naming every bad field."""


@dataclass(frozen=True, slots=True)
class AutopilotSettings:
    mode: str = "off"
    # knob -> (lowest, highest) the autopilot may set; a knob not named here is never changed
    bounds: Mapping[str, tuple[int, int]] = field(default_factory=lambda: {k: int_range(k) for k in TUNED})
    allow_policy: bool = False     # never a policy change unless the operator allows it
    frozen: bool = False           # an operator's own knob write froze it (until the operator resumes it)
    frozen_why: str = ""
    window_s: float = DEFAULT_WINDOW_S
    margin: float = DEFAULT_MARGIN
    cooldown: int = DEFAULT_COOLDOWN
    search_s: float = DEFAULT_SEARCH_S

    def allows(self, current: Knobs, candidate: Knobs) -> bool:
        """Every change from ``current`` to ``candidate`` is to a bounded knob and inside its range."""
        old, new = current.as_dict(), candidate.as_dict()
        for name, value in new.items():
            if old[name] == value:
                continue
            if name == "policy":
                if not self.allow_policy:
                    return False
                continue
            lo_hi = self.bounds.get(name)
            if lo_hi is None or not isinstance(value, int) or not lo_hi[0] <= value <= lo_hi[1]:
                return False
        return True

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "bounds": {k: list(v) for k, v in self.bounds.items()},
                "allow_policy": self.allow_policy, "frozen": self.frozen, "frozen_why": self.frozen_why,
                "window_s": self.window_s, "margin": self.margin, "cooldown": self.cooldown,
                "search_s": self.search_s}

    def frozen_by(self, why: str) -> AutopilotSettings:
        return replace(self, frozen=True, frozen_why=why)

    def resumed(self) -> AutopilotSettings:
        return replace(self, frozen=False, frozen_why="")


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _bounds(raw: Any, problems: dict[str, str]) -> dict[str, tuple[int, int]]:
    if not isinstance(raw, Mapping):
        problems["bounds"] = "must map knob names to [lowest, highest]"
        return {}
    out: dict[str, tuple[int, int]] = {}
    for name, pair in raw.items():
        if name == "policy" or name not in Knobs.__dataclass_fields__ or kind(name) != "int":
            problems[f"bounds.{str(name)[:40]}"] = "not an integer knob (policy changes: allow_policy)"
            continue
        ok = isinstance(pair, list | tuple) and len(pair) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in pair)
        lo, hi = int_range(name)
        if not ok or not lo <= pair[0] <= pair[1] <= hi:
            problems[f"bounds.{name}"] = f"must be [lowest, highest] within {lo}..{hi}"
            continue
        out[name] = (int(pair[0]), int(pair[1]))
    return out


def changed(stored: Mapping[str, Any] | None, changes: Mapping[str, Any]) -> AutopilotSettings:
    """``changes`` over a stored record (one that does not parse, another client's: over the defaults);
    SettingsError names every bad field of the changes."""
    try:
        base = from_dict(stored) if stored else None
    except SettingsError:
        base = None
    return from_dict(changes, base)


def parse_bounds(text: str) -> dict[str, list[int]]:
    """``ring=4:16,max_wave_tokens=4096:65536`` as a bounds mapping (checked by :func:`from_dict`);
    ValueError names the part it cannot read."""
    out: dict[str, list[int]] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, span = part.partition("=")
        lo, _, hi = span.partition(":")
        try:
            out[name.strip()] = [int(lo), int(hi)]
        except ValueError:
            raise ValueError(f"autopilot bounds: {part[:60]!r} is not KNOB=LOWEST:HIGHEST") from None
    return out


def from_dict(raw: Mapping[str, Any], base: AutopilotSettings | None = None) -> AutopilotSettings:
    """``raw`` over ``base`` (default: the defaults); SettingsError names every bad field at once."""
    base = base or AutopilotSettings()
    unknown = sorted(set(raw) - set(base.as_dict()))
    problems: dict[str, str] = {str(k)[:40]: "unknown field" for k in unknown}
    values = base.as_dict() | {k: v for k, v in raw.items() if k not in unknown}
    if values["mode"] not in MODES:
        problems["mode"] = f"must be one of {', '.join(MODES)}"
    for name in ("allow_policy", "frozen"):
        if not isinstance(values[name], bool):
            problems[name] = "must be true or false"
    for name in ("window_s", "search_s"):
        if not _positive(values[name]):
            problems[name] = "must be a number of seconds > 0"
    if not (isinstance(values["margin"], int | float) and not isinstance(values["margin"], bool)
            and 0 <= values["margin"] < 1):
        problems["margin"] = "must be a fraction in [0, 1)"
    if not (isinstance(values["cooldown"], int) and not isinstance(values["cooldown"], bool)
            and 0 <= values["cooldown"] <= 1000):
        problems["cooldown"] = "must be a whole number of windows in 0..1000"
    bounds = _bounds(values["bounds"], problems)
    if problems:
        raise SettingsError("autopilot: " + "; ".join(f"{k}: {v}" for k, v in problems.items()))
    return AutopilotSettings(values["mode"], bounds, values["allow_policy"], values["frozen"],
                             str(values["frozen_why"])[:300], float(values["window_s"]), float(values["margin"]),
                             int(values["cooldown"]), float(values["search_s"]))
