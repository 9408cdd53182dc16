"""Sphere-mesh collision cost (discrete and swept) and signed distance against posed Warp meshes.

Every kernel is generic over the precision ``T`` of its inputs and outputs (float32 or float64; the torch
glue widens half types to float32). Warp's BVH query is float32: it picks the closest face. The distance to
that face, its direction and the activation are then recomputed in ``T`` from the face's vertices, so
float64 inputs get float64-smooth distances (what gradcheck needs) wherever the face choice is stable.

A signed distance is negative inside. The sign comes from the mesh's sign method (``sign[e, m]``): Warp's
3-ray vote, the winding number (meshes built with ``support_winding_number=True``), the closest feature's
angle-weighted pseudo-normal, or none (unsigned: shells and open containers). ``max_dist`` of a Warp query
only bounds the closest-point search. A query that finds no face within its radius says nothing about the
sign, so a centre with no face near it and inside the mesh's box is queried again without a bound: a centre
deep inside a mesh is a collision, never "not found".

The world arrays (``mesh_ids``, ``inv_poses``, ``bounds``, ``enabled``, ``sign``; all ``(E, M, ...)``) are the
fields of ``MeshWorld``'s kernel record, named as here. Kernels trust no index: an ``env_index`` outside
``[0, E)`` is an environment without meshes, and a slot whose mesh id is 0 (padding) is never queried.
"""

from typing import Any

import warp as wp

# the torch glue differentiates through the gradient these kernels write; Warp's adjoints are not needed
# (and would double the build time)
wp.set_module_options({"enable_backward": False})

#: Search radius meaning "the whole mesh" (the largest float32).
UNBOUNDED = wp.constant(3.4e38)
#: Relative and absolute padding of a float32 search radius, so that a face the float32 BVH query rounds
#: just outside the radius is still found when its refined (``T``-precision) distance is inside.
SEARCH_PAD_REL = wp.constant(1.0e-5)
SEARCH_PAD_ABS = wp.constant(1.0e-6)
#: Sign methods, as stored in ``sign[e, m]`` (MeshWorld's table maps the names to these).
SIGN_RAY = wp.constant(0)
SIGN_WINDING = wp.constant(1)
SIGN_NORMAL = wp.constant(2)
SIGN_UNSIGNED = wp.constant(3)
#: Mesh id of an empty slot.
NO_MESH = wp.constant(wp.int64(0))


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
def query_point(mesh: wp.uint64, p: wp.vec3, max_dist: float, sign: int):
    if sign == SIGN_WINDING:
        return wp.mesh_query_point_sign_winding_number(mesh, p, max_dist)
    if sign == SIGN_NORMAL:
        return wp.mesh_query_point_sign_normal(mesh, p, max_dist)
    if sign == SIGN_UNSIGNED:
        return wp.mesh_query_point_no_sign(mesh, p, max_dist)
    return wp.mesh_query_point(mesh, p, max_dist)


@wp.func
def box_distance(p: wp.vec3, lower: wp.vec3, upper: wp.vec3):
    """Distance from ``p`` to the axis-aligned box (0 inside it)."""
    q = wp.max(wp.max(lower - p, p - upper), wp.vec3(0.0))
    return wp.length(q)


