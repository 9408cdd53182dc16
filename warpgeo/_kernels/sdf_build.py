"""The kernels a :class:`~warpgeo.world.MeshWorld` runs once per mesh when it is built (see ``sdf.py``).

Apart from the query kernels: building a world compiles only this small module (:data:`BUILD`), never the
query kernels, and a query compiles only its own kernel. Each kernel takes every new mesh of a world at once,
one row a face or a grid cell, and finds its mesh by a binary search over the meshes' first rows
(``segment_of``): ``face_checks_rows`` (slivers, the edge-pairing hash), ``mesh_intersections_rows`` (the
closed-mesh check) and ``grid_cells_rows`` (the coarse distance grids), all launched by rows (on the CPU, side
by side on every core). ``closed_faces_rows`` computes what the tables of closed meshes read of their faces
(normals, corner angles, convexity at the edges). A convex mesh's plane tree is one row a node: ``plane_tree_split_rows`` (a level of
the trees: each node's faces split in place between its children) and ``plane_tree_nodes_rows`` (every node's
cone and least offset). ``grid_centres`` and ``face_intersections_rows`` are the same per-row code for one
mesh. A world of cuboids launches none of them. ``winding_probe`` (:data:`WINDING_PROBE`, run once per
process and device, for worlds with winding-number meshes) is a Warp module of its own: most worlds never
compile it. Both tables have one key, ``"float32"`` (Warp meshes are float32).
"""

import warp as wp

from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.sdf import UNBOUNDED, ray_vote_inside

# warpgeo writes every backward itself: no adjoints (they would double the build time)
wp.set_module_options({"enable_backward": False})
#: Options of both modules.
OPTIONS = {"enable_backward": False}


