"""Point-feature gather and its scatter-add backward.

Shapes: ``features`` / ``grad_features`` ``(B, C, N)``, ``idx`` ``(B, L)`` (L = M or M * K; int32 or int64
for the CPU row kernels, int32 for the CUDA kernels), ``out`` / ``grad_out`` ``(B, C, L)``. An index outside
``[0, N)`` (``-1`` is the padding value; an int64 index is compared before it is narrowed) reads as 0 and
scatters nothing; the host rejects other negative or too large values before launching, the kernels only
make sure a bad index can never touch memory.

Two shapes of work, chosen by the caller per device:

* ``*_rows`` (the CPU kernels; row ``r = row_start + tid``): ``gather_rows`` gives a thread a batch entry and
  a block of ``CHANNELS_PER_ROW`` channels (``ceil(C / CHANNELS_PER_ROW)`` rows per batch entry) and reads
  each index once for the whole block; ``scatter_add_rows`` gives a thread one ``(b, c)`` row. Each loops
  over the index row in order. On the CPU (where Warp runs the threads of a launch one after the other) this
  is a tight contiguous loop, and ``row_start`` lets the host split the rows among several launches that
  run in parallel. The arrays' last dimension must be dense (the rows are indexed without a stride). The
  forward first streams the features rows into the cache when it will read most of them anyway
  (``TOUCH_*``). In the backward the thread owns its whole ``grad_features`` row, so no atomics are needed
  and the sum order is fixed (deterministic).
* ``*_elements`` / ``scatter_add_atomic`` / ``scatter_add_segments``: one thread per output element, for
  CUDA. ``scatter_add_atomic`` uses float atomics (fast; the summation order varies from run to run);
  ``scatter_add_segments`` gives each thread one ``grad_features[b, c, n]`` and sums its contributors in
  ascending ``l`` order from a CSR of the sorted indices (bit-identical run to run, and bit-identical to
  ``scatter_add_rows``).

The forward copies values, so it runs on bit patterns (int16 / int32 / int64 views of half, float32 and
float64 tensors): exact for every float dtype, bfloat16 included. The backward accumulates in float32
(half inputs, widened on the host) or float64.
"""

import threading
from typing import Any

import warp as wp

# warpgeo writes every backward itself: skip generating Warp's adjoints (halves the compile time).
wp.set_module_options({"enable_backward": False})

#: The Warp module (compilation unit) of the one-thread-per-element kernels the CUDA path launches; the CPU
#: row kernels live in modules of their own, per index dtype and precision (``_row_module``) or per
#: precision (``_weighted_row_module``), so that a process's first CPU gather compiles only the kernels it
#: launches (a module compiles all of its kernels for the device it is first launched on).
DEVICE_MODULE = "warpgeo._kernels.gather.elements"
device_kernel = wp.kernel(enable_backward=False, module=DEVICE_MODULE)

#: Channels one CPU thread handles together: the index row is read (and bounds-checked) once for all of them,
#: and their independent loads overlap. 4 rows of 16384 float32 points (256 KiB) still fit a 512 KiB L2.
CHANNELS_PER_ROW = wp.constant(4)
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
    """``i`` (int32 or int64) as an int32 point index where it lies in ``[0, n)``, else -1.

    Compared at 64 bits before narrowing: an int64 index of 2**32 + 5 is out of range, never point 5."""
    wide = wp.int64(i)
    point = int(-1)
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
    """``orow[l] = frow[irow[l]]``, 0 where the index is outside ``[0, n)``; ``n > 0``."""
    n = frow.shape[0]
    length = irow.shape[0]
    zero = orow.dtype(0)
    if length > 0 and _touching(n, length):
        orow[0] = _touch(frow)  # overwritten below
    l = int(0)
    while l < length:
        j = _point(irow[l], n)
        orow[l] = wp.where(j >= 0, frow[wp.max(j, 0)], zero)
        l += 1


