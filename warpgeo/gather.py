"""Point-feature gather (pointnet2 / pointops "Gathering") with a scatter-add backward, plain and weighted."""

from __future__ import annotations

import ctypes
import math
import sys

import torch

from . import _launch, _warp, checks
from ._constants import GATHER_CHANNELS_PER_ROW, MAX_POINTS, SENTINEL_INDEX
from ._kernels import gather as kernels
from ._op import Op

__all__ = ["GatherPoints", "gather_points"]

# The forward copies values, so it moves bit patterns of the same width (exact for every float dtype,
# bfloat16 included, and no widening pass for half inputs).
_BITS_DTYPE = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}
#: features dtype (or a gradient's accumulator) -> the key of the kernel tables (``warpgeo._kernels.gather``):
#: the forward's bits and the backward's accumulator of that precision live in one Warp module.
_PRECISION = {
    torch.float16: "half",
    torch.bfloat16: "half",
    torch.float32: "single",
    torch.float64: "double",
}
_INDEX = {torch.int32: "int32", torch.int64: "int64"}


# --------------------------------------------------------------------------------------------------------
# the public function
# --------------------------------------------------------------------------------------------------------


def gather_points(
    features: torch.Tensor,
    idx: torch.Tensor,
    *,
    weight: torch.Tensor | None = None,
    deterministic: bool = False,
) -> torch.Tensor:
    """Gather point features by index: ``out[b, c, m(, k)] = features[b, c, idx[b, m(, k)]]``.

    With ``weight`` (the shape of a ``(B, M, K)`` idx), the weighted sum over K instead:
    ``out[b, c, m] = sum_k weight[b, m, k] * features[b, c, idx[b, m, k]]`` — pointnet2's
    ``three_interpolate`` for any K (kNN + inverse-distance weights is feature interpolation). It is fused:
    no ``(B, C, M, K)`` tensor is formed. It is computed in the precision of ``features`` (float32 for half
    inputs), differentiable w.r.t. ``features`` and ``weight`` (not twice), and ``-1`` entries contribute
    nothing.

    The backward scatter-adds ``grad_out`` into ``grad_features``: duplicated indices accumulate and ``-1``
    (padding, e.g. from FPS or a ball query) gives 0 in the output and contributes no gradient.

    Determinism of the backward: on the CPU both settings run the same race-free kernel (one thread per
    ``(b, c)`` row, summing in index order), so gradients are bit-identical run to run. On CUDA the default
    uses float atomics (fastest; the last bits can change from run to run where indices repeat), and
    ``deterministic=True`` sums each ``grad_features[b, c, n]`` in a fixed order through a sorted-index
    segment sum (bit-identical run to run, and to the CPU result). Half-precision gradients are accumulated
    in float32; results are returned in the dtype of ``features``. Double backward is supported.

    Args:
        features: ``(B, C, N)`` float16, bfloat16, float32 or float64.
        idx: ``(B, M)`` or grouped ``(B, M, K)`` (e.g. from a ball query / kNN), int32 or int64, values in
            ``[-1, N)``; ``-1`` means "no point".
        weight: optional floating ``(B, M, K)``, the shape of ``idx`` and on the device of ``features``.
        deterministic: bit-identical gradients run to run on every device (see above).

    Returns:
        ``(B, C, M)`` or ``(B, C, M, K)`` (``(B, C, M)`` with ``weight``) in the dtype and on the device of
        ``features``; a fresh tensor (callers may modify it in place).

    Raises:
        TypeError: ``features`` is not a float tensor, ``idx`` is not an int32/int64 tensor, ``weight``
            is not a floating tensor, or ``deterministic`` is not a bool.
        ValueError: ``features`` is not 3-d, ``idx`` is not 2-d or 3-d (3-d with ``weight``), their batch
            sizes differ, ``weight`` does not have the shape of ``idx``, or they lie on different devices.
        IndexError: an index lies outside ``[-1, N)`` (one device-to-host check of the index range).

    Example:
        >>> feats = torch.randn(2, 32, 1000, requires_grad=True)           # (B, C, N)
        >>> idx = farthest_point_sampling(torch.rand(2, 1000, 3), 128)     # (B, M) int64
        >>> out = gather_points(feats, idx)                                # (2, 32, 128)
        >>> out.sum().backward()                                           # feats.grad: (2, 32, 1000)
        >>> dists, nn = knn(torch.rand(2, 500, 3), torch.rand(2, 1000, 3), 3)
        >>> w = 1.0 / (dists + 1e-8)
        >>> up = gather_points(feats, nn, weight=w / w.sum(-1, keepdim=True))  # (2, 32, 500)
    """
    if weight is not None:
        return _weighted_op.call(features=features, idx=idx, weight=weight, deterministic=deterministic)
    return _gather_op.call(features=features, idx=idx, deterministic=deterministic)


