"""Neighbour queries: k nearest neighbours and ball query, on a uniform grid of cells.

The grid (one per cloud of the batch) is built in three steps, all without a host read:

1. :func:`grid_setup` (a thread per cloud): from the cloud's bounding box (computed by the host with torch
   reductions), a cubic cell size and the cells per axis, at most ``cap`` cells in all (so the cell table
   is ``O(N)`` whatever the coordinates). Ball query asks for cells at least as large as the radius (a ball
   then touches at most 3 x 3 x 3 of them, 4 where rounding puts it on a boundary); kNN asks for cells that
   hold about ``POINTS_PER_CELL`` points at the cloud's mean density.
2. :func:`assign_cells`: the cell of every valid point (the invalid ones, beyond ``point_lengths``, get the
   sentinel ``cap`` and are left out of the grid).
3. A stable counting sort by cell: :func:`counting_sort_rows` on the CPU (a thread per cloud); on CUDA the
   host uses ``torch.sort(stable=True)`` + ``searchsorted`` and the same layout results: the points of cell
   ``c`` are ``sorted_points[b, cell_start[b, c] : cell_start[b, c + 1]]`` in ascending index order,
   ``sorted_index`` holds their original indices.

Queries (a thread per query row ``b * M + m``):

* :func:`ball_query_rows`: visits the cells the ball's bounding box overlaps (skipping those farther than
  the radius) and keeps the ``k`` smallest indices within the radius (pointnet2's "first k in index order").
  Cells list their points by ascending index, so once ``k`` are found a cell is left at the first index
  above the k-th.
* :func:`knn_rows`: visits shells of cells around the query's cell (Chebyshev rings 0, 1, 2, ...), skipping
  cells farther than the current k-th distance, and stops once every unvisited cell is farther than it.
  The candidates are ordered by (squared distance, index): ties go to the lowest index.
* :func:`ball_query_brute` / :func:`knn_brute`: the same answers by scanning every point in index order,
  for small clouds (no grid to build).

Each search is compiled apart, per point precision (:class:`KernelTable`): ``KNN_BRUTE``, ``KNN_GRID``,
``BALL_QUERY_BRUTE``, ``BALL_QUERY_GRID``, each ``table["float32" | "float64"].<kernel name>``, a Warp
module per entry created on first lookup (the grid kernels are compiled into both grid modules).

Distances are computed in float64 from the points' compute dtype (``vec3f`` or ``vec3d``: the difference of
two float32 values is exact in float64), so the order does not depend on the input dtype. Every cell
coordinate is clamped into the grid and NaN is mapped to cell 0, so no input can make a kernel read out of
bounds; a point whose coordinates a cell boundary splits by rounding is still found because the box
distances used for pruning subtract ``slack`` (a bound on the rounding of the cell assignment).
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels._table import KernelTable

#: Index written where a row has no (more) neighbours.
SENTINEL_INDEX = wp.constant(wp.int64(_constants.SENTINEL_INDEX))
#: Distance written with the sentinel index (and the squared distance of an empty slot while searching).
FAR = wp.constant(wp.float64(_constants.FAR))
#: Cells per axis never exceed this (cell ids stay far from int32 overflow).
MAX_CELLS_PER_AXIS = wp.constant(wp.float64(1048576.0))
#: Growth of the cell size while the grid has more than ``cap`` cells.
CELL_GROWTH = wp.constant(wp.float64(1.25))
#: Relative rounding slack: the cell of a point is computed as floor((x - origin) / cell) in float64.
REL_SLACK = wp.constant(wp.float64(1.0e-9))
#: ``grid_setup`` modes.
MODE_BALL = wp.constant(_constants.MODE_BALL)
MODE_KNN = wp.constant(_constants.MODE_KNN)


@wp.func
def valid_count(b: int, lengths: wp.array(dtype=wp.int64), n: int):
    """``lengths[b]`` clamped to ``[0, n]``; ``n`` where ``lengths`` is empty (or too short)."""
    out = n
    if b < lengths.shape[0]:
        out = int(wp.clamp(lengths[b], wp.int64(0), wp.int64(n)))
    return out


@wp.func
def finite_extent(x: wp.float64):
    """A box side: finite and >= 0, else 0 (NaN, inf and negative sides come from hostile input)."""
    out = wp.float64(0.0)
    if x >= wp.float64(0.0):  # noqa: SIM102
        if x < wp.float64(wp.inf):
            out = x
    return out


def grid_setup(
    lo: wp.array(dtype=wp.vec3d),
    hi: wp.array(dtype=wp.vec3d),
    lengths: wp.array(dtype=wp.int64),
    num_points: int,
    mode: int,
    cell_size: wp.array(dtype=wp.float64),
    points_per_cell: wp.float64,
    cap: int,
    origin: wp.array(dtype=wp.vec3d),
    inv_cell: wp.array(dtype=wp.float64),
    cell: wp.array(dtype=wp.float64),
    dims: wp.array2d(dtype=wp.int32),
    slack: wp.array(dtype=wp.float64),
):
    """A thread per cloud: cell size and cells per axis (product <= cap) for the box [lo, hi]. ``cell_size``
    (B,): the least cell width of a ball query (empty for kNN, whose cells follow the density)."""
    b = wp.tid()
    o = lo[b]
    ex = finite_extent(hi[b][0] - o[0])
    ey = finite_extent(hi[b][1] - o[1])
    ez = finite_extent(hi[b][2] - o[2])
    if not (wp.abs(o[0]) < wp.float64(wp.inf) and wp.abs(o[1]) < wp.float64(wp.inf)):
        o = wp.vec3d(0.0, 0.0, 0.0)
    if not (wp.abs(o[2]) < wp.float64(wp.inf)):
        o = wp.vec3d(0.0, 0.0, 0.0)
    longest = wp.max(ex, wp.max(ey, ez))
    size = wp.float64(0.0)
    if b < cell_size.shape[0]:
        size = cell_size[b]
    if mode == MODE_KNN:
        n = wp.float64(wp.max(valid_count(b, lengths, num_points), 1))
        # a flat (or straight) cloud has no volume: give each side at least a cell's share of the longest
        floor_side = longest / wp.pow(n, wp.float64(1.0) / wp.float64(3.0))
        volume = wp.max(ex, floor_side) * wp.max(ey, floor_side) * wp.max(ez, floor_side)
        size = wp.pow(volume * points_per_cell / n, wp.float64(1.0) / wp.float64(3.0))
    if not (size > wp.float64(0.0) and size < wp.float64(wp.inf)):
        size = wp.max(longest, wp.float64(1.0))
    size = wp.max(size, longest / MAX_CELLS_PER_AXIS)
    nx = wp.float64(1.0)
    ny = wp.float64(1.0)
    nz = wp.float64(1.0)
    for _ in range(2000):  # grows by 1.25 per step: 2000 steps span every float64 scale
        nx = wp.floor(ex / size) + wp.float64(1.0)
        ny = wp.floor(ey / size) + wp.float64(1.0)
        nz = wp.floor(ez / size) + wp.float64(1.0)
        if nx * ny * nz <= wp.float64(cap):
            break
        size = size * CELL_GROWTH
    if not (nx * ny * nz <= wp.float64(cap)):  # unreachable for finite sizes; one cell holds all then
        nx = wp.float64(1.0)
        ny = wp.float64(1.0)
        nz = wp.float64(1.0)
    origin[b] = o
    cell[b] = size
    inv_cell[b] = wp.float64(1.0) / size
    dims[b, 0] = int(nx)
    dims[b, 1] = int(ny)
    dims[b, 2] = int(nz)
    scale = wp.max(wp.max(wp.abs(o[0]), wp.abs(o[1])), wp.abs(o[2])) + longest
    slack[b] = REL_SLACK * (scale + size)


@wp.func
def cell_of(x: wp.float64, o: wp.float64, inv: wp.float64, d: int):
    """The cell of coordinate ``x`` along one axis, clamped into ``[0, d)``; NaN goes to 0."""
    f = (x - o) * inv
    if not (f >= wp.float64(0.0)):
        f = wp.float64(0.0)
    top = wp.float64(d - 1)
    if f > top:
        f = top
    return int(wp.floor(f))


@wp.func
def cell_id(cx: int, cy: int, cz: int, ny: int, nz: int):
    return (cx * ny + cy) * nz + cz


@wp.func
def grid_dims(dims: wp.array2d(dtype=wp.int32), b: int, cap: int):
    """Cells per axis of cloud ``b``, each >= 1, product <= cap (re-checked: nothing read is trusted)."""
    nx = wp.max(int(dims[b, 0]), 1)
    ny = wp.max(int(dims[b, 1]), 1)
    nz = wp.max(int(dims[b, 2]), 1)
    if wp.float64(nx) * wp.float64(ny) * wp.float64(nz) > wp.float64(cap):
        nx = 1
        ny = 1
        nz = 1
    return nx, ny, nz


def assign_cells(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    origin: wp.array(dtype=wp.vec3d),
    inv_cell: wp.array(dtype=wp.float64),
    dims: wp.array2d(dtype=wp.int32),
    cap: int,
    out_cell: wp.array2d(dtype=wp.int32),
):
    """``out_cell[b, i]``: the cell of point i, or ``cap`` for a point beyond ``lengths[b]``."""
    b, i = wp.tid()
    c = cap
    if i < valid_count(b, lengths, points.shape[1]):
        nx, ny, nz = grid_dims(dims, b, cap)
        p = points[b, i]
        o = origin[b]
        inv = inv_cell[b]
        cx = cell_of(wp.float64(p[0]), o[0], inv, nx)
        cy = cell_of(wp.float64(p[1]), o[1], inv, ny)
        cz = cell_of(wp.float64(p[2]), o[2], inv, nz)
        c = cell_id(cx, cy, cz, ny, nz)
    out_cell[b, i] = wp.int32(c)


def counting_sort_rows(
    points: wp.array2d(dtype=Any),
    cells: wp.array2d(dtype=wp.int32),
    cell_start: wp.array2d(dtype=wp.int32),
    sorted_points: wp.array2d(dtype=Any),
    sorted_index: wp.array2d(dtype=wp.int32),
    row_start: wp.int32,
):
    """A thread per cloud (the CPU path): stable counting sort of the points by cell.

    ``cell_start`` is ``(B, cap + 2)``; cells outside ``[0, cap)`` (the sentinel) are left out. Afterwards
    cell ``c`` holds ``sorted_*[b, cell_start[b, c] : cell_start[b, c + 1]]``, ascending original index.
    """
    b = wp.tid() + row_start
    n = points.shape[1]
    size = cell_start.shape[1]
    cap = size - 2
    for c in range(size):
        cell_start[b, c] = 0
    for i in range(n):
        c = int(cells[b, i])
        if c >= 0 and c < cap:
            cell_start[b, c + 2] = cell_start[b, c + 2] + 1
    for c in range(2, size):
        cell_start[b, c] = cell_start[b, c] + cell_start[b, c - 1]
    # cell_start[b, c + 1] is now where cell c begins; each placement moves it on by one, so that at the
    # end it is where cell c ends (= where cell c + 1 begins)
    for i in range(n):
        c = int(cells[b, i])
        if c >= 0 and c < cap:
            pos = int(cell_start[b, c + 1])
            sorted_points[b, pos] = points[b, i]
            sorted_index[b, pos] = wp.int32(i)
            cell_start[b, c + 1] = wp.int32(pos + 1)


@wp.func
def cell_range(b: int, c: int, cell_start: wp.array2d(dtype=wp.int32), n: int):
    """The sorted positions of cell ``c`` of cloud ``b``, clamped to ``[0, n]`` (empty if c is out of range)."""
    s = int(0)
    e = int(0)
    if c >= 0 and c + 1 < cell_start.shape[1]:
        s = wp.clamp(int(cell_start[b, c]), 0, n)
        e = wp.clamp(int(cell_start[b, c + 1]), s, n)
    return s, e


@wp.func
def axis_gap(q: wp.float64, o: wp.float64, size: wp.float64, c: int, slack: wp.float64):
    """Distance along one axis from ``q`` to cell ``c``'s slab, less the rounding slack (>= 0)."""
    lo = o + wp.float64(c) * size
    hi = lo + size
    g = wp.max(wp.max(lo - q, q - hi), wp.float64(0.0))
    return wp.max(g - slack, wp.float64(0.0))


