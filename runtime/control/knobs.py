"""Scheduling knobs: one typed, validated record the runtime reads at every wave boundary.

Validation reports every problem at once (a form marks each bad field; a CLI line names each),
blames the value the writer changed (``max_wave_tokens=1000`` is refused as too small for
``min_wave_tokens``, not the other way round), and never echoes more than a few dozen characters
of what it was given. What a running deployment fixes (its block size) is a :class:`Deployment`
the runtime writes to the store at start; every knob write is checked against it before it is stored.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any

from wavepp.runtime.kvcache.state_snapshots import DEFAULT_SNAPSHOT_INTERVAL
from wavepp.runtime.policies import POLICIES, get_policy

# The store keeps the deployment record and quotes bad values too; both live below the runtime and
# are re-exported here, where every knob message and check uses them.
from wavepp.store.deployment import Deployment as Deployment
from wavepp.store.echo import ECHO_CHARS as ECHO_CHARS
from wavepp.store.echo import echo as echo


class KnobError(ValueError):
    """One or more knob values are of the wrong type, out of range, or inconsistent.

    ``problems`` maps each bad field to why; ``field`` is the first of them. The message names
    them all on one line (``ring: …; max_leases: …``).
    """

    def __init__(self, problems: Mapping[str, str]) -> None:
        if not problems:
            raise ValueError("KnobError needs at least one problem")
        self.problems = dict(problems)
        self.field = next(iter(self.problems))
        super().__init__("; ".join(f"{name}: {why}" for name, why in self.problems.items()))

    def __reduce__(self) -> tuple[Any, ...]:          # crosses process boundaries (embedded dashboard)
        return (KnobError, (self.problems,))


@dataclass(frozen=True, slots=True)
class Knobs:
    """Defaults are the published WavePP settings (DESIGN §2: M = 16384, b_min = 8192, R = 2P, F = 2)."""

    max_wave_tokens: int = 16384        # M: the largest wave budget MPU may choose
    min_wave_tokens: int = 8192         # b_min: the smallest
    ring: int = 0                       # R: waves in flight; 0 = 2P (wavepp) or P (baselines)
    fill_factor: int = 2                # F: target ready waves S = R + (F-1)·P
    hysteresis: bool = True             # raise after R/2 agreeing decisions, lower after P
    max_leases: int = 1024              # concurrent leases (admitted, unfinished requests)
    max_round_requests: int = 64        # requests one admission round may batch
    static_chunk_tokens: int = 8192     # baselines' max_num_tokens (TensorRT-LLM default 8192)
    policy: str = "wavepp"              # which mechanisms run (runtime.policies); switches at a wave boundary
    snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL   # hybrid models: tokens between two state snapshots

    def replace(self, **changes: Any) -> Knobs:
        return validate(dataclasses.replace(self, **changes), changed=changes)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# The policy presets (the registry in runtime.policies); the knob also takes ablations, NAME+KIND=VARIANT[+…].
POLICY_NAMES = tuple(POLICIES.supported_names())
_CHOICES: dict[str, tuple[str, ...]] = {"policy": POLICY_NAMES}
# Knobs of earlier versions: a stored record may still hold them (they are dropped from it), a
# writer naming one is told what replaced it.
RETIRED = {"planner": "retired: the chunking is the policy's own (an ablation chooses another, "
                      "e.g. wavepp+chunking=static)"}
_BLOCK_BUDGETS = ("max_wave_tokens", "min_wave_tokens", "static_chunk_tokens")

# Wave budgets for CPU-sized prompts (the torch engine on a CPU, and the sim calibrated on it): the
# published M = 16384 / b_min = 8192 would put every admitted request of a few hundred tokens into
# one wave and leave stages idle. The baseline's static chunk keeps its ratio to b_min.
CPU_KNOBS = Knobs(max_wave_tokens=1024, min_wave_tokens=512, static_chunk_tokens=512)

_RANGES: dict[str, tuple[int, int]] = {
    "max_wave_tokens": (16, 1 << 22),
    "min_wave_tokens": (16, 1 << 22),
    "ring": (0, 4096),
    "fill_factor": (1, 64),
    "max_leases": (1, 1 << 20),
    "max_round_requests": (1, 1 << 16),
    "static_chunk_tokens": (16, 1 << 22),
    "snapshot_interval": (16, 1 << 22),
}
_INTEGER = re.compile(r"-?[0-9]+")     # plain ASCII digits: no `8_192`, no full-width digits, no `+`


def kind(name: str) -> str:
    """``"int"``, ``"bool"`` or ``"choice"``: how a knob is written as text."""
    return "choice" if name in _CHOICES else "bool" if name in _BOOLS else "int"


def choices(name: str) -> tuple[str, ...]:
    return _CHOICES[name]


def int_range(name: str) -> tuple[int, int]:
    """An integer knob's own range, both ends included (an API schema states it)."""
    return _RANGES[name]