# --------------------------------------------------------------------------------------------------------
# the gather's declarations: shape checks, implementation (value checks, launches), fake
# --------------------------------------------------------------------------------------------------------


def _check_gather(features: torch.Tensor, idx: torch.Tensor, deterministic: bool) -> None:
    """The shape, dtype and device checks of every entry point (reads no values)."""
    checks.check_float(features, "features")
    checks.check_index(idx, "idx")
    if features.dim() != 3:
        raise ValueError(f"features must have shape (B, C, N); got {tuple(features.shape)}")
    if idx.dim() not in (2, 3):
        raise ValueError(f"idx must have shape (B, M) or (B, M, K); got {tuple(idx.shape)}")
    if idx.shape[0] != features.shape[0]:
        raise ValueError(
            f"idx must have the batch size of features ({features.shape[0]}); got idx of shape {tuple(idx.shape)}"
        )
    if features.shape[2] > MAX_POINTS:
        raise ValueError(f"features may hold at most {MAX_POINTS} points; got N={features.shape[2]}")
    if math.prod(idx.shape[1:]) > MAX_POINTS:
        raise ValueError(
            f"idx may hold at most 2**31 - 1 indices per batch entry (Warp's int32 sizes); got {tuple(idx.shape)}"
        )
    _check_flag(deterministic)
    checks.check_device("features", features=features, idx=idx)


def _check_flag(deterministic: bool) -> None:
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool; got {type(deterministic).__name__}")


def _gather_impl(features: torch.Tensor, idx: torch.Tensor, deterministic: bool) -> torch.Tensor:
    """features (B, C, N), idx (B, M[, K]) int -> (B, C, M[, K]). ``deterministic`` only matters to autograd."""
    batch, channels, num_points = features.shape
    _check_index_range(idx, num_points, channels)
    out = torch.empty(batch, channels, *idx.shape[1:], dtype=features.dtype, device=features.device)
    if out.numel() == 0:
        return out
    if num_points == 0:  # every index is -1
        return out.zero_()
    method = "elements" if _warp.cuda_algorithms(features.device) else "rows"
    flat_idx = _flat_index(idx)
    _gather(
        features, flat_idx, out if idx.dim() == 2 else out.view(batch, channels, flat_idx.shape[1]), method
    )
    return out


def _gather_fake(features, idx, deterministic):
    return features.new_empty(features.shape[0], features.shape[1], *idx.shape[1:])


def _check_index_range(idx: torch.Tensor, num_points: int, channels: int) -> None:
    """IndexError unless every index lies in ``[-1, num_points)``: one device-to-host transfer. ``channels``
    (C of the features) only for the message: an index that C would hold hints at (B, N, C) features."""
    if idx.numel() == 0 or not checks.checking_values(idx.device):
        return
    low, high = torch.aminmax(idx)
    if idx.device.type == "cpu":
        lo, hi = low.item(), high.item()
    else:  # one transfer
        lo, hi = torch.stack((low, high)).tolist()
    if lo < SENTINEL_INDEX:
        raise IndexError(f"idx must lie in [-1, N={num_points}) (-1 = no point); found {lo}")
    if hi >= num_points:
        hint = ""
        if hi < channels:
            hint = (
                f"; features must be (B, C, N), channels first: these have C={channels}, N={num_points}. "
                "For points (B, N, 3) pass points.transpose(1, 2)"
            )
        raise IndexError(f"idx must lie in [-1, N={num_points}) (-1 = no point); found {hi}{hint}")


