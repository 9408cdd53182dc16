"""Chamfer distance: both directions' nearest neighbours and distances in one launch, the loss in one more,
the backward in one.

* :func:`chamfer_grid_rows` / :func:`chamfer_grid_block`: the kNN grids of both clouds in one launch (a
  thread / a block per cloud and side: the shared ``warpgeo/_kernels/grid.py``'s builds), when the clouds are large;
* :func:`chamfer_nearest`: a thread per point of ``x`` (rows ``b * N + i``) and of ``y`` (the rows after):
  its nearest point of the other cloud (L2: the grid's kNN search with ``k = 1``, on the grid or by a scan; L1: a
  scan by ``|dx| + |dy| + |dz|``, which the grid's Euclidean pruning cannot serve), its index and distance;
* :func:`chamfer_loss_rows` / :func:`chamfer_loss_block`: the loss from the per-point distances, summed in a
  fixed order (the same bits run to run);
* :func:`chamfer_backward`: a thread per point: its own gradient, and the opposite one added to its
  neighbour (atomics on CUDA; on the CPU the launch runs on one thread, in row order).

Distances are computed in float64 from coordinates scaled by a power of two per cloud (float64 clouds only:
``params``' ``f1 * f2``; exact), so that they are exact at any finite scale (a squared distance of 1e200
coordinates would overflow), and returned in the caller's units; ties go to the lowest index. Padding rows
(beyond the lengths), and valid points whose other cloud is empty, get index -1 and distance 0.
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.grid import (
    BUILD_BLOCK_DIM,
    MODE_KNN,
    OPTIONS,
    build_block,
    build_rows,
    cloud_scale_rows,
    factors,
    knn_search_brute,
    knn_search_grid,
    scaled_point,
    valid_count,
)
from warpgeo._kernels.grid import TYPES as GRID_TYPES

#: Index written where a row has no neighbour (padding, or an empty cloud).
SENTINEL_INDEX = wp.constant(wp.int64(_constants.SENTINEL_INDEX))
#: ``reduction`` codes of the loss kernels.
REDUCE_MEAN = wp.constant(0)
REDUCE_SUM = wp.constant(1)
REDUCE_NONE = wp.constant(2)


def chamfer_grid_rows(
    x: wp.array2d(dtype=Any),
    x_lengths: wp.array(dtype=wp.int64),
    y: wp.array2d(dtype=Any),
    y_lengths: wp.array(dtype=wp.int64),
    points_per_cell: wp.float64,
    scaled: int,
    grid_x: Any,
    grid_y: Any,
    row_start: wp.int32,
):
    """Thread ``s * B + b``: the grid of ``y`` (s = 0) or of ``x`` (s = 1) of cloud b (both get the scale
    of the pair)."""
    r = wp.tid() + row_start
    batch = x.shape[0]
    b = r % batch
    if r < batch:
        build_rows(
            b, x, x_lengths, y, y_lengths, MODE_KNN, wp.float64(0.0), points_per_cell, scaled, grid_y,
        )  # fmt: skip
    else:
        build_rows(
            b, y, y_lengths, x, x_lengths, MODE_KNN, wp.float64(0.0), points_per_cell, scaled, grid_x,
        )  # fmt: skip


def chamfer_grid_block(
    x: wp.array2d(dtype=Any),
    x_lengths: wp.array(dtype=wp.int64),
    y: wp.array2d(dtype=Any),
    y_lengths: wp.array(dtype=wp.int64),
    points_per_cell: wp.float64,
    scaled: int,
    grid_x: Any,
    grid_y: Any,
):
    """Block ``s * B + b`` (CUDA; launched tiled): the grid of ``y`` (s = 0) or of ``x`` (s = 1) of cloud b."""
    g, lane = wp.tid()
    batch = x.shape[0]
    b = g % batch
    if g < batch:
        build_block(
            b, lane, wp.block_dim(), x, x_lengths, y, y_lengths, MODE_KNN, wp.float64(0.0), points_per_cell,
            scaled, grid_y,
        )  # fmt: skip
    else:
        build_block(
            b, lane, wp.block_dim(), y, y_lengths, x, x_lengths, MODE_KNN, wp.float64(0.0), points_per_cell,
            scaled, grid_x,
        )  # fmt: skip


@wp.func
def nearest_l1(q: wp.vec3d, b: int, points: wp.array2d(dtype=Any), n: int, f1: wp.float64, f2: wp.float64):
    """The first of the nearest of cloud ``b``'s first ``n`` points to ``q`` in L1 (scaled): (index, distance).
    The first point is taken whatever its distance (an overflow to inf still names a point)."""
    best = SENTINEL_INDEX
    best_d = wp.float64(wp.inf)
    for i in range(n):
        p = scaled_point(points[b, i], f1, f2)
        d = wp.abs(p[0] - q[0]) + wp.abs(p[1] - q[1]) + wp.abs(p[2] - q[2])
        if best == SENTINEL_INDEX or d < best_d:  # strictly less: the lowest index keeps a tie
            best_d = d
            best = wp.int64(i)
    return best, best_d


@wp.func
def point_distance(d: wp.float64, norm: int, squared: int, g1: wp.float64, g2: wp.float64):
    """A scaled L2 squared distance (``norm`` 2) or L1 distance (``norm`` 1) in the caller's units, as
    the op returns it (``squared`` or not)."""
    out = wp.float64(0.0)
    if norm == 2:
        if squared != 0:  # noqa: SIM108 (Warp kernels: plain branches)
            out = d * g1 * g2 * g1 * g2
        else:
            out = wp.sqrt(d) * g1 * g2
    else:
        out = d * g1 * g2
        if squared != 0:
            out = out * out
    return out


@wp.func
def nearest_of(
    q_cloud: wp.array2d(dtype=Any),
    q_lengths: wp.array(dtype=wp.int64),
    p_cloud: wp.array2d(dtype=Any),
    p_lengths: wp.array(dtype=wp.int64),
    b: int,
    i: int,
    row: int,
    use_grid: int,
    norm: int,
    squared: int,
    scale: wp.array2d(dtype=wp.float64),
    grid: Any,
    work_idx: wp.array2d(dtype=wp.int64),
    work_d2: wp.array2d(dtype=wp.float64),
):
    """Point ``i`` of ``q_cloud``'s cloud ``b``: (its nearest valid point of ``p_cloud``, the distance);
    ``(-1, 0)`` for padding or an empty other cloud. ``grid``: the grid of ``p_cloud`` (with the scale)
    where ``use_grid``, else ``scale`` holds the scale (empty: not scaled)."""
    best = SENTINEL_INDEX
    dist = wp.float64(0.0)
    if i < valid_count(b, q_lengths, q_cloud.shape[1]):
        f1, f2, g1, g2 = factors(scale, b)
        if use_grid != 0:
            f1, f2, g1, g2 = factors(grid.params, b)
        q = scaled_point(q_cloud[b, i], f1, f2)
        n = valid_count(b, p_lengths, p_cloud.shape[1])
        if norm == 1:
            best, d1 = nearest_l1(q, b, p_cloud, n, f1, f2)
            if best != SENTINEL_INDEX:
                dist = point_distance(d1, norm, squared, g1, g2)
        else:
            count = int(0)
            if use_grid != 0:
                count = knn_search_grid(q, b, row, grid, work_idx, work_d2)
            else:
                count = knn_search_brute(q, b, row, p_cloud, n, f1, f2, work_idx, work_d2)
            if count > 0:
                best = work_idx[row, 0]
                dist = point_distance(work_d2[row, 0], norm, squared, g1, g2)
    return best, dist


def chamfer_nearest(
    x: wp.array2d(dtype=Any),
    x_lengths: wp.array(dtype=wp.int64),
    y: wp.array2d(dtype=Any),
    y_lengths: wp.array(dtype=wp.int64),
    use_grid: int,
    norm: int,
    squared: int,
    scale: wp.array2d(dtype=wp.float64),
    grid_x: Any,
    grid_y: Any,
    work_idx: wp.array2d(dtype=wp.int64),
    work_d2: wp.array2d(dtype=wp.float64),
    out_dist_xy: wp.array2d(dtype=Any),
    out_idx_xy: wp.array2d(dtype=wp.int64),
    out_dist_yx: wp.array2d(dtype=Any),
    out_idx_yx: wp.array2d(dtype=wp.int64),
    row_start: wp.int32,
):
    """Row ``b * N + i`` (x -> y), then ``B * N + b * M + j`` (y -> x): the point's nearest neighbour in
    the other cloud and its distance (``work_*``: ``(rows, 1)`` scratch of the L2 search)."""
    r = wp.tid() + row_start
    batch = x.shape[0]
    n = x.shape[1]
    m = y.shape[1]
    if r < batch * n:
        b = r // n
        i = r % n
        best, dist = nearest_of(
            x, x_lengths, y, y_lengths, b, i, r, use_grid, norm, squared, scale, grid_y, work_idx, work_d2,
        )  # fmt: skip
        out_idx_xy[b, i] = best
        out_dist_xy[b, i] = out_dist_xy.dtype(dist)
    elif m > 0:
        s = r - batch * n
        b = s // m
        j = s % m
        if b < out_idx_yx.shape[0]:
            best, dist = nearest_of(
                y, y_lengths, x, x_lengths, b, j, r, use_grid, norm, squared, scale, grid_x, work_idx,
                work_d2,
            )  # fmt: skip
            out_idx_yx[b, j] = best
            out_dist_yx[b, j] = out_dist_yx.dtype(dist)


@wp.func
def count_of(lengths: wp.array(dtype=wp.int64), b: int, size: int):
    """Cloud ``b``'s count for a mean: its length clamped to ``[1, max(size, 1)]`` (an empty cloud's mean
    is 0)."""
    top = wp.max(size, 1)
    c = top
    if b < lengths.shape[0]:
        c = int(wp.clamp(lengths[b], wp.int64(1), wp.int64(top)))
    return wp.float64(c)


@wp.func
def row_sum(d: wp.array2d(dtype=Any), b: int, first: int, stride: int):
    total = wp.float64(0.0)
    for i in range(first, d.shape[1], stride):
        total += wp.float64(d[b, i])
    return total


@wp.func
def fold_cloud(
    total: wp.float64,
    b: int,
    sx: wp.float64,
    sy: wp.float64,
    x_lengths: wp.array(dtype=wp.int64),
    y_lengths: wp.array(dtype=wp.int64),
    n: int,
    m: int,
    reduction: int,
    single: int,
    out_loss: wp.array(dtype=Any),
):
    """Cloud ``b``'s sums into the loss: ``total`` for "mean" / "sum", ``out_loss[b]`` for None."""
    if reduction == REDUCE_SUM:
        total += sx + sy
    else:
        per_cloud = sx / count_of(x_lengths, b, n)
        if single == 0:
            per_cloud += sy / count_of(y_lengths, b, m)
        if reduction == REDUCE_NONE:
            out_loss[b] = out_loss.dtype(per_cloud)
        else:
            total += per_cloud
    return total


