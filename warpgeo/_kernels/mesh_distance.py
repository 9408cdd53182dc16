"""One mesh slot's signed distance (:func:`mesh_distance`) and the shortcuts it takes: Warp's BVH query
(float32) picks the closest face, whose distance and direction are recomputed in float64; the side comes
from the grid, the pseudo-normals or the plane tree where the tables say so, else from the slot's sign
method. :func:`slot_distance` is what the query kernels call: by the world struct's type, this function or,
in a world of closed forms only, ``world.cuboid_mesh_distance`` (no BVH query compiled). How the exact
shortcuts work: ``docs/sdf.md``.
"""

from typing import Any

import warp as wp

from warpgeo._kernels.world import (
    FAR_ABS,
    FAR_RATIO,
    FLAG_BOX,
    FLAG_CLOSED,
    FLAG_PENDING,
    FLAG_SLIVERS,
    GRID_MARGIN,
    KIND_MESH,
    SEARCH_PAD_ABS,
    SEARCH_PAD_REL,
    SIGN_NORMAL,
    SIGN_UNSIGNED,
    SIGN_WINDING,
    UNBOUNDED,
    WORLD,
    box_distance,
    closed_form_distance,
    cuboid_mesh_distance,
    scaled_length,
    slot_in_use,
)

# the torch glue differentiates through the gradient these kernels write; Warp's adjoints are not needed
# (and would double the build time)
wp.set_module_options({"enable_backward": False})

#: Which feature of a triangle ``abc`` (corners 0, 1, 2 of a face) holds the closest point to a query
#: (``closest_point_on_triangle``): its interior, a vertex (``FEATURE_VERTEX + corner``) or an edge
#: (``FEATURE_EDGE + k``, k = 0: ab, 1: bc, 2: ca; the slot of ``face_neighbors`` across it).
FEATURE_FACE = wp.constant(0)


FEATURE_VERTEX = wp.constant(1)


FEATURE_EDGE = wp.constant(4)


@wp.func
def closest_point_on_triangle(p: Any, a: Any, b: Any, c: Any):
    """``(q, feature)``: the point ``q`` of triangle ``abc`` closest to ``p`` (Voronoi-region walk; all in
    ``p``'s precision) and the feature it lies on: the face's interior (``FEATURE_FACE``: ``p - q`` is then
    along the face normal), a vertex or an edge (see ``FEATURE_VERTEX``, ``FEATURE_EDGE``)."""
    zero = type(p[0])(0.0)
    ab = b - a
    ac = c - a
    ap = p - a
    d1 = wp.dot(ab, ap)
    d2 = wp.dot(ac, ap)
    if d1 <= zero and d2 <= zero:
        return a, FEATURE_VERTEX + 0
    bp = p - b
    d3 = wp.dot(ab, bp)
    d4 = wp.dot(ac, bp)
    if d3 >= zero and d4 <= d3:
        return b, FEATURE_VERTEX + 1
    vc = d1 * d4 - d3 * d2
    if vc <= zero and d1 >= zero and d3 <= zero:
        return a + ab * (d1 / (d1 - d3)), FEATURE_EDGE + 0
    cp = p - c
    d5 = wp.dot(ab, cp)
    d6 = wp.dot(ac, cp)
    if d6 >= zero and d5 <= d6:
        return c, FEATURE_VERTEX + 2
    vb = d5 * d2 - d1 * d6
    if vb <= zero and d2 >= zero and d6 <= zero:
        return a + ac * (d2 / (d2 - d6)), FEATURE_EDGE + 2
    va = d3 * d6 - d5 * d4
    if va <= zero and (d4 - d3) >= zero and (d5 - d6) >= zero:
        return b + (c - b) * ((d4 - d3) / ((d4 - d3) + (d5 - d6))), FEATURE_EDGE + 1
    denom = type(p[0])(1.0) / (va + vb + vc)
    return a + ab * (vb * denom) + ac * (vc * denom), FEATURE_FACE