@wp.func
def sq_dist(p: Any, q: wp.vec3d):
    dx = wp.float64(p[0]) - q[0]
    dy = wp.float64(p[1]) - q[1]
    dz = wp.float64(p[2]) - q[2]
    return dx * dx + dy * dy + dz * dz


@wp.func
def to_vec3d(p: Any):
    return wp.vec3d(wp.float64(p[0]), wp.float64(p[1]), wp.float64(p[2]))


@wp.func
def finite3(q: wp.vec3d):
    ok = wp.abs(q[0]) < wp.float64(wp.inf) and wp.abs(q[1]) < wp.float64(wp.inf)
    return ok and wp.abs(q[2]) < wp.float64(wp.inf)


# --------------------------------------------------------------------------------------------------------
# ball query
# --------------------------------------------------------------------------------------------------------


@wp.func
def insert_index(out_idx: wp.array3d(dtype=wp.int64), b: int, m: int, count: int, i: wp.int64):
    """Insert ``i`` into the ascending ``out_idx[b, m, :count]`` (dropping the largest when full)."""
    k = out_idx.shape[2]
    pos = count
    if count == k:
        pos = k - 1
    else:
        count += 1
    while pos > 0:
        prev = out_idx[b, m, pos - 1]
        if prev > i:
            out_idx[b, m, pos] = prev
            pos -= 1
        else:
            break
    out_idx[b, m, pos] = i
    return count


