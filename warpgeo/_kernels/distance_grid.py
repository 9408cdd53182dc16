"""Distance grids: the trilinear lookup, the exact Euclidean distance transform, depth-frame fusion.

Layout: a grid's values are ``(X, Y, Z)`` (x-major, z contiguous), voxel ``(i, j, k)`` centred at ``origin +
voxel_size * (i, j, k)``. Squared distances of the transform are integers in voxel units (int32 where the
grid's largest one fits, else int64: the table key), ``-1`` where a line (or the whole grid) holds no seed.

* :func:`grid_distance` (``@wp.func``): trilinear value and its exact gradient at a point, the distance to
  the grid's box outside it (what a world kernel calls per entry).
* The transform (Felzenszwalb & Huttenlocher's lower envelope of parabolas, separable, linear in voxels), per
  channel: ``edt_first`` (1-d distances along z, from an occupancy: two sweeps per line), ``edt_pass`` (y: the
  envelope of the previous pass's parabolas per line, rewritten in place) and ``edt_last`` (x, writing the
  distances where the channel applies). A pass reads ``(A, B, n)`` views whose last dimension is its axis
  (the host hands it permuted views: zero-copy), so one body serves every axis. Channel 0 takes the occupied
  voxels as seeds (the distance of free voxels), channel 1 (signed transforms) the free ones (the distance of
  occupied voxels). Intersections of parabolas are compared as exact fractions in int64 (``MAX_AXIS`` bounds
  the products), so the result is the exact squared distance.
* ``mark_points`` (voxels holding points); depth fusion: ``mark_blocks`` (a thread per tile of pixels marks the
  blocks of ``BLOCK**3`` voxels its readings' truncation band reaches, per frame), ``fuse_blocks`` (a thread
  per block integrates the frames that marked it into the TSDF) and ``tsdf_occupancy`` (observed voxels
  behind the surface).

Every size a kernel loops over comes from its own arrays' shapes; user values (a point's voxel, a pixel) are
bounds-checked before a read or write.
"""

from typing import Any

import warp as wp

from warpgeo._kernels._table import KernelTable

#: warpgeo writes every gradient itself.
OPTIONS = {"enable_backward": False}

#: The longest axis a transform takes: the envelope's fraction products stay below 2**63 (3 * 2**61).
MAX_AXIS = 2**20
#: A point within this many voxels outside a face of a grid's box reads as on the face (the interpolated
#: value there), not as outside: a voxel centre on the face, moved by a pose or an origin's rounding
#: (float32: ~1e-5 voxels at 2 m from the origin at 1 cm), keeps its value.
FACE_SLACK = wp.constant(1.0e-4)
#: "No seed on this line (in this grid)" in a squared-distance array.
NO_SEED = wp.constant(-1)


# --------------------------------------------------------------------------------------------------------
# the lookup
# --------------------------------------------------------------------------------------------------------


@wp.func
def _flat(i: int, j: int, k: int, dims: wp.vec3i) -> int:
    return (i * dims[1] + j) * dims[2] + k


@wp.func
def _cell(u: Any, n: int):
    """Lower corner index of the cell holding grid coordinate ``u`` (clamped to ``[0, n - 1]``, as ``n - 2``
    at the top so that the cell has two corners where ``n > 1``) and the upper one (``= lower`` when
    ``n == 1``)."""
    i0 = int(0)
    if u > type(u)(0.0):  # NaN: 0
        i0 = int(wp.min(wp.floor(u), type(u)(n - 1)))
    i0 = wp.max(wp.min(i0, n - 2), 0)
    i1 = wp.min(i0 + 1, n - 1)
    return i0, i1


@wp.func
def grid_distance(values: wp.array(dtype=Any), dims: wp.vec3i, voxel_size: Any, origin: Any, p: Any):
    """Signed distance of a grid at ``p`` and its gradient: ``(d, gradient)``; :func:`grid_distance_at` of
    the grid whose values start at row 0 of ``values``."""
    d, g = grid_distance_at(values, 0, dims, voxel_size, origin, p)
    return d, g