@wp.func
def query_point(mesh: wp.uint64, p: wp.vec3, max_dist: float, sign: int):
    if sign == SIGN_WINDING:
        return wp.mesh_query_point_sign_winding_number(mesh, p, max_dist)
    if sign == SIGN_NORMAL:
        return wp.mesh_query_point_sign_normal(mesh, p, max_dist)
    if sign == SIGN_UNSIGNED:
        return wp.mesh_query_point_no_sign(mesh, p, max_dist)
    return wp.mesh_query_point(mesh, p, max_dist)


@wp.func
def ray_vote_inside(mesh: wp.uint64, p: wp.vec3):
    """Whether ``p`` is inside a closed mesh by a vote of three rays (the side of the first face each hits), in
    directions of no symmetry a mesh is likely to share (``FLAG_PENDING``): none runs along an axis, a
    diagonal or a coordinate plane, where Warp's axis rays graze the vertices and edges of symmetric meshes.
    Where the first two agree they are the majority, and the third is not cast."""
    votes = int(0)
    q = wp.mesh_query_ray(mesh, p, wp.normalize(wp.vec3(0.5773503, 0.6947465, 0.4292036)), UNBOUNDED)
    if q.result and q.sign < 0.0:
        votes += 1
    q = wp.mesh_query_ray(mesh, p, wp.normalize(wp.vec3(-0.7236068, 0.2763932, -0.6324555)), UNBOUNDED)
    if q.result and q.sign < 0.0:
        votes += 1
    if votes != 1:
        return votes == 2
    q = wp.mesh_query_ray(mesh, p, wp.normalize(wp.vec3(0.1896427, -0.8506508, -0.4905174)), UNBOUNDED)
    if q.result and q.sign < 0.0:
        votes += 1
    return votes >= 2


@wp.func
def nearest_in_box(mesh: wp.uint64, pd: wp.vec3d, p32: wp.vec3, radius: float, face: int, best: wp.float64):
    """``(face, distance)``: the face nearest ``pd`` (float64, by :func:`closest_point_on_triangle`) among
    ``face`` at ``best`` and every face whose box meets the cube of half-side ``radius`` about ``p32`` (Warp's
    box query, which skips no face: its closest-point queries skip slivers, ``FLAG_SLIVERS``)."""
    r = wp.vec3(radius, radius, radius)
    query = wp.mesh_query_aabb(mesh, p32 - r, p32 + r)
    nearest = best
    found = face
    f = int(0)
    while wp.mesh_query_aabb_next(query, f):
        a = wp.vec3d(wp.mesh_get_point(mesh, f * 3 + 0))
        b = wp.vec3d(wp.mesh_get_point(mesh, f * 3 + 1))
        c = wp.vec3d(wp.mesh_get_point(mesh, f * 3 + 2))
        closest, _feature = closest_point_on_triangle(pd, a, b, c)
        d = wp.length(pd - closest)
        if found < 0 or d < nearest:
            nearest = d
            found = f
    return found, nearest


@wp.func
def padded(radius: float):
    """A float32 search radius padded so that a face the float32 BVH rounds just outside is still found."""
    return radius * (1.0 + SEARCH_PAD_REL) + SEARCH_PAD_ABS


@wp.func
def cell_bounds(
    p: wp.vec3, lower: wp.vec3, upper: wp.vec3, dims: wp.vec4i, grid_cells: wp.array(dtype=float)
):
    """``(s, r)`` for ``p``: the distance ``s`` of the centre ``c`` of the grid cell nearest ``p`` and
    ``r = |p - c|`` plus a rounding margin, so that ``|s| - r <= |d(p)| <= |s| + r`` (distance is
    1-Lipschitz) and, where ``|s| > r``, ``p`` is on the centre's side. ``(0, inf)`` without a grid."""
    nx = dims[0]
    ny = dims[1]
    nz = dims[2]
    if nx <= 0 or ny <= 0 or nz <= 0:
        return 0.0, UNBOUNDED
    size = wp.cw_div(upper - lower, wp.vec3(float(nx), float(ny), float(nz)))
    rel = wp.cw_div(p - lower, size)
    ix = wp.clamp(int(wp.floor(wp.clamp(rel[0], 0.0, float(nx)))), 0, nx - 1)
    iy = wp.clamp(int(wp.floor(wp.clamp(rel[1], 0.0, float(ny)))), 0, ny - 1)
    iz = wp.clamp(int(wp.floor(wp.clamp(rel[2], 0.0, float(nz)))), 0, nz - 1)
    cell = wp.int64(dims[3]) + (wp.int64(ix) * wp.int64(ny) + wp.int64(iy)) * wp.int64(nz) + wp.int64(iz)
    if cell < wp.int64(0) or cell >= wp.int64(grid_cells.shape[0]):
        return 0.0, UNBOUNDED
    s = grid_cells[int(cell)]
    if not wp.isfinite(s):  # a cell whose centre's side is unknown: no bound from it
        return 0.0, UNBOUNDED
    centre = lower + wp.cw_mul(size, wp.vec3(float(ix) + 0.5, float(iy) + 0.5, float(iz) + 0.5))
    scale = wp.max(wp.max(wp.abs(lower), wp.abs(upper))) + wp.length(upper - lower)
    return s, wp.length(p - centre) + GRID_MARGIN * scale


