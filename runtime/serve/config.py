"""``wavepp serve`` settings: each one a flag, or a ``WAVEPP_*`` environment variable when the flag
is not given (compose sets those), or its default - in that order.

:data:`OPTIONS` is the one list: the CLI's flags, the environment variables and the settings
table of docs/serve.md are made from it. An environment value goes through the flag's own parser, and a bad one
is refused naming the variable (``WAVEPP_PP: must be >= 1, got 0``); every parser is one of
:mod:`runtime.control.values`, as every command's flags are.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from wavepp.runtime.control import values
from wavepp.runtime.engines.model_names import sim_models, torch_models


@dataclass(frozen=True, slots=True)
class Option:
    dest: str
    parse: Callable[[str], Any]
    default: Any
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")

    @property
    def env(self) -> str:
        return "WAVEPP_" + self.dest.upper()


# --span-ring's default: telemetry.ring.SpanRing's (not imported: the CLI's flags must not load the SDK).
SPAN_RING = 200_000

OPTIONS: tuple[Option, ...] = (
    Option("host", str, "127.0.0.1", "address to listen on (compose: 0.0.0.0)"),
    Option("port", values.port_number, 8000, "port to listen on (0: any free port, printed at start)"),
    Option("engine", values.choice("torch", "sim"), "torch",
           "torch (real compute) or sim (the simulator on the wall clock)"),
    Option("model", str, None, f"torch: {torch_models()}; sim: {sim_models('llama-3-8b')}"),
    Option("served_model_name", str, None, "the model name /v1/completions answers to (default: --model)"),
    Option("hardware", str, "h200", "sim: hardware profile"),
    Option("time_scale", values.positive_float, 1.0, "sim: multiply modelled step times"),
    Option("pp", values.positive_int, 2, "pipeline stages"),
    Option("block_size", values.positive_int, 64, "tokens per KV block"),
    Option("kv_blocks", values.int_list, None, "KV blocks per stage: one value, or one per stage"),
    Option("kv_memory_mb", values.positive_float, 256.0, "torch: KV pool per stage when no --kv-blocks"),
    Option("launcher", values.choice("threads", "spawn"), "threads", "torch: stages as threads or spawned processes"),
    Option("sim_profile", str, None, "torch: this model's `wavepp calibrate` profile on this machine, what the "
                                     "autopilot's search replays the server with (without one it cannot replay)"),
    Option("policy", str, "wavepp", "starting policy (a knob: PUT /v1/knobs changes it)"),
    Option("seed", int, 0, "seed of the random weights (no Hugging Face directory)"),
    Option("store", str, "memory", "memory or redis://host:port/db[?cluster=name]: index, plans, knobs, span stream"),
    Option("tokenizer", str, None, "prompts as text: a local Hugging Face tokenizer (directory or tokenizer.json), "
                                   "none (token ids only), or by default the built-in one of the model's vocabulary "
                                   "(GET /v1/models names it)"),
    Option("max_queue", values.positive_int, 256, "requests waiting for admission before new ones get 429"),
    Option("max_prompt_tokens", values.positive_int, None,
           "longest prompt accepted (default, and at most: the model's context and the smallest stage's KV pool)"),
    Option("max_body_bytes", values.positive_int, 4 << 20, "largest request body accepted (413 past it)"),
    Option("drain_s", values.positive_float, 30.0, "SIGTERM: seconds the whole shutdown may take, in-flight requests "
                                             "finishing (new ones get 503)"),
    Option("store_deadline", values.positive_float, None, "a store unreachable this many seconds fails the server "
                                                    "(default: wait it out)"),
    Option("check_invariants", values.switch, False, "check the runtime's invariants (runtime/guards/invariants.py) "
                                               "after every wave and when the loop drained; a violation stops the "
                                               "server (slow: for tests and diagnosis; the flag alone means on)"),
    Option("span_ring", values.positive_int, SPAN_RING, "finished spans kept for GET /v1/spans (about 0.7 KB each; "
                                                "the ring's memory grows until it is full)"),
    Option("autopilot", values.choice("off", "advise", "on"), "off", "tune the scheduling knobs every window "
                                                               "(runtime/autopilot): advise says what it would "
                                                               "change, on applies it within the bounds"),
    Option("autopilot_window", values.positive_float, 30.0, "the autopilot's window in seconds"),
    Option("autopilot_bounds", str, None, "the knobs the autopilot may set, KNOB=LO:HI,... (default: "
                                          "max_wave_tokens, min_wave_tokens, ring over their ranges)"),
    Option("admin_token", values.secret_token, None,
           "PUT /v1/knobs needs Authorization: Bearer TOKEN (default: open); the dashboard reads the same variable. "
           "Prefer the variable: a flag shows in ps"),
)


def add_arguments(parser: argparse.ArgumentParser, skip: Collection[str] = ()) -> None:
    """One flag per option but those named in ``skip`` (a command that sets them itself); its default
    is None so an environment variable can fill it in."""
    for opt in OPTIONS:
        if opt.dest in skip:
            continue
        default = "" if opt.default is None else f" (default {opt.default})"
        switch: dict[str, Any] = {"nargs": "?", "const": True} if opt.parse is values.switch else {}
        parser.add_argument(opt.flag, dest=opt.dest, type=_argparse_type(opt), default=None,
                            help=f"{opt.help}{default}; env {opt.env}", **switch)


def _argparse_type(opt: Option) -> Callable[[str], Any]:
    return values.for_argparse(opt.parse, opt.dest)


def resolve(given: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings: a flag's value, else its environment variable's, else the default. ValueError
    names the variable whose value does not parse."""
    environ = os.environ if environ is None else environ
    settings = {}
    for opt in OPTIONS:
        value = given.get(opt.dest)
        if value is None and environ.get(opt.env, "") != "":
            try:
                value = opt.parse(environ[opt.env])
            except ValueError as exc:
                raise ValueError(f"{opt.env}: {exc}") from None
        settings[opt.dest] = opt.default if value is None else value
    return settings
