"""Ray casting against a world: the first hit of each ray over the enabled entries of its environment.

One kernel (:data:`RAYCAST`, per key of the world's tables: precision, world of meshes or of closed forms
only); a thread casts ``per_thread`` rays of the flattened ``(B, S)`` grid. Per ray and entry: a broad phase
against the entry's posed box (``world_bounds``), then the ray moved into the entry's frame
(``inv_poses``: rigid, so lengths are kept and the distance along the unit direction is the same in both
frames), then

* a mesh: Warp's BVH ray query (float32), started at the entry of its box (so a far origin loses no bits),
  and the distance recomputed in float64 on the plane of the face it found;
* a cuboid mesh (``FLAG_BOX``) or an analytic primitive: closed forms in float64 (box slabs; sphere;
  cylinder with flat caps; capsule = cylinder and two balls). Each is convex, so a line meets it in one
  interval ``[t_in, t_out]``.

The first surface crossing at ``t >= 0`` counts: from outside the entry's surface, from inside the exit
(meshes and closed forms alike). Ties (equal distance) go to the lowest slot. Nothing here trusts an index:
an environment outside the world is empty (every ray misses), a shape mismatch between the ray arrays casts
no ray, and a non-finite or zero direction (or a non-finite origin) misses.
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.distance_grid import grid_distance_at
from warpgeo._kernels.world import (
    FLAG_BOX,
    KEYS,
    KIND_CAPSULE,
    KIND_CYLINDER,
    KIND_GRID,
    KIND_MESH,
    KIND_SPHERE,
    WORLD,
    grid_index,
    slot_in_use,
    thread_rows,
    world_environment,
)

# the torch glue writes the backward (the hit's local plane); Warp's adjoints are not needed
wp.set_module_options({"enable_backward": False})

KIND_CUBOID = wp.constant(_constants.KIND_CUBOID)
#: Padding of a mesh's float32 box around the BVH query's start and end (relative to the box's size and
#: to its distance from the frame's origin): the query starts a little before the box and runs a little
#: past its exit, so that no face the float32 query rounds onto the box's surface is lost.
BOX_PAD_REL = wp.constant(wp.float64(1.0e-4))
BOX_PAD_ABS = wp.constant(wp.float64(1.0e-6))
#: A face whose refined distance (float64, on its plane) differs from the float32 query's by more than this
#: fraction of the box's size (plus BOX_PAD_ABS) is one the ray grazes (nearly parallel): the query's own
#: distance is kept.
REFINE_TOL = wp.constant(wp.float64(1.0e-3))
#: Sphere tracing on a distance grid (``KIND_GRID``): a hit where the interpolated distance is within
#: GRID_HIT_TOL voxels of 0. A step is |d| / GRID_SLOPE: the trilinear interpolant of samples that differ by
#: at most a voxel size between neighbours (a true distance field) changes by at most sqrt(3) per unit length
#: along any line, so no step passes the surface. After GRID_MAX_STEPS steps (a ray grazing the surface) a
#: point within GRID_LAST_TOL voxels counts as the hit; farther, a miss.
GRID_HIT_TOL = wp.constant(wp.float64(1.0e-4))
GRID_LAST_TOL = wp.constant(wp.float64(1.0e-2))
GRID_SLOPE = wp.constant(wp.float64(1.7320508075688772))
GRID_MAX_STEPS = wp.constant(2048)


@wp.func
def inf64():
    return wp.float64(wp.inf)


@wp.func
def sign64(x: wp.float64):
    if x > wp.float64(0.0):
        return wp.float64(1.0)
    if x < wp.float64(0.0):
        return wp.float64(-1.0)
    return wp.float64(0.0)


@wp.func
def unit_or(v: wp.vec3d, fallback: wp.vec3d):
    """``v / |v|``, or ``fallback`` where ``v`` is zero or not finite."""
    m = wp.max(wp.max(wp.abs(v[0]), wp.abs(v[1])), wp.abs(v[2]))
    if not (m > wp.float64(0.0)) or not wp.isfinite(m):
        return fallback
    w = v / m
    return w / wp.length(w)


@wp.func
def axis(k: int, value: wp.float64):
    """``value`` times the unit vector of axis ``k``."""
    v = wp.vec3d()
    v[k] = value
    return v


@wp.func
def slab(o: wp.float64, d: wp.float64, lo: wp.float64, hi: wp.float64):
    """``(t_in, t_out)``: where the line ``o + t d`` is within ``[lo, hi]`` along one axis; a line parallel
    to the slab is inside it everywhere (``(-inf, inf)``) or nowhere (``(inf, -inf)``)."""
    if d == wp.float64(0.0):
        if o >= lo and o <= hi:
            return -inf64(), inf64()
        return inf64(), -inf64()
    t1 = (lo - o) / d
    t2 = (hi - o) / d
    if t1 > t2:
        return t2, t1
    return t1, t2


@wp.func
def box_interval(o: wp.vec3d, d: wp.vec3d, lo: wp.vec3d, hi: wp.vec3d):
    """``(t_in, t_out, n_in, n_out)`` of the line ``o + t d`` through the box ``[lo, hi]``, with the outward
    normals of the faces it enters and leaves by (the lowest axis where it crosses an edge)."""
    t_in = -inf64()
    t_out = inf64()
    n_in = wp.vec3d()
    n_out = wp.vec3d()
    for k in range(3):
        a, b = slab(o[k], d[k], lo[k], hi[k])
        if a > t_in:
            t_in = a
            n_in = axis(k, -sign64(d[k]))
        if b < t_out:
            t_out = b
            n_out = axis(k, sign64(d[k]))
    return t_in, t_out, n_in, n_out


@wp.func
def box_span(o: wp.vec3d, d: wp.vec3d, inv: wp.vec3d, lo: wp.vec3d, hi: wp.vec3d):
    """``(t_in, t_out)`` of :func:`box_interval` without the normals, with ``inv = 1 / d`` per component
    given (a multiplication per slab, not a division: the broad phase runs it for every slot)."""
    t_in = -inf64()
    t_out = inf64()
    for k in range(3):
        if d[k] == wp.float64(0.0):
            if o[k] < lo[k] or o[k] > hi[k]:
                return inf64(), -inf64()
        else:
            a = (lo[k] - o[k]) * inv[k]
            b = (hi[k] - o[k]) * inv[k]
            t_in = wp.max(t_in, wp.min(a, b))
            t_out = wp.min(t_out, wp.max(a, b))
    return t_in, t_out


@wp.func
def inverse(d: wp.vec3d):
    """``1 / d`` per component (0 where ``d`` is 0: :func:`box_span` does not read it there)."""
    inv = wp.vec3d()
    for k in range(3):
        if d[k] != wp.float64(0.0):
            inv[k] = wp.float64(1.0) / d[k]
    return inv


@wp.func
def ball_interval(o: wp.vec3d, d: wp.vec3d, centre: wp.vec3d, r: wp.float64):
    """The interval of the line ``o + t d`` (``d`` unit) through the ball of ``centre`` and radius ``r``,
    with outward normals. The discriminant is taken from the line's distance to the centre (no
    cancellation of ``b^2 - c`` for far origins)."""
    w = o - centre
    b = wp.dot(w, d)
    perp = w - d * b
    disc = r * r - wp.dot(perp, perp)
    if disc < wp.float64(0.0):
        return inf64(), -inf64(), wp.vec3d(), wp.vec3d()
    s = wp.sqrt(disc)
    t_in = -b - s
    t_out = -b + s
    n_in = unit_or(w + d * t_in, -d)
    n_out = unit_or(w + d * t_out, d)
    return t_in, t_out, n_in, n_out


@wp.func
def cylinder_interval(o: wp.vec3d, d: wp.vec3d, r: wp.float64, hz: wp.float64):
    """The interval of the line ``o + t d`` (``d`` unit) through the cylinder of radius ``r`` around z,
    ``|z| <= hz``, flat caps; outward normals (the side's radial one, or a cap's +-z)."""
    c_in = -inf64()
    c_out = inf64()
    a = d[0] * d[0] + d[1] * d[1]
    side_in = wp.vec3d()
    side_out = wp.vec3d()
    if a == wp.float64(0.0):
        if o[0] * o[0] + o[1] * o[1] > r * r:
            return inf64(), -inf64(), wp.vec3d(), wp.vec3d()
    else:
        t0 = -(o[0] * d[0] + o[1] * d[1]) / a
        px = o[0] + t0 * d[0]
        py = o[1] + t0 * d[1]
        disc = r * r - (px * px + py * py)
        if disc < wp.float64(0.0):
            return inf64(), -inf64(), wp.vec3d(), wp.vec3d()
        half = wp.sqrt(disc / a)
        c_in = t0 - half
        c_out = t0 + half
        flat = wp.vec3d(d[0], d[1], wp.float64(0.0))
        side_in = unit_or(wp.vec3d(o[0] + c_in * d[0], o[1] + c_in * d[1], wp.float64(0.0)), -flat)
        side_out = unit_or(wp.vec3d(o[0] + c_out * d[0], o[1] + c_out * d[1], wp.float64(0.0)), flat)
    z_in, z_out = slab(o[2], d[2], -hz, hz)
    t_in = c_in
    n_in = side_in
    if z_in > t_in:
        t_in = z_in
        n_in = axis(2, -sign64(d[2]))
    t_out = c_out
    n_out = side_out
    if z_out < t_out:
        t_out = z_out
        n_out = axis(2, sign64(d[2]))
    return t_in, t_out, n_in, n_out


@wp.func
def union(
    t_in: wp.float64,
    t_out: wp.float64,
    n_in: wp.vec3d,
    n_out: wp.vec3d,
    u_in: wp.float64,
    u_out: wp.float64,
    m_in: wp.vec3d,
    m_out: wp.vec3d,
):
    """The union of two overlapping intervals of the line (pieces of one convex solid); an empty one is
    skipped; ties keep the first's normals."""
    if not (u_in <= u_out):
        return t_in, t_out, n_in, n_out
    if not (t_in <= t_out):
        return u_in, u_out, m_in, m_out
    a = t_in
    na = n_in
    if u_in < a:
        a = u_in
        na = m_in
    b = t_out
    nb = n_out
    if u_out > b:
        b = u_out
        nb = m_out
    return a, b, na, nb


