"""Sphere-mesh collision cost (discrete and swept) and signed distance against posed Warp meshes.

Every kernel is generic over the precision ``T`` of its inputs and outputs (float32 or float64); Warp's BVH
query (float32) picks the closest face, whose distance and direction are recomputed in float64. The world is
one struct (:data:`WORLD_FIELDS`, declared once), the cost formula :func:`collision_cost`, one mesh slot's
distance :func:`mesh_distance` (or, in a world of closed forms only, :func:`cuboid_mesh_distance`, chosen by
the overloads of :func:`slot_distance`), and the three kernel bodies sit at the bottom with their tables.
How the exact shortcuts work (closed forms, grids, pseudo-normals, plane trees, far points, tables still on
their way) and why the kernels trust no index: ``docs/sdf.md``.
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels._table import KernelTable

# the torch glue differentiates through the gradient these kernels write; Warp's adjoints are not needed
# (and would double the build time)
wp.set_module_options({"enable_backward": False})

#: Search radius meaning "the whole mesh" (the largest float32).
UNBOUNDED = wp.constant(3.4e38)
#: Relative and absolute padding of a float32 search radius, so that a face the float32 BVH query rounds
#: just outside the radius is still found when its refined (``T``-precision) distance is inside.
SEARCH_PAD_REL = wp.constant(1.0e-5)
SEARCH_PAD_ABS = wp.constant(1.0e-6)
#: Below this, ``phi * phi`` of the cost's quadratic branch may have lost bits to underflow (float32's
#: smallest normal is 1.2e-38): the cost is then computed as ``phi * (phi / eta) / 2`` instead.
TINY_SQUARE = wp.constant(1.0e-30)
#: Sign methods, as stored in ``world.sign[e, m]`` (``warpgeo._constants.SIGN_*``).
SIGN_RAY = wp.constant(_constants.SIGN_RAY)
SIGN_WINDING = wp.constant(_constants.SIGN_WINDING)
SIGN_NORMAL = wp.constant(_constants.SIGN_NORMAL)
SIGN_UNSIGNED = wp.constant(_constants.SIGN_UNSIGNED)
#: Mesh id of an empty slot.
NO_MESH = wp.constant(wp.int64(_constants.NO_MESH))
#: ``world.grid_flags`` bits: the mesh is closed (its grid is signed); the mesh is a cuboid (closed form).
FLAG_CLOSED = wp.constant(_constants.FLAG_CLOSED)
FLAG_BOX = wp.constant(_constants.FLAG_BOX)
FLAG_PENDING = wp.constant(_constants.FLAG_PENDING)
#: ``world.slot_kind`` codes: a mesh, or an analytic primitive (``warpgeo.primitives``) of half-extents
#: ``world.prim_size`` (see ``warpgeo._constants.KIND_*``).
KIND_MESH = wp.constant(_constants.KIND_MESH)
KIND_SPHERE = wp.constant(_constants.KIND_SPHERE)
KIND_CAPSULE = wp.constant(_constants.KIND_CAPSULE)
KIND_CYLINDER = wp.constant(_constants.KIND_CYLINDER)
#: A point farther from a mesh's box than this many box diagonals takes the far path (nearest vertex): from
#: here on the nearest vertex (relative error <= 2**-23, falling as 1/D^2) beats the float32 face choice.
FAR_RATIO = wp.constant(2048.0)
#: ... or farther than this (mesh units): Warp's float32 BVH squares distances, and 2**60 squared is safe.
FAR_ABS = wp.constant(1.152921504606846976e18)
#: Relative rounding margin of a grid cell's bounds (float32 centre distances and cell geometry).
GRID_MARGIN = wp.constant(1.0e-5)


#: The world as the SDF kernels read it, declared once: ``name: (element, dims)``, in order. ``element`` is the
#: Warp type of one entry (None: the query's transform, ``wp.transformf`` or ``wp.transformd``); ``dims`` the
#: array's sizes: ``"E"`` environments, ``"M"`` mesh slots, a number, or None (the rows of a flat table, shared
#: by the meshes, each mesh's rows found through its offsets). The kernels' struct (:data:`WORLD`) and the
#: tensors the ops take (``warpgeo.world.WORLD_FIELDS``: dtypes and shapes) both come from here.
WORLD_FIELDS: dict[str, tuple[Any, tuple]] = {
    "mesh_ids": (wp.int64, ("E", "M")),  # Warp mesh ids (NO_MESH in padding and primitive slots)
    "inv_poses": (None, ("E", "M")),  # mesh-from-world transforms, in the query's precision
    "bounds": (wp.vec3, ("E", "M", 2)),  # each mesh's box (lower, upper) in its own frame
    "world_bounds": (wp.vec3, ("E", "M", 2)),  # each mesh's box posed in the world, rounded outwards
    "enabled": (wp.int32, ("E", "M")),  # 1 where a mesh is present and enabled
    "sign": (wp.int32, ("E", "M")),  # sign method codes (SIGN_*)
    "grid_dims": (wp.vec4i, ("E", "M")),  # grid cells along x, y, z and the first cell's row in grid_cells
    "grid_flags": (wp.int32, ("E", "M")),  # FLAG_CLOSED, FLAG_BOX, FLAG_PENDING (meshes; 0 for a primitive)
    "grid_cells": (wp.float32, (None,)),  # cell-centre distances of every grid
    "topo_offsets": (wp.vec2i, ("E", "M")),  # first rows in face_neighbors and vertex_normals (-1: none)
    "face_neighbors": (wp.vec3i, (None,)),  # the face across each edge of each face of the closed meshes
    "vertex_normals": (wp.vec3d, (None,)),  # angle-weighted vertex normals of the closed meshes
    "cone_offsets": (wp.vec4i, ("E", "M")),  # plane trees: first rows in cone_nodes, _links, _planes; nodes
    "cone_nodes": (wp.vec4, (None,)),
    "cone_links": (wp.vec3i, (None,)),
    "cone_planes": (wp.vec4, (None,)),
    "cone_faces": (wp.int32, (None,)),
    "slot_kind": (wp.int32, ("E", "M")),  # KIND_MESH, or a primitive's KIND_* (no mesh: a closed form)
    "prim_size": (wp.vec3, ("E", "M")),  # a primitive's half-extents (0 for a mesh)
}


def _world_struct(name: str, transform: Any) -> Any:
    """The ``@wp.struct`` of :data:`WORLD_FIELDS` for one query precision (``transform``: its
    ``inv_poses`` element), one array field per world field, same names, same order."""
    fields = {
        field: wp.array(dtype=transform if element is None else element, ndim=len(dims))
        for field, (element, dims) in WORLD_FIELDS.items()
    }
    return wp.struct(
        type(name, (), {"__annotations__": fields, "__module__": __name__, "__qualname__": name})
    )


#: Table keys: (query precision, world kind). A world of only closed forms (``"cuboids"``: cuboid meshes and
#: analytic primitives) runs kernels compiled with :func:`cuboid_mesh_distance` for every slot (no BVH query in
#: them), any other world the general ones: :func:`slot_distance` picks by the world struct's type.
KEYS = [(precision, kind) for precision in ("float32", "float64") for kind in ("meshes", "cuboids")]
#: The world struct per key: the same fields (:data:`WORLD_FIELDS`), a type per precision and world kind.
WORLD = {
    ("float32", "meshes"): _world_struct("WorldF32", wp.transformf),
    ("float32", "cuboids"): _world_struct("ClosedFormsWorldF32", wp.transformf),
    ("float64", "meshes"): _world_struct("WorldF64", wp.transformd),
    ("float64", "cuboids"): _world_struct("ClosedFormsWorldF64", wp.transformd),
}

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
def scaled_length(v: Any):
    """``|v|`` without overflow or underflow of the squares (components up to the dtype's largest)."""
    m = wp.max(wp.max(wp.abs(v[0]), wp.abs(v[1])), wp.abs(v[2]))
    if m == type(m)(0.0) or not wp.isfinite(m):
        return m
    return m * wp.length(v / m)


@wp.func
def box_distance(p: Any, lower: wp.vec3, upper: wp.vec3):
    """Distance from ``p`` (precision ``T``) to the axis-aligned box (0 inside it), in ``T``."""
    lo = type(p)(lower)
    hi = type(p)(upper)
    q = wp.max(wp.max(lo - p, p - hi), type(p)())
    return scaled_length(q)


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
def cuboid_distance(p: Any, lower: wp.vec3, upper: wp.vec3, search: Any, sign: int, surface_eps: Any):
    """``mesh_distance`` of a mesh that is exactly the surface of its box ``(lower, upper)`` (``FLAG_BOX``), in
    closed form, in float64: outside, the distance from the box's closest point; inside, to the nearest
    side (negative, or positive for ``"unsigned"``). Within ``surface_eps`` of the surface the gradient is
    the outward normal of the side nearest ``p`` (the side it is farthest beyond, outside)."""
    zero = type(surface_eps)(0.0)
    pd = wp.vec3d(p)
    lo = wp.vec3d(lower)
    hi = wp.vec3d(upper)
    diff = pd - wp.min(wp.max(pd, lo), hi)
    # the side nearest p from inside (or the one p is farthest beyond): axis and outward direction
    nearest = pd[0] - lo[0]
    axis = int(0)
    outward = wp.float64(-1.0)
    for k in range(3):
        if pd[k] - lo[k] < nearest:
            nearest = pd[k] - lo[k]
            axis = k
            outward = wp.float64(-1.0)
        if hi[k] - pd[k] < nearest:
            nearest = hi[k] - pd[k]
            axis = k
            outward = wp.float64(1.0)
    normal = wp.vec3d()
    normal[axis] = outward
    if diff[0] != wp.float64(0.0) or diff[1] != wp.float64(0.0) or diff[2] != wp.float64(0.0):
        d = scaled_length(diff)
        if d >= wp.float64(search):
            return False, zero, type(p)()
        if d > wp.float64(surface_eps):
            scale = wp.max(wp.max(wp.abs(diff[0]), wp.abs(diff[1])), wp.abs(diff[2]))
            return True, type(surface_eps)(d), type(p)(wp.normalize(diff / scale))
        return True, type(surface_eps)(d), type(p)(normal)
    if sign == SIGN_UNSIGNED:  # the distance to the surface, growing inwards
        if nearest >= wp.float64(search):
            return False, zero, type(p)()
        if nearest > wp.float64(surface_eps):
            return True, type(surface_eps)(nearest), type(p)(-normal)
        return True, type(surface_eps)(nearest), type(p)(normal)
    return True, type(surface_eps)(-nearest), type(p)(normal)


@wp.func
def unit_direction(v: wp.vec3d, fallback: wp.vec3d):
    """``v / |v|`` without overflow or underflow (scaled by its largest component first); ``fallback`` where
    ``v`` is zero or not finite (a singular point of a closed form: any unit direction is a valid one)."""
    m = wp.max(wp.max(wp.abs(v[0]), wp.abs(v[1])), wp.abs(v[2]))
    if m > wp.float64(0.0) and wp.isfinite(m):
        return wp.normalize(v / m)
    return fallback


@wp.func
def closed_form_result(d: wp.float64, n: wp.vec3d, p: Any, search: Any, surface_eps: Any):
    """``(hit, d, n)`` of a closed-form distance ``d`` (float64) with unit gradient ``n``: no hit where ``p`` is
    outside (``d > 0``) and ``d >= search``; ``d`` in ``T``."""
    if d > wp.float64(0.0) and d >= wp.float64(search):
        return False, type(surface_eps)(0.0), type(p)()
    return True, type(surface_eps)(d), type(p)(n)


@wp.func
def sphere_distance(p: Any, size: wp.vec3, search: Any, surface_eps: Any):
    """``mesh_distance`` of a ``KIND_SPHERE`` slot of half-extents ``size``: the ball of radius ``r = size[0]``
    at the origin, in float64: ``|p| - r``, gradient ``p / |p|`` (+z at the centre)."""
    half = wp.vec3d(size)
    v = wp.vec3d(p)
    d = scaled_length(v) - half[0]
    return closed_form_result(d, unit_direction(v, wp.vec3d(0.0, 0.0, 1.0)), p, search, surface_eps)


@wp.func
def capsule_distance(p: Any, size: wp.vec3, search: Any, surface_eps: Any):
    """``mesh_distance`` of a ``KIND_CAPSULE`` slot of half-extents ``size``, in float64: the distance to the
    segment along z through the origin, of half-length ``a`` = the z half-extent less the radius ``r =
    size[0]``, less ``r``; gradient from the segment's closest point (+x on the segment)."""
    half = wp.vec3d(size)
    v = wp.vec3d(p)
    r = half[0]
    a = wp.max(half[2] - r, wp.float64(0.0))
    w = wp.vec3d(v[0], v[1], v[2] - wp.clamp(v[2], -a, a))
    d = scaled_length(w) - r
    return closed_form_result(d, unit_direction(w, wp.vec3d(1.0, 0.0, 0.0)), p, search, surface_eps)


@wp.func
def cylinder_distance(p: Any, size: wp.vec3, search: Any, surface_eps: Any):
    """``mesh_distance`` of a ``KIND_CYLINDER`` slot of half-extents ``size``, in float64: the solid cylinder
    along z through the origin, of radius ``r = size[0]`` and half-height ``h = size[2]``, flat caps.
    With ``rho`` the distance from the axis and ``q = (rho - r, |z| - h)``: outside ``|max(q, 0)|``, inside
    ``max(q)``. The gradient is that of the active part: radial (the side), axial (a cap), or their mix (off
    a rim); on a tie inside (equally near a cap and the side) the cap's. On the axis the radial direction
    is +x, at ``z = 0`` the axial one +z."""
    half = wp.vec3d(size)
    v = wp.vec3d(p)
    zero = wp.float64(0.0)
    radial = wp.vec3d(v[0], v[1], zero)
    rho = scaled_length(radial)
    out = unit_direction(radial, wp.vec3d(1.0, 0.0, 0.0))
    axial = wp.vec3d(0.0, 0.0, 1.0)
    if v[2] < zero:
        axial = wp.vec3d(0.0, 0.0, -1.0)
    qx = rho - half[0]
    qz = wp.abs(v[2]) - half[2]
    if qx > zero and qz > zero:  # off a rim: towards the rim's nearest point
        d = scaled_length(wp.vec3d(qx, qz, zero))
        mix = unit_direction(wp.vec3d(qx, qz, zero), wp.vec3d(1.0, 0.0, 0.0))
        return closed_form_result(d, out * mix[0] + axial * mix[1], p, search, surface_eps)
    if qx > zero:
        return closed_form_result(qx, out, p, search, surface_eps)
    if qz > zero:
        return closed_form_result(qz, axial, p, search, surface_eps)
    if qx > qz:  # inside, nearer the side
        return closed_form_result(qx, out, p, search, surface_eps)
    return closed_form_result(qz, axial, p, search, surface_eps)


@wp.func
def primitive_distance(p: Any, kind: int, size: wp.vec3, search: Any, surface_eps: Any):
    """``mesh_distance`` of a primitive's slot (``slot_kind`` ``kind``, half-extents ``size``), in closed form:
    ``KIND_SPHERE``, ``KIND_CAPSULE``, ``KIND_CYLINDER``; any other (``KIND_CUBOID``) the box ``[-size,
    size]``, :func:`cuboid_distance`. A primitive is always signed."""
    if kind == KIND_SPHERE:
        return sphere_distance(p, size, search, surface_eps)
    if kind == KIND_CAPSULE:
        return capsule_distance(p, size, search, surface_eps)
    if kind == KIND_CYLINDER:
        return cylinder_distance(p, size, search, surface_eps)
    return cuboid_distance(p, -size, size, search, SIGN_RAY, surface_eps)


@wp.func
def closed_form_distance(world: Any, e: int, m: int, p: Any, search: Any, surface_eps: Any):
    """``mesh_distance`` of a closed-form slot: a primitive (``slot_kind`` not ``KIND_MESH``:
    :func:`primitive_distance`, of its ``prim_size``) or a mesh that is exactly the surface of its box
    (``FLAG_BOX``: :func:`cuboid_distance` of ``bounds``, with the slot's ``sign``). No mesh is read."""
    kind = world.slot_kind[e, m]
    if kind != KIND_MESH:
        return primitive_distance(p, kind, world.prim_size[e, m], search, surface_eps)
    return cuboid_distance(
        p, world.bounds[e, m, 0], world.bounds[e, m, 1], search, world.sign[e, m], surface_eps
    )


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
    if box > zero and (closed or sign == SIGN_UNSIGNED):
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
    if face < 0 and closed and sign != SIGN_UNSIGNED:
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
            known, inside = pseudo_normal_side(
                world, mesh, face, feature, pd - closest, a, b, c, world.topo_offsets[e, m]
            )
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
    if face < 0:
        q = query_point(mesh, p32, padded(search32), method)
        if q.result:
            inside = sign != SIGN_UNSIGNED and q.sign < 0.0
            face = q.face
        else:
            if sign == SIGN_UNSIGNED:  # nothing within reach, and no inside to be deep in
                return False, zero, type(p)()
            q = query_point(mesh, p32, UNBOUNDED, method)
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
def environment(b: int, env_index: wp.array(dtype=wp.int64), num_envs: int):
    """Environment of batch entry ``b``: ``env_index[b]`` (0 when the array is empty); -1 when out of range."""
    e = wp.int64(0)
    if env_index.shape[0] > 0:
        e = wp.int64(-1)
        if b < env_index.shape[0]:
            e = env_index[b]
    if e < wp.int64(0) or e >= wp.int64(num_envs):
        return -1
    return int(e)


@wp.func
def beyond_world_box(c: Any, world_bounds: wp.array3d(dtype=wp.vec3), e: int, m: int, reach: Any):
    """Whether the world-frame point ``c`` lies farther than ``reach`` from the posed box of mesh ``(e, m)``
    along some axis (so farther from the mesh): the broad phase, without moving ``c`` to the mesh's frame.
    False where ``world_bounds`` has no such entry (no test)."""
    if e >= world_bounds.shape[0] or m >= world_bounds.shape[1] or world_bounds.shape[2] < 2:
        return False
    lo = world_bounds[e, m, 0]
    hi = world_bounds[e, m, 1]
    for k in range(3):  # noqa: SIM110 (Warp compiles no generator expressions)
        if c[k] < type(reach)(lo[k]) - reach or c[k] > type(reach)(hi[k]) + reach:
            return True
    return False


@wp.func
def cuboid_mesh_distance(world: Any, e: int, m: int, p: Any, search: Any, surface_eps: Any):
    """:func:`mesh_distance` (same parameters, same result) for a closed-form slot: a mesh that is exactly the
    surface of its box (``FLAG_BOX``) or an analytic primitive (``slot_kind``): its first two steps, the
    only ones such a slot takes (any mesh slot is read as its box). The kernels of a world of closed forms
    only call this in its place (:func:`slot_distance`): they compile in a fraction of the time, with no BVH
    query in them."""
    if box_distance(p, world.bounds[e, m, 0], world.bounds[e, m, 1]) > search:
        return False, type(surface_eps)(0.0), type(p)()
    return closed_form_distance(world, e, m, p, search, surface_eps)


@wp.func
def slot_in_use(world: Any, e: int, m: int):
    """Whether slot ``(e, m)`` is enabled and holds something: a mesh (a mesh id, not ``NO_MESH``: a padding
    slot has none) or a primitive (a ``slot_kind`` other than ``KIND_MESH``; it has no mesh id)."""
    if world.enabled[e, m] == 0:
        return False
    return world.mesh_ids[e, m] != NO_MESH or world.slot_kind[e, m] != KIND_MESH


@wp.func
def world_environment(b: int, env_index: wp.array(dtype=wp.int64), world: Any):
    """:func:`environment` of batch entry ``b`` in ``world`` (-1: none)."""
    return environment(b, env_index, world.mesh_ids.shape[0])


@wp.func
def thread_rows(chunk: int, rows_per_thread: int, rows: int):
    """Rows ``[first, stop)`` of thread ``chunk`` when each thread handles ``rows_per_thread`` consecutive
    rows of ``rows``: empty past the end or for a count below 1, and no int32 overflow on the way.

    On the CPU a thread scores several spheres in a row (``warpgeo.sdf._ROWS_PER_CPU_THREAD``): Warp calls the
    kernel once per thread, and each call reloads the kernel's ~25 array arguments and recomputes the row
    index (integer divisions), as long as a sphere far from every mesh takes. On CUDA it is 1."""
    if rows_per_thread < 1 or chunk < 0 or rows <= 0 or chunk > (rows - 1) // rows_per_thread:
        return 0, 0
    first = chunk * rows_per_thread
    return first, first + wp.min(rows_per_thread, rows - first)


@wp.func
def grid_index(first: int, stop: int, count: int):
    """``(first // count, first % count)``: the (row, column) of flat index ``first`` of a grid of ``count``
    columns, (0, 0) where the range is empty (no division by a zero count)."""
    if stop <= first or count <= 0:
        return 0, 0
    b = first // count
    return b, first - b * count


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
def collision_cost(phi: Any, eta: Any):
    """cuRobo's smooth cost of penetration ``phi = r + eta - d`` > 0 and its derivative ``d cost / d phi``:
    ``phi**2 / (2 eta)`` up to ``eta`` (computed as ``phi * (phi / eta) / 2`` where ``phi**2`` or ``2 eta``
    overflows, or ``phi**2`` may have lost bits to underflow), ``phi - eta / 2`` above."""
    if phi <= eta:
        dphi = phi / eta
        square = phi * phi
        two_eta = type(phi)(2.0) * eta
        if square < type(phi)(wp.inf) and two_eta < type(phi)(wp.inf) and square >= type(phi)(TINY_SQUARE):
            return square / two_eta, dphi
        return phi * dphi * type(phi)(0.5), dphi  # phi^2 or 2 eta overflows, or phi^2 underflows
    return phi - type(phi)(0.5) * eta, type(phi)(1.0)


@wp.func
def sphere_cost(sphere: Any, e: int, world: Any, eta: Any, extra_search: float, surface_eps: Any):
    """Cost of one sphere ``(x, y, z, r)`` against the enabled meshes of environment ``e`` (-1: none), and its
    gradient w.r.t. ``(x, y, z, r)``; both unweighted. A sphere with ``r < 0`` is disabled (0, 0)."""
    zero = type(sphere[0])(0.0)
    total = zero
    g = type(sphere)()
    r = sphere[3]
    if r >= zero and e >= 0:
        centre = wp.vector(sphere[0], sphere[1], sphere[2])
        search = r + eta + type(r)(extra_search)
        for m in range(world.mesh_ids.shape[1]):
            if not slot_in_use(world, e, m):
                continue
            if beyond_world_box(centre, world.world_bounds, e, m, search):
                continue
            xf = world.inv_poses[e, m]
            p = wp.transform_point(xf, centre)
            hit, d, n = slot_distance(world, e, m, p, search, surface_eps)
            if not hit:
                continue
            phi = r + eta - d
            if phi <= zero:
                continue
            c, dphi = collision_cost(phi, eta)
            total += c
            # d phi / d centre = -grad d; n is in the mesh frame, rotate it back to the world
            nw = wp.quat_rotate_inv(wp.transform_get_rotation(xf), n)
            g += wp.vector(-dphi * nw[0], -dphi * nw[1], -dphi * nw[2], dphi)
    return total, g


# --------------------------------------------------------------------------------------------------------
# the query kernels (bodies: the tables below make a @wp.kernel of each per key)
# --------------------------------------------------------------------------------------------------------


def sphere_mesh_cost(
    spheres: wp.array2d(dtype=Any),
    env_index: wp.array(dtype=wp.int64),
    world: Any,
    params: wp.array(dtype=Any),
    extra_search: float,
    surface_eps: Any,
    compute_grad: int,
    cost: wp.array2d(dtype=Any),
    grad: wp.array2d(dtype=Any),
    per_thread: int,
    row_start: int,
):
    """Cost of sphere ``(b, s)``, summed over the enabled meshes of environment ``env_index[b]``.

    ``spheres[b, s] = (x, y, z, r)`` in the world frame; ``params = (eta, weight)``. With
    ``phi = r + eta - d``: 0 for phi <= 0, phi^2 / (2 eta) up to eta, phi - eta / 2 above, times weight.
    ``grad[b, s]`` (written when ``compute_grad``) is d cost / d (x, y, z, r). Thread ``t`` scores spheres
    ``(row_start + t) * per_thread`` onwards (``per_thread`` of them) of the flattened
    ``(B, S)`` grid (the host may split the grid into launches; see :func:`thread_rows`).
    """
    first, stop = thread_rows(wp.tid() + row_start, per_thread, spheres.shape[0] * spheres.shape[1])
    bi, si = grid_index(first, stop, spheres.shape[1])
    for _flat in range(first, stop):
        weight = params[1]
        e = world_environment(bi, env_index, world)
        c, g = sphere_cost(spheres[bi, si], e, world, params[0], extra_search, surface_eps)
        cost[bi, si] = c * weight
        if compute_grad != 0:
            grad[bi, si] = g * weight
        si += 1
        if si == spheres.shape[1]:
            si = 0
            bi += 1


def swept_sphere_mesh_cost(
    spheres: wp.array3d(dtype=Any),
    env_index: wp.array(dtype=wp.int64),
    world: Any,
    params: wp.array(dtype=Any),
    sweep_steps: int,
    surface_eps: Any,
    compute_grad: int,
    cost: wp.array3d(dtype=Any),
    grad_here: wp.array3d(dtype=Any),
    grad_next: wp.array3d(dtype=Any),
    per_thread: int,
    row_start: int,
):
    """Swept cost of step ``h`` of sphere ``n`` in trajectory ``b`` (``spheres`` is ``(B, H, N)`` x vec4).

    With ``S = sweep_steps``, the step's cost is the mean over ``j = 0..S`` of the cost of the sphere
    interpolated (centre and radius) at ``t = j / (S + 1)`` from step ``h`` towards step ``h + 1``; the
    last step, and a step whose next sphere is disabled, is scored alone. ``grad_here`` / ``grad_next``
    receive the gradient w.r.t. the spheres of steps ``h`` and ``h + 1`` (each sample's split
    ``(1 - t, t)``); the host adds them up without races. Thread ``t`` handles rows
    ``(row_start + t) * per_thread`` onwards (``per_thread`` of them) of the flattened
    ``(B, H, N)`` grid.
    """
    first, stop = thread_rows(
        wp.tid() + row_start, per_thread, spheres.shape[0] * spheres.shape[1] * spheres.shape[2]
    )
    for flat in range(first, stop):
        horizon = spheres.shape[1]
        count = spheres.shape[2]
        bi = flat // (horizon * count)
        hi = (flat // count) % horizon
        ni = flat % count
        weight = params[1]
        eta = params[0]
        e = world_environment(bi, env_index, world)
        here = spheres[bi, hi, ni]
        zero = type(here[0])(0.0)
        steps = sweep_steps
        nxt = here
        if hi + 1 < horizon:
            nxt = spheres[bi, hi + 1, ni]
        if hi + 1 >= horizon or nxt[3] < zero or here[3] < zero:
            steps = 0
        total = zero
        g_here = type(here)()
        g_next = type(here)()
        scale = type(zero)(1.0) / type(zero)(steps + 1)
        for j in range(steps + 1):
            t = type(zero)(j) * scale
            # (1 - t) here + t next, not here + (next - here) t: the difference overflows for far-apart
            # steps
            c, g = sphere_cost(here * (type(zero)(1.0) - t) + nxt * t, e, world, eta, 0.0, surface_eps)
            total += c
            g_here += g * (type(zero)(1.0) - t)
            g_next += g * t
        cost[bi, hi, ni] = total * scale * weight
        if compute_grad != 0:
            grad_here[bi, hi, ni] = g_here * (scale * weight)
            grad_next[bi, hi, ni] = g_next * (scale * weight)


def signed_distance(
    points: wp.array2d(dtype=Any),
    env_index: wp.array(dtype=wp.int64),
    world: Any,
    surface_eps: Any,
    far: Any,
    compute_grad: int,
    dist: wp.array2d(dtype=Any),
    grad: wp.array2d(dtype=Any),
    per_thread: int,
    row_start: int,
):
    """Union signed distance of point ``(b, s)``: the minimum over the enabled meshes of its environment.

    ``far`` is written where no mesh is enabled (gradient 0). Each mesh is searched only within the best
    distance so far (outside its box is outside the mesh; inside, at any depth), so a mesh whose box is
    farther is skipped and the others are bounded queries. Thread ``t`` handles points
    ``(row_start + t) * per_thread`` onwards (``per_thread`` of them) of the flattened
    ``(B, S)`` grid.
    """
    first, stop = thread_rows(wp.tid() + row_start, per_thread, points.shape[0] * points.shape[1])
    bi, si = grid_index(first, stop, points.shape[1])
    for _flat in range(first, stop):
        p_world = points[bi, si]
        best = far
        best_n = type(p_world)()
        e = world_environment(bi, env_index, world)
        if e >= 0:
            # the grids bound every mesh's distance from above: the union's is below the smallest bound
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
                    # (0, UNBOUNDED) is no bound (no grid): padded, it would read as a cap of ~3.4e38
                    if r < UNBOUNDED and wp.isfinite(upper) and upper < bound:
                        bound = upper
            for m in range(world.mesh_ids.shape[1]):
                if not slot_in_use(world, e, m):
                    continue
                # only a distance below the best so far matters: outside, within it; inside, at any depth
                reach = wp.max(wp.min(best, bound), type(far)(0.0))
                if beyond_world_box(p_world, world.world_bounds, e, m, reach):
                    continue
                xf = world.inv_poses[e, m]
                p = wp.transform_point(xf, p_world)
                hit, d, n = slot_distance(world, e, m, p, reach, surface_eps)
                if hit and d < best:
                    best = d
                    best_n = wp.quat_rotate_inv(wp.transform_get_rotation(xf), n)
        dist[bi, si] = best
        if compute_grad != 0:
            grad[bi, si] = best_n
        si += 1
        if si == points.shape[1]:
            si = 0
            bi += 1


#: Options of every SDF kernel module: warpgeo writes every backward itself (no adjoints: half the build time).
OPTIONS = {"enable_backward": False}


def _max_registers(key) -> int:
    """The query kernels' register cap on CUDA, by precision (see ``_constants.SDF_MAX_REGISTERS``)."""
    return _constants.SDF_MAX_REGISTERS[key[0]]


_SCALARS = {"float32": (wp.float32, wp.vec3f, wp.vec4f), "float64": (wp.float64, wp.vec3d, wp.vec4d)}


def _types(build) -> dict:
    return {key: {"world": WORLD[key], **build(*_SCALARS[key[0]])} for key in KEYS}


#: The query kernels, each per key alone in a Warp module (``..sphere_mesh_cost_float32_meshes``, ...).
SPHERE_MESH_COST = KernelTable(
    f"{__name__}.sphere_mesh_cost",
    (sphere_mesh_cost,),
    _types(
        lambda s, _v3, v4: {
            "spheres": wp.array2d(dtype=v4),
            "params": wp.array(dtype=s),
            "surface_eps": s,
            "cost": wp.array2d(dtype=s),
            "grad": wp.array2d(dtype=v4),
        }
    ),
    options=OPTIONS,
    max_registers=_max_registers,
)
SWEPT_SPHERE_MESH_COST = KernelTable(
    f"{__name__}.swept_sphere_mesh_cost",
    (swept_sphere_mesh_cost,),
    _types(
        lambda s, _v3, v4: {
            "spheres": wp.array3d(dtype=v4),
            "params": wp.array(dtype=s),
            "surface_eps": s,
            "cost": wp.array3d(dtype=s),
            "grad_here": wp.array3d(dtype=v4),
            "grad_next": wp.array3d(dtype=v4),
        }
    ),
    options=OPTIONS,
    max_registers=_max_registers,
)
SIGNED_DISTANCE = KernelTable(
    f"{__name__}.signed_distance",
    (signed_distance,),
    _types(
        lambda s, v3, _v4: {
            "points": wp.array2d(dtype=v3),
            "surface_eps": s,
            "far": s,
            "dist": wp.array2d(dtype=s),
            "grad": wp.array2d(dtype=v3),
        }
    ),
    options=OPTIONS,
    max_registers=_max_registers,
)