def in_blocks(name: str) -> bool:
    """Is the knob a token budget, which must be a whole number of KV blocks?"""
    return name in _BLOCK_BUDGETS


def parse_text(name: str, text: str) -> Any:
    """One knob's value from text (CLI ``--set``, a form field); ValueError says why not."""
    text = text.strip()
    if kind(name) == "int":
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"expected an integer (plain digits), got {echo(text)}")
        if len(text) > 18:
            raise ValueError(f"{echo(text)} is out of range")
        return int(text)
    if kind(name) == "bool":
        if text.lower() not in ("true", "false"):
            raise ValueError(f"expected true/false, got {echo(text)}")
        return text.lower() == "true"
    return text


def parse_texts(raw: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Several knobs from text: (values that parsed, problems by name) - unknown names, values that
    do not parse and values out of their knob's own range; pairs are checked on write."""
    values, problems = {}, {}
    for name, text in raw.items():
        if name not in _NAMES:
            problems[_shown(name)] = RETIRED.get(name) or _unknown()
            continue
        try:
            values[name] = parse_text(name, text)
        except ValueError as exc:
            problems[name] = str(exc)
            continue
        problem = _field_problem(name, values[name])
        if problem is not None:
            problems[name] = problem
    return values, problems


MAX_UNKNOWN_NAMED = 8            # unknown names one message lists (a client may send thousands)


def _shown(name: str) -> str:
    """A knob name as a message shows it: a name a client made up is cut to a few dozen characters."""
    return name if len(name) <= 2 * ECHO_CHARS else f"{name[:ECHO_CHARS]}… ({len(name)} characters)"


def _unknown() -> str:
    return f"unknown knob (known: {', '.join(sorted(_NAMES))})"


def _policy_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"expected a policy name, got {echo(value)}"
    try:
        get_policy(value)
    except ValueError as exc:
        return str(exc) if len(value) <= ECHO_CHARS else f"{echo(value)} is not a policy"
    return None


def _field_problem(name: str, value: Any) -> str | None:
    if value is None:                  # JSON's null: a writer that means "unchanged" leaves the knob out
        return "null is not a value (leave the knob out to keep it)"
    if name == "policy":
        return _policy_problem(value)
    if name in _CHOICES:
        return None if value in _CHOICES[name] else f"{echo(value)} is not one of {', '.join(_CHOICES[name])}"
    if kind(name) == "bool":
        return None if isinstance(value, bool) else f"expected true/false, got {echo(value)}"
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected an integer, got {echo(value)}"
    lo, hi = _RANGES[name]
    return None if lo <= value <= hi else f"{echo(value)} is out of range [{lo}, {hi}]"


def problems(knobs: Knobs, block_size: int | None = None, changed: Collection[str] = ()) -> dict[str, str]:
    """Every problem of ``knobs``, by field. ``changed`` names the fields the writer set: of an
    inconsistent pair, the one changed alone is blamed."""
    found = field_problems({f.name: getattr(knobs, f.name) for f in fields(knobs)}, block_size)
    lo, hi = knobs.min_wave_tokens, knobs.max_wave_tokens
    if not {"min_wave_tokens", "max_wave_tokens"} & set(found) and lo > hi:
        if "max_wave_tokens" in changed and "min_wave_tokens" not in changed:
            found["max_wave_tokens"] = f"M {hi} < b_min {lo} (min_wave_tokens): lower min_wave_tokens first"
        else:
            found["min_wave_tokens"] = f"b_min {lo} > M {hi} (max_wave_tokens)"
    return found


def field_problems(values: Mapping[str, Any], block_size: int | None = None) -> dict[str, str]:
    """The problems of each of ``values`` on its own (type, range, whole blocks), by field; the rules
    between fields (b_min <= M) need the whole record (:func:`problems`). Cheap: a command checks
    its flags with it before it loads an engine."""
    found = {}
    for name, value in values.items():
        problem = _field_problem(name, value)
        if problem is None and block_size is not None and name in _BLOCK_BUDGETS and value % block_size:
            problem = (f"{value} is not a multiple of the block size {block_size} "
                       f"(nearest: {_nearest(value, block_size)})")
        if problem is not None:
            found[name] = problem
    return found


def _nearest(value: int, block_size: int) -> str:
    below = value // block_size * block_size
    return f"{below} or {below + block_size}" if below else str(block_size)


def validate(knobs: Knobs, deployment: Deployment | None = None, changed: Collection[str] = ()) -> Knobs:
    """Return ``knobs`` if every field is well typed, in range, consistent and fits ``deployment``;
    else raise KnobError naming every bad field."""
    found = problems(knobs, deployment.block_size if deployment else None, changed)
    if found:
        raise KnobError(found)
    return knobs


def check_block_size(knobs: Knobs, block_size: int) -> Knobs:
    """Token budgets are whole blocks: a wave never splits a KV block between two chunks."""
    found = problems(knobs, block_size)
    if found:
        raise KnobError(found)
    return knobs


def from_changes(base: Mapping[str, Any], changes: Mapping[str, Any], deployment: Deployment | None = None) -> Knobs:
    """``base`` (a knobs record's values, or ``Knobs.as_dict()``) with ``changes`` applied and validated.

    Unknown names, wrong types, out-of-range values, inconsistent pairs and values that do not
    fit ``deployment`` raise one KnobError naming every bad field; nothing is partially applied.
    """
    base = {k: v for k, v in base.items() if k not in RETIRED}     # a record an earlier version wrote
    merged = {**Knobs().as_dict(), **base, **changes}
    unknown = [name for name in merged if name not in _NAMES]
    found = {_shown(name): RETIRED.get(name) or _unknown() for name in unknown[:MAX_UNKNOWN_NAMED]}
    if len(unknown) > MAX_UNKNOWN_NAMED:
        found["…"] = f"{len(unknown) - MAX_UNKNOWN_NAMED} more unknown knobs"
    knobs = Knobs(**{k: v for k, v in merged.items() if k in _NAMES})
    found |= problems(knobs, deployment.block_size if deployment else None, changed=changes)
    if found:
        raise KnobError(found)
    return knobs


def from_dict(values: Mapping[str, Any], deployment: Deployment | None = None) -> Knobs:
    """A full record (unknown keys are an error; missing ones take the defaults)."""
    return from_changes({}, values, deployment)


def validated_values(current: Mapping[str, Any], changes: Mapping[str, Any],
                     deployment: Deployment | None = None) -> dict[str, Any]:
    """The knob schema as the store's ``KnobValidator``: every writer passes it to ``Store.knobs_set``.
    ``current`` with ``changes`` applied and validated (:func:`from_changes`, KnobError), as the full
    record to store."""
    return from_changes(current, changes, deployment).as_dict()


_NAMES = frozenset(f.name for f in fields(Knobs))
_BOOLS = frozenset(f.name for f in fields(Knobs) if f.type in ("bool", bool))


@dataclass(frozen=True, slots=True)
class KnobHelp:
    """What one knob is, for an operator: its unit, meaning and what a change does to bubbles.
    The default and the range come from :class:`Knobs` and the validation schema (:func:`describe`)."""

    unit: str
    meaning: str
    bubbles: str


HELP: dict[str, KnobHelp] = {
    "max_wave_tokens": KnobHelp(
        "tokens (whole blocks)", "M: the largest wave budget the planner (cost or MPU) may choose.",
        "Higher: fewer, longer waves (less per-wave transfer and preparation between steps), but a wave waits "
        "longer to fill, so with little admitted work stage 0 idles 'waiting for admitted work'."),
    "min_wave_tokens": KnobHelp(
        "tokens (whole blocks)", "b_min: MPU's smallest wave budget (it falls back to it when work is scarce); the "
                                 "shortest fragment a wave takes and the size a small wave waits for (fill).",
        "Lower: waves go out sooner at low load (less 'waiting for admitted work') but small waves leave "
        "later stages idle on transfer and preparation; higher: the reverse."),
    "ring": KnobHelp(
        "waves in flight", "R: how many waves may be in the pipeline at once; 0 = the policy's default "
                           "(2P for wavepp, P for the TensorRT-LLM presets).",
        "Too small: stage 0 idles with the ring full until the last stage retires a wave; larger keeps "
        "every stage fed at the cost of KV held by waves in flight."),
    "fill_factor": KnobHelp(
        "x P (stages)", "F: MPU aims for S = R + (F-1)·P ready waves when it picks a budget.",
        "Higher: smaller budgets so more waves are ready (fewer 'previous stage' and 'no work' gaps at "
        "moderate load) at more per-wave overhead; lower: bigger waves, longer fill."),
    "hysteresis": KnobHelp(
        "on/off", "MPU raises the budget only after R/2 agreeing decisions and lowers it after P.",
        "On: a steady budget (no wave-size oscillation that opens gaps); off: reacts at once to bursts."),
    "max_leases": KnobHelp(
        "requests", "How many requests may be admitted and unfinished at once (leases held).",
        "Too low: admission stops while work is waiting, stage 0 idles 'waiting for admitted work'; higher "
        "holds more KV."),
    "max_round_requests": KnobHelp(
        "requests per round", "How many requests one admission round may batch (lookups, leases, escrows).",
        "Higher: fewer, larger rounds (cheaper per request, but a longer round before the first admits); "
        "admission on the critical path (baselines) shows as 'admission' gaps at stage 0."),
    "static_chunk_tokens": KnobHelp(
        "tokens (whole blocks)", "The static planner's chunk (TensorRT-LLM's max_num_tokens, default 8192).",
        "Used by the baselines' static planner only: smaller chunks pipeline earlier but each carries "
        "per-wave overhead."),
    "snapshot_interval": KnobHelp(
        "tokens (rounded down to whole blocks)", "A hybrid model's stages (kimi-k3) keep a recurrent-state snapshot "
        "every this many tokens of a computed prompt (and where it ends); a later request resumes only at one. "
        "No effect on a model without linear-attention layers.",
        "Shorter: more resumable boundaries (less recomputed) but each snapshot takes pool blocks, so the caches "
        "evict sooner; longer: fewer snapshots, more tokens recomputed after a shared prefix. Applies to "
        "snapshots kept from the next wave on."),
    "policy": KnobHelp(
        "name", f"Which mechanisms run ({', '.join(POLICY_NAMES)} or an ablation NAME+KIND=VARIANT); "
                "switches at a wave boundary.",
        "The baselines run admission inline and size waves statically: expect 'admission' and 'ring full' gaps."),
}


def describe(name: str) -> str:
    """One knob's help: meaning, unit, default, range and what a change does to bubbles."""
    info = HELP[name]
    default = next(f.default for f in fields(Knobs) if f.name == name)
    if name in _RANGES:
        lo, hi = _RANGES[name]
        allowed = f"{lo:,} to {hi:,}" + (", a multiple of the block size" if name in _BLOCK_BUDGETS else "")
    elif name in _CHOICES:
        allowed = " | ".join(_CHOICES[name]) + (" (or an ablation)" if name == "policy" else "")
    else:
        allowed = "true | false"
    return (f"{info.meaning} Unit: {info.unit}. Default: {default}. Allowed: {allowed}. "
            f"Effect on bubbles: {info.bubbles}")
