"""Point-feature gather and its scatter-add backward.

Shapes: ``features`` / ``grad_features`` ``(B, C, N)``, ``idx`` ``(B, L)`` int32 (L = M or M * K),
``out`` / ``grad_out`` ``(B, C, L)``. An index outside ``[0, N)`` (``-1`` is the padding value) reads as 0
and scatters nothing; the host rejects other negative or too large values before launching, the kernels
only make sure a bad index can never touch memory.

Two shapes of work, chosen by the caller per device:

* ``*_rows``: one thread per ``(b, c)`` row (row ``r = row_start + tid``, ``b = r // C``, ``c = r % C``),
  looping over the row in order. On the CPU (where Warp runs the threads of a launch one after the other)
  this is a tight contiguous loop, and ``row_start`` lets the host split the rows among several launches
  that run in parallel. In the backward the thread owns its whole ``grad_features`` row, so no atomics are
  needed and the sum order is fixed (deterministic).
* ``*_elements`` / ``scatter_add_atomic`` / ``scatter_add_segments``: one thread per output element, for
  CUDA. ``scatter_add_atomic`` uses float atomics (fast; the summation order varies from run to run);
  ``scatter_add_segments`` gives each thread one ``grad_features[b, c, n]`` and sums its contributors in
  ascending ``l`` order from a CSR of the sorted indices (bit-identical run to run, and bit-identical to
  ``scatter_add_rows``).

The forward copies values, so it runs on bit patterns (int16 / int32 / int64 views of half, float32 and
float64 tensors): exact for every float dtype, bfloat16 included. The backward accumulates in float32
(half inputs, widened on the host) or float64.
"""

from typing import Any

import warp as wp

# warpgeo writes every backward itself: skip generating Warp's adjoints (halves the compile time).
wp.set_module_options({"enable_backward": False})

#: Indices handled per step of the CPU row loops (a constant-range loop Warp unrolls).
UNROLL = wp.constant(4)


@wp.func
def _valid(i: wp.int32, n: wp.int32) -> bool:
    return i >= 0 and i < n


@wp.func
def _gather_one(features: wp.array3d(dtype=Any), b: int, c: int, i: wp.int32, n: wp.int32, zero: Any):
    # branch-free: the clamped read is always in bounds (n > 0 here), the select drops it for padding
    v = features[b, c, wp.clamp(i, 0, n - 1)]
    return wp.where(_valid(i, n), v, zero)


@wp.kernel
def gather_rows(
    features: wp.array3d(dtype=Any),
    idx: wp.array2d(dtype=wp.int32),
    out: wp.array3d(dtype=Any),
    row_start: wp.int32,
):
    """Needs N > 0 (with N == 0 every index is padding: the host writes the zeros)."""
    r = wp.tid() + row_start
    b = r // features.shape[1]
    c = r % features.shape[1]
    n = features.shape[2]
    length = idx.shape[1]
    zero = out.dtype(0)
    l = int(0)  # a bare literal would be a constant to Warp, not a loop counter
    while l + UNROLL <= length:
        for u in range(UNROLL):
            out[b, c, l + u] = _gather_one(features, b, c, idx[b, l + u], n, zero)
        l += UNROLL
    while l < length:
        out[b, c, l] = _gather_one(features, b, c, idx[b, l], n, zero)
        l += 1


@wp.kernel
def gather_elements(
    features: wp.array3d(dtype=Any),
    idx: wp.array2d(dtype=wp.int32),
    out: wp.array3d(dtype=Any),
):
    b, c, l = wp.tid()
    i = idx[b, l]
    v = out.dtype(0)
    if _valid(i, features.shape[2]):
        v = features[b, c, i]
    out[b, c, l] = v


@wp.func
def _add_one(
    grad_out: wp.array3d(dtype=Any),
    idx: wp.array2d(dtype=wp.int32),
    grad_features: wp.array3d(dtype=Any),
    b: int,
    c: int,
    l: int,
    n: wp.int32,
):
    i = idx[b, l]
    if _valid(i, n):
        grad_features[b, c, i] = grad_features[b, c, i] + grad_out[b, c, l]


@wp.kernel
def scatter_add_rows(
    grad_out: wp.array3d(dtype=Any),
    idx: wp.array2d(dtype=wp.int32),
    grad_features: wp.array3d(dtype=Any),
    row_start: wp.int32,
):
    """Thread ``(b, c)`` owns row ``grad_features[b, c]`` and writes all of it.

    Zeroing the row here rather than on the host leaves it in cache for the scattered adds that follow.
    """
    r = wp.tid() + row_start
    b = r // grad_features.shape[1]
    c = r % grad_features.shape[1]
    n = grad_features.shape[2]
    zero = grad_features.dtype(0)
    i = int(0)  # a bare literal would be a constant to Warp, not a loop counter
    while i < n:
        grad_features[b, c, i] = zero
        i += 1
    length = idx.shape[1]
    l = int(0)  # a bare literal would be a constant to Warp, not a loop counter
    while l + UNROLL <= length:
        for u in range(UNROLL):
            _add_one(grad_out, idx, grad_features, b, c, l + u, n)
        l += UNROLL
    while l < length:
        _add_one(grad_out, idx, grad_features, b, c, l, n)
        l += 1


