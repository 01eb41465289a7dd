"""The import graph, checked: no circle among the project's modules - counting imports under
``TYPE_CHECKING`` and inside functions too - and no arrow from a lower floor to a higher one:

* ``wavepp.store`` and ``wavepp.telemetry`` import nothing of ``wavepp.runtime`` or ``wavepp.dashboard``;
* nothing below the dashboard imports ``wavepp.dashboard``;
* a mechanism (``wavepp.runtime.mechanisms``) or a policy imports only what lies below it: the stages' caches
  and their handles (``kvcache``), the planners (``planning``), the request's objects, the clock, the registry,
  the store and the telemetry's names - never the loop, an engine or anything above them.
"""

from __future__ import annotations

import ast
import importlib.util
import tomllib
from collections.abc import Iterator
from pathlib import Path

import wavepp

ROOT = Path(__file__).resolve().parents[1]
# Import name -> folder, as the build maps them (pyproject.toml's package-dir).
PACKAGE_DIR: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
# What a mechanism may import of the runtime (a policy, the mechanisms too): the floors below it.
BELOW_MECHANISMS = ("kvcache", "planning", "request", "clock", "registry")


def modules() -> dict[str, Path]:
    """Every module of the package and its file, each import name read as a path through the build's map."""
    out = {}
    for package, folder in PACKAGE_DIR.items():
        mapped_below = {n.removeprefix(package + ".") for n in PACKAGE_DIR if n.startswith(package + ".")}
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder).with_suffix("").parts
            if rel[0] in mapped_below:
                continue
            out[".".join((package, *rel)).removesuffix(".__init__")] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every project module ``name`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # ``from pkg import sub`` depends on the module ``sub``; ``from mod import name`` on ``mod``.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            found = resolve(target)
            if found is not None and found != name:
                yield found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports(name, path, known)) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_circle() -> None:
    assert circles(graph()) == []


def test_each_module_is_the_file_the_installed_package_imports() -> None:
    """The graph above reads ``wavepp.runtime.planning.cost`` as ``runtime/planning/cost.py``; the installed
    package (editable here, a wheel elsewhere: the same map) resolves every name to that same file."""
    known = modules()
    assert {"wavepp", "wavepp.__main__", "wavepp.runtime.loop", "wavepp.store.redis_store"} <= set(known)
    wrong = {}
    for name, path in known.items():
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
        if origin != path.resolve():
            wrong[name] = (str(path.relative_to(ROOT)), str(origin))
    assert wrong == {}


def test_the_package_is_mapped_folders_without_links_or_build_output_names() -> None:
    assert set(wavepp.SUBPACKAGES) == {n.removeprefix("wavepp.") for n in PACKAGE_DIR if n != "wavepp"}
    for folder in PACKAGE_DIR.values():
        links = [str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*") if p.is_symlink()]
        named = [str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*")
                 if p.is_dir() and p.name in ("dist", "build")]
        assert links == [] and named == [], folder


def test_no_import_runs_from_a_lower_floor_to_a_higher_one() -> None:
    wrong = []
    for name, targets in graph().items():
        floor = name.split(".")[1] if "." in name else ""
        for t in targets:
            up = t.split(".")[1] if "." in t else ""
            if floor in ("store", "telemetry") and up in ("runtime", "dashboard"):
                wrong.append(f"{name} -> {t}")
            # The command line is the top floor (``wavepp dashboard`` starts it), though it lives in runtime/.
            if floor != "dashboard" and up == "dashboard" and not name.startswith("wavepp.runtime.cli"):
                wrong.append(f"{name} -> {t}")
    assert wrong == []


def above_mechanisms(edges: dict[str, set[str]]) -> list[str]:
    """Every arrow from a mechanism or a policy to a part of the runtime that is not below it."""
    wrong = []
    for name, targets in edges.items():
        parts = name.split(".")
        if parts[:2] != ["wavepp", "runtime"] or len(parts) < 3 or parts[2] not in ("mechanisms", "policies"):
            continue
        allowed = (*BELOW_MECHANISMS, "mechanisms") + (("policies",) if parts[2] == "policies" else ())
        for t in targets:
            up = t.split(".")
            if up[1] == "runtime" and (len(up) < 3 or up[2] not in allowed):
                wrong.append(f"{name} -> {t}")
    return wrong


def test_mechanisms_and_policies_see_only_what_lies_below_them() -> None:
    assert above_mechanisms(graph()) == []


def test_an_injected_upward_import_fails_the_check() -> None:
    """The check above is not vacuous: one arrow from a mechanism to an engine (the one moved away) or to the
    loop, added to the real graph, is reported - and a policy's arrow to a mechanism is not."""
    edges = graph()
    assert "wavepp.runtime.mechanisms.ports" in edges and "wavepp.runtime.engines.base" in edges
    for target in ("wavepp.runtime.engines.base", "wavepp.runtime.loop", "wavepp.runtime.control.knobs"):
        injected = {**edges, "wavepp.runtime.mechanisms.ports": edges["wavepp.runtime.mechanisms.ports"] | {target}}
        assert above_mechanisms(injected) == [f"wavepp.runtime.mechanisms.ports -> {target}"]
    allowed = {**edges, "wavepp.runtime.policies.base": edges["wavepp.runtime.policies.base"]
               | {"wavepp.runtime.mechanisms.ports", "wavepp.runtime.kvcache.handle"}}
    assert above_mechanisms(allowed) == []


def test_the_checker_sees_every_kind_of_import(tmp_path: Path) -> None:
    """Imports under TYPE_CHECKING, inside a function and relative ones all count."""
    known = {"wavepp.runtime.a": tmp_path / "a.py", "wavepp.runtime.b": tmp_path / "b.py",
             "wavepp.runtime.c": tmp_path / "c.py", "wavepp.runtime.d": tmp_path / "d.py"}
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from wavepp.runtime.b import X\n")
    (tmp_path / "b.py").write_text("def f():\n    from wavepp.runtime import c\n")
    (tmp_path / "c.py").write_text("from . import a\n")
    (tmp_path / "d.py").write_text("import os\n")
    edges = {n: set(imports(n, p, known)) for n, p in known.items()}
    assert edges == {"wavepp.runtime.a": {"wavepp.runtime.b"}, "wavepp.runtime.b": {"wavepp.runtime.c"},
                     "wavepp.runtime.c": {"wavepp.runtime.a"}, "wavepp.runtime.d": set()}
    assert circles(edges) == [["wavepp.runtime.a", "wavepp.runtime.b", "wavepp.runtime.c"]]
