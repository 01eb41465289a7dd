"""Benchmarks: ``wavepp bench``, the grids and the admission benchmark."""
