"""`make lint`'s type check: mypy --strict (pyproject.toml's [tool.mypy]) over the package as it installs.

The build maps each import name to a folder (pyproject.toml's package-dir: ``wavepp.runtime`` is
``runtime/``, ...) and mypy finds a module by its path, so it reads the sources through a tree of hard
links laid out as the import names say - ``build/typecheck/wavepp/runtime/loop.py`` is ``runtime/loop.py`` -
made afresh at every run (a file added or removed since the last is seen), and its report names the source
files again. Exit status: mypy's.

Usage: ``python scripts/typecheck.py`` (``make lint``).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tomllib
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[1]


def package_dir(root: Path) -> dict[str, str]:
    """Import name -> folder, as the build maps them."""
    with open(root / "pyproject.toml", "rb") as f:
        mapping: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return mapping


def link_tree(root: Path, tree: Path, mapping: dict[str, str]) -> int:
    """Lay the sources under ``root`` out in ``tree`` by import name (hard links; copies where the file
    system refuses a link); answers how many files."""
    shutil.rmtree(tree, ignore_errors=True)
    count = 0
    for name, folder in mapping.items():
        source, target = root / folder, tree.joinpath(*name.split("."))
        mapped_below = {n.removeprefix(name + ".").split(".")[0] for n in mapping if n.startswith(name + ".")}
        for path in source.rglob("*.py*"):
            if path.suffix not in (".py", ".pyi") or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(source)
            if rel.parts[0] in mapped_below:
                continue                     # a subpackage mapped to a folder of its own
            dest = target / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, dest)
            except OSError:
                shutil.copy2(path, dest)
            count += 1
    return count


def source_paths(report: str, mapping: dict[str, str]) -> str:
    """``report`` with each path in the tree replaced by its source file's."""
    prefixes = sorted(((name.replace(".", "/") + "/", folder.rstrip("/") + "/") for name, folder in mapping.items()),
                      key=lambda p: -len(p[0]))
    pattern = re.compile(r"^(" + "|".join(re.escape(p) for p, _ in prefixes) + r")", re.MULTILINE)
    to_source = dict(prefixes)
    return pattern.sub(lambda m: to_source[m.group(1)], report)


def main(root: Path = ROOT) -> int:
    mapping = package_dir(root)
    tree = root / "build" / "typecheck"
    if link_tree(root, tree, mapping) == 0:
        print("typecheck: no source files found under the mapped folders", file=sys.stderr)
        return 2
    top = min(mapping, key=len)              # the package the others are mapped under
    cwd = os.getcwd()
    os.chdir(tree)
    try:
        out, err, status = api.run(["--config-file", str(root / "pyproject.toml"),
                                    "--cache-dir", str(root / ".mypy_cache"), "-p", top])
    finally:
        os.chdir(cwd)
    sys.stdout.write(source_paths(out, mapping))
    sys.stderr.write(source_paths(err, mapping))
    return status


if __name__ == "__main__":
    sys.exit(main())