@wp.func
def grid_centre(mesh: wp.uint64, lower: wp.vec3, size: wp.vec3, ny: int, nz: int, with_sign: int, i: int):
    """Distance of the centre of grid cell ``i`` (row-major ``(nx, ny, nz)`` cells of ``size`` from ``lower``),
    for a MeshWorld's grid. ``with_sign``: negative inside, and NaN (a cell of unknown side) where Warp's
    pseudo-normal and a vote of three rays (``sdf.ray_vote_inside``: no second closest-point search)
    disagree."""
    ix = i // (ny * nz)
    iy = (i // nz) % ny
    iz = i % nz
    p = lower + wp.cw_mul(size, wp.vec3(float(ix) + 0.5, float(iy) + 0.5, float(iz) + 0.5))
    q = wp.mesh_query_point_sign_normal(mesh, p, UNBOUNDED)
    d = float(0.0)
    if q.result:
        d = wp.length(p - wp.mesh_eval_position(mesh, q.face, q.u, q.v))
        if with_sign != 0:
            if ray_vote_inside(mesh, p) != (q.sign < 0.0):
                d = wp.nan
            elif q.sign < 0.0:
                d = -d
    return d


def grid_centres(
    mesh: wp.uint64,
    lower: wp.vec3,
    size: wp.vec3,
    ny: int,
    nz: int,
    with_sign: int,
    out: wp.array(dtype=float),
    row_start: int,
):
    """``grid_centre`` of cell ``row_start + tid`` of one mesh's grid, into ``out`` (its cells). Launched by
    rows (``_launch.launch_rows``)."""
    i = wp.tid() + row_start
    if i >= out.shape[0] or ny <= 0 or nz <= 0:
        return
    out[i] = grid_centre(mesh, lower, size, ny, nz, with_sign, i)


@wp.func
def segment_of(first: wp.array(dtype=wp.int64), row: wp.int64):
    """The segment ``k`` whose rows ``[first[k], first[k + 1])`` hold ``row`` (``first`` ascending, from 0);
    -1 where none does."""
    count = first.shape[0] - 1
    if count <= 0 or row < first[0] or row >= first[count]:
        return -1
    lo = int(0)
    hi = count - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if first[mid] <= row:
            lo = mid
        else:
            hi = mid - 1
    return lo


def grid_cells_rows(
    mesh_ids: wp.array(dtype=wp.int64),
    lowers: wp.array(dtype=wp.vec3),
    sizes: wp.array(dtype=wp.vec3),
    dims: wp.array(dtype=wp.vec4i),
    first: wp.array(dtype=wp.int64),
    out: wp.array(dtype=float),
    row_start: int,
):
    """The grids of many meshes in one launch: row ``r = row_start + tid`` is cell ``r - first[k]`` of mesh
    ``k`` (``first``: each mesh's first row, then the total), whose grid is ``dims[k] = (nx, ny, nz,
    with_sign)`` cells of ``sizes[k]`` from ``lowers[k]``; ``out[r]`` its ``grid_centre``. Launched by rows."""
    r = wp.int64(wp.tid() + row_start)
    if r >= wp.int64(out.shape[0]):
        return
    k = segment_of(first, r)
    if k < 0 or k >= mesh_ids.shape[0] or k >= lowers.shape[0] or k >= sizes.shape[0] or k >= dims.shape[0]:
        return
    n = dims[k]
    i = r - first[k]
    if n[0] <= 0 or n[1] <= 0 or n[2] <= 0 or i >= wp.int64(n[0]) * wp.int64(n[1]) * wp.int64(n[2]):
        return
    out[int(r)] = grid_centre(wp.uint64(mesh_ids[k]), lowers[k], sizes[k], n[1], n[2], n[3], int(i))


@wp.func
def is_corner(j: wp.int32, i0: wp.int32, i1: wp.int32, i2: wp.int32):
    if j == i0:
        return True
    if j == i1:
        return True
    return j == i2


#: Relative error bound of a float64 orientation determinant of float64 points, against the sum of the
#: magnitudes of its terms (Shewchuk's filter ``(7 + 56 eps) eps`` for 3 x 3, ``(3 + 16 eps) eps`` for 2 x 2,
#: eps = 2**-53, the differences of the coordinates included), rounded up generously.
ORIENT_ERROR = wp.constant(wp.float64(1.0e-14))


@wp.func
def orient3d(a: wp.vec3d, b: wp.vec3d, c: wp.vec3d, d: wp.vec3d):
    """The sign of ``(a - d) . ((b - d) x (c - d))`` (positive where ``d`` lies below the plane of ``abc``,
    wound counter-clockwise seen from above), 0 where float64 rounding could flip it (a point on the plane,
    or too near it to tell)."""
    ad = a - d
    bd = b - d
    cd = c - d
    x0 = bd[1] * cd[2]
    x1 = bd[2] * cd[1]
    y0 = bd[2] * cd[0]
    y1 = bd[0] * cd[2]
    z0 = bd[0] * cd[1]
    z1 = bd[1] * cd[0]
    det = ad[0] * (x0 - x1) + ad[1] * (y0 - y1) + ad[2] * (z0 - z1)
    bound = (
        wp.abs(ad[0]) * (wp.abs(x0) + wp.abs(x1))
        + wp.abs(ad[1]) * (wp.abs(y0) + wp.abs(y1))
        + wp.abs(ad[2]) * (wp.abs(z0) + wp.abs(z1))
    )
    if det > ORIENT_ERROR * bound:
        return 1
    if det < -ORIENT_ERROR * bound:
        return -1
    return 0


@wp.func
def orient2d(ax: wp.float64, ay: wp.float64, bx: wp.float64, by: wp.float64, cx: wp.float64, cy: wp.float64):
    """The sign of ``(b - a) x (c - a)`` in the plane, 0 where float64 rounding could flip it."""
    left = (bx - ax) * (cy - ay)
    right = (by - ay) * (cx - ax)
    det = left - right
    bound = ORIENT_ERROR * (wp.abs(left) + wp.abs(right))
    if det > bound:
        return 1
    if det < -bound:
        return -1
    return 0


@wp.func
def opposite(s0: int, s1: int, s2: int):
    """Whether the signs ``s0, s1, s2`` include both a certain positive and a certain negative one."""
    positive = s0 > 0 or s1 > 0 or s2 > 0
    negative = s0 < 0 or s1 < 0 or s2 < 0
    return positive and negative


@wp.func
def strictly_outside(s: int, t: int, side: int):
    """Whether two points whose signs against an edge line are ``s`` and ``t`` are both certainly on the side
    opposite ``side`` (the triangle's)."""
    return s * side < 0 and t * side < 0


@wp.func
def segment_meets_coplanar_triangle(p: wp.vec3d, q: wp.vec3d, a: wp.vec3d, b: wp.vec3d, c: wp.vec3d):
    """Whether segment ``pq``, in the plane of triangle ``abc`` (as far as rounding tells), may meet the closed
    triangle: projected along the dominant axis of the triangle's normal, they are disjoint only where a line
    through ``pq`` or through an edge separates them strictly (separating axes of two convex sets in the
    plane); a sign rounding leaves unknown never separates."""
    n = wp.cross(b - a, c - a)
    u = int(0)
    v = int(1)
    if wp.abs(n[0]) >= wp.abs(n[1]) and wp.abs(n[0]) >= wp.abs(n[2]):
        u = 1
        v = 2
    elif wp.abs(n[1]) >= wp.abs(n[2]):
        u = 2
        v = 0
    side = orient2d(a[u], a[v], b[u], b[v], c[u], c[v])
    if side == 0:  # degenerate in projection (the caller rejects slivers): cannot tell, assume they meet
        return True
    # a line through pq with the whole triangle strictly on one side
    sa = orient2d(p[u], p[v], q[u], q[v], a[u], a[v])
    sb = orient2d(p[u], p[v], q[u], q[v], b[u], b[v])
    sc = orient2d(p[u], p[v], q[u], q[v], c[u], c[v])
    if (sa > 0 and sb > 0 and sc > 0) or (sa < 0 and sb < 0 and sc < 0):
        return False
    # an edge's line with the whole segment strictly outside
    if strictly_outside(
        orient2d(a[u], a[v], b[u], b[v], p[u], p[v]), orient2d(a[u], a[v], b[u], b[v], q[u], q[v]), side
    ):
        return False
    if strictly_outside(
        orient2d(b[u], b[v], c[u], c[v], p[u], p[v]), orient2d(b[u], b[v], c[u], c[v], q[u], q[v]), side
    ):
        return False
    return not strictly_outside(
        orient2d(c[u], c[v], a[u], a[v], p[u], p[v]), orient2d(c[u], c[v], a[u], a[v], q[u], q[v]), side
    )


@wp.func
def segment_meets_triangle(p: wp.vec3d, q: wp.vec3d, a: wp.vec3d, b: wp.vec3d, c: wp.vec3d, sp: int, sq: int):
    """Whether segment ``pq`` may meet the closed triangle ``abc``, given ``sp = orient3d(a, b, c, p)`` and
    ``sq = orient3d(a, b, c, q)`` (the caller computes each corner's sign once): False only where float64
    orientation signs that rounding cannot flip separate them (so a touch, or a case too near to tell, counts
    as meeting)."""
    if sp * sq > 0:  # both ends strictly on one side of the plane
        return False
    if sp == 0 and sq == 0:
        return segment_meets_coplanar_triangle(p, q, a, b, c)
    # pq reaches the plane: it meets the triangle where its line passes on no edge's outer side
    return not opposite(orient3d(p, q, a, b), orient3d(p, q, b, c), orient3d(p, q, c, a))


@wp.func
def triangles_meet(a: wp.vec3d, b: wp.vec3d, c: wp.vec3d, d: wp.vec3d, e: wp.vec3d, f: wp.vec3d):
    """Whether the closed triangles ``abc`` and ``def`` may intersect. Two triangles meet iff an edge of one
    meets the other (their intersection is a segment, or a polygon in a common plane, whose ends or corners
    lie on edges of one of them), and each edge test errs only towards "meet" (see
    ``segment_meets_triangle``): no false "disjoint", and "meet" only where they touch or rounding cannot
    separate them (unlike a fixed epsilon, which takes nearly coplanar faces of a fine mesh for coplanar).
    Each corner's sign against the other triangle's plane is computed once (6 orientations, not 12); where
    one triangle lies strictly on one side of the other's plane, its three edge tests are false at once."""
    sa = orient3d(d, e, f, a)
    sb = orient3d(d, e, f, b)
    sc = orient3d(d, e, f, c)
    sd = orient3d(a, b, c, d)
    se = orient3d(a, b, c, e)
    sf = orient3d(a, b, c, f)
    if segment_meets_triangle(a, b, d, e, f, sa, sb):
        return True
    if segment_meets_triangle(b, c, d, e, f, sb, sc):
        return True
    if segment_meets_triangle(c, a, d, e, f, sc, sa):
        return True
    if segment_meets_triangle(d, e, a, b, c, sd, se):
        return True
    if segment_meets_triangle(e, f, a, b, c, se, sf):
        return True
    return segment_meets_triangle(f, d, a, b, c, sf, sd)


@wp.func
def face_meets(mesh: wp.uint64, f: int, num_faces: int):
    """How many later faces (``g > f``) share no vertex with face ``f`` and meet it (or touch it, or come too
    near for float64 orientation signs to tell: see ``triangles_meet``)."""
    m = wp.mesh_get(mesh)
    if f < 0 or (f + 1) * 3 > m.indices.shape[0] or num_faces * 3 > m.indices.shape[0]:
        return 0
    i0 = m.indices[f * 3 + 0]
    i1 = m.indices[f * 3 + 1]
    i2 = m.indices[f * 3 + 2]
    a = m.points[i0]
    b = m.points[i1]
    c = m.points[i2]
    query = wp.mesh_query_aabb(mesh, wp.min(wp.min(a, b), c), wp.max(wp.max(a, b), c))
    g = int(0)
    count = int(0)
    while wp.mesh_query_aabb_next(query, g):
        if g > f and g < num_faces:
            j0 = m.indices[g * 3 + 0]
            j1 = m.indices[g * 3 + 1]
            j2 = m.indices[g * 3 + 2]
            shared = is_corner(j0, i0, i1, i2) or is_corner(j1, i0, i1, i2) or is_corner(j2, i0, i1, i2)
            if not shared:
                hit = triangles_meet(
                    wp.vec3d(a),
                    wp.vec3d(b),
                    wp.vec3d(c),
                    wp.vec3d(m.points[j0]),
                    wp.vec3d(m.points[j1]),
                    wp.vec3d(m.points[j2]),
                )
                if hit:
                    count += 1
    return count


def face_intersections(mesh: wp.uint64, num_faces: int, found: wp.array(dtype=wp.int32)):
    """Count the pairs of faces (``tid`` and a later one) that share no vertex and intersect (or touch, or
    come too near for float64 orientation signs to tell: see ``triangles_meet``)."""
    count = face_meets(mesh, wp.tid(), num_faces)
    if count > 0:
        wp.atomic_add(found, 0, count)


def face_intersections_rows(mesh: wp.uint64, num_faces: int, found: wp.array(dtype=wp.int32), row_start: int):
    """``face_intersections`` of faces ``row_start + tid``, launched by rows (``_launch.launch_rows``: the
    CPU's cores side by side). A world only asks whether any pair meets: once one is found, the faces not yet
    tested are skipped (the count is then a lower bound, still > 0)."""
    f = wp.tid() + row_start
    if found[0] != 0:
        return
    count = face_meets(mesh, f, num_faces)
    if count > 0:
        wp.atomic_add(found, 0, count)


def mesh_intersections_rows(
    mesh_ids: wp.array(dtype=wp.int64),
    first: wp.array(dtype=wp.int64),
    found: wp.array(dtype=wp.int32),
    row_start: int,
):
    """``face_intersections`` of many meshes in one launch: row ``r = row_start + tid`` is face ``r - first[k]``
    of mesh ``k`` (``first``: each mesh's first row, then the total); ``found[k]`` becomes nonzero where a pair
    of mesh ``k``'s faces meets. Once one is found, that mesh's faces not yet tested are skipped. Launched by
    rows."""
    r = wp.int64(wp.tid() + row_start)
    k = segment_of(first, r)
    if k < 0 or k >= mesh_ids.shape[0] or k >= found.shape[0]:
        return
    if found[k] != 0:
        return
    count = face_meets(wp.uint64(mesh_ids[k]), int(r - first[k]), int(first[k + 1] - first[k]))
    if count > 0:
        wp.atomic_add(found, k, count)


#: The pieces of a fan's face (``fan_pieces_rows``, ``fan_intersections_rows``): a face is cut by lines parallel
#: to its shortest edge at ``t = 1/2, 3/4, 7/8, ...`` of the way from the opposite corner (a fan's hub) to that
#: edge, so the pieces shrink towards the short edge (a fan's rim), where the faces of another fan come near.
#: A face stored in the grouped BVH has ``STORED_PIECES`` pieces; a face that queries it has one more level
#: for each doubling of its longest to shortest edge, at most ``MAX_QUERY_PIECES``.
STORED_PIECES = wp.constant(4)
MAX_QUERY_PIECES = wp.constant(16)
#: A piece's box, computed in float64, is moved out by this much of each coordinate (and ``PIECE_TINY``) before
#: it is rounded to float32: more than float32's half ulp (2**-24) and the float64 rounding of the corners,
#: so the float32 box holds the exact piece. It is then clipped to the face's own float32 box.
PIECE_PAD = wp.constant(wp.float64(2.0**-22))
PIECE_TINY = wp.constant(wp.float64(1.0e-37))


@wp.func
def outward_lower(x: wp.float64):
    return wp.float32(x - (wp.abs(x) * PIECE_PAD + PIECE_TINY))


@wp.func
def outward_upper(x: wp.float64):
    return wp.float32(x + (wp.abs(x) * PIECE_PAD + PIECE_TINY))


@wp.func
def piece_t(level: int, count: int):
    """Where piece ``level`` of ``count`` starts: 0, 1/2, 3/4, ... (exact dyadic fractions); 1 for ``level >=
    count`` (the short edge)."""
    if level <= 0:
        return wp.float64(0.0)
    if level >= count:
        return wp.float64(1.0)
    rest = wp.float64(1.0)
    for _ in range(level):
        rest = rest * wp.float64(0.5)
    return wp.float64(1.0) - rest


@wp.func
def piece_lower(o: wp.vec3d, a: wp.vec3d, b: wp.vec3d, t0: wp.float64, t1: wp.float64, face_lower: wp.vec3):
    """The lower corner of a float32 box that holds the exact piece ``t0 <= t <= t1`` of triangle ``oab`` (``t``
    from ``o``, 0, to edge ``ab``, 1; the piece is the hull of its four corners ``o + t (a - o)``, ``o + t (b -
    o)``), clipped to the face's box."""
    p = wp.min(wp.min(o + t0 * (a - o), o + t0 * (b - o)), wp.min(o + t1 * (a - o), o + t1 * (b - o)))
    return wp.max(wp.vec3(outward_lower(p[0]), outward_lower(p[1]), outward_lower(p[2])), face_lower)


@wp.func
def piece_upper(o: wp.vec3d, a: wp.vec3d, b: wp.vec3d, t0: wp.float64, t1: wp.float64, face_upper: wp.vec3):
    """The upper corner (see ``piece_lower``)."""
    p = wp.max(wp.max(o + t0 * (a - o), o + t0 * (b - o)), wp.max(o + t1 * (a - o), o + t1 * (b - o)))
    return wp.min(wp.vec3(outward_upper(p[0]), outward_upper(p[1]), outward_upper(p[2])), face_upper)


@wp.func
def short_edge_corner(a: wp.vec3d, b: wp.vec3d, c: wp.vec3d):
    """0, 1 or 2: the corner opposite the shortest edge of triangle ``abc``."""
    la = wp.length_sq(b - c)
    lb = wp.length_sq(c - a)
    lc = wp.length_sq(a - b)
    if la <= lb and la <= lc:
        return 0
    if lb <= lc:
        return 1
    return 2


@wp.func
def query_piece_count(a: wp.vec3d, b: wp.vec3d, c: wp.vec3d):
    """How many pieces a querying face is cut into: 1 + ceil(log2(longest / shortest edge)), at most
    ``MAX_QUERY_PIECES`` (also for a degenerate face)."""
    la = wp.length(b - c)
    lb = wp.length(c - a)
    lc = wp.length(a - b)
    shortest = wp.min(wp.min(la, lb), lc)
    longest = wp.max(wp.max(la, lb), lc)
    count = int(1)
    reach = shortest
    while count < MAX_QUERY_PIECES and not (reach >= longest):
        reach = reach * wp.float64(2.0)
        count += 1
    return count


def fan_pieces_rows(
    mesh_ids: wp.array(dtype=wp.int64),
    first: wp.array(dtype=wp.int64),
    stored: wp.array(dtype=wp.int64),
    lowers: wp.array(dtype=wp.vec3),
    uppers: wp.array(dtype=wp.vec3),
    row_start: int,
):
    """The boxes of the stored pieces: row ``i = row_start + tid`` is face row ``stored[i]`` (of mesh ``k``:
    rows ``[first[k], first[k + 1])``), whose ``STORED_PIECES`` pieces are items ``STORED_PIECES * i + j``.
    A face that cannot be read keeps the boxes it was given (never happens: the host checked the faces).
    Launched by rows."""
    i = wp.tid() + row_start
    if (
        i >= stored.shape[0]
        or (i + 1) * STORED_PIECES > lowers.shape[0]
        or (i + 1) * STORED_PIECES > uppers.shape[0]
    ):
        return
    r = stored[i]
    k = segment_of(first, r)
    if k < 0 or k >= mesh_ids.shape[0]:
        return
    m = wp.mesh_get(wp.uint64(mesh_ids[k]))
    f = int(r - first[k])
    if (f + 1) * 3 > m.indices.shape[0]:
        return
    corner = wp.vec3i(m.indices[f * 3 + 0], m.indices[f * 3 + 1], m.indices[f * 3 + 2])
    for q in range(3):
        if corner[q] < 0 or corner[q] >= m.points.shape[0]:
            return
    p0 = m.points[corner[0]]
    p1 = m.points[corner[1]]
    p2 = m.points[corner[2]]
    face_lower = wp.min(wp.min(p0, p1), p2)
    face_upper = wp.max(wp.max(p0, p1), p2)
    s = short_edge_corner(wp.vec3d(p0), wp.vec3d(p1), wp.vec3d(p2))
    o = wp.vec3d(m.points[corner[s]])
    a = wp.vec3d(m.points[corner[(s + 1) % 3]])
    b = wp.vec3d(m.points[corner[(s + 2) % 3]])
    for j in range(STORED_PIECES):
        t0 = piece_t(j, STORED_PIECES)
        t1 = piece_t(j + 1, STORED_PIECES)
        lowers[i * STORED_PIECES + j] = piece_lower(o, a, b, t0, t1, face_lower)
        uppers[i * STORED_PIECES + j] = piece_upper(o, a, b, t0, t1, face_upper)


@wp.func
def shares_corner(mesh: wp.uint64, g: int, i0: wp.int32, i1: wp.int32, i2: wp.int32):
    m = wp.mesh_get(mesh)
    return (
        is_corner(m.indices[g * 3 + 0], i0, i1, i2)
        or is_corner(m.indices[g * 3 + 1], i0, i1, i2)
        or is_corner(m.indices[g * 3 + 2], i0, i1, i2)
    )


@wp.func
def pair_meets(mesh: wp.uint64, a: wp.vec3d, b: wp.vec3d, c: wp.vec3d, g: int):
    """``triangles_meet`` of ``abc`` and face ``g`` (whose corners the caller checked)."""
    m = wp.mesh_get(mesh)
    return triangles_meet(
        a,
        b,
        c,
        wp.vec3d(m.points[m.indices[g * 3 + 0]]),
        wp.vec3d(m.points[m.indices[g * 3 + 1]]),
        wp.vec3d(m.points[m.indices[g * 3 + 2]]),
    )


@wp.func
def face_readable(mesh: wp.uint64, g: int, num_faces: int):
    """Whether face ``g`` of a mesh of ``num_faces`` faces and its corners can be read."""
    m = wp.mesh_get(mesh)
    if g < 0 or g >= num_faces or (g + 1) * 3 > m.indices.shape[0]:
        return False
    for q in range(3):
        j = m.indices[g * 3 + q]
        if j < 0 or j >= m.points.shape[0]:
            return False
    return True


def fan_intersections_rows(
    mesh_ids: wp.array(dtype=wp.int64),
    first: wp.array(dtype=wp.int64),
    face_group: wp.array(dtype=wp.int32),
    group_first: wp.array(dtype=wp.int64),
    bvh: wp.uint64,
    item_face: wp.array(dtype=wp.int32),
    found: wp.array(dtype=wp.int32),
    row_start: int,
):
    """The closed-mesh check of meshes with fans (see ``mesh_intersections_rows``, whose answer it gives): row
    ``r = row_start + tid`` is face ``f = r - first[k]`` of mesh ``k``. The faces around a hub (a vertex of
    many faces) form its group (``face_group[r]``: a global group id, -1 for a face of no group, the rest);
    mesh ``k``'s groups are ``[group_first[k], group_first[k + 1])`` and their faces' pieces
    (``fan_pieces_rows``) are the items of the grouped BVH ``bvh``, item ``i`` of face ``item_face[i]``.

    Two faces of one group share its hub: never tested (nor were they before). A face of the rest tests the
    later faces of the rest its box meets (as before), and the faces of every group whose pieces' boxes meet
    its own pieces' boxes; a face of a group, those of the later groups. The pieces of a face cover it, so a
    pair of faces that meet (or touch) has two pieces whose boxes meet; each such pair is tested by
    ``triangles_meet``, as before. Launched by rows."""
    r = wp.int64(wp.tid() + row_start)
    k = segment_of(first, r)
    if k < 0 or k >= mesh_ids.shape[0] or k >= found.shape[0] or k + 1 >= group_first.shape[0]:
        return
    if r >= wp.int64(face_group.shape[0]) or found[k] != 0:
        return
    mesh = wp.uint64(mesh_ids[k])
    m = wp.mesh_get(mesh)
    f = int(r - first[k])
    num_faces = int(first[k + 1] - first[k])
    if num_faces * 3 > m.indices.shape[0] or not face_readable(mesh, f, num_faces):
        return
    i0 = m.indices[f * 3 + 0]
    i1 = m.indices[f * 3 + 1]
    i2 = m.indices[f * 3 + 2]
    p0 = m.points[i0]
    p1 = m.points[i1]
    p2 = m.points[i2]
    a = wp.vec3d(p0)
    b = wp.vec3d(p1)
    c = wp.vec3d(p2)
    face_lower = wp.min(wp.min(p0, p1), p2)
    face_upper = wp.max(wp.max(p0, p1), p2)
    own = face_group[int(r)]
    if own < 0:  # the rest against the later faces of the rest: the mesh's own BVH, as before
        faces = wp.mesh_query_aabb(mesh, face_lower, face_upper)
        g = int(0)
        while wp.mesh_query_aabb_next(faces, g):
            if g > f and face_readable(mesh, g, num_faces):  # noqa: SIM102 (Warp does not short-circuit)
                if face_group[int(first[k]) + g] < 0 and not shares_corner(mesh, g, i0, i1, i2):  # noqa: SIM102
                    if pair_meets(mesh, a, b, c, g):
                        wp.atomic_add(found, k, 1)
                        return
    s = short_edge_corner(a, b, c)
    o = wp.vec3d(m.points[m.indices[f * 3 + s]])
    u = wp.vec3d(m.points[m.indices[f * 3 + (s + 1) % 3]])
    v = wp.vec3d(m.points[m.indices[f * 3 + (s + 2) % 3]])
    count = query_piece_count(a, b, c)
    for group in range(int(group_first[k]), int(group_first[k + 1])):
        if own < 0 or group > own:
            root = wp.bvh_get_group_root(bvh, group)
            if root >= 0:  # -1 would be the whole BVH: every mesh's groups
                for j in range(count):
                    t0 = piece_t(j, count)
                    t1 = piece_t(j + 1, count)
                    pieces = wp.bvh_query_aabb(
                        bvh,
                        piece_lower(o, u, v, t0, t1, face_lower),
                        piece_upper(o, u, v, t0, t1, face_upper),
                        root,
                    )
                    item = int(0)
                    while wp.bvh_query_next(pieces, item):
                        if item >= 0 and item < item_face.shape[0]:
                            g = int(item_face[item])
                            if face_readable(mesh, g, num_faces):
                                if shares_corner(mesh, g, i0, i1, i2):
                                    continue
                                if pair_meets(mesh, a, b, c, g):
                                    wp.atomic_add(found, k, 1)
                                    return


#: Warp's mesh queries skip a face whose ``|e0 x e1| / (|e0|^2 + |e1|^2 + |e2|^2)`` is below this (a sliver).
SLIVER_RATIO = wp.constant(1.0e-6)


@wp.func
def vertex_hash(i: int, seed: wp.uint64):
    """A 64-bit hash of vertex index ``i``: splitmix64's finaliser of ``i * seed + seed``, made odd."""
    x = wp.uint64(i) * seed + seed
    x = (x ^ (x >> wp.uint64(30))) * wp.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> wp.uint64(27))) * wp.uint64(0x94D049BB133111EB)
    return (x ^ (x >> wp.uint64(31))) | wp.uint64(1)


