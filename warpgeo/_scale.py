"""Exact powers of two: the float64 scale of a point cloud on the torch side (FPS, kNN's backward).

A float64 cloud is multiplied by a power of two before its squared distances are formed, so that they
neither overflow nor underflow: the product is exact (no rounding), and so is the way back.
"""

from __future__ import annotations

import math

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


#: A float64 cloud (its queries and points together, and a ball query's radius) may span at most this many
#: binary orders of magnitude, from its smallest nonzero |coordinate| to its largest: scaled so that the
#: largest lies in [2**508, 2**509) (``SCALED_EXPONENT`` of the kernels and FPS), the smallest nonzero
#: coordinate difference is then >= 2**(456 - span) and its square a normal float64 (>= 2**-1022): every
#: squared distance is exact to rounding and no two distinct ones underflow to one value. Beyond it,
#: answers could be silently wrong: the value checks refuse such a cloud.
MAX_SPAN = 967


def span_flags(clouds, radius: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per cloud ``b`` of float64 ``clouds`` (``[(x (B, N, 3), lengths (B,) or None), ...]``, taken together,
    only the valid rows) and ``radius``: ``(too_wide, top, low)``: a 0-d bool, whether some cloud's largest
    |coordinate| ``top[b]`` exceeds ``2**MAX_SPAN`` times its smallest nonzero one (or ``radius``)
    ``low[b]`` (a ratio within it keeps the exponents within ``MAX_SPAN``: see there). No host read; the
    caller reads ``too_wide`` with its other checks."""
    x0 = clouds[0][0]
    batch, device = x0.shape[0], x0.device
    top = low = None
    for x, lengths in clouds:
        if x.numel() == 0:
            continue
        a = x.detach().abs()
        if lengths is not None:
            beyond = torch.arange(x.shape[1], device=device) >= lengths[:, None]
            a = a.masked_fill(beyond[..., None], 0.0)
        cloud_top = a.amax(dim=(1, 2))
        cloud_low = a.masked_fill(a == 0, float("inf")).amin(dim=(1, 2))
        top = cloud_top if top is None else torch.maximum(top, cloud_top)
        low = cloud_low if low is None else torch.minimum(low, cloud_low)
    if top is None:
        top = torch.zeros(batch, dtype=torch.float64, device=device)
        low = torch.full((batch,), float("inf"), dtype=torch.float64, device=device)
    if radius is not None:
        low = low.clamp(max=float(radius))
    return (top > low * 2.0**MAX_SPAN).any(), top, low  # low * 2**967 is exact (or inf: no limit)


def span_message(name: str, top: torch.Tensor, low: torch.Tensor) -> str:
    """The ValueError message for :func:`span_flags`' clouds (``name``: how the op calls them); reads them."""
    tops, lows = top.tolist(), low.tolist()
    b = next(i for i, (t, lo) in enumerate(zip(tops, lows, strict=True)) if t > lo * 2.0**MAX_SPAN)
    span = math.frexp(tops[b])[1] - math.frexp(lows[b])[1]
    return (
        f"{name} of cloud {b} span 2**{span} in float64 (largest |coordinate| {tops[b]:.3g} over the smallest "
        f"nonzero one {lows[b]:.3g}), beyond the 2**{MAX_SPAN} within which distances are exact: squared "
        f"distances of its smallest differences would underflow (rescale or split the cloud, or turn value "
        f"checks off to accept inexact answers)"
    )
