"""The neighbour grid of a point cloud on the torch side, shared by kNN, ball query and chamfer distance.

A cloud batch's grid is one :data:`warpgeo._kernels.grid.GRID` struct (its arrays: ``params``, ``dims``,
``cell_start``, ``sorted_points``, ``sorted_index``, ``rank``) taken from a per-thread :class:`Workspace`
and built by one launch (:func:`build`); small clouds are scanned instead (:func:`method`), float64 ones
after their scale (:func:`scale`). The value checks of a pair of clouds (:func:`check_values`) live here too.
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any

import torch

from . import _launch, _scale, _warp
from ._kernels import grid as kernels

#: Clouds with at most this many points are scanned directly: below it building the grid costs more than
#: it saves (measured on the CPU at k = 16 and 32).
BRUTE_MAX_POINTS = 256
#: On CUDA's algorithms clouds of at most this many points are scanned (one launch, a thread a query, its
#: list in global memory). Measured on an H200 (2026-11-26, ``benchmarks/results/2026-11-26-nvidia-h200-2.md``):
#: the scan took 1.84 ms for 8 x 512 queries of 2,048 points (k = 16) where the grid took 0.81 ms for
#: 8 x 4,096 queries of 16,384; from 4,096 points down to the CPU's limit, as the grid's cost per query does
#: not grow with N.
CUDA_BRUTE_MAX_POINTS = 256
#: Mean points per cell of the kNN grid.
KNN_POINTS_PER_CELL = 2.0
#: Rough cost of one query row, for splitting CPU launches among threads.
ROW_WORK = 256


def method(points: torch.Tensor, chosen: str | None = None) -> str:
    """``"brute"`` (a scan: small clouds), ``"counting"`` (the CPU's grid) or ``"sort"`` (CUDA's grid);
    ``chosen``: forced (tests)."""
    if chosen is not None:
        return chosen
    cuda = _warp.cuda_algorithms(points.device)
    if points.shape[1] <= brute_max_points(cuda):
        return "brute"
    return "sort" if cuda else "counting"


def brute_max_points(cuda: bool) -> int:
    """Clouds up to this size are scanned, on CUDA's algorithms (``cuda``) or the CPU's."""
    return CUDA_BRUTE_MAX_POINTS if cuda else BRUTE_MAX_POINTS


def grid_cells(n: int) -> int:
    """Cells per cloud: the power of two >= N."""
    return 1 << max(n - 1, 1).bit_length()


def cloud(t: torch.Tensor) -> torch.Tensor:
    """A cloud ``(B, N, 3)`` as the kernels take it: :func:`warpgeo._warp.to_compute`, and an empty cloud
    with any strides (NumPy's empty arrays come with zero strides, which no Warp vector array takes) as a
    fresh empty tensor of its shape."""
    t = _warp.to_compute(t)
    if t.numel() == 0 and t.stride(-1) != 1:
        return torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return t


def lengths_arg(t: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """Per-cloud lengths as the kernels take them: int64, empty meaning "all" (the shared placeholder)."""
    if t is None:
        return _launch.empty(torch.int64, device)
    return t if t.dtype == torch.int64 else t.to(torch.int64)


@functools.cache
def no_params(device: torch.device) -> torch.Tensor:
    """An empty ``params`` ``(0, PARAMS)`` (float32 clouds: not scaled), shared per device."""
    return _launch.constant(torch.empty(0, kernels.PARAMS, dtype=torch.float64, device=device))


def arrays(ws: Workspace, batch: int, n: int, dtype: torch.dtype, *, rank: bool) -> dict[str, torch.Tensor]:
    """The arrays of a grid of ``batch`` clouds of ``n`` points of ``dtype`` (the compute precision), by
    :data:`~warpgeo._kernels.grid.GRID_FIELDS` name, taken from ``ws``; ``rank``: the CUDA build's scratch
    (else an empty placeholder)."""
    cap = grid_cells(n)
    return {
        "params": ws.take(torch.float64, batch, kernels.PARAMS),
        "dims": ws.take(torch.int32, batch, 3),
        "cell_start": ws.take(torch.int32, batch, cap + 2),
        "sorted_points": ws.take(dtype, batch, n, 3),
        "sorted_index": ws.take(torch.int32, batch, n),
        "rank": ws.take(torch.int32, batch, n) if rank else _no_arrays(ws.device, dtype)["rank"],
    }


@functools.cache
def _no_arrays(device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Empty arrays of every grid field (launcher constants; the same dict every call: not to be modified)."""
    parts = {
        "params": no_params(device),
        "dims": torch.empty(0, 3, dtype=torch.int32, device=device),
        "cell_start": torch.empty(0, 2, dtype=torch.int32, device=device),
        "sorted_points": torch.empty(0, 0, 3, dtype=dtype, device=device),
        "sorted_index": torch.empty(0, 0, dtype=torch.int32, device=device),
        "rank": torch.empty(0, 0, dtype=torch.int32, device=device),
    }
    return {name: _launch.constant(t) for name, t in parts.items()}


@functools.cache
def no_grid(device: torch.device, dtype: torch.dtype) -> tuple[Any, dict[str, torch.Tensor]]:
    """The empty grid struct of ``dtype`` clouds (a scan builds none) and its arrays."""
    empty = _no_arrays(device, dtype)
    return _launch.struct(kernels.GRID[_warp.KEY[dtype]], **empty), empty


def struct(dtype: torch.dtype, grid: dict[str, torch.Tensor]) -> Any:
    """The grid struct over ``grid``'s arrays (:func:`arrays`): pass it with the arrays held alive.

    Cached by the arrays' addresses and sizes (``(B, N)`` and the cell count fix every shape and stride of
    :func:`arrays`' dense views): a workspace hands out the same memory call after call, and a struct holds
    addresses, not tensors (as ``_launch.struct``'s own cache, whose key reads every tensor's layout)."""
    points = grid["sorted_points"]
    key = (
        dtype,
        points.device,
        tuple(points.shape),
        grid["cell_start"].shape[1],
        grid["rank"].shape[0],
        *(t.data_ptr() for t in grid.values()),
    )
    found = _STRUCTS.get(key)
    if found is None:
        found = _launch.struct(kernels.GRID[_warp.KEY[dtype]], **grid)
        with _STRUCTS_LOCK:
            if len(_STRUCTS) >= _MAX_STRUCTS:
                _STRUCTS.clear()
            _STRUCTS[key] = found
    return found


#: :func:`struct`'s cache (a dict read without the lock: a whole entry is published at once).
_STRUCTS: dict = {}
_STRUCTS_LOCK = threading.Lock()
#: Entries kept before the cache starts over.
_MAX_STRUCTS = 64


def build(table, queries, query_lengths, points, point_lengths, mode, cell_size, chosen, ws):
    """Build the grid of ``points`` (B, N, 3) (one launch): ``(struct, arrays)``, the struct for the search
    kernels' ``grid`` and the arrays it points at (the caller holds them until its launches are done).

    ``table``: the search's module (of the precision), which holds the builds. ``cell_size``: the least cell
    width (ball query, in the caller's units), 0 for kNN. ``chosen``: ``"counting"`` (a thread per cloud, a
    counting sort: the CPU) or ``"sort"`` (a block per cloud, histogram and scan: CUDA's). ``ws``: the
    call's :class:`Workspace`."""
    batch, n = points.shape[0], points.shape[1]
    device = points.device
    if chosen not in ("counting", "sort"):
        raise ValueError(f"internal error: unknown grid method {chosen!r}")
    grid = arrays(ws, batch, n, points.dtype, rank=chosen == "sort")
    args = {
        "queries": queries,
        "query_lengths": query_lengths,
        "points": points,
        "point_lengths": point_lengths,
        "mode": mode,
        "cell_size": float(cell_size),
        "points_per_cell": KNN_POINTS_PER_CELL,
        "scaled": int(points.dtype == torch.float64),
        "grid": struct(points.dtype, grid),
        "stream": ws.stream,
    }
    if chosen == "counting":
        cap = grid_cells(n)
        _launch.launch_rows(table.grid_build_rows, batch, device=device, work_per_row=n + cap, **args)
    else:
        _launch.launch(
            table.grid_build_block,
            batch,
            device=device,
            tiled=True,
            block_dim=kernels.BUILD_BLOCK_DIM,
            **args,
        )
    return args["grid"], grid


def scale(table, queries, query_lengths, points, point_lengths, ws) -> torch.Tensor:
    """float64 clouds' ``params`` (B, PARAMS) with each cloud's scale (one launch of ``table``'s
    ``cloud_scale_rows``; only the scale columns are set), taken from ``ws``."""
    batch = points.shape[0]
    params = ws.take(torch.float64, batch, kernels.PARAMS)
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
        stream=ws.stream,
    )
    return params


#: How :func:`check_values`' messages name the arguments: the two clouds, and each one's lengths with the
#: letter of its size.
_NAMES = ("queries", "points", "query_lengths", "M", "point_lengths", "N")


def check_values(queries, points, query_lengths, point_lengths, names=_NAMES, radius=None) -> None:
    """The checks that need tensor values: one device-to-host transfer for all of them (``names``: as
    :data:`_NAMES`, for an op whose arguments are called otherwise: chamfer's ``x``, ``y``).

    Finiteness of the valid rows: one ``isfinite`` pass over each cloud (the rows beyond the lengths
    masked); float64 clouds: the span of their magnitudes, queries, points and ``radius`` (a ball query's)
    together, within :data:`warpgeo._scale.MAX_SPAN` (distances exact).
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
    too_wide = top = low = None
    if points.dtype == torch.float64:
        too_wide, top, low = _scale.span_flags([(queries, query_lengths), (points, point_lengths)], radius)
    flags = torch.stack(
        [
            out_of_range(query_lengths, m),
            out_of_range(point_lengths, n),
            bad_queries,
            bad_points,
            zero if too_wide is None else too_wide,
        ]
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
    if flags[4]:
        raise ValueError(_scale.span_message(f"{q} and {p}", top, low))


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
