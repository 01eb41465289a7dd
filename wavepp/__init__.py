"""WavePP: a pipeline-parallel prefill runtime.

One installed package. Its subpackages are the project's top-level folders, linked here:
``wavepp.runtime`` (``runtime/``: the request's path, engines, policies), ``wavepp.store``
(``store/``), ``wavepp.telemetry`` (``telemetry/``) and ``wavepp.dashboard`` (``dashboard/``).
``python -m wavepp`` is the ``wavepp`` command.
"""
