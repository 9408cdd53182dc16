"""Farthest point sampling (FPS)."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence

import torch

from . import _launch, _scale, _warp, checks
from ._constants import INT32_LIMIT, SENTINEL_INDEX
from ._kernels import fps as kernels
from ._kernels import fps_cuda as block_kernels
from ._op import Op

__all__ = ["FarthestPointSampling", "farthest_point_sampling"]

#: The CPU tree sorts its leaves by grid cell: about this many points per cell, at most 2**24 cells.
_POINTS_PER_CELL = 4
_MAX_CELLS = 8**8
#: Below this N * K the CPU kernel scans every point at every step: the tree costs more than it saves.
_MIN_TREE_WORK = 1 << 22
#: Warp arrays have int32 byte strides: every per-cloud row (the points, their distances, the output) must
#: stay below this many bytes.
_MAX_ROW_BYTES = INT32_LIMIT - 1
#: Bytes per point of a cloud's widest row: three coordinates in the compute precision.
_POINT_BYTES = {torch.float64: 24, torch.float32: 12}
#: Bytes per sample of an output row (int64 indices, float64 distances).
_SAMPLE_BYTES = 8
#: float64 clouds are scaled by a power of two (exact) so that their largest |coordinate| lies in
#: [2**(e - 1), 2**e) for this e: every squared distance and every sum of three then stays below float64's
#: largest value (3 * (2 * 2**e)**2 < 2**1024) and distances 2**-537 apart still differ when squared.
_SCALED_EXPONENT = 509
#: The int64 range: a Python int outside it cannot become a tensor.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# --------------------------------------------------------------------------------------------------------
# the public function
# --------------------------------------------------------------------------------------------------------


def farthest_point_sampling(
    points: torch.Tensor,
    num_samples: int | Sequence[int] | torch.Tensor,
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
    scale of the coordinates; a float64 cloud is first scaled by a power of two (exact), so that the order
    is exact at any finite scale, from subnormal coordinates to 1e308, for a cloud whose magnitudes span
    at most ``2**967`` (largest |coordinate| over the smallest nonzero one; a wider one is refused with
    value checks on).

    On the CPU, large clouds (N * K >= 2**22) are sampled through a tree of boxes over small buckets of
    nearby points that skips whatever a new sample cannot change (the QuickFPS idea): the same order as
    the brute-force loop, at a fraction of its work. A batch is split among torch's CPU threads. On CUDA a
    small cloud is sampled by one thread block (up to 8192 points: its distances in the block's registers);
    a large one (N >= 16384, with at least two SMs per cloud) by a group of blocks spread over the GPU, in
    one launch whose blocks meet at a barrier after each step (the same order again: ties to the lowest
    index, bit for bit the CPU's).

    Args:
        points: ``(B, N, 3)`` or ``(N, 3)``; float16, bfloat16, float32 or float64.
        num_samples: K, an int >= 1; or a per-cloud K >= 0 as a list of B ints or an integer tensor
            ``(B,)``. A cloud asked for 0 samples gets a row of -1. The int and list forms make no device
            sync; the tensor form reads its maximum on the host (the output's width).
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
        ValueError: bad shapes, an int ``num_samples < 1`` or a per-cloud one < 0, ``lengths`` outside ``[0,
            N]``, non-finite coordinates among the valid points, tensors on different devices,
            ``random_start`` together with ``start_index``; sizes beyond Warp's int32 byte strides (a row of
            2**31 bytes): ``num_samples`` above 268435455, more than 89478485 float64 points (or 178956970 of
            another dtype) per cloud; an output larger than the device can allocate; a float64 cloud whose
            magnitudes span more than ``2**967`` (largest |coordinate| over the smallest nonzero one;
            distances are exact within it).
        IndexError: ``start_index`` outside ``[0, lengths[b])``.

    Example:
        >>> pts = torch.rand(2, 1000, 3)
        >>> idx = farthest_point_sampling(pts, 64)                  # (2, 64) int64
        >>> centres = torch.gather(pts, 1, idx[..., None].expand(-1, -1, 3))
    """
    checks.check_float(points, "points")
    if points.dim() not in (2, 3) or points.shape[-1] != 3:
        raise ValueError(f"points must have shape (B, N, 3) or (N, 3); got {tuple(points.shape)}")
    unbatched = points.dim() == 2
    if unbatched:
        points = points.unsqueeze(0)
    batch, n = points.shape[0], points.shape[1]
    device = points.device
    if n == 0:
        raise ValueError(f"points must hold at least one point; got shape {tuple(points.shape)}")
    if not isinstance(return_distances, bool):
        raise TypeError(f"return_distances must be a bool; got {type(return_distances).__name__}")
    ks, max_samples = _per_cloud_samples(num_samples, batch, device)
    lengths_t = _per_cloud(lengths, "lengths", batch, device)
    if random_start:
        if start_index is not None:
            raise ValueError("give either start_index or random_start=True, not both")
        start = _random_start(lengths_t, n, batch, generator, device)
    else:
        if generator is not None:
            raise ValueError("generator is only used with random_start=True")
        default_start = start_index is None or (type(start_index) is int and start_index == 0)
        start = None if default_start else _per_cloud(start_index, "start_index", batch, device)

    indices, distances = _fps.call(
        points=points,
        lengths=lengths_t,
        num_samples=ks,
        start=start,
        max_samples=max_samples,
    )
    if unbatched:
        indices, distances = indices[0], distances[0]
    return (indices, distances) if return_distances else indices


