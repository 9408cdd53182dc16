"""pytorch3d's point-cloud ops (``pytorch3d.ops`` / ``pytorch3d.loss``) with their signatures and return types.

::

    from warpgeo.compat.pytorch3d import chamfer_distance, knn_points, sample_farthest_points
    # was: from pytorch3d.loss import chamfer_distance; from pytorch3d.ops import knn_points, ...

=====================================================================  ========================================
``sample_farthest_points(points, lengths=None, K=50,                   ``(sampled (N, K, D), idx (N, K))``, -1 /
random_start_point=False)``                                            0 padding
``knn_points(p1, p2, lengths1=None, lengths2=None, norm=2, K=1,         ``_KNN(dists, idx, knn)``: squared (L2) or
version=-1, return_nn=False, return_sorted=True)``                     L1 distances, 0 padding
``knn_gather(x, idx, lengths=None)``                                   ``(N, P1, K, U)``
``ball_query(p1, p2, lengths1=None, lengths2=None, K=500,              ``_KNN(dists, idx, knn)``: the first K
radius=0.2, return_nn=True)``                                          within ``radius`` (strict), -1 padding
``chamfer_distance(x, y, x_lengths=None, y_lengths=None, x_normals=    ``(loss, loss_normals)``
None, y_normals=None, weights=None, batch_reduction="mean",
point_reduction="mean", norm=2, single_directional=False,
abs_cosine=True)``
=====================================================================  ========================================

Points of dimension 3 run on warpgeo's ops (:func:`warpgeo.knn`, :func:`warpgeo.ball_query`,
:func:`warpgeo.farthest_point_sampling`, :func:`warpgeo.chamfer_distance`, :func:`warpgeo.gather_points`);
dimensions 1 and 2 are padded with zeros to 3 (distances unchanged); larger dimensions, and ``knn_points``
with ``norm=1`` and ``K > 1``, fall back to plain torch (``O(P1 * P2)`` memory). Differentiable as in
pytorch3d: ``dists`` w.r.t. ``p1`` and ``p2``, ``knn`` / gathered points w.r.t. the gathered tensor, the
chamfer losses w.r.t. the points (and normals).

Differences from pytorch3d, all documented there as implementation choices: any float dtype in, the same
dtype out (pytorch3d returns float32 for float64 input); the CPU as well as CUDA; ties go to the lowest index
(``version`` and ``return_sorted`` are accepted and ignored: results are always sorted); with
``random_start_point=True`` the start is drawn with torch's generator (pytorch3d's naive path uses Python's
``random``). ``chamfer_distance`` reads a ``Pointclouds`` object (anything with its ``points_padded``,
``num_points_per_cloud`` and ``normals_padded``) as pytorch3d does; the other functions take tensors, as
pytorch3d's.
"""

from __future__ import annotations

import math
from collections import namedtuple

import torch
import torch.nn.functional as F

import warpgeo
from warpgeo.compat._common import pad3, padded_fps, padded_knn, shape_of, valid_mask

__all__ = ["ball_query", "chamfer_distance", "knn_gather", "knn_points", "sample_farthest_points"]

#: pytorch3d's own return type of ``knn_points`` and ``ball_query`` (``pytorch3d.ops.knn._KNN``).
_KNN = namedtuple("KNN", "dists idx knn")


# --------------------------------------------------------------------------------------------------------
# helpers shared by the compat modules (knn_cuda, torch_cluster): any dimension, padded batches
# --------------------------------------------------------------------------------------------------------


def _lengths_or_full(lengths, batch, size, device, name):
    if lengths is None:
        return None
    if not isinstance(lengths, torch.Tensor) or lengths.shape != (batch,):
        raise ValueError(f"{name} must be a LongTensor of shape ({batch},); got {shape_of(lengths)}")
    return lengths.to(device)


def _check_pair(p1, p2, names=("p1", "p2")) -> None:
    for name, t in zip(names, (p1, p2), strict=True):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(f"{name} must be a tensor of shape (N, P, D); got {shape_of(t)}")
    if p1.shape[0] != p2.shape[0]:
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same batch dimension; got "
            f"{tuple(p1.shape)} and {tuple(p2.shape)}"
        )
    if p1.shape[2] != p2.shape[2]:
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same point dimension; got "
            f"{tuple(p1.shape)} and {tuple(p2.shape)}"
        )


