"""The compiled ``chamfer`` module of the ``extensions/chamfer_dist`` package of PoinTr, Point-MAE, Point-BERT
and GRNet, backed by :func:`warpgeo.chamfer_distance`.

Those repositories build a CUDA extension named ``chamfer`` and wrap it in their own autograd Function::

    import chamfer                                  # after warpgeo.compat.install(): this module

    class ChamferFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, xyz1, xyz2):
            dist1, dist2, idx1, idx2 = chamfer.forward(xyz1, xyz2)
            ctx.save_for_backward(xyz1, xyz2, idx1, idx2)
            return dist1, dist2

        @staticmethod
        def backward(ctx, grad_dist1, grad_dist2):
            xyz1, xyz2, idx1, idx2 = ctx.saved_tensors
            return chamfer.backward(xyz1, xyz2, idx1, idx2, grad_dist1, grad_dist2)

=========================================================  ===============================================
``forward(xyz1, xyz2)``                                    ``(B, N, 3)``, ``(B, M, 3)`` -> ``dist1 (B, N)``,
                                                           ``dist2 (B, M)`` squared distances, ``idx1 (B, N)``,
                                                           ``idx2 (B, M)`` int32
``backward(xyz1, xyz2, idx1, idx2, graddist1, graddist2)``  -> ``gradxyz1 (B, N, 3)``, ``gradxyz2 (B, M, 3)``
=========================================================  ===============================================

``dist1[b, i]`` is the squared distance from ``xyz1[b, i]`` to its nearest point of ``xyz2[b]``, ``idx1`` that
point's index (and the same from ``xyz2`` to ``xyz1``). ``backward`` returns the gradients of
``sum(graddist1 * dist1) + sum(graddist2 * dist2)`` for the given indices: ``2 (xyz1_i - xyz2_j) g`` to the
point and its negative, accumulated, to its neighbour. Like the extension's, ``forward``'s outputs carry no
gradient (autograd goes through the caller's Function). Differences: any float dtype (results in that dtype),
the CPU too, ties to the lowest index, int32 or int64 indices accepted by ``backward``.
"""

from __future__ import annotations

import torch

import warpgeo
from warpgeo.compat._common import shape_of

__all__ = ["backward", "forward"]


def _check_clouds(xyz1, xyz2) -> None:
    for name, t in (("xyz1", xyz1), ("xyz2", xyz2)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[-1] != 3:
            raise ValueError(f"{name} must be a tensor of shape (B, n, 3); got {shape_of(t)}")
    if xyz1.shape[0] != xyz2.shape[0]:
        raise ValueError(
            f"xyz1 and xyz2 must have the same batch size; got {tuple(xyz1.shape)} and {tuple(xyz2.shape)}"
        )


def forward(xyz1: torch.Tensor, xyz2: torch.Tensor):
    """``(dist1, dist2, idx1, idx2)``: squared nearest-neighbour distances both ways and int32 indices."""
    _check_clouds(xyz1, xyz2)
    with torch.no_grad():
        found = warpgeo.chamfer_distance(xyz1, xyz2, reduction="sum")
    return found.dist_xy, found.dist_yx, found.idx_xy.to(torch.int32), found.idx_yx.to(torch.int32)


def _grads(query, points, idx, grad_dist):
    """``2 (q - p[idx]) g`` to the queries and its negative scattered to the points."""
    batch, m = idx.shape
    if grad_dist.shape != (batch, m):
        raise ValueError(f"a distance gradient must have shape ({batch}, {m}); got {tuple(grad_dist.shape)}")
    idx = idx.to(torch.int64)
    n = points.shape[1]
    ok = (idx >= 0) & (idx < n)  # an index from elsewhere: out of range counts as none
    safe = torch.where(ok, idx, 0)[..., None].expand(-1, -1, 3)
    if n == 0:
        step = torch.zeros_like(query)
    else:
        diff = query - torch.gather(points, 1, safe)
        step = torch.where(ok[..., None], 2.0 * diff * grad_dist[..., None].to(diff.dtype), 0.0)
    grad_points = torch.zeros_like(points)
    if n > 0:
        grad_points.scatter_add_(1, safe, -step)
    return step, grad_points


def backward(xyz1, xyz2, idx1, idx2, graddist1, graddist2):
    """``(gradxyz1, gradxyz2)`` of ``sum(graddist1 * dist1) + sum(graddist2 * dist2)``."""
    _check_clouds(xyz1, xyz2)
    for name, t, like in (("idx1", idx1, xyz1), ("idx2", idx2, xyz2)):
        if not isinstance(t, torch.Tensor) or t.shape != like.shape[:2]:
            raise ValueError(f"{name} must have shape {tuple(like.shape[:2])}; got {shape_of(t)}")
        if t.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{name} must be int32 or int64; got {t.dtype}")
    with torch.no_grad():
        g1_self, g2_from1 = _grads(xyz1, xyz2, idx1, graddist1)
        g2_self, g1_from2 = _grads(xyz2, xyz1, idx2, graddist2)
    return g1_self + g1_from2, g2_self + g2_from1
