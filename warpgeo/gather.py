"""Point-feature gather (pointnet2 / pointops "Gathering") with a scatter-add backward."""

from __future__ import annotations

import ctypes
import math
import sys

import torch

from . import _interop

__all__ = ["GatherPoints", "gather_points"]

_SENTINEL_INDEX = -1
#: Indices are handed to the kernels as int32.

# The forward copies values, so it moves bit patterns of the same width (exact for every float dtype,
# bfloat16 included, and no widening pass for half inputs).
_BITS_DTYPE = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}


#: Rows (or threads along one grid dimension) of one launch when a gather too large for one Warp launch
#: is split into several.
_MAX_LAUNCH_ROWS = 2**30
#: The kernel parameters laid out ``(B, C, ...)``: split along B and C; the others are ``(B, ...)``.
_PER_CHANNEL = frozenset({"features", "out", "grad_out", "grad_features"})
#: A tensor dimension or byte stride reaching this does not fit one Warp launch (a name of its own so that
#: tests can lower it).
_STRIDE_LIMIT = _interop.INT32_LIMIT


def _flat_index(idx: torch.Tensor) -> torch.Tensor:
    """``(B, M)`` or ``(B, M, K)`` int32 / int64 -> ``(B, L)`` of the same dtype (a view where it can be: the
    CPU kernels read either index dtype, bounds-checked at 64 bits; see ``_int32_index`` for the others)."""
    if idx.dim() == 2:
        return idx
    return idx.reshape(idx.shape[0], math.prod(idx.shape[1:]))


def _blocks(batch: int, channels: int, args: dict, per_channel: bool):
    """The ``(b slice, c slice, rows of b, rows of c)`` blocks a ``(batch, channels)`` launch is split into.

    One block (everything) when every tensor fits one Warp launch (int32 dimensions and byte strides,
    below ``_MAX_LAUNCH_ROWS`` rows): the usual case. Otherwise ranges of B, or one B entry at a time (a
    size-1 dimension's stride is not used, see ``_interop``), and one (b, c) row at a time where a row
    itself has a stride of >= 2**31 bytes along C (e.g. features rows of 2 GiB).
    """
    limit = _STRIDE_LIMIT

    def big(dim: int, only_channel: bool) -> bool:
        return any(
            t.numel() > 0 and t.dim() > dim and t.shape[dim] > 1 and t.stride(dim) * t.element_size() >= limit
            for name, t in args.items()
            if not only_channel or name in _PER_CHANNEL
        )

    split_c = per_channel and big(1, True)
    split_b = split_c or big(0, False)
    if not split_b and batch * channels <= _MAX_LAUNCH_ROWS:
        yield slice(None), slice(None), batch, channels
        return
    if not split_b and 0 < channels <= _MAX_LAUNCH_ROWS:
        step = _MAX_LAUNCH_ROWS // channels
        for b0 in range(0, batch, step):
            b1 = min(b0 + step, batch)
            yield slice(b0, b1), slice(None), b1 - b0, channels
        return
    step = 1 if split_c else _MAX_LAUNCH_ROWS
    if not per_channel and channels > step:
        raise ValueError(f"idx of shape {tuple(args['idx'].shape)}: too many rows for one Warp launch")
    for b in range(batch):
        for c0 in range(0, channels, step):
            c1 = min(c0 + step, channels)
            yield slice(b, b + 1), slice(c0, c1), 1, c1 - c0