# --------------------------------------------------------------------------------------------------------
# pytorch3d.ops
# --------------------------------------------------------------------------------------------------------


def sample_farthest_points(
    points: torch.Tensor,
    lengths: torch.Tensor | None = None,
    K: int | list | torch.Tensor = 50,
    random_start_point: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Farthest point sampling, as ``pytorch3d.ops.sample_farthest_points``.

    Args:
        points: ``(N, P, D)``.
        lengths: optional int64 ``(N,)``: the valid points of each cloud.
        K: samples per cloud: an int, or a list / int64 tensor ``(N,)``.
        random_start_point: start at a random valid point (torch's generator) instead of index 0.

    Returns:
        ``(sampled_points (N, max K, D), indices (N, max K) int64)``: indices ``-1`` and points 0 where a
        cloud has fewer than K (valid) points.
    """
    if not isinstance(points, torch.Tensor) or points.dim() != 3:
        raise ValueError(f"points must be a tensor of shape (N, P, D); got {shape_of(points)}")
    batch = points.shape[0]
    lengths = _lengths_or_full(lengths, batch, points.shape[1], points.device, "lengths")
    if isinstance(K, (list, tuple)):
        K = torch.tensor(K, dtype=torch.int64, device=points.device)
    if isinstance(K, torch.Tensor) and K.shape != (batch,):
        raise ValueError(f"K and points must have the same batch dimension; got K of shape {tuple(K.shape)}")
    idx = padded_fps(points, K, lengths=lengths, random_start=random_start_point)
    return _masked_gather(points, idx), idx


def knn_gather(x: torch.Tensor, idx: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """``x[n, idx[n, i, k]]`` as ``(N, P1, K, U)``, as ``pytorch3d.ops.knn_gather``; 0 for the neighbour
    slots ``k >= lengths[n]`` (clouds with fewer than K points) and for ``-1`` indices. Differentiable
    w.r.t. ``x`` (:func:`warpgeo.gather_points`: a scatter-add backward)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must be a tensor of shape (N, P2, U); got {shape_of(x)}")
    if not isinstance(idx, torch.Tensor) or idx.dim() != 3 or idx.shape[0] != x.shape[0]:
        raise ValueError(f"idx must be a tensor of shape ({x.shape[0]}, P1, K); got {shape_of(idx)}")
    out = _masked_gather(x, idx)
    if lengths is not None:
        k = idx.shape[2]
        keep = torch.arange(k, device=x.device)[None, :] < lengths.to(x.device)[:, None]  # (N, K)
        out = out * keep[:, None, :, None].to(out.dtype)
    return out


def _masked_gather(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x`` ``(N, P, U)`` at ``idx`` ``(N, ...)`` -> ``(N, ..., U)``, 0 where idx is -1."""
    n, u = x.shape[0], x.shape[2]
    flat = idx.reshape(n, -1)
    out = warpgeo.gather_points(x.transpose(1, 2), flat)  # (N, U, L)
    return out.transpose(1, 2).reshape(*idx.shape, u)


def knn_points(
    p1: torch.Tensor,
    p2: torch.Tensor,
    lengths1: torch.Tensor | None = None,
    lengths2: torch.Tensor | None = None,
    norm: int = 2,
    K: int = 1,
    version: int = -1,
    return_nn: bool = False,
    return_sorted: bool = True,
):
    """The K nearest points of ``p2`` for each point of ``p1``, as ``pytorch3d.ops.knn_points``.

    Args:
        p1: ``(N, P1, D)`` queries; p2: ``(N, P2, D)``.
        lengths1, lengths2: optional int64 ``(N,)`` valid lengths.
        norm: 2 (squared Euclidean distances) or 1 (L1 distances; neighbours by L1 distance).
        K: neighbours per point. ``version``, ``return_sorted``: accepted, ignored (always sorted).
        return_nn: also return the neighbours' coordinates.

    Returns:
        ``_KNN(dists, idx, knn)``: ``dists`` ``(N, P1, K)`` (squared for L2), ``idx`` int64 ``(N, P1, K)``,
        both 0 where a cloud of ``p2`` has fewer than K points and for padded points of ``p1``; ``knn``
        ``(N, P1, K, D)`` (``knn_gather(p2, idx, lengths2)``) or None.
    """
    _check_pair(p1, p2)
    if norm not in (1, 2):
        raise ValueError(f"Support for 1 or 2 norm. (norm must be 1 or 2; got {norm!r})")
    if isinstance(K, bool) or not isinstance(K, int) or K < 1:
        raise ValueError(f"K must be an int >= 1; got {K!r}")
    batch = p1.shape[0]
    lengths1 = _lengths_or_full(lengths1, batch, p1.shape[1], p1.device, "lengths1")
    lengths2 = _lengths_or_full(lengths2, batch, p2.shape[1], p1.device, "lengths2")
    if norm == 1 and K == 1 and p1.shape[-1] <= 3:
        found = warpgeo.chamfer_distance(
            pad3(p1),
            pad3(p2),
            x_lengths=lengths1,
            y_lengths=lengths2,
            norm=1,
            squared=False,
            reduction="sum",
            single_directional=True,
        )
        dists, idx = found.dist_xy[..., None], found.idx_xy[..., None]
    else:
        dists, idx = padded_knn(p1, p2, K, lengths1, lengths2, norm=norm)
        if norm == 2:
            dists = dists.square()
    missing = idx < 0
    dists = torch.where(missing, 0.0, dists).to(p1.dtype)
    idx = torch.where(missing, 0, idx)
    nn = knn_gather(p2, idx, lengths2) if return_nn else None
    return _KNN(dists=dists, idx=idx, knn=nn)


def ball_query(
    p1: torch.Tensor,
    p2: torch.Tensor,
    lengths1: torch.Tensor | None = None,
    lengths2: torch.Tensor | None = None,
    K: int = 500,
    radius: float = 0.2,
    return_nn: bool = True,
):
    """The first K points of ``p2`` (in index order) within ``radius`` of each point of ``p1``, as
    ``pytorch3d.ops.ball_query`` (strictly within: squared distance ``< radius**2``; ``radius=0`` finds
    nothing, as in pytorch3d). ``radius=inf`` holds every point at a finite distance: each valid query gets
    the first K valid points with finite coordinates (no distance is computed to choose them).

    Returns:
        ``_KNN(dists, idx, knn)``: squared distances ``(N, P1, K)`` (0 padding, differentiable w.r.t. p1 and
        p2), int64 ``idx`` (``-1`` padding), and the neighbours ``(N, P1, K, D)`` (0 for padding) when
        ``return_nn``.

    Raises:
        ValueError: a radius that is negative or NaN, K not an int >= 1, shapes that do not agree.
    """
    _check_pair(p1, p2)
    if isinstance(K, bool) or not isinstance(K, int) or K < 1:
        raise ValueError(f"K must be an int >= 1; got {K!r}")
    if not float(radius) >= 0:
        raise ValueError(f"radius must be >= 0; got {radius!r}")
    batch, d = p1.shape[0], p1.shape[2]
    lengths1 = _lengths_or_full(lengths1, batch, p1.shape[1], p1.device, "lengths1")
    lengths2 = _lengths_or_full(lengths2, batch, p2.shape[1], p1.device, "lengths2")
    if radius == 0:  # no squared distance is < 0
        idx = torch.full((batch, p1.shape[1], K), -1, dtype=torch.int64, device=p1.device)
    elif math.isinf(float(radius)):  # every finite point is within: the first K (warpgeo.ball_query: finite)
        idx = _first_k(p1, p2, lengths1, lengths2, K)
    elif d <= 3:
        idx = warpgeo.ball_query(
            pad3(p1),
            pad3(p2),
            float(radius),
            K,
            query_lengths=lengths1,
            point_lengths=lengths2,
            inclusive=False,
        )
    else:
        dist = torch.cdist(p1, p2, compute_mode="donot_use_mm_for_euclid_dist").detach()
        inside = (dist.square() < radius * radius) & valid_mask(lengths2, batch, p2.shape[1], p1.device)[
            :, None
        ]
        inside &= valid_mask(lengths1, batch, p1.shape[1], p1.device)[..., None]
        n = p2.shape[1]
        key = torch.where(inside, torch.arange(n, device=p1.device), n)
        first = torch.sort(key, dim=-1).values[..., :K]
        idx = torch.where(first < n, first, -1)
        if idx.shape[-1] < K:
            idx = F.pad(idx, (0, K - idx.shape[-1]), value=-1)
    neighbours = _masked_gather(p2, idx)  # (N, P1, K, D)
    dists = (p1[:, :, None, :] - neighbours).square().sum(-1)
    dists = torch.where(idx >= 0, dists, 0.0)
    return _KNN(dists=dists, idx=idx, knn=neighbours if return_nn else None)


def _first_k(p1, p2, lengths1, lengths2, k: int) -> torch.Tensor:
    """``(N, P1, K)`` int64: for each valid query with finite coordinates the first ``k`` valid points of
    ``p2`` with finite coordinates (ascending), then ``-1``: a ball query of infinite radius."""
    batch, m, n = p1.shape[0], p1.shape[1], p2.shape[1]
    usable = valid_mask(lengths2, batch, n, p1.device) & torch.isfinite(p2).all(dim=-1)
    key = torch.where(usable, torch.arange(n, device=p1.device), n)
    first = torch.sort(key, dim=-1).values[:, :k]
    first = torch.where(first < n, first, -1)
    if first.shape[-1] < k:
        first = F.pad(first, (0, k - first.shape[-1]), value=-1)
    asking = valid_mask(lengths1, batch, m, p1.device) & torch.isfinite(p1).all(dim=-1)
    return torch.where(asking[..., None], first[:, None, :], -1)


# --------------------------------------------------------------------------------------------------------
# pytorch3d.loss
# --------------------------------------------------------------------------------------------------------


def chamfer_distance(
    x: torch.Tensor,
    y: torch.Tensor,
    x_lengths: torch.Tensor | None = None,
    y_lengths: torch.Tensor | None = None,
    x_normals: torch.Tensor | None = None,
    y_normals: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    batch_reduction: str | None = "mean",
    point_reduction: str | None = "mean",
    norm: int = 2,
    single_directional: bool = False,
    abs_cosine: bool = True,
):
    """Chamfer distance, as ``pytorch3d.loss.chamfer_distance``: returns ``(loss, loss_normals)``.

    Each point's distance to its nearest neighbour in the other cloud (squared Euclidean for ``norm=2``, L1
    for ``norm=1``; :func:`warpgeo.chamfer_distance`), padded points excluded, times ``weights[n]``, reduced
    over the points (``point_reduction`` "mean" over the valid points, "sum", "max", or None), combined over
    the two directions (summed; with "max" the larger one, the Hausdorff distance; only x -> y when
    ``single_directional``), then over the batch (``batch_reduction`` "mean": divided by ``weights.sum()``
    or N, "sum", or None). ``loss_normals`` reduces ``1 - |cos|`` (``abs_cosine``) or ``1 - cos`` between
    each point's normal and its neighbour's; it is None unless both ``x_normals`` and ``y_normals`` are
    given (one alone is ignored, as in pytorch3d). With ``point_reduction=None`` each is a pair of
    per-point ``(N, P1)`` / ``(N, P2)`` tensors (one tensor when ``single_directional``).

    ``x`` and ``y`` may be tensors ``(N, P, D)`` or pytorch3d ``Pointclouds`` (their padded points, lengths
    and normals are read; the ``*_lengths`` / ``*_normals`` arguments are then ignored). Weights that are
    all zero give zeros shaped as pytorch3d's: ``(N, N)`` per cloud, for the loss and ``loss_normals``
    alike, with or without normals.

    Raises:
        ValueError: as pytorch3d: an unknown reduction, ``norm`` not 1 or 2 ("Support for 1 or 2 norm."),
            normals with ``point_reduction="max"``, points not ``(N, P, D)``, lengths not ``(N,)`` or
            longer than P, normals not shaped as their points ("Expected normals to be of shape ..."),
            weights not ``(N,)`` or negative (NaN included).
    """
    if batch_reduction not in ("mean", "sum", None):
        raise ValueError('batch_reduction must be one of ["mean", "sum"] or None')
    if point_reduction not in ("mean", "sum", "max", None):
        raise ValueError('point_reduction must be one of ["mean", "sum", "max"] or None')
    if point_reduction is None and batch_reduction is not None:
        raise ValueError("Batch reduction must be None if point_reduction is None")
    if norm not in (1, 2):
        raise ValueError("Support for 1 or 2 norm.")
    if point_reduction == "max" and (x_normals is not None or y_normals is not None):
        raise ValueError('Normals must be None if point_reduction is "max"')
    x, x_lengths, x_normals = _chamfer_operand(x, x_lengths, x_normals, "x")
    y, y_lengths, y_normals = _chamfer_operand(y, y_lengths, y_normals, "y")
    if y.shape[0] != x.shape[0] or y.shape[2] != x.shape[2]:
        raise ValueError(
            f"y does not have the correct shape: (N, P2, D) with x's N and D; got x {tuple(x.shape)} and "
            f"y {tuple(y.shape)}"
        )
    batch, p1, p2 = x.shape[0], x.shape[1], y.shape[1]
    use_normals = x_normals is not None and y_normals is not None
    if point_reduction == "max" and use_normals:  # normals read from Pointclouds
        raise ValueError('Normals must be None if point_reduction is "max"')
    if weights is not None:
        if not isinstance(weights, torch.Tensor) or weights.shape != (batch,):
            raise ValueError(f"weights must be of shape (N,) = ({batch},); got {shape_of(weights)}")
        if not bool((weights >= 0).all()):
            raise ValueError(f"weights cannot be negative; got {weights.tolist()}")
        if float(weights.sum()) == 0.0:
            return _zero_weights(x, y, weights, point_reduction, batch_reduction, single_directional)

    if x.shape[-1] <= 3:
        found = warpgeo.chamfer_distance(
            pad3(x),
            pad3(y),
            x_lengths=x_lengths,
            y_lengths=y_lengths,
            norm=norm,
            squared=norm == 2,
            reduction="sum",
            single_directional=single_directional,
        )
        dist_xy, idx_xy, dist_yx, idx_yx = found.dist_xy, found.idx_xy, found.dist_yx, found.idx_yx
    else:
        dists, idx = padded_knn(x, y, 1, x_lengths, y_lengths, norm=norm)
        dist_xy, idx_xy = _per_point(dists, idx, norm)
        dist_yx = idx_yx = None
        if not single_directional:
            dists, idx = padded_knn(y, x, 1, y_lengths, x_lengths, norm=norm)
            dist_yx, idx_yx = _per_point(dists, idx, norm)

    def direction(per_point, idx, lengths, size, normals, other_normals):
        """One direction's distance term and normals term (None without normals), point-reduced."""
        valid = valid_mask(lengths, batch, size, x.device)
        scale = None if weights is None else weights.view(batch, 1).to(per_point.dtype)
        terms = [per_point]
        if use_normals:
            # contiguous: cosine_similarity then sums in a plain gather's order (1 - cos near 1 would show
            # the last-bit difference of a strided sum)
            near = _masked_gather(other_normals, idx[..., None])[:, :, 0].contiguous()
            cosine = F.cosine_similarity(normals, near, dim=2, eps=1e-6)
            terms.append(1 - (cosine.abs() if abs_cosine else cosine))
        out = []
        for term in terms:
            term = torch.where(valid, term, 0.0)
            if scale is not None:
                term = term * scale
            if point_reduction == "max":
                term = term.amax(1) if size > 0 else term.new_zeros(batch)
            elif point_reduction is not None:
                term = term.sum(1)
                if point_reduction == "mean":
                    counts = torch.full((batch,), size, device=x.device) if lengths is None else lengths
                    term = term / counts.clamp(min=1).to(term.dtype)
            out.append(term)
        return out[0], (out[1] if use_normals else None)

    loss, loss_normals = direction(dist_xy, idx_xy, x_lengths, p1, x_normals, y_normals)
    if not single_directional:
        loss_y, normals_y = direction(dist_yx, idx_yx, y_lengths, p2, y_normals, x_normals)
        if point_reduction == "max":
            loss = torch.maximum(loss, loss_y)
        elif point_reduction is not None:
            loss = loss + loss_y
            loss_normals = None if loss_normals is None else loss_normals + normals_y
        else:
            loss = (loss, loss_y)
            loss_normals = None if loss_normals is None else (loss_normals, normals_y)
    return _batch_reduce(loss, loss_normals, batch, weights, batch_reduction)


def _chamfer_operand(points, lengths, normals, name: str):
    """One cloud of ``chamfer_distance`` as pytorch3d reads it: ``(points (N, P, D), lengths (N,) or None,
    normals or None)``; a ``Pointclouds`` (duck-typed: pytorch3d is not imported) gives all three."""
    if not isinstance(points, torch.Tensor) and all(
        hasattr(points, a) for a in ("points_padded", "num_points_per_cloud", "normals_padded")
    ):
        points, lengths, normals = (
            points.points_padded(),
            points.num_points_per_cloud(),
            points.normals_padded(),
        )
    if not isinstance(points, torch.Tensor):
        raise ValueError(
            f"{name} must be pytorch3d's Pointclouds objects or torch.Tensor of shape (N, P, D); got "
            f"{type(points).__name__}"
        )
    if points.dim() != 3:
        raise ValueError(
            f"Expected points to be of shape (N, P, D); got {name} of shape {tuple(points.shape)}"
        )
    batch, size = points.shape[0], points.shape[1]
    if lengths is not None:
        if not isinstance(lengths, torch.Tensor) or lengths.shape != (batch,):
            raise ValueError(
                f"Expected lengths to be of shape (N,) = ({batch},); got {name}_lengths {shape_of(lengths)}"
            )
        if batch and int(lengths.max()) > size:
            raise ValueError(f"A length value was too long: {name}_lengths {lengths.tolist()} > P = {size}")
        lengths = lengths.to(points.device)
    if normals is not None and (not isinstance(normals, torch.Tensor) or normals.shape != points.shape):
        raise ValueError(
            f"Expected normals to be of shape (N, P, D) = {tuple(points.shape)}, as {name}; got "
            f"{name}_normals {shape_of(normals)}"
        )
    return points, lengths, normals


def _batch_reduce(loss, loss_normals, batch: int, weights, batch_reduction):
    if batch_reduction is None:
        return loss, loss_normals
    loss = loss.sum()
    loss_normals = None if loss_normals is None else loss_normals.sum()
    if batch_reduction == "mean":
        divisor = weights.sum() if weights is not None else max(batch, 1)
        loss = loss / divisor
        loss_normals = None if loss_normals is None else loss_normals / divisor
    return loss, loss_normals


def _zero_weights(x, y, weights, point_reduction, batch_reduction, single_directional):
    """pytorch3d's result for weights that are all zero, shapes included (its tests pin them): each
    direction gives ``(N, N)`` zeros (its ``x.sum((1, 2)) * weights.view(N, 1)`` broadcasts) for the loss
    and, normals or not, for ``loss_normals``, combined as any direction, batch-reduced with divisor 1. The
    zeros keep the graph to the points (a zero gradient)."""
    column = weights.view(-1, 1)

    def zeros(points):
        return (points.sum((1, 2)) * column) * 0.0

    if single_directional:
        loss, loss_normals = zeros(x), zeros(x)
    elif point_reduction == "max":
        loss, loss_normals = torch.maximum(zeros(x), zeros(y)), None
    elif point_reduction is not None:
        loss, loss_normals = zeros(x) + zeros(y), zeros(x) + zeros(y)
    else:
        loss, loss_normals = (zeros(x), zeros(y)), (zeros(x), zeros(y))
    if batch_reduction is None:
        return loss, loss_normals
    return loss.sum(), (None if loss_normals is None else loss_normals.sum())


def _per_point(dists, idx, norm):
    """``(B, M, 1)`` nearest distances / indices of :func:`padded_knn` -> pytorch3d's per-point terms."""
    d, i = dists[..., 0], idx[..., 0]
    d = torch.where(i >= 0, d.square() if norm == 2 else d, 0.0)
    return d, i
