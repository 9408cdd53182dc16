"""Robot self-collision: :func:`collision_pairs` and :func:`self_collision_cost` (DESIGN §6).

A robot is a set of spheres, each on a link. :func:`collision_pairs` lists the sphere pairs worth checking
(two different links, minus the link pairs an ignore list names: neighbours that always touch), and
:func:`self_collision_cost` scores a batch of configurations on those pairs in one Warp kernel launch
(``warpgeo/_kernels/self_collision.py``): a thread per configuration loops over the pairs, so memory is
``O(batch)`` (no ``(..., P, 3)`` temporaries), and one launch computes the gradient.

The file reads: public functions, then the op ``warpgeo::self_collision_cost`` (check, impl, fake), its
gradient op ``warpgeo::self_collision_cost_backward`` and the autograd pair that runs it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from . import _launch, _warp, checks
from ._constants import INT32_LIMIT, MAX_POINTS, SENTINEL_INDEX
from ._kernels import self_collision as kernels
from ._op import Op

__all__ = ["collision_pairs", "self_collision_cost"]

#: ``reduction`` as the public function takes it -> as the op takes it (its schema has no None for it).
_REDUCTIONS = {"max": "max", "sum": "sum", None: "none"}
#: The op's reduction -> the kernels' number for it.
_MODES = {"max": kernels.REDUCE_MAX, "sum": kernels.REDUCE_SUM, "none": kernels.REDUCE_NONE}
#: Compute dtype / pair index dtype -> the key of ``kernels.SELF_COLLISION``.
_PRECISION = {torch.float32: "float32", torch.float64: "float64"}
_INDEX = {torch.int32: "int32", torch.int64: "int64"}


# --------------------------------------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------------------------------------


def collision_pairs(
    sphere_links: Sequence[int] | torch.Tensor | np.ndarray,
    *,
    ignore: Iterable[Sequence[int | str]] | Mapping[int | str, Iterable[int | str]] = (),
    names: Sequence[str] | None = None,
) -> torch.Tensor:
    """The sphere pairs a self-collision check looks at: every pair on two different links, less the link
    pairs ``ignore`` names.

    Pairs ``(i, j)`` have ``i < j`` and are sorted by ``i``, then ``j`` (the same result on every device).
    ``ignore`` is symmetric: naming ``(a, b)`` drops the pairs of a sphere on link a and a sphere on link b,
    either way round. It takes link pairs ``[(a, b), ...]`` or cuRobo's ``self_collision_ignore`` form
    ``{a: [b, c, ...], ...}``; links are ints (the values of ``sphere_links``) or, with ``names``, link names.

    Args:
        sphere_links: ``(S,)`` integers >= 0: the link of each sphere (a sequence, a NumPy array or an
            integer tensor; with ``names``, each below ``len(names)``).
        ignore: link pairs never checked (see above).
        names: optional link names, ``names[k]`` the name of link ``k`` (unique strings): lets ``ignore``
            name links.

    Returns:
        ``(P, 2)`` int64 sphere indices, on ``sphere_links``' device (the CPU for a sequence). ``P`` is at
        most ``S * (S - 1) / 2``.

    Raises:
        TypeError: ``sphere_links`` not integers, a link in ``ignore`` neither an int nor a name, names not
            strings.
        ValueError: ``sphere_links`` not 1-D or negative (or beyond ``names``), an ``ignore`` entry that is not
            a pair, an unknown link name or a name without ``names``, duplicate names.

    Example:
        >>> links = [0, 0, 1, 2]                     # four spheres on three links
        >>> collision_pairs(links).tolist()          # spheres 0 and 1 share a link
        [[0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]
        >>> collision_pairs(links, ignore={"base": ["arm"]}, names=["base", "arm", "hand"]).tolist()
        [[0, 3], [1, 3], [2, 3]]
    """
    links, device = _links_of(sphere_links)
    lookup = _name_lookup(names)
    if names is not None and links.size and int(links.max()) >= len(names):
        raise ValueError(f"sphere_links must lie in [0, len(names)={len(names)}); found {int(links.max())}")
    # the links that carry spheres, numbered 0..L-1 (link ids may be large and sparse)
    present, dense = np.unique(links, return_inverse=True)
    number = {int(link): k for k, link in enumerate(present)}
    ignored = np.zeros((len(present), len(present)), dtype=bool)
    for a, b in _ignored_pairs(ignore, lookup):
        if a in number and b in number:  # a link no sphere is on has no pairs to drop
            ignored[number[a], number[b]] = ignored[number[b], number[a]] = True
    i, j = np.triu_indices(links.size, k=1)
    li, lj = dense[i], dense[j]
    keep = (li != lj) & ~ignored[li, lj]
    pairs = np.stack([i[keep], j[keep]], axis=1).astype(np.int64)
    return torch.from_numpy(pairs).to(device)


def self_collision_cost(
    spheres: torch.Tensor,
    pairs: torch.Tensor,
    *,
    margin: float | torch.Tensor = 0.0,
    reduction: str | None = "max",
) -> torch.Tensor:
    """Self-collision cost of a robot's spheres: how deep the spheres of each pair overlap, per configuration.

    For a pair ``(i, j)`` of ``pairs`` (from :func:`collision_pairs`) the penetration is::

        (r_i + m_i) + (r_j + m_j) - |c_i - c_j|

    with ``c`` the centres, ``r`` the radii and ``m`` the margin (cuRobo's per-link
    ``self_collision_buffer``); it is positive when the grown spheres overlap. A sphere with a negative
    radius is disabled (cuRobo's empty attached-object slots): its pairs contribute nothing, whatever the
    margin. ``reduction``:

    * ``"max"`` (cuRobo's self-collision distance): per configuration the largest penetration, clamped at
      0; a tie goes to the lowest pair index, and the gradient flows through that one pair;
    * ``"sum"``: per configuration the sum of the positive penetrations;
    * ``None``: every pair's penetration clamped at 0, ``(..., P)``.

    One kernel launch forward, one backward, and memory ``O(batch)``: a thread per configuration loops over
    the pairs (nothing of size ``(..., P, 3)`` is made). Differentiable w.r.t. the centres and radii, and
    ``margin`` when it is a tensor that requires grad (not twice differentiable); only penetrations > 0
    have a gradient. At coincident centres the direction of ``c_i - c_j`` is taken as ``+x``: the gradient
    is finite and pushes sphere i towards ``+x`` and sphere j towards ``-x`` (under gradient descent).
    Half inputs are computed in float32, the result is in the dtype of ``spheres``. Pair indices of ``-1``
    are padding (no pair), a pair ``(i, i)`` contributes nothing.

    Args:
        spheres: ``(..., S, 4)`` = x, y, z, radius of each sphere; the leading dimensions are any batch,
            e.g. ``(B, H, S, 4)`` for B trajectories of H steps. float16, bfloat16, float32 or float64.
        pairs: ``(P, 2)`` int32 or int64 sphere indices in ``[0, S)`` (or ``-1``), on ``spheres``' device.
        margin: added to every sphere's radius: a float, or a ``(S,)`` (or 0-d) floating tensor on
            ``spheres``' device, e.g. :class:`~warpgeo.compat.curobo.RobotSpheres`' ``self_margin``.
        reduction: ``"max"``, ``"sum"`` or ``None``.

    Returns:
        ``spheres.shape[:-2]`` (``"max"``, ``"sum"``) or ``spheres.shape[:-2] + (P,)`` (``None``), >= 0,
        in the dtype of ``spheres``.

    Raises:
        TypeError: non-float ``spheres`` or ``margin`` tensor, non-integer ``pairs``, a ``margin`` that is
            neither a float nor a tensor.
        ValueError: bad shapes (``spheres`` not ``(..., S, 4)``, ``pairs`` not ``(P, 2)``, ``margin`` not
            ``(S,)``), tensors on different devices, an unknown ``reduction``, a non-finite float ``margin``,
            NaN or inf in ``spheres`` or ``margin``.
        IndexError: a pair index outside ``[0, S)`` other than ``-1``.

    Example:
        >>> spheres = torch.tensor([[0.0, 0, 0, 0.1], [0.15, 0, 0, 0.1], [1.0, 0, 0, 0.2]])
        >>> pairs = collision_pairs([0, 1, 2])           # a sphere per link: (0, 1), (0, 2), (1, 2)
        >>> self_collision_cost(spheres, pairs)          # spheres 0 and 1 overlap by 0.05
        tensor(0.0500)
        >>> self_collision_cost(spheres, pairs, reduction=None)
        tensor([0.0500, 0.0000, 0.0000])
        >>> batch = spheres.expand(8, 3, 4)              # any leading dimensions: (8,) costs
        >>> self_collision_cost(batch, pairs, margin=0.01).shape
        torch.Size([8])
    """
    checks.check_float(spheres, "spheres")
    if spheres.dim() < 2 or spheres.shape[-1] != 4:
        raise ValueError(f"spheres must have shape (..., S, 4); got {tuple(spheres.shape)}")
    if reduction is not None and not isinstance(reduction, str):
        raise TypeError(
            f'reduction must be "max", "sum" or None; got {type(reduction).__name__} {reduction!r:.60}'
        )
    if reduction not in _REDUCTIONS:
        raise ValueError(f'reduction must be "max", "sum" or None; got {reduction!r}')
    lead, count = spheres.shape[:-2], spheres.shape[-2]
    flat = spheres.reshape(math.prod(lead), count, 4)
    margin_tensor, margin_value = _margin(margin, count)
    cost, _ = _cost_op.call(
        spheres=flat,
        pairs=pairs,
        margin=margin_tensor,
        margin_value=margin_value,
        reduction=_REDUCTIONS[reduction],
    )
    if reduction is None:
        return cost.view(*lead, cost.shape[-1])
    return cost.view(lead)


# --------------------------------------------------------------------------------------------------------
# what the public functions prepare
# --------------------------------------------------------------------------------------------------------


def _links_of(sphere_links: Any) -> tuple[np.ndarray, torch.device]:
    """``sphere_links`` as a 1-D int64 NumPy array >= 0, and the device of the result."""
    device = torch.device("cpu")
    if isinstance(sphere_links, torch.Tensor):
        if sphere_links.is_floating_point() or sphere_links.is_complex() or sphere_links.dtype == torch.bool:
            raise TypeError(f"sphere_links must hold integers; got a {sphere_links.dtype} tensor")
        device = sphere_links.device
        links = sphere_links.detach().cpu().numpy()
    else:
        if isinstance(sphere_links, (str, bytes, Mapping)):
            raise TypeError(f"sphere_links must be a sequence of ints; got {type(sphere_links).__name__}")
        links = np.asarray(sphere_links)
        if links.size == 0:
            links = links.astype(np.int64)
        if links.dtype == np.bool_ or not np.issubdtype(links.dtype, np.integer):
            raise TypeError(f"sphere_links must hold integers; got {links.dtype} values")
    if links.ndim != 1:
        raise ValueError(f"sphere_links must have shape (S,); got {tuple(links.shape)}")
    links = links.astype(np.int64)
    if links.size and int(links.min()) < 0:
        raise ValueError(f"sphere_links must be >= 0 (link indices); found {int(links.min())}")
    return links, device


def _name_lookup(names: Sequence[str] | None) -> dict[str, int] | None:
    if names is None:
        return None
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise TypeError(f"names must be a sequence of link names; got {type(names).__name__}")
    lookup: dict[str, int] = {}
    for k, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(f"names must be strings; names[{k}] is {type(name).__name__} {name!r}")
        if name in lookup:
            raise ValueError(f"names must be unique; {name!r} is names[{lookup[name]}] and names[{k}]")
        lookup[name] = k
    return lookup


def _link(value: Any, lookup: dict[str, int] | None) -> int:
    """One link of ``ignore``: an int >= 0, or a name of ``names``."""
    if isinstance(value, str):
        if lookup is None:
            raise ValueError(f"ignore names link {value!r}: pass names= to name links")
        if value not in lookup:
            raise ValueError(f"ignore names link {value!r}, which is not in names")
        return lookup[value]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"ignore's links must be ints or link names; got {type(value).__name__} {value!r:.60}"
        )
    if value < 0:
        raise ValueError(f"ignore's links must be >= 0; got {value}")
    if lookup is not None and value >= len(lookup):
        raise ValueError(f"ignore names link {value}, beyond names (len {len(lookup)})")
    return int(value)


def _ignored_pairs(ignore: Any, lookup: dict[str, int] | None) -> list[tuple[int, int]]:
    """``ignore`` (link pairs, or ``{link: [links]}``) as a list of ``(a, b)`` link indices."""
    if isinstance(ignore, Mapping):
        found = []
        for a, others in ignore.items():
            if others is None:
                continue
            if isinstance(others, (str, bytes)) or not isinstance(others, Iterable):
                raise TypeError(f"ignore[{a!r}] must list links; got {type(others).__name__} {others!r:.60}")
            found.extend((_link(a, lookup), _link(b, lookup)) for b in others)
        return found
    if isinstance(ignore, (str, bytes, torch.Tensor)) or not isinstance(ignore, Iterable):
        raise TypeError(
            f"ignore must be link pairs [(a, b), ...] or {{a: [b, ...]}}; got {type(ignore).__name__}"
        )
    found = []
    for entry in ignore:
        if isinstance(entry, (str, bytes)) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise ValueError(f"ignore must hold link pairs (a, b); got {entry!r:.60}")
        found.append((_link(entry[0], lookup), _link(entry[1], lookup)))
    return found


def _margin(margin: Any, count: int) -> tuple[torch.Tensor | None, float]:
    """``margin`` as the op takes it: ``(None, value)`` for a number, ``(tensor (S,), 0.0)`` for a tensor (a
    0-d one expanded: its gradient is the sum)."""
    if isinstance(margin, torch.Tensor):
        checks.check_float(margin, "margin")
        if margin.dim() == 0:
            return margin.expand(count), 0.0
        return margin, 0.0
    if isinstance(margin, bool) or not isinstance(margin, (int, float)):
        raise TypeError(f"margin must be a float or a tensor; got {type(margin).__name__}")
    try:
        value = float(margin)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value):
        raise ValueError(f"margin must be finite; got {margin!r:.60}")
    return None, value


# --------------------------------------------------------------------------------------------------------
# warpgeo::self_collision_cost: check, impl, fake
# --------------------------------------------------------------------------------------------------------


def _check_cost(spheres, pairs, margin, margin_value, reduction) -> None:
    """The checks of every entry point that read no tensor values: types, shapes, devices, sizes."""
    checks.check_float(spheres, "spheres")
    checks.check_index(pairs, "pairs")
    if spheres.dim() != 3 or spheres.shape[-1] != 4:
        raise ValueError(f"spheres must have shape (B, S, 4); got {tuple(spheres.shape)}")
    if pairs.dim() != 2 or pairs.shape[-1] != 2:
        raise ValueError(f"pairs must have shape (P, 2); got {tuple(pairs.shape)}")
    count = spheres.shape[1]
    item = _warp.compute_dtype(spheres.dtype).itemsize
    if count > MAX_POINTS or 4 * item * count >= INT32_LIMIT:
        raise ValueError(
            f"spheres may hold fewer than {INT32_LIMIT // (4 * item)} spheres per configuration in "
            f"{spheres.dtype} (int32 strides of one Warp launch); got S={count}"
        )
    if 8 * pairs.shape[0] >= INT32_LIMIT:
        raise ValueError(f"pairs may hold fewer than 2**28 pairs (int32 strides); got P={pairs.shape[0]}")
    if margin is not None:
        checks.check_float(margin, "margin")
        checks.check_shape(margin, "margin", (count,))
    if isinstance(margin_value, bool) or not isinstance(margin_value, (int, float)):
        raise TypeError(f"margin_value must be a float; got {type(margin_value).__name__}")
    if not math.isfinite(margin_value):
        raise ValueError(f"margin must be finite; got {margin_value}")
    if not isinstance(reduction, str) or reduction not in _MODES:
        raise ValueError(f'reduction must be "max", "sum" or "none"; got {reduction!r:.60}')
    checks.check_device("spheres", spheres=spheres, pairs=pairs, margin=margin)


def _cost_impl(
    spheres: torch.Tensor,
    pairs: torch.Tensor,
    margin: torch.Tensor | None,
    margin_value: float,
    reduction: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """spheres (B, S, 4), pairs (P, 2) -> (cost, arg): cost (B,) ("max", "sum") or (B, P) ("none") in the
    dtype of spheres; arg (B,) int32, the pair of each configuration's largest penetration (-1: none) for
    "max", (0,) otherwise."""
    if checks.checking_values(spheres.device):
        _check_values(spheres, pairs, margin)
    batch = spheres.shape[0]
    work = _warp.to_compute(spheres)
    device = spheres.device
    table = kernels.SELF_COLLISION[_PRECISION[work.dtype], _INDEX[pairs.dtype]]
    common = {
        "pairs": _pair_rows(pairs),
        "margin": _margin_tensor(margin, work),
        "margin_value": float(margin_value),
    }
    arg = torch.empty(batch if reduction == "max" else 0, dtype=torch.int32, device=device)
    if reduction == "none":
        cost = torch.empty(batch, pairs.shape[0], dtype=work.dtype, device=device)
        kernel, sliced = table.self_collision_pairs, {"spheres": work, "costs": cost}
    else:
        cost = torch.empty(batch, dtype=work.dtype, device=device)
        if reduction == "max":
            kernel, sliced = table.self_collision_max, {"spheres": work, "cost": cost, "arg": arg}
        else:
            kernel, sliced = table.self_collision_sum, {"spheres": work, "cost": cost}
    _launch.launch_blocks(
        kernel,
        (batch,),
        device=device,
        sliced=sliced,
        work_per_row=max(pairs.shape[0], 1),
        what="spheres",
        **common,
    )
    return cost.to(spheres.dtype), arg


def _cost_fake(spheres, pairs, margin, margin_value, reduction):
    batch = spheres.shape[0]
    shape = (batch, pairs.shape[0]) if reduction == "none" else (batch,)
    arg = spheres.new_empty(batch if reduction == "max" else 0, dtype=torch.int32)
    return spheres.new_empty(shape), arg


def _check_values(spheres, pairs, margin) -> None:
    """The checks that read tensor values, one device-to-host transfer for all: every sphere and margin
    finite, every pair index in ``[-1, S)``."""
    count = spheres.shape[1]
    parts = [_warp.sum64(spheres)]
    if margin is not None:
        parts.append(_warp.sum64(margin))
    if pairs.numel() > 0:
        parts.extend(t.to(torch.float64) for t in torch.aminmax(pairs))
    if spheres.device.type == "cpu":
        values = [v.item() for v in parts]
    else:
        values = torch.stack([v.to(torch.float64) for v in parts]).tolist()
    if not math.isfinite(values[0]) and not bool(torch.isfinite(spheres).all()):
        raise ValueError("spheres must be finite: found NaN or inf")
    if margin is not None and not math.isfinite(values[1]) and not bool(torch.isfinite(margin).all()):
        raise ValueError("margin must be finite: found NaN or inf")
    if pairs.numel() > 0:
        low, high = values[-2], values[-1]
        if low < SENTINEL_INDEX or high >= count:
            bad = int(low) if low < SENTINEL_INDEX else int(high)
            raise IndexError(f"pairs must lie in [0, S={count}) (-1 = no pair); found {bad}")


def _pair_rows(pairs: torch.Tensor) -> torch.Tensor:
    """``pairs`` as the kernels read them: each row one vector of two indices (a dense last dimension). No
    pairs: a fresh ``(0, 2)`` tensor (an empty one from NumPy has strides ``(0, 0)``, which ``.contiguous()``
    keeps and Warp refuses as vectors)."""
    if pairs.shape[0] == 0:
        return torch.empty(0, 2, dtype=pairs.dtype, device=pairs.device)
    return pairs if pairs.stride(-1) == 1 else pairs.contiguous()


#: Per (device, dtype), the empty margin tensor the kernels read as "no per-sphere margin" (never written).
_NO_MARGIN: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}


def _margin_tensor(margin: torch.Tensor | None, work: torch.Tensor) -> torch.Tensor:
    """The kernels' ``margin``: ``(S,)`` in the compute dtype, or empty."""
    if margin is not None:
        return margin.detach().to(work.dtype)
    key = (work.device, work.dtype)
    empty = _NO_MARGIN.get(key)
    if empty is None:
        empty = _NO_MARGIN[key] = work.new_empty(0)
    return empty


# --------------------------------------------------------------------------------------------------------
# warpgeo::self_collision_cost_backward: the gradient, an op of its own (torch.compile traces the backward)
# --------------------------------------------------------------------------------------------------------


def _check_grad(grad_cost, spheres, pairs, margin, margin_value, reduction, arg) -> None:
    _check_cost(spheres, pairs, margin, margin_value, reduction)
    checks.check_float(grad_cost, "grad_cost")
    checks.check_index(arg, "arg")
    batch = spheres.shape[0]
    expected = (batch, pairs.shape[0]) if reduction == "none" else (batch,)
    checks.check_shape(grad_cost, "grad_cost", expected)
    checks.check_shape(arg, "arg", (batch if reduction == "max" else None,))
    checks.check_device("spheres", spheres=spheres, grad_cost=grad_cost, arg=arg)


def _grad_impl(
    grad_cost: torch.Tensor,
    spheres: torch.Tensor,
    pairs: torch.Tensor,
    margin: torch.Tensor | None,
    margin_value: float,
    reduction: str,
    arg: torch.Tensor,
) -> torch.Tensor:
    """d (sum of grad_cost * cost) / d spheres: (B, S, 4) in the compute dtype of spheres (float32 for
    halves: the margin's gradient is summed from it). ``arg``: the forward's (max), ignored otherwise."""
    batch = spheres.shape[0]
    work = _warp.to_compute(spheres)
    grad = torch.empty(work.shape, dtype=work.dtype, device=work.device)
    weights = grad_cost.to(work.dtype)
    if reduction != "none":
        weights = weights.view(batch, 1)
    table = kernels.SELF_COLLISION[_PRECISION[work.dtype], _INDEX[pairs.dtype]]
    _launch.launch_blocks(
        table.self_collision_backward,
        (batch,),
        device=work.device,
        sliced={"spheres": work, "grad_cost": weights, "grad_spheres": grad},
        per_batch={"arg": arg.to(torch.int32) if reduction == "max" else _no_arg(work.device)},
        work_per_row=1 if reduction == "max" else max(pairs.shape[0], 1),
        what="spheres",
        pairs=_pair_rows(pairs),
        margin=_margin_tensor(margin, work),
        margin_value=float(margin_value),
        mode=_MODES[reduction],
    )
    return grad


def _grad_fake(grad_cost, spheres, pairs, margin, margin_value, reduction, arg):
    return spheres.new_empty(spheres.shape, dtype=_warp.compute_dtype(spheres.dtype))


_NO_ARG: dict[torch.device, torch.Tensor] = {}


def _no_arg(device: torch.device) -> torch.Tensor:
    empty = _NO_ARG.get(device)
    if empty is None:
        empty = _NO_ARG[device] = torch.empty(0, dtype=torch.int32, device=device)
    return empty


_grad_op = Op("warpgeo::self_collision_cost_backward", check=_check_grad, impl=_grad_impl, fake=_grad_fake)


# --------------------------------------------------------------------------------------------------------
# autograd: one setup / backward pair, registered on the op
# --------------------------------------------------------------------------------------------------------


def _setup_cost(ctx, inputs, output) -> None:
    spheres, pairs, margin, margin_value, reduction = inputs
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(spheres, pairs, margin, output[1])
    ctx.cost_options = (margin_value, reduction)  # plain Python values


def _backward_cost(ctx, grad_cost, _grad_arg):
    need_spheres, need_margin = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    if grad_cost is None or not (need_spheres or need_margin):
        return _cost_op.grads()
    spheres, pairs, margin, arg = ctx.saved_tensors
    margin_value, reduction = ctx.cost_options
    run = _grad_op.in_backward(grad_cost, spheres, pairs, margin, arg)
    grad = run(grad_cost, spheres, pairs, margin, margin_value, reduction, arg)
    grad_spheres = grad.to(spheres.dtype) if need_spheres else None
    grad_margin = grad[..., 3].sum(0).to(margin.dtype) if need_margin else None
    return _cost_op.grads(spheres=grad_spheres, margin=grad_margin)


_cost_op = Op(
    "warpgeo::self_collision_cost",
    check=_check_cost,
    impl=_cost_impl,
    fake=_cost_fake,
    setup=_setup_cost,
    backward=_backward_cost,
)
