"""``pointops`` names (Point Transformer / PointWeb / PAConv), backed by warpgeo's Warp kernels.

``pointops`` works on *packed* batches: the clouds of a batch are concatenated into one ``(N, 3)`` tensor
and ``offset`` holds the cumulative point counts, e.g. clouds of 100 and 50 points -> ``offset = [100, 150]``
(int32). Sampling takes ``new_offset``, the cumulative sample counts, and returns int32 indices into the
packed cloud::

    from warpgeo.compat import pointops

    offset = torch.tensor([100, 150], dtype=torch.int32)
    new_offset = torch.tensor([25, 37], dtype=torch.int32)           # 25 from the first cloud, 12 from the second
    idx = pointops.furthestsampling(xyz, offset, new_offset)          # (37,) int32, global indices
    new_xyz = xyz[idx.long()]

Two naming families are served. POSTECH's (Point Transformer, PointWeb, PAConv: ``lib/pointops``):

=================================================================  ========================================
``furthestsampling(xyz, offset, new_offset)``                      packed ``(N, 3)`` -> int32 ``(M,)``
``furthestsampling(xyz, m)``                                       older batched form: int32 ``(B, m)``
``knnquery(nsample, xyz, new_xyz, offset, new_offset)``            -> ``(idx int32 (M, nsample), dist)``
``queryandgroup(nsample, xyz, new_xyz, feat, idx, offset,          -> ``(M, nsample, 3 + C)`` (``use_xyz``)
new_offset, use_xyz=True)``                                        or ``(M, nsample, C)``
``grouping(feat (N, C), idx (M, nsample))``                        -> ``(M, nsample, C)``
``interpolation(xyz, new_xyz, feat, offset, new_offset, k=3)``     -> ``(M, C)``, inverse-distance weights
``subtraction(input1, input2, idx)``, ``aggregation(input,         Point Transformer's vector-attention
position, weight, idx)``                                           helpers (plain torch)
``gathering(features, idx)``                                       ``(B, C, N)``, ``(B, M)`` -> ``(B, C, M)``
=================================================================  ========================================

Pointcept's (``libs/pointops``; Point Transformer v1-v3):

=================================================================  ========================================
``farthest_point_sampling(xyz, offset, new_offset)``               as ``furthestsampling``
``knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None)``  -> ``(idx int32, dist)``, -1 padded
``ball_query(nsample, max_radius, min_radius, xyz, offset,         the nearest ``nsample`` with
new_xyz=None, new_offset=None)``                                   ``min_radius <= d < max_radius``
``grouping(idx, feat, xyz, new_xyz=None, with_xyz=False)``         -> ``(M, nsample, [3 +] C)``, 0 for -1
``knn_query_and_group(feat, xyz, offset, new_xyz, new_offset,      -> ``(grouped, idx)``
idx, nsample, with_xyz)``, ``ball_query_and_group(...)``
``interpolation(...)``, ``interpolation2(...)``                    as above
=================================================================  ========================================

``grouping`` serves both families: an integer first argument is Pointcept's ``idx``. Neighbour queries run
on warpgeo's :func:`~warpgeo.knn` (grid search, memory ``O(output)``) over the clouds padded to one batch,
and grouping / interpolation on :func:`~warpgeo.gather_points` (interpolation fused with ``weight=``):
gradients reach ``feat`` and ``xyz``.

Differences from the extensions: any float dtype, int32 or int64 offsets and indices, CPU as well as CUDA,
and a clear error (instead of an out-of-bounds read) when a cloud is asked for more samples than it holds.
Where a cloud has fewer than ``nsample`` points, POSTECH's ``knnquery`` repeats the cloud's first point (as
the original) with distance ``inf`` (the original: 1e5), so its weight in ``interpolation`` is 0; ties go
to the lowest index.
"""

from __future__ import annotations

import math

import torch

import warpgeo
from warpgeo.compat._common import positive_int, shape_of

