"""Neighbour queries: k nearest neighbours and ball query, by a scan of small clouds or on a grid of cells.

The grid, the float64 scale and the kNN searches are the shared room ``warpgeo/_kernels/grid.py`` (a cloud's
grid travels as one :data:`~warpgeo._kernels.grid.GRID` struct). Queries here (a thread per query row
``b * M + m``), on the grid or by a scan (small clouds: one launch in all):

* ball query: the ``k`` smallest indices within the radius (pointnet2's "first k in index order");
* kNN: shells of cells around the query's cell (Chebyshev rings 0, 1, 2, ...), skipping cells farther than
  the current k-th distance, stopping once every unvisited cell is farther than it; candidates ordered by
  (squared distance, index): ties go to the lowest index. The row's list is kept in ``work_d2`` /
  ``work_idx`` (float64 squared distances); the distances are written at the end into ``out_dist`` in the
  output's own dtype.
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.grid import (
    BUILD_BLOCK_DIM,
    OPTIONS,
    P_CELL,
    P_INV,
    P_SLACK,
    REL_SLACK,
    axis_gap,
    cell_id,
    cell_of,
    cell_range,
    cloud_scale_rows,
    factors,
    finite3,
    grid_build_block,
    grid_build_rows,
    grid_dims,
    knn_search_brute,
    knn_search_grid,
    origin_of,
    scaled_point,
    sq_dist,
    to_vec3d,
    valid_count,
)
from warpgeo._kernels.grid import TYPES as GRID_TYPES

#: Index written where a row has no (more) neighbours.
SENTINEL_INDEX = wp.constant(wp.int64(_constants.SENTINEL_INDEX))
#: Distance written with the sentinel index.
FAR = wp.constant(wp.float64(_constants.FAR))


# --------------------------------------------------------------------------------------------------------
# ball query
# --------------------------------------------------------------------------------------------------------


@wp.func
def insert_index(out_idx: wp.array2d(dtype=wp.int64), row: int, count: int, i: wp.int64):
    """Insert ``i`` into the ascending ``out_idx[row, :count]`` (dropping the largest when full)."""
    k = out_idx.shape[1]
    pos = count
    if count == k:
        pos = k - 1
    else:
        count += 1
    while pos > 0:
        prev = out_idx[row, pos - 1]
        if prev > i:
            out_idx[row, pos] = prev
            pos -= 1
        else:
            break
    out_idx[row, pos] = i
    return count


@wp.func
def within(d2: wp.float64, r2: wp.float64, inclusive: int):
    ok = d2 < r2
    if inclusive != 0:
        ok = d2 <= r2
    return ok


@wp.func
def pad_indices(out_idx: wp.array2d(dtype=wp.int64), row: int, count: int):
    for j in range(count, out_idx.shape[1]):
        out_idx[row, j] = SENTINEL_INDEX


def ball_query_rows(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    grid: Any,
    radius: wp.float64,
    inclusive: int,
    ordered: int,
    out_idx: wp.array2d(dtype=wp.int64),
    row_start: wp.int32,
):
    """Row ``b * M + m``: the k smallest indices within ``radius`` (scaled with the cloud) of query m,
    ascending, then -1. ``ordered``: each cell lists its points by ascending index (the CPU's counting sort),
    so a full row leaves a cell at its first index above the k-th."""
    sorted_points = grid.sorted_points
    sorted_index = grid.sorted_index
    cell_start = grid.cell_start
    params = grid.params
    dims = grid.dims
    r = wp.tid() + row_start
    num_queries = queries.shape[1]
    b = r // num_queries
    m = r % num_queries
    k = out_idx.shape[1]
    n = sorted_points.shape[1]
    count = int(0)
    if m < valid_count(b, query_lengths, num_queries):
        f1, f2, _g1, _g2 = factors(params, b)
        q = scaled_point(queries[b, m], f1, f2)
        if finite3(q):
            nx, ny, nz = grid_dims(dims, b, cell_start.shape[1] - 2)
            o = origin_of(params, b)
            inv = params[b, P_INV]
            size = params[b, P_CELL]
            sl = params[b, P_SLACK]
            rb = radius * f1 * f2  # inf where it overflows: every point is in the ball
            r2 = rb * rb
            # the box [q - reach, q + reach]: a hair wider than the ball, for the rounding of q +- radius
            reach = rb * (wp.float64(1.0) + REL_SLACK) + sl
            x0 = cell_of(q[0] - reach, o[0], inv, nx)
            x1 = cell_of(q[0] + reach, o[0], inv, nx)
            y0 = cell_of(q[1] - reach, o[1], inv, ny)
            y1 = cell_of(q[1] + reach, o[1], inv, ny)
            z0 = cell_of(q[2] - reach, o[2], inv, nz)
            z1 = cell_of(q[2] + reach, o[2], inv, nz)
            for cx in range(x0, x1 + 1):
                gx = axis_gap(q[0], o[0], size, cx, sl)
                for cy in range(y0, y1 + 1):
                    gy = axis_gap(q[1], o[1], size, cy, sl)
                    for cz in range(z0, z1 + 1):
                        gz = axis_gap(q[2], o[2], size, cz, sl)
                        if gx * gx + gy * gy + gz * gz <= r2:
                            s, e = cell_range(b, cell_id(cx, cy, cz, ny, nz), cell_start, n)
                            for j in range(s, e):
                                i = wp.int64(sorted_index[b, j])
                                take = True
                                if count == k:  # noqa: SIM102
                                    if i > out_idx[r, k - 1]:
                                        if ordered != 0:
                                            break  # this cell's later points have larger indices still
                                        take = False
                                if take:  # noqa: SIM102
                                    if within(sq_dist(to_vec3d(sorted_points[b, j]), q), r2, inclusive):
                                        count = insert_index(out_idx, r, count, i)
    pad_indices(out_idx, r, count)


def ball_query_brute(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    points: wp.array2d(dtype=Any),
    point_lengths: wp.array(dtype=wp.int64),
    params: wp.array2d(dtype=wp.float64),
    radius: wp.float64,
    inclusive: int,
    out_idx: wp.array2d(dtype=wp.int64),
    row_start: wp.int32,
):
    """Row ``b * M + m`` by a scan of the points in index order, stopping at k hits (small clouds)."""
    r = wp.tid() + row_start
    num_queries = queries.shape[1]
    b = r // num_queries
    m = r % num_queries
    k = out_idx.shape[1]
    count = int(0)
    if m < valid_count(b, query_lengths, num_queries):
        f1, f2, _g1, _g2 = factors(params, b)
        q = scaled_point(queries[b, m], f1, f2)
        rb = radius * f1 * f2
        r2 = rb * rb
        n = valid_count(b, point_lengths, points.shape[1])
        unit = f1 == wp.float64(1.0) and f2 == wp.float64(1.0)  # float32: no scale, no multiplications
        for i in range(n):
            if count < k:
                p = to_vec3d(points[b, i])
                if not unit:
                    p = p * f1 * f2
                if within(sq_dist(p, q), r2, inclusive):
                    out_idx[r, count] = wp.int64(i)
                    count += 1
    pad_indices(out_idx, r, count)


# --------------------------------------------------------------------------------------------------------
# k nearest neighbours
# --------------------------------------------------------------------------------------------------------


@wp.func
def finish_knn(
    work_idx: wp.array2d(dtype=wp.int64),
    work_d2: wp.array2d(dtype=wp.float64),
    out_dist: wp.array2d(dtype=Any),
    row: int,
    count: int,
    g1: wp.float64,
    g2: wp.float64,
):
    """Squared distances -> distances in the caller's units and ``out_dist``'s dtype; free slots -> (-1, inf).
    ``out_dist`` may be ``work_d2`` itself (float64)."""
    for j in range(work_idx.shape[1]):
        if j < count:
            out_dist[row, j] = out_dist.dtype(wp.sqrt(work_d2[row, j]) * g1 * g2)
        else:
            out_dist[row, j] = out_dist.dtype(FAR)
            work_idx[row, j] = SENTINEL_INDEX


def knn_rows(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    grid: Any,
    work_d2: wp.array2d(dtype=wp.float64),
    out_idx: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
    row_start: wp.int32,
):
    """Row ``b * M + m``: the k nearest points of query m by (distance, index), then (-1, inf)."""
    r = wp.tid() + row_start
    num_queries = queries.shape[1]
    b = r // num_queries
    m = r % num_queries
    count = int(0)
    f1, f2, g1, g2 = factors(grid.params, b)
    if m < valid_count(b, query_lengths, num_queries):
        q = scaled_point(queries[b, m], f1, f2)
        count = knn_search_grid(q, b, r, grid, out_idx, work_d2)
    finish_knn(out_idx, work_d2, out_dist, r, count, g1, g2)


def knn_brute(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    points: wp.array2d(dtype=Any),
    point_lengths: wp.array(dtype=wp.int64),
    params: wp.array2d(dtype=wp.float64),
    work_d2: wp.array2d(dtype=wp.float64),
    out_idx: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
    row_start: wp.int32,
):
    """Row ``b * M + m`` by a scan of every valid point (small clouds)."""
    r = wp.tid() + row_start
    num_queries = queries.shape[1]
    b = r // num_queries
    m = r % num_queries
    count = int(0)
    f1, f2, g1, g2 = factors(params, b)
    if m < valid_count(b, query_lengths, num_queries):
        q = scaled_point(queries[b, m], f1, f2)
        n = valid_count(b, point_lengths, points.shape[1])
        count = knn_search_brute(q, b, r, points, n, f1, f2, out_idx, work_d2)
    finish_knn(out_idx, work_d2, out_dist, r, count, g1, g2)


# --------------------------------------------------------------------------------------------------------
# Warp modules
# --------------------------------------------------------------------------------------------------------

#: The Warp types of the generic parameters, per point precision (the keys of every neighbour kernel
#: table): the shared clouds and grids, and the distances in the compute precision.
TYPES = {
    precision: {**GRID_TYPES[precision], "out_dist": wp.array2d(dtype=scalar)}
    for precision, scalar in (("float32", wp.float32), ("float64", wp.float64))
}
#: The grid builds every grid search launches (rows on the CPU, a block per cloud on CUDA).
_GRID = (grid_build_rows, grid_build_block)

#: Small clouds: a scan of every point (one kernel; float64 clouds first get their scale).
KNN_BRUTE = KernelTable(f"{__name__}.knn_brute", (cloud_scale_rows, knn_brute), TYPES, options=OPTIONS)
BALL_QUERY_BRUTE = KernelTable(
    f"{__name__}.ball_query_brute", (cloud_scale_rows, ball_query_brute), TYPES, options=OPTIONS
)
#: Larger clouds: the grid (built per call, one launch) and the search over it.
KNN_GRID = KernelTable(
    f"{__name__}.knn_grid", (*_GRID, knn_rows), TYPES, options=OPTIONS, block_dim=BUILD_BLOCK_DIM
)
BALL_QUERY_GRID = KernelTable(
    f"{__name__}.ball_query_grid",
    (*_GRID, ball_query_rows),
    TYPES,
    options=OPTIONS,
    block_dim=BUILD_BLOCK_DIM,
)
