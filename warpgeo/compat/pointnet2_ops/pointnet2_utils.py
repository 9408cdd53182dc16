"""``pointnet2_ops.pointnet2_utils``: every public name of the original, backed by warpgeo's Warp kernels.

Same call signatures, shapes and dtypes as the PointNet++ CUDA extension (``pointnet2_ops`` /
``pointnet2_utils``), without building it, and on the CPU too:

=================================================  =========================================================
``furthest_point_sample(xyz, npoint)``             ``(B, N, 3)`` -> int32 ``(B, npoint)``, not differentiable
``gather_operation(features, idx)``                ``(B, C, N)``, ``(B, npoint)`` -> ``(B, C, npoint)``
``grouping_operation(features, idx)``              ``(B, C, N)``, ``(B, npoint, nsample)`` ->
                                                   ``(B, C, npoint, nsample)``
``ball_query(radius, nsample, xyz, new_xyz)``      -> int32 ``(B, npoint, nsample)``, first hit repeated, 0
                                                   where none (strict ``d < radius``, as the extension)
``three_nn(unknown, known)``                       ``(B, n, 3)``, ``(B, m, 3)`` -> ``dist, idx (B, n, 3)``
``three_interpolate(features, idx, weight)``       ``(B, c, m)``, ``(B, n, 3)`` x2 -> ``(B, c, n)``, fused
``QueryAndGroup(radius, nsample, use_xyz)``        ``(B, 3 + C, npoint, nsample)``
``GroupAll(use_xyz)``                              ``(B, 3 + C, 1, N)``
=================================================  =========================================================

The ``.apply`` classes (``FurthestPointSampling``, ``GatherOperation``, ``GroupingOperation``,
``BallQuery``, ``ThreeNN``, ``ThreeInterpolate``) are there too; their ``apply`` is the function above.

Differences from the extension, all in the direction of fewer surprises: float16, bfloat16 and float64 work
as well as float32; int64 indices are accepted as well as int32; inputs need not be contiguous; points at
the origin are sampled like any other (the extension skips points with ``|p| <= 1e-3``); and where
``npoint > N`` the row holds every point once and then repeats the first index (the extension's output is
unspecified there); ``three_interpolate`` gives ``weight`` its true gradient (the extension returns
zeros).

Example::

    from warpgeo.compat.pointnet2_ops import pointnet2_utils

    idx = pointnet2_utils.furthest_point_sample(xyz, 512)                       # (B, 512) int32
    new_xyz = pointnet2_utils.gather_operation(xyz.transpose(1, 2).contiguous(), idx).transpose(1, 2)
"""

from __future__ import annotations

import torch
from torch import nn

import warpgeo
from warpgeo.compat._common import positive_int, shape_of

__all__ = [
    "BallQuery",
    "FurthestPointSampling",
    "GatherOperation",
    "GroupAll",
    "GroupingOperation",
    "QueryAndGroup",
    "ThreeInterpolate",
    "ThreeNN",
    "ball_query",
    "furthest_point_sample",
    "gather_operation",
    "grouping_operation",
    "three_interpolate",
    "three_nn",
]


def furthest_point_sample(xyz: torch.Tensor, npoint: int) -> torch.Tensor:
    """Iterative farthest point sampling, as ``pointnet2_utils.furthest_point_sample``.

    Args:
        xyz: ``(B, N, 3)`` float tensor.
        npoint: number of samples per cloud.

    Returns:
        int32 ``(B, npoint)``: greedy farthest-point order starting at index 0 (ties to the lowest index).
        Where ``npoint > N`` the row lists every point once, then repeats its first index.

    Raises:
        ValueError: ``xyz`` is not ``(B, N, 3)`` or ``npoint <= 0``.
        TypeError: ``xyz`` is not a float tensor or ``npoint`` is not an int.
    """
    if not isinstance(xyz, torch.Tensor) or xyz.dim() != 3 or xyz.shape[-1] != 3:
        raise ValueError(f"xyz must have shape (B, N, 3); got {shape_of(xyz)}")
    npoint = positive_int(npoint, "npoint")
    idx = warpgeo.farthest_point_sampling(xyz, npoint)
    if npoint > xyz.shape[1]:
        idx = torch.where(idx < 0, idx[:, :1], idx)
    return idx.to(torch.int32)