__all__ = [
    "aggregation",
    "ball_query",
    "ball_query_and_group",
    "farthest_point_sampling",
    "furthestsampling",
    "gathering",
    "grouping",
    "interpolation",
    "interpolation2",
    "knn_query",
    "knn_query_and_group",
    "knnquery",
    "queryandgroup",
    "subtraction",
]


def furthestsampling(
    xyz: torch.Tensor, offset: torch.Tensor | int, new_offset: torch.Tensor | None = None
) -> torch.Tensor:
    """Farthest point sampling of packed clouds, as ``pointops.furthestsampling``.

    Each cloud ``b`` (points ``offset[b-1] .. offset[b]-1``) gives ``new_offset[b] - new_offset[b-1]``
    samples in greedy farthest-point order, starting at its first point (ties go to the lowest index).

    Args:
        xyz: packed points ``(N, 3)``, float.
        offset: int32/int64 ``(B,)`` cumulative point counts, ``offset[-1] == N``.
        new_offset: int32/int64 ``(B,)`` cumulative sample counts.

    Returns:
        int32 ``(new_offset[-1],)``: indices into ``xyz`` (global, not per cloud), cloud after cloud.

    The older batched ``pointops`` form ``furthestsampling(xyz (B, N, 3), m: int)`` -> int32 ``(B, m)``
    is accepted too (``m <= N``).

    Raises:
        ValueError: bad shapes, offsets that decrease or do not end at N, a cloud asked for more samples
            than it has points.
        TypeError: non-integer offsets, non-float points.
    """
    if isinstance(xyz, torch.Tensor) and xyz.dim() == 3 and new_offset is None:
        return _batched(xyz, offset)
    if not isinstance(xyz, torch.Tensor) or xyz.dim() != 2 or xyz.shape[-1] != 3:
        raise ValueError(f"xyz must be packed points of shape (N, 3); got {shape_of(xyz)}")
    counts = _counts(offset, "offset", xyz.device)
    new_counts = _counts(new_offset, "new_offset", xyz.device)
    if counts.shape != new_counts.shape:
        raise ValueError(
            f"offset and new_offset must have the same length (one entry per cloud); "
            f"got {counts.shape[0]} and {new_counts.shape[0]}"
        )
    # One host read for all the value checks (pointops itself reads offsets on the host too).
    host_counts, host_new = counts.tolist(), new_counts.tolist()
    if any(c < 0 for c in host_counts) or sum(host_counts) != xyz.shape[0]:
        raise ValueError(
            f"offset must be non-decreasing and end at N={xyz.shape[0]}; got {_cumsum(host_counts)}"
        )
    if any(c < 0 for c in host_new):
        raise ValueError(f"new_offset must be non-decreasing; got {_cumsum(host_new)}")
    over = [b for b, (c, k) in enumerate(zip(host_counts, host_new, strict=True)) if k > c]
    if over:
        b = over[0]
        raise ValueError(
            f"new_offset asks cloud {b} for {host_new[b]} samples but offset gives it only {host_counts[b]} points"
        )
    total = sum(host_new)
    if total == 0:
        return torch.empty(0, dtype=torch.int32, device=xyz.device)

    batch, n_max = len(host_counts), max(host_counts)
    starts = counts.cumsum(0) - counts
    local = torch.arange(n_max, device=xyz.device)
    valid = local[None, :] < counts[:, None]  # (B, n_max)
    gather_at = torch.where(
        valid, starts[:, None] + local[None, :], torch.zeros_like(valid, dtype=torch.int64)
    )
    padded = xyz[gather_at.reshape(-1)].reshape(batch, n_max, 3)
    # A cloud that gives no samples still needs K >= 1 for the op; its row is dropped below.
    idx = warpgeo.farthest_point_sampling(padded, new_counts.clamp(min=1), lengths=counts)
    keep = torch.arange(idx.shape[1], device=xyz.device)[None, :] < new_counts[:, None]
    return (idx + starts[:, None])[keep].to(torch.int32)


