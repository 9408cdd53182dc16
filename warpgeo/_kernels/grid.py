"""The neighbour grid of a point cloud, shared by kNN, ball query and chamfer distance (pure Warp).

Per cloud ``b`` of the batch, a :data:`GRID` struct (one per precision) holds the cloud's arrays:

* ``params[b]`` (``PARAMS`` float64): the grid's origin, ``1 / cell``, ``cell`` and rounding ``slack``, and the
  float64 scale ``f1 * f2`` (a power of two in two exact factors: the coordinates are multiplied by it as
  they are read, so that squared distances neither overflow nor underflow) with its inverse ``g1 * g2``
  (distances go back to the caller's units). float32 clouds are not scaled (their squared distances fit
  float64);
* ``dims[b]``: cells per axis; ``cell_start[b]`` ``(cap + 2)``: the points of cell ``c`` are
  ``sorted_points[b, cell_start[b, c] : cell_start[b, c + 1]]`` (in the compute precision, float64 ones
  scaled), their original indices in ``sorted_index``; ``rank``: scratch of the CUDA build ((0, 0) on the
  CPU).

The grid is built by **one launch**, without a host read and without torch:

* :func:`build_rows` (the CPU): a thread per cloud: the scale, the box of the valid points, the cell size
  (:func:`grid_layout`: at most ``cap`` cells, ``cap`` the power of two >= N, so the table is ``O(N)``
  whatever the coordinates; ball query asks for cells of half a radius, kNN for ``points_per_cell`` points a
  cell at the cloud's mean density) and a stable counting sort by cell;
* :func:`build_block` (CUDA): a block per cloud: the scale and the box by block reductions, a cell histogram
  with atomics (each point keeps its rank in its cell), one scan of the histogram, the scatter. A cell's
  points are then in no particular order (the atomics'): kNN orders by (distance, index) anyway, and the
  ball query keeps the ``k`` smallest indices whatever the order it meets them in.

The kNN searches (:func:`knn_search_grid`, :func:`knn_search_brute`) take the row's list as 2-D arrays
``(rows, k)`` (float64 squared distances: the order never depends on the output dtype), so chamfer distance
runs them with ``k = 1``. Every cell coordinate is clamped into the grid and NaN is mapped to cell 0, so no
input can make a kernel read out of bounds; a point whose coordinates a cell boundary splits by rounding is
still found because the box distances used for pruning subtract ``slack``.
"""

from typing import Any

import warp as wp

from warpgeo import _constants

#: Cells per axis never exceed this (cell ids stay far from int32 overflow).
MAX_CELLS_PER_AXIS = wp.constant(wp.float64(1048576.0))
#: Growth of the cell size while the grid has more than ``cap`` cells.
CELL_GROWTH = wp.constant(wp.float64(1.25))
#: Relative rounding slack: the cell of a point is computed as floor((x - origin) / cell) in float64.
REL_SLACK = wp.constant(wp.float64(1.0e-9))
#: ``grid_layout`` modes.
MODE_BALL = wp.constant(_constants.MODE_BALL)
MODE_KNN = wp.constant(_constants.MODE_KNN)
#: float64 clouds are scaled by the power of two that brings the largest |coordinate| of the cloud, its
#: queries and points together, into [2**(e - 1), 2**e) for this e (as FPS does): squared distances and
#: their sums then neither overflow nor lose the small ones to underflow (1e-300 .. 1e308).
SCALED_EXPONENT = wp.constant(509)

#: ``params[b, :]``: origin x, y, z, 1 / cell, cell, slack, f1, f2 (scale), g1, g2 (unscale).
PARAMS = 10
P_INV = wp.constant(3)
P_CELL = wp.constant(4)
P_SLACK = wp.constant(5)
P_F1 = wp.constant(6)
P_F2 = wp.constant(7)
P_G1 = wp.constant(8)
P_G2 = wp.constant(9)


def _grid_struct(name: str, vec: Any) -> Any:
    """The ``@wp.struct`` of one cloud batch's grid, its points of vector type ``vec``."""
    fields = {
        "params": wp.array2d(dtype=wp.float64),
        "dims": wp.array2d(dtype=wp.int32),
        "cell_start": wp.array2d(dtype=wp.int32),
        "sorted_points": wp.array2d(dtype=vec),
        "sorted_index": wp.array2d(dtype=wp.int32),
        "rank": wp.array2d(dtype=wp.int32),
    }
    return wp.struct(
        type(name, (), {"__annotations__": fields, "__module__": __name__, "__qualname__": name})
    )


