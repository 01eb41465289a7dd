"""Load a file under ``scripts/`` as a module, for the tests of a script's own functions (scripts are run as
files, not installed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str) -> ModuleType:
    """``scripts/<relative>`` as module ``name``, registered in ``sys.modules`` while it executes (a dataclass
    looks its module up by name)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