def _gather(features: torch.Tensor, flat_idx: torch.Tensor, out: torch.Tensor, method: str) -> None:
    """``out[b, c, l] = features[b, c, idx[b, l]]`` (0 for -1): ``features`` (B, C, N) with N > 0,
    ``flat_idx`` (B, L) int32 or int64, ``out`` (B, C, L). ``method``: ``"rows"`` (a thread per batch entry
    and block of channels, reading int32 and int64 indices as they are; the CPU kernel) or ``"elements"`` (a
    thread per output element, int32 indices; the CUDA kernel)."""
    batch, channels = features.shape[:2]
    length = flat_idx.shape[1]
    bits = _BITS_DTYPE[features.dtype]
    precision = _PRECISION[features.dtype]
    if method == "rows":
        # the row kernel takes arrays with a dense last dimension (what a fresh tensor has)
        dense = out if _dense_rows(out) else torch.empty(out.shape, dtype=out.dtype, device=out.device)
        _advise_huge_pages(dense)
        _launch.launch_blocks(
            kernels.ROWS[_INDEX[flat_idx.dtype], precision].gather_rows,
            (batch, channels),
            device=features.device,
            sliced={"features": _with_dense_rows(features).view(bits), "out": dense.view(bits)},
            per_batch={"idx": _with_dense_rows(flat_idx)},
            rows_per_thread=GATHER_CHANNELS_PER_ROW,
            work_per_row=length,
            what="features",
        )
        if dense is not out:
            out.copy_(dense)
    elif method == "elements":
        _launch.launch_blocks(
            kernels.ELEMENTS[_INDEX[flat_idx.dtype], precision].gather_elements,
            (batch, channels, length),
            device=features.device,
            sliced={"idx": _along_channels(flat_idx, channels), "out": out.view(bits)},
            per_batch={"features": features.view(bits)},
            what="features",
            grid_launch=True,
        )
    else:
        raise ValueError(f"internal error: unknown gather method {method!r}")


# --------------------------------------------------------------------------------------------------------
# the gather's backward, an op of its own (scatter-add; its own backward is the gather: double backward)
# --------------------------------------------------------------------------------------------------------


def _check_scatter(grad_out: torch.Tensor, idx: torch.Tensor, num_points: int, deterministic: bool) -> None:
    checks.check_float(grad_out, "grad_out")
    checks.check_index(idx, "idx")
    checks.check_int(num_points, "num_points", minimum=0)
    if num_points > MAX_POINTS:
        raise ValueError(f"num_points may be at most {MAX_POINTS}; got {num_points}")
    if (
        idx.dim() not in (2, 3)
        or grad_out.dim() != idx.dim() + 1
        or grad_out.shape[0] != idx.shape[0]
        or grad_out.shape[2:] != idx.shape[1:]
    ):
        raise ValueError(
            f"grad_out must have shape (B, C, *idx.shape[1:]) for idx of shape (B, M[, K]); got grad_out "
            f"{tuple(grad_out.shape)} and idx {tuple(idx.shape)}"
        )
    _check_flag(deterministic)
    checks.check_device("grad_out", grad_out=grad_out, idx=idx)


