"""Robot self-collision (``warpgeo/self_collision.py``): the penetration of sphere pairs, per configuration.

A thread owns one configuration ``b`` (row ``b`` of ``spheres`` ``(B, S)``: x, y, z, radius) and loops over
the pairs in order, so nothing per pair is stored beyond the output itself (``REDUCE_NONE``). The
penetration of pair ``(i, j)`` is ``(r_i + m_i) + (r_j + m_j) - |c_i - c_j|`` with ``m`` the margin
(``margin_value`` plus ``margin[i]`` where ``margin`` holds a value per sphere). Skipped, contributing
nothing: a pair with an index outside ``[0, S)`` (``-1`` is padding), a pair ``(i, i)``, a pair with a
disabled sphere (negative radius; a NaN radius too, as it is not ``>= 0``). A NaN penetration never
compares above anything, so it contributes nothing either.

The backward kernel writes the whole gradient row of its configuration (zeros, then the pairs' terms in
pair order): no atomics, deterministic. At coincident centres the direction of ``c_i - c_j`` is taken as
``+x`` (``DIRECTION_X``): finite, the same on every device.

Pure Warp: no torch here. One table, ``SELF_COLLISION[(precision, index dtype)]``, one Warp module per key
holding the forward kernels of the three reductions and the backward.
"""

from typing import Any

import warp as wp

from warpgeo._kernels._table import KernelTable

#: Reductions (the torch side reads these numbers from here).
REDUCE_MAX = wp.constant(0)
REDUCE_SUM = wp.constant(1)
REDUCE_NONE = wp.constant(2)
#: "No pair" / "no sphere": a skipped index, and the arg-max of a configuration with no penetration.
NO_PAIR = wp.constant(-1)
#: Where a squared distance lies in [LOW, HIGH], no square of a coordinate difference overflowed and none
#: that matters lost precision to subnormals (float32 and float64 alike): its square root is the distance.
#: Outside, the difference is scaled by its largest coordinate first (exact at any finite scale).
SQUARE_LOW = wp.constant(2.0**-120)
SQUARE_HIGH = wp.constant(2.0**120)
#: The unit direction of ``c_i - c_j`` taken at coincident centres (x component; y and z are 0).
DIRECTION_X = wp.constant(1.0)

OPTIONS = {"enable_backward": False}


@wp.func
def norm3(dx: Any, dy: Any, dz: Any):
    """``sqrt(dx^2 + dy^2 + dz^2)`` without overflow or underflow of the squares at any finite scale."""
    d2 = dx * dx + dy * dy + dz * dz
    if d2 >= type(d2)(SQUARE_LOW) and d2 <= type(d2)(SQUARE_HIGH):
        return wp.sqrt(d2)
    m = wp.max(wp.max(wp.abs(dx), wp.abs(dy)), wp.abs(dz))
    if m == type(m)(0.0) or not wp.isfinite(m):
        return m
    sx = dx / m
    sy = dy / m
    sz = dz / m
    return m * wp.sqrt(sx * sx + sy * sy + sz * sz)


@wp.func
def grown_radius(radius: Any, margin: wp.array(dtype=Any), margin_value: Any, i: int):
    """A sphere's radius plus its margin: ``margin_value``, and ``margin[i]`` where there is one."""
    r = radius + margin_value
    if i < margin.shape[0]:
        r = r + margin[i]
    return r


@wp.func
def pair_spheres(pairs: wp.array(dtype=Any), p: int, count: int):
    """The two sphere indices of pair ``p`` (a vector of two int32 or int64), or ``NO_PAIR`` twice where it is
    skipped: an index outside ``[0, count)`` (``-1`` padding), a sphere paired with itself. Compared at 64
    bits before narrowing: an int64 of 2**32 + 5 is out of range, never sphere 5."""
    ij = pairs[p]
    a = wp.int64(ij[0])
    b = wp.int64(ij[1])
    n = wp.int64(count)
    i = int(NO_PAIR)
    j = int(NO_PAIR)
    if a >= wp.int64(0) and a < n and b >= wp.int64(0) and b < n and a != b:
        i = int(a)
        j = int(b)
    return i, j