#: The grid struct per point precision (the key of every neighbour kernel table).
GRID = {"float32": _grid_struct("GridF32", wp.vec3f), "float64": _grid_struct("GridF64", wp.vec3d)}
#: The array fields of :data:`GRID`, in order (the torch side allocates them by these names).
GRID_FIELDS = ("params", "dims", "cell_start", "sorted_points", "sorted_index", "rank")
#: Options of every neighbour kernel module: warpgeo writes every backward itself (no adjoints: half the
#: compile time).
OPTIONS = {"enable_backward": False}
#: Threads per block of the CUDA grid build (a block per cloud).
BUILD_BLOCK_DIM = 256
#: The Warp types of the clouds and grids every neighbour kernel table shares, per point precision; each
#: kernel module adds its own.
TYPES = {
    precision: {
        **dict.fromkeys(("queries", "points", "x", "y"), wp.array2d(dtype=vec)),
        **dict.fromkeys(("grid", "grid_x", "grid_y"), GRID[precision]),
    }
    for precision, vec in (("float32", wp.vec3f), ("float64", wp.vec3d))
}


@wp.func
def valid_count(b: int, lengths: wp.array(dtype=wp.int64), n: int):
    """``lengths[b]`` clamped to ``[0, n]``; ``n`` where ``lengths`` is empty (or too short)."""
    out = n
    if b < lengths.shape[0]:
        out = int(wp.clamp(lengths[b], wp.int64(0), wp.int64(n)))
    return out


# --------------------------------------------------------------------------------------------------------
# the float64 scale: exact powers of two
# --------------------------------------------------------------------------------------------------------


@wp.func
def frexp_exponent(x: wp.float64):
    """``e`` with ``x = m * 2**e``, ``m`` in [0.5, 1) (as ``torch.frexp``) for finite ``x > 0``; 0 for 0, NaN
    and inf. Halving and doubling are exact (subnormals included)."""
    e = int(0)
    if x > wp.float64(0.0) and x < wp.float64(wp.inf):
        y = x
        while y >= wp.float64(1.0):
            y = y * wp.float64(0.5)
            e += 1
        while y < wp.float64(0.5):
            y = y * wp.float64(2.0)
            e -= 1
    return e


@wp.func
def pow2(e: int):
    """``2.0 ** e`` exactly, for ``-1074 <= e <= 1023``."""
    out = wp.float64(1.0)
    if e >= 0:
        for _ in range(e):
            out = out * wp.float64(2.0)
    else:
        for _ in range(-e):
            out = out * wp.float64(0.5)
    return out


@wp.func
def scale_factors(top: wp.float64):
    """For a cloud whose largest |coordinate| is ``top``: ``(f1, f2, g1, g2)``, ``f1 * f2 = 2**shift`` that
    brings ``top`` to ``[2**(SCALED_EXPONENT - 1), 2**SCALED_EXPONENT)`` and ``g1 * g2 = 2**-shift``, each a
    factor of two in range (``2**shift`` itself may not be)."""
    shift = SCALED_EXPONENT - frexp_exponent(top)
    h = shift // 2  # floor division
    back = -shift
    h2 = back // 2
    return pow2(h), pow2(shift - h), pow2(h2), pow2(back - h2)


@wp.func
def rows_top(x: wp.array2d(dtype=Any), b: int, count: int, first: int, stride: int):
    """The largest |coordinate| of rows ``first, first + stride, ...`` below ``count`` of cloud ``b``."""
    top = wp.float64(0.0)
    for i in range(first, count, stride):
        p = x[b, i]
        top = wp.max(top, wp.max(wp.abs(wp.float64(p[0])), wp.abs(wp.float64(p[1]))))
        top = wp.max(top, wp.abs(wp.float64(p[2])))
    return top


@wp.func
def write_scale(params: wp.array2d(dtype=wp.float64), b: int, scaled: int, top: wp.float64):
    """``params[b]``'s scale (``scaled``: float64 clouds) or ones."""
    f1 = wp.float64(1.0)
    f2 = wp.float64(1.0)
    g1 = wp.float64(1.0)
    g2 = wp.float64(1.0)
    if scaled != 0:
        f1, f2, g1, g2 = scale_factors(top)
    params[b, P_F1] = f1
    params[b, P_F2] = f2
    params[b, P_G1] = g1
    params[b, P_G2] = g2


