"""The exact closed-mesh check: do two faces of a mesh that share no vertex meet (``triangles_meet``, with
exact orientation predicates)? ``mesh_intersections_rows`` (:data:`FACES_MEET`): every face's box queries its
mesh's BVH, every new mesh at once; a mesh with large fans (cones, cylinders' caps) is checked through its
faces' pieces instead (``fan_pieces_rows``, ``fan_intersections_rows``: :data:`FANS_MEET`, a module only
such meshes load). :data:`FACES_MEET_ONE`: the same test for one mesh (``face_intersections_rows``) and as
one launch that counts every pair (``face_intersections``), the references of tests and benchmarks."""

import warp as wp

from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.build_checks import segment_of

# warpgeo writes every backward itself: no adjoints (they would double the build time)
wp.set_module_options({"enable_backward": False})
#: Options of this file's modules.
OPTIONS = {"enable_backward": False}


@wp.func
def is_corner(j: wp.int32, i0: wp.int32, i1: wp.int32, i2: wp.int32):
    if j == i0:
        return True
    if j == i1:
        return True
    return j == i2


#: Relative error bound of a float64 orientation determinant of float64 points, against the sum of the
#: magnitudes of its terms (Shewchuk's filter ``(7 + 56 eps) eps`` = 7.8e-16 for 3 x 3, ``(3 + 16 eps) eps`` =
#: 3.3e-16 for 2 x 2, eps = 2**-53, the differences of the coordinates included), rounded up. Not more: at
#: 1e-14 a cone of 60,000 sections (its float32 rim not quite convex) had pairs of faces no sign could tell
#: apart, so it was taken for self-intersecting (not closed) and lost its exact sign.
ORIENT_ERROR = wp.constant(wp.float64(1.0e-15))


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


#: ``FACES_MEET["float32"].mesh_intersections_rows``: the check of every new mesh, a row a face.
FACES_MEET = KernelTable(
    f"{__name__}.faces_meet", (mesh_intersections_rows,), {"float32": {}}, options=OPTIONS
)
#: ``FANS_MEET["float32"].fan_pieces_rows`` / ``.fan_intersections_rows``: meshes with large fans.
FANS_MEET = KernelTable(
    f"{__name__}.fans_meet", (fan_pieces_rows, fan_intersections_rows), {"float32": {}}, options=OPTIONS
)
#: ``FACES_MEET_ONE["float32"].face_intersections`` / ``.face_intersections_rows``: one mesh (references).
FACES_MEET_ONE = KernelTable(
    f"{__name__}.faces_meet_one",
    (face_intersections, face_intersections_rows),
    {"float32": {}},
    options=OPTIONS,
)
