"""Shared fixtures: every device test runs on the CPU, and on CUDA when a GPU is present."""

from __future__ import annotations

import pytest
import torch

_DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")),
]


@pytest.fixture(params=_DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
