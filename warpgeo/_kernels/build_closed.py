"""The tables of closed meshes, built on the host's cores for every world device: what they read of their
faces (``closed_faces_rows``: normals, corner angles, convexity at the edges; :data:`CLOSED_FACES`), and the
plane trees of convex ones (:data:`PLANE_TREES`, a module only convex meshes load), one row a node:
``plane_tree_split_rows`` (a level of the trees: each node's faces split in place between its children) and
``plane_tree_nodes_rows`` (every node's cone and least offset)."""

import warp as wp

from warpgeo._kernels._table import KernelTable

# warpgeo writes every backward itself: no adjoints (they would double the build time)
wp.set_module_options({"enable_backward": False})
#: Options of this file's modules.
OPTIONS = {"enable_backward": False}


def closed_faces_rows(
    points: wp.array(dtype=wp.vec3),
    faces: wp.array(dtype=wp.vec3i),
    neighbors: wp.array(dtype=wp.vec3i),
    normals: wp.array(dtype=wp.vec3d),
    supports: wp.array(dtype=wp.float64),
    corner_normals: wp.array(dtype=wp.vec3d),
    convexity: wp.array(dtype=wp.float64),
    row_start: int,
):
    """What the tables of closed meshes read of face ``f = row_start + tid`` (``faces``: rows of ``points``;
    ``neighbors``: the rows of the faces across its edges ab, bc, ca; many meshes' rows side by side), in
    float64: its unit normal ``normals[f]`` and its plane's offset from the origin ``supports[f] = n . a``;
    ``corner_normals[k * F + f]``, the normal times the face's angle
    at corner ``k`` (the terms of its vertices' angle-weighted normals); and ``convexity[f]``, how far the
    far corner of each neighbour (the one not on the shared edge: the last corner of the neighbour that is not
    a corner of ``f``) lies above the face's plane at most (``inf`` where a neighbour has none, or a row is out
    of range: no mesh with that face is convex). Launched by rows."""
    f = wp.tid() + row_start
    count = faces.shape[0]
    if f >= count or f >= neighbors.shape[0] or f >= normals.shape[0] or f >= convexity.shape[0]:
        return
    if f >= supports.shape[0]:
        return
    if wp.int64(3) * wp.int64(count) > wp.int64(corner_normals.shape[0]):
        return
    i = faces[f]
    if wp.min(i) < 0 or wp.max(i) >= points.shape[0]:
        convexity[f] = wp.float64(wp.inf)
        return
    a = wp.vec3d(points[i[0]])
    b = wp.vec3d(points[i[1]])
    c = wp.vec3d(points[i[2]])
    area2 = wp.cross(b - a, c - a)  # twice the area, along the normal
    twice = wp.length(area2)
    n = area2 / twice
    normals[f] = n
    supports[f] = wp.dot(n, a)
    # the angles at a and b from |u x v| = twice the area and u . v; c's is what is left of pi
    at_a = wp.atan2(twice, wp.dot(b - a, c - a))
    at_b = wp.atan2(twice, wp.dot(c - b, a - b))
    at_c = wp.max(wp.float64(wp.pi) - at_a - at_b, wp.float64(0.0))
    corner_normals[f] = at_a * n
    corner_normals[count + f] = at_b * n
    corner_normals[2 * count + f] = at_c * n
    worst = wp.float64(-wp.inf)
    for k in range(3):
        g = neighbors[f][k]
        far = int(-1)
        if g >= 0 and g < count:
            theirs = faces[g]
            for j in range(3):
                if theirs[j] != i[0] and theirs[j] != i[1] and theirs[j] != i[2]:
                    far = theirs[j]
        if far < 0 or far >= points.shape[0]:
            worst = wp.float64(wp.inf)
        else:
            worst = wp.max(worst, wp.dot(wp.vec3d(points[far]) - a, n))
    convexity[f] = worst


@wp.func
def comes_first(
    normals: wp.array(dtype=wp.vec3d), faces: wp.array(dtype=wp.int32), axis: int, i: int, j: int
):
    """Whether row ``i`` comes before row ``j`` in the order of a plane-tree split: by the normal's component
    ``axis``, then by face index (so the order of distinct faces is strict)."""
    a = normals[i][axis]
    b = normals[j][axis]
    if a < b:
        return True
    if b < a:
        return False
    return faces[i] < faces[j]


@wp.func
def swap_faces(normals: wp.array(dtype=wp.vec3d), faces: wp.array(dtype=wp.int32), i: int, j: int):
    n = normals[i]
    normals[i] = normals[j]
    normals[j] = n
    f = faces[i]
    faces[i] = faces[j]
    faces[j] = f