@wp.func
def within(d2: wp.float64, r2: wp.float64, inclusive: int):
    ok = d2 < r2
    if inclusive != 0:
        ok = d2 <= r2
    return ok


@wp.func
def ball_radius(radius: wp.array(dtype=wp.float64), b: int):
    """Cloud ``b``'s radius (in the units of its points: float64 clouds are scaled by a power of two, and the
    radius with them); NaN (no point within) if ``radius`` is too short."""
    out = wp.float64(wp.nan)
    if b < radius.shape[0]:
        out = radius[b]
    return out


@wp.func
def pad_indices(out_idx: wp.array3d(dtype=wp.int64), b: int, m: int, count: int):
    for j in range(count, out_idx.shape[2]):
        out_idx[b, m, j] = SENTINEL_INDEX


def ball_query_rows(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    sorted_points: wp.array2d(dtype=Any),
    sorted_index: wp.array2d(dtype=wp.int32),
    cell_start: wp.array2d(dtype=wp.int32),
    origin: wp.array(dtype=wp.vec3d),
    inv_cell: wp.array(dtype=wp.float64),
    cell: wp.array(dtype=wp.float64),
    dims: wp.array2d(dtype=wp.int32),
    slack: wp.array(dtype=wp.float64),
    radius: wp.array(dtype=wp.float64),
    inclusive: int,
    out_idx: wp.array3d(dtype=wp.int64),
    row_start: wp.int32,
):
    """Row ``b * M + m``: the k smallest indices within ``radius[b]`` of query m, ascending, then -1."""
    r = wp.tid() + row_start
    num_queries = queries.shape[1]
    b = r // num_queries
    m = r % num_queries
    k = out_idx.shape[2]
    n = sorted_points.shape[1]
    count = int(0)
    if m < valid_count(b, query_lengths, num_queries):
        q = to_vec3d(queries[b, m])
        if finite3(q):
            nx, ny, nz = grid_dims(dims, b, cell_start.shape[1] - 2)
            o = origin[b]
            inv = inv_cell[b]
            size = cell[b]
            sl = slack[b]
            rb = ball_radius(radius, b)
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
                                if count == k:  # noqa: SIM102
                                    if i > out_idx[b, m, k - 1]:
                                        break  # this cell's later points have larger indices still
                                if within(sq_dist(sorted_points[b, j], q), r2, inclusive):
                                    count = insert_index(out_idx, b, m, count, i)
    pad_indices(out_idx, b, m, count)


