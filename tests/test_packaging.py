"""The wheel installs one package, ``wavepp`` (its subpackages are the top-level folders of the
repository), and nothing else at the top level of site-packages; ``wavepp`` and ``python -m wavepp``
both run the command. Every module imports the project as ``wavepp.*``."""

from __future__ import annotations

import ast
import subprocess
import sys
import venv
from pathlib import Path

import wavepp

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = wavepp.SUBPACKAGES


def test_the_wheel_adds_only_wavepp_to_a_fresh_venv_and_both_entry_points_run(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    [wheel] = (tmp_path / "dist").glob("wavepp-*.whl")
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    site = next((env / "lib").glob("python*/site-packages"))
    before = {p.name for p in site.iterdir()}
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True)
    added = {p.name for p in site.iterdir()} - before
    assert added == {"wavepp", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}, added
    package = site / "wavepp"
    assert {p.name for p in package.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(FOLDERS)
    assert (package / "store" / "lua" / "knobs.lua").is_file()          # package data travels
    for command in ([str(env / "bin" / "wavepp"), "--help"], [str(env / "bin" / "python"), "-m", "wavepp", "--help"]):
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)   # not from the checkout
        assert done.returncode == 0 and done.stdout.startswith("usage: wavepp"), done.stderr


def test_every_module_imports_the_project_as_wavepp() -> None:
    """A bare ``import runtime`` would load a second copy of a module beside ``wavepp.runtime``'s."""
    bare = []
    for folder in (*FOLDERS, "tests", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                bare += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert bare == []
