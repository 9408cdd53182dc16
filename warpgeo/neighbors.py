"""Neighbour queries: k nearest neighbours (:func:`knn`) and pointnet2's ball query (:func:`ball_query`).

Both search a uniform grid of cells built per call by one Warp launch (the shared room ``warpgeo/_grid.py``
/ ``warpgeo/_kernels/grid.py``; its arrays in a per-thread workspace, not allocated per call): memory is
``O(B * (N + M * k))``, never ``O(B * M * N)``. Small clouds are scanned directly instead (no grid to build:
one launch). Distances are compared in float64 whatever the input dtype, so results do not depend on it, and
ties go to the lowest index; float64 clouds are first scaled by a power of two (exact, in the kernels), so
that squared distances neither overflow nor underflow at any finite scale (for a cloud whose magnitudes span
at most ``2**967``: ``warpgeo/_scale.py``; the value checks refuse a wider one).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

from . import _grid, _launch, _scale, _warp, checks
from ._constants import FAR, INT32_LIMIT, MAX_POINTS, MODE_BALL, MODE_KNN, SENTINEL_INDEX
from ._kernels import neighbors as kernels
from ._op import Op

__all__ = ["KNN", "ball_query", "knn"]

#: Cell size of the ball-query grid, in radii.
_BALL_CELL = 0.5
#: ``k`` is below this whatever M is (the output's int32 byte strides: 8-byte entries).
_MAX_K = INT32_LIMIT // 8


class KNN(NamedTuple):
    """The result of :func:`knn`: ``dists`` ``(B, M, k)`` Euclidean distances and ``idx`` ``(B, M, k)`` int64."""

    dists: torch.Tensor
    idx: torch.Tensor


def knn(
    queries: torch.Tensor,
    points: torch.Tensor,
    k: int,
    *,
    query_lengths: torch.Tensor | None = None,
    point_lengths: torch.Tensor | None = None,
) -> KNN:
    """The ``k`` nearest points of every query, nearest first.

    Distances are Euclidean (not squared), computed from coordinate differences (accurate to the input
    dtype's rounding, even far from the origin) and compared in float64; equal distances go to the lowest
    index. ``dists`` is differentiable w.r.t. ``queries`` and ``points`` (the gradient of a zero distance
    is taken as 0). Memory is ``O(B * (N + M * k))``.

    Args:
        queries: ``(B, M, 3)``, or ``(M, 3)`` with ``points`` ``(N, 3)`` (one cloud: the results are then
            ``(M, k)``); float16, bfloat16, float32 or float64.
        points: ``(B, N, 3)`` (or ``(N, 3)``), the dtype and device of ``queries``.
        k: neighbours per query, an int >= 1.
        query_lengths: optional integer ``(B,)``: only the first ``query_lengths[b]`` queries of cloud b
            are answered; the other rows hold ``-1`` and ``inf``.
        point_lengths: optional integer ``(B,)``: cloud b holds only its first ``point_lengths[b]`` points.

    Returns:
        ``KNN(dists, idx)``: ``dists`` ``(B, M, k)`` in the dtype of ``points``, ``idx`` ``(B, M, k)``
        int64. Where a cloud has fewer than ``k`` valid points, the rest of the row is ``-1`` / ``inf``.

    Raises:
        TypeError: non-float points or queries, different dtypes, non-integer lengths, a non-int ``k``.
        ValueError: bad shapes, ``k < 1`` or ``k >= 2**28``, lengths outside ``[0, M]`` / ``[0, N]``, NaN or
            inf among the valid points or queries, tensors on different devices; a float64 cloud whose
            magnitudes span more than ``2**967`` (largest |coordinate| over the smallest nonzero one;
            distances are exact within it).

    Example:
        >>> pts = torch.rand(2, 1000, 3)
        >>> dists, idx = knn(pts[:, :100], pts, 8)                 # (2, 100, 8) each
        >>> bool((idx[..., 0] == torch.arange(100)).all())         # a point is its own nearest
        True
    """
    queries, points, unbatched = _batched(queries, points)
    dists, idx = _knn_op.call(
        queries=queries, points=points, query_lengths=query_lengths, point_lengths=point_lengths, k=k
    )
    return KNN(dists[0], idx[0]) if unbatched else KNN(dists, idx)


def ball_query(
    queries: torch.Tensor,
    points: torch.Tensor,
    radius: float,
    k: int,
    *,
    query_lengths: torch.Tensor | None = None,
    point_lengths: torch.Tensor | None = None,
    inclusive: bool = True,
) -> torch.Tensor:
    """Ball query with pointnet2's semantics: the first ``k`` points, in index order, within ``radius``.

    For each query ``queries[b, m]``, the indices ``n`` of the points with ``|points[b, n] - queries[b, m]|
    <= radius`` (inclusive), in ascending order, the first ``k`` of them, then ``-1`` where fewer lie in the
    ball. Memory is ``O(B * (N + M * k))``: no ``(B, M, N)`` distance matrix is formed (the points are
    binned into a grid of cells at least ``radius`` wide). Not differentiable (an index selection):
    gradients flow through what is gathered with the indices (:func:`warpgeo.gather_points`).

    Args:
        queries: ``(B, M, 3)`` ball centres, or ``(M, 3)`` with ``points`` ``(N, 3)`` (one cloud: the result
            is then ``(M, k)``); float16, bfloat16, float32 or float64.
        points: ``(B, N, 3)`` (or ``(N, 3)``), the dtype and device of ``queries``.
        radius: a finite float > 0.
        k: the most neighbours per query, an int >= 1.
        query_lengths: optional integer ``(B,)``: only the first ``query_lengths[b]`` queries of cloud b
            are answered; the other rows are all ``-1``.
        point_lengths: optional integer ``(B,)``: cloud b holds only its first ``point_lengths[b]`` points.
        inclusive: ``True`` (the default) keeps the points at distance ``<= radius``; ``False`` only those
            at ``< radius``, as the pointnet2 CUDA extension (``d**2 < radius**2``) does.

    Returns:
        int64 ``(B, M, k)`` (``(M, k)`` for one unbatched cloud): ascending point indices, ``-1`` padding.

    Raises:
        TypeError: non-float points or queries, different dtypes, non-integer lengths, a non-int ``k``, a
            non-float ``radius`` or a non-bool ``inclusive``; pointnet2's argument order (radius first).
        ValueError: bad shapes, ``k < 1`` or ``k >= 2**28``, ``radius`` not finite and > 0, lengths outside
            ``[0, M]`` / ``[0, N]``, NaN or inf among the valid points or queries, tensors on different
            devices; a float64 cloud whose magnitudes span more than ``2**967`` (largest |coordinate| over the
            smallest nonzero one; distances are exact within it) (``radius`` counted with the coordinates).

    Example:
        >>> pts = torch.rand(2, 1000, 3)
        >>> centres = pts[:, :64]
        >>> idx = ball_query(centres, pts, 0.2, 16)              # (2, 64, 16) int64, -1 padded
        >>> grouped = gather_points(pts.transpose(1, 2), idx)   # (2, 3, 64, 16), 0 where idx == -1
    """
    if isinstance(queries, (int, float)) and isinstance(points, (int, float)):
        raise TypeError(
            "ball_query takes (queries, points, radius, k); got two numbers first, as in pointnet2's "
            "ball_query(radius, nsample, xyz, new_xyz): call ball_query(new_xyz, xyz, radius, nsample), or "
            "warpgeo.compat.pointnet2_ops.pointnet2_utils.ball_query for pointnet2's order and int32 output"
        )
    queries, points, unbatched = _batched(queries, points)
    idx = _ball_query_op.call(
        queries=queries,
        points=points,
        query_lengths=query_lengths,
        point_lengths=point_lengths,
        radius=radius,
        k=k,
        inclusive=inclusive,
    )
    return idx[0] if unbatched else idx


def _batched(queries: Any, points: Any) -> tuple[Any, Any, bool]:
    """One unbatched cloud, ``queries`` (M, 3) and ``points`` (N, 3), as a batch of one (as FPS takes an
    (N, 3) cloud); anything else as it is (the op's checks judge it)."""
    if (
        isinstance(queries, torch.Tensor)
        and isinstance(points, torch.Tensor)
        and queries.dim() == 2
        and points.dim() == 2
    ):
        return queries.unsqueeze(0), points.unsqueeze(0), True
    return queries, points, False


# --------------------------------------------------------------------------------------------------------
# checks (both ops)
# --------------------------------------------------------------------------------------------------------


def _check_knn(queries, points, query_lengths, point_lengths, k) -> None:
    """The checks of every entry point that read no tensor values: types, shapes, devices, sizes."""
    checks.check_float(queries, "queries")
    checks.check_float(points, "points")
    if queries.dim() != 3 or queries.shape[-1] != 3:
        raise ValueError(f"queries must have shape (B, M, 3); got {tuple(queries.shape)}")
    if points.dim() != 3 or points.shape[-1] != 3:
        raise ValueError(f"points must have shape (B, N, 3); got {tuple(points.shape)}")
    if points.shape[0] != queries.shape[0]:
        raise ValueError(
            f"points must have the batch size of queries ({queries.shape[0]}); got points of shape "
            f"{tuple(points.shape)}"
        )
    if points.dtype != queries.dtype:
        raise TypeError(f"points must have the dtype of queries ({queries.dtype}); got {points.dtype}")
    k = checks.check_int(k, "k", minimum=1)
    if isinstance(k, int) and k >= _MAX_K:
        raise ValueError(f"k must be below 2**28 (int32 strides of one Warp launch); got {checks.shown(k)}")
    batch, num_queries, num_points = queries.shape[0], queries.shape[1], points.shape[1]
    item = _warp.compute_dtype(points.dtype).itemsize
    if num_points > MAX_POINTS or 3 * item * num_points >= INT32_LIMIT:
        raise ValueError(
            f"points may hold fewer than {INT32_LIMIT // (3 * item)} points per cloud in "
            f"{points.dtype} (int32 strides of one Warp launch); got N={num_points}"
        )
    if isinstance(k, int) and 8 * num_queries * k >= INT32_LIMIT:  # k and M are small enough to print
        raise ValueError(
            f"queries * k must stay below 2**28 per cloud (int32 strides of one Warp launch); got M={num_queries}, "
            f"k={k}"
        )
    for name, t in (("query_lengths", query_lengths), ("point_lengths", point_lengths)):
        if t is not None:
            checks.check_index(t, name)
            checks.check_shape(t, name, (batch,))
    checks.check_device(
        "queries", queries=queries, points=points, query_lengths=query_lengths, point_lengths=point_lengths
    )


def _check_ball_query(queries, points, query_lengths, point_lengths, radius, k, inclusive) -> None:
    """:func:`_check_knn`'s checks, and the radius and the comparison."""
    _check_knn(queries, points, query_lengths, point_lengths, k)
    if isinstance(radius, bool) or not isinstance(radius, (int, float)):
        raise TypeError(f"radius must be a float; got {type(radius).__name__}")
    try:
        finite = math.isfinite(radius)
    except OverflowError:  # an int beyond float64's range
        finite = False
    if not (finite and radius > 0.0):
        raise ValueError(f"radius must be a finite float > 0; got {checks.shown(radius)}")
    if not isinstance(inclusive, bool):
        raise TypeError(f"inclusive must be a bool; got {type(inclusive).__name__}")


# --------------------------------------------------------------------------------------------------------
# k nearest neighbours: declarations (check above, impl, fake), backward
# --------------------------------------------------------------------------------------------------------


def _knn_impl(
    queries: torch.Tensor,
    points: torch.Tensor,
    query_lengths: torch.Tensor | None,
    point_lengths: torch.Tensor | None,
    k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """queries (B, M, 3), points (B, N, 3) -> dists (B, M, k) in points' dtype, idx (B, M, k) int64."""
    if checks.checking_values(queries.device):
        _grid.check_values(queries, points, query_lengths, point_lengths)
    return _knn(queries, points, query_lengths, point_lengths, k)


def _knn_fake(queries, points, query_lengths, point_lengths, k):
    shape = (queries.shape[0], queries.shape[1], k)
    return queries.new_empty(shape), queries.new_empty(shape, dtype=torch.int64)


def _knn(queries, points, query_lengths, point_lengths, k, method=None):
    """The launches behind the op (``method``: None = by size and device, or "brute" / "counting" / "sort").
    The outputs
    are allocated once, in their final dtype (half inputs: float32, then cast); one launch for small clouds
    (two in float64: the scale first), two on a grid."""
    batch, m, n = queries.shape[0], queries.shape[1], points.shape[1]
    device = queries.device
    dtype = points.dtype
    compute = _warp.compute_dtype(dtype)
    idx = torch.empty(batch, m, k, dtype=torch.int64, device=device)
    dists = torch.empty(batch, m, k, dtype=compute, device=device)
    if n == 0 or batch * m == 0:
        return dists.fill_(FAR).to(dtype), idx.fill_(SENTINEL_INDEX)
    queries, points = _grid.cloud(queries), _grid.cloud(points)
    key = _warp.KEY[compute]
    rows = batch * m
    query_lengths = _grid.lengths_arg(query_lengths, device)
    point_lengths = _grid.lengths_arg(point_lengths, device)
    method = _grid.method(points, method)
    scratch = 0 if compute == torch.float64 else rows * k  # float64 clouds keep the list in their output
    stream = _warp.warp_stream(device)  # once per call (None on the CPU)
    ws = _grid.Workspace(device, stream)
    out_dist = dists.view(rows, k)
    common = {
        "queries": queries,
        "query_lengths": query_lengths,
        "work_d2": out_dist if scratch == 0 else ws.take(torch.float64, rows, k),
        "out_idx": idx.view(rows, k),
        "out_dist": out_dist,
        "stream": stream,
    }
    if method == "brute":
        table = kernels.KNN_BRUTE[key]
        if compute == torch.float64:
            params = _grid.scale(table, queries, query_lengths, points, point_lengths, ws)
        else:
            params = _grid.no_params(device)
        _launch.launch_rows(
            table.knn_brute,
            rows,
            device=device,
            work_per_row=n,
            points=points,
            point_lengths=point_lengths,
            params=params,
            **common,
        )
    else:
        table = kernels.KNN_GRID[key]
        grid, _arrays = _grid.build(
            table, queries, query_lengths, points, point_lengths, MODE_KNN, 0.0, method, ws
        )
        _launch.launch_rows(
            table.knn_rows, rows, device=device, work_per_row=_grid.ROW_WORK, grid=grid, **common
        )
    return (dists if dists.dtype == dtype else dists.to(dtype)), idx


def _setup_knn(ctx, inputs, output) -> None:
    queries, points, _query_lengths, _point_lengths, _k = inputs
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(queries, points, output[1])


def _backward_knn(ctx, grad_dists, _grad_idx):
    """d|q - p|: ``(q - p) / |q - p|`` to the query, its negative scatter-added to the point; 0 where the
    distance is 0 (a subgradient) and for padding. Written with torch ops (a gather, a norm and a
    scatter-add over the (B, M, k) neighbours, no (B, M, N) intermediate), so it is differentiable itself
    (double backward) and runs as one graph node under torch.compile."""
    if grad_dists is None or not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
        return _knn_op.grads()
    queries, points, idx = ctx.saved_tensors
    work = _warp.compute_dtype(points.dtype)
    batch, m, k = idx.shape
    safe = idx.clamp_min(0)
    chosen = torch.gather(points.to(work), 1, safe.reshape(batch, m * k, 1).expand(-1, -1, 3))
    diff = queries.to(work)[:, :, None, :] - chosen.reshape(batch, m, k, 3)
    if work == torch.float64:
        # diff / |diff| from copies scaled by a power of two: finite at any scale (1 / |diff| overflows
        # for subnormal distances, |diff|**2 for distances near 1e200)
        scaled = _scale.scaled_rows(diff)
        norm = torch.linalg.vector_norm(scaled, dim=-1)
        use = (idx >= 0) & (norm > 0)
        unit = scaled / torch.where(use, norm, 1.0)[..., None]
        step = torch.where(use, grad_dists.to(work), 0.0)[..., None] * unit  # (B, M, k, 3)
    else:
        dist = torch.linalg.vector_norm(diff, dim=-1)
        use = (idx >= 0) & (dist > 0)
        coef = torch.where(use, grad_dists.to(work) / torch.where(use, dist, 1.0), 0.0)
        step = coef[..., None] * diff  # (B, M, k, 3)
    grad_queries = step.sum(dim=2).to(queries.dtype) if ctx.needs_input_grad[0] else None
    grad_points = None
    if ctx.needs_input_grad[1]:
        grad_points = torch.zeros(points.shape, dtype=work, device=points.device)
        grad_points.scatter_add_(
            1, safe.reshape(batch, m * k, 1).expand(-1, -1, 3), -step.reshape(batch, -1, 3)
        )
        grad_points = grad_points.to(points.dtype)
    return _knn_op.grads(queries=grad_queries, points=grad_points)


_knn_op = Op(
    "warpgeo::knn",
    check=_check_knn,
    impl=_knn_impl,
    fake=_knn_fake,
    setup=_setup_knn,
    backward=_backward_knn,
)


# --------------------------------------------------------------------------------------------------------
# ball query: declarations (check above, impl, fake); no gradient (an index selection)
# --------------------------------------------------------------------------------------------------------


def _ball_query_impl(
    queries: torch.Tensor,
    points: torch.Tensor,
    query_lengths: torch.Tensor | None,
    point_lengths: torch.Tensor | None,
    radius: float,
    k: int,
    inclusive: bool,
) -> torch.Tensor:
    """queries (B, M, 3), points (B, N, 3) -> int64 (B, M, k): the k smallest indices with distance
    <= radius (``inclusive``) or < radius, ascending, then -1."""
    if checks.checking_values(queries.device):
        _grid.check_values(queries, points, query_lengths, point_lengths, radius=radius)
    return _ball_query(queries, points, query_lengths, point_lengths, radius, k, inclusive)


def _ball_query_fake(queries, points, query_lengths, point_lengths, radius, k, inclusive):
    return queries.new_empty(queries.shape[0], queries.shape[1], k, dtype=torch.int64)


def _ball_query(
    queries,
    points,
    query_lengths,
    point_lengths,
    radius,
    k,
    inclusive,
    method=None,
):
    """The launches behind the op (``method``: None = by size and device, or "brute" / "counting" / "sort").
    One launch
    for small clouds (two in float64: the scale first), two on a grid."""
    batch, m, n = queries.shape[0], queries.shape[1], points.shape[1]
    device = queries.device
    out = torch.empty(batch, m, k, dtype=torch.int64, device=device)
    if n == 0 or batch * m == 0:
        return out.fill_(SENTINEL_INDEX)
    queries, points = _grid.cloud(queries), _grid.cloud(points)
    key = _warp.KEY[points.dtype]
    scaled = points.dtype == torch.float64
    stream = _warp.warp_stream(device)  # once per call (None on the CPU)
    query_lengths = _grid.lengths_arg(query_lengths, device)
    point_lengths = _grid.lengths_arg(point_lengths, device)
    common = {
        "queries": queries,
        "query_lengths": query_lengths,
        "radius": float(radius),
        "inclusive": int(inclusive),
        "out_idx": out.view(batch * m, k),
        "stream": stream,
    }
    method = _grid.method(points, method)
    if method == "brute":
        table = kernels.BALL_QUERY_BRUTE[key]
        ws = _grid.Workspace(device, stream)
        params = (
            _grid.scale(table, queries, query_lengths, points, point_lengths, ws)
            if scaled
            else _grid.no_params(device)
        )
        _launch.launch_rows(
            table.ball_query_brute,
            batch * m,
            device=device,
            work_per_row=n,
            points=points,
            point_lengths=point_lengths,
            params=params,
            **common,
        )
        return out
    table = kernels.BALL_QUERY_GRID[key]
    ws = _grid.Workspace(device, stream)
    grid, _arrays = _grid.build(
        table, queries, query_lengths, points, point_lengths, MODE_BALL, radius * _BALL_CELL, method, ws
    )
    _launch.launch_rows(
        table.ball_query_rows,
        batch * m,
        device=device,
        work_per_row=_grid.ROW_WORK,
        ordered=int(method == "counting"),
        grid=grid,
        **common,
    )
    return out


_ball_query_op = Op(
    "warpgeo::ball_query", check=_check_ball_query, impl=_ball_query_impl, fake=_ball_query_fake
)
