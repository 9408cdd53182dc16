"""What a planner asks of a world besides a cost: the query kernels of ``warpgeo.queries``.

* :func:`sphere_collision`: whether a sphere penetrates any enabled entry of its environment (``r - d > 0``,
  ``d`` the signed distance of its centre: exactly where the cost with ``activation_distance = 0`` is
  positive), entries in slot order, stopping at the first that it penetrates. A mesh's grid cell decides
  without a BVH query where it can (:func:`mesh_collides`).
* :func:`closest_point`: the nearest surface point over the enabled entries (the smallest unsigned distance),
  its signed distance, the unit gradient of that distance (the outward normal) and the entry's slot.

Both are generic over the precision ``T`` (float32 or float64); the world is the struct of
``warpgeo._kernels.world`` and a slot's distance ``mesh_distance.slot_distance``, as in ``_kernels/sdf.py``.
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.mesh_distance import (
    cell_bounds,
    closest_point_on_triangle,
    nearest_in_box,
    padded,
    slot_distance,
    union_bound,
)
from warpgeo._kernels.world import (
    FAR_ABS,
    FAR_RATIO,
    FLAG_BOX,
    FLAG_CLOSED,
    FLAG_SLIVERS,
    KEYS,
    KIND_CAPSULE,
    KIND_CYLINDER,
    KIND_GRID,
    KIND_MESH,
    KIND_SPHERE,
    SIGN_UNSIGNED,
    UNBOUNDED,
    WORLD,
    beyond_world_box,
    box_distance,
    cuboid_mesh_distance,
    grid_index,
    slot_in_use,
    thread_rows,
    world_environment,
)

wp.set_module_options({"enable_backward": False})


@wp.func
def grid_collides(world: Any, e: int, m: int, p: Any, r: Any):
    """Whether the grid cell of ``p`` (slot frame) proves that a sphere of radius ``r >= 0`` there penetrates
    mesh ``(e, m)``: the cell bounds ``|d| <= |s| + slack`` below ``r`` (so ``d < r``), or puts ``p`` inside a
    closed, signed mesh (``d < 0 <= r``). False where it proves nothing (no grid, a closed form, a cell
    across the surface): the caller then computes the distance. The bound is padded as the search radii are,
    so it only decides where the distance the query would compute is below ``r`` too."""
    flags = world.grid_flags[e, m]
    if world.slot_kind[e, m] != KIND_MESH or (flags & FLAG_BOX) != 0:
        return False
    s, slack = cell_bounds(
        wp.vec3(p), world.bounds[e, m, 0], world.bounds[e, m, 1], world.grid_dims[e, m], world.grid_cells
    )
    if slack >= UNBOUNDED:
        return False
    upper = padded(wp.abs(s) + slack)
    if wp.isfinite(upper) and type(r)(upper) < r:
        return True
    closed = (flags & FLAG_CLOSED) != 0
    return closed and world.sign[e, m] != SIGN_UNSIGNED and s < 0.0 and -s > slack


@wp.func
def mesh_collides(world: WORLD["float32", "meshes"], e: int, m: int, p: Any, r: Any, surface_eps: Any):
    """Whether a sphere of radius ``r >= 0`` centred at ``p`` (slot frame) penetrates slot ``(e, m)``:
    ``r - d > 0`` with ``d`` the slot's distance searched within ``r`` (as the cost with ``eta = 0`` searches),
    after the grid's shortcut (:func:`grid_collides`). One overload per key of ``WORLD``."""
    if grid_collides(world, e, m, p, r):
        return True
    hit, d, _n = slot_distance(world, e, m, p, r, surface_eps)
    return hit and r - d > type(r)(0.0)


@wp.func
def mesh_collides(  # noqa: F811 (a Warp overload, by the world's struct type)
    world: WORLD["float64", "meshes"], e: int, m: int, p: Any, r: Any, surface_eps: Any
):
    if grid_collides(world, e, m, p, r):
        return True
    hit, d, _n = slot_distance(world, e, m, p, r, surface_eps)
    return hit and r - d > type(r)(0.0)