@wp.func
def grid_distance_at(
    values: wp.array(dtype=Any), first: int, dims: wp.vec3i, voxel_size: Any, origin: Any, p: Any
):
    """Signed distance of a grid at ``p`` and its gradient: ``(d, gradient)``, in the precision of
    ``voxel_size`` (the values are converted to it).

    ``values[first:]``: the grid's ``(X, Y, Z)`` values flattened (x-major), ``dims = (X, Y, Z)``, ``origin`` the
    centre of voxel ``(0, 0, 0)``, ``p`` in the grid's frame. Inside the box of the voxel centres
    (``origin .. origin + voxel_size * (dims - 1)``): the trilinear interpolation of the 8 voxels around ``p``
    and the exact gradient of that interpolant (in the cell with the lower index on a cell boundary; an axis
    of one voxel contributes nothing). Outside: ``|p - q|`` for ``q`` the box's closest point, with gradient
    ``(p - q) / |p - q|`` -- the distance to the box, a lower bound of the distance to anything the grid
    holds (the grid says nothing about space outside it); a point less than ``FACE_SLACK`` voxels out along
    an axis is taken on the face along it. Sizes are never trusted: ``first`` and ``dims`` that
    do not fit ``values`` (a negative ``first``, a size below 1, or more voxels than rows from ``first`` on)
    read no value (the box distance, 0 inside).
    """
    h = voxel_size
    one = type(h)(1.0)
    zero = type(h)(0.0)
    u = (p - origin) / h
    hi = type(p)(type(h)(dims[0] - 1), type(h)(dims[1] - 1), type(h)(dims[2] - 1))
    c = type(p)(wp.clamp(u[0], zero, hi[0]), wp.clamp(u[1], zero, hi[1]), wp.clamp(u[2], zero, hi[2]))
    # from the box's closest point, along the axes where p is out (not (u - c) * h: u overflows far out)
    edge = origin + c * h
    # within FACE_SLACK voxels of a face counts as on it (poses and origins round points off the box)
    slack = type(h)(FACE_SLACK)
    away = type(p)(
        wp.where(wp.abs(u[0] - c[0]) > slack, p[0] - edge[0], zero),
        wp.where(wp.abs(u[1] - c[1]) > slack, p[1] - edge[1], zero),
        wp.where(wp.abs(u[2] - c[2]) > slack, p[2] - edge[2], zero),
    )
    big = wp.max(wp.max(wp.abs(away[0]), wp.abs(away[1])), wp.abs(away[2]))
    if big > zero:  # |away| scaled: no overflow of the squares for a point far out
        unit = away / big
        norm = wp.length(unit)
        return big * norm, unit / norm
    fits = bool(False)
    if first >= 0 and dims[0] >= 1 and dims[1] >= 1 and dims[2] >= 1:
        count = wp.int64(dims[0]) * wp.int64(dims[1]) * wp.int64(dims[2])
        if count <= wp.int64(values.shape[0]) - wp.int64(first):
            fits = True
    if not fits:
        return zero, type(p)(zero, zero, zero)
    i0, i1 = _cell(c[0], dims[0])
    j0, j1 = _cell(c[1], dims[1])
    k0, k1 = _cell(c[2], dims[2])
    tx = wp.clamp(c[0] - type(h)(i0), zero, one)
    ty = wp.clamp(c[1] - type(h)(j0), zero, one)
    tz = wp.clamp(c[2] - type(h)(k0), zero, one)
    v000 = type(h)(values[first + _flat(i0, j0, k0, dims)])
    v001 = type(h)(values[first + _flat(i0, j0, k1, dims)])
    v010 = type(h)(values[first + _flat(i0, j1, k0, dims)])
    v011 = type(h)(values[first + _flat(i0, j1, k1, dims)])
    v100 = type(h)(values[first + _flat(i1, j0, k0, dims)])
    v101 = type(h)(values[first + _flat(i1, j0, k1, dims)])
    v110 = type(h)(values[first + _flat(i1, j1, k0, dims)])
    v111 = type(h)(values[first + _flat(i1, j1, k1, dims)])
    # along z, then y, then x
    a00 = v000 + tz * (v001 - v000)
    a01 = v010 + tz * (v011 - v010)
    a10 = v100 + tz * (v101 - v100)
    a11 = v110 + tz * (v111 - v110)
    b0 = a00 + ty * (a01 - a00)
    b1 = a10 + ty * (a11 - a10)
    d = b0 + tx * (b1 - b0)
    gx = (b1 - b0) / h
    gy = ((one - tx) * (a01 - a00) + tx * (a11 - a10)) / h
    dz0 = (one - ty) * (v001 - v000) + ty * (v011 - v010)
    dz1 = (one - ty) * (v101 - v100) + ty * (v111 - v110)
    gz = ((one - tx) * dz0 + tx * dz1) / h
    return d, type(p)(gx, gy, gz)


