"""``torch_cluster``'s point-cloud functions (``fps``, ``knn``, ``radius``, ``knn_graph``, ``radius_graph``,
``nearest``), as PyTorch Geometric's point models call them, backed by warpgeo's ops.

::

    from warpgeo.compat import torch_cluster       # was: import torch_cluster
    # or warpgeo.compat.install() first: then PyTorch Geometric (< 2.8, which imports torch_cluster) uses it

Points are rows ``(N, F)`` of one tensor, and a sorted *batch vector* ``batch[i]`` names the example of row
``i`` (None: one example). Results are global row indices:

=====================================================================  ========================================
``fps(src, batch=None, ratio=0.5, random_start=True, batch_size=None,   int64 ``(sum_b ceil(ratio * N_b),)``,
ptr=None)``                                                            example after example
``knn(x, y, k, batch_x=None, batch_y=None, cosine=False,                ``(2, E)``: row 0 indexes ``y``, row 1
num_workers=1, batch_size=None)``                                      its k nearest ``x``, nearest first
``radius(x, y, r, batch_x=None, batch_y=None, max_num_neighbors=32,     ``(2, E)``: the first
num_workers=1, batch_size=None, ignore_same_index=False)``             ``max_num_neighbors`` ``x`` (index
                                                                       order) at distance ``< r``
``knn_graph(x, k, batch=None, loop=False, flow="source_to_target",      ``(2, E)`` edges ``(neighbour, centre)``
cosine=False, num_workers=1, batch_size=None)``                        (``"target_to_source"``: reversed)
``radius_graph(x, r, batch=None, loop=False, max_num_neighbors=32,      the same for ``radius``
flow="source_to_target", num_workers=1, batch_size=None)``
``nearest(x, y, batch_x=None, batch_y=None)``                          int64 ``(N,)``: each ``x``'s nearest ``y``
=====================================================================  ========================================

Points of dimension 1 to 3 (torch_cluster's own examples are 2-D) are padded with zeros to 3 and run on
:func:`warpgeo.farthest_point_sampling`, :func:`warpgeo.knn` and :func:`warpgeo.ball_query` (memory
``O(output)``); higher dimensions (features) fall back to plain torch (``O(N * M)`` memory per example).
``cosine=True`` searches the rows scaled to unit length (the same order as the cosine distance).
``num_workers`` is accepted and ignored.

As torch_cluster's CUDA version: ``radius`` keeps the first ``max_num_neighbors`` points in index order
(its CPU version keeps a KD-tree's order, "picked randomly" in its documentation); ``knn`` lists neighbours
nearest first, ties to the lowest index; ``knn_graph`` without ``loop`` searches ``k + 1`` and drops the
self-edge. Differences: FPS starts from ``torch``'s generator at a uniformly drawn point
(``random_start=True``, the default as in torch_cluster) and compares exact distances (torch_cluster starts
its distances at a finite constant); ``max_num_neighbors=None`` means every neighbour.

TorchScript: ``fps``, ``knn``, ``radius``, ``knn_graph``, ``radius_graph`` and ``nearest`` script with
torch_cluster's argument types (``torch.jit.script(knn)``, or a scripted function or module calling them).
Scripted, each calls its registered op ``torch.ops.warpgeo_torch_cluster.<name>``, which runs the same
Python implementation as an eager call (a scripted module saves and loads wherever this module is imported);
a bad argument then surfaces as the interpreter's RuntimeError quoting the ValueError.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

import warpgeo
from warpgeo.compat._common import pad3, padded_fps, padded_knn, shape_of

__all__ = [
    "fps",
    "graclus_cluster",
    "grid_cluster",
    "knn",
    "knn_graph",
    "nearest",
    "radius",
    "radius_graph",
    "random_walk",
]


def _rows(t, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dim() not in (1, 2):
        raise ValueError(f"{name} must be a tensor of shape (N, F) or (N,); got {shape_of(t)}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor; got {t.dtype}")
    return t.view(-1, 1) if t.dim() == 1 else t


def _ptr(batch, rows: int, batch_size: int, device, name: str) -> torch.Tensor:
    """``(batch_size + 1,)`` boundaries of the examples of a sorted batch vector (None: one example)."""
    if batch is None:
        return torch.tensor([0] + [rows] * batch_size, device=device)
    if not isinstance(batch, torch.Tensor) or batch.shape != (rows,):
        raise ValueError(f"{name} must be a LongTensor of shape ({rows},); got {shape_of(batch)}")
    batch = batch.to(device=device, dtype=torch.int64)
    return torch.bucketize(torch.arange(batch_size + 1, device=device), batch)


def _batch_size(batch_size, *batches) -> int:
    if batch_size is not None:
        return int(batch_size)
    sizes = [int(b.max()) + 1 for b in batches if b is not None and b.numel() > 0]
    return max(sizes, default=1)


def _pack(points: torch.Tensor, ptr: torch.Tensor):
    """Rows ``(P, F)`` with boundaries ``ptr`` -> padded ``(B, L, F)``, lengths ``(B,)`` and the global row
    of each padded slot ``(B, L)`` (-1 for padding)."""
    counts = ptr[1:] - ptr[:-1]
    batch = counts.shape[0]
    longest = int(counts.max()) if batch else 0
    slot = torch.arange(longest, device=points.device)
    rows = ptr[:-1, None] + slot[None, :]
    valid = slot[None, :] < counts[:, None]
    rows = torch.where(valid, rows, -1)
    padded = points[rows.clamp_min(0)] * valid[..., None].to(points.dtype)
    return padded, counts, rows


def _prepare(t: torch.Tensor, cosine: bool = False) -> torch.Tensor:
    if cosine:
        t = F.normalize(t, dim=-1)
    return pad3(t) if t.shape[-1] <= 3 else t


def fps(
    src: Tensor,
    batch: Tensor | None = None,
    ratio: Tensor | float | None = None,
    random_start: bool = True,
    batch_size: int | None = None,
    ptr: Tensor | list[int] | None = None,
) -> Tensor:
    """Farthest point sampling, as ``torch_cluster.fps``: ``ceil(ratio * N_b)`` samples of each example, in
    greedy farthest-point order, as global int64 row indices, example after example.

    Args:
        src: ``(N, F)`` points. batch: sorted example of each row (None: one example).
        ratio: a float or a tensor (scalar or one per example) in (0, 1]; default 0.5.
        random_start: start at a random point of each example (torch's generator); else at its first row.
        batch_size: the number of examples (default: ``batch.max() + 1``). ptr: boundaries instead of batch.

    Raises:
        ValueError: a ratio outside (0, 1] (NaN included), or a ratio tensor that is neither one value nor
            one per example.
    """
    if torch.jit.is_scripting():
        r = (
            ratio
            if isinstance(ratio, Tensor)
            else torch.tensor(0.5 if ratio is None else ratio, dtype=src.dtype)
        )
        bounds: Tensor | None = None
        if ptr is not None:
            bounds = torch.tensor(ptr, device=src.device) if isinstance(ptr, list) else ptr
        return torch.ops.warpgeo_torch_cluster.fps(src, batch, r, random_start, batch_size, bounds)
    return _fps(src, batch, ratio, random_start, batch_size, ptr)


def _fps(src, batch, ratio, random_start, batch_size, ptr) -> torch.Tensor:
    src = _rows(src, "src")
    device = src.device
    if ptr is not None:
        ptr = torch.as_tensor(ptr, device=device, dtype=torch.int64)
    else:
        ptr = _ptr(batch, src.shape[0], _batch_size(batch_size, batch), device, "batch")
    r = torch.as_tensor(0.5 if ratio is None else ratio, dtype=src.dtype, device=device)
    if not bool(((r > 0) & (r <= 1)).all()):  # written so that NaN fails
        raise ValueError(f"ratio must lie in (0, 1]; got {r.tolist()}")
    padded, counts, _rows_of = _pack(src, ptr)
    if not (r.dim() == 0 or (r.dim() == 1 and r.shape[0] in (1, counts.shape[0]))):
        raise ValueError(
            f"ratio must be one value or one per example ({counts.shape[0]},); got shape {tuple(r.shape)}"
        )
    samples = torch.ceil(counts.to(src.dtype) * r).to(torch.int64).expand(counts.shape).contiguous()
    if counts.numel() == 0 or int(samples.max()) == 0:
        return torch.empty(0, dtype=torch.int64, device=device)
    idx = padded_fps(padded.detach(), samples, lengths=counts, random_start=random_start)
    keep = torch.arange(idx.shape[1], device=device)[None, :] < samples[:, None]
    return (idx + ptr[:-1, None])[keep]


def knn(
    x: Tensor,
    y: Tensor,
    k: int,
    batch_x: Tensor | None = None,
    batch_y: Tensor | None = None,
    cosine: bool = False,
    num_workers: int = 1,
    batch_size: int | None = None,
) -> Tensor:
    """For each row of ``y`` its ``k`` nearest rows of ``x`` in the same example, as ``torch_cluster.knn``.

    Args:
        x: ``(N, F)``; y: ``(M, F)``. k: neighbours per row of ``y``.
        batch_x, batch_y: sorted example vectors (None: one example). cosine: by cosine distance.
        num_workers: ignored. batch_size: the number of examples (default: the largest batch entry + 1).

    Returns:
        int64 ``(2, E)``: ``[row in y, row in x]``, nearest first per row of ``y``; fewer than ``k`` where an
        example of ``x`` has fewer points.
    """
    if torch.jit.is_scripting():
        return torch.ops.warpgeo_torch_cluster.knn(x, y, k, batch_x, batch_y, cosine, num_workers, batch_size)
    return _knn(x, y, k, batch_x, batch_y, cosine, num_workers, batch_size)


def _knn(x, y, k, batch_x, batch_y, cosine, num_workers, batch_size) -> torch.Tensor:
    x, y = _rows(x, "x"), _rows(y, "y")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1; got {k!r}")
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty(2, 0, dtype=torch.long, device=x.device)
    size = _batch_size(batch_size, batch_x, batch_y)
    xp, x_len, x_rows = _pack(
        _prepare(x.detach(), cosine), _ptr(batch_x, x.shape[0], size, x.device, "batch_x")
    )
    yp, y_len, y_rows = _pack(
        _prepare(y.detach(), cosine), _ptr(batch_y, y.shape[0], size, x.device, "batch_y")
    )
    _, idx = padded_knn(yp, xp, k, y_len, x_len)
    return _edges(idx, x_rows, y_rows)


def _edges(idx: torch.Tensor, x_rows: torch.Tensor, y_rows: torch.Tensor) -> torch.Tensor:
    """Padded neighbour slots ``(B, L_y, k)`` -> ``(2, E)`` global ``[y row, x row]``, padding dropped."""
    ok = (idx >= 0) & (y_rows >= 0)[..., None]
    col = torch.gather(x_rows, 1, idx.clamp_min(0).reshape(idx.shape[0], -1)).reshape(idx.shape)
    row = y_rows[..., None].expand_as(idx)
    return torch.stack([row[ok], col[ok]])


def radius(
    x: Tensor,
    y: Tensor,
    r: float,
    batch_x: Tensor | None = None,
    batch_y: Tensor | None = None,
    max_num_neighbors: int | None = 32,
    num_workers: int = 1,
    batch_size: int | None = None,
    ignore_same_index: bool = False,
) -> Tensor:
    """For each row of ``y`` the rows of ``x`` (same example) at distance ``< r``, as ``torch_cluster.radius``.

    The first ``max_num_neighbors`` in index order (None: all); ``ignore_same_index`` skips the row of ``x``
    with the row's own index (``radius_graph`` without loops). Returns int64 ``(2, E)``: ``[row in y, row
    in x]``."""
    if torch.jit.is_scripting():
        return torch.ops.warpgeo_torch_cluster.radius(
            x, y, r, batch_x, batch_y, max_num_neighbors, num_workers, batch_size, ignore_same_index
        )
    return _radius(x, y, r, batch_x, batch_y, max_num_neighbors, num_workers, batch_size, ignore_same_index)


def _radius(
    x, y, r, batch_x, batch_y, max_num_neighbors, num_workers, batch_size, ignore_same_index
) -> torch.Tensor:
    x, y = _rows(x, "x"), _rows(y, "y")
    if isinstance(r, torch.Tensor):
        r = float(r)
    if not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0):
        raise ValueError(f"r must be a finite number > 0; got {r!r}")
    if x.numel() == 0 or y.numel() == 0:
        return torch.empty(2, 0, dtype=torch.long, device=x.device)
    size = _batch_size(batch_size, batch_x, batch_y)
    xp, x_len, x_rows = _pack(_prepare(x.detach()), _ptr(batch_x, x.shape[0], size, x.device, "batch_x"))
    yp, y_len, y_rows = _pack(_prepare(y.detach()), _ptr(batch_y, y.shape[0], size, x.device, "batch_y"))
    limit = xp.shape[1] if max_num_neighbors is None else int(max_num_neighbors)
    if limit < 1 or xp.shape[1] == 0:
        return torch.empty(2, 0, dtype=torch.long, device=x.device)
    k = min(limit + int(ignore_same_index), max(xp.shape[1], 1))
    idx = _ball(yp, xp, float(r), k, y_len, x_len)
    if ignore_same_index:
        col = torch.gather(x_rows, 1, idx.clamp_min(0).reshape(idx.shape[0], -1)).reshape(idx.shape)
        idx = torch.where(col == y_rows[..., None], -1, idx)
        # move the dropped slot to the end of its row (stable: index order kept), then cut to the limit
        order = torch.sort((idx < 0).to(torch.int8), dim=-1, stable=True).indices
        idx = torch.gather(idx, 2, order)[..., :limit]
    return _edges(idx, x_rows, y_rows)


def _ball(queries, points, r: float, k: int, query_lengths, point_lengths) -> torch.Tensor:
    """``(B, M, k)``: the first k valid points (index order) at distance ``< r``, -1 padding."""
    if queries.shape[-1] == 3:
        return warpgeo.ball_query(
            queries, points, r, k, query_lengths=query_lengths, point_lengths=point_lengths, inclusive=False
        )
    m, n = queries.shape[1], points.shape[1]
    device = queries.device
    d = torch.cdist(queries, points, compute_mode="donot_use_mm_for_euclid_dist")
    inside = d < r
    inside &= (torch.arange(n, device=device)[None, :] < point_lengths[:, None])[:, None, :]
    inside &= (torch.arange(m, device=device)[None, :] < query_lengths[:, None])[..., None]
    key = torch.where(inside, torch.arange(n, device=device), n)
    first = torch.sort(key, dim=-1).values[..., :k]
    idx = torch.where(first < n, first, -1)
    return F.pad(idx, (0, k - idx.shape[-1]), value=-1) if idx.shape[-1] < k else idx


def knn_graph(
    x: Tensor,
    k: int,
    batch: Tensor | None = None,
    loop: bool = False,
    flow: str = "source_to_target",
    cosine: bool = False,
    num_workers: int = 1,
    batch_size: int | None = None,
) -> Tensor:
    """The k-nearest-neighbour graph of the rows of ``x``, as ``torch_cluster.knn_graph``.

    Returns int64 ``(2, E)``: with ``flow="source_to_target"`` (the default) edges ``(neighbour j, centre
    i)``, with ``"target_to_source"`` ``(i, j)``. Without ``loop`` it searches ``k + 1`` and drops the edge
    to the point itself."""
    if torch.jit.is_scripting():
        return torch.ops.warpgeo_torch_cluster.knn_graph(
            x, k, batch, loop, flow, cosine, num_workers, batch_size
        )
    return _knn_graph(x, k, batch, loop, flow, cosine, num_workers, batch_size)


def _knn_graph(x, k, batch, loop, flow, cosine, num_workers, batch_size) -> torch.Tensor:
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f'flow must be "source_to_target" or "target_to_source"; got {flow!r}')
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1; got {k!r}")
    edge_index = _knn(x, x, k if loop else k + 1, batch, batch, cosine, num_workers, batch_size)
    row, col = edge_index[0], edge_index[1]
    if not loop:
        keep = row != col
        row, col = row[keep], col[keep]
    if flow == "source_to_target":
        row, col = col, row
    return torch.stack([row, col])


def radius_graph(
    x: Tensor,
    r: float,
    batch: Tensor | None = None,
    loop: bool = False,
    max_num_neighbors: int | None = 32,
    flow: str = "source_to_target",
    num_workers: int = 1,
    batch_size: int | None = None,
) -> Tensor:
    """The graph of the rows of ``x`` within distance ``< r``, as ``torch_cluster.radius_graph``: at most
    ``max_num_neighbors`` per point (self excluded unless ``loop``). Returns int64 ``(2, E)``; ``flow`` as in
    :func:`knn_graph`."""
    if torch.jit.is_scripting():
        return torch.ops.warpgeo_torch_cluster.radius_graph(
            x, r, batch, loop, max_num_neighbors, flow, num_workers, batch_size
        )
    return _radius_graph(x, r, batch, loop, max_num_neighbors, flow, num_workers, batch_size)


def _radius_graph(x, r, batch, loop, max_num_neighbors, flow, num_workers, batch_size) -> torch.Tensor:
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f'flow must be "source_to_target" or "target_to_source"; got {flow!r}')
    edge_index = _radius(x, x, r, batch, batch, max_num_neighbors, num_workers, batch_size, not loop)
    if flow == "source_to_target":
        return torch.stack([edge_index[1], edge_index[0]])
    return edge_index


def nearest(x: Tensor, y: Tensor, batch_x: Tensor | None = None, batch_y: Tensor | None = None) -> Tensor:
    """int64 ``(N,)``: for each row of ``x`` its nearest row of ``y`` in the same example, as
    ``torch_cluster.nearest`` (-1 where that example of ``y`` is empty)."""
    if torch.jit.is_scripting():
        return torch.ops.warpgeo_torch_cluster.nearest(x, y, batch_x, batch_y)
    return _nearest(x, y, batch_x, batch_y)


def _nearest(x, y, batch_x, batch_y) -> torch.Tensor:
    x, y = _rows(x, "x"), _rows(y, "y")
    if y.numel() == 0:
        raise ValueError("y must hold at least one point")
    edge_index = _knn(y, x, 1, batch_y, batch_x, False, 1, None)
    out = torch.full((x.shape[0],), -1, dtype=torch.int64, device=x.device)
    out[edge_index[0]] = edge_index[1]
    return out


# The ops a scripted call reaches (TorchScript cannot compile the implementations above, but it can call
# any op registered with the dispatcher): each runs the eager implementation, its schema torch_cluster's
# types. The results are fresh index tensors (no aliasing of inputs) and carry no gradient.
_SCHEMAS = {
    "fps": (
        _fps,
        "(Tensor src, Tensor? batch, Tensor ratio, bool random_start, int? batch_size, Tensor? ptr)",
    ),
    "knn": (
        _knn,
        "(Tensor x, Tensor y, int k, Tensor? batch_x, Tensor? batch_y, bool cosine, int num_workers, "
        "int? batch_size)",
    ),
    "radius": (
        _radius,
        "(Tensor x, Tensor y, float r, Tensor? batch_x, Tensor? batch_y, int? max_num_neighbors, "
        "int num_workers, int? batch_size, bool ignore_same_index)",
    ),
    "knn_graph": (
        _knn_graph,
        "(Tensor x, int k, Tensor? batch, bool loop, str flow, bool cosine, int num_workers, int? batch_size)",
    ),
    "radius_graph": (
        _radius_graph,
        "(Tensor x, float r, Tensor? batch, bool loop, int? max_num_neighbors, str flow, int num_workers, "
        "int? batch_size)",
    ),
    "nearest": (_nearest, "(Tensor x, Tensor y, Tensor? batch_x, Tensor? batch_y)"),
}
for _name, (_impl, _args) in _SCHEMAS.items():
    torch.library.custom_op(
        f"warpgeo_torch_cluster::{_name}", _impl, mutates_args=(), schema=f"{_args} -> Tensor"
    )
del _name, _impl, _args


# --------------------------------------------------------------------------------------------------------
# the rest of torch_cluster's names (PyTorch Geometric imports them at its own import)
# --------------------------------------------------------------------------------------------------------


def grid_cluster(pos, size, start=None, end=None) -> torch.Tensor:
    """Voxel ids, as ``torch_cluster.grid_cluster`` (plain torch): each point's voxel of a grid of ``size``
    from ``start`` (default: the minimum of ``pos``) to ``end`` (default: the maximum), numbered with the
    first dimension fastest."""
    pos = _rows(pos, "pos")
    size = torch.as_tensor(size, dtype=pos.dtype, device=pos.device).reshape(-1)
    if size.numel() != pos.shape[1]:
        raise ValueError(f"size must have one entry per dimension ({pos.shape[1]}); got {size.numel()}")
    start = pos.amin(0) if start is None else torch.as_tensor(start, dtype=pos.dtype, device=pos.device)
    end = pos.amax(0) if end is None else torch.as_tensor(end, dtype=pos.dtype, device=pos.device)
    num_voxels = ((end - start) / size).to(torch.int64) + 1
    stride = torch.cat([num_voxels.new_ones(1), num_voxels.cumprod(0)[:-1]])
    return (((pos - start) / size).to(torch.int64) * stride).sum(1)


def _not_a_point_op(name: str):
    def missing(*args, **kwargs):
        raise NotImplementedError(
            f"warpgeo.compat.torch_cluster has no {name} (a graph op, not a point-cloud op): install "
            "torch_cluster for it (warpgeo.compat.install() leaves an importable torch_cluster alone)"
        )

    missing.__name__ = name
    missing.__doc__ = f"Not provided: calling it raises NotImplementedError ({name} is a graph op)."
    return missing


graclus_cluster = _not_a_point_op("graclus_cluster")
random_walk = _not_a_point_op("random_walk")