@wp.kernel
def scatter_add_atomic(
    grad_out: wp.array3d(dtype=Any),
    idx: wp.array2d(dtype=wp.int32),
    grad_features: wp.array3d(dtype=Any),
):
    """``grad_features`` must be zero on entry."""
    b, c, l = wp.tid()
    i = idx[b, l]
    if _valid(i, grad_features.shape[2]):
        wp.atomic_add(grad_features, b, c, i, grad_out[b, c, l])


@wp.kernel
def scatter_add_segments(
    grad_out: wp.array3d(dtype=Any),
    order: wp.array2d(dtype=wp.int32),
    offsets: wp.array2d(dtype=wp.int32),
    grad_features: wp.array3d(dtype=Any),
):
    """``order[b]`` lists ``l`` by ascending ``idx[b, l]`` (stable); ``order[b, offsets[b, n]:offsets[b, n+1]]``
    are the ``l`` with ``idx[b, l] == n``. Every element of ``grad_features`` is written."""
    b, c, n = wp.tid()
    acc = grad_features.dtype(0)
    for j in range(offsets[b, n], offsets[b, n + 1]):
        acc = acc + grad_out[b, c, order[b, j]]
    grad_features[b, c, n] = acc


# Explicit instances, keyed by dtype name, so that Warp builds the module once with all of them (an implicit
# instance created at launch time would rebuild it).
_BITS = {"int16": wp.int16, "int32": wp.int32, "int64": wp.int64}
_ACCUMULATORS = {"float32": wp.float32, "float64": wp.float64}
_INDEX = wp.array2d(dtype=wp.int32)


def _instances(kernel, scalars, index_arrays=1, row_start=False):
    table = {}
    for name, t in scalars.items():
        types = [wp.array3d(dtype=t)] + [_INDEX] * index_arrays + [wp.array3d(dtype=t)]
        if row_start:
            types.append(wp.int32)
        table[name] = wp.overload(kernel, types)
    return table


GATHER_ROWS = _instances(gather_rows, _BITS, row_start=True)
GATHER_ELEMENTS = _instances(gather_elements, _BITS)
SCATTER_ADD_ROWS = _instances(scatter_add_rows, _ACCUMULATORS, row_start=True)
SCATTER_ADD_ATOMIC = _instances(scatter_add_atomic, _ACCUMULATORS)
SCATTER_ADD_SEGMENTS = _instances(scatter_add_segments, _ACCUMULATORS, index_arrays=2)


# --------------------------------------------------------------------------------------------------------
# weighted gather: out[b, c, m] = sum_k weight[b, m, k] * features[b, c, idx[b, m, k]]
#
# ``features`` / ``weight`` / ``out`` and the gradients are in the compute precision (float32 or float64);
# ``idx`` and ``weight`` are ``(B, M, K)``. An index outside ``[0, N)`` contributes nothing.
# --------------------------------------------------------------------------------------------------------


@wp.func
def _weighted_sum(
    features: wp.array3d(dtype=Any),
    idx: wp.array3d(dtype=wp.int32),
    weight: wp.array3d(dtype=Any),
    b: int,
    c: int,
    m: int,
):
    n = features.shape[2]
    acc = features.dtype(0)
    for k in range(idx.shape[2]):
        i = idx[b, m, k]
        if _valid(i, n):
            acc = acc + weight[b, m, k] * features[b, c, i]
    return acc


@wp.kernel
def weighted_gather_rows(
    features: wp.array3d(dtype=Any),
    idx: wp.array3d(dtype=wp.int32),
    weight: wp.array3d(dtype=Any),
    out: wp.array3d(dtype=Any),
    row_start: wp.int32,
):
    """A thread per ``(b, c)`` row (the CPU kernel)."""
    r = wp.tid() + row_start
    b = r // features.shape[1]
    c = r % features.shape[1]
    for m in range(idx.shape[1]):
        out[b, c, m] = _weighted_sum(features, idx, weight, b, c, m)


@wp.kernel
def weighted_gather_elements(
    features: wp.array3d(dtype=Any),
    idx: wp.array3d(dtype=wp.int32),
    weight: wp.array3d(dtype=Any),
    out: wp.array3d(dtype=Any),
):
    """A thread per output element (the CUDA kernel)."""
    b, c, m = wp.tid()
    out[b, c, m] = _weighted_sum(features, idx, weight, b, c, m)