@wp.func
def capsule_interval(o: wp.vec3d, d: wp.vec3d, r: wp.float64, h: wp.float64):
    """The capsule of radius ``r`` around the segment ``|z| <= h`` of the z axis: its two balls and the
    cylinder between them (a cap of the cylinder lies inside the balls, so a ball's normal wins a tie)."""
    t_in, t_out, n_in, n_out = ball_interval(o, d, wp.vec3d(wp.float64(0.0), wp.float64(0.0), -h), r)
    u_in, u_out, m_in, m_out = ball_interval(o, d, wp.vec3d(wp.float64(0.0), wp.float64(0.0), h), r)
    t_in, t_out, n_in, n_out = union(t_in, t_out, n_in, n_out, u_in, u_out, m_in, m_out)
    u_in, u_out, m_in, m_out = cylinder_interval(o, d, r, h)
    return union(t_in, t_out, n_in, n_out, u_in, u_out, m_in, m_out)


@wp.func
def first_crossing(t_in: wp.float64, t_out: wp.float64, n_in: wp.vec3d, n_out: wp.vec3d):
    """``(hit, t, outward normal)``: the first crossing at ``t >= 0`` of a solid's surface by the ray whose
    line meets the solid in ``[t_in, t_out]``: the entry, or from inside the exit."""
    if not (t_in <= t_out) or t_out < wp.float64(0.0):
        return False, wp.float64(0.0), wp.vec3d()
    if t_in >= wp.float64(0.0):
        return True, t_in, n_in
    return True, t_out, n_out


