"""``scripts/typecheck.py`` (``make lint``'s mypy): it reads a mapped package as the build lays it out, so a
module in a mapped folder is checked under its import name and its error is reported at its source path."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from types import ModuleType

from tests.scripts_loader import load_script


def _typecheck() -> ModuleType:
    return load_script("typecheck.py", "typecheck")


def _project(tmp_path: Path, body: str) -> Path:
    """A two-folder project: ``pkg/`` and ``core/``, the build mapping ``pkg.core`` to ``core/``."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"pkg" = "pkg"\n"pkg.core" = "core"\n\n'
        '[tool.mypy]\nstrict = true\n')
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "main.py").write_text("from pkg.core.values import half\n\n\ndef run() -> str:\n"
                                               "    return half(4)\n")
    (tmp_path / "core" / "inner").mkdir(parents=True)
    (tmp_path / "core" / "__init__.py").write_text("")
    (tmp_path / "core" / "inner" / "__init__.py").write_text("")
    (tmp_path / "core" / "values.py").write_text(body)
    return tmp_path


def test_the_tree_is_laid_out_by_import_name_and_paths_are_reported_as_the_sources() -> None:
    tc = _typecheck()
    mapping = {"wavepp": "wavepp", "wavepp.runtime": "runtime", "wavepp.store": "store"}
    report = "wavepp/runtime/loop.py:3: error: x\nwavepp/__init__.py:1: note: y\nwavepp/store/base.py:9: error: z\n"
    assert tc.source_paths(report, mapping) == ("runtime/loop.py:3: error: x\nwavepp/__init__.py:1: note: y\n"
                                                "store/base.py:9: error: z\n")


def test_an_error_across_the_mapping_is_found_and_named_at_its_source(tmp_path: Path) -> None:
    """``pkg/main.py`` imports ``pkg.core.values`` (``core/values.py``): mypy sees through the mapping that
    ``half`` returns an int where ``run`` promises a str, and the report names the source files."""
    tc = _typecheck()
    root = _project(tmp_path, "def half(x: int) -> int:\n    return x // 2\n")
    assert tc.link_tree(root, root / "build" / "typecheck", tc.package_dir(root)) == 5
    assert (root / "build" / "typecheck" / "pkg" / "core" / "inner" / "__init__.py").is_file()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = tc.main(root)
    assert status == 1
    assert "pkg/main.py:5: error: Incompatible return value type (got \"int\", expected \"str\")" in out.getvalue()
    (root / "core" / "values.py").write_text("def half(x: int) -> str:\n    return str(x // 2)\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):          # the tree is laid out again: the fix is seen
        assert tc.main(root) == 0, out.getvalue()
    (root / "core" / "values.py").write_text("def half(x: int) -> str:\n    return x // 2\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert tc.main(root) == 1
    assert out.getvalue().startswith("core/values.py:2: error:"), out.getvalue()