def grid_query(
    points: wp.array(dtype=Any),
    values: wp.array(dtype=Any),
    dims: wp.vec3i,
    voxel_size: Any,
    origin: Any,
    distance: wp.array(dtype=Any),
    gradient: wp.array(dtype=Any),
    row_start: int,
):
    """``distance[n], gradient[n] = grid_distance(..., points[n])`` (the standalone query)."""
    n = wp.tid() + row_start
    d, g = grid_distance(values, dims, voxel_size, origin, points[n])
    distance[n] = d
    gradient[n] = g


def _query_types(s, v3) -> dict:
    return {
        "points": wp.array(dtype=v3),
        "values": wp.array(dtype=s),
        "voxel_size": s,
        "origin": v3,
        "distance": wp.array(dtype=s),
        "gradient": wp.array(dtype=v3),
    }


#: ``QUERY[KEY[dtype]].grid_query``.
QUERY = KernelTable(
    f"{__name__}.query",
    (grid_query,),
    {"float32": _query_types(wp.float32, wp.vec3f), "float64": _query_types(wp.float64, wp.vec3d)},
    options=OPTIONS,
)


# --------------------------------------------------------------------------------------------------------
# the exact Euclidean distance transform
# --------------------------------------------------------------------------------------------------------

# Loops are ``while`` loops: Warp's dynamic ``for ... in range(n)`` compiles to a slower loop on the CPU.


@wp.func
def _is_seed(occupied: wp.uint8, channel: int) -> bool:
    """Channel 0's seeds are the occupied voxels, channel 1's the free ones."""
    return (occupied != wp.uint8(0)) == (channel == 0)


def edt_first(occupied: wp.array3d(dtype=wp.uint8), f: wp.array3d(dtype=Any), channel: int, row_start: int):
    """Squared 1-d distance along the last axis to the nearest seed of ``channel`` on the line (``NO_SEED``
    if none): ``occupied`` and ``f`` ``(A, B, n)``, a thread per line ``(a, b)``."""
    row = wp.tid() + row_start
    a = row // f.shape[1]
    b = row - a * f.shape[1]
    n = f.shape[2]
    last = int(-1)
    q = int(0)
    while q < n:
        if _is_seed(occupied[a, b, q], channel):
            last = q
        f[a, b, q] = f.dtype(wp.where(last >= 0, q - last, -1))
        q += 1
    following = int(-1)
    q = n - 1
    while q >= 0:
        if _is_seed(occupied[a, b, q], channel):
            following = q
        d = int(f[a, b, q])
        if following >= 0 and (d < 0 or following - q < d):
            d = following - q
        f[a, b, q] = f.dtype(wp.where(d >= 0, d * d, -1))
        q -= 1


@wp.func
def _envelope(
    f: wp.array3d(dtype=Any),
    a: int,
    b: int,
    v: wp.array2d(dtype=wp.int32),
    g: wp.array2d(dtype=wp.int64),
    slot: int,
) -> int:
    """The lower envelope of the line's parabolas ``f[q] + (x - q)**2`` (entries without a seed skipped):
    their positions ``v[slot, k]`` ascending and heights ``g[slot, k] = f[v] + v**2``; returns their count
    (0: no seed). A new parabola ``q`` drops the last one ``p`` (before it ``r``) while ``q`` meets ``p`` at
    or before ``p`` meets ``r``: ``s(q, p) <= s(p, r)`` with ``s(x, y) = (g_x - g_y) / (2 (x - y))``,
    compared as exact fractions (int64; ``MAX_AXIS`` keeps the products in range)."""
    n = f.shape[2]
    k = int(-1)
    q = int(0)
    while q < n:
        fq = wp.int64(f[a, b, q])
        if fq >= wp.int64(0):
            gq = fq + wp.int64(q) * wp.int64(q)
            while k > 0:
                p = wp.int64(v[slot, k])
                r = wp.int64(v[slot, k - 1])
                gp = g[slot, k]
                if (gq - gp) * (p - r) <= (gp - g[slot, k - 1]) * (wp.int64(q) - p):
                    k -= 1
                else:
                    break
            k += 1
            v[slot, k] = wp.int32(q)
            g[slot, k] = gq
        q += 1
    return k + 1