def _scatter_impl(
    grad_out: torch.Tensor, idx: torch.Tensor, num_points: int, deterministic: bool
) -> torch.Tensor:
    """grad_out (B, C, M[, K]), idx (B, M[, K]) -> grad_features (B, C, num_points), dtype of grad_out.

    Indices outside ``[0, num_points)`` contribute nothing (the forward has rejected all but -1).
    """
    batch, channels = grad_out.shape[0], grad_out.shape[1]
    flat_idx = _flat_index(idx)
    # in its compute precision, strides kept: the element kernels read any strides (autograd's gradient of a
    # sum is broadcast, stride 0: no copy), the row kernel makes its rows dense itself
    compute = _warp.compute_dtype(grad_out.dtype)
    grad = grad_out if grad_out.dtype == compute else grad_out.to(compute)
    if idx.dim() != 2:
        grad = grad.reshape(batch, channels, flat_idx.shape[1])
    method = _scatter_method(grad_out.device, deterministic)
    precision = _PRECISION[grad_out.dtype]
    out = _scatter_add(grad, flat_idx, num_points, method, precision)
    return out if out.dtype == grad_out.dtype else out.to(grad_out.dtype)


def _scatter_fake(grad_out, idx, num_points, deterministic):
    return grad_out.new_empty(grad_out.shape[0], grad_out.shape[1], num_points)


def _scatter_method(device: torch.device, deterministic: bool) -> str:
    """The backward kernel for a device; the CPU one is race-free and ordered, deterministic either way."""
    if not _warp.cuda_algorithms(device):
        return "rows"
    return "segments" if deterministic else "atomic"


def _scatter_add(
    grad: torch.Tensor, flat_idx: torch.Tensor, num_points: int, method: str, precision: str
) -> torch.Tensor:
    """``out[b, c, n] = sum of grad[b, c, l] over idx[b, l] == n`` in the precision of ``grad``.

    ``grad`` (B, C, L) float32/float64 (the accumulator of ``precision``, the kernel tables' key of the
    features dtype), ``flat_idx`` (B, L) int32 or int64. ``method``:

    * ``"rows"``: a thread per ``(b, c)`` row, in ``l`` order (the CPU kernel; deterministic; reads int32
      and int64 indices as they are);
    * ``"atomic"``: a thread per ``(b, c, l)`` with float atomics (CUDA default; order varies run to run);
    * ``"segments"``: a thread per ``(b, c, n)`` summing its contributors in ``l`` order through a CSR of
      the stably sorted indices (CUDA ``deterministic=True``; bit-identical to ``"rows"``).
    """
    batch, channels, length = grad.shape
    device = grad.device
    if method == "rows":
        out = torch.empty(batch, channels, num_points, dtype=grad.dtype, device=device)
        _advise_huge_pages(out)
        _launch.launch_blocks(
            kernels.ROWS[_INDEX[flat_idx.dtype], precision].scatter_add_rows,
            (batch, channels),
            device=device,
            sliced={"grad_out": _with_dense_rows(grad), "grad_features": out},
            per_batch={"idx": _with_dense_rows(flat_idx)},
            work_per_row=length + num_points,
            what="grad_out",
        )
        return out
    if method == "atomic":
        out = torch.zeros(batch, channels, num_points, dtype=grad.dtype, device=device)
        _launch.launch_blocks(
            kernels.ELEMENTS[_INDEX[flat_idx.dtype], precision].scatter_add_atomic,
            (batch, channels, length),
            device=device,
            sliced={"grad_out": grad, "idx": _along_channels(flat_idx, channels)},
            per_batch={"grad_features": out},
            what="grad_out",
            grid_launch=True,
        )
    elif method == "segments":
        out = torch.empty(batch, channels, num_points, dtype=grad.dtype, device=device)
        order, starts, ends = _segments(_int32_index(flat_idx, num_points), num_points, channels)
        _launch.launch_blocks(
            kernels.ELEMENTS["int32", precision].scatter_add_segments,
            (batch, channels, num_points),
            device=device,
            sliced={"starts": starts, "ends": ends, "grad_features": out},
            per_batch={"grad_out": grad, "order": order},
            what="grad_features",
            grid_launch=True,
        )
    else:
        raise ValueError(f"internal error: unknown scatter method {method!r}")
    return out


# --------------------------------------------------------------------------------------------------------
# the weighted gather (pointnet2's three_interpolate for any K), fused: no (B, C, M, K) tensor
# --------------------------------------------------------------------------------------------------------