def gather_operation(features: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Gather point features, as ``pointnet2_utils.gather_operation``; differentiable w.r.t. ``features``.

    Args:
        features: ``(B, C, N)`` float tensor.
        idx: ``(B, npoint)`` int32 (or int64) indices in ``[0, N)``.

    Returns:
        ``(B, C, npoint)``: ``out[b, c, m] = features[b, c, idx[b, m]]``, dtype of ``features``.

    Raises:
        ValueError: wrong shapes. IndexError: an index outside ``[0, N)``.
    """
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        raise ValueError(f"idx must have shape (B, npoint); got {shape_of(idx)}")
    return warpgeo.gather_points(features, idx)


def grouping_operation(features: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Group point features, as ``pointnet2_utils.grouping_operation``; differentiable w.r.t. ``features``.

    Args:
        features: ``(B, C, N)`` float tensor.
        idx: ``(B, npoint, nsample)`` int32 (or int64) indices in ``[0, N)``.

    Returns:
        ``(B, C, npoint, nsample)``: ``out[b, c, m, k] = features[b, c, idx[b, m, k]]``.

    Raises:
        ValueError: wrong shapes. IndexError: an index outside ``[0, N)``.
    """
    if not isinstance(idx, torch.Tensor) or idx.dim() != 3:
        raise ValueError(f"idx must have shape (B, npoint, nsample); got {shape_of(idx)}")
    return warpgeo.gather_points(features, idx)


def ball_query(radius: float, nsample: int, xyz: torch.Tensor, new_xyz: torch.Tensor) -> torch.Tensor:
    """Ball query, as ``pointnet2_utils.ball_query`` (warpgeo's grid kernel: memory ``O(output)``).

    For each query centre, the first ``nsample`` points (in index order) with squared distance
    ``< radius**2`` (strict, as the extension); a row with fewer hits repeats its first hit, a row with none
    holds 0 — the extension's conventions. Not differentiable.

    Args:
        radius: ball radius.
        nsample: neighbours per centre.
        xyz: ``(B, N, 3)`` points.
        new_xyz: ``(B, npoint, 3)`` query centres.

    Returns:
        int32 ``(B, npoint, nsample)``.

    Raises:
        ValueError: wrong shapes, ``nsample <= 0`` or a radius that is not finite and > 0.
    """
    if not isinstance(xyz, torch.Tensor) or xyz.dim() != 3 or xyz.shape[-1] != 3:
        raise ValueError(f"xyz must have shape (B, N, 3); got {shape_of(xyz)}")
    if not isinstance(new_xyz, torch.Tensor) or new_xyz.dim() != 3 or new_xyz.shape[-1] != 3:
        raise ValueError(f"new_xyz must have shape (B, npoint, 3); got {shape_of(new_xyz)}")
    if new_xyz.shape[0] != xyz.shape[0]:
        raise ValueError(
            f"xyz and new_xyz must have the same batch size; got {xyz.shape[0]} and {new_xyz.shape[0]}"
        )
    nsample = positive_int(nsample, "nsample")
    if isinstance(radius, torch.Tensor) and radius.numel() == 1:
        radius = float(radius)
    # the extension's test is strict (d < radius); warpgeo's ball_query is inclusive unless told otherwise
    idx = warpgeo.ball_query(new_xyz, xyz.to(new_xyz.dtype), radius, nsample, inclusive=False)
    first = idx[..., :1]
    fill = torch.where(first < 0, torch.zeros_like(first), first)
    return torch.where(idx < 0, fill, idx).to(torch.int32)


def three_nn(unknown: torch.Tensor, known: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The three nearest ``known`` points of each ``unknown`` point, as ``pointnet2_utils.three_nn``.

    Args:
        unknown: ``(B, n, 3)`` points to interpolate at.
        known: ``(B, m, 3)`` points with features.

    Returns:
        ``(dist, idx)``: Euclidean distances ``(B, n, 3)`` (dtype of ``unknown``), nearest first, and int32
        indices ``(B, n, 3)``; ties go to the lowest index. Not differentiable (as the extension). Where
        ``m < 3`` the missing neighbours repeat the nearest index with distance ``inf`` (weight 0 in
        ``1 / dist`` interpolation; the extension gives index 0 and distance 1e20).

    Raises:
        ValueError: wrong shapes. TypeError: non-float inputs.
    """
    if not isinstance(unknown, torch.Tensor) or unknown.dim() != 3 or unknown.shape[-1] != 3:
        raise ValueError(f"unknown must have shape (B, n, 3); got {shape_of(unknown)}")
    if not isinstance(known, torch.Tensor) or known.dim() != 3 or known.shape[-1] != 3:
        raise ValueError(f"known must have shape (B, m, 3); got {shape_of(known)}")
    with torch.no_grad():
        dist, idx = warpgeo.knn(unknown, known.to(unknown.dtype), 3)
    first = idx[..., :1].clamp_min(0)
    return dist, torch.where(idx < 0, first, idx).to(torch.int32)


def three_interpolate(features: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Weighted sum of three neighbours' features, as ``pointnet2_utils.three_interpolate``.

    Args:
        features: ``(B, c, m)`` features of the known points.
        idx: ``(B, n, 3)`` int32/int64 indices in ``[0, m)`` (from :func:`three_nn`).
        weight: ``(B, n, 3)`` weights.

    Returns:
        ``(B, c, n)``: ``out[b, :, i] = sum_j weight[b, i, j] * features[b, :, idx[b, i, j]]``, fused.
        Differentiable w.r.t. ``features`` and ``weight`` (the extension returns a zero gradient for
        ``weight``; warpgeo returns the true one).

    Raises:
        ValueError: wrong shapes. IndexError: an index outside ``[-1, m)``.
    """
    if not isinstance(idx, torch.Tensor) or idx.dim() != 3:
        raise ValueError(f"idx must have shape (B, n, 3); got {shape_of(idx)}")
    return warpgeo.gather_points(features, idx, weight=weight)


class _Apply:
    """The extension's autograd classes are used as ``Class.apply(...)``: here ``apply`` is the function
    (whose gradients come from warpgeo's registered custom ops: there is one backward per op)."""

    apply: staticmethod


class FurthestPointSampling(_Apply):
    apply = staticmethod(furthest_point_sample)


class GatherOperation(_Apply):
    apply = staticmethod(gather_operation)


class GroupingOperation(_Apply):
    apply = staticmethod(grouping_operation)


class BallQuery(_Apply):
    apply = staticmethod(ball_query)


class ThreeNN(_Apply):
    apply = staticmethod(three_nn)


class ThreeInterpolate(_Apply):
    apply = staticmethod(three_interpolate)


class QueryAndGroup(nn.Module):
    """Ball query + grouping of coordinates (relative to the centre) and features, as the extension's.

    ``forward(xyz (B, N, 3), new_xyz (B, npoint, 3), features (B, C, N) | None)`` ->
    ``(B, 3 + C, npoint, nsample)`` (``use_xyz``), ``(B, C, npoint, nsample)`` or, without features,
    ``(B, 3, npoint, nsample)``.
    """

    def __init__(self, radius: float, nsample: int, use_xyz: bool = True):
        super().__init__()
        self.radius, self.nsample, self.use_xyz = radius, nsample, use_xyz

    def forward(self, xyz, new_xyz, features=None):
        idx = ball_query(self.radius, self.nsample, xyz, new_xyz)
        grouped_xyz = grouping_operation(xyz.transpose(1, 2), idx)  # (B, 3, npoint, nsample)
        grouped_xyz -= new_xyz.transpose(1, 2).unsqueeze(-1)
        if features is None:
            if not self.use_xyz:
                raise ValueError("QueryAndGroup: with no features, use_xyz must be True")
            return grouped_xyz
        grouped_features = grouping_operation(features, idx)
        if self.use_xyz:
            return torch.cat([grouped_xyz, grouped_features], dim=1)
        return grouped_features


class GroupAll(nn.Module):
    """Every point in one group, as the extension's: ``forward(xyz (B, N, 3), new_xyz (ignored), features
    (B, C, N) | None)`` -> ``(B, 3 + C, 1, N)`` (``use_xyz``), ``(B, C, 1, N)`` or ``(B, 3, 1, N)``."""

    def __init__(self, use_xyz: bool = True):
        super().__init__()
        self.use_xyz = use_xyz

    def forward(self, xyz, new_xyz=None, features=None):
        grouped_xyz = xyz.transpose(1, 2).unsqueeze(2)
        if features is None:
            return grouped_xyz
        grouped_features = features.unsqueeze(2)
        if self.use_xyz:
            return torch.cat([grouped_xyz, grouped_features], dim=1)
        return grouped_features


def __dir__() -> list[str]:
    """The public names (``__all__``) and the module's dunders: not ``annotations`` / ``torch`` / helpers."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
