"""Exact powers of two: the float64 scale of a point cloud on the torch side (FPS, kNN's backward).

A float64 cloud is multiplied by a power of two before its squared distances are formed, so that they
neither overflow nor underflow: the product is exact (no rounding), and so is the way back.
"""

from __future__ import annotations

import torch


def power_of_two(exponent: torch.Tensor) -> torch.Tensor:
    """``2.0 ** exponent`` in float64, exact for |exponent| <= 1023."""
    return torch.ldexp(torch.ones_like(exponent, dtype=torch.float64), exponent)


def times_power_of_two(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``x * 2**shift`` for float64 ``x``, ``shift`` int64 of ``x``'s leading shape (one exponent per
    vector, per cloud ...): exact (two factors keep each in range) unless the result overflows or underflows."""
    half = shift // 2
    view = tuple(shift.shape) + (1,) * (x.dim() - shift.dim())
    return x * power_of_two(half).reshape(view) * power_of_two(shift - half).reshape(view)


def scaled_rows(diff: torch.Tensor) -> torch.Tensor:
    """float64 ``diff`` (..., 3), each vector times the power of two that brings its largest |component| to
    [0.5, 1): exact, and a constant for autograd (so the result stays differentiable, double backward too)."""
    _, exponent = torch.frexp(diff.detach().abs().amax(dim=-1))  # NaN / inf / 0: exponent 0
    return times_power_of_two(diff, -exponent.to(torch.int64))