@wp.func
def signed_distance_local(mesh: wp.uint64, p: Any, search: float, sign: int, surface_eps: Any):
    """Signed distance of ``p`` (mesh frame, precision ``T``) and its gradient, if it is below ``search``.

    Returns ``(hit, d, n)``: ``hit`` is False when ``p`` is outside the mesh and at least ``search`` from it
    (then ``d`` and ``n`` are meaningless). ``n`` is the unit gradient of ``d`` in the mesh frame: the
    direction from the closest point, or the outward face normal when ``p`` lies within ``surface_eps`` of
    the surface (there the direction is undefined; the face normal keeps the gradient finite and nonzero).
    """
    p32 = wp.vec3(p)
    q = query_point(mesh, p32, search * (1.0 + SEARCH_PAD_REL) + SEARCH_PAD_ABS, sign)
    inside = False
    if q.result:
        inside = sign != SIGN_UNSIGNED and q.sign < 0.0
    else:
        if sign == SIGN_UNSIGNED:  # nothing within reach, and no inside to be deep in
            return False, type(surface_eps)(0.0), type(p)()
        q = query_point(mesh, p32, UNBOUNDED, sign)
        if (not q.result) or q.sign >= 0.0:
            return False, type(surface_eps)(0.0), type(p)()
        inside = True
    a = type(p)(wp.mesh_get_point(mesh, q.face * 3 + 0))
    b = type(p)(wp.mesh_get_point(mesh, q.face * 3 + 1))
    c = type(p)(wp.mesh_get_point(mesh, q.face * 3 + 2))
    diff = p - closest_point_on_triangle(p, a, b, c)
    dist = wp.length(diff)
    d = dist
    if inside:
        d = -dist
    n = wp.normalize(wp.cross(b - a, c - a))
    if dist > surface_eps:
        n = diff / d
    return True, d, n


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
def sphere_cost(
    sphere: Any,
    e: int,
    mesh_ids: wp.array2d(dtype=wp.int64),
    inv_poses: wp.array2d(dtype=Any),
    bounds: wp.array3d(dtype=wp.vec3),
    enabled: wp.array2d(dtype=wp.int32),
    sign: wp.array2d(dtype=wp.int32),
    eta: Any,
    extra_search: float,
    surface_eps: Any,
):
    """Cost of one sphere ``(x, y, z, r)`` against the enabled meshes of environment ``e`` (-1: none), and its
    gradient w.r.t. ``(x, y, z, r)``; both unweighted. A sphere with ``r < 0`` is disabled (0, 0)."""
    zero = type(sphere[0])(0.0)
    total = zero
    g = type(sphere)()
    r = sphere[3]
    if r >= zero and e >= 0:
        centre = wp.vector(sphere[0], sphere[1], sphere[2])
        search = float(r + eta) + extra_search
        for m in range(mesh_ids.shape[1]):
            if enabled[e, m] == 0 or mesh_ids[e, m] == NO_MESH:
                continue
            xf = inv_poses[e, m]
            p = wp.transform_point(xf, centre)
            if box_distance(wp.vec3(p), bounds[e, m, 0], bounds[e, m, 1]) > search:
                continue
            hit, d, n = signed_distance_local(wp.uint64(mesh_ids[e, m]), p, search, sign[e, m], surface_eps)
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
            # d phi / d centre = -grad d; n is in the mesh frame, rotate it back to the world
            nw = wp.quat_rotate_inv(wp.transform_get_rotation(xf), n)
            g += wp.vector(-dphi * nw[0], -dphi * nw[1], -dphi * nw[2], dphi)
    return total, g


@wp.kernel
def sphere_mesh_cost(
    spheres: wp.array2d(dtype=Any),
    env_index: wp.array(dtype=wp.int64),
    mesh_ids: wp.array2d(dtype=wp.int64),
    inv_poses: wp.array2d(dtype=Any),
    bounds: wp.array3d(dtype=wp.vec3),
    enabled: wp.array2d(dtype=wp.int32),
    sign: wp.array2d(dtype=wp.int32),
    params: wp.array(dtype=Any),
    extra_search: float,
    surface_eps: Any,
    compute_grad: int,
    cost: wp.array2d(dtype=Any),
    grad: wp.array2d(dtype=Any),
    row_start: int,
):
    """Cost of sphere ``(b, s)``, summed over the enabled meshes of environment ``env_index[b]``.

    ``spheres[b, s] = (x, y, z, r)`` in the world frame; ``inv_poses[e, m]`` maps world to mesh ``m``'s
    frame; ``bounds[e, m] = (lower, upper)`` is the mesh's box in its own frame; ``params = (eta, weight)``.
    With ``phi = r + eta - d``: 0 for phi <= 0, phi^2 / (2 eta) up to eta, phi - eta / 2 above, times
    weight. ``grad[b, s]`` (written when ``compute_grad``) is d cost / d (x, y, z, r). Thread ``t`` scores
    sphere ``row_start + t`` of the flattened ``(B, S)`` grid (the host may split the grid into launches).
    """
    flat = wp.tid() + row_start
    bi = flat // spheres.shape[1]
    si = flat % spheres.shape[1]
    weight = params[1]
    e = environment(bi, env_index, mesh_ids.shape[0])
    c, g = sphere_cost(
        spheres[bi, si], e, mesh_ids, inv_poses, bounds, enabled, sign, params[0], extra_search, surface_eps
    )
    cost[bi, si] = c * weight
    if compute_grad != 0:
        grad[bi, si] = g * weight


