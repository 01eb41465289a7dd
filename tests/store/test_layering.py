"""The store and telemetry are the lowest layers: nothing in them imports the runtime or the dashboard
(STYLE.md: lower layers never import higher ones, checked by a test). Every import counts: at the top
of a module, inside a function, under ``TYPE_CHECKING``, relative, and by name through importlib."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOWER = ("store", "telemetry")
# Bare names too: ``import runtime`` is refused elsewhere (tests/test_packaging.py), and would still
# be the runtime.
HIGHER = ("wavepp.runtime", "wavepp.dashboard", "runtime", "dashboard")
DYNAMIC = ("import_module", "__import__")


def imported(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, the text of module ``module``."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[:len(parts) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            found += [(node.lineno, f"{name}.{a.name}") for a in node.names]   # from wavepp import runtime
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if called in DYNAMIC:
                found.append((node.lineno, node.args[0].value))
    return sorted(found, key=lambda hit: hit[0])          # ast.walk is breadth first: back to source order


def upward(source: str, module: str, is_package: bool = False) -> list[str]:
    """The imports of ``source`` that reach a higher layer, as ``line: name``."""
    return [f"{line}: {name}" for line, name in imported(source, module, is_package)
            if any(name == h or name.startswith(h + ".") for h in HIGHER)]


def test_the_store_and_telemetry_import_nothing_from_the_runtime_or_the_dashboard() -> None:
    checked, bad = [], []
    for folder in LOWER:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            is_package = rel.name == "__init__"
            module = ".".join(("wavepp", *(rel.parent.parts if is_package else rel.parts)))
            checked.append(module)
            bad += [f"{path.relative_to(ROOT)}:{hit}" for hit in upward(path.read_text(), module, is_package)]
    assert {"wavepp.store.base", "wavepp.store.redis_store", "wavepp.telemetry.setup"} <= set(checked)
    assert bad == []


def test_the_check_sees_every_kind_of_import() -> None:
    source = '''
import wavepp.runtime.loop
from typing import TYPE_CHECKING
from wavepp import dashboard
from ..runtime import knobs
if TYPE_CHECKING:
    from wavepp.runtime.knobs import Knobs
def later():
    from wavepp.dashboard.app import main
    import importlib
    importlib.import_module("wavepp.runtime.policies")
    __import__("runtime.cli")
import redis
from wavepp.store.base import Store
from . import memory
from .. import telemetry
'''
    assert [hit.split(": ")[1] for hit in upward(source, "wavepp.store.example")] == [
        "wavepp.runtime.loop", "wavepp.dashboard", "wavepp.runtime", "wavepp.runtime.knobs",
        "wavepp.runtime.knobs", "wavepp.runtime.knobs.Knobs", "wavepp.dashboard.app", "wavepp.dashboard.app.main",
        "wavepp.runtime.policies", "runtime.cli"]
    # In a package's __init__, one dot is the package itself.
    assert upward("from .base import Store\nfrom ..runtime import knobs\n", "wavepp.store", is_package=True) == [
        "2: wavepp.runtime", "2: wavepp.runtime.knobs"]