def _check_weighted(
    features: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor, deterministic: bool
) -> None:
    _check_gather(features, idx, deterministic)
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        got = weight.dtype if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise TypeError(f"weight must be a floating-point tensor; got {got}")
    if idx.dim() != 3:
        raise ValueError(f"with weight, idx must have shape (B, M, K); got {tuple(idx.shape)}")
    if weight.shape != idx.shape:
        raise ValueError(f"weight must have the shape of idx {tuple(idx.shape)}; got {tuple(weight.shape)}")
    checks.check_device("features", features=features, weight=weight)


def _weighted_impl(
    features: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor, deterministic: bool
) -> torch.Tensor:
    """features (B, C, N), idx (B, M, K) int, weight (B, M, K) float -> (B, C, M) in features' dtype:
    ``out[b, c, m] = sum_k weight[b, m, k] * features[b, c, idx[b, m, k]]`` (-1 contributes nothing)."""
    batch, channels, num_points = features.shape
    _check_index_range(idx, num_points, channels)
    work = _warp.compute_dtype(features.dtype)
    out = torch.empty(batch, channels, idx.shape[1], dtype=work, device=features.device)
    if num_points == 0 or idx.shape[2] == 0:
        return out.zero_().to(features.dtype)
    method = "elements" if _warp.cuda_algorithms(features.device) else "rows"
    _weighted_gather(_warp.to_compute(features), _int32_index(idx, num_points), weight.to(work), out, method)
    return out.to(features.dtype)


def _weighted_gather(
    features: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, method: str
) -> None:
    """``out[b, c, m] = sum_k weight[b, m, k] * features[b, c, idx[b, m, k]]``, all in one compute precision
    (float32 / float64), ``idx`` int32 (B, M, K). ``method``: ``"rows"`` (a thread per ``(b, c)``; the CPU
    kernel) or ``"elements"`` (a thread per output element; the CUDA kernel)."""
    precision = _PRECISION[features.dtype]
    batch, channels = features.shape[:2]
    if method == "rows":
        _launch.launch_blocks(
            kernels.WEIGHTED_ROWS[precision].weighted_gather_rows,
            (batch, channels),
            device=features.device,
            sliced={"features": features, "out": out},
            per_batch={"idx": idx, "weight": weight},
            work_per_row=idx.shape[1] * idx.shape[2],
            what="features",
        )
    elif method == "elements":
        _launch.launch_blocks(
            kernels.WEIGHTED_ELEMENTS[precision].weighted_gather_elements,
            (batch, channels, idx.shape[1]),
            device=features.device,
            sliced={
                "idx": _along_channels(idx, channels),
                "weight": _along_channels(weight, channels),
                "out": out,
            },
            per_batch={"features": features},
            what="features",
            grid_launch=True,
        )
    else:
        raise ValueError(f"internal error: unknown weighted gather method {method!r}")


def _weighted_fake(features, idx, weight, deterministic):
    return features.new_empty(features.shape[0], features.shape[1], idx.shape[1])


def _check_weighted_backward(grad_out, features, idx, weight, needs_features, needs_weight, deterministic):
    _check_weighted(features, idx, weight, deterministic)
    checks.check_float(grad_out, "grad_out")
    checks.check_shape(grad_out, "grad_out", (features.shape[0], features.shape[1], idx.shape[1]))
    checks.check_device("features", features=features, grad_out=grad_out)