@wp.func
def cone_cap(w: wp.vec3, ww: float, wl: float, axis: wp.vec4, angle: wp.vec4):
    """``max(n . w)`` over the unit vectors ``n`` within the angle ``alpha`` of the unit ``axis`` (``angle =
    (cos alpha, sin alpha, ...)``), with ``ww = |w|^2`` and ``wl = |w|``: ``|w| cos(max(beta - alpha, 0))``,
    ``beta`` the angle between ``axis`` and ``w``."""
    t = axis[0] * w[0] + axis[1] * w[1] + axis[2] * w[2]
    if t >= wl * angle[0]:
        return wl
    return t * angle[0] + wp.sqrt(wp.max(ww - t * t, 0.0)) * angle[1]


@wp.func
def scan_planes(
    w: wp.vec3,
    best: float,
    found: int,
    plane_base: int,
    link: wp.vec3i,
    num_faces: int,
    world: Any,
):
    """``(best, found)`` updated with the planes of a leaf (``link = (next, first row, count)``) nearer ``w``."""
    cone_planes = world.cone_planes
    cone_faces = world.cone_faces
    first = wp.int64(plane_base) + wp.int64(link[1])
    last = first + wp.int64(link[2])
    if link[1] < 0 or last > wp.int64(cone_planes.shape[0]) or last > wp.int64(cone_faces.shape[0]):
        return best, found
    nearest = best
    face = found
    for j in range(int(first), int(last)):
        plane = cone_planes[j]
        v = wp.abs(plane[3] - (plane[0] * w[0] + plane[1] * w[1] + plane[2] * w[2]))
        if v < nearest:
            f = cone_faces[j]
            if f >= 0 and f < num_faces:
                nearest = v
                face = f
    return nearest, face


@wp.func
def plane_face(
    p: wp.vec3,
    start: float,
    table: wp.vec4i,
    num_faces: int,
    world: Any,
):
    """The face whose plane is nearest ``p`` (the smallest ``|n . p - b|`` over every face of the mesh), found
    below ``start`` (-1: none found, or no table): the plane tree of a convex closed mesh (see the module
    docstring). ``table = (first node row, first link row, first plane row, number of nodes)``."""
    cone_nodes = world.cone_nodes
    cone_links = world.cone_links
    node_base = table[0]
    link_base = table[1]
    plane_base = table[2]
    count = table[3]
    if node_base < 0 or link_base < 0 or plane_base < 0 or count <= 0:
        return -1
    if wp.int64(node_base) + wp.int64(2) * wp.int64(count) >= wp.int64(cone_nodes.shape[0]):
        return -1
    if wp.int64(link_base) + wp.int64(count) > wp.int64(cone_links.shape[0]):
        return -1
    head = cone_nodes[node_base]  # the tree's origin and the rounding margin of its bounds
    w = p - wp.vec3(head[0], head[1], head[2])
    margin = head[3]
    ww = wp.dot(w, w)
    wl = wp.sqrt(ww)
    best = start
    found = int(-1)
    # first down the branch of the smaller bound to a leaf: its nearest plane is a tight bound for the rest
    k = int(0)
    for _depth in range(count):
        link = cone_links[link_base + k]
        if link[2] > 0:
            break
        second = link_base + k + 1
        if k + 1 >= count or second >= cone_links.shape[0]:
            break
        other = cone_links[second][0]
        if other <= k + 1 or other >= count:
            break
        near = cone_nodes[node_base + 1 + 2 * (k + 1)]
        far = cone_nodes[node_base + 1 + 2 * other]
        if near[3] - cone_cap(w, ww, wl, near, cone_nodes[node_base + 2 + 2 * (k + 1)]) <= far[3] - cone_cap(
            w, ww, wl, far, cone_nodes[node_base + 2 + 2 * other]
        ):
            k = k + 1
        else:
            k = other
    link = cone_links[link_base + k]
    if link[2] > 0:
        best, found = scan_planes(w, best, found, plane_base, link, num_faces, world)
    k = int(0)
    while k < count:
        axis = cone_nodes[node_base + 1 + 2 * k]
        angle = cone_nodes[node_base + 2 + 2 * k]
        link = cone_links[link_base + k]
        following = wp.max(link[0], k + 1)
        # every plane of the subtree is at least axis[3] - max(n . w) from p (|v| >= v), as is its face
        if axis[3] - cone_cap(w, ww, wl, axis, angle) - margin <= best:
            if link[2] > 0:
                best, found = scan_planes(w, best, found, plane_base, link, num_faces, world)
            else:
                following = k + 1  # descend
        k = following
    return found