@wp.func
def mesh_collides(  # noqa: F811 (a Warp overload, by the world's struct type)
    world: WORLD["float32", "cuboids"], e: int, m: int, p: Any, r: Any, surface_eps: Any
):
    hit, d, _n = cuboid_mesh_distance(world, e, m, p, r, surface_eps)
    return hit and r - d > type(r)(0.0)


@wp.func
def mesh_collides(  # noqa: F811 (a Warp overload, by the world's struct type)
    world: WORLD["float64", "cuboids"], e: int, m: int, p: Any, r: Any, surface_eps: Any
):
    hit, d, _n = cuboid_mesh_distance(world, e, m, p, r, surface_eps)
    return hit and r - d > type(r)(0.0)


def sphere_collision(
    spheres: wp.array2d(dtype=Any),
    env_index: wp.array(dtype=wp.int64),
    world: Any,
    surface_eps: Any,
    collides: wp.array2d(dtype=wp.bool),
    per_thread: int,
    row_start: int,
):
    """Whether sphere ``(b, s)`` (``(x, y, z, r)``, world frame) penetrates an enabled entry of environment
    ``env_index[b]``: the entries in slot order, the first penetrated one ends the search. A disabled sphere
    (``r < 0``) or one with no environment (-1) collides with nothing. Thread ``t`` handles spheres
    ``(row_start + t) * per_thread`` onwards of the flattened ``(B, S)`` grid."""
    first, stop = thread_rows(wp.tid() + row_start, per_thread, spheres.shape[0] * spheres.shape[1])
    bi, si = grid_index(first, stop, spheres.shape[1])
    for _flat in range(first, stop):
        sphere = spheres[bi, si]
        r = sphere[3]
        found = bool(False)
        e = world_environment(bi, env_index, world)
        if r >= type(r)(0.0) and e >= 0:
            centre = wp.vector(sphere[0], sphere[1], sphere[2])
            for m in range(world.mesh_ids.shape[1]):
                if not slot_in_use(world, e, m):
                    continue
                if beyond_world_box(centre, world.world_bounds, e, m, r):
                    continue
                if mesh_collides(
                    world, e, m, wp.transform_point(world.inv_poses[e, m], centre), r, surface_eps
                ):
                    found = True
                    break
        collides[bi, si] = found
        si += 1
        if si == spheres.shape[1]:
            si = 0
            bi += 1


@wp.func
def closed_form_foot(world: Any, e: int, m: int, p: Any, d: Any, n: Any):
    """The closest surface point of closed-form slot ``(e, m)`` to ``p`` (slot frame), given its distance ``d``
    and unit gradient ``n`` (``slot_distance``'s), computed where it lies rather than as ``p - d n``, which
    loses every digit of a point far away (``|p| >> |q|``); inside (bounded by the entry) ``p - d n``."""
    kind = world.slot_kind[e, m]
    if d <= type(d)(0.0) or kind == KIND_GRID:  # a grid: along its (unit) gradient, as far as its distance
        return p - n * d
    size = wp.vec3d(world.prim_size[e, m])
    if kind == KIND_SPHERE:
        return type(p)(wp.vec3d(n) * size[0])
    if kind == KIND_CAPSULE:
        a = wp.max(size[2] - size[0], wp.float64(0.0))
        axis = wp.vec3d(0.0, 0.0, wp.clamp(wp.float64(p[2]), -a, a))
        return type(p)(axis + wp.vec3d(n) * size[0])
    pd = wp.vec3d(p)
    if kind == KIND_CYLINDER:
        rho = wp.length(wp.vec3d(pd[0], pd[1], wp.float64(0.0)))
        s = wp.float64(1.0)
        if rho > size[0]:
            s = size[0] / rho
        return type(p)(wp.vec3d(pd[0] * s, pd[1] * s, wp.clamp(pd[2], -size[2], size[2])))
    lo = -size
    hi = size
    if kind == KIND_MESH:  # a cuboid mesh (FLAG_BOX): its box
        lo = wp.vec3d(world.bounds[e, m, 0])
        hi = wp.vec3d(world.bounds[e, m, 1])
    return type(p)(wp.min(wp.max(pd, lo), hi))


