"""WavePP: a pipeline-parallel prefill runtime.

One installed package. Its subpackages are the project's top-level folders, mapped by the build
(pyproject.toml's package-dir): ``wavepp.runtime`` is ``runtime/`` (the request's path, engines, policies),
``wavepp.store`` is ``store/``, ``wavepp.telemetry`` is ``telemetry/`` and ``wavepp.dashboard`` is
``dashboard/``. ``python -m wavepp`` is the ``wavepp`` command.
"""

SUBPACKAGES = ("runtime", "store", "telemetry", "dashboard")