@wp.func
def far_distance(mesh: wp.uint64, p: Any):
    """Distance and unit direction from the nearest vertex (of a face) of the mesh to a far point ``p``."""
    m = wp.mesh_get(mesh)
    best = type(p[0])(-1.0)
    best_diff = type(p)()
    for c in range(m.indices.shape[0]):
        i = m.indices[c]
        if i >= 0 and i < m.points.shape[0]:
            diff = p - type(p)(m.points[i])
            dist = scaled_length(diff)
            if best < type(dist)(0.0) or dist < best:
                best = dist
                best_diff = diff
    if best < type(best)(0.0):
        return False, best, best_diff
    if not wp.isfinite(best):  # a point beyond the dtype's range (its distance rounds to inf)
        return True, best, best_diff
    scale = wp.max(wp.max(wp.abs(best_diff[0]), wp.abs(best_diff[1])), wp.abs(best_diff[2]))
    return True, best, wp.normalize(best_diff / scale)


@wp.func
def pseudo_normal_side(
    world: Any,
    mesh: wp.uint64,
    face: int,
    feature: int,
    diff: wp.vec3d,
    a: wp.vec3d,
    b: wp.vec3d,
    c: wp.vec3d,
    topo: wp.vec2i,
):
    """``(known, inside)`` for ``p = q + diff`` whose closest point ``q`` on a closed mesh lies on ``feature``
    of ``face`` (corners ``a, b, c``): the side the angle-weighted pseudo-normal of that feature gives (the
    face normal; the sum of the unit normals of the two faces of an edge; the vertex's angle-weighted
    normal), exact on closed, consistently wound, manifold meshes. ``known`` is False where the tables lack
    the feature (``topo``: this mesh's first rows in ``world.face_neighbors`` / ``world.vertex_normals``, -1:
    none) or ``p`` lies on the pseudo-normal's plane."""
    face_neighbors = world.face_neighbors
    vertex_normals = world.vertex_normals
    n = wp.cross(b - a, c - a)
    m = wp.mesh_get(mesh)
    if feature >= FEATURE_EDGE:
        if topo[0] < 0:
            return False, False
        row = wp.int64(topo[0]) + wp.int64(face)
        if row >= wp.int64(face_neighbors.shape[0]):
            return False, False
        g = face_neighbors[int(row)][feature - FEATURE_EDGE]
        if g < 0 or (g + 1) * 3 > m.indices.shape[0]:
            return False, False
        ga = wp.vec3d(wp.mesh_get_point(mesh, g * 3 + 0))
        gb = wp.vec3d(wp.mesh_get_point(mesh, g * 3 + 1))
        gc = wp.vec3d(wp.mesh_get_point(mesh, g * 3 + 2))
        n = wp.normalize(n) + wp.normalize(wp.cross(gb - ga, gc - ga))
    elif feature >= FEATURE_VERTEX:
        if topo[1] < 0:
            return False, False
        corner = face * 3 + (feature - FEATURE_VERTEX)
        if corner >= m.indices.shape[0]:
            return False, False
        vertex = m.indices[corner]
        row = wp.int64(topo[1]) + wp.int64(vertex)
        if vertex < 0 or row >= wp.int64(vertex_normals.shape[0]):
            return False, False
        n = vertex_normals[int(row)]
    side = wp.dot(diff, n)
    if side == wp.float64(0.0) or not wp.isfinite(side):
        return False, False
    return True, side < wp.float64(0.0)