@wp.func
def finish_loss(total: wp.float64, batch: int, reduction: int, out_loss: wp.array(dtype=Any)):
    if reduction == REDUCE_SUM:
        out_loss[0] = out_loss.dtype(total)
    elif reduction == REDUCE_MEAN:
        out_loss[0] = out_loss.dtype(total / wp.float64(wp.max(batch, 1)))


def chamfer_loss_rows(
    dist_xy: wp.array2d(dtype=Any),
    x_lengths: wp.array(dtype=wp.int64),
    dist_yx: wp.array2d(dtype=Any),
    y_lengths: wp.array(dtype=wp.int64),
    reduction: int,
    single: int,
    out_loss: wp.array(dtype=Any),
):
    """One thread: the loss (padding distances are 0; "mean" divides by the valid points)."""
    batch = dist_xy.shape[0]
    total = wp.float64(0.0)
    for b in range(batch):
        sy = wp.float64(0.0)
        if single == 0:
            sy = row_sum(dist_yx, b, 0, 1)
        total = fold_cloud(
            total, b, row_sum(dist_xy, b, 0, 1), sy, x_lengths, y_lengths, dist_xy.shape[1], dist_yx.shape[1],
            reduction, single, out_loss,
        )  # fmt: skip
    finish_loss(total, batch, reduction, out_loss)


