"""Chamfer distance between two batches of point clouds (:func:`chamfer_distance`), on the kNN kernels.

For every point of ``x`` its nearest point of ``y`` and for every point of ``y`` its nearest point of ``x``:
with L2 (``norm=2``) that is :func:`warpgeo.knn` with ``k = 1`` each way (its grid search, memory
``O(B * (N + M))``); with L1 (``norm=1``) a scan by L1 distance (``warpgeo/_kernels/chamfer.py``). The
distances are then computed from the coordinate differences, reduced, and differentiated in torch: the
gradient of a point's distance is a gather and a scatter-add over the ``(B, N)`` / ``(B, M)`` nearest
indices, never a ``(B, N, M)`` matrix.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from . import _grid, _launch, _warp, checks
from ._constants import INT32_LIMIT, MAX_POINTS
from ._kernels import chamfer as kernels
from ._op import Op

__all__ = ["ChamferResult", "chamfer_distance"]

#: The reductions :func:`chamfer_distance` takes.
_REDUCTIONS = ("mean", "sum", None)


class ChamferResult(NamedTuple):
    """The result of :func:`chamfer_distance`.

    ``loss``: 0-d (``reduction`` "mean" / "sum") or ``(B,)`` (None). ``dist_xy`` ``(B, N)`` and ``dist_yx``
    ``(B, M)``: each point's distance to its nearest neighbour in the other cloud (0 for padding).
    ``idx_xy`` ``(B, N)`` / ``idx_yx`` ``(B, M)`` int64: that neighbour's index (-1 for padding).
    ``dist_yx`` and ``idx_yx`` are None with ``single_directional=True``.
    """

    loss: torch.Tensor
    dist_xy: torch.Tensor
    dist_yx: torch.Tensor | None
    idx_xy: torch.Tensor
    idx_yx: torch.Tensor | None


# --------------------------------------------------------------------------------------------------------
# public function
# --------------------------------------------------------------------------------------------------------


def chamfer_distance(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    x_lengths: torch.Tensor | None = None,
    y_lengths: torch.Tensor | None = None,
    norm: int = 2,
    squared: bool | None = None,
    reduction: str | None = "mean",
    single_directional: bool = False,
) -> ChamferResult:
    """Chamfer distance: each point's distance to its nearest neighbour in the other cloud, reduced.

    For every valid point ``x[b, i]`` its nearest valid point ``y[b, idx_xy[b, i]]`` and the distance
    ``dist_xy[b, i]`` to it, and the same from ``y`` to ``x`` (unless ``single_directional``). The nearest
    neighbour is found in the norm asked for: L2 (``norm=2``) by warpgeo's kNN grid search, L1 (``norm=1``) by
    L1 distance ``|dx| + |dy| + |dz|`` itself (pytorch3d's ``knn_points(norm=1)`` semantics), with a scan of
    the other cloud (``O(N * M)`` time: slower than L2's search). Ties go to the lowest index. Distances are
    computed from coordinate differences (no ``|a|^2 + |b|^2 - 2ab`` cancellation), in float32 for half
    inputs. Memory is ``O(B * (N + M))``: no ``(B, N, M)`` matrix, forward or backward.

    ``squared`` squares each point distance; by default (``None``) it follows the norm: ``norm=2`` gives the
    squared Euclidean distance, as pytorch3d's ``chamfer_distance`` and the ``chamfer`` extensions of
    PoinTr / Point-MAE / GRNet give it, ``norm=1`` the plain L1 distance, as pytorch3d's ``norm=1``.
    ``norm=2, squared=False`` is the Euclidean distance (the ``ChamferDistanceL1`` of those repos);
    ``norm=1, squared=True`` squares the L1 distance, only when asked for.

    ``loss`` reduces each direction and sums the two: ``"mean"`` (the default; pytorch3d's default
    ``point_reduction="mean", batch_reduction="mean"``) averages each cloud's distances over its valid points
    and then the clouds; ``"sum"`` sums every valid point's distance; ``None`` keeps the per-cloud means,
    ``(B,)``. A cloud with no valid point has mean 0; a valid point whose other cloud is empty has distance 0
    and index -1. Padding (points beyond the lengths) has distance 0 and index -1 and takes no part.

    Differentiable w.r.t. ``x`` and ``y`` through ``loss``, ``dist_xy`` and ``dist_yx`` (the gradient of a
    zero distance is 0: finite at coincident points). Not twice differentiable through the indices.

    Args:
        x: ``(B, N, 3)``, or ``(N, 3)`` with ``y`` ``(M, 3)`` (one cloud each, as :func:`warpgeo.knn` takes
            them: the results are then unbatched, see Returns); float16, bfloat16, float32 or float64.
        y: ``(B, M, 3)`` (or ``(M, 3)``), the dtype and device of ``x``.
        x_lengths: optional integer ``(B,)``: cloud b of ``x`` holds only its first ``x_lengths[b]`` points.
        y_lengths: optional integer ``(B,)``: the same for ``y``.
        norm: 1 (L1) or 2 (L2).
        squared: square each point distance; default (None): True for ``norm=2``, False for ``norm=1``.
        reduction: ``"mean"``, ``"sum"`` or ``None`` (see above).
        single_directional: only ``x`` -> ``y`` (``dist_yx`` and ``idx_yx`` are then None).

    Returns:
        ``ChamferResult(loss, dist_xy, dist_yx, idx_xy, idx_yx)``: ``loss`` 0-d (or ``(B,)`` for
        ``reduction=None``), ``dist_xy`` ``(B, N)`` and ``dist_yx`` ``(B, M)`` in the dtype of ``x``,
        ``idx_xy`` ``(B, N)`` and ``idx_yx`` ``(B, M)`` int64. For one unbatched pair of clouds: ``loss`` 0-d
        (whatever ``reduction``: the one cloud's value for None), ``dist_xy`` / ``idx_xy`` ``(N,)``,
        ``dist_yx`` / ``idx_yx`` ``(M,)``.

    Raises:
        TypeError: non-float points, different dtypes, non-integer lengths, ``squared`` neither a bool nor
            None, non-bool ``single_directional``.
        ValueError: bad shapes, ``norm`` not 1 or 2, an unknown ``reduction``, lengths outside ``[0, N]`` /
            ``[0, M]``, NaN or inf among the valid points, tensors on different devices; a float64 cloud whose
            magnitudes span more than ``2**967`` (largest |coordinate| over the smallest nonzero one;
            distances are exact within it).

    Example:
        >>> x = torch.tensor([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
        >>> y = torch.tensor([[[0.0, 0.0, 0.5]]])
        >>> result = chamfer_distance(x, y)
        >>> result.dist_xy                            # squared distances to y's only point
        tensor([[0.2500, 1.2500]])
        >>> result.idx_yx                             # y's nearest in x: x[0]
        tensor([[0]])
        >>> result.loss                               # mean(0.25, 1.25) + mean(0.25)
        tensor(1.)
    """
    if squared is None:
        squared = norm == 2
    unbatched = isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dim() == 2 and y.dim() == 2
    if unbatched:  # one cloud each: a batch of one
        x, y = x.unsqueeze(0), y.unsqueeze(0)
    loss, dist_xy, dist_yx, idx_xy, idx_yx = _chamfer_op.call(
        x=x,
        y=y,
        x_lengths=x_lengths,
        y_lengths=y_lengths,
        norm=norm,
        squared=squared,
        reduction=reduction,
        single_directional=single_directional,
    )
    if unbatched:
        loss = loss[0] if reduction is None else loss
        dist_xy, dist_yx, idx_xy, idx_yx = dist_xy[0], dist_yx[0], idx_xy[0], idx_yx[0]
    if single_directional:
        return ChamferResult(loss, dist_xy, None, idx_xy, None)
    return ChamferResult(loss, dist_xy, dist_yx, idx_xy, idx_yx)


# --------------------------------------------------------------------------------------------------------
# declarations: check, impl, fake
# --------------------------------------------------------------------------------------------------------


def _check_chamfer(x, y, x_lengths, y_lengths, norm, squared, reduction, single_directional) -> None:
    """The checks of every entry point that read no tensor values: types, shapes, devices, options."""
    checks.check_float(x, "x")
    checks.check_float(y, "y")
    if x.dim() != 3 or x.shape[-1] != 3:
        raise ValueError(f"x must have shape (B, N, 3); got {tuple(x.shape)}")
    if y.dim() != 3 or y.shape[-1] != 3:
        raise ValueError(f"y must have shape (B, M, 3); got {tuple(y.shape)}")
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"y must have the batch size of x ({x.shape[0]}); got y of shape {tuple(y.shape)}")
    if y.dtype != x.dtype:
        raise TypeError(f"y must have the dtype of x ({x.dtype}); got {y.dtype}")
    item = _warp.compute_dtype(x.dtype).itemsize
    for name, t in (("x", x), ("y", y)):
        n = t.shape[1]
        if n > MAX_POINTS or 3 * item * n >= INT32_LIMIT or t.shape[0] * n >= INT32_LIMIT:
            raise ValueError(
                f"{name} may hold fewer than {INT32_LIMIT // (3 * item)} points per cloud in {x.dtype} and "
                f"fewer than 2**31 in all (int32 sizes of one Warp launch); got shape {tuple(t.shape)}"
            )
    batch = x.shape[0]
    for name, t in (("x_lengths", x_lengths), ("y_lengths", y_lengths)):
        if t is not None:
            checks.check_index(t, name)
            checks.check_shape(t, name, (batch,))
    if isinstance(norm, bool) or norm not in (1, 2):
        raise ValueError(f"norm must be 1 (L1) or 2 (L2); got {norm!r}")
    if not isinstance(squared, bool):
        raise TypeError(f"squared must be a bool; got {type(squared).__name__}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f'reduction must be "mean", "sum" or None; got {reduction!r}')
    if not isinstance(single_directional, bool):
        raise TypeError(f"single_directional must be a bool; got {type(single_directional).__name__}")
    checks.check_device("x", x=x, y=y, x_lengths=x_lengths, y_lengths=y_lengths)


def _chamfer_impl(
    x: torch.Tensor,
    y: torch.Tensor,
    x_lengths: torch.Tensor | None,
    y_lengths: torch.Tensor | None,
    norm: int,
    squared: bool,
    reduction: str | None,
    single_directional: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (B, N, 3), y (B, M, 3) -> loss, dist_xy (B, N), dist_yx (B, M), idx_xy, idx_yx (int64); the
    y -> x pair is (B, 0) with ``single_directional``. The outputs are allocated once, in their final dtype
    (half inputs: float32, then cast); the launches: both directions in one (after the grids of both clouds,
    one launch, on large clouds; or the float64 scale, on small ones), then the loss."""
    if checks.checking_values(x.device):
        _grid.check_values(x, y, x_lengths, y_lengths, names=("x", "y", "x_lengths", "N", "y_lengths", "M"))
    device = x.device
    dtype = x.dtype
    compute = _warp.compute_dtype(dtype)
    batch, n, m = x.shape[0], x.shape[1], y.shape[1]
    m_out = 0 if single_directional else m
    loss = torch.empty(() if reduction is not None else (batch,), dtype=compute, device=device)
    dist_xy = torch.empty(batch, n, dtype=compute, device=device)
    dist_yx = torch.empty(batch, m_out, dtype=compute, device=device)
    idx_xy = torch.empty(batch, n, dtype=torch.int64, device=device)
    idx_yx = torch.empty(batch, m_out, dtype=torch.int64, device=device)
    x, y = _grid.cloud(x), _grid.cloud(y)
    table = kernels.CHAMFER[_warp.KEY[compute]]
    x_lengths = _grid.lengths_arg(x_lengths, device)
    y_lengths = _grid.lengths_arg(y_lengths, device)
    rows = batch * (n + m_out)
    scaled = compute == torch.float64
    cuda = _warp.cuda_algorithms(device)
    use_grid = norm == 2 and min(n, m) > 0 and max(n, m) > _grid.brute_max_points(cuda)
    stream = _warp.warp_stream(device)  # once per call (None on the CPU)
    ws = _grid.Workspace(device, stream)
    work = {"work_idx": ws.take(torch.int64, rows, 1), "work_d2": ws.take(torch.float64, rows, 1)}
    # each cloud's grid: a struct over workspace arrays (held here until the launches are done), or the
    # empty one (a scan)
    arrays = {
        name: _grid.arrays(ws, batch, cloud.shape[1], compute, rank=cuda) if use_grid else None
        for name, cloud in (("x", x), ("y", y))
    }
    grids = {
        f"grid_{name}": _grid.struct(compute, held) if held is not None else _grid.no_grid(device, compute)[0]
        for name, held in arrays.items()
    }
    clouds = {"x": x, "x_lengths": x_lengths, "y": y, "y_lengths": y_lengths}
    scale = _grid.no_params(device)
    if use_grid:
        build = {**clouds, **grids, "points_per_cell": _grid.KNN_POINTS_PER_CELL}
        build["scaled"] = int(scaled)
        if cuda:
            _launch.launch(
                table.chamfer_grid_block,
                2 * batch,
                device=device,
                tiled=True,
                block_dim=kernels.BUILD_BLOCK_DIM,
                stream=stream,
                **build,
            )
        else:
            _launch.launch_rows(
                table.chamfer_grid_rows, 2 * batch, device=device, work_per_row=n + m, stream=stream, **build
            )
    elif scaled and rows > 0:
        scale = _grid.scale(table, x, x_lengths, y, y_lengths, ws)
    _launch.launch_rows(
        table.chamfer_nearest,
        rows,
        device=device,
        work_per_row=_grid.ROW_WORK if use_grid else max(n, m),
        use_grid=int(use_grid),
        norm=norm,
        squared=int(squared),
        scale=scale,
        out_dist_xy=dist_xy,
        out_idx_xy=idx_xy,
        out_dist_yx=dist_yx,
        out_idx_yx=idx_yx,
        **clouds,
        **grids,
        **work,
        stream=stream,
    )
    loss_args = {
        "dist_xy": dist_xy,
        "x_lengths": x_lengths,
        "dist_yx": dist_yx,
        "y_lengths": y_lengths,
        "reduction": _REDUCTION_CODES[reduction],
        "single": int(single_directional),
        "out_loss": loss.view(-1),
        "stream": stream,
    }
    if cuda:
        _launch.launch(
            table.chamfer_loss_block,
            1,
            device=device,
            tiled=True,
            block_dim=kernels.BUILD_BLOCK_DIM,
            **loss_args,
        )
    else:
        _launch.launch(table.chamfer_loss_rows, 1, device=device, **loss_args)
    if compute != dtype:
        return loss.to(dtype), dist_xy.to(dtype), dist_yx.to(dtype), idx_xy, idx_yx
    return loss, dist_xy, dist_yx, idx_xy, idx_yx


#: ``reduction`` -> the loss kernels' code.
_REDUCTION_CODES = {"mean": 0, "sum": 1, None: 2}


def _chamfer_fake(x, y, x_lengths, y_lengths, norm, squared, reduction, single_directional):
    batch, n, m = x.shape[0], x.shape[1], y.shape[1]
    m_out = 0 if single_directional else m
    loss = x.new_empty(() if reduction is not None else (batch,))
    index = {"dtype": torch.int64}
    return (
        loss,
        x.new_empty(batch, n),
        x.new_empty(batch, m_out),
        x.new_empty(batch, n, **index),
        x.new_empty(batch, m_out, **index),
    )


# --------------------------------------------------------------------------------------------------------
# autograd
# --------------------------------------------------------------------------------------------------------


def _setup_chamfer(ctx, inputs, output) -> None:
    x, y, x_lengths, y_lengths, norm, squared, reduction, _single = inputs
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(output[3], output[4])
    ctx.save_for_backward(x, y, x_lengths, y_lengths, output[3], output[4])
    ctx.chamfer_options = (norm, squared, reduction)  # plain Python values


def _backward_chamfer(ctx, grad_loss, grad_dist_xy, grad_dist_yx, _grad_idx_xy, _grad_idx_yx):
    need_x, need_y = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if not (need_x or need_y) or (grad_loss is None and grad_dist_xy is None and grad_dist_yx is None):
        return _chamfer_op.grads()
    x, y, x_lengths, y_lengths, idx_xy, idx_yx = ctx.saved_tensors
    norm, squared, reduction = ctx.chamfer_options
    backward = _chamfer_backward_op.in_backward(x, y, grad_loss, grad_dist_xy, grad_dist_yx)
    grad_x, grad_y = backward(
        x, y, x_lengths, y_lengths, idx_xy, idx_yx, grad_loss, grad_dist_xy, grad_dist_yx, norm, squared,
        reduction, need_x, need_y,
    )  # fmt: skip
    return _chamfer_op.grads(x=grad_x if need_x else None, y=grad_y if need_y else None)


def _check_chamfer_backward(
    x, y, x_lengths, y_lengths, idx_xy, idx_yx, grad_loss, grad_dist_xy, grad_dist_yx, norm, squared,
    reduction, need_x, need_y,
) -> None:  # fmt: skip
    """The backward's own entry (its forward checked the rest): the shapes the kernel indexes by."""
    _check_chamfer(x, y, x_lengths, y_lengths, norm, squared, reduction, False)
    batch, n, m = x.shape[0], x.shape[1], y.shape[1]
    for name, t, shape in (("idx_xy", idx_xy, (batch, n)), ("grad_dist_xy", grad_dist_xy, (batch, n))):
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}; got {tuple(t.shape)}")
    if tuple(idx_yx.shape) not in ((batch, m), (batch, 0)):
        raise ValueError(f"idx_yx must have shape {(batch, m)} or {(batch, 0)}; got {tuple(idx_yx.shape)}")
    # the kernel reads grad_dist_yx wherever idx_yx has a row, grad_loss per cloud (reduction None) or once
    if grad_dist_yx is not None and grad_dist_yx.shape != idx_yx.shape:
        raise ValueError(
            f"grad_dist_yx must have the shape of idx_yx {tuple(idx_yx.shape)}; got {tuple(grad_dist_yx.shape)}"
        )
    loss_shape = (batch,) if reduction is None else ()
    if grad_loss is not None and tuple(grad_loss.shape) != loss_shape:
        raise ValueError(f"grad_loss must have shape {loss_shape} (the loss's); got {tuple(grad_loss.shape)}")
    for name, t in (("grad_loss", grad_loss), ("grad_dist_xy", grad_dist_xy), ("grad_dist_yx", grad_dist_yx)):
        if t is not None:
            checks.check_float(t, name)
            checks.check_device("x", x=x, **{name: t})
    for name, t in (("idx_xy", idx_xy), ("idx_yx", idx_yx)):  # the forward's own int64 outputs
        if t.dtype != torch.int64:
            raise TypeError(f"{name} must have dtype torch.int64 (the forward's indices); got {t.dtype}")
    checks.check_device("x", x=x, idx_xy=idx_xy, idx_yx=idx_yx)


def _chamfer_backward_impl(
    x: torch.Tensor,
    y: torch.Tensor,
    x_lengths: torch.Tensor | None,
    y_lengths: torch.Tensor | None,
    idx_xy: torch.Tensor,
    idx_yx: torch.Tensor,
    grad_loss: torch.Tensor | None,
    grad_dist_xy: torch.Tensor | None,
    grad_dist_yx: torch.Tensor | None,
    norm: int,
    squared: bool,
    reduction: str | None,
    need_x: bool,
    need_y: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_x (B, N, 3), grad_y (B, M, 3)), each (B, 0, 3) where not needed, in the dtypes of x and y.

    One launch: a thread per point adds its own gradient and takes it from its neighbour's (atomics on
    CUDA; on the CPU the launch is not split: one thread, in row order, the same bits every run)."""
    device = x.device
    compute = _warp.compute_dtype(x.dtype)
    batch, n, m = x.shape[0], x.shape[1], y.shape[1]
    grad_x = torch.zeros(batch, n if need_x else 0, 3, dtype=compute, device=device)
    grad_y = torch.zeros(batch, m if need_y else 0, 3, dtype=compute, device=device)
    empty2 = _no_grad2(device, compute)
    _launch.launch(
        kernels.CHAMFER[_warp.KEY[compute]].chamfer_backward,
        batch * (n + idx_yx.shape[1]),
        device=device,
        x=_grid.cloud(x),
        y=_grid.cloud(y),
        x_lengths=_grid.lengths_arg(x_lengths, device),
        y_lengths=_grid.lengths_arg(y_lengths, device),
        idx_xy=idx_xy,
        idx_yx=idx_yx,
        grad_dist_xy=empty2 if grad_dist_xy is None else _warp.to_compute(grad_dist_xy),
        grad_dist_yx=empty2 if grad_dist_yx is None else _warp.to_compute(grad_dist_yx),
        grad_loss=_launch.empty(compute, device)
        if grad_loss is None
        else _warp.to_compute(grad_loss).reshape(-1),
        reduction=_REDUCTION_CODES[reduction],
        norm=norm,
        squared=int(squared),
        grad_x=grad_x if need_x else grad_x.view(0, 0, 3),
        grad_y=grad_y if need_y else grad_y.view(0, 0, 3),
    )
    if compute != x.dtype:  # x and y share a dtype
        return grad_x.to(x.dtype), grad_y.to(y.dtype)
    return grad_x, grad_y


def _chamfer_backward_fake(
    x, y, x_lengths, y_lengths, idx_xy, idx_yx, grad_loss, grad_dist_xy, grad_dist_yx, norm, squared,
    reduction, need_x, need_y,
):  # fmt: skip
    return (
        x.new_empty(x.shape[0], x.shape[1] if need_x else 0, 3),
        y.new_empty(y.shape[0], y.shape[1] if need_y else 0, 3),
    )


@functools.cache
def _no_grad2(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """An empty ``(0, 0)`` per-point gradient argument (none flows through that output), shared per device
    and dtype (the 1-D one is ``_launch.empty``)."""
    return _launch.constant(torch.empty(0, 0, dtype=dtype, device=device))


#: differentiable once: no autograd of its own
_chamfer_backward_op = Op(
    "warpgeo::chamfer_distance_backward",
    check=_check_chamfer_backward,
    impl=_chamfer_backward_impl,
    fake=_chamfer_backward_fake,
)
_chamfer_op = Op(
    "warpgeo::chamfer_distance",
    check=_check_chamfer,
    impl=_chamfer_impl,
    fake=_chamfer_fake,
    setup=_setup_chamfer,
    backward=_backward_chamfer,
)
