"""The world as the SDF kernels read it, declared once, and what every world query shares.

:data:`WORLD_FIELDS` declares the world's arrays (``name: (element, dims)``); the kernels' struct per query
precision and world kind (:data:`WORLD`, keys :data:`KEYS`) and the tensors the ops take
(``warpgeo.world.WORLD_FIELDS``) both come from it. Here too: the codes the tables store (``SIGN_*``,
``FLAG_*``, ``KIND_*``), the distances of the entries that are closed forms (a cuboid mesh and the analytic
primitives: :func:`closed_form_distance`, picked by ``slot_kind``), and the per-row helpers of every world
kernel (:func:`slot_in_use`, :func:`world_environment`, :func:`thread_rows`, :func:`grid_index`, the broad
phase :func:`beyond_world_box`).

A new kind of world entry is declared here: its fields in :data:`WORLD_FIELDS`, its ``KIND_*`` code
(``warpgeo._constants``), its distance ``@wp.func`` (same parameters and result as
:func:`primitive_distance`) and its branch in :func:`closed_form_distance`. See CONTRIBUTING, "Adding a kind
of world entry".
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels.distance_grid import grid_distance_at

# the torch glue differentiates through the gradient these kernels write; Warp's adjoints are not needed
# (and would double the build time)
wp.set_module_options({"enable_backward": False})


#: Search radius meaning "the whole mesh" (the largest float32).
UNBOUNDED = wp.constant(3.4e38)


#: Relative and absolute padding of a float32 search radius, so that a face the float32 BVH query rounds
#: just outside the radius is still found when its refined (``T``-precision) distance is inside.
SEARCH_PAD_REL = wp.constant(1.0e-5)


SEARCH_PAD_ABS = wp.constant(1.0e-6)


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


#: ``grid_flags`` bit: some faces are slivers Warp's closest-point queries skip (see ``warpgeo._constants``).
FLAG_SLIVERS = wp.constant(_constants.FLAG_SLIVERS)


#: ``world.slot_kind`` codes: a mesh, or an analytic primitive (``warpgeo.primitives``) of half-extents
#: ``world.prim_size`` (see ``warpgeo._constants.KIND_*``).
KIND_MESH = wp.constant(_constants.KIND_MESH)


KIND_SPHERE = wp.constant(_constants.KIND_SPHERE)


KIND_CAPSULE = wp.constant(_constants.KIND_CAPSULE)


KIND_CYLINDER = wp.constant(_constants.KIND_CYLINDER)


KIND_GRID = wp.constant(_constants.KIND_GRID)


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
    "grid_flags": (
        wp.int32,
        ("E", "M"),
    ),  # FLAG_CLOSED, FLAG_BOX, FLAG_PENDING, FLAG_SLIVERS (meshes; 0 for a primitive)
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
    "voxel_dims": (wp.vec4i, ("E", "M")),  # a distance grid's X, Y, Z and its first row in voxel_values
    "voxel_frame": (wp.vec4d, ("E", "M")),  # a distance grid's origin (voxel (0, 0, 0)'s centre), voxel size
    "voxel_values": (wp.float32, (None,)),  # the values of every distance grid, x-major, grid after grid
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
def voxel_grid_distance(world: Any, e: int, m: int, p: Any, search: Any, surface_eps: Any):
    """``mesh_distance`` of a distance grid's slot (``KIND_GRID``): the trilinear value of its voxels and the
    exact gradient of that interpolant (``grid_distance_at``: values from row ``voxel_dims[e, m][3]`` of
    ``voxel_values``, origin and voxel size from ``voxel_frame[e, m]``), in ``T``; outside the box of its
    voxel centres the distance to that box. Not unit: the interpolant's own gradient. No hit where ``d > 0``
    and ``d >= search``. Sizes and rows are checked against ``voxel_values`` (no read out of it)."""
    dims = world.voxel_dims[e, m]
    frame = world.voxel_frame[e, m]
    h = type(surface_eps)(frame[3])
    origin = type(p)(type(h)(frame[0]), type(h)(frame[1]), type(h)(frame[2]))
    d, g = grid_distance_at(world.voxel_values, dims[3], wp.vec3i(dims[0], dims[1], dims[2]), h, origin, p)
    if d > type(h)(0.0) and d >= search:
        return False, type(surface_eps)(0.0), type(p)()
    return True, d, g


@wp.func
def closed_form_distance(world: Any, e: int, m: int, p: Any, search: Any, surface_eps: Any):
    """``mesh_distance`` of a closed-form slot: a distance grid (``KIND_GRID``: :func:`voxel_grid_distance`),
    a primitive (``slot_kind`` another kind than ``KIND_MESH``: :func:`primitive_distance`, of its
    ``prim_size``) or a mesh that is exactly the surface of its box (``FLAG_BOX``: :func:`cuboid_distance` of
    ``bounds``, with the slot's ``sign``). No mesh is read."""
    kind = world.slot_kind[e, m]
    if kind == KIND_GRID:
        return voxel_grid_distance(world, e, m, p, search, surface_eps)
    if kind != KIND_MESH:
        return primitive_distance(p, kind, world.prim_size[e, m], search, surface_eps)
    return cuboid_distance(
        p, world.bounds[e, m, 0], world.bounds[e, m, 1], search, world.sign[e, m], surface_eps
    )


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