@wp.func
def primitive_hit(kind: int, size: wp.vec3d, o: wp.vec3d, d: wp.vec3d):
    """A primitive of half-extents ``size`` (``warpgeo._constants.KIND_*``), in its own frame."""
    if kind == KIND_SPHERE:
        t_in, t_out, n_in, n_out = ball_interval(o, d, wp.vec3d(), size[0])
        return first_crossing(t_in, t_out, n_in, n_out)
    if kind == KIND_CAPSULE:
        t_in, t_out, n_in, n_out = capsule_interval(o, d, size[0], wp.max(size[2] - size[0], wp.float64(0.0)))
        return first_crossing(t_in, t_out, n_in, n_out)
    if kind == KIND_CYLINDER:
        t_in, t_out, n_in, n_out = cylinder_interval(o, d, size[0], size[2])
        return first_crossing(t_in, t_out, n_in, n_out)
    t_in, t_out, n_in, n_out = box_interval(o, d, -size, size)  # KIND_CUBOID
    return first_crossing(t_in, t_out, n_in, n_out)


@wp.func
def closed_form_hit(world: Any, e: int, m: int, o: wp.vec3d, d: wp.vec3d):
    """A closed-form slot: a primitive (``slot_kind``), or a mesh read as its box (``FLAG_BOX``)."""
    kind = world.slot_kind[e, m]
    if kind != KIND_MESH:
        return primitive_hit(kind, wp.vec3d(world.prim_size[e, m]), o, d)
    t_in, t_out, n_in, n_out = box_interval(
        o, d, wp.vec3d(world.bounds[e, m, 0]), wp.vec3d(world.bounds[e, m, 1])
    )
    return first_crossing(t_in, t_out, n_in, n_out)


