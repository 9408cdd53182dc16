"""Farthest point sampling (FPS)."""

from __future__ import annotations

import torch

from . import _interop

__all__ = ["FarthestPointSampling", "farthest_point_sampling"]

_SENTINEL_INDEX = -1
#: Morton cells per axis (10 bits) for the CPU kernel's bucket order.
_MORTON_CELLS = 1023
#: Below this N * K the CPU kernel scans every point at every step: the bucket set-up costs more than it saves.
_MIN_BUCKET_WORK = 1 << 22
#: The kernels index points with int32.
_MAX_POINTS = 2**31 - 1
#: Threads per cloud on CUDA. Each thread owns N / 256 points; one arg-max over the block per sample.
_GPU_BLOCK_DIM = 256


# --------------------------------------------------------------------------------------------------------
# the custom op (what torch.compile sees as one opaque node)
# --------------------------------------------------------------------------------------------------------


@torch.library.custom_op("warpgeo::farthest_point_sampling", mutates_args=())
def _fps_op(
    points: torch.Tensor,
    lengths: torch.Tensor,
    num_samples: torch.Tensor,
    start: torch.Tensor,
    max_samples: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """points (B, N, 3) float*, lengths/num_samples/start (B,) int64 -> indices (B, K) int64, distances (B, K)."""
    _check_values(points, lengths, num_samples, start)
    from ._kernels import fps as kernels

    batch, n = points.shape[0], points.shape[1]
    device = points.device
    indices = torch.empty(batch, max_samples, dtype=torch.int64, device=device)
    distances = torch.empty(batch, max_samples, dtype=torch.float64, device=device)
    mindist = torch.empty(batch, n, dtype=torch.float64, device=device)
    work = _interop.to_compute(points)  # half -> float32; float32 and float64 are read as they are
    precision = "float64" if work.dtype == torch.float64 else "float32"
    args = [
        work,
        lengths.to(torch.int32),
        num_samples.to(torch.int32),
        start.to(torch.int32),
        mindist,
        indices,
        distances,
    ]
    if device.type == "cuda":  # one block per cloud
        _interop.launch(
            kernels.FPS_BLOCK[precision], [batch], args, device=device, tiled=True, block_dim=_GPU_BLOCK_DIM
        )
    elif n * max_samples < _MIN_BUCKET_WORK:  # CPU, small: one thread per cloud, batch split among threads
        _interop.launch_rows(
            kernels.FPS_SERIAL[precision], batch, args, device=device, work_per_row=n * max_samples
        )
    else:  # CPU, large: the same, pruned by buckets of nearby points (sorting them costs ~0.5 ms)
        order = _morton_order(work, lengths)
        position = torch.empty_like(order).scatter_(1, order, torch.arange(n, device=device).expand(batch, n))
        sorted_points = torch.gather(work, 1, order[..., None].expand(-1, -1, 3)).contiguous()
        buckets = -(-n // kernels.BUCKET)
        args[0] = sorted_points
        args[1:1] = [order.to(torch.int32), position.to(torch.int32)]
        args[7:7] = [
            torch.empty(batch, buckets, 3, dtype=torch.float64, device=device),
            torch.empty(batch, buckets, 3, dtype=torch.float64, device=device),
            torch.empty(batch, buckets, dtype=torch.float64, device=device),
            torch.empty(batch, buckets, dtype=torch.int32, device=device),
        ]
        _interop.launch_rows(
            kernels.FPS_BUCKETS[precision], batch, args, device=device, work_per_row=n * max_samples
        )
    return indices, distances.to(points.dtype)


@_fps_op.register_fake
def _(points, lengths, num_samples, start, max_samples):
    batch = points.shape[0]
    return (
        points.new_empty(batch, max_samples, dtype=torch.int64),
        points.new_empty(batch, max_samples),
    )


def _check_values(
    points: torch.Tensor, lengths: torch.Tensor, num_samples: torch.Tensor, start: torch.Tensor
):
    """The checks that need tensor values: one device-to-host transfer for all of them."""
    n = points.shape[1]
    valid = torch.arange(n, device=points.device) < lengths[:, None]
    nonfinite = (~torch.isfinite(points).all(dim=-1) & valid).any()
    bad_lengths = ((lengths < 0) | (lengths > n)).any()
    bad_k = (num_samples <= 0).any()
    bad_start = ((lengths > 0) & ((start < 0) | (start >= lengths))).any()
    flags = torch.stack([nonfinite, bad_lengths, bad_k, bad_start]).tolist()
    if flags[1]:
        raise ValueError(f"lengths must lie in [0, N={n}]; got {lengths.tolist()}")
    if flags[0]:
        raise ValueError("points must be finite: found NaN or inf among the valid points")
    if flags[2]:
        raise ValueError(f"num_samples must be positive; got {num_samples.tolist()}")
    if flags[3]:
        raise IndexError(
            f"start_index must lie in [0, lengths[b]) for every cloud; got {start.tolist()} "
            f"with lengths {lengths.tolist()}"
        )


def _morton_order(points: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``(B, N)`` int64: each cloud's valid points sorted along a Morton (Z-order) curve, padding last.

    Consecutive points in this order are close in space, so fixed-size runs of them have small boxes: the
    buckets the CPU kernel prunes with. Any order gives the same samples; this one makes pruning work.
    """
    n = points.shape[1]
    valid = (torch.arange(n, device=points.device) < lengths[:, None])[..., None]
    lo = torch.where(valid, points, torch.inf).amin(dim=1, keepdim=True)
    hi = torch.where(valid, points, -torch.inf).amax(dim=1, keepdim=True)
    unit = (points - lo) / (hi - lo).clamp_min(torch.finfo(points.dtype).tiny)
    cells = torch.where(valid, unit * _MORTON_CELLS, 0.0).nan_to_num(0.0).clamp(0, _MORTON_CELLS).long()
    key = (
        _spread_bits(cells[..., 0]) | (_spread_bits(cells[..., 1]) << 1) | (_spread_bits(cells[..., 2]) << 2)
    )
    key = torch.where(valid[..., 0], key, 1 << 40)
    return torch.argsort(key, dim=1, stable=True)


def _spread_bits(x: torch.Tensor) -> torch.Tensor:
    """Insert two zero bits after each of the 10 low bits of ``x`` (the Morton interleave of one axis)."""
    x = (x | (x << 16)) & 0x030000FF
    x = (x | (x << 8)) & 0x0300F00F
    x = (x | (x << 4)) & 0x030C30C3
    return (x | (x << 2)) & 0x09249249


# --------------------------------------------------------------------------------------------------------
# the autograd Function
# --------------------------------------------------------------------------------------------------------


class FarthestPointSampling(torch.autograd.Function):
    """FPS as an autograd Function: indices and distances are marked non-differentiable.

    Sampling is a selection, so no gradient flows to ``points`` through it; gradients reach whatever the
    caller gathers with the indices. Prefer :func:`farthest_point_sampling`, which validates its input.

    ``apply(points (B, N, 3), lengths (B,), num_samples (B,), start (B,), max_samples: int)``
    -> ``(indices (B, K) int64, distances (B, K))``.
    """

    @staticmethod
    def forward(ctx, points, lengths, num_samples, start, max_samples):
        ctx.set_materialize_grads(False)
        indices, distances = _fps_op(points, lengths, num_samples, start, max_samples)
        ctx.mark_non_differentiable(indices, distances)
        return indices, distances

    @staticmethod
    def backward(ctx, grad_indices, grad_distances):
        return None, None, None, None, None


# --------------------------------------------------------------------------------------------------------
# the public function
# --------------------------------------------------------------------------------------------------------


def farthest_point_sampling(
    points: torch.Tensor,
    num_samples: int | torch.Tensor,
    *,
    lengths: torch.Tensor | None = None,
    start_index: int | torch.Tensor | None = None,
    random_start: bool = False,
    generator: torch.Generator | None = None,
    return_distances: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Greedy farthest point sampling.

    Starting from one point per cloud, repeatedly pick the point farthest from those already picked (ties
    go to the lowest index). Distances are compared in float64 whatever the input dtype, so half-precision
    clouds with large coordinates do not overflow and the order does not depend on the dtype or on the
    scale of the coordinates.

    Args:
        points: ``(B, N, 3)`` or ``(N, 3)``; float16, bfloat16, float32 or float64.
        num_samples: K, an int, or an integer tensor ``(B,)`` of per-cloud K (this form reads the
            tensor's maximum on the host).
        lengths: optional integer ``(B,)``; cloud ``b`` uses only its first ``lengths[b]`` points.
        start_index: the first sample, an int or an integer ``(B,)`` tensor; 0 by default.
        random_start: draw the first sample uniformly among the valid points of each cloud.
        generator: the ``torch.Generator`` for ``random_start`` (same state, same output).
        return_distances: also return the coverage radius of each step.

    Returns:
        int64 indices ``(B, K)`` (``(K,)`` for ``(N, 3)`` input), K = the largest per-cloud K. Where a
        cloud asks for more samples than it has valid points, its row holds each valid point once, then
        ``-1``. With ``return_distances=True``, ``(indices, distances)``: ``distances[b, i]`` is the
        distance from sample ``i`` to the samples before it (``inf`` for the first, ``nan`` for padding),
        in the dtype of ``points``.

    Raises:
        TypeError: ``points`` is not a float tensor; ``num_samples``, ``lengths`` or ``start_index`` is not
            an integer (tensor).
        ValueError: bad shapes, ``num_samples <= 0``, ``lengths`` outside ``[0, N]``, non-finite
            coordinates among the valid points, tensors on different devices,
            ``random_start`` together with ``start_index``.
        IndexError: ``start_index`` outside ``[0, lengths[b])``.

    Example:
        >>> pts = torch.rand(2, 1000, 3)
        >>> idx = farthest_point_sampling(pts, 64)                  # (2, 64) int64
        >>> centres = torch.gather(pts, 1, idx[..., None].expand(-1, -1, 3))
    """
    _interop.check_float(points, "points")
    if points.dim() not in (2, 3) or points.shape[-1] != 3:
        raise ValueError(f"points must have shape (B, N, 3) or (N, 3); got {tuple(points.shape)}")
    unbatched = points.dim() == 2
    if unbatched:
        points = points.unsqueeze(0)
    batch, n = points.shape[0], points.shape[1]
    device = points.device
    if n == 0:
        raise ValueError(f"points must hold at least one point; got shape {tuple(points.shape)}")
    if n > _MAX_POINTS:
        raise ValueError(f"points may hold at most {_MAX_POINTS} points per cloud; got N={n}")

    ks, max_samples = _per_cloud_samples(num_samples, batch, device)
    lengths_t = _per_cloud_tensor(lengths, "lengths", batch, device, default=n)
    if random_start:
        if start_index is not None:
            raise ValueError("give either start_index or random_start=True, not both")
        start = _random_start(lengths_t, generator, device)
    else:
        if generator is not None:
            raise ValueError("generator is only used with random_start=True")
        start = _per_cloud_tensor(start_index, "start_index", batch, device, default=0)

    indices, distances = FarthestPointSampling.apply(points, lengths_t, ks, start, max_samples)
    if unbatched:
        indices, distances = indices[0], distances[0]
    return (indices, distances) if return_distances else indices


def _per_cloud_samples(num_samples, batch: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Per-cloud K as a (B,) int64 tensor, and the largest K (read on the host for a tensor K)."""
    ks = _per_cloud_tensor(num_samples, "num_samples", batch, device, default=None)
    if isinstance(num_samples, int):
        min_samples = max_samples = num_samples
    else:  # one device-to-host transfer
        min_samples, max_samples = torch.stack(torch.aminmax(ks)).tolist()
    if min_samples <= 0:
        shown = num_samples if isinstance(num_samples, int) else num_samples.tolist()
        raise ValueError(f"num_samples must be positive; got {shown}")
    return ks, max_samples


def _per_cloud_tensor(
    value, name: str, batch: int, device: torch.device, *, default: int | None
) -> torch.Tensor:
    """An int or an integer ``(B,)`` / 0-d tensor on ``device`` as a ``(B,)`` int64 tensor; None -> ``default``."""
    if value is None and default is not None:
        value = default
    if isinstance(value, torch.Tensor):
        _interop.check_index(value, name)
        if value.dim() == 0:
            value = value.reshape(1).expand(batch)
        if tuple(value.shape) != (batch,):
            raise ValueError(f"{name} must be an int or a ({batch},) tensor; got shape {tuple(value.shape)}")
        if value.device != device:
            raise ValueError(f"{name} must be on the device of points ({device}); got {value.device}")
        return value.to(torch.int64)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or an integer tensor; got {type(value).__name__}")
    return torch.full((batch,), value, dtype=torch.int64, device=device)


def _random_start(lengths: torch.Tensor, generator: torch.Generator | None, device: torch.device):
    gen_device = generator.device if generator is not None else device
    u = torch.rand(lengths.shape[0], dtype=torch.float64, generator=generator, device=gen_device)
    return (u.to(device) * lengths.to(torch.float64)).floor().to(torch.int64)