@wp.func
def penetration(
    spheres: wp.array2d(dtype=Any),
    margin: wp.array(dtype=Any),
    margin_value: Any,
    b: int,
    i: int,
    j: int,
):
    """``(penetration, enabled)`` of spheres ``i`` and ``j`` (valid indices) in configuration ``b``."""
    a = spheres[b, i]
    c = spheres[b, j]
    zero = type(margin_value)(0.0)
    pen = zero
    enabled = False
    if a[3] >= zero and c[3] >= zero:
        enabled = True
        reach = grown_radius(a[3], margin, margin_value, i) + grown_radius(c[3], margin, margin_value, j)
        pen = reach - norm3(a[0] - c[0], a[1] - c[1], a[2] - c[2])
    return pen, enabled


def self_collision_max(
    spheres: wp.array2d(dtype=Any),
    pairs: wp.array(dtype=Any),
    margin: wp.array(dtype=Any),
    margin_value: Any,
    cost: wp.array(dtype=Any),
    arg: wp.array(dtype=wp.int32),
    row_start: int,
):
    """``cost[b]``: the largest penetration of configuration ``b``, at least 0; ``arg[b]``: its pair (the
    lowest index among equals), ``NO_PAIR`` where nothing penetrates."""
    b = wp.tid() + row_start
    if b < spheres.shape[0] and b < cost.shape[0] and b < arg.shape[0]:
        count = spheres.shape[1]
        best = type(margin_value)(0.0)
        best_pair = int(NO_PAIR)
        p = int(0)  # a bare literal would be a constant to Warp, not a loop counter
        while p < pairs.shape[0]:
            i, j = pair_spheres(pairs, p, count)
            if i >= 0:
                pen, enabled = penetration(spheres, margin, margin_value, b, i, j)
                if enabled and pen > best:  # strictly: the lowest pair keeps a tie
                    best = pen
                    best_pair = p
            p += 1
        cost[b] = best
        arg[b] = wp.int32(best_pair)


def self_collision_sum(
    spheres: wp.array2d(dtype=Any),
    pairs: wp.array(dtype=Any),
    margin: wp.array(dtype=Any),
    margin_value: Any,
    cost: wp.array(dtype=Any),
    row_start: int,
):
    """``cost[b]``: the sum of the positive penetrations of configuration ``b``, in pair order."""
    b = wp.tid() + row_start
    if b < spheres.shape[0] and b < cost.shape[0]:
        count = spheres.shape[1]
        zero = type(margin_value)(0.0)
        total = zero
        p = int(0)
        while p < pairs.shape[0]:
            i, j = pair_spheres(pairs, p, count)
            if i >= 0:
                pen, enabled = penetration(spheres, margin, margin_value, b, i, j)
                if enabled and pen > zero:
                    total = total + pen
            p += 1
        cost[b] = total


def self_collision_pairs(
    spheres: wp.array2d(dtype=Any),
    pairs: wp.array(dtype=Any),
    margin: wp.array(dtype=Any),
    margin_value: Any,
    costs: wp.array2d(dtype=Any),
    row_start: int,
):
    """``costs[b, p]``: the penetration of pair ``p`` in configuration ``b``, at least 0 (0 where skipped)."""
    b = wp.tid() + row_start
    if b < spheres.shape[0] and b < costs.shape[0]:
        count = spheres.shape[1]
        zero = type(margin_value)(0.0)
        width = costs.shape[1]
        p = int(0)
        while p < width:
            value = zero
            if p < pairs.shape[0]:
                i, j = pair_spheres(pairs, p, count)
                if i >= 0:
                    pen, enabled = penetration(spheres, margin, margin_value, b, i, j)
                    if enabled and pen > zero:
                        value = pen
            costs[b, p] = value
            p += 1


@wp.func
def add_pair_gradient(
    spheres: wp.array2d(dtype=Any),
    grad_spheres: wp.array2d(dtype=Any),
    b: int,
    i: int,
    j: int,
    weight: Any,
):
    """Add ``weight * d penetration / d spheres`` of pair ``(i, j)`` to row ``b`` of ``grad_spheres``:
    ``-weight * u`` to centre i, ``+weight * u`` to centre j, ``weight`` to both radii, with ``u`` the unit
    direction of ``c_i - c_j`` (``+x`` at coincident centres)."""
    a = spheres[b, i]
    c = spheres[b, j]
    dx = a[0] - c[0]
    dy = a[1] - c[1]
    dz = a[2] - c[2]
    d = norm3(dx, dy, dz)
    zero = type(weight)(0.0)
    ux = type(weight)(DIRECTION_X)
    uy = zero
    uz = zero
    if d > zero and wp.isfinite(d):
        ux = dx / d
        uy = dy / d
        uz = dz / d
    step = type(a)(weight * ux, weight * uy, weight * uz, weight)
    grad_spheres[b, i] = grad_spheres[b, i] + type(a)(-step[0], -step[1], -step[2], weight)
    grad_spheres[b, j] = grad_spheres[b, j] + step