# --------------------------------------------------------------------------------------------------------
# the op's declarations: shape checks, implementation (value checks, launches), fake
# --------------------------------------------------------------------------------------------------------


def _check_fps(points, lengths, num_samples, start, max_samples) -> None:
    """The checks of every entry point that read no tensor values: types, shapes, devices, sizes."""
    checks.check_float(points, "points")
    if points.dim() != 3 or points.shape[-1] != 3:
        raise ValueError(f"points must have shape (B, N, 3); got {tuple(points.shape)}")
    batch, n = points.shape[0], points.shape[1]
    point_bytes = _POINT_BYTES[_warp.compute_dtype(points.dtype)]
    if n > _MAX_ROW_BYTES // point_bytes:
        raise ValueError(
            f"points may hold at most {_MAX_ROW_BYTES // point_bytes} points per cloud in "
            f"{str(points.dtype).removeprefix('torch.')} ({point_bytes} bytes each: Warp addresses a row of "
            f"at most 2**31 - 1 bytes); got N={n}"
        )
    checks.check_int(max_samples, "num_samples", minimum=0)
    if isinstance(max_samples, int) and max_samples > _MAX_ROW_BYTES // _SAMPLE_BYTES:
        raise ValueError(
            f"num_samples may be at most {_MAX_ROW_BYTES // _SAMPLE_BYTES} (an output row of "
            f"{_SAMPLE_BYTES}-byte entries must stay below 2**31 bytes, Warp's int32 strides); got {max_samples}"
        )
    for name, t in (("lengths", lengths), ("num_samples", num_samples), ("start_index", start)):
        if t is not None:
            checks.check_index(t, name)
            checks.check_shape(t, name, (batch,))
    checks.check_device("points", points=points, lengths=lengths, num_samples=num_samples, start_index=start)


