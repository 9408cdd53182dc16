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

=====================================================  ====================================================
``furthestsampling(xyz, offset, new_offset)``          packed ``(N, 3)`` -> int32 ``(M,)``, M = new_offset[-1]
``furthestsampling(xyz, m)``                           the older batched form: ``(B, N, 3)`` -> int32 ``(B, m)``
``gathering(features, idx)``                           ``(B, C, N)``, ``(B, M)`` -> ``(B, C, M)``, differentiable
=====================================================  ====================================================

Differences from the extension: any float dtype, int32 or int64 offsets and indices, CPU as well as CUDA,
and a clear error (instead of an out-of-bounds read) when a cloud is asked for more samples than it holds.
"""

from __future__ import annotations

import torch

import warpgeo

__all__ = ["furthestsampling", "gathering"]


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
        raise ValueError(f"xyz must be packed points of shape (N, 3); got {_shape(xyz)}")
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
        raise ValueError(f"idx must have shape (B, M); got {_shape(idx)}")
    return warpgeo.gather_points(features, idx)


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


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__
