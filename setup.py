"""The package list of the build: each folder pyproject.toml's ``package-dir`` maps (``wavepp.runtime`` is
``runtime/``, ...) and every package below it, found at build time so a new subpackage needs no entry."""

import tomllib

from setuptools import find_packages, setup

with open("pyproject.toml", "rb") as f:
    PACKAGE_DIR: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]

setup(packages=[f"{name}.{sub}" if sub else name
                for name, folder in PACKAGE_DIR.items() for sub in ["", *find_packages(folder)]])