@wp.kernel
def weighted_scatter_rows(
    grad_out: wp.array3d(dtype=Any),
    idx: wp.array3d(dtype=wp.int32),
    weight: wp.array3d(dtype=Any),
    grad_features: wp.array3d(dtype=Any),
    row_start: wp.int32,
):
    """d/d(features), a thread per ``(b, c)`` row owning ``grad_features[b, c]`` (CPU; deterministic)."""
    r = wp.tid() + row_start
    b = r // grad_features.shape[1]
    c = r % grad_features.shape[1]
    n = grad_features.shape[2]
    zero = grad_features.dtype(0)
    for i in range(n):
        grad_features[b, c, i] = zero
    for m in range(idx.shape[1]):
        g = grad_out[b, c, m]
        for k in range(idx.shape[2]):
            i = idx[b, m, k]
            if _valid(i, n):
                grad_features[b, c, i] = grad_features[b, c, i] + g * weight[b, m, k]


@wp.kernel
def weighted_scatter_atomic(
    grad_out: wp.array3d(dtype=Any),
    idx: wp.array3d(dtype=wp.int32),
    weight: wp.array3d(dtype=Any),
    grad_features: wp.array3d(dtype=Any),
):
    """d/d(features), a thread per ``(b, c, m)`` with float atomics (CUDA); ``grad_features`` zeroed."""
    b, c, m = wp.tid()
    n = grad_features.shape[2]
    g = grad_out[b, c, m]
    for k in range(idx.shape[2]):
        i = idx[b, m, k]
        if _valid(i, n):
            wp.atomic_add(grad_features, b, c, i, g * weight[b, m, k])


@wp.kernel
def weighted_scatter_segments(
    grad_out: wp.array3d(dtype=Any),
    weight: wp.array3d(dtype=Any),
    order: wp.array2d(dtype=wp.int32),
    offsets: wp.array2d(dtype=wp.int32),
    grad_features: wp.array3d(dtype=Any),
):
    """d/d(features), a thread per ``(b, c, n)`` summing its contributors in flat ``l = m * K + k`` order
    through the CSR of the stably sorted flat indices (CUDA ``deterministic=True``)."""
    b, c, n = wp.tid()
    group = weight.shape[2]
    acc = grad_features.dtype(0)
    length = order.shape[1]
    for j in range(wp.clamp(int(offsets[b, n]), 0, length), wp.clamp(int(offsets[b, n + 1]), 0, length)):
        l = int(order[b, j])
        m = l // group
        acc = acc + grad_out[b, c, m] * weight[b, m, l - m * group]
    grad_features[b, c, n] = acc


@wp.kernel
def weighted_grad_weight_rows(
    grad_out: wp.array3d(dtype=Any),
    features: wp.array3d(dtype=Any),
    idx: wp.array3d(dtype=wp.int32),
    grad_weight: wp.array3d(dtype=Any),
    row_start: wp.int32,
):
    """d/d(weight): ``grad_weight[b, m, k] = sum_c grad_out[b, c, m] * features[b, c, idx[b, m, k]]``, a
    thread per ``(b, m)`` row (both devices: each output element is written by one thread)."""
    r = wp.tid() + row_start
    b = r // idx.shape[1]
    m = r % idx.shape[1]
    n = features.shape[2]
    for k in range(idx.shape[2]):
        i = idx[b, m, k]
        acc = grad_weight.dtype(0)
        if _valid(i, n):
            for c in range(features.shape[1]):
                acc = acc + grad_out[b, c, m] * features[b, c, i]
        grad_weight[b, m, k] = acc


_IDX3 = wp.array3d(dtype=wp.int32)


def _weighted(kernel, params, row_start=False):
    """Instances over the accumulators; ``params`` lists each parameter's kind: "f" a float array3d,
    "i" the (B, M, K) index, "o" an int32 array2d."""
    table = {}
    for name, t in _ACCUMULATORS.items():
        kinds = {"f": wp.array3d(dtype=t), "i": _IDX3, "o": _INDEX}
        types = [kinds[p] for p in params] + ([wp.int32] if row_start else [])
        table[name] = wp.overload(kernel, types)
    return table


WEIGHTED_GATHER_ROWS = _weighted(weighted_gather_rows, "fiff", row_start=True)
WEIGHTED_GATHER_ELEMENTS = _weighted(weighted_gather_elements, "fiff")
WEIGHTED_SCATTER_ROWS = _weighted(weighted_scatter_rows, "fiff", row_start=True)
WEIGHTED_SCATTER_ATOMIC = _weighted(weighted_scatter_atomic, "fiff")
WEIGHTED_SCATTER_SEGMENTS = _weighted(weighted_scatter_segments, "ffoof")
WEIGHTED_GRAD_WEIGHT_ROWS = _weighted(weighted_grad_weight_rows, "ffif", row_start=True)
