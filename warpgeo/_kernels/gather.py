"""Point-feature gather and its scatter-add backward, plain and weighted.

Shapes: ``features`` / ``grad_features`` ``(B, C, N)``, ``idx`` ``(B, L)`` (L = M or M * K), ``out`` /
``grad_out`` ``(B, C, L)``. An index outside ``[0, N)`` (``-1`` is the padding value; an int64 index is
compared before it is narrowed) reads as 0 and scatters nothing; the host rejects other negative or too large
values before launching, the kernels only make sure a bad index can never touch memory.

Two shapes of work, chosen by the caller per device (``warpgeo/gather.py``):

* ``*_rows`` (the CPU kernels, launched over the rows ``(b, c)`` of ``(B, C)``, or ``(b, m)`` for the
  weights' gradient, by ``_launch.launch_blocks``): ``gather_rows`` gives a thread ``CHANNELS_PER_ROW``
  consecutive rows and, where they share a batch entry, reads each index once for all of them;
  ``scatter_add_rows`` gives a thread one row. Each loops over the index row in order. On the CPU (where Warp
  runs the threads of a launch one after the other) this is a tight contiguous loop, and ``row_start`` lets
  the host split the rows among several launches that run in parallel. The arrays' last dimension must be
  dense (the rows are indexed without a stride). The forward first streams the features rows into the cache
  when it will read most of them anyway (``TOUCH_*``). In the backward the thread owns its whole
  ``grad_features`` row, so no atomics are needed and the sum order is fixed (deterministic). A launch may
  cover a block of the rows: a kernel finds a row's ``(b, c)`` from the shapes of the arrays it is given.
* ``*_elements`` / ``*_atomic`` / ``*_segments``: one thread per output element, for CUDA, launched as a
  3-d grid ``(b, c, l)``. The ``(B, L)`` / ``(B, M, K)`` index (and weight) arrays arrive broadcast along C
  (stride 0), so that every array a grid of a block touches is sliced like the grid. ``*_atomic`` uses float
  atomics (fast; the summation order varies from run to run); ``*_segments`` gives each thread one
  ``grad_features[b, c, n]`` and sums its contributors in ascending ``l`` order from a CSR of the sorted
  indices (bit-identical run to run, and bit-identical to ``scatter_add_rows``).

The forward copies values, so it runs on bit patterns (int16 / int32 / int64 views of half, float32 and
float64 tensors): exact for every float dtype, bfloat16 included. The backward accumulates in float32 (half
inputs, widened on the host) or float64. The weighted ops compute in float32 or float64.

Tables (each key a Warp module of its own, created on first use): ``ROWS[(index, precision)]`` and
``ELEMENTS[(index, precision)]`` with ``precision`` one of ``"half"``, ``"single"``, ``"double"`` (the
forward's bits and the backward's accumulator of that features dtype: a first forward + backward compiles one
module) and ``index`` ``"int32"`` / ``"int64"`` (the row and element kernels read either as it comes, compared
at 64 bits: no int32 copy of the index per call);
``WEIGHTED_ROWS[precision]`` and ``WEIGHTED_ELEMENTS[precision]`` with ``"single"`` / ``"double"``.
"""

from typing import Any

import warp as wp

from warpgeo import _constants
from warpgeo._kernels._table import KernelTable

#: Options of every gather module: warpgeo writes every backward itself (no adjoints: half the compile time).
OPTIONS = {"enable_backward": False}

#: "No point": what an index outside ``[0, n)`` reads as.
SENTINEL_INDEX = wp.constant(_constants.SENTINEL_INDEX)
#: Rows (channels of one batch entry) one CPU gather thread copies together: the index row is read (and
#: bounds-checked) once for all of them, and their independent loads overlap.
CHANNELS_PER_ROW = wp.constant(_constants.GATHER_CHANNELS_PER_ROW)
#: A features row is streamed into the cache (sequential reads, which the hardware prefetches) before the
#: random reads when the row is gathered from at least once per this many points: most of its cache lines
#: are read anyway, and random reads that miss the cache each wait for memory (2-3x slower from DRAM).
TOUCH_POINTS_PER_INDEX = wp.constant(16)
#: ... and when the row has at most this many points (beyond, it would not stay in the cache).
TOUCH_MAX_POINTS = wp.constant(1 << 20)
#: Elements between two reads of the streaming pass (8 bytes of int64 bits: one read per 64-byte line).
TOUCH_STEP = wp.constant(8)