def ball_query_brute(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    points: wp.array2d(dtype=Any),
    point_lengths: wp.array(dtype=wp.int64),
    radius: wp.array(dtype=wp.float64),
    inclusive: int,
    out_idx: wp.array3d(dtype=wp.int64),
    row_start: wp.int32,
):
    """Row ``b * M + m`` by a scan of the points in index order, stopping at k hits (small clouds)."""
    r = wp.tid() + row_start
    num_queries = queries.shape[1]
    b = r // num_queries
    m = r % num_queries
    k = out_idx.shape[2]
    count = int(0)
    if m < valid_count(b, query_lengths, num_queries):
        q = to_vec3d(queries[b, m])
        rb = ball_radius(radius, b)
        r2 = rb * rb
        n = valid_count(b, point_lengths, points.shape[1])
        for i in range(n):
            if count < k:  # noqa: SIM102
                if within(sq_dist(points[b, i], q), r2, inclusive):
                    out_idx[b, m, count] = wp.int64(i)
                    count += 1
    pad_indices(out_idx, b, m, count)


# --------------------------------------------------------------------------------------------------------
# k nearest neighbours
# --------------------------------------------------------------------------------------------------------


@wp.func
def insert_neighbour(
    out_idx: wp.array3d(dtype=wp.int64),
    out_d2: wp.array3d(dtype=wp.float64),
    b: int,
    m: int,
    count: int,
    i: wp.int64,
    d2: wp.float64,
):
    """Insert ``(d2, i)`` into the row kept ascending by (squared distance, index); the caller has checked
    that it beats the last entry when the row is full."""
    k = out_idx.shape[2]
    pos = count
    if count == k:
        pos = k - 1
    else:
        count += 1
    while pos > 0:
        pd = out_d2[b, m, pos - 1]
        pi = out_idx[b, m, pos - 1]
        if pd > d2 or (pd == d2 and pi > i):
            out_d2[b, m, pos] = pd
            out_idx[b, m, pos] = pi
            pos -= 1
        else:
            break
    out_d2[b, m, pos] = d2
    out_idx[b, m, pos] = i
    return count