@wp.func
def _lowest(
    v: wp.array2d(dtype=wp.int32), g: wp.array2d(dtype=wp.int64), slot: int, k: int, count: int, q: int
):
    """The envelope's parabola at ``q`` (``q`` ascending, from ``k``): move on while the next one meets the
    current one before ``q`` (``s(next, k) < q``, exactly); returns ``(k, squared distance at q)``."""
    wq = wp.int64(q)
    while k + 1 < count:
        if g[slot, k + 1] - g[slot, k] < wq * wp.int64(2) * wp.int64(v[slot, k + 1] - v[slot, k]):
            k += 1
        else:
            break
    p = wp.int64(v[slot, k])
    return k, g[slot, k] - wp.int64(2) * wq * p + wq * wq


def edt_pass(
    f: wp.array3d(dtype=Any),
    v: wp.array2d(dtype=wp.int32),
    g: wp.array2d(dtype=wp.int64),
    lines_per_thread: int,
    row_start: int,
):
    """One axis, in place: ``f[q] <- min over p of f[p] + (q - p)**2`` along each line (the last axis of the
    ``(A, B, n)`` view), ``NO_SEED`` on a line without one. Thread ``t`` takes lines ``t * L .. t * L + L -
    1`` (``L = lines_per_thread``, consecutive ``b``: the CPU's cache lines serve several) with scratch row
    ``t`` of ``v`` / ``g`` (``(threads, n)``): the envelope is read out of the line before it is rewritten."""
    slot = wp.tid() + row_start
    lines = f.shape[0] * f.shape[1]
    n = f.shape[2]
    if slot >= wp.min(v.shape[0], g.shape[0]) or wp.min(v.shape[1], g.shape[1]) < n:
        return  # scratch too small (the host sizes it: never)
    line = slot * lines_per_thread
    stop = wp.min(line + lines_per_thread, lines)
    while line < stop:
        a = line // f.shape[1]
        b = line - a * f.shape[1]
        count = _envelope(f, a, b, v, g, slot)
        k = int(0)
        q = int(0)
        while q < n:
            d2 = wp.int64(NO_SEED)
            if count > 0:
                k, d2 = _lowest(v, g, slot, k, count, q)
            f[a, b, q] = f.dtype(d2)
            q += 1
        line += 1


@wp.func
def _box_steps(q: int, n: int, a: int, na: int, b: int, nb: int) -> int:
    """Voxel steps from ``(a, b, q)`` to the nearest position just outside the grid (a grid with no seed)."""
    return wp.min(wp.min(wp.min(q + 1, n - q), wp.min(a + 1, na - a)), wp.min(b + 1, nb - b))


def edt_last(
    f: wp.array3d(dtype=Any),
    occupied: wp.array3d(dtype=wp.uint8),
    tsdf: wp.array3d(dtype=wp.float32),
    values: wp.array3d(dtype=Any),
    v: wp.array2d(dtype=wp.int32),
    g: wp.array2d(dtype=wp.int64),
    channel: int,
    is_signed: int,
    lines_per_thread: int,
    voxel_size: Any,
    offset: Any,
    truncation: Any,
    row_start: int,
):
    """The last axis (lines as ``edt_pass``), writing ``values`` (``(A, B, n)`` views like ``f`` and
    ``occupied``) where ``channel`` applies: channel 0 at free voxels, ``+voxel_size * (sqrt(d2) - offset)``,
    channel 1 at occupied ones, the negative (``is_signed == 0``: channel 0 everywhere, unsigned). A voxel whose
    channel has no seed in the whole grid gets the voxel steps to just outside the grid for ``sqrt(d2)``.
    ``tsdf`` (``(0, 0, 0)``, or the views' shape: a fused grid) refines voxels next to the other side
    (``d2 == 1``): their TSDF distance ``tsdf * truncation`` clamped to ``[0, voxel_size]`` (channel 0) or
    ``[-voxel_size, 0]`` (channel 1)."""
    slot = wp.tid() + row_start
    lines = f.shape[0] * f.shape[1]
    n = f.shape[2]
    if slot >= wp.min(v.shape[0], g.shape[0]) or wp.min(v.shape[1], g.shape[1]) < n:
        return  # scratch too small (the host sizes it: never)
    fused = tsdf.shape[0] == values.shape[0] and tsdf.shape[1] == values.shape[1] and tsdf.shape[2] == n
    h = voxel_size
    zero = type(h)(0.0)
    line = slot * lines_per_thread
    stop = wp.min(line + lines_per_thread, lines)
    while line < stop:
        a = line // f.shape[1]
        b = line - a * f.shape[1]
        count = _envelope(f, a, b, v, g, slot)
        k = int(0)
        q = int(0)
        while q < n:
            applies = bool(True)
            if is_signed != 0:
                applies = (occupied[a, b, q] != wp.uint8(0)) == (channel == 1)
            if applies:
                d2 = wp.int64(NO_SEED)
                if count > 0:
                    k, d2 = _lowest(v, g, slot, k, count, q)
                steps = zero
                if d2 < wp.int64(0):
                    steps = type(h)(_box_steps(q, n, a, f.shape[0], b, f.shape[1]))
                else:
                    steps = wp.sqrt(type(h)(d2))
                d = h * wp.max(steps - offset, zero)
                if fused and d2 == wp.int64(1):
                    d = wp.clamp(type(h)(tsdf[a, b, q]) * truncation, zero, h)
                    if channel == 1:
                        d = -wp.clamp(-type(h)(tsdf[a, b, q]) * truncation, zero, h)
                elif channel == 1:
                    d = -d
                values[a, b, q] = d
            q += 1
        line += 1


