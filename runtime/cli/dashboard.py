"""``wavepp dashboard``: the live operator dashboard (Streamlit) on an embedded runtime, a store, or
a saved run."""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from wavepp.runtime.cli import autopilot_args
from wavepp.runtime.cli.args import Handler, UsageError, positive_float, positive_int
from wavepp.runtime.engines.model_names import sim_models, torch_models

CALIBRATE_ENV = "WAVEPP_BACKGROUND_CALIBRATION"   # "off": no calibration in the background (the test suite)


def register(sub: Any) -> dict[str, Handler]:
    d = sub.add_parser("dashboard", help="the live operator dashboard (Streamlit): embedded runtime, a store, or a run")
    src = d.add_mutually_exclusive_group()
    src.add_argument("--store", default=None, help="watch a live deployment on redis://…")
    src.add_argument("--run", default=None, help="open a file saved by `wavepp bench --save-run`")
    d.add_argument("--port", type=positive_int, default=8501, help="the port the dashboard serves on")
    d.add_argument("--host", default="127.0.0.1", help="the address it listens on")
    d.add_argument("--engine", choices=["torch", "sim"], default="torch",
                   help="embedded runtime: torch (real compute, tiny model) or sim (slowed to real time)")
    d.add_argument("--model", default=None,
                   help=f"embedded runtime: torch: {torch_models()}; sim: {sim_models('llama-3-8b')}")
    d.add_argument("--hardware", default="h200", help="embedded sim: hardware profile")
    d.add_argument("--pp", type=positive_int, default=None, help="embedded runtime: stages (torch 2, sim 4)")
    d.add_argument("--workload", default="reuse90", help="embedded runtime: workload")
    d.add_argument("--concurrency", type=positive_int, default=None,
                   help="embedded runtime: closed-loop concurrency (torch 16, sim 64)")
    d.add_argument("--prompt-tokens", type=positive_int, default=None,
                   help="embedded runtime: prompt length (default: the largest up to torch 1024, sim 8192 whose "
                        "longest prompt fits the model's context)")
    d.add_argument("--policy", default="wavepp", help="embedded runtime: starting policy (a knob)")
    d.add_argument("--time-scale", type=positive_float, default=1.0, help="embedded sim: stretch modelled step times")
    d.add_argument("--cost-profile", default=None,
                   help="the `wavepp calibrate` profile the Knobs page's Preview and Suggest replay a torch run with")
    autopilot_args.add_flags(d, "30 s; embedded runtime only")
    return {"dashboard": cmd_dashboard}


def cmd_dashboard(args: argparse.Namespace) -> int:
    from wavepp.store.base import StoreError
    if (args.run or args.store) and args.autopilot != "off":
        raise UsageError("--autopilot: only with the embedded runtime (a deployment runs its own: "
                         "wavepp serve --autopilot; the Autopilot page shows it)")
    if args.cost_profile:
        from wavepp.runtime.engines.calibrate import load_profile
        try:
            load_profile(args.cost_profile)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        os.environ["WAVEPP_COST_PROFILE"] = os.path.abspath(args.cost_profile)   # dashboard.screens.whatif
    if args.run:
        from wavepp.runtime.runs.runfile import load_runs
        try:
            load_runs(args.run)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        source = f"run:{os.path.abspath(args.run)}"
    elif args.store:
        import asyncio
        try:
            asyncio.run(_check_store(args.store))
        except StoreError as exc:
            raise UsageError(str(exc)) from None
        source = f"store:{args.store}"
        # The deployment's spans are folded into the view from now on, not from the first page load.
        from wavepp.dashboard import follow
        from wavepp.dashboard.sources import StoreSource
        from wavepp.dashboard.view import ViewCache
        follow.FOLLOWED = follow.Follower(StoreSource(args.store), ViewCache(), spec=source).start()
    else:
        source = "embedded"
        _start_embedded(args)
    os.environ["WAVEPP_DASHBOARD"] = source
    from streamlit.web import bootstrap

    import wavepp.dashboard
    app = os.path.join(os.path.dirname(wavepp.dashboard.__file__), "app.py")
    from wavepp.store.urls import redact
    print(f"WavePP dashboard ({redact(source)}): http://{args.host}:{args.port}  (Ctrl-C to stop)", flush=True)
    flags = {"server_port": args.port, "server_address": args.host, "server_headless": True,
             "browser_gatherUsageStats": False, "server_fileWatcherType": "none", "global_developmentMode": False,
             "server_runOnSave": False,
             "client_toolbarMode": "viewer",      # an operator's view: no Deploy button, no developer menu
             # Streamlit runs a full gc.collect(2) after every script run, the watcher's included: over
             # the ~10 containers per span a 100k-span run keeps, that alone was ~0.3 s of CPU per second.
             "runner_postScriptGC": False}
    bootstrap.load_config_options(flag_options=flags)
    from wavepp.runtime.process_gc import collect_as_long_running
    collect_as_long_running()            # a long-running view: runtime/process_gc.py
    bootstrap.run(app, False, [], flags)
    return 0