@wp.func
def mesh_distance(world: Any, e: int, m: int, p: Any, search: Any, surface_eps: Any):
    """Signed distance of ``p`` (in the frame of mesh ``m`` of environment ``e``, precision ``T``) and its
    gradient, if it is below ``search``.

    Returns ``(hit, d, n)``: ``hit`` is False when ``p`` is outside the mesh and at least ``search`` from it
    (then ``d`` and ``n`` are meaningless). ``n`` is the unit gradient of ``d`` in the mesh frame: the
    direction from the closest point, or the outward face normal when ``p`` lies within ``surface_eps`` of
    the surface (there the direction is undefined; the face normal keeps the gradient finite and nonzero).
    """
    mesh = wp.uint64(world.mesh_ids[e, m])
    sign = world.sign[e, m]
    flags = world.grid_flags[e, m]
    lower = world.bounds[e, m, 0]
    upper = world.bounds[e, m, 1]
    zero = type(surface_eps)(0.0)
    box = box_distance(p, lower, upper)
    if box > search:
        return False, zero, type(p)()
    if world.slot_kind[e, m] != KIND_MESH or (flags & FLAG_BOX) != 0:
        # an analytic primitive (no mesh: NO_MESH) or a cuboid mesh: a closed form, no BVH query
        return closed_form_distance(world, e, m, p, search, surface_eps)
    extent = type(box)(wp.length(upper - lower))
    if box > extent * type(box)(FAR_RATIO) or box > type(box)(FAR_ABS):
        found, far, direction = far_distance(mesh, p)
        if not found:
            return False, zero, type(p)()
        return far < search, type(surface_eps)(far), direction
    p32 = wp.vec3(p)
    pd = wp.vec3d(p)
    closed = (flags & FLAG_CLOSED) != 0
    # Where the side is not known otherwise, the method stays the mesh's own: Warp's pseudo-normal treats faces
    # within 1e-3 average edge lengths of the closest as equally close, which flips the sign near the
    # mid-plane of thin parts, so it never stands in for another method.
    method = sign
    search32 = float(search)
    face = int(-1)
    inside = False
    s = float(0.0)
    slack = UNBOUNDED
    if box > zero and (closed or sign == SIGN_UNSIGNED) and (flags & FLAG_SLIVERS) == 0:
        # outside the box of a closed mesh is outside the mesh (and an unsigned mesh has no inside): the closest
        # face within the search radius, if any, and no sign (nor grid: its cells cover the box only)
        q = wp.mesh_query_point_no_sign(mesh, p32, padded(search32))
        if not q.result:
            return False, zero, type(p)()
        face = q.face
    else:
        s, slack = cell_bounds(p32, lower, upper, world.grid_dims[e, m], world.grid_cells)
    if face < 0 and wp.abs(s) > slack and (closed or sign == SIGN_UNSIGNED):
        # p's cell does not touch the surface, and its side is known
        if s > 0.0 or sign == SIGN_UNSIGNED:
            if type(search)(wp.abs(s) - slack) >= search:
                return False, zero, type(p)()
            q = wp.mesh_query_point_no_sign(mesh, p32, padded(wp.min(search32, wp.abs(s) + slack)))
            if not q.result:
                return False, zero, type(p)()
            face = q.face
        else:
            inside = True
            # a convex mesh: the face of the nearest plane, if p's foot on that plane lies inside the face
            face = plane_face(
                p32,
                padded(wp.abs(s) + slack),
                world.cone_offsets[e, m],
                wp.mesh_get(mesh).indices.shape[0] // 3,
                world,
            )
            if face >= 0:
                a = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 0))
                b = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 1))
                c = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 2))
                closest, feature = closest_point_on_triangle(pd, a, b, c)
                if feature != FEATURE_FACE:
                    face = -1
            if face < 0:
                q = wp.mesh_query_point_no_sign(mesh, p32, padded(wp.abs(s) + slack))
                face = q.face
                if not q.result:  # cannot happen (the bound holds); the full query below settles it
                    face = -1
    # A closed mesh near its surface (a signed one): one closest-point query without a sign test, bounded by
    # the cell's bound on |d| where it has one (it always finds the closest face), and the side from the
    # pseudo-normal of the feature (face, edge, vertex) the closest point lies on: exact on closed meshes,
    # with no tie band (the closest feature alone decides). Where that is not known, the mesh's own method
    # decides (below).
    by_face = False
    a = wp.vec3d()
    b = wp.vec3d()
    c = wp.vec3d()
    closest = wp.vec3d()
    feature = FEATURE_FACE
    # The same for a "normal" mesh whose edges pair up but that is not known to be closed: its pseudo-normal
    # tables are built all the same (the side "normal" names), and Warp's own normal sign is not exact.
    topo = world.topo_offsets[e, m]
    if face < 0 and sign != SIGN_UNSIGNED and (closed or (sign == SIGN_NORMAL and topo[0] >= 0)):
        radius = padded(search32)
        if slack < UNBOUNDED:
            radius = padded(wp.abs(s) + slack)
        q = wp.mesh_query_point_no_sign(mesh, p32, radius)
        if not q.result:
            q = wp.mesh_query_point_no_sign(mesh, p32, UNBOUNDED)
        if q.result:
            face = q.face
            by_face = True
    if face >= 0:
        a = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 0))
        b = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 1))
        c = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 2))
        closest, feature = closest_point_on_triangle(pd, a, b, c)
        if by_face:
            known, inside = pseudo_normal_side(world, mesh, face, feature, pd - closest, a, b, c, topo)
            if not known:
                face = -1
                by_face = False
    if face < 0 and (flags & FLAG_PENDING) != 0 and sign != SIGN_WINDING and sign != SIGN_UNSIGNED:
        # probably closed, its tables not in yet: the side from rays of no symmetry (see ray_vote_inside)
        inside = ray_vote_inside(mesh, p32)
        q = wp.mesh_query_point_no_sign(mesh, p32, padded(search32))
        if not q.result:
            if not inside:  # outside, and nothing within reach
                return False, zero, type(p)()
            q = wp.mesh_query_point_no_sign(mesh, p32, UNBOUNDED)
        if not q.result:
            return False, zero, type(p)()
        face = q.face
        a = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 0))
        b = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 1))
        c = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 2))
        closest, feature = closest_point_on_triangle(pd, a, b, c)
    if face < 0 and (flags & FLAG_SLIVERS) != 0:
        # a mesh with slivers (never closed, no grid): Warp's closest-point queries skip them, so the closest
        # face is the nearest of Warp's pick and every face whose box is nearer (nearest_in_box); the side is
        # Warp's (rays, winding numbers: they see every face), or for "normal" the closest face's normal
        # where the closest point is inside it, else a vote of rays
        q = query_point(mesh, p32, float(UNBOUNDED), method)
        inside = sign != SIGN_UNSIGNED and q.result and q.sign < 0.0
        best = wp.float64(UNBOUNDED)
        radius = padded(search32)
        if q.result:
            face = q.face
            a = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 0))
            b = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 1))
            c = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 2))
            closest, feature = closest_point_on_triangle(pd, a, b, c)
            best = wp.length(pd - closest)
            radius = wp.min(radius, padded(float(best)))
            if inside:  # deep inside: as far as Warp's pick, whatever the search radius
                radius = padded(float(best))
        elif sign != SIGN_UNSIGNED:
            # every face is a sliver (Warp's query finds none): the side from rays, and inside, every face
            inside = ray_vote_inside(mesh, p32)
            if inside:
                radius = float(UNBOUNDED)
        face, best = nearest_in_box(mesh, pd, p32, radius, face, best)
        if face < 0:
            return False, zero, type(p)()
        a = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 0))
        b = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 1))
        c = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 2))
        closest, feature = closest_point_on_triangle(pd, a, b, c)
        if sign == SIGN_NORMAL:
            side = wp.dot(pd - closest, wp.cross(b - a, c - a))
            if feature == FEATURE_FACE and side != wp.float64(0.0):
                inside = side < wp.float64(0.0)
            else:
                inside = ray_vote_inside(mesh, p32)
        by_face = not inside  # outside and beyond the search radius: no hit (below)
    if face < 0:
        q = query_point(mesh, p32, padded(search32), method)
        if q.result:
            inside = sign != SIGN_UNSIGNED and q.sign < 0.0
            face = q.face
        else:
            if sign == SIGN_UNSIGNED:  # nothing within reach, and no inside to be deep in
                return False, zero, type(p)()
            q = query_point(mesh, p32, float(UNBOUNDED), method)
            if (not q.result) or q.sign >= 0.0:
                return False, zero, type(p)()
            inside = True
            face = q.face
        a = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 0))
        b = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 1))
        c = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 2))
        closest, feature = closest_point_on_triangle(pd, a, b, c)
    diff = pd - closest
    d = type(surface_eps)(wp.length(diff))
    if inside:
        d = -d
    elif by_face and d >= type(surface_eps)(search):  # outside and beyond the search radius
        return False, zero, type(p)()
    if d > surface_eps or d < -surface_eps:
        return True, d, type(p)(diff / wp.float64(d))
    return True, d, type(p)(wp.normalize(wp.cross(b - a, c - a)))