def chamfer_loss_block(
    dist_xy: wp.array2d(dtype=Any),
    x_lengths: wp.array(dtype=wp.int64),
    dist_yx: wp.array2d(dtype=Any),
    y_lengths: wp.array(dtype=wp.int64),
    reduction: int,
    single: int,
    out_loss: wp.array(dtype=Any),
):
    """One block (CUDA; launched tiled): the loss, each cloud's sums by a block reduction."""
    _g, lane = wp.tid()
    nthreads = wp.block_dim()
    batch = dist_xy.shape[0]
    total = wp.float64(0.0)
    for b in range(batch):
        sx = wp.tile_sum(wp.tile(row_sum(dist_xy, b, lane, nthreads)))[0]
        sy = wp.float64(0.0)
        if single == 0:
            sy = wp.tile_sum(wp.tile(row_sum(dist_yx, b, lane, nthreads)))[0]
        if lane == 0:
            total = fold_cloud(
                total, b, sx, sy, x_lengths, y_lengths, dist_xy.shape[1], dist_yx.shape[1], reduction, single,
                out_loss,
            )  # fmt: skip
    if lane == 0:
        finish_loss(total, batch, reduction, out_loss)


@wp.func
def point_weight(
    grad_dist: wp.array2d(dtype=Any),
    grad_loss: wp.array(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    b: int,
    i: int,
    size: int,
    batch: int,
    reduction: int,
):
    """d loss_total / d dist of point ``i`` of cloud ``b``: its own upstream gradient (``grad_dist``, empty
    when none flows) plus the reduction's share of the loss's (``grad_loss``, empty when none flows)."""
    w = wp.float64(0.0)
    if grad_dist.shape[0] > 0:
        w = wp.float64(grad_dist[b, i])
    if grad_loss.shape[0] > 0:
        if reduction == REDUCE_SUM:
            w += wp.float64(grad_loss[0])
        elif reduction == REDUCE_MEAN:
            w += wp.float64(grad_loss[0]) / wp.float64(wp.max(batch, 1)) / count_of(lengths, b, size)
        else:
            w += wp.float64(grad_loss[b]) / count_of(lengths, b, size)
    return w


@wp.func
def distance_gradient(diff: wp.vec3d, norm: int, squared: int):
    """d dist / d q for ``diff = q - p`` (float64, the caller's units): L2 ``diff / |diff|`` (0 at 0; the
    direction from the difference scaled by its largest component, finite at any scale) or ``2 diff``
    (squared); L1 ``sign(diff)``, times ``2 |diff|_1`` (squared)."""
    out = wp.vec3d(0.0, 0.0, 0.0)
    if norm == 2:
        if squared != 0:
            out = wp.float64(2.0) * diff
        else:
            big = wp.max(wp.max(wp.abs(diff[0]), wp.abs(diff[1])), wp.abs(diff[2]))
            if big > wp.float64(0.0) and big < wp.float64(wp.inf):
                u = diff / big
                out = u / wp.length(u)
    else:
        out = wp.vec3d(wp.sign(diff[0]), wp.sign(diff[1]), wp.sign(diff[2]))
        for c in range(3):
            if diff[c] == wp.float64(0.0):
                out[c] = wp.float64(0.0)
        if squared != 0:
            out = wp.float64(2.0) * (wp.abs(diff[0]) + wp.abs(diff[1]) + wp.abs(diff[2])) * out
    return out


@wp.func
def backward_point(
    q_cloud: wp.array2d(dtype=Any),
    p_cloud: wp.array2d(dtype=Any),
    idx: wp.array2d(dtype=wp.int64),
    grad_dist: wp.array2d(dtype=Any),
    grad_loss: wp.array(dtype=Any),
    q_lengths: wp.array(dtype=wp.int64),
    b: int,
    i: int,
    reduction: int,
    norm: int,
    squared: int,
    grad_q: wp.array2d(dtype=Any),
    grad_p: wp.array2d(dtype=Any),
):
    """Point ``i`` of ``q_cloud``'s cloud ``b`` and its neighbour: ``w * d dist / d q`` added to ``grad_q``
    (empty: not needed), subtracted from ``grad_p`` at the neighbour."""
    j = idx[b, i]
    if j >= wp.int64(0) and j < wp.int64(p_cloud.shape[1]):
        w = point_weight(grad_dist, grad_loss, q_lengths, b, i, q_cloud.shape[1], q_cloud.shape[0], reduction)
        q = q_cloud[b, i]
        p = p_cloud[b, int(j)]
        diff = wp.vec3d(
            wp.float64(q[0]) - wp.float64(p[0]),
            wp.float64(q[1]) - wp.float64(p[1]),
            wp.float64(q[2]) - wp.float64(p[2]),
        )
        step = w * distance_gradient(diff, norm, squared)
        if grad_q.shape[0] > 0:
            wp.atomic_add(grad_q, b, i, grad_q.dtype(step))
        if grad_p.shape[0] > 0:
            wp.atomic_sub(grad_p, b, int(j), grad_p.dtype(step))


def chamfer_backward(
    x: wp.array2d(dtype=Any),
    y: wp.array2d(dtype=Any),
    x_lengths: wp.array(dtype=wp.int64),
    y_lengths: wp.array(dtype=wp.int64),
    idx_xy: wp.array2d(dtype=wp.int64),
    idx_yx: wp.array2d(dtype=wp.int64),
    grad_dist_xy: wp.array2d(dtype=Any),
    grad_dist_yx: wp.array2d(dtype=Any),
    grad_loss: wp.array(dtype=Any),
    reduction: int,
    norm: int,
    squared: int,
    grad_x: wp.array2d(dtype=Any),
    grad_y: wp.array2d(dtype=Any),
):
    """Row ``b * N + i`` (x's points), then ``B * N + b * M + j`` (y's, where ``idx_yx`` has them): the
    gradient of the loss and distances through the point and its neighbour (into zeroed ``grad_*``)."""
    r = wp.tid()
    batch = x.shape[0]
    n = x.shape[1]
    m = idx_yx.shape[1]
    if r < batch * n:
        backward_point(
            x, y, idx_xy, grad_dist_xy, grad_loss, x_lengths, r // n, r % n, reduction, norm, squared, grad_x,
            grad_y,
        )  # fmt: skip
    elif m > 0:
        s = r - batch * n
        if s // m < idx_yx.shape[0] and m <= y.shape[1]:
            backward_point(
                y, x, idx_yx, grad_dist_yx, grad_loss, y_lengths, s // m, s % m, reduction, norm, squared,
                grad_y, grad_x,
            )  # fmt: skip


#: The Warp types of the generic parameters, per point precision (the table's keys): the shared clouds and
#: grids, the per-point distances, the loss and the gradients.
TYPES = {
    precision: {
        **GRID_TYPES[precision],
        **dict.fromkeys(
            ("out_dist_xy", "out_dist_yx", "dist_xy", "dist_yx", "grad_dist_xy", "grad_dist_yx"),
            wp.array2d(dtype=scalar),
        ),
        "out_loss": wp.array(dtype=scalar),
        "grad_loss": wp.array(dtype=scalar),
        "grad_x": wp.array2d(dtype=vec),
        "grad_y": wp.array2d(dtype=vec),
    }
    for precision, vec, scalar in (("float32", wp.vec3f, wp.float32), ("float64", wp.vec3d, wp.float64))
}

#: Forward and backward of a chamfer call, per precision: one Warp module (the grid builds and the scale
#: included).
CHAMFER = KernelTable(
    f"{__name__}.chamfer",
    (
        cloud_scale_rows,
        chamfer_grid_rows,
        chamfer_grid_block,
        chamfer_nearest,
        chamfer_loss_rows,
        chamfer_loss_block,
        chamfer_backward,
    ),
    TYPES,
    options=OPTIONS,
    block_dim=BUILD_BLOCK_DIM,
)