def _edt_types(i, s) -> dict:
    return {
        "f": wp.array3d(dtype=i),
        "values": wp.array3d(dtype=s),
        "voxel_size": s,
        "offset": s,
        "truncation": s,
    }


#: ``EDT[(distance int, value float)]``: ``edt_first``, ``edt_pass``, ``edt_last``; the int is ``"int32"``
#: where the grid's largest squared distance fits, else ``"int64"``.
EDT = KernelTable(
    f"{__name__}.edt",
    (edt_first, edt_pass, edt_last),
    {
        (i, s): _edt_types(ti, ts)
        for i, ti in (("int32", wp.int32), ("int64", wp.int64))
        for s, ts in (("float32", wp.float32), ("float64", wp.float64))
    },
    options=OPTIONS,
)


# --------------------------------------------------------------------------------------------------------
# seeds from points and from a TSDF
# --------------------------------------------------------------------------------------------------------


@wp.func
def _voxel_of(u: Any, n: int) -> int:
    """The voxel whose centre is nearest grid coordinate ``u`` (``floor(u + 1/2)``), -1 outside ``[0, n)``
    (NaN included)."""
    half = type(u)(0.5)
    i = int(-1)
    if u >= -half and u < type(u)(n) - half:
        i = wp.min(int(wp.floor(u + half)), n - 1)
    return i


def mark_points(
    points: wp.array(dtype=Any),
    origin: Any,
    voxel_size: Any,
    occupied: wp.array3d(dtype=wp.uint8),
    row_start: int,
):
    """``occupied[voxel of points[n]] = 1`` (points outside the grid mark nothing). Threads that mark one
    voxel write the same byte: no atomics needed."""
    n = wp.tid() + row_start
    u = (points[n] - origin) / voxel_size
    i = _voxel_of(u[0], occupied.shape[0])
    j = _voxel_of(u[1], occupied.shape[1])
    k = _voxel_of(u[2], occupied.shape[2])
    if i >= 0 and j >= 0 and k >= 0:
        occupied[i, j, k] = wp.uint8(1)


#: ``MARK[KEY[dtype]].mark_points``.
MARK = KernelTable(
    f"{__name__}.mark",
    (mark_points,),
    {
        "float32": {"points": wp.array(dtype=wp.vec3f), "origin": wp.vec3f, "voxel_size": wp.float32},
        "float64": {"points": wp.array(dtype=wp.vec3d), "origin": wp.vec3d, "voxel_size": wp.float64},
    },
    options=OPTIONS,
)


# --------------------------------------------------------------------------------------------------------
# depth fusion
# --------------------------------------------------------------------------------------------------------

#: Voxels per side of a block: the unit the integration skips (a block no reading's band reaches).
BLOCK = wp.constant(4)


@wp.func
def _rotation(pose: wp.array2d(dtype=wp.float32), f: int) -> wp.quatf:
    """Frame ``f``'s world-from-camera rotation (``pose[f] = [x, y, z, qw, qx, qy, qz]``), normalised (the
    host checks it is a unit quaternion)."""
    q = wp.quatf(pose[f, 4], pose[f, 5], pose[f, 6], pose[f, 3])
    norm = wp.length(q)
    if norm > wp.float32(0.0):
        q = q / norm
    return q