@wp.func
def sift_down(
    normals: wp.array(dtype=wp.vec3d),
    faces: wp.array(dtype=wp.int32),
    axis: int,
    lo: int,
    root: int,
    end: int,
):
    """Heapsort's sift of row ``lo + root`` down the heap over rows ``lo .. lo + end`` (by ``comes_first``)."""
    node = root
    while 2 * node + 1 <= end:
        child = 2 * node + 1
        if child + 1 <= end and comes_first(normals, faces, axis, lo + child, lo + child + 1):
            child = child + 1
        if not comes_first(normals, faces, axis, lo + node, lo + child):
            return
        swap_faces(normals, faces, lo + node, lo + child)
        node = child


@wp.func
def heap_sort(
    normals: wp.array(dtype=wp.vec3d), faces: wp.array(dtype=wp.int32), axis: int, lo: int, hi: int
):
    """Sort rows ``lo .. hi`` (inclusive) by ``comes_first``: O(n log n) whatever the keys."""
    count = hi - lo + 1
    start = count // 2 - 1
    while start >= 0:
        sift_down(normals, faces, axis, lo, start, count - 1)
        start = start - 1
    end = count - 1
    while end > 0:
        swap_faces(normals, faces, lo, lo + end)
        sift_down(normals, faces, axis, lo, 0, end - 1)
        end = end - 1


@wp.func
def split_node(
    normals: wp.array(dtype=wp.vec3d),
    faces: wp.array(dtype=wp.int32),
    first: int,
    n: int,
    leaf: int,
    round_limit: int,
):
    """Split the node over rows ``[first, first + n)`` (see ``plane_tree_split_rows``), in place."""
    if n <= leaf:
        for i in range(first + 1, first + n):  # insertion sort by face index
            j = i
            while j > first and faces[j - 1] > faces[j]:
                swap_faces(normals, faces, j - 1, j)
                j = j - 1
        return
    low = normals[first]
    high = normals[first]
    for j in range(first + 1, first + n):
        low = wp.min(low, normals[j])
        high = wp.max(high, normals[j])
    spread = high - low
    axis = int(0)
    if spread[1] > spread[axis]:
        axis = 1
    if spread[2] > spread[axis]:
        axis = 2
    target = first + n // 2  # the row that ends the first half: its face goes in sorted place
    lo = first
    hi = first + n - 1
    rounds = int(0)
    limit = int(16)
    m = n
    while m > 1:
        limit = limit + 2
        m = m // 2
    if round_limit >= 0:
        limit = round_limit
    while hi > lo:
        if rounds >= limit:
            heap_sort(normals, faces, axis, lo, hi)
            return
        rounds = rounds + 1
        mid = lo + (hi - lo) // 2
        # the median of rows lo, mid, hi as the pivot, at hi
        if comes_first(normals, faces, axis, mid, lo):
            swap_faces(normals, faces, mid, lo)
        if comes_first(normals, faces, axis, hi, lo):
            swap_faces(normals, faces, hi, lo)
        if comes_first(normals, faces, axis, mid, hi):
            swap_faces(normals, faces, mid, hi)
        store = lo
        for j in range(lo, hi):
            if comes_first(normals, faces, axis, j, hi):
                swap_faces(normals, faces, store, j)
                store = store + 1
        swap_faces(normals, faces, store, hi)
        if store == target:
            return
        if target < store:
            hi = store - 1
        else:
            lo = store + 1