@wp.func
def mesh_foot(world: Any, e: int, m: int, p: Any, d: Any, n: Any):
    """The closest surface point of mesh slot ``(e, m)`` to ``p`` (slot frame; ``d``, ``n`` its distance and
    unit gradient): ``p - d n`` near the mesh; from farther than the mesh's extent (where ``p - d n`` would
    lose digits) the point on the closest face (a BVH query within ``|d|``), or beyond the far path's
    reach the nearest vertex, as ``mesh_distance`` takes it."""
    if world.slot_kind[e, m] != KIND_MESH or (world.grid_flags[e, m] & FLAG_BOX) != 0:
        return closed_form_foot(world, e, m, p, d, n)
    lower = world.bounds[e, m, 0]
    upper = world.bounds[e, m, 1]
    box = box_distance(p, lower, upper)
    extent = type(box)(wp.length(upper - lower))
    if box <= extent:
        return p - n * d
    mesh = wp.uint64(world.mesh_ids[e, m])
    pd = wp.vec3d(p)
    if box > extent * type(box)(FAR_RATIO) or box > type(box)(FAR_ABS):
        mm = wp.mesh_get(mesh)
        best = wp.float64(-1.0)
        foot = wp.vec3d()
        for corner in range(mm.indices.shape[0]):
            i = mm.indices[corner]
            if i >= 0 and i < mm.points.shape[0]:
                v = wp.vec3d(mm.points[i])
                dist = wp.length(pd - v)
                if best < wp.float64(0.0) or dist < best:
                    best = dist
                    foot = v
        if best < wp.float64(0.0):
            return p - n * d
        return type(p)(foot)
    q = wp.mesh_query_point_no_sign(mesh, wp.vec3(p), padded(float(wp.abs(d))) * 1.001)
    face = q.face
    if (world.grid_flags[e, m] & FLAG_SLIVERS) != 0:  # Warp's query skips the slivers: every face near enough
        face, _near = nearest_in_box(
            mesh, pd, wp.vec3(p), padded(float(wp.abs(d))) * 1.001, int(-1), wp.float64(UNBOUNDED)
        )
    elif not q.result:
        face = int(-1)
    if face < 0:
        return p - n * d
    a = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 0))
    b = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 1))
    c = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 2))
    foot, _feature = closest_point_on_triangle(pd, a, b, c)
    return type(p)(foot)


@wp.func
def slot_foot(world: WORLD["float32", "meshes"], e: int, m: int, p: Any, d: Any, n: Any):
    """The closest surface point of slot ``(e, m)`` (:func:`mesh_foot`, or in a world of closed forms only
    :func:`closed_form_foot`: no BVH query compiled). One overload per key of ``WORLD``."""
    return mesh_foot(world, e, m, p, d, n)


@wp.func
def slot_foot(world: WORLD["float64", "meshes"], e: int, m: int, p: Any, d: Any, n: Any):  # noqa: F811
    return mesh_foot(world, e, m, p, d, n)


@wp.func
def slot_foot(world: WORLD["float32", "cuboids"], e: int, m: int, p: Any, d: Any, n: Any):  # noqa: F811
    return closed_form_foot(world, e, m, p, d, n)


@wp.func
def slot_foot(world: WORLD["float64", "cuboids"], e: int, m: int, p: Any, d: Any, n: Any):  # noqa: F811
    return closed_form_foot(world, e, m, p, d, n)