def self_collision_backward(
    spheres: wp.array2d(dtype=Any),
    pairs: wp.array(dtype=Any),
    margin: wp.array(dtype=Any),
    margin_value: Any,
    grad_cost: wp.array2d(dtype=Any),
    arg: wp.array(dtype=wp.int32),
    mode: int,
    grad_spheres: wp.array2d(dtype=Any),
    row_start: int,
):
    """Row ``b`` of ``grad_spheres`` ``(B, S)``: ``d (sum of grad_cost * cost) / d spheres[b]``.

    ``grad_cost`` is ``(B, 1)`` for ``REDUCE_MAX`` / ``REDUCE_SUM`` and ``(B, P)`` for ``REDUCE_NONE``;
    ``arg`` ``(B,)`` (max only) the pair the forward chose. Only penetrations > 0 have a gradient (the
    clamp at 0), and only the chosen pair under max."""
    b = wp.tid() + row_start
    if b < grad_spheres.shape[0]:
        zero4 = grad_spheres.dtype()
        k = int(0)
        while k < grad_spheres.shape[1]:
            grad_spheres[b, k] = zero4
            k += 1
        if b < spheres.shape[0] and b < grad_cost.shape[0] and grad_cost.shape[1] >= 1:
            count = wp.min(spheres.shape[1], grad_spheres.shape[1])
            zero = type(margin_value)(0.0)
            if mode == REDUCE_MAX:
                if b < arg.shape[0]:
                    p = int(arg[b])
                    if p >= 0 and p < pairs.shape[0]:
                        i, j = pair_spheres(pairs, p, count)
                        if i >= 0:
                            pen, enabled = penetration(spheres, margin, margin_value, b, i, j)
                            if enabled:
                                add_pair_gradient(spheres, grad_spheres, b, i, j, grad_cost[b, 0])
            else:
                p = int(0)
                while p < pairs.shape[0]:
                    weight = zero
                    if mode == REDUCE_SUM:
                        weight = grad_cost[b, 0]
                    elif p < grad_cost.shape[1]:
                        weight = grad_cost[b, p]
                    i, j = pair_spheres(pairs, p, count)
                    if i >= 0:
                        pen, enabled = penetration(spheres, margin, margin_value, b, i, j)
                        if enabled and pen > zero:
                            add_pair_gradient(spheres, grad_spheres, b, i, j, weight)
                    p += 1


_PRECISIONS = {"float32": (wp.float32, wp.vec4f), "float64": (wp.float64, wp.vec4d)}
_INDICES = {"int32": wp.int32, "int64": wp.int64}


def _types(precision: str, index: str) -> dict:
    scalar, vec4 = _PRECISIONS[precision]
    return {
        "spheres": wp.array2d(dtype=vec4),
        "pairs": wp.array(dtype=wp.types.vector(2, _INDICES[index])),
        "margin": wp.array(dtype=scalar),
        "margin_value": scalar,
        "cost": wp.array(dtype=scalar),
        "costs": wp.array2d(dtype=scalar),
        "grad_cost": wp.array2d(dtype=scalar),
        "grad_spheres": wp.array2d(dtype=vec4),
    }


#: ``SELF_COLLISION[(precision, index dtype)].<kernel>``: precision "float32" (half inputs too) or "float64",
#: index dtype "int32" or "int64" (the pairs are read as they come: no copy per call).
SELF_COLLISION = KernelTable(
    f"{__name__}.self_collision",
    (self_collision_max, self_collision_sum, self_collision_pairs, self_collision_backward),
    {(p, i): _types(p, i) for p in _PRECISIONS for i in _INDICES},
    options=OPTIONS,
)
