"""Helpers shared by the compat modules."""

from __future__ import annotations

import torch


def shape_of(t) -> str:
    """How an argument is shown in an error message: a tensor's shape, else its type."""
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__