def closest_point(
    points: wp.array2d(dtype=Any),
    env_index: wp.array(dtype=wp.int64),
    world: Any,
    surface_eps: Any,
    far: Any,
    point: wp.array2d(dtype=Any),
    dist: wp.array2d(dtype=Any),
    normal: wp.array2d(dtype=Any),
    entry: wp.array2d(dtype=wp.int64),
    per_thread: int,
    row_start: int,
):
    """The nearest surface point of point ``(b, s)`` over the enabled entries of environment ``env_index[b]``:
    the entry of the smallest ``|d|`` (the first slot on a tie), ``d`` its signed distance, ``normal`` its
    unit gradient (world frame: outward, inside too), ``point`` the foot of ``p`` on that surface (``p - d *
    normal``, computed where it lies: :func:`slot_foot`), ``entry`` the slot. None (no enabled entry):
    ``d = far``, zeros, ``entry = -1``. Each entry is searched within the best ``|d|`` so far (its box first);
    inside one, at any depth."""
    first, stop = thread_rows(wp.tid() + row_start, per_thread, points.shape[0] * points.shape[1])
    bi, si = grid_index(first, stop, points.shape[1])
    for _flat in range(first, stop):
        p_world = points[bi, si]
        best = far
        best_d = far
        best_n = type(p_world)()
        best_local_n = type(p_world)()
        best_m = int(-1)
        e = world_environment(bi, env_index, world)
        if e >= 0:
            bound = union_bound(world, e, p_world, far)
            for m in range(world.mesh_ids.shape[1]):
                if not slot_in_use(world, e, m):
                    continue
                reach = wp.min(best, bound)
                if beyond_world_box(p_world, world.world_bounds, e, m, reach):
                    continue
                xf = world.inv_poses[e, m]
                hit, d, n = slot_distance(world, e, m, wp.transform_point(xf, p_world), reach, surface_eps)
                if hit and wp.abs(d) < best:
                    best = wp.abs(d)
                    best_d = d
                    best_local_n = n
                    best_m = m
        foot = type(p_world)()
        if best_m >= 0:
            xf = world.inv_poses[e, best_m]
            if world.slot_kind[e, best_m] == KIND_GRID:  # the interpolant's gradient is not unit
                length = wp.length(best_local_n)
                if length > type(length)(0.0):
                    best_local_n = best_local_n / length
            best_n = wp.quat_rotate_inv(wp.transform_get_rotation(xf), best_local_n)
            local = slot_foot(world, e, best_m, wp.transform_point(xf, p_world), best_d, best_local_n)
            foot = wp.transform_point(wp.transform_inverse(xf), local)
        dist[bi, si] = best_d
        normal[bi, si] = best_n
        entry[bi, si] = wp.int64(best_m)
        point[bi, si] = foot
        si += 1
        if si == points.shape[1]:
            si = 0
            bi += 1


OPTIONS = {"enable_backward": False}


def _max_registers(key) -> int:
    """The register cap on CUDA, by precision: the SDF kernels' (``_constants.SDF_MAX_REGISTERS``)."""
    return _constants.SDF_MAX_REGISTERS[key[0]]


_SCALARS = {"float32": (wp.float32, wp.vec3f, wp.vec4f), "float64": (wp.float64, wp.vec3d, wp.vec4d)}


SPHERE_COLLISION = KernelTable(
    f"{__name__}.sphere_collision",
    (sphere_collision,),
    {
        key: {
            "world": WORLD[key],
            "spheres": wp.array2d(dtype=_SCALARS[key[0]][2]),
            "surface_eps": _SCALARS[key[0]][0],
            "collides": wp.array2d(dtype=wp.bool),
        }
        for key in KEYS
    },
    options=OPTIONS,
    max_registers=_max_registers,
)


CLOSEST_POINT = KernelTable(
    f"{__name__}.closest_point",
    (closest_point,),
    {
        key: {
            "world": WORLD[key],
            "points": wp.array2d(dtype=_SCALARS[key[0]][1]),
            "surface_eps": _SCALARS[key[0]][0],
            "far": _SCALARS[key[0]][0],
            "point": wp.array2d(dtype=_SCALARS[key[0]][1]),
            "dist": wp.array2d(dtype=_SCALARS[key[0]][0]),
            "normal": wp.array2d(dtype=_SCALARS[key[0]][1]),
        }
        for key in KEYS
    },
    options=OPTIONS,
    max_registers=_max_registers,
)