@wp.func
def slot_distance(world: WORLD["float32", "meshes"], e: int, m: int, p: Any, search: Any, surface_eps: Any):
    """The distance of slot ``(e, m)`` as the kernels take it, picked at compile time by the world's struct
    type: :func:`mesh_distance` for a world of meshes, :func:`cuboid_mesh_distance` for one of closed forms
    only (the same answers bit for bit: the general function's closed-form branch is that code; no BVH query
    compiled). One overload per key of :data:`WORLD`."""
    hit, d, n = mesh_distance(world, e, m, p, search, surface_eps)
    return hit, d, n


@wp.func
def slot_distance(  # noqa: F811 (a Warp overload, by the world's struct type)
    world: WORLD["float64", "meshes"], e: int, m: int, p: Any, search: Any, surface_eps: Any
):
    hit, d, n = mesh_distance(world, e, m, p, search, surface_eps)
    return hit, d, n


@wp.func
def slot_distance(  # noqa: F811 (a Warp overload, by the world's struct type)
    world: WORLD["float32", "cuboids"], e: int, m: int, p: Any, search: Any, surface_eps: Any
):
    hit, d, n = cuboid_mesh_distance(world, e, m, p, search, surface_eps)
    return hit, d, n


@wp.func
def slot_distance(  # noqa: F811 (a Warp overload, by the world's struct type)
    world: WORLD["float64", "cuboids"], e: int, m: int, p: Any, search: Any, surface_eps: Any
):
    hit, d, n = cuboid_mesh_distance(world, e, m, p, search, surface_eps)
    return hit, d, n


@wp.func
def union_bound(world: Any, e: int, p_world: Any, far: Any):
    """The smallest upper bound on ``|d|`` the grids give over the enabled meshes of environment ``e`` at
    ``p_world`` (``far`` without any): the nearest surface is no farther (``signed_distance``, ``closest_point``). ``(0, UNBOUNDED)`` from
    ``cell_bounds`` is no bound (no grid): padded, it would read as a cap of ~3.4e38."""
    bound = far
    for m in range(world.mesh_ids.shape[1]):
        if slot_in_use(world, e, m):
            p = wp.transform_point(world.inv_poses[e, m], p_world)
            s, r = cell_bounds(
                wp.vec3(p),
                world.bounds[e, m, 0],
                world.bounds[e, m, 1],
                world.grid_dims[e, m],
                world.grid_cells,
            )
            upper = type(far)(padded(wp.abs(s) + r))
            if r < UNBOUNDED and wp.isfinite(upper) and upper < bound:
                bound = upper
    return bound
