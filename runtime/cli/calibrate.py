"""``wavepp calibrate``: fit the torch engine's stage step times, a profile for the simulator
(``bench --cost-model fitted``, ``preview`` of a torch run)."""

from __future__ import annotations

import argparse
from typing import Any

from wavepp.runtime.cli.args import Handler, UsageError, output_file, positive_float, positive_int, write_output
from wavepp.runtime.engines.model_names import torch_models


def register(sub: Any) -> dict[str, Handler]:
    cal = sub.add_parser("calibrate", help="fit the torch engine's stage step times for the simulator")
    cal.add_argument("--engine", choices=["torch"], default="torch", help="the engine calibrated")
    cal.add_argument("--model", default="tiny-llama", help=torch_models())
    cal.add_argument("--pp", type=positive_int, default=2, help="pipeline stages")
    cal.add_argument("--block-size", type=positive_int, default=64, help="tokens per KV block")
    cal.add_argument("--kv-memory-mb", type=positive_float, default=256.0, help="KV pool per stage")
    cal.add_argument("--max-wave-tokens", type=positive_int, default=1024,
                     help="largest wave timed (waves of 1-8 chunks up to this many tokens)")
    cal.add_argument("--out", required=True, type=output_file, help="where to write the profile (JSON)")
    return {"calibrate": cmd_calibrate}


def cmd_calibrate(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from wavepp.runtime.engines.calibrate import calibrate, fit_error, save_profile
    from wavepp.runtime.engines.config import TorchConfig
    from wavepp.runtime.engines.torch.engine import TorchEngine
    try:
        with TorchEngine(TorchConfig(args.model, args.pp, args.block_size, kv_memory_mb=args.kv_memory_mb)) as engine, \
                Progress(TextColumn("calibrating: waves timed"), BarColumn(), MofNCompleteColumn(),
                         TimeElapsedColumn(), transient=True) as bar:
            task = bar.add_task("waves", total=None)
            profile = calibrate(engine, max_wave_tokens=args.max_wave_tokens,
                                progress=lambda done, total: bar.update(task, completed=done, total=total))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    write_output(args.out, lambda p: save_profile(p, profile))
    for s, (f, (med, worst)) in enumerate(zip(profile["stages"], fit_error(profile), strict=True)):
        print(f"stage {s}: t = {f['c'] * 1e3:.3f} ms/wave + {f['c_chunk'] * 1e3:.3f} ms/chunk + "
              f"{f['gamma'] * 1e6:.3f} us*L + {f['beta'] * 1e6:.2f} us*x + {f['alpha_lx'] * 1e9:.3f} ns*Lx + "
              f"{f['alpha_xx'] * 1e9:.3f} ns*x^2  "
              f"(fit error over {len(profile['samples'][s])} waves: median {med:.1%}, max {worst:.1%})")
    print(f"wrote {args.out} (use: wavepp bench --engine sim --cost-model fitted --cost-profile {args.out})")
    return 0