def _launch_blocks(
    kernel,
    batch: int,
    channels: int,
    *,
    device,
    length=None,
    work_per_row=1,
    per_channel=True,
    channels_per_row=1,
    **args,
) -> None:
    """Launch a gather-family kernel over ``(batch, channels)`` in blocks that fit Warp (see
    :func:`_blocks`): a row kernel (``launch_rows`` over ``b * ceil(C / channels_per_row) + block``, a row
    handling ``channels_per_row`` channels) or, with ``length``, a grid kernel over ``[B, C, length]``.
    ``(B, C, ...)`` tensors (``_PER_CHANNEL``) are sliced along B and C, the rest along B."""
    if (
        length is None
        and batch * channels <= _MAX_LAUNCH_ROWS
        and _interop.dense_below(args.values(), _STRIDE_LIMIT)
    ):  # the usual case
        rows = batch * -(-channels // channels_per_row)
        _interop.launch_rows(kernel, rows, device=device, work_per_row=work_per_row, **args)
        return
    for bs, cs, nb, nc in _blocks(batch, channels, args, per_channel):
        if nb != batch or nc != channels:
            args_ = {
                k: (t[bs, cs] if per_channel and k in _PER_CHANNEL else t[bs]) if t.numel() > 0 else t
                for k, t in args.items()
            }
        else:
            args_ = args
        if length is None:
            rows = nb * -(-nc // channels_per_row)
            _interop.launch_rows(kernel, rows, device=device, work_per_row=work_per_row, **args_)
        else:
            _interop.launch(kernel, [nb, nc, length], device=device, **args_)


def _check_shapes(features: torch.Tensor, idx: torch.Tensor) -> None:
    """The shape, dtype and device checks of every entry point (reads no values)."""
    _interop.check_float(features, "features")
    _interop.check_index(idx, "idx")
    if features.dim() != 3:
        raise ValueError(f"features must have shape (B, C, N); got {tuple(features.shape)}")
    if idx.dim() not in (2, 3):
        raise ValueError(f"idx must have shape (B, M) or (B, M, K); got {tuple(idx.shape)}")
    if idx.shape[0] != features.shape[0]:
        raise ValueError(
            f"idx must have the batch size of features ({features.shape[0]}); got idx of shape {tuple(idx.shape)}"
        )
    if features.shape[2] > _interop.MAX_POINTS:
        raise ValueError(f"features may hold at most {_interop.MAX_POINTS} points; got N={features.shape[2]}")
    if math.prod(idx.shape[1:]) > _interop.MAX_POINTS:
        raise ValueError(
            f"idx may hold at most 2**31 - 1 indices per batch entry (Warp's int32 sizes); got {tuple(idx.shape)}"
        )
    _interop.check_device("features", features=features, idx=idx)


def _check_index_range(idx: torch.Tensor, num_points: int) -> None:
    """IndexError unless every index lies in ``[-1, num_points)``: one device-to-host transfer."""
    if idx.numel() == 0 or not _interop.checking_values(idx.device):
        return
    low, high = torch.aminmax(idx)
    if idx.device.type == "cpu":
        lo, hi = low.item(), high.item()
    else:  # one transfer
        lo, hi = torch.stack((low, high)).tolist()
    if lo < _SENTINEL_INDEX:
        raise IndexError(f"idx must lie in [-1, N={num_points}) (-1 = no point); found {lo}")
    if hi >= num_points:
        raise IndexError(f"idx must lie in [-1, N={num_points}) (-1 = no point); found {hi}")


# --------------------------------------------------------------------------------------------------------
# the custom ops (what torch.compile sees as opaque nodes)
# --------------------------------------------------------------------------------------------------------


def _gather_impl(features: torch.Tensor, idx: torch.Tensor, deterministic: bool) -> torch.Tensor:
    """features (B, C, N), idx (B, M[, K]) int -> (B, C, M[, K]). ``deterministic`` only matters to autograd."""
    _check_shapes(features, idx)
    batch, channels, num_points = features.shape
    _check_index_range(idx, num_points)
    out = torch.empty(batch, channels, *idx.shape[1:], dtype=features.dtype, device=features.device)
    if out.numel() == 0:
        return out
    if num_points == 0:  # every index is -1
        return out.zero_()
    method = "rows" if features.device.type == "cpu" else "elements"
    flat_idx = _flat_index(idx)
    _gather(features, flat_idx, out.view(batch, channels, flat_idx.shape[1]), method)
    return out


_gather_op = torch.library.custom_op("warpgeo::gather_points", _gather_impl, mutates_args=())


@_gather_op.register_fake
def _(features, idx, deterministic):
    _check_shapes(features, idx)
    return features.new_empty(features.shape[0], features.shape[1], *idx.shape[1:])


def _gather(features: torch.Tensor, flat_idx: torch.Tensor, out: torch.Tensor, method: str) -> None:
    """``out[b, c, l] = features[b, c, idx[b, l]]`` (0 for -1): ``features`` (B, C, N) with N > 0,
    ``flat_idx`` (B, L) int32 or int64, ``out`` (B, C, L). ``method``: ``"rows"`` (a thread per batch entry
    and block of channels, reading int32 and int64 indices as they are; the CPU kernel) or ``"elements"`` (a
    thread per output element, int32 indices; the CUDA kernel)."""
    kernels = _interop.kernels("gather")
    batch, channels, num_points = features.shape
    length = flat_idx.shape[1]
    bits = _BITS_DTYPE[features.dtype]
    if method == "rows":
        # the row kernel takes arrays with a dense last dimension (what a fresh tensor has)
        dense = out if _dense_rows(out) else torch.empty(out.shape, dtype=out.dtype, device=out.device)
        _advise_huge_pages(dense)
        block = kernels.CHANNELS_PER_ROW
        _launch_blocks(
            _interop.overload(_interop.overload(kernels.GATHER_ROWS, flat_idx.dtype), bits),
            batch,
            channels,
            device=features.device,
            work_per_row=length * block,
            channels_per_row=block,
            features=_with_dense_rows(features).view(bits),
            idx=_with_dense_rows(flat_idx),
            out=dense.view(bits),
        )
        if dense is not out:
            out.copy_(dense)
    elif method == "elements":
        _launch_blocks(
            _interop.overload(kernels.GATHER_ELEMENTS, bits),
            batch,
            channels,
            length=length,
            device=features.device,
            features=features.view(bits),
            idx=_int32_index(flat_idx, num_points),
            out=out.view(bits),
        )
    else:
        raise ValueError(f"internal error: unknown gather method {method!r}")


def _scatter_impl(
    grad_out: torch.Tensor, idx: torch.Tensor, num_points: int, deterministic: bool
) -> torch.Tensor:
    """grad_out (B, C, M[, K]), idx (B, M[, K]) -> grad_features (B, C, num_points), dtype of grad_out.

    Indices outside ``[0, num_points)`` contribute nothing (the forward has rejected all but -1).
    """
    _check_scatter_shapes(grad_out, idx, num_points)
    return _scatter_grad(grad_out, idx, num_points, deterministic)


def _scatter_grad(
    grad_out: torch.Tensor, idx: torch.Tensor, num_points: int, deterministic: bool
) -> torch.Tensor:
    """:func:`_scatter_impl` without its shape checks: for the eager backward of a gather, whose ``idx`` and
    ``num_points`` the forward checked and whose ``grad_out`` autograd has checked against the forward's
    output (shape, device; dtype cast to it)."""
    batch, channels = grad_out.shape[0], grad_out.shape[1]
    flat_idx = _flat_index(idx)
    grad = _interop.to_compute(grad_out).reshape(batch, channels, flat_idx.shape[1])
    method = _scatter_method(grad_out.device, deterministic)
    return _scatter_add(grad, flat_idx, num_points, method).to(grad_out.dtype)


_scatter_op = torch.library.custom_op("warpgeo::gather_points_backward", _scatter_impl, mutates_args=())


@_scatter_op.register_fake
def _(grad_out, idx, num_points, deterministic):
    _check_scatter_shapes(grad_out, idx, num_points)
    return grad_out.new_empty(grad_out.shape[0], grad_out.shape[1], num_points)


def _check_scatter_shapes(grad_out: torch.Tensor, idx: torch.Tensor, num_points: int) -> None:
    _interop.check_float(grad_out, "grad_out")
    _interop.check_index(idx, "idx")
    _interop.check_int(num_points, "num_points", minimum=0)
    if num_points > _interop.MAX_POINTS:
        raise ValueError(f"num_points may be at most {_interop.MAX_POINTS}; got {num_points}")
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
    _interop.check_device("grad_out", grad_out=grad_out, idx=idx)


def _scatter_method(device: torch.device, deterministic: bool) -> str:
    """The backward kernel for a device; the CPU one is race-free and ordered, deterministic either way."""
    if device.type == "cpu":
        return "rows"
    return "segments" if deterministic else "atomic"


def _scatter_add(grad: torch.Tensor, flat_idx: torch.Tensor, num_points: int, method: str) -> torch.Tensor:
    """``out[b, c, n] = sum of grad[b, c, l] over idx[b, l] == n`` in the precision of ``grad``.

    ``grad`` (B, C, L) contiguous float32/float64, ``flat_idx`` (B, L) int32 or int64 contiguous. ``method``:

    * ``"rows"``: a thread per ``(b, c)`` row, in ``l`` order (the CPU kernel; deterministic; reads int32
      and int64 indices as they are);
    * ``"atomic"``: a thread per ``(b, c, l)`` with float atomics (CUDA default; order varies run to run);
    * ``"segments"``: a thread per ``(b, c, n)`` summing its contributors in ``l`` order through a CSR of
      the stably sorted indices (CUDA ``deterministic=True``; bit-identical to ``"rows"``).
    """
    kernels = _interop.kernels("gather")
    batch, channels, length = grad.shape
    device = grad.device
    if method == "rows":
        out = torch.empty(batch, channels, num_points, dtype=grad.dtype, device=device)
        _advise_huge_pages(out)
        _launch_blocks(
            _interop.overload(_interop.overload(kernels.SCATTER_ADD_ROWS, flat_idx.dtype), grad.dtype),
            batch,
            channels,
            device=device,
            work_per_row=length + num_points,
            grad_out=_with_dense_rows(grad),
            idx=_with_dense_rows(flat_idx),
            grad_features=out,
        )
    elif method == "atomic":
        out = torch.zeros(batch, channels, num_points, dtype=grad.dtype, device=device)
        _launch_blocks(
            _interop.overload(kernels.SCATTER_ADD_ATOMIC, grad.dtype),
            batch,
            channels,
            length=length,
            device=device,
            grad_out=grad,
            idx=_int32_index(flat_idx, num_points),
            grad_features=out,
        )
    elif method == "segments":
        out = torch.empty(batch, channels, num_points, dtype=grad.dtype, device=device)
        order, offsets = _segments(_int32_index(flat_idx, num_points), num_points)
        _launch_blocks(
            _interop.overload(kernels.SCATTER_ADD_SEGMENTS, grad.dtype),
            batch,
            channels,
            length=num_points,
            device=device,
            grad_out=grad,
            order=order,
            offsets=offsets,
            grad_features=out,
        )
    else:
        raise ValueError(f"internal error: unknown scatter method {method!r}")
    return out


#: A fresh CPU output of at least this many bytes (an allocation glibc always maps on its own, and unmaps on
#: free) is backed by transparent huge pages where the system grants them on request (Linux THP "madvise"):
#: its first writes, inside the kernel, then fault in 2 MiB pages instead of 4 KiB ones. Faulting in fresh
#: memory page by page is most of a large gather's time (a (8, 64, 131072) float32 output: ~180 ms of faults
#: on a 2-core VM, 35 ms with huge pages).
_HUGE_PAGE_MIN_BYTES = 32 << 20
_HUGE_PAGE = 2 << 20


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


_MADV_HUGEPAGE = 14


def _dense_rows(t: torch.Tensor) -> bool:
    """Is the last dimension of ``t`` dense (what the CPU row kernels index without a stride)?"""
    return t.shape[-1] <= 1 or t.stride(-1) == 1


def _with_dense_rows(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a contiguous copy where its last dimension is not dense."""
    return t if _dense_rows(t) else t.contiguous()


def _int32_index(flat_idx: torch.Tensor, num_points: int) -> torch.Tensor:
    """``flat_idx`` as int32 for the kernels that take int32 indices (the CUDA ones): an int64 index outside
    ``[0, num_points)`` becomes -1 (narrowing alone would turn 2**32 + 5 into the valid index 5)."""
    if flat_idx.dtype == torch.int32:
        return flat_idx
    inside = (flat_idx >= 0) & (flat_idx < num_points)
    return torch.where(inside, flat_idx, _SENTINEL_INDEX).to(torch.int32)


def _segments(flat_idx: torch.Tensor, num_points: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CSR of each row of ``flat_idx`` (B, L): ``order`` (B, L) int32 lists ``l`` by ascending index (ties in
    ``l`` order); ``order[b, offsets[b, n]:offsets[b, n + 1]]`` are the ``l`` with ``idx[b, l] == n``.
    Padding (-1) sorts first and lies before ``offsets[b, 0]``."""
    keys, order = torch.sort(flat_idx, dim=1, stable=True)
    bounds = torch.arange(num_points + 1, dtype=torch.int32, device=flat_idx.device)
    offsets = torch.searchsorted(keys, bounds.expand(flat_idx.shape[0], -1).contiguous(), out_int32=True)
    return order.to(torch.int32).contiguous(), offsets.contiguous()


# --------------------------------------------------------------------------------------------------------
# autograd: one setup / backward pair shared by GatherPoints and the custom ops' registrations
# --------------------------------------------------------------------------------------------------------


_GATHER_INPUTS = ("features", "idx", "deterministic")
_SCATTER_INPUTS = ("grad_out", "idx", "num_points", "deterministic")


def _setup_gather(ctx, inputs, output) -> None:
    features, idx, deterministic = inputs
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(idx)
    ctx.num_points = features.shape[-1]
    ctx.deterministic = deterministic


def _backward_gather(ctx, grad_out):
    """d(gather)/d(features): scatter-add of ``grad_out``; idx and the flag get None."""
    if grad_out is None or not ctx.needs_input_grad[0]:
        return _interop.grads(_GATHER_INPUTS)
    (idx,) = ctx.saved_tensors
    scatter = _interop.pick(_scatter_op, _scatter_grad, grad_out, idx)
    return _interop.grads(_GATHER_INPUTS, features=scatter(grad_out, idx, ctx.num_points, ctx.deterministic))


def _setup_scatter(ctx, inputs, output) -> None:
    _grad_out, idx, _num_points, deterministic = inputs
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(idx)
    ctx.deterministic = deterministic


def _backward_scatter(ctx, grad_grad_features):
    """The scatter-add is linear in ``grad_out`` and its adjoint is the gather: double backward works."""
    if grad_grad_features is None or not ctx.needs_input_grad[0]:
        return _interop.grads(_SCATTER_INPUTS)
    (idx,) = ctx.saved_tensors
    gather = _interop.pick(_gather_op, _gather_impl, grad_grad_features, idx)
    return _interop.grads(_SCATTER_INPUTS, grad_out=gather(grad_grad_features, idx, ctx.deterministic))


_gather_op.register_autograd(_backward_gather, setup_context=_setup_gather)
_scatter_op.register_autograd(_backward_scatter, setup_context=_setup_scatter)


# --------------------------------------------------------------------------------------------------------
# weighted gather (pointnet2's three_interpolate for any K): its own op pair, fused (no (B, C, M, K) tensor)
# --------------------------------------------------------------------------------------------------------


def _check_weighted_shapes(features: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor) -> None:
    _check_shapes(features, idx)
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point():
        got = weight.dtype if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise TypeError(f"weight must be a floating-point tensor; got {got}")
    if idx.dim() != 3:
        raise ValueError(f"with weight, idx must have shape (B, M, K); got {tuple(idx.shape)}")
    if weight.shape != idx.shape:
        raise ValueError(f"weight must have the shape of idx {tuple(idx.shape)}; got {tuple(weight.shape)}")
    _interop.check_device("features", features=features, weight=weight)


def _weighted_impl(
    features: torch.Tensor, idx: torch.Tensor, weight: torch.Tensor, deterministic: bool
) -> torch.Tensor:
    """features (B, C, N), idx (B, M, K) int, weight (B, M, K) float -> (B, C, M) in features' dtype:
    ``out[b, c, m] = sum_k weight[b, m, k] * features[b, c, idx[b, m, k]]`` (-1 contributes nothing)."""
    _check_weighted_shapes(features, idx, weight)
    batch, channels, num_points = features.shape
    _check_index_range(idx, num_points)
    work = _interop.compute_dtype(features.dtype)
    out = torch.empty(batch, channels, idx.shape[1], dtype=work, device=features.device)
    if num_points == 0 or idx.shape[2] == 0:
        return out.zero_().to(features.dtype)
    kernels = _interop.kernels("gather")
    args = {
        "features": _interop.to_compute(features),
        "idx": _int32_index(idx, num_points).contiguous(),  # out of range (int64 too) -> -1
        "weight": weight.to(work),
        "out": out,
    }
    if features.device.type == "cpu":
        _launch_blocks(
            _interop.overload(kernels.WEIGHTED_GATHER_ROWS, work),
            batch,
            channels,
            device=features.device,
            work_per_row=idx.shape[1] * idx.shape[2],
            **args,
        )
    else:
        _launch_blocks(
            _interop.overload(kernels.WEIGHTED_GATHER_ELEMENTS, work),
            batch,
            channels,
            length=idx.shape[1],
            device=features.device,
            **args,
        )
    return out.to(features.dtype)


_weighted_op = torch.library.custom_op("warpgeo::gather_points_weighted", _weighted_impl, mutates_args=())


@_weighted_op.register_fake
def _(features, idx, weight, deterministic):
    _check_weighted_shapes(features, idx, weight)
    return features.new_empty(features.shape[0], features.shape[1], idx.shape[1])


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
    _check_weighted_backward_shapes(grad_out, features, idx, weight)
    batch, channels, num_points = features.shape
    device = features.device
    work = _interop.compute_dtype(features.dtype)
    kernels = _interop.kernels("gather")
    grad = grad_out.to(work).contiguous()
    flat = _int32_index(idx, num_points).contiguous()  # out of range (int64 too) -> -1
    w = weight.to(work)
    grad_features = features.new_empty(0)
    grad_weight = weight.new_empty(0)
    if needs_features:
        args = {"grad_out": grad, "weight": w}
        if device.type == "cpu":
            gf = torch.empty(batch, channels, num_points, dtype=work, device=device)
            _launch_blocks(
                _interop.overload(kernels.WEIGHTED_SCATTER_ROWS, work),
                batch,
                channels,
                device=device,
                work_per_row=idx.shape[1] * idx.shape[2] + num_points,
                idx=flat,
                grad_features=gf,
                **args,
            )
        elif not deterministic:
            gf = torch.zeros(batch, channels, num_points, dtype=work, device=device)
            _launch_blocks(
                _interop.overload(kernels.WEIGHTED_SCATTER_ATOMIC, work),
                batch,
                channels,
                length=idx.shape[1],
                device=device,
                idx=flat,
                grad_features=gf,
                **args,
            )
        else:
            gf = torch.empty(batch, channels, num_points, dtype=work, device=device)
            order, offsets = _segments(flat.reshape(batch, idx.shape[1] * idx.shape[2]), num_points)
            _launch_blocks(
                _interop.overload(kernels.WEIGHTED_SCATTER_SEGMENTS, work),
                batch,
                channels,
                length=num_points,
                device=device,
                order=order,
                offsets=offsets,
                grad_features=gf,
                **args,
            )
        grad_features = gf.to(features.dtype)
    if needs_weight:
        gw = torch.empty(idx.shape, dtype=work, device=device)
        _launch_blocks(
            _interop.overload(kernels.WEIGHTED_GRAD_WEIGHT_ROWS, work),
            batch,
            idx.shape[1],
            per_channel=False,
            device=device,
            work_per_row=idx.shape[2] * channels,
            grad_out=grad,
            features=_interop.to_compute(features),
            idx=flat,
            grad_weight=gw,
        )
        grad_weight = gw.to(weight.dtype)
    return grad_features, grad_weight


_weighted_backward_op = torch.library.custom_op(
    "warpgeo::gather_points_weighted_backward", _weighted_backward_impl, mutates_args=()
)


@_weighted_backward_op.register_fake
def _(grad_out, features, idx, weight, needs_features, needs_weight, deterministic):
    _check_weighted_backward_shapes(grad_out, features, idx, weight)
    gf = features.new_empty(features.shape) if needs_features else features.new_empty(0)
    gw = weight.new_empty(weight.shape) if needs_weight else weight.new_empty(0)
    return gf, gw


def _check_weighted_backward_shapes(grad_out, features, idx, weight) -> None:
    _check_weighted_shapes(features, idx, weight)
    _interop.check_float(grad_out, "grad_out")
    _interop.check_shape(grad_out, "grad_out", (features.shape[0], features.shape[1], idx.shape[1]))
    _interop.check_device("features", features=features, grad_out=grad_out)


_WEIGHTED_INPUTS = ("features", "idx", "weight", "deterministic")


def _setup_weighted(ctx, inputs, output) -> None:
    features, idx, weight, deterministic = inputs
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(features, idx, weight)
    ctx.deterministic = deterministic


def _backward_weighted(ctx, grad_out):
    """Scatter of ``grad_out * weight`` to the features; ``grad_out . features[idx]`` to the weights."""
    needs_features, needs_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    if grad_out is None or not (needs_features or needs_weight):
        return _interop.grads(_WEIGHTED_INPUTS)
    features, idx, weight = ctx.saved_tensors
    backward = _interop.pick(_weighted_backward_op, _weighted_backward_impl, grad_out, features)
    gf, gw = backward(grad_out, features, idx, weight, needs_features, needs_weight, ctx.deterministic)
    return _interop.grads(
        _WEIGHTED_INPUTS, features=gf if needs_features else None, weight=gw if needs_weight else None
    )


_weighted_op.register_autograd(_backward_weighted, setup_context=_setup_weighted)


class GatherPoints(torch.autograd.Function):
    """Gather as an autograd Function: ``torch.ops.warpgeo.gather_points`` with the same backward. Prefer
    :func:`gather_points`.

    ``apply(features (B, C, N), idx (B, M) or (B, M, K) int32/int64, deterministic: bool)``
    -> ``(B, C, M)`` or ``(B, C, M, K)``. Only ``idx`` is saved; the backward runs only when ``features``
    needs a gradient and a gradient arrives (``None`` grad_output -> ``None``).
    """

    @staticmethod
    def forward(ctx, *inputs):
        output = _gather_impl(*inputs)
        _setup_gather(ctx, inputs, output)
        return output

    backward = staticmethod(_backward_gather)


class _GatherWeighted(torch.autograd.Function):
    """``torch.ops.warpgeo.gather_points_weighted`` as a Function (the eager path of weighted gathers)."""

    @staticmethod
    def forward(ctx, *inputs):
        output = _weighted_impl(*inputs)
        _setup_weighted(ctx, inputs, output)
        return output

    backward = staticmethod(_backward_weighted)


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
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be a bool; got {type(deterministic).__name__}")
    if weight is not None:
        _check_weighted_shapes(features, idx, weight)
        needs_grad = (features.requires_grad or weight.requires_grad) and torch.is_grad_enabled()
        return _interop.call(
            _weighted_op,
            _GatherWeighted,
            _weighted_impl,
            _WEIGHTED_INPUTS,
            needs_grad,
            features=features,
            idx=idx,
            weight=weight,
            deterministic=deterministic,
        )
    # the shapes are checked by the op's implementation (eager) or its fake (traced)
    return _interop.call(
        _gather_op,
        GatherPoints,
        _gather_impl,
        _GATHER_INPUTS,
        isinstance(features, torch.Tensor) and features.requires_grad and torch.is_grad_enabled(),
        features=features,
        idx=idx,
        deterministic=deterministic,
    )