@wp.func
def edge_term(a: int, b: int):
    """The directed edge ``a -> b``'s term of the edge-pairing hash less its reverse's (wrapping uint64)."""
    first = wp.uint64(0x9E3779B97F4A7C15)
    second = wp.uint64(0xD1B54A32D192ED03)
    return vertex_hash(a, first) * vertex_hash(b, second) - vertex_hash(b, first) * vertex_hash(a, second)


def face_checks_rows(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    vertex_first: wp.array(dtype=wp.int64),
    face_first: wp.array(dtype=wp.int64),
    slivers: wp.array(dtype=wp.int32),
    edge_hash: wp.array(dtype=wp.int64),
    row_start: int,
):
    """Per face ``f = row_start + tid`` of many meshes (their points and faces concatenated; mesh ``k``'s faces
    are rows ``[face_first[k], face_first[k + 1])``, each indexing the mesh's own points, which start at row
    ``vertex_first[k]``): ``slivers[f]`` = 1 if Warp's mesh queries skip it as a sliver (their own float32
    test; a NaN ratio, all three corners at one point, counts too), else 0, and ``edge_hash[f]``, the sum over
    its directed edges ``a -> b`` of ``h(a) g(b) - h(b) g(a)`` (wrapping 64-bit integers, as int64). Where
    every directed edge of a mesh has its reverse, the hashes of all its faces sum to 0 (mod 2**64); an open
    mesh's boundary edges almost surely leave a rest (``_mesh_prep``: whether a mesh may be closed, before the
    exact edge pairing; the host sums each mesh's rows). The face indices were checked on the host
    (``_mesh_prep.load_mesh``); one outside its mesh counts as a sliver. Launched by rows."""
    f = wp.tid() + row_start
    if f >= edge_hash.shape[0] or f >= slivers.shape[0] or 3 * f + 2 >= indices.shape[0]:
        return
    k = segment_of(face_first, wp.int64(f))
    if k < 0 or k + 1 >= vertex_first.shape[0]:
        slivers[f] = 1
        edge_hash[f] = wp.int64(1)
        return
    i = indices[3 * f]
    j = indices[3 * f + 1]
    l = indices[3 * f + 2]
    first = vertex_first[k]
    n = vertex_first[k + 1] - first
    if i < 0 or j < 0 or l < 0 or wp.int64(i) >= n or wp.int64(j) >= n or wp.int64(l) >= n:
        slivers[f] = 1  # cannot happen (checked on the host); counted as unusable
        edge_hash[f] = wp.int64(1)
        return
    if first + n > wp.int64(points.shape[0]):
        slivers[f] = 1
        edge_hash[f] = wp.int64(1)
        return
    edge_hash[f] = wp.int64(edge_term(i, j) + edge_term(j, l) + edge_term(l, i))
    p = points[int(first) + i]
    q = points[int(first) + j]
    r = points[int(first) + l]
    e0 = q - p
    e1 = r - p
    e2 = r - q
    ratio = wp.length(wp.cross(e0, e1)) / (wp.dot(e0, e0) + wp.dot(e1, e1) + wp.dot(e2, e2))
    slivers[f] = 0
    if not (ratio >= SLIVER_RATIO):
        slivers[f] = 1


