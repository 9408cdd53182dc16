"""``pointnet2_ops.pointnet2_utils`` names, backed by warpgeo's Warp kernels.

Same call signatures, shapes and dtypes as the PointNet++ CUDA extension (``pointnet2_ops`` /
``pointnet2_utils``), without building it, and on the CPU too:

=================================================  =========================================================
``furthest_point_sample(xyz, npoint)``             ``(B, N, 3)`` -> int32 ``(B, npoint)``, not differentiable
``gather_operation(features, idx)``                ``(B, C, N)``, ``(B, npoint)`` -> ``(B, C, npoint)``
``grouping_operation(features, idx)``              ``(B, C, N)``, ``(B, npoint, nsample)`` ->
                                                   ``(B, C, npoint, nsample)``
``ball_query(radius, nsample, xyz, new_xyz)``      -> int32 ``(B, npoint, nsample)`` (plain torch)
=================================================  =========================================================

Differences from the extension, all in the direction of fewer surprises: float16, bfloat16 and float64 work
as well as float32; int64 indices are accepted as well as int32; inputs need not be contiguous; points at
the origin are sampled like any other (the extension skips points with ``|p| <= 1e-3``); and where
``npoint > N`` the row holds every point once and then repeats the first index (the extension's output is
unspecified there).

Example::

    from warpgeo.compat import pointnet2_ops as pointnet2_utils

    idx = pointnet2_utils.furthest_point_sample(xyz, 512)                       # (B, 512) int32
    new_xyz = pointnet2_utils.gather_operation(xyz.transpose(1, 2).contiguous(), idx).transpose(1, 2)
"""

from __future__ import annotations

import sys

import torch

import warpgeo

__all__ = ["ball_query", "furthest_point_sample", "gather_operation", "grouping_operation", "pointnet2_utils"]


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
        raise ValueError(f"xyz must have shape (B, N, 3); got {_shape(xyz)}")
    npoint = _as_int(npoint, "npoint")
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
        raise ValueError(f"idx must have shape (B, npoint); got {_shape(idx)}")
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
        raise ValueError(f"idx must have shape (B, npoint, nsample); got {_shape(idx)}")
    return warpgeo.gather_points(features, idx)


def ball_query(radius: float, nsample: int, xyz: torch.Tensor, new_xyz: torch.Tensor) -> torch.Tensor:
    """Ball query, as ``pointnet2_utils.ball_query`` (plain torch: no Warp kernel behind this one).

    For each query centre, the first ``nsample`` points (in index order) with squared distance
    ``< radius**2``; a row with fewer hits repeats its first hit, a row with none holds 0 — the extension's
    conventions. Memory is ``O(B * npoint * N)``.

    Args:
        radius: ball radius.
        nsample: neighbours per centre.
        xyz: ``(B, N, 3)`` points.
        new_xyz: ``(B, npoint, 3)`` query centres.

    Returns:
        int32 ``(B, npoint, nsample)``.

    Raises:
        ValueError: wrong shapes or ``nsample <= 0``.
    """
    if not isinstance(xyz, torch.Tensor) or xyz.dim() != 3 or xyz.shape[-1] != 3:
        raise ValueError(f"xyz must have shape (B, N, 3); got {_shape(xyz)}")
    if not isinstance(new_xyz, torch.Tensor) or new_xyz.dim() != 3 or new_xyz.shape[-1] != 3:
        raise ValueError(f"new_xyz must have shape (B, npoint, 3); got {_shape(new_xyz)}")
    if new_xyz.shape[0] != xyz.shape[0]:
        raise ValueError(
            f"xyz and new_xyz must have the same batch size; got {xyz.shape[0]} and {new_xyz.shape[0]}"
        )
    nsample = _as_int(nsample, "nsample")
    n = xyz.shape[1]
    d2 = (new_xyz[:, :, None, :] - xyz[:, None, :, :]).square().sum(-1)  # (B, npoint, N)
    order = torch.arange(n, device=xyz.device).expand_as(d2)
    # Points inside the ball keep their index as the sort key, the others sort after all of them.
    key = torch.where(d2 < radius * radius, order, torch.full_like(order, n))
    first = key.sort(dim=-1).values[..., :nsample]
    if first.shape[-1] < nsample:
        first = torch.cat([first, first.new_full((*first.shape[:-1], nsample - n), n)], dim=-1)
    hit = first < n
    fill = torch.where(hit[..., :1], first[..., :1], torch.zeros_like(first[..., :1]))
    return torch.where(hit, first, fill).to(torch.int32)


def _as_int(value, name: str) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive; got {value}")
    return value


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


#: ``from warpgeo.compat.pointnet2_ops import pointnet2_utils`` mirrors ``from pointnet2_ops import pointnet2_utils``.
pointnet2_utils = sys.modules[__name__]