def plane_tree_split_rows(
    normals: wp.array(dtype=wp.vec3d),
    faces: wp.array(dtype=wp.int32),
    starts: wp.array(dtype=wp.int64),
    counts: wp.array(dtype=wp.int64),
    leaf: int,
    round_limit: int,
    row_start: int,
):
    """One level of the plane trees of convex meshes (see ``warpgeo._world.tables._plane_trees``): node ``r = row_start +
    tid`` holds the faces in rows ``[starts[r], starts[r] + counts[r])`` of ``normals`` (unit, float64) and
    ``faces`` (their indices), which it reorders in place. A node of more than ``leaf`` faces puts the
    ``n // 2`` first of them in the order of their normals' component of widest spread (the lowest axis of
    equal spreads; ties by face index, ``comes_first``) in its first ``n // 2`` rows (quickselect, a median of
    three pivot, heapsort past ``round_limit`` rounds, or ``2 log2 n + 16`` where it is negative: O(n log n) at
    worst); a leaf sorts its rows by face index. A node of at most ``8 * leaf`` faces splits its children and
    theirs too, down to its leaves (three levels: per-row overheads dwarf the work of small nodes). Nodes of
    one launch hold disjoint rows. A node whose rows do not lie in the arrays is left alone. Launched by rows."""
    r = wp.tid() + row_start
    if r >= starts.shape[0] or r >= counts.shape[0]:
        return
    first64 = starts[r]
    n64 = counts[r]
    if first64 < wp.int64(0) or n64 <= wp.int64(0) or leaf < 1:
        return
    if first64 + n64 > wp.int64(normals.shape[0]) or first64 + n64 > wp.int64(faces.shape[0]):
        return
    first = int(first64)
    n = int(n64)
    split_node(normals, faces, first, n, leaf, round_limit)
    if n > 8 * leaf:
        return
    # the subtree below: at most three more levels (n <= 8 leaf: its great-grandchildren are leaves)
    for c1 in range(2):
        h1 = n // 2
        f1 = first + c1 * h1
        n1 = h1 + c1 * (n - 2 * h1)
        if n > leaf:
            split_node(normals, faces, f1, n1, leaf, round_limit)
            for c2 in range(2):
                h2 = n1 // 2
                f2 = f1 + c2 * h2
                n2 = h2 + c2 * (n1 - 2 * h2)
                if n1 > leaf:
                    split_node(normals, faces, f2, n2, leaf, round_limit)
                    for c3 in range(2):
                        h3 = n2 // 2
                        if n2 > leaf:
                            split_node(
                                normals, faces, f2 + c3 * h3, h3 + c3 * (n2 - 2 * h3), leaf, round_limit
                            )


def plane_tree_nodes_rows(
    normals: wp.array(dtype=wp.vec3d),
    offsets: wp.array(dtype=wp.float64),
    starts: wp.array(dtype=wp.int64),
    counts: wp.array(dtype=wp.int64),
    axes: wp.array(dtype=wp.vec3d),
    least_cosines: wp.array(dtype=wp.float64),
    lowest: wp.array(dtype=wp.float64),
    row_start: int,
):
    """Node ``r = row_start + tid`` of the plane trees of convex meshes, over the faces in rows ``[starts[r],
    starts[r] + counts[r])`` of ``normals`` (unit, float64) and ``offsets`` (see ``warpgeo._world.tables._plane_trees``):
    its cone axis ``axes[r]`` (the normalised sum of the normals, added one by one in row order; ``(1, 0, 0)``
    where they cancel), the least cosine between a normal and that axis, and the least offset. A node whose
    rows do not lie in the arrays gets nothing. Launched by rows."""
    r = wp.tid() + row_start
    if r >= starts.shape[0] or r >= counts.shape[0] or r >= axes.shape[0]:
        return
    if r >= least_cosines.shape[0] or r >= lowest.shape[0]:
        return
    first = starts[r]
    last = first + counts[r]
    if first < wp.int64(0) or last <= first:
        return
    if last > wp.int64(normals.shape[0]) or last > wp.int64(offsets.shape[0]):
        return
    total = wp.vec3d()
    low = offsets[int(first)]
    for j in range(int(first), int(last)):
        total = total + normals[j]
        low = wp.min(low, offsets[j])
    length = wp.sqrt(total[0] * total[0] + total[1] * total[1] + total[2] * total[2])
    axis = wp.vec3d(wp.float64(1.0), wp.float64(0.0), wp.float64(0.0))
    if length > wp.float64(1.0e-12):
        axis = total / length
    least = wp.float64(1.0)
    for j in range(int(first), int(last)):
        n = normals[j]
        least = wp.min(least, n[0] * axis[0] + n[1] * axis[1] + n[2] * axis[2])
    axes[r] = axis
    least_cosines[r] = least
    lowest[r] = low


#: ``CLOSED_FACES["float32"].closed_faces_rows``.
CLOSED_FACES = KernelTable(
    f"{__name__}.closed_faces",
    (closed_faces_rows,),
    {"float32": {}},
    options=OPTIONS,
    host_too=True,  # a CUDA world builds its closed meshes' tables on the host (warpgeo._world.tables)
)
#: ``PLANE_TREES["float32"].plane_tree_split_rows`` / ``.plane_tree_nodes_rows``.
PLANE_TREES = KernelTable(
    f"{__name__}.plane_trees",
    (plane_tree_split_rows, plane_tree_nodes_rows),
    {"float32": {}},
    options=OPTIONS,
    host_too=True,
)
