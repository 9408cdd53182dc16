"""Neighbour queries: k nearest neighbours (:func:`knn`) and pointnet2's ball query (:func:`ball_query`).

Both search a uniform grid of cells built per call by one Warp launch (see ``warpgeo/_kernels/neighbors.py``;
its arrays in a per-thread workspace, not allocated per call): memory is ``O(B * (N + M * k))``, never
``O(B * M * N)``. Small clouds are scanned directly instead (no grid to build: one launch). Distances are compared in float64 whatever the input
dtype, so results do not depend on it, and ties go to the lowest index; float64 clouds are first scaled by a
power of two (exact, in the kernels), so that squared distances neither overflow nor underflow at any finite
scale.
"""

from __future__ import annotations

import math
import threading
from typing import Any, NamedTuple

import torch

from . import _launch, _warp, checks
from ._constants import FAR, INT32_LIMIT, MAX_POINTS, MODE_BALL, MODE_KNN, SENTINEL_INDEX
from ._kernels import neighbors as kernels
from ._op import Op

__all__ = ["KNN", "ball_query", "knn"]

#: Clouds with at most this many points are scanned directly: below it building the grid costs more than
#: it saves (measured on the CPU at k = 16 and 32).
BRUTE_MAX_POINTS = 256
#: Mean points per cell of the kNN grid.
KNN_POINTS_PER_CELL = 2.0
#: Cell size of the ball-query grid, in radii.
_BALL_CELL = 0.5
#: Rough cost of one query row, for splitting CPU launches among threads.
ROW_WORK = 256
#: ``k`` is below this whatever M is (the output's int32 byte strides: 8-byte entries).
_MAX_K = INT32_LIMIT // 8
#: On CUDA's algorithms clouds of at most this many points are scanned (one launch, a thread a query, its
#: list in global memory). Measured on an H200 (2026-11-26, ``benchmarks/results/2026-11-26-nvidia-h200-2.md``):
#: the scan took 1.84 ms for 8 x 512 queries of 2,048 points (k = 16) where the grid took 0.81 ms for
#: 8 x 4,096 queries of 16,384; from 4,096 points down to the CPU's limit, as the grid's cost per query does
#: not grow with N.
CUDA_BRUTE_MAX_POINTS = 256
#: Compute dtype -> the key of the neighbour kernel tables (``warpgeo._kernels.neighbors.TYPES``).
_KEY = {torch.float32: "float32", torch.float64: "float64"}


class KNN(NamedTuple):
    """The result of :func:`knn`: ``dists`` ``(B, M, k)`` Euclidean distances and ``idx`` ``(B, M, k)`` int64."""

    dists: torch.Tensor
    idx: torch.Tensor


# --------------------------------------------------------------------------------------------------------
# checks (both ops)
# --------------------------------------------------------------------------------------------------------


def _check_knn(queries, points, query_lengths, point_lengths, k) -> None:
    """The checks of every entry point that read no tensor values: types, shapes, devices, sizes."""
    checks.check_float(queries, "queries")
    checks.check_float(points, "points")
    if queries.dim() != 3 or queries.shape[-1] != 3:
        raise ValueError(f"queries must have shape (B, M, 3); got {tuple(queries.shape)}")
    if points.dim() != 3 or points.shape[-1] != 3:
        raise ValueError(f"points must have shape (B, N, 3); got {tuple(points.shape)}")
    if points.shape[0] != queries.shape[0]:
        raise ValueError(
            f"points must have the batch size of queries ({queries.shape[0]}); got points of shape "
            f"{tuple(points.shape)}"
        )
    if points.dtype != queries.dtype:
        raise TypeError(f"points must have the dtype of queries ({queries.dtype}); got {points.dtype}")
    k = checks.check_int(k, "k", minimum=1)
    if isinstance(k, int) and k >= _MAX_K:
        raise ValueError(f"k must be below 2**28 (int32 strides of one Warp launch); got {_shown(k)}")
    batch, num_queries, num_points = queries.shape[0], queries.shape[1], points.shape[1]
    item = _warp.compute_dtype(points.dtype).itemsize
    if num_points > MAX_POINTS or 3 * item * num_points >= INT32_LIMIT:
        raise ValueError(
            f"points may hold fewer than {INT32_LIMIT // (3 * item)} points per cloud in "
            f"{points.dtype} (int32 strides of one Warp launch); got N={num_points}"
        )
    if isinstance(k, int) and 8 * num_queries * k >= INT32_LIMIT:  # k and M are small enough to print
        raise ValueError(
            f"queries * k must stay below 2**28 per cloud (int32 strides of one Warp launch); got M={num_queries}, "
            f"k={k}"
        )
    for name, t in (("query_lengths", query_lengths), ("point_lengths", point_lengths)):
        if t is not None:
            checks.check_index(t, name)
            checks.check_shape(t, name, (batch,))
    checks.check_device(
        "queries", queries=queries, points=points, query_lengths=query_lengths, point_lengths=point_lengths
    )