def gather_rows(  # a kernel of every row module (see _row_module)
    features: wp.array3d(dtype=Any),
    idx: wp.array2d(dtype=Any),
    out: wp.array3d(dtype=Any),
    row_start: wp.int32,
):
    """Row ``r`` is batch entry ``b`` and channels ``[c0, c0 + CHANNELS_PER_ROW)`` (fewer in the last block
    of a batch entry): ``ceil(C / CHANNELS_PER_ROW)`` rows per batch entry. The last dimension of every
    array must be dense (element stride 1)."""
    r = wp.tid() + row_start
    channels = features.shape[1]
    blocks = (channels + CHANNELS_PER_ROW - 1) // CHANNELS_PER_ROW
    b = r // blocks
    c0 = (r % blocks) * CHANNELS_PER_ROW
    n = features.shape[2]
    length = idx.shape[1]
    irow = _index_row(idx, b)
    zero = out.dtype(0)
    if n == 0:  # every index is padding (the host normally writes these zeros itself)
        c = c0
        while c < wp.min(c0 + CHANNELS_PER_ROW, channels):
            orow = _row(out, b, c)
            l = int(0)
            while l < length:
                orow[l] = zero
                l += 1
            c += 1
    elif c0 + CHANNELS_PER_ROW <= channels:
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
    else:
        c = c0
        while c < channels:
            _gather_row(_row(features, b, c), irow, _row(out, b, c))
            c += 1


@device_kernel
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


def scatter_add_rows(  # a kernel of every row module (see _row_module)
    grad_out: wp.array3d(dtype=Any),
    idx: wp.array2d(dtype=Any),
    grad_features: wp.array3d(dtype=Any),
    row_start: wp.int32,
):
    """Thread ``(b, c)`` owns row ``grad_features[b, c]``, writes all of it and sums in ``l`` order. The
    last dimension of every array must be dense (element stride 1).

    Zeroing the row here rather than on the host leaves it in cache for the scattered adds that follow.
    (One channel per thread: unlike the forward, blocks of channels measured slower here.)
    """
    r = wp.tid() + row_start
    b = r // grad_features.shape[1]
    c = r % grad_features.shape[1]
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


@device_kernel
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


@device_kernel
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
# instance created at launch time would rebuild it). The CPU row kernels read int32 and int64 indices as they
# come (no conversion pass; tables keyed by the index dtype first); the CUDA kernels take int32 indices.
_BITS = {"int16": wp.int16, "int32": wp.int32, "int64": wp.int64}
_ACCUMULATORS = {"float32": wp.float32, "float64": wp.float64}
_INDICES = {"int32": wp.int32, "int64": wp.int64}
_INDEX = wp.array2d(dtype=wp.int32)


def _instances(kernel, scalars, index_arrays=1, row_start=False, index=_INDEX):
    table = {}
    for name, t in scalars.items():
        types = [wp.array3d(dtype=t)] + [index] * index_arrays + [wp.array3d(dtype=t)]
        if row_start:
            types.append(wp.int32)
        table[name] = wp.overload(kernel, types)
    return table


#: The CPU row kernels' Warp modules, one per index dtype and precision, each holding the gather and the
#: scatter-add (its backward) of that precision: a first forward + backward compiles one module of two
#: kernels, not every index dtype and precision of both (16 kernels with the weighted ones). ``bits``: the
#: width the forward copies; ``accumulator``: the backward's float type.
_ROW_PRECISIONS = {
    "half": (wp.int16, wp.float32),
    "single": (wp.int32, wp.float32),
    "double": (wp.int64, wp.float64),
}
_PRECISION_OF = {
    "gather": {"int16": "half", "int32": "single", "int64": "double"},
    "scatter": {"float32": "single", "float64": "double"},
}
_ROW_MODULES: dict[tuple[str, str], dict[str, Any]] = {}
_ROW_LOCK = threading.Lock()


def _row_module(index: str, precision: str) -> dict[str, Any]:
    """``{"gather": overload, "scatter": overload}`` of one row module, both created on its first use (a
    kernel added to a module after it was built would make Warp build it again)."""
    with _ROW_LOCK:
        found = _ROW_MODULES.get((index, precision))
        if found is None:
            name = f"{__name__}.rows_{index}_{precision}"
            wp.set_module_options({"enable_backward": False}, module=name)
            bits, accumulator = _ROW_PRECISIONS[precision]
            rows = wp.array2d(dtype=_INDICES[index])
            found = {}
            for role, func, t in (
                ("gather", gather_rows, bits),
                ("scatter", scatter_add_rows, accumulator),
            ):
                kernel = wp.kernel(func, module=name)
                found[role] = wp.overload(kernel, [wp.array3d(dtype=t), rows, wp.array3d(dtype=t), wp.int32])
            _ROW_MODULES[(index, precision)] = found
    return found


class _RowTable(dict):
    """``{index dtype name: {dtype name: overload}}`` of a row kernel (``role``), created on first lookup."""

    def __init__(self, role: str) -> None:
        super().__init__()
        self._role = role

    def __missing__(self, index: str) -> dict[str, Any]:
        if index not in _INDICES:
            raise KeyError(index)
        table = _RowOverloads(self._role, index)
        self[index] = table
        return table

    def build_all(self) -> dict:
        """Every overload, created now (ahead-of-time builds, the code-generation test)."""
        return {index: {n: self[index][n] for n in _PRECISION_OF[self._role]} for index in _INDICES}