@wp.func
def beats_last(
    out_idx: wp.array3d(dtype=wp.int64),
    out_d2: wp.array3d(dtype=wp.float64),
    b: int,
    m: int,
    count: int,
    i: wp.int64,
    d2: wp.float64,
):
    """Does ``(d2, i)`` enter the row? Always while it has free slots; NaN distances never do."""
    k = out_idx.shape[2]
    ok = d2 == d2
    if count == k:
        wd = out_d2[b, m, k - 1]
        ok = d2 < wd or (d2 == wd and i < out_idx[b, m, k - 1])
    return ok


@wp.func
def finish_knn(
    out_idx: wp.array3d(dtype=wp.int64), out_d2: wp.array3d(dtype=wp.float64), b: int, m: int, count: int
):
    """Squared distances -> distances; free slots -> (-1, inf)."""
    for j in range(out_idx.shape[2]):
        if j < count:
            out_d2[b, m, j] = wp.sqrt(out_d2[b, m, j])
        else:
            out_d2[b, m, j] = FAR
            out_idx[b, m, j] = SENTINEL_INDEX


def knn_rows(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    sorted_points: wp.array2d(dtype=Any),
    sorted_index: wp.array2d(dtype=wp.int32),
    cell_start: wp.array2d(dtype=wp.int32),
    origin: wp.array(dtype=wp.vec3d),
    inv_cell: wp.array(dtype=wp.float64),
    cell: wp.array(dtype=wp.float64),
    dims: wp.array2d(dtype=wp.int32),
    slack: wp.array(dtype=wp.float64),
    out_idx: wp.array3d(dtype=wp.int64),
    out_d2: wp.array3d(dtype=wp.float64),
    row_start: wp.int32,
):
    """Row ``b * M + m``: the k nearest points of query m by (distance, index), then (-1, inf)."""
    r = wp.tid() + row_start
    num_queries = queries.shape[1]
    b = r // num_queries
    m = r % num_queries
    k = out_idx.shape[2]
    n = sorted_points.shape[1]
    count = int(0)
    if m < valid_count(b, query_lengths, num_queries):
        q = to_vec3d(queries[b, m])
        nx, ny, nz = grid_dims(dims, b, cell_start.shape[1] - 2)
        o = origin[b]
        inv = inv_cell[b]
        size = cell[b]
        sl = slack[b]
        qx = cell_of(q[0], o[0], inv, nx)
        qy = cell_of(q[1], o[1], inv, ny)
        qz = cell_of(q[2], o[2], inv, nz)
        last = wp.max(wp.max(wp.max(qx, nx - 1 - qx), wp.max(qy, ny - 1 - qy)), wp.max(qz, nz - 1 - qz))
        s = int(0)
        while s <= last:
            x0 = wp.max(qx - s, 0)
            x1 = wp.min(qx + s, nx - 1)
            y0 = wp.max(qy - s, 0)
            y1 = wp.min(qy + s, ny - 1)
            for cx in range(x0, x1 + 1):
                gx = axis_gap(q[0], o[0], size, cx, sl)
                for cy in range(y0, y1 + 1):
                    gy = axis_gap(q[1], o[1], size, cy, sl)
                    # inside the ring's x-y outline only its top and bottom cells are on the shell
                    cz = wp.max(qz - s, 0)
                    z_end = wp.min(qz + s, nz - 1)
                    step = int(1)
                    if wp.abs(cx - qx) != s and wp.abs(cy - qy) != s:
                        cz = qz - s
                        z_end = qz + s
                        step = 2 * s
                    while cz <= z_end:
                        if cz >= 0 and cz < nz:
                            gz = axis_gap(q[2], o[2], size, cz, sl)
                            gap2 = gx * gx + gy * gy + gz * gz
                            visit = True
                            if count == k:
                                visit = gap2 <= out_d2[b, m, k - 1]
                            if visit:
                                cs, ce = cell_range(b, cell_id(cx, cy, cz, ny, nz), cell_start, n)
                                for j in range(cs, ce):
                                    i = wp.int64(sorted_index[b, j])
                                    d2 = sq_dist(sorted_points[b, j], q)
                                    if beats_last(out_idx, out_d2, b, m, count, i, d2):
                                        count = insert_neighbour(out_idx, out_d2, b, m, count, i, d2)
                        cz += step
            # every cell not yet visited lies beyond a face of the block of rings 0..s
            bound = wp.float64(wp.inf)
            if qx - s > 0:
                bound = wp.min(bound, q[0] - (o[0] + wp.float64(qx - s) * size))
            if qx + s < nx - 1:
                bound = wp.min(bound, o[0] + wp.float64(qx + s + 1) * size - q[0])
            if qy - s > 0:
                bound = wp.min(bound, q[1] - (o[1] + wp.float64(qy - s) * size))
            if qy + s < ny - 1:
                bound = wp.min(bound, o[1] + wp.float64(qy + s + 1) * size - q[1])
            if qz - s > 0:
                bound = wp.min(bound, q[2] - (o[2] + wp.float64(qz - s) * size))
            if qz + s < nz - 1:
                bound = wp.min(bound, o[2] + wp.float64(qz + s + 1) * size - q[2])
            bound = bound - sl
            if count == k and bound > wp.float64(0.0):  # noqa: SIM102
                if out_d2[b, m, k - 1] < bound * bound:
                    break
            s += 1
    finish_knn(out_idx, out_d2, b, m, count)