@wp.func
def factors(params: wp.array2d(dtype=wp.float64), b: int):
    """Cloud ``b``'s ``(f1, f2, g1, g2)``; ones where ``params`` is empty (float32: not scaled)."""
    f1 = wp.float64(1.0)
    f2 = wp.float64(1.0)
    g1 = wp.float64(1.0)
    g2 = wp.float64(1.0)
    if b < params.shape[0]:
        f1 = params[b, P_F1]
        f2 = params[b, P_F2]
        g1 = params[b, P_G1]
        g2 = params[b, P_G2]
    return f1, f2, g1, g2


@wp.func
def to_vec3d(p: Any):
    return wp.vec3d(wp.float64(p[0]), wp.float64(p[1]), wp.float64(p[2]))


@wp.func
def scaled_point(p: Any, f1: wp.float64, f2: wp.float64):
    """``p`` in float64 times ``f1 * f2`` (one factor at a time: exact)."""
    return wp.vec3d(wp.float64(p[0]), wp.float64(p[1]), wp.float64(p[2])) * f1 * f2


def cloud_scale_rows(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    points: wp.array2d(dtype=Any),
    point_lengths: wp.array(dtype=wp.int64),
    params: wp.array2d(dtype=wp.float64),
    row_start: wp.int32,
):
    """A thread per cloud: ``params[b]``'s scale from the valid queries and points (float64 scans)."""
    b = wp.tid() + row_start
    m = valid_count(b, query_lengths, queries.shape[1])
    n = valid_count(b, point_lengths, points.shape[1])
    top = wp.max(rows_top(queries, b, m, 0, 1), rows_top(points, b, n, 0, 1))
    write_scale(params, b, 1, top)


# --------------------------------------------------------------------------------------------------------
# the grid
# --------------------------------------------------------------------------------------------------------


@wp.func
def finite_extent(x: wp.float64):
    """A box side: finite and >= 0, else 0 (NaN, inf and negative sides come from hostile input)."""
    out = wp.float64(0.0)
    if x >= wp.float64(0.0):  # noqa: SIM102
        if x < wp.float64(wp.inf):
            out = x
    return out


@wp.func
def grid_layout(
    lo: wp.vec3d,
    hi: wp.vec3d,
    count: int,
    mode: int,
    cell_size: wp.float64,
    points_per_cell: wp.float64,
    cap: int,
):
    """Origin, cell size, cells per axis (product <= cap) and rounding slack for the box [lo, hi] of
    ``count`` points; ``cell_size``: the least cell width (ball query; kNN's cells follow the density)."""
    o = lo
    ex = finite_extent(hi[0] - o[0])
    ey = finite_extent(hi[1] - o[1])
    ez = finite_extent(hi[2] - o[2])
    if not (wp.abs(o[0]) < wp.float64(wp.inf) and wp.abs(o[1]) < wp.float64(wp.inf)):
        o = wp.vec3d(0.0, 0.0, 0.0)
    if not (wp.abs(o[2]) < wp.float64(wp.inf)):
        o = wp.vec3d(0.0, 0.0, 0.0)
    longest = wp.max(ex, wp.max(ey, ez))
    size = cell_size
    if mode == MODE_KNN:
        n = wp.float64(wp.max(count, 1))
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
    scale = wp.max(wp.max(wp.abs(o[0]), wp.abs(o[1])), wp.abs(o[2])) + longest
    return o, size, int(nx), int(ny), int(nz), REL_SLACK * (scale + size)


@wp.func
def write_layout(
    params: wp.array2d(dtype=wp.float64),
    dims: wp.array2d(dtype=wp.int32),
    b: int,
    o: wp.vec3d,
    size: wp.float64,
    nx: int,
    ny: int,
    nz: int,
    slack: wp.float64,
):
    params[b, 0] = o[0]
    params[b, 1] = o[1]
    params[b, 2] = o[2]
    params[b, P_INV] = wp.float64(1.0) / size
    params[b, P_CELL] = size
    params[b, P_SLACK] = slack
    dims[b, 0] = wp.int32(nx)
    dims[b, 1] = wp.int32(ny)
    dims[b, 2] = wp.int32(nz)


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