async def _check_store(url: str) -> None:
    from wavepp.store.open import open_store
    from wavepp.store.urls import parse_store_url
    if parse_store_url(url).kind != "redis":
        from wavepp.store.base import StoreError
        raise StoreError("a live dashboard reads a shared store: give --store redis://…")
    store = await open_store(url)
    await store.close()


def _start_embedded(args: argparse.Namespace) -> None:
    """The runtime (torch engine, or the sim slowed to real time) in a child process serving the dashboard."""
    from wavepp.dashboard import embedded
    from wavepp.runtime.control.knobs import KnobError
    from wavepp.runtime.engines.build import build_engine
    from wavepp.runtime.engines.config import EngineConfig, SimConfig, TorchConfig
    from wavepp.runtime.sources.workloads import fit_prompt_tokens, parse_workload
    torch_engine = args.engine == "torch"
    try:
        config: EngineConfig = (TorchConfig(args.model or "tiny-llama", args.pp or 2) if torch_engine else
                                SimConfig(args.model or "llama-3-8b", args.hardware, args.pp or 4, clock="wall",
                                          time_scale=args.time_scale))
        spec = parse_workload(args.workload)
        engine = build_engine(config)                          # validate here: one line, exit 2
        knobs = engine.default_knobs().replace(policy=args.policy)
        # every prompt within the model's context (a longer one fails on arrival): the bench's own rule
        prompt = args.prompt_tokens if spec.kind == "trace" else fit_prompt_tokens(
            spec, args.prompt_tokens, engine.default_prompt_tokens() if torch_engine else 8192, engine.max_context,
            engine.block_size)
        pilot = autopilot_args.settings(args, 30.0)
    except (ValueError, KnobError) as exc:
        raise UsageError(str(exc)) from None
    runtime_args = {"workload": args.workload, "concurrency": args.concurrency or (16 if torch_engine else 64),
                    "prompt_tokens": prompt, "knobs": knobs, "autopilot": pilot}
    profile = os.environ.get("WAVEPP_COST_PROFILE")
    if torch_engine and not profile and os.environ.get(CALIBRATE_ENV) != "off":
        # Preview and Suggest out of the box: this machine's profile, cached or made in the background
        from wavepp.dashboard import calibration
        made = calibration.ensure(config.model, config.pp, engine.block_size)
        print(f"calibration for Preview and Suggest: {made.path}"
              + (f" (being made in the background, typically {calibration.TYPICAL})" if made.started else ""),
              flush=True)
        profile = str(made.path)
    if isinstance(config, TorchConfig) and profile:
        # The embedded autopilot's search replays with it too (until a background calibration has written
        # it, a search says there is no such profile and the knobs stay).
        config = dataclasses.replace(config, sim_profile=profile)
    remote, _proc = embedded.start_child(config, runtime_args)
    embedded.CURRENT = remote
    if remote.error:
        raise UsageError(remote.error)
    # Its spans are folded into the view from now on, not from the first page load.
    from wavepp.dashboard import follow
    from wavepp.dashboard.sources import EmbeddedSource
    from wavepp.dashboard.view import ViewCache
    follow.FOLLOWED = follow.Follower(EmbeddedSource(remote), ViewCache()).start()
