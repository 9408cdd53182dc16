"""Farthest point sampling: the CPU kernels and the routines every FPS kernel shares.

Three kernels, one greedy order (the largest distance to the chosen set, ties to the lowest index):

* :func:`fps_serial` (CPU, small clouds): one thread per cloud scanning every point per step, so the host
  can split a batch among threads;
* :func:`fps_tree` (CPU, large clouds): the same order, from a binary tree of boxes over small buckets of
  nearby points, whose subtrees a new sample cannot change are skipped whole;
* ``fps_cuda.fps_strip`` / ``fps_block`` (CUDA, tables of their own marked ``cuda_only``: a CPU warmup
  never compiles them): one block per cloud, a block-wide arg-max per step (and the grid designs there).

Each kernel is compiled per point precision, alone in a Warp module (:class:`KernelTable`).

``points`` are ``vec3f`` or ``vec3d``; either way distances are computed in float64 (the difference of two
float32 values is exact in float64). float64 clouds arrive scaled by a power of two (exact) so that no
squared distance overflows or underflows (see ``warpgeo/fps.py``). Every module is built without
floating-point contraction (``fuse_fp``): every squared distance is the same sum of three rounded squares,
bit for bit the reference's, and a box's squared distance is never more than that of a point inside it.
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels._table import KernelTable

#: Index written where a row has no more valid points.
SENTINEL_INDEX = wp.constant(wp.int64(_constants.SENTINEL_INDEX))
#: ``mindist`` value of a point that is already in the sample (below every real squared distance).
CHOSEN = wp.constant(wp.float64(_constants.FPS_CHOSEN))
#: The start value of ``mindist``: larger than any squared distance a finite cloud can have.
FAR = wp.constant(wp.float64(_constants.FAR))
#: Larger than any point index; loses every "lowest index" tie-break.
NO_POINT = wp.constant(wp.int32(_constants.NO_POINT))


@wp.func
def cloud(
    b: int,
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    num_samples: wp.array(dtype=wp.int64),
    start: wp.array(dtype=wp.int64),
    out_index: wp.array2d(dtype=wp.int64),
):
    """``(n, k, first)`` of cloud ``b``: its valid points, its samples and its first sample, all in range.

    Each per-cloud array may be empty (or too short for ``b``), meaning its default: every point, as many
    samples as ``out_index`` has columns, start at point 0. Values are clamped into range whatever they are
    (the host checks them when value checks are on), so no input can make a kernel index out of bounds.
    """
    n = points.shape[1]
    if b < lengths.shape[0]:
        n = int(wp.clamp(lengths[b], wp.int64(0), wp.int64(n)))
    k = out_index.shape[1]
    if b < num_samples.shape[0]:
        k = int(wp.clamp(num_samples[b], wp.int64(0), wp.int64(k)))
    k = wp.min(k, n)
    first = int(0)
    # nested, not `and`: the bounds test must guard the read
    if b < start.shape[0]:  # noqa: SIM102
        if start[b] >= wp.int64(0) and start[b] < wp.int64(n):
            first = int(start[b])
    return n, k, first


@wp.func
def begin_row(
    b: int,
    lane: int,
    nthreads: int,
    n: int,
    k: int,
    mindist: wp.array2d(dtype=wp.float64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
):
    """Pad row ``b`` past its ``k`` samples and reset the distances of its ``n`` points (this lane's share)."""
    for s in range(k + lane, out_index.shape[1], nthreads):
        out_index[b, s] = SENTINEL_INDEX
        out_dist[b, s] = out_dist.dtype(wp.nan)
    for i in range(lane, n, nthreads):
        mindist[b, i] = FAR


@wp.func
def distance_sq(q: wp.vec3d):
    """``|q|^2`` as ``(x*x + y*y) + z*z``: the reference's sum, and one expression for points and boxes."""
    return q[0] * q[0] + q[1] * q[1] + q[2] * q[2]


@wp.func
def fold(
    points: wp.array2d(dtype=Any),
    mindist: wp.array2d(dtype=wp.float64),
    b: int,
    i: int,
    cur: int,
    p: wp.vec3d,
):
    """Fold the new sample ``p`` (point ``cur``) into point ``i``'s squared distance to the chosen set.

    Returns the updated distance; ``cur`` itself becomes ``CHOSEN`` (so it is never picked again, even where
    duplicates of it remain), and chosen points stay ``CHOSEN``.
    """
    return fold_loaded(mindist[b, i], wp.vec3d(points[b, i]), p, i, cur, b, mindist)


@wp.func
def fold_loaded(
    d: wp.float64, q: wp.vec3d, p: wp.vec3d, i: int, cur: int, b: int, mindist: wp.array2d(dtype=wp.float64)
):
    """:func:`fold` of point ``i`` at ``q`` whose distance ``d`` is loaded already (stored when it changes)."""
    if d > CHOSEN:
        d = CHOSEN if i == cur else wp.min(d, distance_sq(q - p))
        mindist[b, i] = d
    return d


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
    lowest index among equals.
    """
    p = wp.vec3d(points[b, cur])
    my_best = CHOSEN
    my_index = NO_POINT
    for i in range(lane, n, nthreads):
        d = fold(points, mindist, b, i, cur, p)
        # i grows within a lane, so a strict '>' keeps the lowest index among equal distances
        if d > my_best:
            my_best = d
            my_index = i
    return my_best, my_index


def fps_serial(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    num_samples: wp.array(dtype=wp.int64),
    start: wp.array(dtype=wp.int64),
    mindist: wp.array2d(dtype=wp.float64),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
    row_start: int,
):
    """Greedy FPS of cloud ``row_start + tid`` by one thread (the CPU kernel)."""
    b = wp.tid() + row_start
    n, k, cur = cloud(b, points, lengths, num_samples, start, out_index)
    begin_row(b, 0, 1, n, k, mindist, out_index, out_dist)
    best = wp.float64(wp.inf)
    for s in range(k):
        out_index[b, s] = wp.int64(cur)
        out_dist[b, s] = out_dist.dtype(wp.sqrt(best))
        best, cur = scan(points, mindist, b, n, cur, 0, 1)


#: Options of every FPS kernel module: warpgeo writes every backward itself (no adjoints: half the compile
#: time); no fused multiply-adds (see the module docstring).
OPTIONS = {"enable_backward": False, "fuse_fp": False}
#: The Warp types of the point arrays and of the distances written out (the dtype of the op's output: no copy
#: after the launch), per point precision (the keys of every FPS kernel table).
TYPES = {
    precision: {
        "points": wp.array2d(dtype=vec),
        "sorted_points": wp.array2d(dtype=vec),
        "out_dist": wp.array2d(dtype=scalar),
    }
    for precision, vec, scalar in (("float32", wp.vec3f, wp.float32), ("float64", wp.vec3d, wp.float64))
}

#: Small clouds on the CPU: ``FPS_SERIAL[precision].fps_serial``.
FPS_SERIAL = KernelTable(f"{__name__}.fps_serial", (fps_serial,), TYPES, options=OPTIONS)


#: Points per leaf of the CPU tree (consecutive points in Morton order: a small, tight box).
LEAF = wp.constant(16)
#: Children per node of the CPU tree (4: fewer levels to walk than 2, fewer boxes per visit than 8).
ARITY = wp.constant(4)


@wp.func
def before(d: wp.float64, i: wp.int32, best: wp.float64, best_i: wp.int32):
    """Does candidate ``(d, i)`` beat ``(best, best_i)``: a larger distance, or an equal one at a lower index?"""
    return d > best or (d == best and i < best_i)


@wp.func
def box_distance_sq(p: wp.vec3d, lo: wp.vec3d, hi: wp.vec3d):
    """Squared distance from ``p`` to the box ``[lo, hi]``; never more than that of a point inside the box.

    Per axis ``max(lo - p, p - hi, 0)`` is at most ``|x - p|`` for every ``x`` in ``[lo, hi]``, in rounded
    arithmetic too (rounding is monotonic), and so is its square and the sum (:func:`distance_sq`, no FMA).
    """
    return distance_sq(wp.max(wp.max(lo - p, p - hi), wp.vec3d(0.0, 0.0, 0.0)))


@wp.func
def fold_leaf(
    points: wp.array2d(dtype=Any),
    order: wp.array2d(dtype=wp.int32),
    mindist: wp.array2d(dtype=wp.float64),
    b: int,
    n: int,
    leaf: int,
    p: wp.vec3d,
):
    """Fold sample ``p`` into the points of ``leaf``; return the leaf's new ``(largest distance, its
    original index)``, ``(CHOSEN, NO_POINT)`` when none is left.

    The sample itself is already ``CHOSEN`` (below every distance, so the ``min`` keeps it): no branch per
    point but the running arg-max.
    """
    top = CHOSEN
    top_i = NO_POINT
    first = leaf * LEAF
    if first < n:
        for j in range(first, first + wp.min(n - first, LEAF)):
            d = wp.min(mindist[b, j], distance_sq(wp.vec3d(points[b, j]) - p))
            mindist[b, j] = d
            # nested: the index is read only for a candidate
            if d >= top and d > CHOSEN:  # noqa: SIM102
                if d > top or order[b, j] < top_i:
                    top = d
                    top_i = order[b, j]
    return top, top_i


@wp.func
def combine(
    node_max: wp.array2d(dtype=wp.float64),
    node_arg: wp.array2d(dtype=wp.int32),
    b: int,
    node: int,
):
    """A node's ``(largest distance, its index)``: the best of its children's."""
    top = CHOSEN
    top_i = NO_POINT
    for c in range(ARITY * node + 1, ARITY * node + ARITY + 1):
        if before(node_max[b, c], node_arg[b, c], top, top_i):
            top = node_max[b, c]
            top_i = node_arg[b, c]
    node_max[b, node] = top
    node_arg[b, node] = top_i


#: Largest grid side of the leaf sort: 10 bits per axis, a 30-bit Morton code.
MORTON_SIDE = wp.constant(1024)


@wp.func
def spread_bits(x: int):
    """Two zero bits after each of the 10 low bits of ``x``: one axis of a Morton (Z-order) code."""
    x = (x | (x << 16)) & 0x030000FF
    x = (x | (x << 8)) & 0x0300F00F
    x = (x | (x << 4)) & 0x030C30C3
    return (x | (x << 2)) & 0x09249249


@wp.func
def sort_cloud(
    points: wp.array2d(dtype=Any),
    b: int,
    n: int,
    cells: wp.array2d(dtype=wp.int32),
    order: wp.array2d(dtype=wp.int32),
    position: wp.array2d(dtype=wp.int32),
    sorted_points: wp.array2d(dtype=Any),
):
    """Counting-sort cloud ``b``'s ``n`` points by the Morton code of their cell in a grid of ``side**3``
    cells over the cloud's box, ``side`` the largest power of two with ``side**3 < cells.shape[1]`` (at most
    2**10): ``sorted_points[b, j] = points[b, order[b, j]]``, ``position`` the inverse.

    Points in consecutive cells of a Z-order curve are close in space, so runs of consecutive sorted points
    have small boxes. Any order gives the same samples; this one makes pruning work.
    """
    grid = cells.shape[1] - 1
    side = int(1)
    while 8 * side * side * side <= grid and side < MORTON_SIDE:
        side = side * 2
    lo = wp.vec3d(points[b, 0])
    hi = lo
    for i in range(1, n):
        q = wp.vec3d(points[b, i])
        lo = wp.min(lo, q)
        hi = wp.max(hi, q)
    scale = wp.vec3d(0.0, 0.0, 0.0)
    for axis in range(3):
        if hi[axis] > lo[axis]:
            scale[axis] = wp.float64(side) / (hi[axis] - lo[axis])
    for c in range(grid + 1):
        cells[b, c] = 0
    for i in range(n):
        q = wp.cw_mul(wp.vec3d(points[b, i]) - lo, scale)
        key = int(0)
        for axis in range(3):
            key = key | (spread_bits(wp.clamp(int(q[axis]), 0, side - 1)) << axis)
        cells[b, key + 1] += 1
        order[b, i] = key  # the cell, for the pass below
    for c in range(grid):
        cells[b, c + 1] += cells[b, c]
    for i in range(n):
        key = order[b, i]
        j = cells[b, key]
        cells[b, key] = j + 1
        position[b, i] = j
    for i in range(n):
        j = position[b, i]
        order[b, j] = i
        sorted_points[b, j] = points[b, i]


def fps_tree(
    points: wp.array2d(dtype=Any),
    lengths: wp.array(dtype=wp.int64),
    num_samples: wp.array(dtype=wp.int64),
    start: wp.array(dtype=wp.int64),
    mindist: wp.array2d(dtype=wp.float64),
    cells: wp.array2d(dtype=wp.int32),
    order: wp.array2d(dtype=wp.int32),
    position: wp.array2d(dtype=wp.int32),
    sorted_points: wp.array2d(dtype=Any),
    node_lo: wp.array2d(dtype=wp.vec3d),
    node_hi: wp.array2d(dtype=wp.vec3d),
    node_max: wp.array2d(dtype=wp.float64),
    node_arg: wp.array2d(dtype=wp.int32),
    out_index: wp.array2d(dtype=wp.int64),
    out_dist: wp.array2d(dtype=Any),
    row_start: int,
):
    """Greedy FPS of cloud ``row_start + tid`` by one thread, skipping subtrees a new sample cannot change.

    :func:`sort_cloud` puts cloud ``b`` in Morton order into ``sorted_points[b]`` (``order[b, j]`` is the
    original index of sorted point ``j``, ``position`` the inverse), cut into leaves of ``LEAF`` consecutive points. The leaves are those of an
    implicit complete ``ARITY``-ary tree (node ``v`` has children ``ARITY * v + 1`` to ``ARITY * v + ARITY``,
    the root is node 0, the leaves are the last nodes: :func:`tree_size`). Every node keeps its box and the
    largest distance to the chosen set among its points with that point's index. When sample ``p`` is
    added, a subtree whose box is at least that far from ``p`` cannot change (every point in it is at least
    as far from ``p`` as the box, in float64 rounding too) and is skipped; the root then names the next
    sample. The result is exactly the brute-force order: the largest distance, ties to the lowest original
    index. (The QuickFPS idea, with Morton-order leaves.)
    """
    b = wp.tid() + row_start
    n, k, cur = cloud(b, points, lengths, num_samples, start, out_index)
    # the scratch arrays come from the op, sized for the cloud; smaller ones would only shorten it
    nodes = wp.min(wp.min(node_lo.shape[1], node_hi.shape[1]), wp.min(node_max.shape[1], node_arg.shape[1]))
    # the largest complete tree that fits: first_leaf internal nodes, then the leaves
    first_leaf = int(0)
    leaves = int(1)
    while first_leaf + leaves * (ARITY + 1) <= nodes:
        first_leaf = first_leaf + leaves
        leaves = leaves * ARITY
    if first_leaf + leaves > nodes:
        leaves = 0
    room = wp.min(wp.min(order.shape[1], position.shape[1]), wp.min(sorted_points.shape[1], mindist.shape[1]))
    if cells.shape[1] < 2:
        room = 0
    if n > wp.min(room, leaves * LEAF):
        n = wp.min(room, leaves * LEAF)
        k = wp.min(k, n)
        if cur >= n:
            cur = 0
    begin_row(b, 0, 1, n, k, mindist, out_index, out_dist)
    if k == 0:
        return
    sort_cloud(points, b, n, cells, order, position, sorted_points)
    inside = wp.vec3d(wp.float64(wp.inf), wp.float64(wp.inf), wp.float64(wp.inf))
    for leaf in range(leaves):
        lo = inside
        hi = -inside
        top = CHOSEN
        first = leaf * LEAF
        if first < n:
            top = FAR
            for j in range(first, first + wp.min(n - first, LEAF)):
                q = wp.vec3d(sorted_points[b, j])
                lo = wp.min(lo, q)
                hi = wp.max(hi, q)
        node_lo[b, first_leaf + leaf] = lo
        node_hi[b, first_leaf + leaf] = hi
        node_max[b, first_leaf + leaf] = top
        node_arg[b, first_leaf + leaf] = NO_POINT
    for node in range(first_leaf - 1, -1, -1):
        lo = inside
        hi = -inside
        for c in range(ARITY * node + 1, ARITY * node + ARITY + 1):
            lo = wp.min(lo, node_lo[b, c])
            hi = wp.max(hi, node_hi[b, c])
        node_lo[b, node] = lo
        node_hi[b, node] = hi
        combine(node_max, node_arg, b, node)
    best = wp.float64(wp.inf)
    for s in range(k):
        out_index[b, s] = wp.int64(cur)
        out_dist[b, s] = out_dist.dtype(wp.sqrt(best))
        if s + 1 == k:
            break
        cur_pos = position[b, cur]
        p = wp.vec3d(sorted_points[b, cur_pos])
        mindist[b, cur_pos] = CHOSEN
        # depth first from the root without a stack: down to the first child, on to the next sibling, and
        # up (recomputing the parent) after a last child
        node = int(0)
        while node >= 0:
            m = node_max[b, node]
            gap = box_distance_sq(p, node_lo[b, node], node_hi[b, node])
            # a node holding p whose points are all at distance 0 is visited too: p must become CHOSEN
            if gap < m or (gap == wp.float64(0.0) and m == wp.float64(0.0)):
                if node < first_leaf:
                    node = ARITY * node + 1
                    continue
                top, top_i = fold_leaf(sorted_points, order, mindist, b, n, node - first_leaf, p)
                node_max[b, node] = top
                node_arg[b, node] = top_i
            while node > 0 and (node - 1) % ARITY == ARITY - 1:
                node = (node - 1) // ARITY
                combine(node_max, node_arg, b, node)
            node = -1 if node == 0 else node + 1
        best = node_max[b, 0]
        cur = int(node_arg[b, 0])


def tree_size(n: int) -> int:
    """Nodes of the tree over ``n`` points: a complete ``ARITY``-ary tree with at least ``n / LEAF`` leaves."""
    leaves = 1
    while leaves * LEAF < n:
        leaves *= ARITY
    return (leaves * ARITY - 1) // (ARITY - 1)


#: Large clouds on the CPU: ``FPS_TREE[precision].fps_tree``.
FPS_TREE = KernelTable(f"{__name__}.fps_tree", (fps_tree,), TYPES, options=OPTIONS)