@wp.func
def point_cell(p: wp.vec3d, o: wp.vec3d, inv: wp.float64, nx: int, ny: int, nz: int):
    cx = cell_of(p[0], o[0], inv, nx)
    cy = cell_of(p[1], o[1], inv, ny)
    cz = cell_of(p[2], o[2], inv, nz)
    return cell_id(cx, cy, cz, ny, nz)


@wp.func
def box_part(
    points: wp.array2d(dtype=Any), b: int, n: int, first: int, stride: int, f1: wp.float64, f2: wp.float64
):
    """Box of the scaled points ``first, first + stride, ...`` below ``n``: ``(inf, -inf)`` for none."""
    lo = wp.vec3d(wp.float64(wp.inf), wp.float64(wp.inf), wp.float64(wp.inf))
    hi = -lo
    for i in range(first, n, stride):
        p = scaled_point(points[b, i], f1, f2)
        lo = wp.min(lo, p)
        hi = wp.max(hi, p)
    return lo, hi


@wp.func
def build_rows(
    b: int,
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    points: wp.array2d(dtype=Any),
    point_lengths: wp.array(dtype=wp.int64),
    mode: int,
    cell_size: wp.float64,
    points_per_cell: wp.float64,
    scaled: int,
    grid: Any,
):
    """Cloud ``b``'s grid by one thread (see the module docstring); ``cell_start`` is ``(B, cap + 2)``."""
    params = grid.params
    dims = grid.dims
    cell_start = grid.cell_start
    sorted_points = grid.sorted_points
    sorted_index = grid.sorted_index
    n = valid_count(b, point_lengths, points.shape[1])
    top = wp.float64(0.0)
    if scaled != 0:
        m = valid_count(b, query_lengths, queries.shape[1])
        top = wp.max(rows_top(queries, b, m, 0, 1), rows_top(points, b, n, 0, 1))
    write_scale(params, b, scaled, top)
    f1 = params[b, P_F1]
    f2 = params[b, P_F2]
    lo, hi = box_part(points, b, n, 0, 1, f1, f2)
    size_ = cell_start.shape[1]
    cap = size_ - 2
    o, size, nx, ny, nz, slack = grid_layout(lo, hi, n, mode, cell_size * f1 * f2, points_per_cell, cap)
    write_layout(params, dims, b, o, size, nx, ny, nz, slack)
    inv = wp.float64(1.0) / size
    for c in range(size_):
        cell_start[b, c] = 0
    for i in range(n):
        c = point_cell(scaled_point(points[b, i], f1, f2), o, inv, nx, ny, nz)
        cell_start[b, c + 2] = cell_start[b, c + 2] + 1
    for c in range(2, size_):
        cell_start[b, c] = cell_start[b, c] + cell_start[b, c - 1]
    # cell_start[b, c + 1] is now where cell c begins; each placement moves it on by one, so that at the
    # end it is where cell c ends (= where cell c + 1 begins)
    for i in range(n):
        p = scaled_point(points[b, i], f1, f2)
        c = point_cell(p, o, inv, nx, ny, nz)
        pos = int(cell_start[b, c + 1])
        sorted_points[b, pos] = sorted_points.dtype(p)
        sorted_index[b, pos] = wp.int32(i)
        cell_start[b, c + 1] = wp.int32(pos + 1)


@wp.func
def block_barrier(lane: int):
    """Every lane of the block waits here (a block reduction); the result is used so that nothing drops it."""
    return wp.tile_sum(wp.tile(lane))[0]