@wp.func
def _valid(i: wp.int32, n: wp.int32) -> bool:
    return i >= 0 and i < n


@wp.func
def _point(i: Any, n: int):
    """``i`` (int32 or int64) as an int32 point index where it lies in ``[0, n)``, else ``SENTINEL_INDEX``.

    Compared at 64 bits before narrowing: an int64 index of 2**32 + 5 is out of range, never point 5."""
    wide = wp.int64(i)
    point = int(SENTINEL_INDEX)
    if wide >= wp.int64(0) and wide < wp.int64(n):
        point = int(wide)
    return point


@wp.func
def _row(a: wp.array3d(dtype=Any), b: int, c: int):
    """``a[b, c, :]`` as a dense 1-d array: its element stride is a compile-time constant (no multiply per
    access, and the loops compile tighter). The host passes arrays whose last dimension is dense."""
    return wp.array(ptr=wp.uint64(a[b, c].ptr), shape=(a.shape[2],), dtype=a.dtype)


@wp.func
def _index_row(idx: wp.array2d(dtype=Any), b: int):
    """``idx[b, :]`` as a dense 1-d array (see ``_row``)."""
    return wp.array(ptr=wp.uint64(idx[b].ptr), shape=(idx.shape[1],), dtype=idx.dtype)


@wp.func
def _touch(row: wp.array(dtype=Any)):
    """Read every ``TOUCH_STEP``-th element of ``row`` in order (brings the row into the cache); returns their
    bitwise or, which the caller stores (so that the reads are not optimised away)."""
    acc = row.dtype(0)
    n = row.shape[0]
    j = int(0)  # a bare literal would be a constant to Warp, not a loop counter
    while j < n:
        acc = acc | row[j]
        j += TOUCH_STEP
    return acc


@wp.func
def _touching(n: int, length: int) -> bool:
    return n <= TOUCH_MAX_POINTS and length * TOUCH_POINTS_PER_INDEX >= n


# Loops are ``while`` loops: Warp's dynamic ``for ... in range(n)`` (any step sign) compiles to a loop several
# times slower on the CPU.


@wp.func
def _gather_row(frow: wp.array(dtype=Any), irow: wp.array(dtype=Any), orow: wp.array(dtype=Any)):
    """``orow[l] = frow[irow[l]]``, 0 where the index is outside ``[0, n)`` (every index when ``n == 0``)."""
    n = frow.shape[0]
    length = irow.shape[0]
    zero = orow.dtype(0)
    l = int(0)
    if n == 0:  # nothing to read (the host normally writes these zeros itself)
        while l < length:
            orow[l] = zero
            l += 1
        return
    if length > 0 and _touching(n, length):
        orow[0] = _touch(frow)  # overwritten below
    while l < length:
        j = _point(irow[l], n)
        orow[l] = wp.where(j >= 0, frow[wp.max(j, 0)], zero)
        l += 1