@wp.func
def grid_hit(world: Any, e: int, m: int, o: wp.vec3d, d: wp.vec3d, reach: wp.float64):
    """A distance grid's slot (``KIND_GRID``, in its frame): sphere tracing on its trilinear distance from where
    the ray enters the box of its voxel centres (``bounds``) to where it leaves it (or ``reach``). The surface
    is the interpolant's zero level, and the box's faces where the grid is negative on them (the grid says
    nothing beyond its box): a ray from outside that enters the box where the grid is negative hits the box
    face; a ray starting where the grid is negative hits where it leaves (the interpolant's zero, or the
    box). The normal: the interpolant's gradient, made unit (the box face's on a face hit)."""
    none = wp.vec3d()
    t_in, t_out, n_in, n_out = box_interval(
        o, d, wp.vec3d(world.bounds[e, m, 0]), wp.vec3d(world.bounds[e, m, 1])
    )
    if not (t_in <= t_out) or t_out < wp.float64(0.0):
        return False, inf64(), none
    dims = world.voxel_dims[e, m]
    frame = world.voxel_frame[e, m]
    h = wp.float64(frame[3])
    origin = wp.vec3d(wp.float64(frame[0]), wp.float64(frame[1]), wp.float64(frame[2]))
    size = wp.vec3i(dims[0], dims[1], dims[2])
    tol = GRID_HIT_TOL * h
    t = wp.max(t_in, wp.float64(0.0))
    stop = wp.min(t_out, reach)
    v, g = grid_distance_at(world.voxel_values, dims[3], size, h, origin, o + t * d)
    inside = v < -tol
    if inside and t_in >= wp.float64(0.0):
        return True, t_in, n_in  # enters the box where the grid is solid: the box's face
    hit = bool(False)
    steps = int(0)
    while not hit and steps < GRID_MAX_STEPS:
        if wp.abs(v) <= tol or (inside and v > wp.float64(0.0)) or (not inside and v < wp.float64(0.0)):
            hit = True
        else:
            t = t + wp.max(wp.abs(v) / GRID_SLOPE, tol)
            if t > stop:
                steps = GRID_MAX_STEPS
            else:
                v, g = grid_distance_at(world.voxel_values, dims[3], size, h, origin, o + t * d)
                steps += 1
    if not hit and t <= stop and wp.abs(v) <= GRID_LAST_TOL * h:
        hit = True
    if hit:
        return True, t, unit_or(wp.vec3d(g), -d)
    if inside and t_out <= reach:
        return True, t_out, n_out  # solid up to the box's face where the ray leaves it
    return False, inf64(), none


@wp.func
def closed_or_grid_hit(world: Any, e: int, m: int, o: wp.vec3d, d: wp.vec3d, reach: wp.float64):
    """A slot read without a BVH: a distance grid (:func:`grid_hit`) or a closed form (:func:`closed_form_hit`)."""
    if world.slot_kind[e, m] == KIND_GRID:
        return grid_hit(world, e, m, o, d, reach)
    return closed_form_hit(world, e, m, o, d)