@wp.func
def build_block(
    b: int,
    lane: int,
    nthreads: int,
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    points: wp.array2d(dtype=Any),
    point_lengths: wp.array(dtype=wp.int64),
    mode: int,
    cell_size: wp.float64,
    points_per_cell: wp.float64,
    scaled: int,
    grid: Any,
):
    """Cloud ``b``'s grid by the lanes of one block: the same layout as :func:`build_rows` (cells in any
    order inside). ``grid.rank`` ``(B, N)``: scratch, each point's place in its cell."""
    params = grid.params
    dims = grid.dims
    cell_start = grid.cell_start
    sorted_points = grid.sorted_points
    sorted_index = grid.sorted_index
    rank = grid.rank
    n = valid_count(b, point_lengths, points.shape[1])
    top = wp.float64(0.0)
    if scaled != 0:
        m = valid_count(b, query_lengths, queries.shape[1])
        mine = wp.max(rows_top(queries, b, m, lane, nthreads), rows_top(points, b, n, lane, nthreads))
        top = wp.tile_max(wp.tile(mine))[0]
    f1 = wp.float64(1.0)
    f2 = wp.float64(1.0)
    g1 = wp.float64(1.0)
    g2 = wp.float64(1.0)
    if scaled != 0:
        f1, f2, g1, g2 = scale_factors(top)
    plo, phi = box_part(points, b, n, lane, nthreads, f1, f2)
    lo = wp.vec3d(
        wp.tile_min(wp.tile(plo[0]))[0], wp.tile_min(wp.tile(plo[1]))[0], wp.tile_min(wp.tile(plo[2]))[0]
    )
    hi = wp.vec3d(
        wp.tile_max(wp.tile(phi[0]))[0], wp.tile_max(wp.tile(phi[1]))[0], wp.tile_max(wp.tile(phi[2]))[0]
    )
    size_ = cell_start.shape[1]
    cap = size_ - 2
    o, size, nx, ny, nz, slack = grid_layout(lo, hi, n, mode, cell_size * f1 * f2, points_per_cell, cap)
    if lane == 0:
        params[b, P_F1] = f1
        params[b, P_F2] = f2
        params[b, P_G1] = g1
        params[b, P_G2] = g2
        write_layout(params, dims, b, o, size, nx, ny, nz, slack)
    inv = wp.float64(1.0) / size
    for c in range(lane, size_, nthreads):
        cell_start[b, c] = 0
    block_barrier(lane)
    # histogram: cell c's count at c + 1 (so that an inclusive scan gives each cell's start at c)
    for i in range(lane, n, nthreads):
        c = point_cell(scaled_point(points[b, i], f1, f2), o, inv, nx, ny, nz)
        rank[b, i] = wp.atomic_add(cell_start, b, c + 1, wp.int32(1))
    block_barrier(lane)
    # inclusive scan in place: each lane sums a segment, the block scans the sums, each lane runs its segment
    seg = (size_ + nthreads - 1) // nthreads
    first = wp.min(lane * seg, size_)
    last = wp.min(first + seg, size_)
    total = int(0)
    for c in range(first, last):
        total += int(cell_start[b, c])
    running = wp.untile(wp.tile_scan_exclusive(wp.tile(wp.int32(total))))
    for c in range(first, last):
        running += cell_start[b, c]
        cell_start[b, c] = running
    block_barrier(lane)
    for i in range(lane, n, nthreads):
        p = scaled_point(points[b, i], f1, f2)
        c = point_cell(p, o, inv, nx, ny, nz)
        pos = wp.clamp(int(cell_start[b, c]) + int(rank[b, i]), 0, sorted_points.shape[1] - 1)
        sorted_points[b, pos] = sorted_points.dtype(p)
        sorted_index[b, pos] = wp.int32(i)


def grid_build_rows(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    points: wp.array2d(dtype=Any),
    point_lengths: wp.array(dtype=wp.int64),
    mode: int,
    cell_size: wp.float64,
    points_per_cell: wp.float64,
    scaled: int,
    grid: Any,
    row_start: wp.int32,
):
    """A thread per cloud (the CPU): :func:`build_rows`."""
    b = wp.tid() + row_start
    build_rows(
        b, queries, query_lengths, points, point_lengths, mode, cell_size, points_per_cell, scaled, grid,
    )  # fmt: skip


def grid_build_block(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    points: wp.array2d(dtype=Any),
    point_lengths: wp.array(dtype=wp.int64),
    mode: int,
    cell_size: wp.float64,
    points_per_cell: wp.float64,
    scaled: int,
    grid: Any,
):
    """A block per cloud (CUDA; launched tiled): :func:`build_block`."""
    b, lane = wp.tid()
    build_block(
        b, lane, wp.block_dim(), queries, query_lengths, points, point_lengths, mode, cell_size,
        points_per_cell, scaled, grid,
    )  # fmt: skip


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
def sq_dist(p: wp.vec3d, q: wp.vec3d):
    dx = p[0] - q[0]
    dy = p[1] - q[1]
    dz = p[2] - q[2]
    return dx * dx + dy * dy + dz * dz


@wp.func
def finite3(q: wp.vec3d):
    ok = wp.abs(q[0]) < wp.float64(wp.inf) and wp.abs(q[1]) < wp.float64(wp.inf)
    return ok and wp.abs(q[2]) < wp.float64(wp.inf)


