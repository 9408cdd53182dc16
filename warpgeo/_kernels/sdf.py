"""Sphere-mesh collision cost (discrete and swept) and signed distance against a world: the query kernels.

Every kernel is generic over the precision ``T`` of its inputs and outputs (float32 or float64). The world is
one struct (``warpgeo._kernels.world``: its fields declared once), one slot's distance
``mesh_distance.slot_distance`` (the general mesh distance, or in a world of closed forms only the closed
forms, picked by the world struct's type), the cost formula :func:`collision_cost` here, and the three kernel
bodies below with their tables, one Warp module per key. How the exact shortcuts work (closed forms, grids,
pseudo-normals, plane trees, far points, tables still on their way) and why the kernels trust no index:
``docs/sdf.md``.
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.mesh_distance import slot_distance, union_bound
from warpgeo._kernels.world import (
    KEYS,
    WORLD,
    beyond_world_box,
    grid_index,
    slot_in_use,
    thread_rows,
    world_environment,
)

# the torch glue differentiates through the gradient these kernels write; Warp's adjoints are not needed
# (and would double the build time)
wp.set_module_options({"enable_backward": False})


#: Below this, ``phi * phi`` of the cost's quadratic branch may have lost bits to underflow (float32's
#: smallest normal is 1.2e-38): the cost is then computed as ``phi * (phi / eta) / 2`` instead.
TINY_SQUARE = wp.constant(1.0e-30)


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
            bound = union_bound(world, e, p_world, far)
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