def gather_rows(
    features: wp.array3d(dtype=Any),
    idx: wp.array2d(dtype=Any),
    out: wp.array3d(dtype=Any),
    row_start: wp.int32,
):
    """Thread ``t`` copies rows ``r0 .. r0 + CHANNELS_PER_ROW - 1`` of the flattened ``(B, C)`` grid (``r0 =
    (row_start + t) * CHANNELS_PER_ROW``; fewer at the end): four channels of one batch entry at a time where
    they are, else row by row. The last dimension of every array must be dense (element stride 1)."""
    channels = features.shape[1]
    rows = features.shape[0] * channels
    r0 = (wp.tid() + row_start) * CHANNELS_PER_ROW
    b = r0 // channels
    c0 = r0 - b * channels
    n = features.shape[2]
    length = idx.shape[1]
    if n > 0 and c0 + CHANNELS_PER_ROW <= channels:
        irow = _index_row(idx, b)
        zero = out.dtype(0)
        f0 = _row(features, b, c0)
        f1 = _row(features, b, c0 + 1)
        f2 = _row(features, b, c0 + 2)
        f3 = _row(features, b, c0 + 3)
        o0 = _row(out, b, c0)
        o1 = _row(out, b, c0 + 1)
        o2 = _row(out, b, c0 + 2)
        o3 = _row(out, b, c0 + 3)
        if length > 0 and _touching(n, length):  # each first element is overwritten below
            o0[0] = _touch(f0)
            o1[0] = _touch(f1)
            o2[0] = _touch(f2)
            o3[0] = _touch(f3)
        l = int(0)
        while l < length:
            j = _point(irow[l], n)
            ok = j >= 0
            k = wp.max(j, 0)
            o0[l] = wp.where(ok, f0[k], zero)
            o1[l] = wp.where(ok, f1[k], zero)
            o2[l] = wp.where(ok, f2[k], zero)
            o3[l] = wp.where(ok, f3[k], zero)
            l += 1
    else:  # the last rows, a block across two batch entries, or no points
        r = r0
        while r < wp.min(r0 + CHANNELS_PER_ROW, rows):
            rb = r // channels
            rc = r - rb * channels
            _gather_row(_row(features, rb, rc), _index_row(idx, rb), _row(out, rb, rc))
            r += 1


def scatter_add_rows(
    grad_out: wp.array3d(dtype=Any),
    idx: wp.array2d(dtype=Any),
    grad_features: wp.array3d(dtype=Any),
    row_start: wp.int32,
):
    """Thread ``t`` owns row ``r = row_start + t`` of ``(B, C)``: writes all of ``grad_features[b, c]`` and
    sums in ``l`` order. The last dimension of every array must be dense (element stride 1).

    Zeroing the row here rather than on the host leaves it in cache for the scattered adds that follow.
    (One channel per thread: unlike the forward, blocks of channels measured slower here.)
    """
    r = wp.tid() + row_start
    b = r // grad_features.shape[1]
    c = r - b * grad_features.shape[1]
    n = grad_features.shape[2]
    length = idx.shape[1]
    grow = _row(grad_out, b, c)
    irow = _index_row(idx, b)
    frow = _row(grad_features, b, c)
    zero = grad_features.dtype(0)
    i = int(0)  # a bare literal would be a constant to Warp, not a loop counter
    while i < n:
        frow[i] = zero
        i += 1
    l = int(0)
    while l < length:
        j = _point(irow[l], n)
        if j >= 0:
            frow[j] = frow[j] + grow[l]
        l += 1


def gather_elements(
    features: wp.array3d(dtype=Any),
    idx: wp.array3d(dtype=Any),
    out: wp.array3d(dtype=Any),
):
    """``idx``: the ``(B, L)`` index (int32 or int64, read as it is) broadcast to ``(B, C, L)``."""
    b, c, l = wp.tid()
    i = _point(idx[b, c, l], features.shape[2])
    v = out.dtype(0)
    if i >= 0:
        v = features[b, c, i]
    out[b, c, l] = v


def scatter_add_atomic(
    grad_out: wp.array3d(dtype=Any),
    idx: wp.array3d(dtype=Any),
    grad_features: wp.array3d(dtype=Any),
):
    """``idx``: the ``(B, L)`` index (int32 or int64) broadcast to ``(B, C, L)``; ``grad_features`` must be
    zero on entry."""
    b, c, l = wp.tid()
    i = _point(idx[b, c, l], grad_features.shape[2])
    if i >= 0:
        wp.atomic_add(grad_features, b, c, i, grad_out[b, c, l])