def _fps_impl(
    points: torch.Tensor,
    lengths: torch.Tensor | None,
    num_samples: torch.Tensor | None,
    start: torch.Tensor | None,
    max_samples: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """points (B, N, 3) float; optional integer (B,) lengths, per-cloud num_samples and start; K = max_samples
    -> indices (B, K) int64, distances (B, K) in points' dtype. ``None`` means every point / K samples for
    every cloud / start at point 0."""
    if checks.checking_values(points.device):
        _check_values(points, lengths, num_samples, start, max_samples)
    batch, n = points.shape[0], points.shape[1]
    device = points.device
    # half -> float32; float32 is read as it is; float64 is scaled by 2**shift (exact, see _SCALED_EXPONENT)
    lengths = None if lengths is None else lengths.to(torch.int64)
    compute, shift = _normalise(_warp.to_compute(points), lengths)
    try:  # the kernels write the distances in the compute dtype: float32 and float64 clouds need no copy
        indices = torch.empty(batch, max_samples, dtype=torch.int64, device=device)
        distances = torch.empty(batch, max_samples, dtype=compute.dtype, device=device)
    except RuntimeError as error:  # torch's out-of-memory errors (torch.OutOfMemoryError included)
        raise ValueError(
            f"num_samples={max_samples} asks for a ({batch}, {max_samples}) output "
            f"({2 * _SAMPLE_BYTES * batch * max_samples} bytes), more than {device} can allocate"
        ) from error
    if n == 0 or max_samples == 0 or batch == 0:
        return indices.fill_(SENTINEL_INDEX), distances.fill_(float("nan")).to(points.dtype)
    empty = _launch.empty(torch.int64, device)
    key = _warp.KEY[compute.dtype]
    args = {
        "points": compute,
        "lengths": empty if lengths is None else lengths,
        "num_samples": empty if num_samples is None else num_samples.to(torch.int64),
        "start": empty if start is None else start.to(torch.int64),
        "out_index": indices,
        "out_dist": distances,
    }
    if _warp.cuda_algorithms(device):
        design, groups = _cuda_design(device, batch, n)
        _CUDA_DESIGNS[design](args, key, batch, n, max_samples, groups, device)
    elif n * max_samples < _MIN_TREE_WORK:  # CPU, small: one thread per cloud, batch split among threads
        kernel = kernels.FPS_SERIAL[key].fps_serial
        mindist = torch.empty(batch, n, dtype=torch.float64, device=device)
        _launch.launch_rows(
            kernel, batch, device=device, work_per_row=n * max_samples, mindist=mindist, **args
        )
    else:  # CPU, large: the same order from a tree of boxes over Morton-ordered leaves (sorted in-kernel)
        nodes = kernels.tree_size(n)
        cells = min(8 ** max(1, round(math.log2(max(n, 1) / _POINTS_PER_CELL) / 3)), _MAX_CELLS)
        _launch.launch_rows(
            kernels.FPS_TREE[key].fps_tree,
            batch,
            device=device,
            work_per_row=n * max_samples,
            mindist=torch.empty(batch, n, dtype=torch.float64, device=device),
            cells=torch.empty(batch, cells + 1, dtype=torch.int32, device=device),
            order=torch.empty(batch, n, dtype=torch.int32, device=device),
            position=torch.empty(batch, n, dtype=torch.int32, device=device),
            sorted_points=torch.empty_like(compute),
            node_lo=torch.empty(batch, nodes, 3, dtype=torch.float64, device=device),
            node_hi=torch.empty(batch, nodes, 3, dtype=torch.float64, device=device),
            node_max=torch.empty(batch, nodes, dtype=torch.float64, device=device),
            node_arg=torch.empty(batch, nodes, dtype=torch.int32, device=device),
            **args,
        )
    if shift is not None:  # back to the caller's units: exact, a power of two
        half = shift // 2
        distances = (
            distances * _scale.power_of_two(-half)[:, None] * _scale.power_of_two(half - shift)[:, None]
        )
    return indices, (distances if distances.dtype == points.dtype else distances.to(points.dtype))


# --------------------------------------------------------------------------------------------------------
# the CUDA designs: one block per cloud (small clouds), or a group of blocks per cloud (large ones)
# --------------------------------------------------------------------------------------------------------

#: From this many points per cloud a cloud is sampled by a group of blocks (the grid designs), when the
#: device has at least two SMs per cloud; smaller clouds take one block each (``fps_block``). A group's
#: barrier costs ~5 us a step whatever N (H200, 2026-11-26: 5.3 us/step at B=1 N=100k, 6.3 at B=32 N=8192),
#: one block ~0.65 us per 1,024 points a step; at B=32 N=8192 K=512 one block a cloud took 2.67 ms and a
#: group of 4 3.20 ms, so the grid starts at twice that size (``benchmarks/results/2026-11-26-nvidia-h200-2.md``).
_GRID_MIN_POINTS = 16384
#: A group block owns at least this many points (four per lane: one round of the four-load scan per step);
#: fewer blocks mean a cheaper barrier and reduction.
_GRID_POINTS_PER_BLOCK = 4 * block_kernels.GRID_BLOCK_DIM
#: How long a block of the persistent kernel waits at a barrier before the group gives up (clock cycles:
#: ~70 ms at 2 GHz; a step takes microseconds). The group's last block then samples the cloud alone.
_BARRIER_TIMEOUT_CYCLES = 1 << 27
#: Up to this many points per cloud a cloud's distances are held in the registers of one block (``fps_strip``:
#: ``STRIP`` points a lane), never stored, one block reduction a step instead of two. Written for
#: B=32 N=8192 K=512 (issue 49: the block design 2.67 ms, torch-fps 1.29 ms on an H200); not yet timed on a
#: GPU (``benchmarks/bench_fps.py --designs`` compares it with ``block``).
_STRIP_MAX_POINTS = block_kernels.STRIP * block_kernels.STRIP_BLOCK_DIM
#: The design every CUDA-algorithm call takes, forced (benchmarks, tests): "strip", "block", "steps",
#: "persistent", "strip_held" (the strip's A/B variant; either strip on a cloud larger than
#: ``_STRIP_MAX_POINTS``: "block");
#: None (the default, or ``WARPGEO_FPS_DESIGN`` unset): chosen by size.
_FORCED_DESIGN: str | None = os.environ.get("WARPGEO_FPS_DESIGN") or None


def _cuda_design(device: torch.device, batch: int, n: int) -> tuple[str, int]:
    """``(design, blocks per cloud)`` of a call on CUDA's algorithms.

    Small clouds (at most ``_STRIP_MAX_POINTS``; on CPU tensors only with Warp's CPU blocks): one block per
    cloud, its distances in the lanes' registers (``strip``). Large clouds, with at least two SMs per cloud:
    a group of blocks per cloud, all resident at once (one launch, ``persistent``) on CUDA; a launch per step
    (``steps``) on CPU tensors, where blocks run one after another. Otherwise one block per cloud, its
    distances in memory (``block``).
    """
    sms = _multiprocessors(device)
    groups = max(1, min(sms // max(batch, 1), -(-n // _GRID_POINTS_PER_BLOCK)))
    # CPU tensors without Warp's CPU blocks run a block as one lane: ``STRIP`` points in all
    strip_capacity = (
        _STRIP_MAX_POINTS if device.type == "cuda" or _warp.warp().config.enable_cpu_blocks else 0
    )
    design = _FORCED_DESIGN
    if design is None:
        if n <= strip_capacity:
            design = "strip"
        elif n < _GRID_MIN_POINTS or groups < 2:
            design = "block"
        else:
            design = "persistent" if device.type == "cuda" else "steps"
    if design in ("strip", "strip_held") and n > strip_capacity:  # a cloud the lanes' registers cannot hold
        design = "block"
    if design == "persistent" and batch * groups > sms:  # never more blocks than can be resident together
        groups = max(1, sms // max(batch, 1))
    return design, groups


@functools.cache
def _multiprocessors_of(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _multiprocessors(device: torch.device) -> int:
    """SMs of a CUDA device (of its MIG slice under MIG: torch reports the slice); for CPU tensors on CUDA's
    algorithms, ``_CPU_MULTIPROCESSORS`` (tests)."""
    if device.type != "cuda":
        return _CPU_MULTIPROCESSORS
    return _multiprocessors_of(device.index if device.index is not None else torch.cuda.current_device())


#: The "SMs" CUDA's algorithms see on CPU tensors (tests: several blocks per cloud).
_CPU_MULTIPROCESSORS = 8


def _launch_block(args, key, batch, n, max_samples, groups, device) -> None:
    """One block per cloud, its distances in ``mindist``."""
    table = block_kernels.FPS_BLOCK
    mindist = torch.empty(batch, n, dtype=torch.float64, device=device)
    _launch.launch(
        table[key].fps_block,
        batch,
        device=device,
        tiled=True,
        block_dim=table.block_dim,
        mindist=mindist,
        **args,
    )


def _launch_strip(args, key, batch, n, max_samples, groups, device, *, held=False) -> None:
    """One block per cloud, its distances in the lanes' registers (no workspace); ``held``: its coordinates
    too (the A/B variant, ``"strip_held"``)."""
    table = block_kernels.FPS_STRIP_HELD if held else block_kernels.FPS_STRIP
    kernel = table[key].fps_strip_held if held else table[key].fps_strip
    _launch.launch(kernel, batch, device=device, tiled=True, block_dim=table.block_dim, **args)


def _grid_workspace(batch: int, n: int, groups: int, device: torch.device, *, zeroed: bool):
    """One allocation for a grid design: ``(partials (B, 2, G, 2) float64, sync (B, SYNC_COLUMNS) int64,
    mindist (B, N) float64)``, views of it (the partials first: 16-byte aligned ``vec2d`` slots)."""
    sizes = (batch * 2 * groups * 2, batch * block_kernels.SYNC_COLUMNS, batch * n)
    make = torch.zeros if zeroed else torch.empty
    workspace = make(sum(sizes), dtype=torch.float64, device=device)
    partials, sync, mindist = workspace.split(sizes)
    return (
        partials.view(batch, 2, groups, 2),
        sync.view(torch.int64).view(batch, block_kernels.SYNC_COLUMNS),
        mindist.view(batch, n),
    )


def _launch_steps(args, key, batch, n, max_samples, groups, device) -> None:
    """A group of blocks per cloud, one launch per step (portable: capturable in a CUDA graph)."""
    partials, _, mindist = _grid_workspace(batch, n, groups, device, zeroed=False)
    table = block_kernels.FPS_GRID
    kernel = table[key].fps_steps
    for step in range(max_samples):
        _launch.launch(
            kernel,
            batch * groups,
            device=device,
            tiled=True,
            block_dim=table.block_dim,
            mindist=mindist,
            partials=partials,
            step=step,
            **args,
        )


def _launch_persistent(args, key, batch, n, max_samples, groups, device, *, timeout=None) -> torch.Tensor:
    """A group of blocks per cloud, every step in one launch (a barrier of the group between two steps);
    returns the groups' state (``sync``: column ``SYNC_FAILED`` is 1 where a barrier timed out)."""
    partials, sync, mindist = _grid_workspace(batch, n, groups, device, zeroed=True)
    table = block_kernels.FPS_GRID
    _launch.launch(
        table[key].fps_persistent,
        batch * groups,
        device=device,
        tiled=True,
        block_dim=table.block_dim,
        mindist=mindist,
        partials=partials,
        sync=sync,
        timeout=_BARRIER_TIMEOUT_CYCLES if timeout is None else timeout,
        **args,
    )
    return sync


_CUDA_DESIGNS = {
    "block": _launch_block,
    "steps": _launch_steps,
    "persistent": _launch_persistent,
    "strip": _launch_strip,
    "strip_held": functools.partial(_launch_strip, held=True),
}


def _fps_fake(points, lengths, num_samples, start, max_samples):
    batch = points.shape[0]
    return (
        points.new_empty(batch, max_samples, dtype=torch.int64),
        points.new_empty(batch, max_samples),
    )


def _normalise(
    points: torch.Tensor, lengths: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """float64 clouds scaled by ``2**shift[b]`` so that each one's largest |coordinate| lies in
    ``[2**(e - 1), 2**e)``, e = ``_SCALED_EXPONENT``; ``(points, None)`` for float32, whose squared
    distances can neither overflow nor underflow in float64.

    Scaling by a power of two is exact (no rounding; the two factors keep every intermediate in range), so
    every squared distance is the unscaled one times ``4**shift``, exactly, unless the unscaled one would
    overflow or underflow: the greedy order is the same at any scale, and exact where it was not.
    """
    if points.dtype != torch.float64:
        return points, None
    low, high = torch.aminmax(_valid_only(points, lengths).reshape(points.shape[0], -1), dim=1)
    _, exponent = torch.frexp(torch.maximum(-low, high))  # largest |x| = m * 2**exponent, m in [0.5, 1)
    shift = (_SCALED_EXPONENT - exponent).to(torch.int64)
    half = shift // 2
    scaled = (
        points * _scale.power_of_two(half)[:, None, None] * _scale.power_of_two(shift - half)[:, None, None]
    )
    return scaled, shift


def _check_values(points, lengths, num_samples, start, max_samples) -> None:
    """The checks that need tensor values: one device-to-host transfer for all of them."""
    n = points.shape[1]
    # the usual call: only the points to test. Their float64 sum is finite unless one of them is not (NaN
    # and inf propagate; only float64 values near the top of their range can overflow the sum, and then the
    # exact test below decides). float64 clouds also have their span checked (_scale.MAX_SPAN)
    wide = points.dtype == torch.float64 and points.numel() > 0
    only_points = lengths is None and num_samples is None and start is None and points.numel() > 0
    if only_points and not wide and math.isfinite(_warp.sum64(points).item()):
        return
    zero = torch.zeros((), dtype=torch.bool, device=points.device)
    too_wide, top, low = _scale.span_flags([(points, lengths)]) if wide else (None, None, None)
    flags = torch.stack(
        [
            _non_finite(points, lengths) if points.numel() else zero,
            ((lengths < 0) | (lengths > n)).any() if lengths is not None else zero,
            ((num_samples < 0) | (num_samples > max_samples)).any() if num_samples is not None else zero,
            _bad_start(start, lengths, n) if start is not None else zero,
            too_wide if wide else zero,
        ]
    ).tolist()
    if flags[1]:
        raise ValueError(f"lengths must lie in [0, N={n}]; got {lengths.tolist()}")
    if flags[0]:
        raise ValueError("points must be finite: found NaN or inf among the valid points")
    if flags[2]:
        raise ValueError(f"num_samples must lie in [0, {max_samples}]; got {num_samples.tolist()}")
    if flags[3]:
        shown = "" if lengths is None else f" with lengths {lengths.tolist()}"
        raise IndexError(
            f"start_index must lie in [0, lengths[b]) for every cloud; got {start.tolist()}{shown}"
        )
    if flags[4]:
        raise ValueError(_scale.span_message("points", top, low))


def _valid_only(points: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """``points`` with every coordinate past a cloud's length replaced by 0 (padding may hold anything)."""
    if lengths is None:
        return points
    valid = torch.arange(points.shape[1], device=points.device) < lengths[:, None]
    return torch.where(valid[..., None], points, 0.0)


def _non_finite(points: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """0-d bool: a NaN or an inf among the valid points (one pass, no (B, N, 3) temporary without lengths)."""
    low, high = torch.aminmax(_valid_only(points, lengths))  # NaN propagates, and fails both tests below
    return ~((low > -torch.inf) & (high < torch.inf))


def _bad_start(start: torch.Tensor, lengths: torch.Tensor | None, n: int) -> torch.Tensor:
    if lengths is None:
        return ((start < 0) | (start >= n)).any() if n > 0 else (start != 0).any()
    return ((lengths > 0) & ((start < 0) | (start >= lengths))).any()


# --------------------------------------------------------------------------------------------------------
# autograd: sampling is a selection (no gradient); the op and FarthestPointSampling share setup / backward
# --------------------------------------------------------------------------------------------------------


def _setup_fps(ctx, inputs, output) -> None:
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(*output)


def _backward_fps(ctx, grad_indices, grad_distances):
    """Sampling is a selection: no input gets a gradient through it."""
    return _fps.grads()


_fps = Op(
    "warpgeo::farthest_point_sampling",
    check=_check_fps,
    impl=_fps_impl,
    fake=_fps_fake,
    setup=_setup_fps,
    backward=_backward_fps,
)

FarthestPointSampling = _fps.function(
    "FarthestPointSampling",
    """FPS as an autograd Function: indices and distances are marked non-differentiable.

    Sampling is a selection, so no gradient flows to ``points`` through it; gradients reach whatever the
    caller gathers with the indices. Prefer :func:`farthest_point_sampling`, which also takes ints, lists and
    ``(N, 3)`` clouds. ``apply`` runs ``torch.ops.warpgeo.farthest_point_sampling``'s checks and kernels:

    ``apply(points (B, N, 3), lengths (B,) | None, num_samples (B,) | None, start (B,) | None,
    max_samples: int)`` -> ``(indices (B, K) int64, distances (B, K))``, K = ``max_samples``.
    """,
)


def _per_cloud_samples(num_samples, batch: int, device: torch.device) -> tuple[torch.Tensor | None, int]:
    """Per-cloud K as None (every cloud the same) or a (B,) tensor, and the largest K.

    An int and a list are read on the host (no device sync); a tensor's maximum is read from the device.
    """
    if isinstance(num_samples, bool):
        raise TypeError("num_samples must be an int, a list of ints or an integer tensor; got bool")
    if isinstance(num_samples, int):
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1; got {num_samples}")
        return None, num_samples
    if isinstance(num_samples, (list, tuple)):
        if len(num_samples) != batch or not all(
            isinstance(k, int) and not isinstance(k, bool) for k in num_samples
        ):
            raise ValueError(
                f"num_samples as a list must hold {batch} ints (one per cloud); got {num_samples!r}"
            )
        if any(k < 0 for k in num_samples):
            raise ValueError(f"num_samples must be >= 0 for every cloud; got {checks.shown(num_samples)}")
        if max(num_samples, default=0) > _MAX_ROW_BYTES // _SAMPLE_BYTES:  # before an int64 holds them
            raise ValueError(
                f"num_samples may be at most {_MAX_ROW_BYTES // _SAMPLE_BYTES} per cloud (an output row of "
                f"{_SAMPLE_BYTES}-byte entries must stay below 2**31 bytes); got {checks.shown(num_samples)}"
            )
        ks = torch.tensor(num_samples, dtype=torch.int64)
        if device.type == "cuda":  # from pinned memory, asynchronously: no stall of the stream
            ks = ks.pin_memory().to(device, non_blocking=True)
        return ks, max(num_samples, default=0)
    if isinstance(num_samples, torch.Tensor):
        # read below (the output's width): checked here first, as the op checks it again
        ks = _per_cloud(num_samples, "num_samples", batch, device)
        checks.check_index(ks, "num_samples")
        checks.check_shape(ks, "num_samples", (batch,))
        if ks.device != device:
            raise ValueError(f"num_samples must be on the device of points ({device}); got {ks.device}")
        if ks.numel() == 0:
            return ks, 0
        lo, hi = torch.stack(torch.aminmax(ks)).tolist()  # the output's width: one device-to-host read
        if lo < 0:
            raise ValueError(f"num_samples must be >= 0 for every cloud; got {ks.tolist()}")
        return ks, hi
    raise TypeError(
        f"num_samples must be an int, a list of ints or an integer tensor; got {type(num_samples).__name__}"
    )


def _per_cloud(value, name: str, batch: int, device: torch.device) -> torch.Tensor | None:
    """None, an int, or a tensor (a 0-d one is expanded to ``(B,)``) -> None or a tensor, the op's input
    (whose check refuses a tensor of the wrong dtype, shape or device)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.reshape(1).expand(batch) if value.dim() == 0 else value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or an integer tensor; got {type(value).__name__}")
    if not _INT64_MIN <= value <= _INT64_MAX:  # beyond every cloud: out of range, as any other such value
        error = IndexError if name == "start_index" else ValueError
        raise error(f"{name} must lie within the cloud's points; got {checks.shown(value)} (beyond int64)")
    return torch.full((batch,), value, dtype=torch.int64, device=device)


def _random_start(lengths, n: int, batch: int, generator, device: torch.device) -> torch.Tensor:
    """A uniform draw among each cloud's valid points (0 for an empty cloud)."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator; got {type(generator).__name__}")
    gen_device = generator.device if generator is not None else device
    u = torch.rand(batch, dtype=torch.float64, generator=generator, device=gen_device).to(device)
    size = torch.full_like(u, float(n))
    # a lengths of the wrong shape or device is refused by the op's check, after this draw
    if lengths is not None and lengths.shape == (batch,) and lengths.device == device:
        size = lengths.to(torch.float64)
    return (u * size).floor().to(torch.int64)
