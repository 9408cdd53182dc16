"""Farthest point sampling: one block per cloud, a block-wide arg-max per step."""

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


@wp.kernel
def farthest_point_sampling(
    points: wp.array2d(dtype=wp.vec3d),
    lengths: wp.array(dtype=wp.int32),
    num_samples: wp.array(dtype=wp.int32),
    start: wp.array(dtype=wp.int32),
    mindist: wp.array2d(dtype=wp.float64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=wp.float64),
):
    """Greedy FPS of cloud ``b`` by the threads of one block.

    Each thread owns the points ``lane, lane + block_dim, ...`` and keeps their squared distance to the
    chosen set in ``mindist`` (float64, so every input dtype orders exactly). After updating its points a
    thread proposes its best (largest distance, then lowest index); two block reductions pick the winner.
    Chosen points are marked ``CHOSEN`` so no index repeats even among duplicated points.
    """
    b, lane = wp.tid()
    nthreads = wp.block_dim()
    n = lengths[b]
    k = wp.min(num_samples[b], n)
    row_len = out_index.shape[1]

    for s in range(k + lane, row_len, nthreads):
        out_index[b, s] = SENTINEL_INDEX
        out_dist[b, s] = wp.float64(wp.nan)
    for i in range(lane, n, nthreads):
        mindist[b, i] = FAR

    cur = start[b]
    best = wp.float64(wp.inf)
    for s in range(k):
        if lane == 0:
            out_index[b, s] = wp.int64(cur)
            out_dist[b, s] = wp.sqrt(best)
        p = points[b, cur]
        my_best = CHOSEN
        my_index = NO_POINT
        for i in range(lane, n, nthreads):
            d = mindist[b, i]
            if d > CHOSEN:
                if i == cur:
                    d = CHOSEN
                else:
                    q = points[b, i] - p
                    d = wp.min(d, wp.dot(q, q))
                mindist[b, i] = d
            # i grows within a thread, so a strict '>' keeps the lowest index among equal distances
            if d > my_best:
                my_best = d
                my_index = i
        best = wp.tile_max(wp.tile(my_best))[0]
        candidate = NO_POINT
        if my_best == best:
            candidate = my_index
        cur = wp.tile_min(wp.tile(candidate))[0]