@wp.func
def _valid(reading: wp.float32, max_range: wp.float32) -> bool:
    return reading > wp.float32(0.0) and reading <= max_range  # NaN: neither


@wp.func
def _corner(m: wp.mat33f, u: wp.float32, v: wp.float32, z: wp.float32) -> wp.vec3f:
    """The camera-frame point at z-depth ``z`` that projects to pixel coordinates ``(u, v)``."""
    y = (v - m[1, 2]) * z / m[1, 1]
    return wp.vec3f(((u - m[0, 2]) * z - m[0, 1] * y) / m[0, 0], y, z)


@wp.func
def _block_of(x: wp.float32, origin: wp.float32, h: wp.float32, n: int) -> int:
    """The block (along one axis) of the voxel centre nearest ``x``, clamped to ``[0, ceil(n / BLOCK))``
    (NaN: 0)."""
    i = wp.clamp((x - origin) / h, wp.float32(-1.0), wp.float32(n))
    k = int(0)
    if i > wp.float32(0.0):
        k = wp.min(int(i), n - 1)
    return k // BLOCK


@wp.func
def _mark_box(
    lo: wp.vec3f,
    hi: wp.vec3f,
    origin: wp.vec3f,
    h: wp.float32,
    dims: wp.vec3i,
    active: wp.array4d(dtype=wp.uint8),
    f: int,
):
    """Mark the blocks holding voxel centres in the box ``[lo, hi]`` grown by half a voxel."""
    half = wp.float32(0.5)
    grow = wp.vec3f(half * h, half * h, half * h)
    lo = lo - grow
    hi = hi + grow
    top = origin + wp.vec3f(wp.float32(dims[0] - 1), wp.float32(dims[1] - 1), wp.float32(dims[2] - 1)) * h
    if hi[0] < origin[0] or hi[1] < origin[1] or hi[2] < origin[2]:
        return  # beside the grid (_block_of would clamp it to an edge block)
    if lo[0] > top[0] or lo[1] > top[1] or lo[2] > top[2]:
        return
    bx1 = wp.min(_block_of(hi[0], origin[0], h, dims[0]), active.shape[1] - 1)
    by1 = wp.min(_block_of(hi[1], origin[1], h, dims[1]), active.shape[2] - 1)
    bz1 = wp.min(_block_of(hi[2], origin[2], h, dims[2]), active.shape[3] - 1)
    bx = _block_of(lo[0], origin[0], h, dims[0])
    while bx <= bx1:
        by = _block_of(lo[1], origin[1], h, dims[1])
        while by <= by1:
            bz = _block_of(lo[2], origin[2], h, dims[2])
            while bz <= bz1:
                active[f, bx, by, bz] = wp.uint8(1)
                bz += 1
            by += 1
        bx += 1


@wp.func
def _mark_piece(
    m: wp.mat33f,
    q: wp.quatf,
    t: wp.vec3f,
    u0: wp.float32,
    u1: wp.float32,
    v0: wp.float32,
    v1: wp.float32,
    z0: wp.float32,
    z1: wp.float32,
    origin: wp.vec3f,
    h: wp.float32,
    dims: wp.vec3i,
    active: wp.array4d(dtype=wp.uint8),
    f: int,
):
    """Mark the blocks of the piece of view frustum over pixel coordinates ``[u0, u1] x [v0, v1]`` between
    z-depths ``z0`` and ``z1``: in slices of a block's depth, the box of each slice's 8 corners (world
    frame; a corner at depth ``z`` is ``t + z * d`` for its ray ``d``), grown by half a voxel. Slices keep
    the boxes of an oblique piece close to it."""
    one = wp.float32(1.0)
    d00 = wp.quat_rotate(q, _corner(m, u0, v0, one))
    d01 = wp.quat_rotate(q, _corner(m, u0, v1, one))
    d10 = wp.quat_rotate(q, _corner(m, u1, v0, one))
    d11 = wp.quat_rotate(q, _corner(m, u1, v1, one))
    step = wp.float32(BLOCK) * h
    za = z0
    while za < z1:
        zb = wp.min(za + step, z1)
        lo = wp.min(
            wp.min(wp.min(d00 * za, d01 * za), wp.min(d10 * za, d11 * za)),
            wp.min(wp.min(d00 * zb, d01 * zb), wp.min(d10 * zb, d11 * zb)),
        )
        hi = wp.max(
            wp.max(wp.max(d00 * za, d01 * za), wp.max(d10 * za, d11 * za)),
            wp.max(wp.max(d00 * zb, d01 * zb), wp.max(d10 * zb, d11 * zb)),
        )
        _mark_box(lo + t, hi + t, origin, h, dims, active, f)
        if not (zb > za):  # no progress (huge depths): stop
            break
        za = zb