def gathering(features: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Gather point features, as ``pointops.gathering``; differentiable w.r.t. ``features``.

    Args:
        features: ``(B, C, N)`` float tensor.
        idx: ``(B, M)`` int32 (or int64) indices in ``[0, N)``.

    Returns:
        ``(B, C, M)``: ``out[b, c, m] = features[b, c, idx[b, m]]``.

    Raises:
        ValueError: wrong shapes. IndexError: an index outside ``[0, N)``.
    """
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        raise ValueError(f"idx must have shape (B, M); got {shape_of(idx)}")
    return warpgeo.gather_points(features, idx)


#: Pointcept's name for the same sampling.
farthest_point_sampling = furthestsampling


# --------------------------------------------------------------------------------------------------------
# neighbour queries on packed clouds
# --------------------------------------------------------------------------------------------------------


def _packed(xyz: torch.Tensor, offset, name: str) -> tuple[list[int], torch.Tensor]:
    """Per-cloud sizes (host list) and starts (tensor) of packed ``xyz`` ``(N, 3)`` with cumulative ``offset``."""
    if not isinstance(xyz, torch.Tensor) or xyz.dim() != 2 or xyz.shape[-1] != 3:
        raise ValueError(f"{name} must be packed points of shape (N, 3); got {shape_of(xyz)}")
    counts = _counts(offset, "offset" if name == "xyz" else "new_offset", xyz.device)
    host = counts.tolist()  # pointops reads offsets on the host too
    if any(c < 0 for c in host) or sum(host) != xyz.shape[0]:
        which = "offset" if name == "xyz" else "new_offset"
        raise ValueError(
            f"{which} must be non-decreasing and end at the number of {name} rows, {xyz.shape[0]}; "
            f"got {_cumsum(host)}"
        )
    return host, counts.cumsum(0) - counts


def _pad(xyz: torch.Tensor, sizes: list[int], starts: torch.Tensor) -> torch.Tensor:
    """Packed ``(N, 3)`` -> ``(B, max(sizes), 3)`` (rows past a cloud's size repeat a valid row or are 0)."""
    width = max(max(sizes, default=0), 1)
    local = torch.arange(width, device=xyz.device)
    sizes_t = torch.tensor(sizes, device=xyz.device)
    at = torch.where(local[None, :] < sizes_t[:, None], starts[:, None] + local[None, :], 0)
    if xyz.shape[0] == 0:
        return xyz.new_zeros(len(sizes), width, 3)
    return xyz[at.reshape(-1)].reshape(len(sizes), width, 3)


def _packed_knn(nsample, xyz, offset, new_xyz, new_offset):
    """k nearest neighbours of packed queries among packed points: global int64 idx ``(M, k)`` (-1 padded),
    local-cloud starts of each query row ``(M,)`` and distances ``(M, k)`` (inf padded)."""
    nsample = positive_int(nsample, "nsample")
    if new_xyz is None:
        new_xyz, new_offset = xyz, offset
    sizes, starts = _packed(xyz, offset, "xyz")
    new_sizes, new_starts = _packed(new_xyz, new_offset, "new_xyz")
    if len(sizes) != len(new_sizes):
        raise ValueError(
            f"offset and new_offset must have the same length (one entry per cloud); "
            f"got {len(sizes)} and {len(new_sizes)}"
        )
    device = xyz.device
    points = _pad(xyz, sizes, starts)
    queries = _pad(new_xyz.to(xyz.dtype), new_sizes, new_starts)
    lengths = torch.tensor(sizes, device=device)
    new_lengths = torch.tensor(new_sizes, device=device)
    dist, idx = warpgeo.knn(queries, points, nsample, query_lengths=new_lengths, point_lengths=lengths)
    keep = torch.arange(queries.shape[1], device=device)[None, :] < new_lengths[:, None]
    row_start = starts[:, None].expand(-1, queries.shape[1])[keep]  # (M,)
    idx = idx[keep]
    idx = torch.where(idx >= 0, idx + row_start[:, None], idx)
    return idx, row_start, dist[keep]


def knnquery(nsample, xyz, new_xyz, offset, new_offset):
    """POSTECH ``pointops.knnquery``: the ``nsample`` nearest points (in the same cloud) of each query.

    Args:
        nsample: neighbours per query.
        xyz: packed points ``(N, 3)``; ``offset``: their cumulative cloud sizes ``(B,)``.
        new_xyz: packed queries ``(M, 3)`` (None: ``xyz``); ``new_offset``: their cumulative sizes.

    Returns:
        ``(idx, dist)``: int32 ``(M, nsample)`` indices into ``xyz``, nearest first (ties: lowest index),
        and Euclidean distances ``(M, nsample)``. A cloud with fewer than ``nsample`` points repeats its
        first point, at distance ``inf``.
    """
    idx, row_start, dist = _packed_knn(nsample, xyz, offset, new_xyz, new_offset)
    idx = torch.where(idx >= 0, idx, row_start[:, None].expand_as(idx))
    return idx.to(torch.int32), dist


def knn_query(nsample, xyz, offset, new_xyz=None, new_offset=None):
    """Pointcept ``pointops.knn_query``: as :func:`knnquery` (argument order of Pointcept), ``-1`` padded.

    Returns:
        ``(idx int32 (M, nsample), dist (M, nsample))``; ``-1`` / ``inf`` where a cloud is too small.
    """
    idx, _, dist = _packed_knn(nsample, xyz, offset, new_xyz, new_offset)
    return idx.to(torch.int32), dist


def ball_query(nsample, max_radius, min_radius, xyz, offset, new_xyz=None, new_offset=None):
    """Pointcept ``pointops.ball_query``: the ``nsample`` nearest points with ``min_radius <= d < max_radius``.

    Returns:
        ``(idx int32 (M, nsample), dist (M, nsample))``, nearest first, ``-1`` / ``inf`` padded.
    """
    max_radius, min_radius = float(max_radius), float(min_radius)
    if not (math.isfinite(max_radius) and max_radius > 0 and 0 <= min_radius < max_radius):
        raise ValueError(f"need 0 <= min_radius < max_radius (finite); got {min_radius}, {max_radius}")
    nsample = positive_int(nsample, "nsample")
    k = nsample
    while True:
        idx, _, dist = _packed_knn(k, xyz, offset, new_xyz, new_offset)
        inner = int((dist < min_radius).sum(dim=1).max()) if dist.numel() and min_radius > 0 else 0
        # the annulus's nearest nsample lie among the k nearest once k covers the points inside min_radius
        if k >= nsample + inner or k >= xyz.shape[0]:
            break
        k = nsample + inner
    ok = (dist >= min_radius) & (dist < max_radius) & (idx >= 0)
    # move the kept neighbours to the front, in order (a stable sort on "not kept")
    order = torch.sort((~ok).to(torch.int8), dim=1, stable=True).indices[:, :nsample]
    ok = torch.gather(ok, 1, order)
    idx = torch.where(ok, torch.gather(idx, 1, order), -1)
    dist = torch.where(ok, torch.gather(dist, 1, order), torch.inf)
    if idx.shape[1] < nsample:  # fewer points than nsample in every cloud
        pad = nsample - idx.shape[1]
        idx = torch.cat([idx, idx.new_full((idx.shape[0], pad), -1)], dim=1)
        dist = torch.cat([dist, dist.new_full((dist.shape[0], pad), torch.inf)], dim=1)
    return idx.to(torch.int32), dist


# --------------------------------------------------------------------------------------------------------
# grouping and interpolation (differentiable through warpgeo.gather_points)
# --------------------------------------------------------------------------------------------------------


def _group(values: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``values (N, C)``, ``idx (M, nsample)`` -> ``(M, nsample, C)``; 0 where idx is -1."""
    if not isinstance(values, torch.Tensor) or values.dim() != 2:
        raise ValueError(f"features must have shape (N, C); got {shape_of(values)}")
    if not isinstance(idx, torch.Tensor) or idx.dim() != 2:
        raise ValueError(f"idx must have shape (M, nsample); got {shape_of(idx)}")
    return warpgeo.gather_points(values.t()[None], idx[None])[0].permute(1, 2, 0)


def grouping(*args, **kwargs) -> torch.Tensor:
    """Both families' ``grouping``:

    * POSTECH ``grouping(input (N, C), idx (M, nsample))`` -> ``(M, nsample, C)``;
    * Pointcept ``grouping(idx, feat, xyz, new_xyz=None, with_xyz=False)`` -> ``(M, nsample, C)``, or with
      ``with_xyz`` ``(M, nsample, 3 + C)`` whose first 3 channels are ``xyz[idx] - new_xyz`` (0 for -1).

    An integer first argument (or ``idx=`` as a keyword with ``feat=``) selects Pointcept's form.
    """
    first = args[0] if args else kwargs.get("idx", kwargs.get("input"))
    if isinstance(first, torch.Tensor) and not first.is_floating_point():
        return _grouping_pointcept(*args, **kwargs)
    return _grouping_postech(*args, **kwargs)


def _grouping_postech(input, idx):
    return _group(input, idx)


def _grouping_pointcept(idx, feat, xyz, new_xyz=None, with_xyz=False):
    grouped = _group(feat, idx)
    if not with_xyz:
        return grouped
    if new_xyz is None:
        new_xyz = xyz
    rel = (_group(xyz, idx) - new_xyz[:, None, :]) * (idx >= 0)[..., None].to(xyz.dtype)
    return torch.cat([rel, grouped], dim=-1)


def queryandgroup(nsample, xyz, new_xyz, feat, idx, offset, new_offset, use_xyz=True, return_idx=False):
    """POSTECH ``pointops.queryandgroup``: kNN (unless ``idx`` is given) and grouping.

    Returns:
        ``(M, nsample, 3 + C)`` with ``xyz[idx] - new_xyz`` first (``use_xyz``) or ``(M, nsample, C)``;
        with ``return_idx=True`` also the int32 ``idx`` (a later pointops' option).
    """
    if new_xyz is None:
        new_xyz = xyz
    if idx is None:
        idx, _ = knnquery(nsample, xyz, new_xyz, offset, new_offset)
    grouped = _group(feat, idx)
    if use_xyz:
        grouped_xyz = _group(xyz, idx)
        grouped_xyz -= new_xyz.unsqueeze(1)
        grouped = torch.cat([grouped_xyz, grouped], dim=-1)
    return (grouped, idx) if return_idx else grouped


def knn_query_and_group(
    feat, xyz, offset=None, new_xyz=None, new_offset=None, idx=None, nsample=None, with_xyz=False
):
    """Pointcept ``pointops.knn_query_and_group`` -> ``(grouped (M, nsample, [3 +] C), idx int32)``."""
    if idx is None:
        if nsample is None:
            raise ValueError("knn_query_and_group needs nsample when idx is not given")
        idx, _ = knn_query(nsample, xyz, offset, new_xyz, new_offset)
    return _grouping_pointcept(idx, feat, xyz, new_xyz, with_xyz), idx


def ball_query_and_group(
    feat,
    xyz,
    offset=None,
    new_xyz=None,
    new_offset=None,
    idx=None,
    max_radio=None,
    min_radio=0,
    nsample=None,
    with_xyz=False,
):
    """Pointcept ``pointops.ball_query_and_group`` -> ``(grouped (M, nsample, [3 +] C), idx int32)``."""
    if idx is None:
        if nsample is None or max_radio is None:
            raise ValueError("ball_query_and_group needs nsample and max_radio when idx is not given")
        idx, _ = ball_query(nsample, max_radio, min_radio, xyz, offset, new_xyz, new_offset)
    return _grouping_pointcept(idx, feat, xyz, new_xyz, with_xyz), idx


def interpolation(xyz, new_xyz, feat, offset, new_offset, k=3):
    """Inverse-distance interpolation of ``feat`` (at ``xyz``) to ``new_xyz``, as ``pointops.interpolation``.

    Each new point takes ``sum_j w_j feat[idx_j]`` over its ``k`` nearest points of the same cloud, with
    ``w_j = (1 / (d_j + 1e-8)) / sum_l 1 / (d_l + 1e-8)`` — fused in one weighted gather. Differentiable
    w.r.t. ``feat``; the weights are constants to autograd, as in the originals (whose kNN has no gradient).

    Args:
        xyz: packed ``(N, 3)`` known points; ``offset`` their cumulative cloud sizes.
        new_xyz: packed ``(M, 3)``; ``new_offset`` their cumulative cloud sizes.
        feat: ``(N, C)``.
        k: neighbours, 3 by default.

    Returns:
        ``(M, C)`` in the dtype of ``feat``.
    """
    idx, _, dist = _packed_knn(k, xyz, offset, new_xyz, new_offset)
    recip = torch.where(idx >= 0, 1.0 / (dist.detach() + 1e-8), 0.0)
    weight = recip / recip.sum(dim=1, keepdim=True)
    return warpgeo.gather_points(feat.t()[None], idx[None], weight=weight[None].to(feat.dtype))[0].t()


#: The autograd-Function form of the originals; the same computation here.
interpolation2 = interpolation


def subtraction(input1: torch.Tensor, input2: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """POSTECH ``pointops.subtraction``: ``out[n, j] = input1[n] - input2[idx[n, j]]`` -> ``(N, nsample, C)``."""
    return input1[:, None, :] - _group(input2, idx)


def aggregation(input: torch.Tensor, position, weight, idx) -> torch.Tensor:
    """POSTECH ``pointops.aggregation`` (vector attention): ``out[n, c] = sum_j (input[idx[n, j], c] +
    position[n, j, c]) * weight[n, j, c % C_w]`` with ``input (N, C)``, ``position (N, nsample, C)``,
    ``weight (N, nsample, C_w)``, ``C`` a multiple of ``C_w`` -> ``(N, C)``."""
    n, nsample, channels = position.shape
    share = channels // weight.shape[-1]
    values = (_group(input, idx) + position).view(n, nsample, share, weight.shape[-1])
    return (values * weight[:, :, None, :]).sum(dim=1).reshape(n, channels)


def _batched(xyz: torch.Tensor, m) -> torch.Tensor:
    if xyz.shape[-1] != 3:
        raise ValueError(f"xyz must have shape (B, N, 3); got {tuple(xyz.shape)}")
    if isinstance(m, bool) or not isinstance(m, int):
        raise TypeError(
            f"with batched xyz (B, N, 3) the second argument is m, an int; got {type(m).__name__}"
        )
    if not 0 < m <= xyz.shape[1]:
        raise ValueError(f"m must lie in [1, N={xyz.shape[1]}]; got {m}")
    return warpgeo.farthest_point_sampling(xyz, m).to(torch.int32)


def _counts(offset, name: str, device: torch.device) -> torch.Tensor:
    if offset is None:
        raise ValueError(f"{name} is required with packed xyz (N, 3)")
    offset = torch.as_tensor(offset, device=device)
    if offset.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be an int32 or int64 tensor; got {offset.dtype}")
    if offset.dim() != 1 or offset.shape[0] == 0:
        raise ValueError(f"{name} must have shape (B,) with B >= 1; got {tuple(offset.shape)}")
    offset = offset.to(torch.int64)
    return torch.diff(offset, prepend=offset.new_zeros(1))


def _cumsum(counts: list[int]) -> list[int]:
    out, total = [], 0
    for c in counts:
        total += c
        out.append(total)
    return out


def __dir__() -> list[str]:
    """The public names (``__all__``) and the module's dunders: not ``annotations`` / ``torch`` / helpers."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