def scatter_add_segments(
    grad_out: wp.array3d(dtype=Any),
    order: wp.array2d(dtype=wp.int32),
    starts: wp.array3d(dtype=wp.int32),
    ends: wp.array3d(dtype=wp.int32),
    grad_features: wp.array3d(dtype=Any),
):
    """``order[b]`` lists ``l`` by ascending ``idx[b, l]`` (stable); ``order[b, starts[b, c, n]:ends[b, c,
    n]]`` are the ``l`` with ``idx[b, l] == n`` (``starts`` / ``ends``: the ``(B, N)`` CSR offsets broadcast
    along C). Every element of ``grad_features`` is written."""
    b, c, n = wp.tid()
    acc = grad_features.dtype(0)
    for j in range(starts[b, c, n], ends[b, c, n]):
        acc = acc + grad_out[b, c, order[b, j]]
    grad_features[b, c, n] = acc


#: The forward's bits and the backward's accumulator per features precision.
_PRECISIONS = {
    "half": (wp.int16, wp.float32),
    "single": (wp.int32, wp.float32),
    "double": (wp.int64, wp.float64),
}
_INDICES = {"int32": wp.int32, "int64": wp.int64}


def _types(bits, accumulator, index, index_ndim: int = 2) -> dict:
    return {
        "features": wp.array3d(dtype=bits),
        "out": wp.array3d(dtype=bits),
        "grad_out": wp.array3d(dtype=accumulator),
        "grad_features": wp.array3d(dtype=accumulator),
        "idx": wp.array(dtype=index, ndim=index_ndim),
    }


#: The CPU kernels: ``ROWS[(index dtype, precision)].gather_rows`` / ``.scatter_add_rows``.
ROWS = KernelTable(
    f"{__name__}.rows",
    (gather_rows, scatter_add_rows),
    {(i, p): _types(*_PRECISIONS[p], _INDICES[i]) for i in _INDICES for p in _PRECISIONS},
    options=OPTIONS,
)
#: The CUDA kernels: ``ELEMENTS[(index dtype, precision)].gather_elements`` / ``.scatter_add_atomic`` (the
#: index read as it is: no int32 copy per call) / ``.scatter_add_segments`` (takes no index: use "int32").
ELEMENTS = KernelTable(
    f"{__name__}.elements",
    (gather_elements, scatter_add_atomic, scatter_add_segments),
    {(i, p): _types(*_PRECISIONS[p], _INDICES[i], 3) for i in _INDICES for p in _PRECISIONS},
    options=OPTIONS,
    cuda_only=True,
)


# --------------------------------------------------------------------------------------------------------
# weighted gather: out[b, c, m] = sum_k weight[b, m, k] * features[b, c, idx[b, m, k]]
#
# Every float array is in the compute precision (float32 or float64); ``idx`` is int32, ``idx`` and
# ``weight`` are ``(B, M, K)`` (broadcast to ``(B, C, M, K)`` for the element kernels). An index outside
# ``[0, N)`` contributes nothing.
# --------------------------------------------------------------------------------------------------------


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
    c = r - b * features.shape[1]
    n = features.shape[2]
    for m in range(idx.shape[1]):
        acc = out.dtype(0)
        for k in range(idx.shape[2]):
            i = idx[b, m, k]
            if _valid(i, n):
                acc = acc + weight[b, m, k] * features[b, c, i]
        out[b, c, m] = acc


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
    c = r - b * grad_features.shape[1]
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


def weighted_grad_weight_rows(
    grad_out: wp.array3d(dtype=Any),
    features: wp.array3d(dtype=Any),
    idx: wp.array3d(dtype=wp.int32),
    grad_weight: wp.array3d(dtype=Any),
    row_start: wp.int32,
):
    """d/d(weight): ``grad_weight[b, m, k] = sum_c grad_out[b, m, c] * features[b, c, idx[b, m, k]]``, a thread
    per ``(b, m)`` row (both devices: each output element is written by one thread). ``grad_out`` arrives as
    a ``(B, M, C)`` view, sliced like the rows."""
    r = wp.tid() + row_start
    b = r // idx.shape[1]
    m = r - b * idx.shape[1]
    n = features.shape[2]
    for k in range(idx.shape[2]):
        i = idx[b, m, k]
        acc = grad_weight.dtype(0)
        if _valid(i, n):
            for c in range(features.shape[1]):
                acc = acc + grad_out[b, m, c] * features[b, c, i]
        grad_weight[b, m, k] = acc