@wp.func
def origin_of(params: wp.array2d(dtype=wp.float64), b: int):
    return wp.vec3d(params[b, 0], params[b, 1], params[b, 2])


# --------------------------------------------------------------------------------------------------------
# the k nearest: the row's list and the two searches
# --------------------------------------------------------------------------------------------------------


@wp.func
def insert_neighbour(
    work_idx: wp.array2d(dtype=wp.int64),
    work_d2: wp.array2d(dtype=wp.float64),
    row: int,
    count: int,
    i: wp.int64,
    d2: wp.float64,
):
    """Insert ``(d2, i)`` into the row kept ascending by (squared distance, index); the caller has checked
    that it beats the last entry when the row is full."""
    k = work_idx.shape[1]
    pos = count
    if count == k:
        pos = k - 1
    else:
        count += 1
    while pos > 0:
        pd = work_d2[row, pos - 1]
        pi = work_idx[row, pos - 1]
        if pd > d2 or (pd == d2 and pi > i):
            work_d2[row, pos] = pd
            work_idx[row, pos] = pi
            pos -= 1
        else:
            break
    work_d2[row, pos] = d2
    work_idx[row, pos] = i
    return count


@wp.func
def beats_last(
    work_idx: wp.array2d(dtype=wp.int64),
    work_d2: wp.array2d(dtype=wp.float64),
    row: int,
    count: int,
    i: wp.int64,
    d2: wp.float64,
):
    """Does ``(d2, i)`` enter the row? Always while it has free slots; NaN distances never do."""
    k = work_idx.shape[1]
    ok = d2 == d2
    if count == k:
        wd = work_d2[row, k - 1]
        ok = d2 < wd or (d2 == wd and i < work_idx[row, k - 1])
    return ok


@wp.func
def knn_search_grid(
    q: wp.vec3d,
    b: int,
    row: int,
    grid: Any,
    work_idx: wp.array2d(dtype=wp.int64),
    work_d2: wp.array2d(dtype=wp.float64),
):
    """The k nearest of the (scaled) query ``q`` in cloud ``b``'s grid into ``work_*[row]``; returns how
    many were found."""
    sorted_points = grid.sorted_points
    sorted_index = grid.sorted_index
    cell_start = grid.cell_start
    params = grid.params
    dims = grid.dims
    k = work_idx.shape[1]
    n = sorted_points.shape[1]
    count = int(0)
    nx, ny, nz = grid_dims(dims, b, cell_start.shape[1] - 2)
    o = origin_of(params, b)
    inv = params[b, P_INV]
    size = params[b, P_CELL]
    sl = params[b, P_SLACK]
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
                            visit = gap2 <= work_d2[row, k - 1]
                        if visit:
                            cs, ce = cell_range(b, cell_id(cx, cy, cz, ny, nz), cell_start, n)
                            for j in range(cs, ce):
                                i = wp.int64(sorted_index[b, j])
                                d2 = sq_dist(to_vec3d(sorted_points[b, j]), q)
                                if beats_last(work_idx, work_d2, row, count, i, d2):
                                    count = insert_neighbour(work_idx, work_d2, row, count, i, d2)
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
            if work_d2[row, k - 1] < bound * bound:
                break
        s += 1
    return count


@wp.func
def knn_search_brute(
    q: wp.vec3d,
    b: int,
    row: int,
    points: wp.array2d(dtype=Any),
    n: int,
    f1: wp.float64,
    f2: wp.float64,
    work_idx: wp.array2d(dtype=wp.int64),
    work_d2: wp.array2d(dtype=wp.float64),
):
    """The k nearest of the (scaled) query ``q`` among cloud ``b``'s first ``n`` points, by a scan."""
    count = int(0)
    if f1 == wp.float64(1.0) and f2 == wp.float64(1.0):  # float32: no scale, no multiplications
        for i in range(n):
            d2 = sq_dist(to_vec3d(points[b, i]), q)
            if beats_last(work_idx, work_d2, row, count, wp.int64(i), d2):
                count = insert_neighbour(work_idx, work_d2, row, count, wp.int64(i), d2)
    else:
        for i in range(n):
            d2 = sq_dist(scaled_point(points[b, i], f1, f2), q)
            if beats_last(work_idx, work_d2, row, count, wp.int64(i), d2):
                count = insert_neighbour(work_idx, work_d2, row, count, wp.int64(i), d2)
    return count