def _check_ball_query(queries, points, query_lengths, point_lengths, radius, k, inclusive) -> None:
    """:func:`_check_knn`'s checks, and the radius and the comparison."""
    _check_knn(queries, points, query_lengths, point_lengths, k)
    if isinstance(radius, bool) or not isinstance(radius, (int, float)):
        raise TypeError(f"radius must be a float; got {type(radius).__name__}")
    try:
        finite = math.isfinite(radius)
    except OverflowError:  # an int beyond float64's range
        finite = False
    if not (finite and radius > 0.0):
        raise ValueError(f"radius must be a finite float > 0; got {_shown(radius)}")
    if not isinstance(inclusive, bool):
        raise TypeError(f"inclusive must be a bool; got {type(inclusive).__name__}")


def _shown(value: int | float) -> str:
    """``value`` for a message: an int too long to print (or to make a float of) by its size."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an int of {len(str(abs(value)))} digits"
    return str(value)


#: How :func:`check_values`' messages name the arguments: the two clouds, and each one's lengths with the
#: letter of its size.
_NAMES = ("queries", "points", "query_lengths", "M", "point_lengths", "N")


def check_values(queries, points, query_lengths, point_lengths, names=_NAMES):
    """The checks that need tensor values: one device-to-host transfer for all of them (``names``: as
    :data:`_NAMES`, for an op whose arguments are called otherwise: chamfer's ``x``, ``y``).

    Finiteness of the valid rows: one ``isfinite`` pass over each cloud (the rows beyond the lengths
    masked). Returns ``(None, None)`` (callers once took the clouds' boxes from here; the kernels find them
    now).
    """
    m, n = queries.shape[1], points.shape[1]
    device = queries.device
    zero = torch.zeros((), dtype=torch.bool, device=device)

    def out_of_range(lengths, size):
        return ((lengths < 0) | (lengths > size)).any() if lengths is not None else zero

    def nonfinite(x, lengths):
        if x.numel() == 0:
            return zero
        if lengths is None:
            return ~torch.isfinite(x).all()
        beyond = torch.arange(x.shape[1], device=device) >= lengths[:, None]
        return ~(torch.isfinite(x).all(dim=-1) | beyond).all()

    bad_queries = nonfinite(queries, query_lengths)
    bad_points = nonfinite(points, point_lengths)
    flags = torch.stack(
        [out_of_range(query_lengths, m), out_of_range(point_lengths, n), bad_queries, bad_points]
    ).tolist()
    q, p, q_len, q_size, p_len, p_size = names
    if flags[0]:
        raise ValueError(f"{q_len} must lie in [0, {q_size}={m}]; got {query_lengths.tolist()}")
    if flags[1]:
        raise ValueError(f"{p_len} must lie in [0, {p_size}={n}]; got {point_lengths.tolist()}")
    if flags[2]:
        raise ValueError(f"{q} must be finite: found NaN or inf among the valid {q}")
    if flags[3]:
        raise ValueError(f"{p} must be finite: found NaN or inf among the valid {p}")
    return None, None


# --------------------------------------------------------------------------------------------------------
# the grid, the scale, the workspace
# --------------------------------------------------------------------------------------------------------


def lengths_arg(t: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """Per-cloud lengths as the kernels take them: int64, empty meaning "all" (one shared empty tensor per
    device: nothing is allocated per call)."""
    if t is None:
        found = _NO_LENGTHS.get(device)
        if found is None:
            found = _NO_LENGTHS[device] = _launch.constant(torch.empty(0, dtype=torch.int64, device=device))
        return found
    return t if t.dtype == torch.int64 else t.to(torch.int64)


_NO_LENGTHS: dict[torch.device, torch.Tensor] = {}


def no_params(device: torch.device) -> torch.Tensor:
    """An empty ``params`` (float32 clouds: not scaled), shared per device."""
    found = _NO_PARAMS.get(device)
    if found is None:
        found = _NO_PARAMS[device] = _launch.constant(
            torch.empty(0, kernels.PARAMS, dtype=torch.float64, device=device)
        )
    return found


_NO_PARAMS: dict[torch.device, torch.Tensor] = {}


class Workspace:
    """Scratch memory of one call, handed out as typed arrays (each one view of a buffer: ``as_strided``).

    One buffer per dtype, thread, device and stream, kept and grown between calls (no allocation per call
    once warm), or fresh ones while a CUDA graph is captured (a graph keeps its own). Calls on one thread and
    stream run in order (on CUDA, in stream order), so they never use a buffer at once; another thread or
    stream has its own. A buffer grown in the middle of a call leaves the arrays taken before it on the old
    one (they keep it alive). ``stream``: the call's Warp stream (``_warp.warp_stream``) where the caller
    has it; the stream and the capture state are looked up once per workspace, at its first array."""

    def __init__(self, device: torch.device, stream: Any = None) -> None:
        self.device = device
        self.stream = stream
        self.offsets: dict[torch.dtype, int] = {}
        self._buffers: Any = _UNRESOLVED

    def take(self, dtype: torch.dtype, *shape: int) -> torch.Tensor:
        count = math.prod(shape)
        start = self.offsets.get(dtype, 0)
        self.offsets[dtype] = start + -(-count // _ALIGN) * _ALIGN
        buffers = self._buffers
        if buffers is _UNRESOLVED:
            buffers = self._buffers = _buffers_of(self.device, self.stream)
        buffer = _scratch(buffers, self.device, dtype, start + count)
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
        return buffer.as_strided(shape, strides, start)


#: Each array of a workspace starts at a multiple of this many elements (16-byte vector loads).
_ALIGN = 4
#: A workspace whose buffers are not looked up yet.
_UNRESOLVED = object()

_SCRATCH = threading.local()


def _buffers_of(device: torch.device, stream: Any) -> dict | None:
    """This thread's scratch buffers of ``device`` and its current stream (``stream``: Warp's handle to it,
    or None to look it up): ``{dtype: tensor}``; None while the stream is capturing a CUDA graph (then
    every array is fresh)."""
    if device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():
            return None
        if stream is None:
            stream = _warp.warp_stream(device)
        key = (device, stream.cuda_stream)
    else:
        key = (device, 0)
    try:
        held = _SCRATCH.buffers
    except AttributeError:
        held = _SCRATCH.buffers = {}
    found = held.get(key)
    if found is None:
        found = held[key] = {}
    return found


def _scratch(buffers: dict | None, device: torch.device, dtype: torch.dtype, count: int) -> torch.Tensor:
    """At least ``count`` elements of scratch of ``dtype`` from ``buffers`` (:func:`_buffers_of`; None: a
    fresh tensor)."""
    count = max(count, 1)
    if buffers is None:
        return torch.empty(count, dtype=dtype, device=device)
    found = buffers.get(dtype)
    if found is None or found.numel() < count:
        grown = count if found is None else max(count, 2 * found.numel())
        found = buffers[dtype] = torch.empty(grown, dtype=dtype, device=device)
    return found


def _grid(table, queries, query_lengths, points, point_lengths, mode, cell_size, method, ws, extra=()):
    """Build the grid of ``points`` (B, N, 3) (one launch): the query kernels' grid arguments by name.

    ``table``: the search's module (``KNN_GRID`` / ``BALL_QUERY_GRID`` of the precision), which holds the
    builds. ``cell_size``: the least cell width (ball query, in the caller's units), 0 for kNN. ``method``:
    ``"counting"`` (a thread per cloud, a counting sort: the CPU) or ``"sort"`` (a block per cloud,
    histogram and scan: CUDA's). ``ws``: the call's :class:`Workspace`."""
    batch, n = points.shape[0], points.shape[1]
    device = points.device
    cap = grid_cells(n)
    grid = {
        "params": ws.take(torch.float64, batch, kernels.PARAMS),
        "dims": ws.take(torch.int32, batch, 3),
        "cell_start": ws.take(torch.int32, batch, cap + 2),
        "sorted_points": ws.take(points.dtype, batch, n, 3),
        "sorted_index": ws.take(torch.int32, batch, n),
    }
    args = {
        "queries": queries,
        "query_lengths": query_lengths,
        "points": points,
        "point_lengths": point_lengths,
        "mode": mode,
        "cell_size": float(cell_size),
        "points_per_cell": KNN_POINTS_PER_CELL,
        "scaled": int(points.dtype == torch.float64),
        **grid,
    }
    if method == "counting":
        _launch.launch_rows(
            table.grid_build_rows, batch, device=device, work_per_row=n + cap, stream=ws.stream, **args
        )
    elif method == "sort":
        _launch.launch(
            table.grid_build_block,
            batch,
            device=device,
            tiled=True,
            block_dim=kernels.BUILD_BLOCK_DIM,
            rank=ws.take(torch.int32, batch, n),
            stream=ws.stream,
            **args,
        )
    else:
        raise ValueError(f"internal error: unknown grid method {method!r}")
    return grid


def grid_cells(n: int) -> int:
    """Cells per cloud: the power of two >= N."""
    return 1 << max(n - 1, 1).bit_length()


def _method(points: torch.Tensor, method: str | None) -> str:
    """``"brute"`` (a scan: small clouds), ``"counting"`` (the CPU's grid) or ``"sort"`` (CUDA's grid)."""
    if method is not None:
        return method
    cuda = _warp.cuda_algorithms(points.device)
    if points.shape[1] <= (CUDA_BRUTE_MAX_POINTS if cuda else BRUTE_MAX_POINTS):
        return "brute"
    return "sort" if cuda else "counting"


# --------------------------------------------------------------------------------------------------------
# ball query: declarations (check above, impl, fake); no gradient (an index selection)
# --------------------------------------------------------------------------------------------------------


def _ball_query_impl(
    queries: torch.Tensor,
    points: torch.Tensor,
    query_lengths: torch.Tensor | None,
    point_lengths: torch.Tensor | None,
    radius: float,
    k: int,
    inclusive: bool,
) -> torch.Tensor:
    """queries (B, M, 3), points (B, N, 3) -> int64 (B, M, k): the k smallest indices with distance
    <= radius (``inclusive``) or < radius, ascending, then -1."""
    query_bounds = bounds = None
    if checks.checking_values(queries.device):
        query_bounds, bounds = check_values(queries, points, query_lengths, point_lengths)
    return _ball_query(
        queries,
        points,
        query_lengths,
        point_lengths,
        radius,
        k,
        inclusive,
        bounds=bounds,
        query_bounds=query_bounds,
    )


def _ball_query_fake(queries, points, query_lengths, point_lengths, radius, k, inclusive):
    return queries.new_empty(queries.shape[0], queries.shape[1], k, dtype=torch.int64)


def _ball_query(
    queries,
    points,
    query_lengths,
    point_lengths,
    radius,
    k,
    inclusive,
    method=None,
    bounds=None,
    query_bounds=None,
):
    """The launches behind the op (``method``: None = by size and device, or "brute" / "counting" / "sort";
    ``bounds`` / ``query_bounds``: unused, kept for callers that pass the value checks' boxes). One launch
    for small clouds (two in float64: the scale first), two on a grid."""
    batch, m, n = queries.shape[0], queries.shape[1], points.shape[1]
    device = queries.device
    out = torch.empty(batch, m, k, dtype=torch.int64, device=device)
    if n == 0 or batch * m == 0:
        return out.fill_(SENTINEL_INDEX)
    queries, points = _warp.to_compute(queries), _warp.to_compute(points)
    key = _KEY[points.dtype]
    scaled = points.dtype == torch.float64
    stream = _warp.warp_stream(device)  # once per call (None on the CPU)
    query_lengths = lengths_arg(query_lengths, device)
    point_lengths = lengths_arg(point_lengths, device)
    common = {
        "queries": queries,
        "query_lengths": query_lengths,
        "radius": float(radius),
        "inclusive": int(inclusive),
        "out_idx": out.view(batch * m, k),
        "stream": stream,
    }
    method = _method(points, method)
    if method == "brute":
        table = kernels.BALL_QUERY_BRUTE[key]
        params = (
            _scale(table, queries, query_lengths, points, point_lengths, stream)
            if scaled
            else no_params(device)
        )
        _launch.launch_rows(
            table.ball_query_brute,
            batch * m,
            device=device,
            work_per_row=n,
            points=points,
            point_lengths=point_lengths,
            params=params,
            **common,
        )
        return out
    table = kernels.BALL_QUERY_GRID[key]
    ws = Workspace(device, stream)
    grid = _grid(
        table, queries, query_lengths, points, point_lengths, MODE_BALL, radius * _BALL_CELL, method, ws
    )
    _launch.launch_rows(
        table.ball_query_rows,
        batch * m,
        device=device,
        work_per_row=ROW_WORK,
        ordered=int(method == "counting"),
        **grid,
        **common,
    )
    return out


def _scale(table, queries, query_lengths, points, point_lengths, stream=None) -> torch.Tensor:
    """float64 clouds' ``params`` (B, PARAMS) with each cloud's scale (one launch; only the scale columns
    are set), in this thread's workspace (``stream``: the call's, as :class:`Workspace` takes it)."""
    batch = points.shape[0]
    params = Workspace(points.device, stream).take(torch.float64, batch, kernels.PARAMS)
    _launch.launch_rows(
        table.cloud_scale_rows,
        batch,
        device=points.device,
        work_per_row=points.shape[1] + queries.shape[1],
        queries=queries,
        query_lengths=query_lengths,
        points=points,
        point_lengths=point_lengths,
        params=params,
        stream=stream,
    )
    return params


_ball_query_op = Op(
    "warpgeo::ball_query", check=_check_ball_query, impl=_ball_query_impl, fake=_ball_query_fake
)


def ball_query(
    queries: torch.Tensor,
    points: torch.Tensor,
    radius: float,
    k: int,
    *,
    query_lengths: torch.Tensor | None = None,
    point_lengths: torch.Tensor | None = None,
    inclusive: bool = True,
) -> torch.Tensor:
    """Ball query with pointnet2's semantics: the first ``k`` points, in index order, within ``radius``.

    For each query ``queries[b, m]``, the indices ``n`` of the points with ``|points[b, n] - queries[b, m]|
    <= radius`` (inclusive), in ascending order, the first ``k`` of them, then ``-1`` where fewer lie in the
    ball. Memory is ``O(B * (N + M * k))``: no ``(B, M, N)`` distance matrix is formed (the points are
    binned into a grid of cells at least ``radius`` wide). Not differentiable (an index selection):
    gradients flow through what is gathered with the indices (:func:`warpgeo.gather_points`).

    Args:
        queries: ``(B, M, 3)`` ball centres, or ``(M, 3)`` with ``points`` ``(N, 3)`` (one cloud: the result
            is then ``(M, k)``); float16, bfloat16, float32 or float64.
        points: ``(B, N, 3)`` (or ``(N, 3)``), the dtype and device of ``queries``.
        radius: a finite float > 0.
        k: the most neighbours per query, an int >= 1.
        query_lengths: optional integer ``(B,)``: only the first ``query_lengths[b]`` queries of cloud b
            are answered; the other rows are all ``-1``.
        point_lengths: optional integer ``(B,)``: cloud b holds only its first ``point_lengths[b]`` points.
        inclusive: ``True`` (the default) keeps the points at distance ``<= radius``; ``False`` only those
            at ``< radius``, as the pointnet2 CUDA extension (``d**2 < radius**2``) does.

    Returns:
        int64 ``(B, M, k)`` (``(M, k)`` for one unbatched cloud): ascending point indices, ``-1`` padding.

    Raises:
        TypeError: non-float points or queries, different dtypes, non-integer lengths, a non-int ``k``, a
            non-float ``radius`` or a non-bool ``inclusive``; pointnet2's argument order (radius first).
        ValueError: bad shapes, ``k < 1`` or ``k >= 2**28``, ``radius`` not finite and > 0, lengths outside ``[0, M]`` /
            ``[0, N]``, NaN or inf among the valid points or queries, tensors on different devices.

    Example:
        >>> pts = torch.rand(2, 1000, 3)
        >>> centres = pts[:, :64]
        >>> idx = ball_query(centres, pts, 0.2, 16)              # (2, 64, 16) int64, -1 padded
        >>> grouped = gather_points(pts.transpose(1, 2), idx)   # (2, 3, 64, 16), 0 where idx == -1
    """
    if isinstance(queries, (int, float)) and isinstance(points, (int, float)):
        raise TypeError(
            "ball_query takes (queries, points, radius, k); got two numbers first, as in pointnet2's "
            "ball_query(radius, nsample, xyz, new_xyz): call ball_query(new_xyz, xyz, radius, nsample), or "
            "warpgeo.compat.pointnet2_ops.pointnet2_utils.ball_query for pointnet2's order and int32 output"
        )
    queries, points, unbatched = _batched(queries, points)
    idx = _ball_query_op.call(
        queries=queries,
        points=points,
        query_lengths=query_lengths,
        point_lengths=point_lengths,
        radius=radius,
        k=k,
        inclusive=inclusive,
    )
    return idx[0] if unbatched else idx


# --------------------------------------------------------------------------------------------------------
# k nearest neighbours: declarations (check above, impl, fake), backward, public function
# --------------------------------------------------------------------------------------------------------


def _knn_impl(
    queries: torch.Tensor,
    points: torch.Tensor,
    query_lengths: torch.Tensor | None,
    point_lengths: torch.Tensor | None,
    k: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """queries (B, M, 3), points (B, N, 3) -> dists (B, M, k) in points' dtype, idx (B, M, k) int64."""
    query_bounds = bounds = None
    if checks.checking_values(queries.device):
        query_bounds, bounds = check_values(queries, points, query_lengths, point_lengths)
    return _knn(queries, points, query_lengths, point_lengths, k, bounds=bounds, query_bounds=query_bounds)


def _knn_fake(queries, points, query_lengths, point_lengths, k):
    shape = (queries.shape[0], queries.shape[1], k)
    return queries.new_empty(shape), queries.new_empty(shape, dtype=torch.int64)


def _knn(queries, points, query_lengths, point_lengths, k, method=None, bounds=None, query_bounds=None):
    """The launches behind the op (``method``: None = by size and device, or "brute" / "counting" / "sort";
    ``bounds`` / ``query_bounds``: unused, kept for callers that pass the value checks' boxes). The outputs
    are allocated once, in their final dtype (half inputs: float32, then cast); one launch for small clouds
    (two in float64: the scale first), two on a grid."""
    batch, m, n = queries.shape[0], queries.shape[1], points.shape[1]
    device = queries.device
    dtype = points.dtype
    compute = _warp.compute_dtype(dtype)
    idx = torch.empty(batch, m, k, dtype=torch.int64, device=device)
    dists = torch.empty(batch, m, k, dtype=compute, device=device)
    if n == 0 or batch * m == 0:
        return dists.fill_(FAR).to(dtype), idx.fill_(SENTINEL_INDEX)
    queries, points = _warp.to_compute(queries), _warp.to_compute(points)
    key = _KEY[compute]
    rows = batch * m
    query_lengths = lengths_arg(query_lengths, device)
    point_lengths = lengths_arg(point_lengths, device)
    method = _method(points, method)
    scratch = 0 if compute == torch.float64 else rows * k  # float64 clouds keep the list in their output
    stream = _warp.warp_stream(device)  # once per call (None on the CPU)
    ws = Workspace(device, stream)
    out_dist = dists.view(rows, k)
    common = {
        "queries": queries,
        "query_lengths": query_lengths,
        "work_d2": out_dist if scratch == 0 else ws.take(torch.float64, rows, k),
        "out_idx": idx.view(rows, k),
        "out_dist": out_dist,
        "stream": stream,
    }
    if method == "brute":
        table = kernels.KNN_BRUTE[key]
        if compute == torch.float64:
            params = _scale(table, queries, query_lengths, points, point_lengths, stream)
        else:
            params = no_params(device)
        _launch.launch_rows(
            table.knn_brute,
            rows,
            device=device,
            work_per_row=n,
            points=points,
            point_lengths=point_lengths,
            params=params,
            **common,
        )
    else:
        table = kernels.KNN_GRID[key]
        grid = _grid(table, queries, query_lengths, points, point_lengths, MODE_KNN, 0.0, method, ws)
        _launch.launch_rows(table.knn_rows, rows, device=device, work_per_row=ROW_WORK, **grid, **common)
    return (dists if dists.dtype == dtype else dists.to(dtype)), idx


def _setup_knn(ctx, inputs, output) -> None:
    queries, points, _query_lengths, _point_lengths, _k = inputs
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(queries, points, output[1])


def _backward_knn(ctx, grad_dists, _grad_idx):
    """d|q - p|: ``(q - p) / |q - p|`` to the query, its negative scatter-added to the point; 0 where the
    distance is 0 (a subgradient) and for padding. Written with torch ops (a gather, a norm and a
    scatter-add over the (B, M, k) neighbours, no (B, M, N) intermediate), so it is differentiable itself
    (double backward) and runs as one graph node under torch.compile."""
    if grad_dists is None or not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
        return _knn_op.grads()
    queries, points, idx = ctx.saved_tensors
    work = _warp.compute_dtype(points.dtype)
    batch, m, k = idx.shape
    safe = idx.clamp_min(0)
    chosen = torch.gather(points.to(work), 1, safe.reshape(batch, m * k, 1).expand(-1, -1, 3))
    diff = queries.to(work)[:, :, None, :] - chosen.reshape(batch, m, k, 3)
    if work == torch.float64:
        # diff / |diff| from copies scaled by a power of two: finite at any scale (1 / |diff| overflows
        # for subnormal distances, |diff|**2 for distances near 1e200)
        scaled = _scaled_rows(diff)
        norm = torch.linalg.vector_norm(scaled, dim=-1)
        use = (idx >= 0) & (norm > 0)
        unit = scaled / torch.where(use, norm, 1.0)[..., None]
        step = torch.where(use, grad_dists.to(work), 0.0)[..., None] * unit  # (B, M, k, 3)
    else:
        dist = torch.linalg.vector_norm(diff, dim=-1)
        use = (idx >= 0) & (dist > 0)
        coef = torch.where(use, grad_dists.to(work) / torch.where(use, dist, 1.0), 0.0)
        step = coef[..., None] * diff  # (B, M, k, 3)
    grad_queries = step.sum(dim=2).to(queries.dtype) if ctx.needs_input_grad[0] else None
    grad_points = None
    if ctx.needs_input_grad[1]:
        grad_points = torch.zeros(points.shape, dtype=work, device=points.device)
        grad_points.scatter_add_(
            1, safe.reshape(batch, m * k, 1).expand(-1, -1, 3), -step.reshape(batch, -1, 3)
        )
        grad_points = grad_points.to(points.dtype)
    return _knn_op.grads(queries=grad_queries, points=grad_points)


def _power_of_two(exponent: torch.Tensor) -> torch.Tensor:
    """``2.0 ** exponent`` in float64, exact for |exponent| <= 1023."""
    return torch.ldexp(torch.ones_like(exponent, dtype=torch.float64), exponent)


def _times_power_of_two(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``x * 2**shift`` for float64 ``x``, ``shift`` int64 of ``x``'s leading shape (one exponent per
    vector ...): exact (two factors keep each in range) unless the result overflows or underflows."""
    half = shift // 2
    view = tuple(shift.shape) + (1,) * (x.dim() - shift.dim())
    return x * _power_of_two(half).reshape(view) * _power_of_two(shift - half).reshape(view)


def _scaled_rows(diff: torch.Tensor) -> torch.Tensor:
    """float64 ``diff`` (..., 3), each vector times the power of two that brings its largest |component| to
    [0.5, 1): exact, and a constant for autograd (so the result stays differentiable, double backward too)."""
    _, exponent = torch.frexp(diff.detach().abs().amax(dim=-1))  # NaN / inf / 0: exponent 0
    return _times_power_of_two(diff, -exponent.to(torch.int64))


_knn_op = Op(
    "warpgeo::knn",
    check=_check_knn,
    impl=_knn_impl,
    fake=_knn_fake,
    setup=_setup_knn,
    backward=_backward_knn,
)


def knn(
    queries: torch.Tensor,
    points: torch.Tensor,
    k: int,
    *,
    query_lengths: torch.Tensor | None = None,
    point_lengths: torch.Tensor | None = None,
) -> KNN:
    """The ``k`` nearest points of every query, nearest first.

    Distances are Euclidean (not squared), computed from coordinate differences (accurate to the input
    dtype's rounding, even far from the origin) and compared in float64; equal distances go to the lowest
    index. ``dists`` is differentiable w.r.t. ``queries`` and ``points`` (the gradient of a zero distance
    is taken as 0). Memory is ``O(B * (N + M * k))``.

    Args:
        queries: ``(B, M, 3)``, or ``(M, 3)`` with ``points`` ``(N, 3)`` (one cloud: the results are then
            ``(M, k)``); float16, bfloat16, float32 or float64.
        points: ``(B, N, 3)`` (or ``(N, 3)``), the dtype and device of ``queries``.
        k: neighbours per query, an int >= 1.
        query_lengths: optional integer ``(B,)``: only the first ``query_lengths[b]`` queries of cloud b
            are answered; the other rows hold ``-1`` and ``inf``.
        point_lengths: optional integer ``(B,)``: cloud b holds only its first ``point_lengths[b]`` points.

    Returns:
        ``KNN(dists, idx)``: ``dists`` ``(B, M, k)`` in the dtype of ``points``, ``idx`` ``(B, M, k)``
        int64. Where a cloud has fewer than ``k`` valid points, the rest of the row is ``-1`` / ``inf``.

    Raises:
        TypeError: non-float points or queries, different dtypes, non-integer lengths, a non-int ``k``.
        ValueError: bad shapes, ``k < 1`` or ``k >= 2**28``, lengths outside ``[0, M]`` / ``[0, N]``, NaN or inf among the
            valid points or queries, tensors on different devices.

    Example:
        >>> pts = torch.rand(2, 1000, 3)
        >>> dists, idx = knn(pts[:, :100], pts, 8)                 # (2, 100, 8) each
        >>> bool((idx[..., 0] == torch.arange(100)).all())         # a point is its own nearest
        True
    """
    queries, points, unbatched = _batched(queries, points)
    dists, idx = _knn_op.call(
        queries=queries, points=points, query_lengths=query_lengths, point_lengths=point_lengths, k=k
    )
    return KNN(dists[0], idx[0]) if unbatched else KNN(dists, idx)


def _batched(queries: Any, points: Any) -> tuple[Any, Any, bool]:
    """One unbatched cloud, ``queries`` (M, 3) and ``points`` (N, 3), as a batch of one (as FPS takes an
    (N, 3) cloud); anything else as it is (the op's checks judge it)."""
    if (
        isinstance(queries, torch.Tensor)
        and isinstance(points, torch.Tensor)
        and queries.dim() == 2
        and points.dim() == 2
    ):
        return queries.unsqueeze(0), points.unsqueeze(0), True
    return queries, points, False
