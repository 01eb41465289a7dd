"""Shared by the torch engine tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    """These models are tiny: a second intra-op thread gains nothing, and on a shared, loaded machine
    OpenMP's spinning threads can make a run several times slower."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