class _RowOverloads(dict):
    def __init__(self, role: str, index: str) -> None:
        super().__init__()
        self._role = role
        self._index = index

    def __missing__(self, name: str) -> Any:
        kernel = _row_module(self._index, _PRECISION_OF[self._role][name])[
            self._role
        ]  # KeyError: no such dtype
        self[name] = kernel
        return kernel


GATHER_ROWS = _RowTable("gather")
GATHER_ELEMENTS = _instances(gather_elements, _BITS)
SCATTER_ADD_ROWS = _RowTable("scatter")
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


def weighted_gather_rows(  # a kernel of every weighted row module (see _weighted_row_module)
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


@device_kernel
def weighted_gather_elements(
    features: wp.array3d(dtype=Any),
    idx: wp.array3d(dtype=wp.int32),
    weight: wp.array3d(dtype=Any),
    out: wp.array3d(dtype=Any),
):
    """A thread per output element (the CUDA kernel)."""
    b, c, m = wp.tid()
    out[b, c, m] = _weighted_sum(features, idx, weight, b, c, m)


def weighted_scatter_rows(  # a kernel of every weighted row module (see _weighted_row_module)
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


@device_kernel
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


@device_kernel
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


def weighted_grad_weight_rows(  # a kernel of every weighted row module (see _weighted_row_module)
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


def _weighted(kernel, params):
    """Instances over the accumulators; ``params`` lists each parameter's kind: "f" a float array3d,
    "i" the (B, M, K) index, "o" an int32 array2d."""
    table = {}
    for name, t in _ACCUMULATORS.items():
        kinds = {"f": wp.array3d(dtype=t), "i": _IDX3, "o": _INDEX}
        table[name] = wp.overload(kernel, [kinds[p] for p in params])
    return table


#: The weighted CPU row kernels' Warp modules, one per precision, each holding the forward and both backwards
#: of that precision (``weighted_grad_weight_rows`` runs on CUDA too): a first weighted gather compiles one
#: module of three kernels, not both precisions of all three.
_WEIGHTED_ROWS = {
    "gather": (weighted_gather_rows, "fiff"),
    "scatter": (weighted_scatter_rows, "fiff"),
    "grad_weight": (weighted_grad_weight_rows, "ffif"),
}
_WEIGHTED_ROW_MODULES: dict[str, dict[str, Any]] = {}


def _weighted_row_module(precision: str) -> dict[str, Any]:
    """``{role: overload}`` of the weighted row module of ``precision`` (``"float32"`` / ``"float64"``), its
    kernels all created on its first use (see ``_row_module``)."""
    t = _ACCUMULATORS[precision]  # KeyError: no such dtype
    with _ROW_LOCK:
        found = _WEIGHTED_ROW_MODULES.get(precision)
        if found is None:
            name = f"{__name__}.weighted_rows_{precision}"
            wp.set_module_options({"enable_backward": False}, module=name)
            kinds = {"f": wp.array3d(dtype=t), "i": _IDX3}
            found = {}
            for role, (func, params) in _WEIGHTED_ROWS.items():
                kernel = wp.kernel(func, module=name)
                found[role] = wp.overload(kernel, [kinds[p] for p in params] + [wp.int32])
            _WEIGHTED_ROW_MODULES[precision] = found
    return found


class _WeightedRowTable(dict):
    """``{dtype name: overload}`` of a weighted row kernel (``role``), created on first lookup."""

    def __init__(self, role: str) -> None:
        super().__init__()
        self._role = role

    def __missing__(self, name: str) -> Any:
        kernel = _weighted_row_module(name)[self._role]
        self[name] = kernel
        return kernel

    def build_all(self) -> dict:
        """Every overload, created now (the code-generation test)."""
        return {name: self[name] for name in _ACCUMULATORS}


WEIGHTED_GATHER_ROWS = _WeightedRowTable("gather")
WEIGHTED_GATHER_ELEMENTS = _weighted(weighted_gather_elements, "fiff")
WEIGHTED_SCATTER_ROWS = _WeightedRowTable("scatter")
WEIGHTED_SCATTER_ATOMIC = _weighted(weighted_scatter_atomic, "fiff")
WEIGHTED_SCATTER_SEGMENTS = _weighted(weighted_scatter_segments, "ffoof")
WEIGHTED_GRAD_WEIGHT_ROWS = _WeightedRowTable("grad_weight")
