"""Sphere-mesh collision cost and signed distance against posed Warp meshes.

Every kernel is generic over the precision ``T`` of its inputs and outputs (float32 or float64; the torch
glue widens half types to float32). Warp's BVH query is float32: it picks the closest face. The distance to
that face, its direction and the activation are then recomputed in ``T`` from the face's vertices, so
float64 inputs get float64-smooth distances (what gradcheck needs) wherever the face choice is stable.

A signed distance is negative inside. The sign comes from the whole mesh (Warp's 3-ray vote, or the winding
number for meshes built with ``support_winding_number=True``); ``max_dist`` of a Warp query only bounds
the closest-point search. A query that finds no face within its radius says nothing about the sign, so a
centre with no face near it and inside the mesh's box is queried again without a bound: a centre deep
inside a mesh is a collision, never "not found".
"""

from typing import Any

import warp as wp

# the torch glue differentiates through the gradient these kernels write; Warp's adjoints are not needed
# (and would double the build time)
wp.set_module_options({"enable_backward": False})

#: Search radius meaning "the whole mesh". Its square (1e36) is still finite in float32.
UNBOUNDED = wp.constant(1.0e18)
#: Relative and absolute padding of a float32 search radius, so that a face the float32 BVH query rounds
#: just outside the radius is still found when its refined (``T``-precision) distance is inside.
SEARCH_PAD_REL = wp.constant(1.0e-5)
SEARCH_PAD_ABS = wp.constant(1.0e-6)


@wp.func
def closest_point_on_triangle(p: Any, a: Any, b: Any, c: Any):
    """The point of triangle ``abc`` closest to ``p`` (Voronoi-region walk; all in ``p``'s precision)."""
    zero = type(p[0])(0.0)
    ab = b - a
    ac = c - a
    ap = p - a
    d1 = wp.dot(ab, ap)
    d2 = wp.dot(ac, ap)
    if d1 <= zero and d2 <= zero:
        return a
    bp = p - b
    d3 = wp.dot(ab, bp)
    d4 = wp.dot(ac, bp)
    if d3 >= zero and d4 <= d3:
        return b
    vc = d1 * d4 - d3 * d2
    if vc <= zero and d1 >= zero and d3 <= zero:
        return a + ab * (d1 / (d1 - d3))
    cp = p - c
    d5 = wp.dot(ab, cp)
    d6 = wp.dot(ac, cp)
    if d6 >= zero and d5 <= d6:
        return c
    vb = d5 * d2 - d1 * d6
    if vb <= zero and d2 >= zero and d6 <= zero:
        return a + ac * (d2 / (d2 - d6))
    va = d3 * d6 - d5 * d4
    if va <= zero and (d4 - d3) >= zero and (d5 - d6) >= zero:
        return b + (c - b) * ((d4 - d3) / ((d4 - d3) + (d5 - d6)))
    denom = type(p[0])(1.0) / (va + vb + vc)
    return a + ab * (vb * denom) + ac * (vc * denom)


@wp.func
def query_point(mesh: wp.uint64, p: wp.vec3, max_dist: float, winding: int):
    if winding != 0:
        return wp.mesh_query_point_sign_winding_number(mesh, p, max_dist)
    return wp.mesh_query_point(mesh, p, max_dist)


@wp.func
def box_distance(p: wp.vec3, lower: wp.vec3, upper: wp.vec3):
    """Distance from ``p`` to the axis-aligned box (0 inside it)."""
    q = wp.max(wp.max(lower - p, p - upper), wp.vec3(0.0))
    return wp.length(q)