def knn_brute(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    points: wp.array2d(dtype=Any),
    point_lengths: wp.array(dtype=wp.int64),
    out_idx: wp.array3d(dtype=wp.int64),
    out_d2: wp.array3d(dtype=wp.float64),
    row_start: wp.int32,
):
    """Row ``b * M + m`` by a scan of every valid point (small clouds)."""
    r = wp.tid() + row_start
    num_queries = queries.shape[1]
    b = r // num_queries
    m = r % num_queries
    count = int(0)
    if m < valid_count(b, query_lengths, num_queries):
        q = to_vec3d(queries[b, m])
        n = valid_count(b, point_lengths, points.shape[1])
        for i in range(n):
            d2 = sq_dist(points[b, i], q)
            if beats_last(out_idx, out_d2, b, m, count, wp.int64(i), d2):
                count = insert_neighbour(out_idx, out_d2, b, m, count, wp.int64(i), d2)
    finish_knn(out_idx, out_d2, b, m, count)


# --------------------------------------------------------------------------------------------------------
# Warp modules
# --------------------------------------------------------------------------------------------------------

#: Options of every neighbour kernel module: warpgeo writes every backward itself (no adjoints: half the
#: compile time).
OPTIONS = {"enable_backward": False}
#: The Warp types of the point arrays, per point precision (the keys of every neighbour kernel table); each
#: kernel takes those it has.
TYPES = {
    precision: dict.fromkeys(("queries", "points", "sorted_points"), wp.array2d(dtype=vec))
    for precision, vec in (("float32", wp.vec3f), ("float64", wp.vec3d))
}
#: The grid kernels every grid search launches (``counting_sort_rows`` on the CPU only: CUDA sorts with
#: torch).
_GRID = (grid_setup, assign_cells, counting_sort_rows)

#: Small clouds: a scan of every point (one kernel).
KNN_BRUTE = KernelTable(f"{__name__}.knn_brute", (knn_brute,), TYPES, options=OPTIONS)
BALL_QUERY_BRUTE = KernelTable(f"{__name__}.ball_query_brute", (ball_query_brute,), TYPES, options=OPTIONS)
#: Larger clouds: the grid (built per call) and the search over it.
KNN_GRID = KernelTable(f"{__name__}.knn_grid", (*_GRID, knn_rows), TYPES, options=OPTIONS)
BALL_QUERY_GRID = KernelTable(
    f"{__name__}.ball_query_grid", (*_GRID, ball_query_rows), TYPES, options=OPTIONS
)