def weighted_gather_elements(
    features: wp.array3d(dtype=Any),
    idx: wp.array4d(dtype=wp.int32),
    weight: wp.array4d(dtype=Any),
    out: wp.array3d(dtype=Any),
):
    """A thread per output element (the CUDA kernel)."""
    b, c, m = wp.tid()
    n = features.shape[2]
    acc = out.dtype(0)
    for k in range(idx.shape[3]):
        i = idx[b, c, m, k]
        if _valid(i, n):
            acc = acc + weight[b, c, m, k] * features[b, c, i]
    out[b, c, m] = acc


def weighted_scatter_atomic(
    grad_out: wp.array3d(dtype=Any),
    idx: wp.array4d(dtype=wp.int32),
    weight: wp.array4d(dtype=Any),
    grad_features: wp.array3d(dtype=Any),
):
    """d/d(features), a thread per ``(b, c, m)`` with float atomics (CUDA); ``grad_features`` zeroed."""
    b, c, m = wp.tid()
    n = grad_features.shape[2]
    g = grad_out[b, c, m]
    for k in range(idx.shape[3]):
        i = idx[b, c, m, k]
        if _valid(i, n):
            wp.atomic_add(grad_features, b, c, i, g * weight[b, c, m, k])


def weighted_scatter_segments(
    grad_out: wp.array3d(dtype=Any),
    weight: wp.array4d(dtype=Any),
    order: wp.array2d(dtype=wp.int32),
    starts: wp.array3d(dtype=wp.int32),
    ends: wp.array3d(dtype=wp.int32),
    grad_features: wp.array3d(dtype=Any),
):
    """d/d(features), a thread per ``(b, c, n)`` summing its contributors in flat ``l = m * K + k`` order
    through the CSR of the stably sorted flat indices (CUDA ``deterministic=True``; ``starts`` / ``ends`` as
    in ``scatter_add_segments``)."""
    b, c, n = wp.tid()
    group = weight.shape[3]
    acc = grad_features.dtype(0)
    length = order.shape[1]
    for j in range(wp.clamp(int(starts[b, c, n]), 0, length), wp.clamp(int(ends[b, c, n]), 0, length)):
        l = int(order[b, j])
        m = l // group
        acc = acc + grad_out[b, c, m] * weight[b, c, m, l - m * group]
    grad_features[b, c, n] = acc


_ACCUMULATORS = {"single": wp.float32, "double": wp.float64}


def _weighted_types(t, weight_dim: int) -> dict:
    names = ("features", "out", "grad_out", "grad_features", "grad_weight")
    types = {name: wp.array3d(dtype=t) for name in names}
    types["weight"] = wp.array(dtype=t, ndim=weight_dim)
    return types


#: The CPU kernels (``weighted_grad_weight_rows`` runs on CUDA too): ``WEIGHTED_ROWS[precision].<kernel>``.
WEIGHTED_ROWS = KernelTable(
    f"{__name__}.weighted_rows",
    (weighted_gather_rows, weighted_scatter_rows, weighted_grad_weight_rows),
    {p: _weighted_types(t, 3) for p, t in _ACCUMULATORS.items()},
    options=OPTIONS,
)
#: The CUDA kernels: ``WEIGHTED_ELEMENTS[precision].<kernel>``.
WEIGHTED_ELEMENTS = KernelTable(
    f"{__name__}.weighted_elements",
    (weighted_gather_elements, weighted_scatter_atomic, weighted_scatter_segments),
    {p: _weighted_types(t, 4) for p, t in _ACCUMULATORS.items()},
    options=OPTIONS,
    cuda_only=True,
)