@wp.func
def mesh_hit(world: Any, e: int, m: int, o: wp.vec3d, d: wp.vec3d, reach: wp.float64):
    """A mesh slot: Warp's BVH ray query within ``reach``, started where the ray enters the mesh's box,
    then the distance on the found face's plane in float64 and its unit normal (outward by the winding)."""
    kind = world.slot_kind[e, m]
    if kind != KIND_MESH or (world.grid_flags[e, m] & FLAG_BOX) != 0:
        return closed_or_grid_hit(world, e, m, o, d, reach)
    lo = wp.vec3d(world.bounds[e, m, 0])
    hi = wp.vec3d(world.bounds[e, m, 1])
    size = wp.length(hi - lo)
    far = wp.max(wp.max(wp.abs(lo)), wp.max(wp.abs(hi)))
    pad = BOX_PAD_REL * (size + far) + BOX_PAD_ABS
    margin = wp.vec3d(pad, pad, pad)
    b_in, b_out = box_span(o, d, inverse(d), lo - margin, hi + margin)
    if not (b_in <= b_out) or b_out < wp.float64(0.0) or b_in > reach:
        return False, wp.float64(0.0), wp.vec3d()
    start_t = wp.max(b_in, wp.float64(0.0))
    start = o + d * start_t
    span = wp.min(b_out, reach + pad) - start_t + pad
    mesh = wp.uint64(world.mesh_ids[e, m])
    q = wp.mesh_query_ray(mesh, wp.vec3(start), wp.vec3(d), float(span))
    if not q.result:
        return False, wp.float64(0.0), wp.vec3d()
    t = start_t + wp.float64(q.t)
    face = q.face
    a = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 0))
    b = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 1))
    c = wp.vec3d(wp.mesh_get_point(mesh, face * 3 + 2))
    n = unit_or(wp.cross(b - a, c - a), wp.vec3d(q.normal))
    nd = wp.dot(n, d)
    if nd != wp.float64(0.0):
        refined = wp.dot(n, a - o) / nd
        if wp.isfinite(refined) and wp.abs(refined - t) <= REFINE_TOL * (size + far) + BOX_PAD_ABS:
            t = refined
    return True, wp.max(t, wp.float64(0.0)), n


@wp.func
def slot_hit(world: WORLD["float32", "meshes"], e: int, m: int, o: wp.vec3d, d: wp.vec3d, reach: wp.float64):
    """``(hit, t, n)`` of slot ``(e, m)`` in its frame (``n``: unit, outward), picked at compile time by the
    world's struct type: a world of closed forms only compiles no BVH query. One overload per key."""
    return mesh_hit(world, e, m, o, d, reach)


@wp.func
def slot_hit(  # noqa: F811 (a Warp overload, by the world's struct type)
    world: WORLD["float64", "meshes"], e: int, m: int, o: wp.vec3d, d: wp.vec3d, reach: wp.float64
):
    return mesh_hit(world, e, m, o, d, reach)


@wp.func
def slot_hit(  # noqa: F811 (a Warp overload, by the world's struct type)
    world: WORLD["float32", "cuboids"], e: int, m: int, o: wp.vec3d, d: wp.vec3d, reach: wp.float64
):
    return closed_or_grid_hit(world, e, m, o, d, reach)


@wp.func
def slot_hit(  # noqa: F811 (a Warp overload, by the world's struct type)
    world: WORLD["float64", "cuboids"], e: int, m: int, o: wp.vec3d, d: wp.vec3d, reach: wp.float64
):
    return closed_or_grid_hit(world, e, m, o, d, reach)


@wp.func
def world_box_interval(world: Any, e: int, m: int, o: wp.vec3d, d: wp.vec3d, inv: wp.vec3d):
    """The broad phase: the ray's interval through the posed box of slot ``(e, m)`` (``world_bounds``); the
    whole line where the world has no such entry (no test)."""
    wb = world.world_bounds
    if e >= wb.shape[0] or m >= wb.shape[1] or wb.shape[2] < 2:
        return -inf64(), inf64()
    return box_span(o, d, inv, wp.vec3d(wb[e, m, 0]), wp.vec3d(wb[e, m, 1]))