@wp.kernel
def swept_sphere_mesh_cost(
    spheres: wp.array3d(dtype=Any),
    env_index: wp.array(dtype=wp.int64),
    mesh_ids: wp.array2d(dtype=wp.int64),
    inv_poses: wp.array2d(dtype=Any),
    bounds: wp.array3d(dtype=wp.vec3),
    enabled: wp.array2d(dtype=wp.int32),
    sign: wp.array2d(dtype=wp.int32),
    params: wp.array(dtype=Any),
    sweep_steps: int,
    surface_eps: Any,
    compute_grad: int,
    cost: wp.array3d(dtype=Any),
    grad_here: wp.array3d(dtype=Any),
    grad_next: wp.array3d(dtype=Any),
    row_start: int,
):
    """Swept cost of step ``h`` of sphere ``n`` in trajectory ``b`` (``spheres`` is ``(B, H, N)`` x vec4).

    With ``S = sweep_steps``, the step's cost is the mean over ``j = 0..S`` of the cost of the sphere
    interpolated (centre and radius) at ``t = j / (S + 1)`` from step ``h`` towards step ``h + 1``; the last
    step, and a step whose next sphere is disabled, is scored alone. ``grad_here`` / ``grad_next`` receive
    the gradient w.r.t. the spheres of steps ``h`` and ``h + 1`` (each sample's split ``(1 - t, t)``); the
    host adds them up without races. Thread ``t`` handles row ``row_start + t`` of the flattened
    ``(B, H, N)`` grid.
    """
    flat = wp.tid() + row_start
    horizon = spheres.shape[1]
    count = spheres.shape[2]
    bi = flat // (horizon * count)
    hi = (flat // count) % horizon
    ni = flat % count
    weight = params[1]
    eta = params[0]
    e = environment(bi, env_index, mesh_ids.shape[0])
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
        c, g = sphere_cost(
            here + (nxt - here) * t, e, mesh_ids, inv_poses, bounds, enabled, sign, eta, 0.0, surface_eps
        )
        total += c
        g_here += g * (type(zero)(1.0) - t)
        g_next += g * t
    cost[bi, hi, ni] = total * scale * weight
    if compute_grad != 0:
        grad_here[bi, hi, ni] = g_here * (scale * weight)
        grad_next[bi, hi, ni] = g_next * (scale * weight)


@wp.kernel
def signed_distance(
    points: wp.array2d(dtype=Any),
    env_index: wp.array(dtype=wp.int64),
    mesh_ids: wp.array2d(dtype=wp.int64),
    inv_poses: wp.array2d(dtype=Any),
    bounds: wp.array3d(dtype=wp.vec3),
    enabled: wp.array2d(dtype=wp.int32),
    sign: wp.array2d(dtype=wp.int32),
    surface_eps: Any,
    far: Any,
    compute_grad: int,
    dist: wp.array2d(dtype=Any),
    grad: wp.array2d(dtype=Any),
    row_start: int,
):
    """Union signed distance of point ``(b, s)``: the minimum over the enabled meshes of its environment.

    ``far`` is written where no mesh is enabled (gradient 0). A mesh whose box is farther than the best
    distance so far cannot hold the minimum (outside its box is outside the mesh) and is skipped. Thread
    ``t`` handles point ``row_start + t`` of the flattened ``(B, S)`` grid.
    """
    flat = wp.tid() + row_start
    bi = flat // points.shape[1]
    si = flat % points.shape[1]
    p_world = points[bi, si]
    best = far
    best_n = type(p_world)()
    e = environment(bi, env_index, mesh_ids.shape[0])
    if e >= 0:
        for m in range(mesh_ids.shape[1]):
            if enabled[e, m] == 0 or mesh_ids[e, m] == NO_MESH:
                continue
            xf = inv_poses[e, m]
            p = wp.transform_point(xf, p_world)
            box = box_distance(wp.vec3(p), bounds[e, m, 0], bounds[e, m, 1])
            if type(far)(box) > best:
                continue
            hit, d, n = signed_distance_local(
                wp.uint64(mesh_ids[e, m]), p, UNBOUNDED, sign[e, m], surface_eps
            )
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


_PRECISIONS = {
    "float32": (wp.float32, wp.vec3f, wp.vec4f, wp.transformf),
    "float64": (wp.float64, wp.vec3d, wp.vec4d, wp.transformd),
}

#: kernel overloads by precision name, instantiated at import so one module build covers both
SPHERE_MESH_COST = {
    name: wp.overload(
        sphere_mesh_cost,
        {
            "spheres": wp.array2d(dtype=v4),
            "inv_poses": wp.array2d(dtype=xf),
            "params": wp.array(dtype=s),
            "surface_eps": s,
            "cost": wp.array2d(dtype=s),
            "grad": wp.array2d(dtype=v4),
        },
    )
    for name, (s, _v3, v4, xf) in _PRECISIONS.items()
}
SWEPT_SPHERE_MESH_COST = {
    name: wp.overload(
        swept_sphere_mesh_cost,
        {
            "spheres": wp.array3d(dtype=v4),
            "inv_poses": wp.array2d(dtype=xf),
            "params": wp.array(dtype=s),
            "surface_eps": s,
            "cost": wp.array3d(dtype=s),
            "grad_here": wp.array3d(dtype=v4),
            "grad_next": wp.array3d(dtype=v4),
        },
    )
    for name, (s, _v3, v4, xf) in _PRECISIONS.items()
}
SIGNED_DISTANCE = {
    name: wp.overload(
        signed_distance,
        {
            "points": wp.array2d(dtype=v3),
            "inv_poses": wp.array2d(dtype=xf),
            "surface_eps": s,
            "far": s,
            "dist": wp.array2d(dtype=s),
            "grad": wp.array2d(dtype=v3),
        },
    )
    for name, (s, v3, _v4, xf) in _PRECISIONS.items()
}