def mark_blocks(
    depth: wp.array3d(dtype=wp.float32),
    intrinsics: wp.array(dtype=wp.mat33f),
    pose: wp.array2d(dtype=wp.float32),
    active: wp.array4d(dtype=wp.uint8),
    origin: wp.vec3f,
    voxel_size: wp.float32,
    truncation: wp.float32,
    max_range: wp.float32,
    tile: int,
    dims: wp.vec3i,
    row_start: int,
):
    """A thread per ``tile x tile`` pixels of a frame: marks ``active[f, block] = 1`` for every block that
    its readings' truncation bands reach. The readings are taken in clusters (from the nearest one left,
    those within ``2 truncation`` of it: usually all of them); a cluster ``[r0, r1]`` marks the box around
    the piece of the tile's view frustum between z-depths ``r0 - truncation`` and ``r1 + truncation``. A voxel whose
    nearest pixel lies in the tile and whose depth is within the truncation of that pixel's reading lies in
    one of these pieces, so its block is marked. Threads marking one block write the same byte."""
    row = wp.tid() + row_start
    height = depth.shape[1]
    width = depth.shape[2]
    tiles_x = (width + tile - 1) // tile
    tiles_y = (height + tile - 1) // tile
    f = row // (tiles_x * tiles_y)
    rest = row - f * tiles_x * tiles_y
    ty = rest // tiles_x
    tx = rest - ty * tiles_x
    c0 = tx * tile
    r0 = ty * tile
    c1 = wp.min(c0 + tile, width)
    r1 = wp.min(r0 + tile, height)
    if f >= wp.min(wp.min(intrinsics.shape[0], pose.shape[0]), active.shape[0]):
        return
    m = intrinsics[f]
    q = _rotation(pose, f)
    t = wp.vec3f(pose[f, 0], pose[f, 1], pose[f, 2])
    half = wp.float32(0.5)
    u0 = wp.float32(c0) - half
    u1 = wp.float32(c1) - half
    v0 = wp.float32(r0) - half
    v1 = wp.float32(r1) - half
    width_band = wp.float32(2.0) * truncation  # a cluster's depth range
    done = wp.float32(-1.0)  # readings up to here are covered
    while True:
        near = max_range
        far = wp.float32(0.0)
        found = bool(False)
        r = r0
        while r < r1:
            c = c0
            while c < c1:
                reading = depth[f, r, c]
                if _valid(reading, max_range) and reading > done:
                    near = wp.min(near, reading)
                    far = wp.max(far, reading)
                    found = True
                c += 1
            r += 1
        if not found:
            return
        top = wp.min(far, near + width_band)  # this cluster: the readings in [near, top]
        _mark_piece(
            m,
            q,
            t,
            u0,
            u1,
            v0,
            v1,
            wp.max(near - truncation, wp.float32(0.0)),
            top + truncation,
            origin,
            voxel_size,
            dims,
            active,
            f,
        )
        if top >= far or not (top > done):  # all covered (or no progress: a huge reading)
            return
        done = top