@wp.func
def cast(o: Any, u: Any, e: int, world: Any, max_distance: wp.float64):
    """``(slot, t, n)``: the first hit of the ray ``o + t u`` (``u`` unit, world frame, precision ``T``)
    over the enabled slots of environment ``e`` (-1: none) within ``max_distance``; ``n`` the unit normal
    facing the ray's origin, in the world frame; slot -1 on a miss."""
    best = inf64()
    found = int(-1)
    best_n = wp.vec3d()
    if e >= 0:
        ow = wp.vec3d(o)
        uw = wp.vec3d(u)
        inv = inverse(uw)
        for m in range(world.mesh_ids.shape[1]):
            if not slot_in_use(world, e, m):
                continue
            reach = wp.min(best, max_distance)
            b_in, b_out = world_box_interval(world, e, m, ow, uw, inv)
            if not (b_in <= b_out) or b_out < wp.float64(0.0) or b_in > reach:
                continue
            xf = world.inv_poses[e, m]
            ol = wp.vec3d(wp.transform_point(xf, o))
            ul = unit_or(wp.vec3d(wp.transform_vector(xf, u)), uw)
            hit, t, n = slot_hit(world, e, m, ol, ul, reach)
            if hit and t <= max_distance and t < best:
                best = t
                found = m
                # towards the origin's side, then back to the world (a rotation keeps the dot's sign)
                if wp.dot(n, ul) > wp.float64(0.0):
                    n = -n
                best_n = wp.vec3d(wp.quat_rotate_inv(wp.transform_get_rotation(xf), type(u)(n)))
    return found, best, best_n


@wp.func
def environment_box(world: Any, e: int):
    """``(test, any, lower, upper)``: the union of the posed boxes (``world_bounds``) of the slots in use in
    environment ``e``; ``any``: whether there is such a slot; ``test``: whether the box may be tested (not
    where ``world_bounds`` lacks the entries, nor where a bound is not finite)."""
    wb = world.world_bounds
    lower = wp.vec3d(inf64(), inf64(), inf64())
    upper = -lower
    found = bool(False)
    if e >= wb.shape[0] or wb.shape[1] < world.mesh_ids.shape[1] or wb.shape[2] < 2:
        return False, True, lower, upper
    for m in range(world.mesh_ids.shape[1]):
        if slot_in_use(world, e, m):
            found = True
            lower = wp.min(lower, wp.vec3d(wb[e, m, 0]))
            upper = wp.max(upper, wp.vec3d(wb[e, m, 1]))
    test = bool(found)
    for k in range(3):
        if not (wp.isfinite(lower[k]) and wp.isfinite(upper[k])):
            test = False
    return test, found, lower, upper


@wp.func
def misses_box(o: Any, u: Any, lower: wp.vec3d, upper: wp.vec3d, max_distance: wp.float64):
    """Whether the ray ``o + t u`` (``t`` in ``[0, max_distance]``) misses the box ``[lower, upper]``."""
    uw = wp.vec3d(u)
    b_in, b_out = box_span(wp.vec3d(o), uw, inverse(uw), lower, upper)
    return not (b_in <= b_out) or b_out < wp.float64(0.0) or b_in > max_distance


@wp.func
def unit_ray(d: Any):
    """``(ok, d / |d|)`` without overflow or underflow of the squares; not ok for a zero or non-finite ``d``."""
    m = wp.max(wp.max(wp.abs(d[0]), wp.abs(d[1])), wp.abs(d[2]))
    if not (m > type(m)(0.0)) or not wp.isfinite(m):
        return False, type(d)()
    w = d / m
    return True, w / wp.length(w)


# --------------------------------------------------------------------------------------------------------
# the kernel body (the table below makes a @wp.kernel of it per key)
# --------------------------------------------------------------------------------------------------------


