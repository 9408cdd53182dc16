"""Chamfer distance between two batches of point clouds (:func:`chamfer_distance`), on the kNN kernels.

For every point of ``x`` its nearest point of ``y`` and for every point of ``y`` its nearest point of ``x``:
with L2 (``norm=2``) that is :func:`warpgeo.knn` with ``k = 1`` each way (its grid search, memory
``O(B * (N + M))``); with L1 (``norm=1``) a scan by L1 distance (``warpgeo/_kernels/chamfer.py``). The
distances are then computed from the coordinate differences, reduced, and differentiated in torch: the
gradient of a point's distance is a gather and a scatter-add over the ``(B, N)`` / ``(B, M)`` nearest
indices, never a ``(B, N, M)`` matrix.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import _launch, _warp, checks, neighbors
from ._constants import INT32_LIMIT, MAX_POINTS
from ._kernels import chamfer as kernels
from ._op import Op

__all__ = ["ChamferResult", "chamfer_distance"]

#: Compute dtype -> the key of the L1 kernel table (``warpgeo._kernels.chamfer.TYPES``).
_KEY = {torch.float32: "float32", torch.float64: "float64"}
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


def _lengths(t: torch.Tensor | None, device: torch.device) -> torch.Tensor:
    """Per-cloud lengths as the kernels take them: int64, empty meaning "all"."""
    if t is None:
        return torch.empty(0, dtype=torch.int64, device=device)
    return t.to(torch.int64)


def _nearest(queries, points, query_lengths, point_lengths, norm, boxes) -> torch.Tensor:
    """int64 ``(B, M)``: each query's nearest valid point (L2: the kNN implementation, k = 1; L1: a scan),
    -1 for padding and where the cloud has no valid point; ties to the lowest index. ``boxes``: the
    (queries', points') boxes of the value checks, or Nones (checks off)."""
    if norm == 2:
        # the kNN's launches, not the op: the values were checked once, by this op
        _, idx = neighbors._knn(
            queries, points, query_lengths, point_lengths, 1, query_bounds=boxes[0], bounds=boxes[1]
        )
        return idx.reshape(queries.shape[0], queries.shape[1])
    batch, m, n = queries.shape[0], queries.shape[1], points.shape[1]
    idx = torch.empty(batch, m, dtype=torch.int64, device=queries.device)
    if n == 0 or batch * m == 0:
        return idx.fill_(-1)
    queries, points = _warp.to_compute(queries), _warp.to_compute(points)
    kernel = kernels.NEAREST_L1[_KEY[points.dtype]].nearest_l1_rows
    _launch.launch_rows(
        kernel,
        batch * m,
        device=queries.device,
        work_per_row=n,
        queries=queries,
        query_lengths=_lengths(query_lengths, queries.device),
        points=points,
        point_lengths=_lengths(point_lengths, queries.device),
        out_idx=idx,
    )
    return idx


def _difference(queries, points, idx) -> torch.Tensor:
    """``queries - points[idx]`` ``(B, M, 3)`` in compute precision (0 where idx is -1)."""
    work = _warp.compute_dtype(queries.dtype)
    q = queries.to(work)
    if points.shape[1] == 0:
        return torch.zeros_like(q)
    safe = idx.clamp_min(0)
    nearest = torch.gather(points.to(work), 1, safe[..., None].expand(-1, -1, 3))
    return torch.where((idx >= 0)[..., None], q - nearest, 0.0)


def _distance(diff: torch.Tensor, norm: int, squared: bool) -> torch.Tensor:
    if norm == 2:
        d2 = diff.square().sum(-1)
        return d2 if squared else d2.sqrt()
    d1 = diff.abs().sum(-1)
    return d1.square() if squared else d1


def _counts(lengths: torch.Tensor | None, batch: int, size: int, like: torch.Tensor) -> torch.Tensor:
    """``(B, 1)`` valid points per cloud, at least 1 (an empty cloud's mean is 0), in ``like``'s dtype."""
    if lengths is None:
        return torch.full((batch, 1), float(max(size, 1)), dtype=like.dtype, device=like.device)
    return lengths.clamp(1, max(size, 1)).to(like.dtype)[:, None]


def _reduce(dist: torch.Tensor, lengths, size: int, reduction: str | None) -> torch.Tensor:
    batch = dist.shape[0]
    if reduction == "sum":
        return dist.sum()
    per_cloud = dist.sum(1) / _counts(lengths, batch, size, dist)[:, 0]
    return per_cloud if reduction is None else per_cloud.sum() / max(batch, 1)


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
    y -> x pair is (B, 0) with ``single_directional``."""
    boxes = (None, None)  # the valid points' boxes, where the value checks made them (the kNN's scale)
    if checks.checking_values(x.device):
        boxes = neighbors._check_values(
            x, y, x_lengths, y_lengths, names=("x", "y", "x_lengths", "N", "y_lengths", "M")
        )
    batch = x.shape[0]
    # both searches first, then the torch ops (on the CPU torch's OpenMP workers spin after an op and
    # would take a core from a split launch that followed it)
    idx_xy = _nearest(x, y, x_lengths, y_lengths, norm, boxes)
    if single_directional:
        idx_yx = torch.empty(batch, 0, dtype=torch.int64, device=x.device)
    else:
        idx_yx = _nearest(y, x, y_lengths, x_lengths, norm, boxes[::-1])
    dist_xy = _distance(_difference(x, y, idx_xy), norm, squared)
    loss = _reduce(dist_xy, x_lengths, x.shape[1], reduction)
    if single_directional:
        dist_yx = dist_xy.new_empty(batch, 0)
    else:
        dist_yx = _distance(_difference(y, x, idx_yx), norm, squared)
        loss = loss + _reduce(dist_yx, y_lengths, y.shape[1], reduction)
    return loss.to(x.dtype), dist_xy.to(x.dtype), dist_yx.to(x.dtype), idx_xy, idx_yx


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


def _direction_grads(queries, points, idx, weight, norm, squared, need_q, need_p):
    """Gradients of ``sum(weight * dist)`` for one direction (queries -> their nearest points):
    ``(B, M, 3)`` to the queries and ``(B, N, 3)`` to the points (scatter-add), in compute precision."""
    diff = _difference(queries, points, idx)
    if norm == 2:
        if squared:
            deriv = 2.0 * diff
        else:
            # d|v| = v / |v|; 0 at |v| = 0 (coincident points: a subgradient, never NaN)
            dist = torch.linalg.vector_norm(diff, dim=-1, keepdim=True)
            deriv = torch.where(dist > 0, diff / torch.where(dist > 0, dist, 1.0), 0.0)
    else:
        deriv = torch.sign(diff)  # 0 where a coordinate difference is 0
        if squared:
            deriv = 2.0 * diff.abs().sum(-1, keepdim=True) * deriv
    step = weight[..., None].to(deriv.dtype) * deriv
    step = torch.where((idx >= 0)[..., None], step, 0.0)
    grad_q = step if need_q else None
    grad_p = None
    if need_p:
        grad_p = torch.zeros(points.shape, dtype=step.dtype, device=points.device)
        if points.shape[1] > 0:
            grad_p.scatter_add_(1, idx.clamp_min(0)[..., None].expand(-1, -1, 3), -step)
    return grad_q, grad_p


def _weights(grad_dist, grad_loss, lengths, size, reduction, like) -> torch.Tensor | None:
    """``d loss_total / d dist`` per point ``(B, M)``: the upstream gradient of the per-point distances plus
    the reduction's share of the loss's; None when neither flows."""
    weight = None if grad_dist is None else grad_dist.to(like.dtype)
    if grad_loss is not None:
        batch = like.shape[0]
        g = grad_loss.to(like.dtype)
        if reduction == "sum":
            share = g.expand(like.shape)
        elif reduction == "mean":
            share = (g / max(batch, 1) / _counts(lengths, batch, size, like)).expand(like.shape)
        else:
            share = (g[:, None] / _counts(lengths, batch, size, like)).expand(like.shape)
        weight = share if weight is None else weight + share
    return weight


def _backward_chamfer(ctx, grad_loss, grad_dist_xy, grad_dist_yx, _grad_idx_xy, _grad_idx_yx):
    need_x, need_y = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if not (need_x or need_y):
        return _chamfer_op.grads()
    x, y, x_lengths, y_lengths, idx_xy, idx_yx = ctx.saved_tensors
    norm, squared, reduction = ctx.chamfer_options
    work = _warp.compute_dtype(x.dtype)
    like_xy = torch.empty(idx_xy.shape, dtype=work, device=x.device)
    grad_x = grad_y = None

    def add(total, part):
        if part is None:
            return total
        return part if total is None else total + part

    weight = _weights(grad_dist_xy, grad_loss, x_lengths, x.shape[1], reduction, like_xy)
    if weight is not None:
        gx, gy = _direction_grads(x, y, idx_xy, weight, norm, squared, need_x, need_y)
        grad_x, grad_y = add(grad_x, gx), add(grad_y, gy)
    if idx_yx.shape[1] > 0:  # (B, 0) when single-directional or y has no points: nothing flows
        like_yx = torch.empty(idx_yx.shape, dtype=work, device=x.device)
        weight = _weights(grad_dist_yx, grad_loss, y_lengths, y.shape[1], reduction, like_yx)
        if weight is not None:
            gy, gx = _direction_grads(y, x, idx_yx, weight, norm, squared, need_y, need_x)
            grad_x, grad_y = add(grad_x, gx), add(grad_y, gy)
    grad_x = grad_x.to(x.dtype) if need_x and grad_x is not None else None
    grad_y = grad_y.to(y.dtype) if need_y and grad_y is not None else None
    return _chamfer_op.grads(x=grad_x, y=grad_y)


_chamfer_op = Op(
    "warpgeo::chamfer_distance",
    check=_check_chamfer,
    impl=_chamfer_impl,
    fake=_chamfer_fake,
    setup=_setup_chamfer,
    backward=_backward_chamfer,
)


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
        x: ``(B, N, 3)``; float16, bfloat16, float32 or float64.
        y: ``(B, M, 3)``, the dtype and device of ``x``.
        x_lengths: optional integer ``(B,)``: cloud b of ``x`` holds only its first ``x_lengths[b]`` points.
        y_lengths: optional integer ``(B,)``: the same for ``y``.
        norm: 1 (L1) or 2 (L2).
        squared: square each point distance; default (None): True for ``norm=2``, False for ``norm=1``.
        reduction: ``"mean"``, ``"sum"`` or ``None`` (see above).
        single_directional: only ``x`` -> ``y`` (``dist_yx`` and ``idx_yx`` are then None).

    Returns:
        ``ChamferResult(loss, dist_xy, dist_yx, idx_xy, idx_yx)``: ``loss`` 0-d (or ``(B,)`` for
        ``reduction=None``), ``dist_xy`` ``(B, N)`` and ``dist_yx`` ``(B, M)`` in the dtype of ``x``,
        ``idx_xy`` ``(B, N)`` and ``idx_yx`` ``(B, M)`` int64.

    Raises:
        TypeError: non-float points, different dtypes, non-integer lengths, ``squared`` neither a bool nor
            None, non-bool ``single_directional``.
        ValueError: bad shapes, ``norm`` not 1 or 2, an unknown ``reduction``, lengths outside ``[0, N]`` /
            ``[0, M]``, NaN or inf among the valid points, tensors on different devices.

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
    if single_directional:
        return ChamferResult(loss, dist_xy, None, idx_xy, None)
    return ChamferResult(loss, dist_xy, dist_yx, idx_xy, idx_yx)
