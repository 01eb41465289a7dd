"""Build the built-in tokenizer of every model this project runs (``runtime/serve/builtin_tokenizer.py``):
one Hugging Face ``tokenizer.json`` per vocabulary size, in the hub's cache layout, from the package's
own source files. ``wavepp serve`` builds the one it needs on its own; this builds them ahead (an image,
a machine without write access at serve time) and prints, per model, what a client needs.

    python scripts/build_tokenizer.py [--cache DIR]

One JSON line per model: ``model``, ``engine``, ``vocab_size``, ``name``, ``path``, ``hf_home``.
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", help="where to write them (default $WAVEPP_CACHE or ~/.cache/wavepp)")
    args = parser.parse_args()
    if args.cache:
        os.environ["WAVEPP_CACHE"] = args.cache
    from wavepp.runtime.engines.sim.profiles import MODELS
    from wavepp.runtime.engines.torch.config import PROFILES
    from wavepp.runtime.serve.builtin_tokenizer import ensure
    models = [("torch", name, cfg.vocab_size) for name, cfg in PROFILES.items()]
    models += [("sim", name, m.vocab_size) for name, m in MODELS.items()]
    for engine, name, vocab in models:
        built = ensure(vocab)
        print(json.dumps({"model": name, "engine": engine, "vocab_size": vocab, "name": built.name,
                          "path": str(built.path), "hf_home": str(built.hf_home)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