def raycast(
    origins: wp.array2d(dtype=Any),
    directions: wp.array2d(dtype=Any),
    env_index: wp.array(dtype=wp.int64),
    world: Any,
    max_distance: Any,
    surface_eps: Any,
    distance: wp.array2d(dtype=Any),
    point: wp.array2d(dtype=Any),
    normal: wp.array2d(dtype=Any),
    entry: wp.array2d(dtype=wp.int64),
    per_thread: int,
    row_start: int,
):
    """Ray ``(b, s)``: ``origins[b, s] + t * directions[b, s] / |directions[b, s]|``, against environment
    ``env_index[b]`` (0 when empty). Writes ``distance`` (inf on a miss), ``point`` and ``normal`` (zeros on
    a miss) and ``entry`` (the slot, -1 on a miss). Thread ``t`` casts rays ``(row_start + t) * per_thread``
    onwards (``per_thread`` of them) of the flattened ``(B, S)`` grid. ``surface_eps`` (the world ops'
    common launch argument, ``_world_query.launch_query``) is not read."""
    rows = origins.shape[0] * origins.shape[1]
    if (
        directions.shape[0] != origins.shape[0]
        or directions.shape[1] != origins.shape[1]
        or distance.shape[0] != origins.shape[0]
        or distance.shape[1] != origins.shape[1]
        or point.shape[0] != origins.shape[0]
        or point.shape[1] != origins.shape[1]
        or normal.shape[0] != origins.shape[0]
        or normal.shape[1] != origins.shape[1]
        or entry.shape[0] != origins.shape[0]
        or entry.shape[1] != origins.shape[1]
    ):
        rows = 0
    first, stop = thread_rows(wp.tid() + row_start, per_thread, rows)
    bi, si = grid_index(first, stop, origins.shape[1])
    limit = wp.float64(max_distance)
    # a thread of several rays (the CPU's) first tests each ray against the union of its environment's
    # boxes, made once per environment it meets (rays of one environment come in a row): a ray that misses
    # it skips the environment's slots (32 environments x 10 objects, a 64 x 64 camera each: 38 -> 31 ms).
    # Not for one slot (its own box is the broad phase), nor on CUDA (a thread per ray: nothing to share).
    boxed = per_thread > 1 and world.mesh_ids.shape[1] > 1
    box_e = int(-1)
    box_test = bool(False)
    box_any = bool(True)
    box_lo = wp.vec3d()
    box_hi = wp.vec3d()
    for _flat in range(first, stop):
        o = origins[bi, si]
        ok, u = unit_ray(directions[bi, si])
        e = int(-1)
        if ok and wp.isfinite(o[0]) and wp.isfinite(o[1]) and wp.isfinite(o[2]):
            e = world_environment(bi, env_index, world)
        if boxed and e >= 0:
            if e != box_e:
                box_e = e
                box_test, box_any, box_lo, box_hi = environment_box(world, e)
            if not box_any or (box_test and misses_box(o, u, box_lo, box_hi, limit)):
                e = -1
        found, t, n = cast(o, u, e, world, limit)
        if found >= 0:
            distance[bi, si] = type(max_distance)(t)
            point[bi, si] = o + u * type(max_distance)(t)
            normal[bi, si] = type(o)(n)
        else:
            distance[bi, si] = type(max_distance)(wp.inf)
            point[bi, si] = type(o)()
            normal[bi, si] = type(o)()
        entry[bi, si] = wp.int64(found)
        si += 1
        if si == origins.shape[1]:
            si = 0
            bi += 1


#: Options of the ray-cast module: the torch glue writes the backward (no adjoints: half the build time).
OPTIONS = {"enable_backward": False}

_SCALARS = {"float32": (wp.float32, wp.vec3f), "float64": (wp.float64, wp.vec3d)}


def _types(key) -> dict:
    s, v3 = _SCALARS[key[0]]
    return {
        "world": WORLD[key],
        "origins": wp.array2d(dtype=v3),
        "directions": wp.array2d(dtype=v3),
        "max_distance": s,
        "surface_eps": s,
        "distance": wp.array2d(dtype=s),
        "point": wp.array2d(dtype=v3),
        "normal": wp.array2d(dtype=v3),
    }


#: The ray-cast kernel, per key alone in a Warp module (``..raycast_float32_meshes``, ...).
RAYCAST = KernelTable(f"{__name__}.raycast", (raycast,), {key: _types(key) for key in KEYS}, options=OPTIONS)