def _weighted_backward_impl(
    grad_out: torch.Tensor,
    features: torch.Tensor,
    idx: torch.Tensor,
    weight: torch.Tensor,
    needs_features: bool,
    needs_weight: bool,
    deterministic: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (grad_features (B, C, N) in features' dtype, grad_weight (B, M, K) in weight's dtype); each is an
    empty (0,) tensor where not asked for. Indices outside ``[0, N)`` contribute nothing."""
    num_points = features.shape[2]
    work = _warp.compute_dtype(features.dtype)
    grad = grad_out.to(work).contiguous()
    idx32 = _int32_index(idx, num_points)  # out of range (int64 too) -> -1
    grad_features = features.new_empty(0)
    grad_weight = weight.new_empty(0)
    if needs_features:
        method = _scatter_method(features.device, deterministic)
        grad_features = _weighted_scatter(grad, idx32, weight.to(work), num_points, method).to(features.dtype)
    if needs_weight:
        features = _warp.to_compute(features)
        batch, channels = features.shape[:2]
        gw = torch.empty(idx.shape, dtype=work, device=features.device)
        _launch.launch_blocks(
            kernels.WEIGHTED_ROWS[_PRECISION[work]].weighted_grad_weight_rows,
            (batch, idx.shape[1]),
            device=features.device,
            # grad_out as (B, M, C): sliced like the rows (b, m)
            sliced={"grad_out": grad.transpose(1, 2), "idx": idx32, "grad_weight": gw},
            per_batch={"features": features},
            work_per_row=idx.shape[2] * channels,
            what="idx",
        )
        grad_weight = gw.to(weight.dtype)
    return grad_features, grad_weight


def _weighted_scatter(
    grad: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor, num_points: int, method: str
) -> torch.Tensor:
    """``out[b, c, n] = sum of grad[b, c, m] * weight[b, m, k] over idx[b, m, k] == n`` in the precision of
    ``grad`` (float32 / float64, as ``weight``); ``idx`` int32 (B, M, K). ``method`` as for
    :func:`_scatter_add` (``"rows"``, ``"atomic"``, ``"segments"``)."""
    precision = _PRECISION[grad.dtype]
    batch, channels = grad.shape[:2]
    device = grad.device
    if method == "rows":
        out = torch.empty(batch, channels, num_points, dtype=grad.dtype, device=device)
        _launch.launch_blocks(
            kernels.WEIGHTED_ROWS[precision].weighted_scatter_rows,
            (batch, channels),
            device=device,
            sliced={"grad_out": grad, "grad_features": out},
            per_batch={"idx": idx, "weight": weight},
            work_per_row=idx.shape[1] * idx.shape[2] + num_points,
            what="grad_out",
        )
    elif method == "atomic":
        out = torch.zeros(batch, channels, num_points, dtype=grad.dtype, device=device)
        _launch.launch_blocks(
            kernels.WEIGHTED_ELEMENTS[precision].weighted_scatter_atomic,
            (batch, channels, idx.shape[1]),
            device=device,
            sliced={
                "grad_out": grad,
                "idx": _along_channels(idx, channels),
                "weight": _along_channels(weight, channels),
            },
            per_batch={"grad_features": out},
            what="grad_out",
            grid_launch=True,
        )
    elif method == "segments":
        out = torch.empty(batch, channels, num_points, dtype=grad.dtype, device=device)
        order, starts, ends = _segments(_flat_index(idx), num_points, channels)
        _launch.launch_blocks(
            kernels.WEIGHTED_ELEMENTS[precision].weighted_scatter_segments,
            (batch, channels, num_points),
            device=device,
            sliced={"starts": starts, "ends": ends, "grad_features": out},
            per_batch={"grad_out": grad, "weight": _along_channels(weight, channels), "order": order},
            what="grad_features",
            grid_launch=True,
        )
    else:
        raise ValueError(f"internal error: unknown weighted scatter method {method!r}")
    return out


def _weighted_backward_fake(grad_out, features, idx, weight, needs_features, needs_weight, deterministic):
    gf = features.new_empty(features.shape) if needs_features else features.new_empty(0)
    gw = weight.new_empty(weight.shape) if needs_weight else weight.new_empty(0)
    return gf, gw


# --------------------------------------------------------------------------------------------------------
# autograd: one setup / backward pair per op, registered on the custom op and reused by its Function
# --------------------------------------------------------------------------------------------------------


def _setup_gather(ctx, inputs, output) -> None:
    features, idx, deterministic = inputs
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(idx)
    ctx.num_points = features.shape[-1]
    ctx.deterministic = deterministic


def _backward_gather(ctx, grad_out):
    """d(gather)/d(features): scatter-add of ``grad_out``; idx and the flag get None."""
    if grad_out is None or not ctx.needs_input_grad[0]:
        return _gather_op.grads()
    (idx,) = ctx.saved_tensors
    scatter = _scatter_op.in_backward(grad_out, idx)
    return _gather_op.grads(features=scatter(grad_out, idx, ctx.num_points, ctx.deterministic))


def _setup_scatter(ctx, inputs, output) -> None:
    _grad_out, idx, _num_points, deterministic = inputs
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(idx)
    ctx.deterministic = deterministic


def _backward_scatter(ctx, grad_grad_features):
    """The scatter-add is linear in ``grad_out`` and its adjoint is the gather: double backward works."""
    if grad_grad_features is None or not ctx.needs_input_grad[0]:
        return _scatter_op.grads()
    (idx,) = ctx.saved_tensors
    gather = _gather_op.in_backward(grad_grad_features, idx)
    return _scatter_op.grads(grad_out=gather(grad_grad_features, idx, ctx.deterministic))


def _setup_weighted(ctx, inputs, output) -> None:
    features, idx, weight, deterministic = inputs
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(features, idx, weight)
    ctx.deterministic = deterministic


def _backward_weighted(ctx, grad_out):
    """Scatter of ``grad_out * weight`` to the features; ``grad_out . features[idx]`` to the weights."""
    needs_features, needs_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    if grad_out is None or not (needs_features or needs_weight):
        return _weighted_op.grads()
    features, idx, weight = ctx.saved_tensors
    backward = _weighted_backward_op.in_backward(grad_out, features)
    gf, gw = backward(grad_out, features, idx, weight, needs_features, needs_weight, ctx.deterministic)
    return _weighted_op.grads(features=gf if needs_features else None, weight=gw if needs_weight else None)


_gather_op = Op(
    "warpgeo::gather_points",
    check=_check_gather,
    impl=_gather_impl,
    fake=_gather_fake,
    setup=_setup_gather,
    backward=_backward_gather,
)
_scatter_op = Op(
    "warpgeo::gather_points_backward",
    check=_check_scatter,
    impl=_scatter_impl,
    fake=_scatter_fake,
    setup=_setup_scatter,
    backward=_backward_scatter,
)
_weighted_op = Op(
    "warpgeo::gather_points_weighted",
    check=_check_weighted,
    impl=_weighted_impl,
    fake=_weighted_fake,
    setup=_setup_weighted,
    backward=_backward_weighted,
)
#: differentiable once: no autograd of its own
_weighted_backward_op = Op(
    "warpgeo::gather_points_weighted_backward",
    check=_check_weighted_backward,
    impl=_weighted_backward_impl,
    fake=_weighted_backward_fake,
)

GatherPoints = _gather_op.function(
    "GatherPoints",
    """Gather as an autograd Function: ``torch.ops.warpgeo.gather_points``'s checks and kernels, the same
    backward. Prefer :func:`gather_points`.

    ``apply(features (B, C, N), idx (B, M) or (B, M, K) int32/int64, deterministic: bool)``
    -> ``(B, C, M)`` or ``(B, C, M, K)``. Only ``idx`` is saved; the backward runs only when ``features``
    needs a gradient and a gradient arrives (``None`` grad_output -> ``None``).
    """,
)


# --------------------------------------------------------------------------------------------------------
# host helpers: index forms, CSR segments, huge pages, dense rows
# --------------------------------------------------------------------------------------------------------


def _flat_index(idx: torch.Tensor) -> torch.Tensor:
    """``(B, M)`` or ``(B, M, K)`` int32 / int64 -> ``(B, L)`` of the same dtype (a view where it can be: the
    CPU kernels read either index dtype, bounds-checked at 64 bits; see ``_int32_index`` for the others)."""
    if idx.dim() == 2:
        return idx
    return idx.reshape(idx.shape[0], math.prod(idx.shape[1:]))


def _int32_index(idx: torch.Tensor, num_points: int) -> torch.Tensor:
    """``idx`` as int32 for the kernels that take int32 indices (the CUDA and weighted ones): an int64 index
    outside ``[0, num_points)`` becomes -1 (narrowing alone would turn 2**32 + 5 into the valid index 5)."""
    if idx.dtype == torch.int32:
        return idx
    inside = (idx >= 0) & (idx < num_points)
    return torch.where(inside, idx, SENTINEL_INDEX).to(torch.int32)


def _along_channels(t: torch.Tensor, channels: int) -> torch.Tensor:
    """``t`` (B, ...) broadcast to (B, C, ...) (stride 0, no copy): the element kernels' grids are (B, C, ...)
    and every array a block of the grid reads along it is sliced with it."""
    return t.unsqueeze(1).expand(t.shape[0], channels, *t.shape[1:])


def _segments(
    flat_idx: torch.Tensor, num_points: int, channels: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """CSR of each row of ``flat_idx`` (B, L): ``order`` (B, L) int32 lists ``l`` by ascending index (ties in
    ``l`` order); ``order[b, starts[b, c, n]:ends[b, c, n]]`` are the ``l`` with ``idx[b, l] == n``, for every
    ``c`` (``starts`` / ``ends`` (B, C, N) are views of one (B, N + 1) tensor, broadcast along C). Padding
    (-1) sorts first and lies before ``starts[b, c, 0]``."""
    keys, order = torch.sort(flat_idx, dim=1, stable=True)
    bounds = torch.arange(num_points + 1, dtype=torch.int32, device=flat_idx.device)
    offsets = torch.searchsorted(keys, bounds.expand(flat_idx.shape[0], -1).contiguous(), out_int32=True)
    offsets = _along_channels(offsets, channels)
    return order.to(torch.int32).contiguous(), offsets[..., :-1], offsets[..., 1:]


#: A fresh CPU output of at least this many bytes (an allocation glibc always maps on its own, and unmaps on
#: free) is backed by transparent huge pages where the system grants them on request: a first touch of fresh
#: memory page by page is most of a large gather's time (a (8, 64, 131072) float32 output: ~180 ms of faults
#: on a 2-core VM, 35 ms with huge pages).
_HUGE_PAGE_MIN_BYTES = 32 << 20
_HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14


def _madvise_hugepage():
    """libc's ``madvise`` where transparent huge pages are granted on request only (else None); looked up
    once."""
    global _MADVISE
    if _MADVISE is _UNKNOWN:
        _MADVISE = None
        if sys.platform.startswith("linux"):
            try:
                with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
                    on_request = "[madvise]" in f.read()  # "always": nothing to ask; "never": nothing to get
                madvise = ctypes.CDLL(None, use_errno=True).madvise if on_request else None
            except (OSError, AttributeError):
                madvise = None
            if madvise is not None:
                madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
                madvise.restype = ctypes.c_int
                _MADVISE = madvise
    return _MADVISE


_UNKNOWN = object()
_MADVISE: object = _UNKNOWN


def _advise_huge_pages(t: torch.Tensor) -> None:
    """Ask for huge pages behind the whole 2 MiB pages of a fresh, large CPU tensor (see
    ``_HUGE_PAGE_MIN_BYTES``); a hint: nothing happens where it is not granted."""
    size = t.numel() * t.element_size()
    if t.device.type != "cpu" or size < _HUGE_PAGE_MIN_BYTES:
        return
    madvise = _madvise_hugepage()
    if madvise is None:
        return
    start = -(-t.data_ptr() // _HUGE_PAGE) * _HUGE_PAGE
    end = (t.data_ptr() + size) // _HUGE_PAGE * _HUGE_PAGE
    if end > start:
        madvise(start, end - start, _MADV_HUGEPAGE)


def _dense_rows(t: torch.Tensor) -> bool:
    """Is the last dimension of ``t`` dense (what the CPU row kernels index without a stride)?"""
    return t.shape[-1] <= 1 or t.stride(-1) == 1


def _with_dense_rows(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a contiguous copy where its last dimension is not dense."""
    return t if _dense_rows(t) else t.contiguous()