@wp.func
def signed_distance_local(mesh: wp.uint64, p: Any, search: float, winding: int, surface_eps: Any):
    """Signed distance of ``p`` (mesh frame, precision ``T``) and its gradient, if it is below ``search``.

    Returns ``(hit, d, n)``: ``hit`` is False when ``p`` is outside the mesh and at least ``search`` from it
    (then ``d`` and ``n`` are meaningless). ``n`` is the unit gradient of ``d`` in the mesh frame: the
    direction from the closest point, or the outward face normal when ``p`` lies within ``surface_eps`` of
    the surface (there the direction is undefined; the face normal keeps the gradient finite and nonzero).
    """
    p32 = wp.vec3(p)
    q = query_point(mesh, p32, search * (1.0 + SEARCH_PAD_REL) + SEARCH_PAD_ABS, winding)
    if not q.result:
        q = query_point(mesh, p32, UNBOUNDED, winding)
        if (not q.result) or q.sign >= 0.0:
            return False, type(surface_eps)(0.0), type(p)()
    a = type(p)(wp.mesh_get_point(mesh, q.face * 3 + 0))
    b = type(p)(wp.mesh_get_point(mesh, q.face * 3 + 1))
    c = type(p)(wp.mesh_get_point(mesh, q.face * 3 + 2))
    diff = p - closest_point_on_triangle(p, a, b, c)
    dist = wp.length(diff)
    inside = q.sign < 0.0
    d = dist
    if inside:
        d = -dist
    n = wp.normalize(wp.cross(b - a, c - a))
    if dist > surface_eps:
        n = diff / d
    return True, d, n


@wp.kernel
def sphere_mesh_cost(
    spheres: wp.array2d(dtype=Any),
    env_index: wp.array(dtype=wp.int32),
    mesh_ids: wp.array2d(dtype=wp.int64),
    inv_poses: wp.array2d(dtype=Any),
    bounds: wp.array3d(dtype=wp.vec3),
    enabled: wp.array2d(dtype=wp.int32),
    params: wp.array(dtype=Any),
    extra_search: float,
    winding: int,
    surface_eps: Any,
    compute_grad: int,
    cost: wp.array2d(dtype=Any),
    grad: wp.array2d(dtype=Any),
    first: int,
):
    """Cost of sphere ``(b, s)``, summed over the enabled meshes of environment ``env_index[b]``.

    ``spheres[b, s] = (x, y, z, r)`` in the world frame; ``inv_poses[e, m]`` maps world to mesh ``m``'s
    frame; ``bounds[e, m] = (lower, upper)`` is the mesh's box in its own frame; ``params = (eta, weight)``.
    With ``phi = r + eta - d``: 0 for phi <= 0, phi^2 / (2 eta) up to eta, phi - eta / 2 above, times
    weight. ``grad[b, s]`` (written when ``compute_grad``) is d cost / d (x, y, z, r). Thread ``t`` scores
    sphere ``first + t`` of the flattened ``(B, S)`` grid (the host may split the grid into launches).
    """
    flat = wp.tid() + first
    bi = flat // spheres.shape[1]
    si = flat % spheres.shape[1]
    sphere = spheres[bi, si]
    zero = type(sphere[0])(0.0)
    eta = params[0]
    weight = params[1]
    total = zero
    g = type(sphere)()
    r = sphere[3]
    if r >= zero:
        centre = wp.vector(sphere[0], sphere[1], sphere[2])
        search = float(r + eta) + extra_search
        e = env_index[bi]
        for m in range(mesh_ids.shape[1]):
            if enabled[e, m] == 0:
                continue
            xf = inv_poses[e, m]
            p = wp.transform_point(xf, centre)
            if box_distance(wp.vec3(p), bounds[e, m, 0], bounds[e, m, 1]) > search:
                continue
            hit, d, n = signed_distance_local(wp.uint64(mesh_ids[e, m]), p, search, winding, surface_eps)
            if not hit:
                continue
            phi = r + eta - d
            if phi <= zero:
                continue
            dphi = type(phi)(1.0)
            if phi <= eta:
                total += phi * phi / (type(phi)(2.0) * eta)
                dphi = phi / eta
            else:
                total += phi - type(phi)(0.5) * eta
            if compute_grad != 0:
                # d phi / d centre = -grad d; n is in the mesh frame, rotate it back to the world
                nw = wp.quat_rotate_inv(wp.transform_get_rotation(xf), n)
                g += wp.vector(-dphi * nw[0], -dphi * nw[1], -dphi * nw[2], dphi)
    cost[bi, si] = total * weight
    if compute_grad != 0:
        grad[bi, si] = g * weight


