"""The figures of the code's structure, printed as one JSON object.

* ``top_level``: the modules (``.py`` files, ``__init__`` aside) and the packages directly in ``runtime/``;
* ``graph``: the project's import graph as ``tests/test_layering.py`` computes it - ``modules``, ``arrows`` (one
  per importing module and imported module, wherever the import stands) and ``floors``: the modules on the
  longest chain of imports (every module is one floor above the highest it imports);
* ``constructors``: the ``__init__`` methods with the most parameters (``self`` not counted);
* ``comment_share``: the lines of comments and docstrings over all non-blank lines;
* ``knob_path``: the project files on the call path of ``--max-wave-tokens`` from ``wavepp bench``'s command line
  to the planner's budget (``mechanisms/chunking.py``'s ``mpu_budget``), outermost first, a file once per run of
  consecutive frames in it (a small sim bench, run in this process).

Usage: ``python scripts/structure_figures.py``.
"""

from __future__ import annotations

import ast
import io
import json
import sys
import tokenize
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_layering import PACKAGE_DIR, graph, modules  # noqa: E402


def top_level() -> dict[str, object]:
    runtime = ROOT / "runtime"
    modules = sorted(p.stem for p in runtime.glob("*.py") if p.stem != "__init__")
    packages = sorted(p.name for p in runtime.iterdir() if (p / "__init__.py").is_file())
    return {"modules": len(modules), "packages": len(packages), "names": modules + [f"{p}/" for p in packages]}


def floors(edges: dict[str, set[str]]) -> tuple[int, list[str]]:
    """The longest import chain (the graph has no circle: the layering test checks it)."""
    @cache
    def chain(name: str) -> tuple[str, ...]:
        below = max((chain(t) for t in edges[name]), key=len, default=())
        return (name, *below)

    longest = max((chain(n) for n in edges), key=len)
    return len(longest), list(longest)


def constructors(top: int = 8) -> list[tuple[str, int]]:
    found = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                        a = item.args
                        count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - 1
                        found.append((f"{path.relative_to(ROOT)}:{node.name}", count))
    return sorted(found, key=lambda x: -x[1])[:top]


def comment_share() -> dict[str, float | int]:
    commented = total = 0
    for path in sources():
        text = path.read_text()
        lines = text.splitlines()
        marked: set[int] = set()
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                marked.add(tok.start[0])
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                        and isinstance(first.value.value, str):
                    marked.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
        nonblank = {i + 1 for i, line in enumerate(lines) if line.strip()}
        commented += len(marked & nonblank)
        total += len(nonblank)
    return {"comment_lines": commented, "lines": total, "share": round(commented / total, 3)}


def sources() -> list[Path]:
    return sorted(modules().values())


def knob_path() -> list[str]:
    import contextlib
    import traceback

    from wavepp.runtime.cli import main as wavepp
    from wavepp.runtime.mechanisms import chunking

    folders = tuple(str((ROOT / f).resolve()) + "/" for f in PACKAGE_DIR.values())
    stacks: list[list[str]] = []
    budget = chunking.mpu_budget

    def traced(inputs: chunking.PlanInputs) -> chunking.MpuBudget:
        if not stacks:
            stacks.append([str(Path(f.filename).resolve().relative_to(ROOT)) for f in traceback.extract_stack()[:-1]
                           if str(Path(f.filename).resolve()).startswith(folders)])
        return budget(inputs)

    chunking.mpu_budget = traced
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            wavepp(["bench", "--engine", "sim", "--model", "llama-3-8b", "--hardware", "h200", "--pp", "4",
                    "--workload", "reuse90", "--concurrency", "4", "--requests", "8", "--policy", "wavepp",
                    "--quiet", "--max-wave-tokens", "8192"])
    finally:
        chunking.mpu_budget = budget
    path: list[str] = []
    for f in stacks[0] if stacks else []:
        if not path or path[-1] != f:
            path.append(f)
    return path


def main() -> None:
    edges = graph()
    height, chain = floors(edges)
    print(json.dumps({
        "top_level": top_level(),
        "graph": {"modules": len(edges), "arrows": sum(len(t) for t in edges.values()), "floors": height,
                  "longest_chain": chain},
        "constructors": constructors(),
        "comment_share": comment_share(),
        "knob_path": knob_path(),
    }, indent=1))


if __name__ == "__main__":
    main()