def incident_faces_rows(
    faces: wp.array(dtype=wp.vec3i),
    first: wp.array(dtype=wp.int32),
    cursor: wp.array(dtype=wp.int32),
    incident: wp.array(dtype=wp.int32),
    row_start: int,
):
    """Face ``f = row_start + tid`` entered in the list of faces of each of its corners: vertex ``v``'s list is
    ``incident[first[v]:first[v + 1]]`` (``first``: the prefix sums of the vertices' face counts), filled
    through ``cursor`` (zeros; an atomic counter a vertex: the lists' order is any). A corner outside the
    vertices, or a list already full, is skipped. On the CPU one launch only, never split over threads (Warp's
    CPU atomics are plain read-modify-writes)."""
    f = wp.tid() + row_start
    if f >= faces.shape[0]:
        return
    i = faces[f]
    for k in range(3):
        v = i[k]
        if v >= 0 and v + 1 < first.shape[0] and v < cursor.shape[0]:
            slot = first[v] + wp.atomic_add(cursor, v, 1)
            if slot < first[v + 1] and slot >= 0 and slot < incident.shape[0]:
                incident[slot] = f


def edge_partners_rows(
    faces: wp.array(dtype=wp.vec3i),
    first: wp.array(dtype=wp.int32),
    incident: wp.array(dtype=wp.int32),
    partner: wp.array(dtype=wp.int32),
    row_start: int,
):
    """For each directed edge ``a -> b`` of face ``f = row_start + tid`` (its edges ab, bc, ca: edge ``3 f + k``),
    the directed edge ``3 g + j`` that runs ``b -> a`` where exactly one does and ``a -> b`` is only ``f``'s, found
    in the face list (``incident_faces_rows``) of whichever of ``a`` and ``b`` has fewer faces; -1 otherwise
    (a boundary edge, an edge of three faces or more, two faces wound alike, ``a == b``). Launched by rows."""
    f = wp.tid() + row_start
    if f >= faces.shape[0] or wp.int64(3) * wp.int64(f) + wp.int64(2) >= wp.int64(partner.shape[0]):
        return
    count = faces.shape[0]
    vertices = first.shape[0] - 1
    i = faces[f]
    for k in range(3):
        a = i[k]
        b = i[(k + 1) % 3]
        found = int(-1)
        if a != b and a >= 0 and b >= 0 and a < vertices and b < vertices:
            v = a
            if first[b + 1] - first[b] < first[a + 1] - first[a]:
                v = b
            forward = int(0)
            reverse = int(0)
            lo = wp.max(first[v], 0)
            hi = wp.min(first[v + 1], incident.shape[0])
            for s in range(lo, hi):
                g = incident[s]
                if g >= 0 and g < count:
                    other = faces[g]
                    for j in range(3):
                        if other[j] == a and other[(j + 1) % 3] == b:
                            forward += 1
                        if other[j] == b and other[(j + 1) % 3] == a:
                            reverse += 1
                            found = 3 * g + j
            if forward != 1 or reverse != 1:
                found = -1
        partner[3 * f + k] = found


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
    """One level of the plane trees of convex meshes (see ``_mesh_prep._plane_trees``): node ``r = row_start +
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
    starts[r] + counts[r])`` of ``normals`` (unit, float64) and ``offsets`` (see ``_mesh_prep._plane_trees``):
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


def winding_probe(mesh: wp.uint64, p: wp.vec3, out_sign: wp.array(dtype=float)):
    """The winding-number sign of ``p``; used once to check that winding support really took."""
    q = wp.mesh_query_point_sign_winding_number(mesh, p, UNBOUNDED)
    out_sign[0] = q.sign


#: ``BUILD["float32"].grid_cells_rows`` / ``.mesh_intersections_rows`` / ``.face_checks_rows`` /
#: ``.plane_tree_nodes_rows``: what building a
#: world launches, each over every new mesh at once (``grid_centres``, ``face_intersections_rows``: one mesh's
#: grid and closed-mesh check; ``face_intersections``: the same test as one launch that counts every pair).
BUILD = KernelTable(
    f"{__name__}.build",
    (
        grid_centres,
        grid_cells_rows,
        face_intersections,
        face_intersections_rows,
        mesh_intersections_rows,
        fan_pieces_rows,
        fan_intersections_rows,
        face_checks_rows,
        incident_faces_rows,
        edge_partners_rows,
        closed_faces_rows,
        plane_tree_split_rows,
        plane_tree_nodes_rows,
    ),
    {"float32": {}},
    options=OPTIONS,
    host_too=True,  # a CUDA world builds its closed meshes' tables on the host (_mesh_prep.build_tables)
)
#: ``WINDING_PROBE["float32"].winding_probe``: a module of its own, compiled only for winding-number worlds.
WINDING_PROBE = KernelTable(f"{__name__}.winding_probe", (winding_probe,), {"float32": {}}, options=OPTIONS)
