"""Farthest point sampling.

Two kernels share one per-step routine (:func:`scan`): on CUDA one block per cloud with a block-wide
arg-max per step (:func:`fps_block`); on the CPU, where Warp runs a block as one thread, one thread per
cloud with no tile operations (:func:`fps_serial`), so the host can split a batch among threads.

``points`` are ``vec3f`` or ``vec3d``; either way distances are computed in float64 (the difference of two
float32 values is exact in float64), so every input dtype orders exactly and the order does not depend on
the scale of the coordinates.
"""

from typing import Any

import warp as wp

# warpgeo writes every backward itself: skip generating Warp's adjoints (halves the compile time).
wp.set_module_options({"enable_backward": False})

#: Index written where a row has no more valid points.
SENTINEL_INDEX = wp.constant(wp.int64(-1))
#: ``mindist`` value of a point that is already in the sample (below every real squared distance).
CHOSEN = wp.constant(wp.float64(-1.0))
#: Larger than any squared distance of finite float64 coordinates; the start value of ``mindist``.
FAR = wp.constant(wp.float64(1.0e308))
#: Larger than any point index; loses every "lowest index" tie-break.
NO_POINT = wp.constant(wp.int32(2147483647))


@wp.func
def begin_row(
    b: int,
    lane: int,
    nthreads: int,
    n: int,
    k: int,
    mindist: wp.array2d(dtype=wp.float64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=wp.float64),
):
    """Pad row ``b`` past its ``k`` samples and reset the distances of its ``n`` points (this lane's share)."""
    for s in range(k + lane, out_index.shape[1], nthreads):
        out_index[b, s] = SENTINEL_INDEX
        out_dist[b, s] = wp.float64(wp.nan)
    for i in range(lane, n, nthreads):
        mindist[b, i] = FAR


@wp.func
def scan(
    points: wp.array2d(dtype=Any),
    mindist: wp.array2d(dtype=wp.float64),
    b: int,
    n: int,
    cur: int,
    lane: int,
    nthreads: int,
):
    """Fold point ``cur`` (just chosen) into this lane's points ``lane, lane + nthreads, ...`` of cloud ``b``.

    Returns the lane's candidate ``(squared distance, index)``: the largest distance to the chosen set, the
    lowest index among equals. ``cur`` itself is marked ``CHOSEN`` so no index repeats, even among
    duplicated points.
    """
    p = wp.vec3d(points[b, cur])
    my_best = CHOSEN
    my_index = NO_POINT
    for i in range(lane, n, nthreads):
        d = mindist[b, i]
        if d > CHOSEN:
            if i == cur:
                d = CHOSEN
            else:
                q = wp.vec3d(points[b, i]) - p
                d = wp.min(d, wp.dot(q, q))
            mindist[b, i] = d
        # i grows within a lane, so a strict '>' keeps the lowest index among equal distances
        if d > my_best:
            my_best = d
            my_index = i
    return my_best, my_index


@wp.kernel
def fps_block(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int32),
    num_samples: wp.array(dtype=wp.int32),
    start: wp.array(dtype=wp.int32),
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
    n = lengths[b]
    k = wp.min(num_samples[b], n)
    begin_row(b, lane, nthreads, n, k, mindist, out_index, out_dist)
    cur = start[b]
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


@wp.kernel
def fps_serial(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int32),
    num_samples: wp.array(dtype=wp.int32),
    start: wp.array(dtype=wp.int32),
    mindist: wp.array2d(dtype=wp.float64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=wp.float64),
    first_cloud: int,
):
    """Greedy FPS of cloud ``first_cloud + tid`` by one thread (the CPU kernel)."""
    b = wp.tid() + first_cloud
    n = lengths[b]
    k = wp.min(num_samples[b], n)
    begin_row(b, 0, 1, n, k, mindist, out_index, out_dist)
    cur = start[b]
    best = wp.float64(wp.inf)
    for s in range(k):
        out_index[b, s] = wp.int64(cur)
        out_dist[b, s] = wp.sqrt(best)
        best, cur = scan(points, mindist, b, n, cur, 0, 1)


#: one overload per point precision, both built with the module
_POINTS = {"float32": wp.array2d(dtype=wp.vec3f), "float64": wp.array2d(dtype=wp.vec3d)}
FPS_BLOCK = {name: wp.overload(fps_block, {"points": arr}) for name, arr in _POINTS.items()}
FPS_SERIAL = {name: wp.overload(fps_serial, {"points": arr}) for name, arr in _POINTS.items()}