def fuse_blocks(
    tsdf: wp.array3d(dtype=wp.float32),
    weight: wp.array3d(dtype=wp.float32),
    depth: wp.array3d(dtype=wp.float32),
    intrinsics: wp.array(dtype=wp.mat33f),
    pose: wp.array2d(dtype=wp.float32),
    active: wp.array4d(dtype=wp.uint8),
    blocks: wp.array(dtype=wp.int32),
    origin: wp.vec3f,
    voxel_size: wp.float32,
    truncation: wp.float32,
    max_range: wp.float32,
    row_start: int,
):
    """A thread per block of ``BLOCK**3`` voxels (row ``t`` takes block ``blocks[t]``, flat over ``active``'s
    ``(nbx, nby, nbz)``, or block ``t`` where ``blocks`` is empty: every block), frames in order, for the
    frames that marked it: each voxel
    centre is projected into the frame (pinhole, pixel centres at integer coordinates, nearest pixel); a
    reading ``D`` (finite, ``0 < D <= max_range``) within the truncation of the voxel's depth ``z`` (``|D -
    z| <= truncation``) takes ``(D - z) / truncation`` into the voxel's running mean, its weight + 1."""
    row = wp.tid() + row_start
    nbx = active.shape[1]
    nby = active.shape[2]
    nbz = active.shape[3]
    if blocks.shape[0] > 0:
        row = int(blocks[wp.min(row, blocks.shape[0] - 1)])
        if row < 0 or row >= nbx * nby * nbz:
            return
    bx = row // (nby * nbz)
    rest = row - bx * nby * nbz
    by = rest // nbz
    bz = rest - by * nbz
    nx = tsdf.shape[0]
    ny = tsdf.shape[1]
    nz = tsdf.shape[2]
    if (
        nbx != (nx + BLOCK - 1) // BLOCK
        or nby != (ny + BLOCK - 1) // BLOCK
        or nbz != (nz + BLOCK - 1) // BLOCK
    ):
        return
    frames = wp.min(wp.min(depth.shape[0], intrinsics.shape[0]), wp.min(pose.shape[0], active.shape[0]))
    height = depth.shape[1]
    width = depth.shape[2]
    zero = wp.float32(0.0)
    one = wp.float32(1.0)
    half = wp.float32(0.5)
    h = voxel_size
    x0 = bx * BLOCK
    y0 = by * BLOCK
    z0 = bz * BLOCK
    corner = origin + wp.vec3f(wp.float32(x0) * h, wp.float32(y0) * h, wp.float32(z0) * h)
    f = int(0)
    while f < frames:
        if active[f, bx, by, bz] != wp.uint8(0):
            m = intrinsics[f]
            q = _rotation(pose, f)
            start = wp.quat_rotate_inv(q, corner - wp.vec3f(pose[f, 0], pose[f, 1], pose[f, 2]))
            sx = wp.quat_rotate_inv(q, wp.vec3f(h, zero, zero))
            sy = wp.quat_rotate_inv(q, wp.vec3f(zero, h, zero))
            sz = wp.quat_rotate_inv(q, wp.vec3f(zero, zero, h))
            x = x0
            while x < wp.min(x0 + BLOCK, nx):
                y = y0
                while y < wp.min(y0 + BLOCK, ny):
                    line = start + wp.float32(x - x0) * sx + wp.float32(y - y0) * sy
                    z = z0
                    while z < wp.min(z0 + BLOCK, nz):
                        pc = line + wp.float32(z - z0) * sz
                        if pc[2] > zero:
                            inv = one / pc[2]
                            u = (m[0, 0] * pc[0] + m[0, 1] * pc[1]) * inv + m[0, 2]
                            w = m[1, 1] * pc[1] * inv + m[1, 2]
                            if (
                                u >= -half
                                and w >= -half
                                and u < wp.float32(width) - half
                                and w < wp.float32(height) - half
                            ):
                                col = wp.min(int(wp.floor(u + half)), width - 1)
                                r = wp.min(int(wp.floor(w + half)), height - 1)
                                reading = depth[f, r, col]
                                if _valid(reading, max_range):
                                    sdf = reading - pc[2]
                                    if sdf >= -truncation and sdf <= truncation:
                                        old = weight[x, y, z]
                                        total = old + one
                                        tsdf[x, y, z] = (tsdf[x, y, z] * old + sdf / truncation) / total
                                        weight[x, y, z] = total
                        z += 1
                    y += 1
                x += 1
        f += 1


def tsdf_occupancy(
    tsdf: wp.array3d(dtype=wp.float32),
    weight: wp.array3d(dtype=wp.float32),
    occupied: wp.array3d(dtype=wp.uint8),
):
    """Observed voxels behind the surface (``weight > 0`` and ``tsdf < 0``) are occupied; the rest (in front
    of it, or never observed) free."""
    i, j, k = wp.tid()
    inside = wp.uint8(0)
    if weight[i, j, k] > wp.float32(0.0) and tsdf[i, j, k] < wp.float32(0.0):
        inside = wp.uint8(1)
    occupied[i, j, k] = inside


#: ``FUSION["float32"]``: ``mark_blocks``, ``fuse_blocks``, ``tsdf_occupancy`` (the TSDF is float32).
FUSION = KernelTable(
    f"{__name__}.fusion", (mark_blocks, fuse_blocks, tsdf_occupancy), {"float32": {}}, options=OPTIONS
)