@wp.kernel
def signed_distance(
    points: wp.array2d(dtype=Any),
    env_index: wp.array(dtype=wp.int32),
    mesh_ids: wp.array2d(dtype=wp.int64),
    inv_poses: wp.array2d(dtype=Any),
    bounds: wp.array3d(dtype=wp.vec3),
    enabled: wp.array2d(dtype=wp.int32),
    winding: int,
    surface_eps: Any,
    far: Any,
    compute_grad: int,
    dist: wp.array2d(dtype=Any),
    grad: wp.array2d(dtype=Any),
    first: int,
):
    """Union signed distance of point ``(b, s)``: the minimum over the enabled meshes of its environment.

    ``far`` is written where no mesh is enabled (gradient 0). A mesh whose box is farther than the best
    distance so far cannot hold the minimum (outside its box is outside the mesh) and is skipped. Thread
    ``t`` handles point ``first + t`` of the flattened ``(B, S)`` grid.
    """
    flat = wp.tid() + first
    bi = flat // points.shape[1]
    si = flat % points.shape[1]
    p_world = points[bi, si]
    best = far
    best_n = type(p_world)()
    e = env_index[bi]
    for m in range(mesh_ids.shape[1]):
        if enabled[e, m] == 0:
            continue
        xf = inv_poses[e, m]
        p = wp.transform_point(xf, p_world)
        box = box_distance(wp.vec3(p), bounds[e, m, 0], bounds[e, m, 1])
        if type(far)(box) > best:
            continue
        hit, d, n = signed_distance_local(wp.uint64(mesh_ids[e, m]), p, UNBOUNDED, winding, surface_eps)
        if hit and d < best:
            best = d
            best_n = wp.quat_rotate_inv(wp.transform_get_rotation(xf), n)
    dist[bi, si] = best
    if compute_grad != 0:
        grad[bi, si] = best_n


@wp.kernel
def winding_probe(mesh: wp.uint64, p: wp.vec3, out_sign: wp.array(dtype=float)):
    """The winding-number sign of ``p``; used once to check that winding support really took."""
    q = wp.mesh_query_point_sign_winding_number(mesh, p, UNBOUNDED)
    out_sign[0] = q.sign


def _overloads(kernel, types):
    return {dtype: wp.overload(kernel, arg_types) for dtype, arg_types in types.items()}


#: kernel overloads by precision name, instantiated at import so one module build covers both
SPHERE_MESH_COST = _overloads(
    sphere_mesh_cost,
    {
        name: {
            "spheres": wp.array2d(dtype=v4),
            "inv_poses": wp.array2d(dtype=xf),
            "params": wp.array(dtype=s),
            "surface_eps": s,
            "cost": wp.array2d(dtype=s),
            "grad": wp.array2d(dtype=v4),
        }
        for name, s, v4, xf in (
            ("float32", wp.float32, wp.vec4, wp.transform),
            ("float64", wp.float64, wp.vec4d, wp.transformd),
        )
    },
)
SIGNED_DISTANCE = _overloads(
    signed_distance,
    {
        name: {
            "points": wp.array2d(dtype=v3),
            "inv_poses": wp.array2d(dtype=xf),
            "surface_eps": s,
            "far": s,
            "dist": wp.array2d(dtype=s),
            "grad": wp.array2d(dtype=v3),
        }
        for name, s, v3, xf in (
            ("float32", wp.float32, wp.vec3, wp.transform),
            ("float64", wp.float64, wp.vec3d, wp.transformd),
        )
    },
)
