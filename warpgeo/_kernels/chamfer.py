"""Chamfer distance's L1 nearest neighbour: a scan of every valid point, per query row.

The L2 nearest neighbour of :func:`warpgeo.chamfer_distance` is :func:`warpgeo.knn` with ``k = 1`` (its grid
search). The L1 one (``norm=1``: the point of the other cloud with the smallest ``|dx| + |dy| + |dz|``, as
pytorch3d's ``knn_points(norm=1)`` finds it) cannot use that grid's pruning, which bounds Euclidean
distances, so it is found here by a scan: ``O(N * M)`` time, no memory beyond the output.

Distances are summed in float64 from the points' compute dtype (the difference of two float32 values is exact
in float64), so the answer does not depend on the input dtype; ties go to the lowest index. Rows beyond ``query_lengths`` and rows whose cloud has no valid point get ``-1``.
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.neighbors import OPTIONS, TYPES, valid_count

#: Index written where a row has no neighbour (padding, or an empty cloud).
SENTINEL_INDEX = wp.constant(wp.int64(_constants.SENTINEL_INDEX))


@wp.func
def l1_dist(p: Any, qx: wp.float64, qy: wp.float64, qz: wp.float64):
    return wp.abs(wp.float64(p[0]) - qx) + wp.abs(wp.float64(p[1]) - qy) + wp.abs(wp.float64(p[2]) - qz)


def nearest_l1_rows(
    queries: wp.array2d(dtype=Any),
    query_lengths: wp.array(dtype=wp.int64),
    points: wp.array2d(dtype=Any),
    point_lengths: wp.array(dtype=wp.int64),
    out_idx: wp.array2d(dtype=wp.int64),
    row_start: wp.int32,
):
    """Row ``b * M + m``: the index of the valid point nearest to query m in L1, ties to the lowest."""
    r = wp.tid() + row_start
    num_queries = queries.shape[1]
    b = r // num_queries
    m = r % num_queries
    best = SENTINEL_INDEX
    if b < out_idx.shape[0] and b < points.shape[0] and m < out_idx.shape[1]:
        if m < valid_count(b, query_lengths, num_queries):
            q = queries[b, m]
            qx = wp.float64(q[0])
            qy = wp.float64(q[1])
            qz = wp.float64(q[2])
            best_d = wp.float64(wp.inf)
            n = valid_count(b, point_lengths, points.shape[1])
            for i in range(n):
                d = l1_dist(points[b, i], qx, qy, qz)
                # strictly less: the lowest index keeps a tie. The first point is taken whatever its
                # distance (an overflow to inf from float64 input near its limit still names a point).
                if best == SENTINEL_INDEX or d < best_d:
                    best_d = d
                    best = wp.int64(i)
        out_idx[b, m] = best


#: The neighbour kernels' options and point types (each kernel takes the arrays it has).
NEAREST_L1 = KernelTable(f"{__name__}.nearest_l1", (nearest_l1_rows,), TYPES, options=OPTIONS)
