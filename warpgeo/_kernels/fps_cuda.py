"""Farthest point sampling on CUDA: one block per cloud (a module per precision, marked ``cuda_only``: a CPU
warmup never compiles it, a first CUDA call compiles the precision it launches). The CPU test suite runs it
too, through Warp's CPU blocks."""

from typing import Any

import warp as wp

from warpgeo._constants import FPS_BLOCK_DIM
from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.fps import CHOSEN, NO_POINT, OPTIONS, TYPES, begin_row, cloud, fold_loaded


@wp.func
def fold_valid(
    ok: bool,
    d: wp.float64,
    q: wp.vec3d,
    p: wp.vec3d,
    i: int,
    cur: int,
    b: int,
    mindist: wp.array2d(dtype=wp.float64),
):
    """:func:`fold` on a distance and point already loaded: the new distance (stored), or ``CHOSEN`` where
    ``ok`` is False (a lane's slot past the cloud's end)."""
    if not ok:
        return CHOSEN
    return fold_loaded(d, q, p, i, cur, b, mindist)


@wp.func
def scan4(
    points: wp.array2d(dtype=Any),
    mindist: wp.array2d(dtype=wp.float64),
    b: int,
    n: int,
    cur: int,
    lane: int,
    nthreads: int,
):
    """:func:`~warpgeo._kernels.fps.scan`, four of the lane's points at a time, their loads issued before any
    store (a lane keeps four loads in flight instead of one: the step is bound by memory latency, not
    arithmetic). Same points, same order within the lane (ascending), so the same candidate."""
    p = wp.vec3d(points[b, cur])
    my_best = CHOSEN
    my_index = NO_POINT
    last = n - 1
    for i in range(lane, n, 4 * nthreads):
        i1 = i + nthreads
        i2 = i1 + nthreads
        i3 = i2 + nthreads
        # past the end: load a valid slot (the last point) and ignore it
        j1 = wp.min(i1, last)
        j2 = wp.min(i2, last)
        j3 = wp.min(i3, last)
        d0 = mindist[b, i]
        d1 = mindist[b, j1]
        d2 = mindist[b, j2]
        d3 = mindist[b, j3]
        q0 = wp.vec3d(points[b, i])
        q1 = wp.vec3d(points[b, j1])
        q2 = wp.vec3d(points[b, j2])
        q3 = wp.vec3d(points[b, j3])
        d0 = fold_valid(True, d0, q0, p, i, cur, b, mindist)
        d1 = fold_valid(i1 <= last, d1, q1, p, i1, cur, b, mindist)
        d2 = fold_valid(i2 <= last, d2, q2, p, i2, cur, b, mindist)
        d3 = fold_valid(i3 <= last, d3, q3, p, i3, cur, b, mindist)
        # ascending indices and a strict '>': the lowest index among equal distances
        if d0 > my_best:
            my_best = d0
            my_index = i
        if d1 > my_best:
            my_best = d1
            my_index = i1
        if d2 > my_best:
            my_best = d2
            my_index = i2
        if d3 > my_best:
            my_best = d3
            my_index = i3
    return my_best, my_index


def fps_block(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    num_samples: wp.array(dtype=wp.int64),
    start: wp.array(dtype=wp.int64),
    mindist: wp.array2d(dtype=wp.float64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=wp.float64),
):
    """Greedy FPS of cloud ``b`` by the threads of one block (launched tiled, one block per cloud).

    Each step, every lane scans its share of the points; two block reductions (largest distance, then the
    lowest index holding it) pick the next sample.
    """
    b, lane = wp.tid()
    nthreads = wp.block_dim()
    n, k, cur = cloud(b, points, lengths, num_samples, start, out_index)
    begin_row(b, lane, nthreads, n, k, mindist, out_index, out_dist)
    best = wp.float64(wp.inf)
    for s in range(k):
        if lane == 0:
            out_index[b, s] = wp.int64(cur)
            out_dist[b, s] = wp.sqrt(best)
        my_best, my_index = scan4(points, mindist, b, n, cur, lane, nthreads)
        best = wp.tile_max(wp.tile(my_best))[0]
        candidate = NO_POINT
        if my_best == best:
            candidate = my_index
        cur = wp.tile_min(wp.tile(candidate))[0]


#: ``FPS_BLOCK[precision].fps_block``, launched tiled with ``FPS_BLOCK.block_dim`` threads per cloud; with the
#: options of every FPS module (no FMA).
FPS_BLOCK = KernelTable(
    f"{__name__}.fps_block", (fps_block,), TYPES, options=OPTIONS, block_dim=FPS_BLOCK_DIM, cuda_only=True
)
