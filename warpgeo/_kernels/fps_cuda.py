"""Farthest point sampling on CUDA: one block per cloud (a module per precision, marked ``cuda_only``: a CPU
warmup never compiles it, a first CUDA call compiles the precision it launches). The CPU test suite runs it
too, through Warp's CPU blocks."""

from typing import Any

import warp as wp

from warpgeo._constants import FPS_BLOCK_DIM
from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.fps import NO_POINT, OPTIONS, TYPES, begin_row, cloud, scan


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
        my_best, my_index = scan(points, mindist, b, n, cur, lane, nthreads)
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
