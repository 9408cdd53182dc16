"""Sphere-to-mesh collision cost (discrete and swept) and signed distance against a :class:`MeshWorld`.

Three custom ops, one Warp kernel each (``warpgeo._kernels.sdf``), declared with :class:`~warpgeo._op.Op`:
``warpgeo::sphere_mesh_cost``, ``warpgeo::swept_sphere_mesh_cost`` and ``warpgeo::signed_distance``. Each
takes the world as declared inputs: ``world``, the list of the world's tensors (``MeshWorld.kernel_args``;
order and shapes in ``warpgeo.world.WORLD_FIELDS``), which the kernels read as one Warp struct, and
``all_cuboids`` (every mesh a cuboid: the kernels made for that run). Each forward kernel also writes the
derivative of its value w.r.t. its input (only when a gradient is wanted), and the one registered backward
of each op scales it by the incoming gradient. The public Function classes :class:`SdfMesh` and
:class:`SweptSdfMesh` are the same ops with the same setup / backward pair.

The file reads: public functions, checks, the three declarations (check, impl, fake), backward, the ops; what
every world op shares (the world's checks, the launch) is ``warpgeo._world_query``'s."""

from __future__ import annotations

import math

import torch

from . import _warp, checks
from ._kernels import sdf as kernels
from ._op import Op
from ._world_query import (
    QUERY_WORK,
    as_float,
    check_query,
    launch_query,
    params_tensor,
    prepare_launch,
    prepare_query,
    world_args,
)
from .world import MeshWorld

__all__ = ["SdfMesh", "SweptSdfMesh", "signed_distance", "sphere_mesh_cost", "swept_sphere_mesh_cost"]


#: What signed_distance returns for a point with no enabled mesh in its environment.
_NO_MESH_DISTANCE = float("inf")


#: The most interpolated spheres per interval of the swept cost: ``t = j / (S + 1)`` stays exact in float32
#: and the kernel's int32 step counter cannot overflow.
_MAX_SWEEP_STEPS = 2**24


def sphere_mesh_cost(
    spheres: torch.Tensor,
    world: MeshWorld,
    *,
    activation_distance: float | torch.Tensor = 0.0,
    weight: float | torch.Tensor = 1.0,
    env_index: torch.Tensor | None = None,
    max_distance: float | None = None,
) -> torch.Tensor:
    """Collision cost of spheres against the enabled meshes of their environment (cuRobo's smooth cost).

    With ``d`` the signed distance of a sphere's centre to a mesh (negative inside), its radius ``r`` and
    ``eta = activation_distance``, ``phi = r + eta - d`` and the cost of that mesh is::

        0                    if phi <= 0
        phi**2 / (2 * eta)   if 0 < phi <= eta
        phi - eta / 2        if phi > eta          (eta = 0: max(phi, 0))

    summed over the enabled meshes of the sphere's environment, times ``weight``. A sphere with a negative
    radius is disabled (cost 0, gradient 0). A centre deep inside a mesh is always a collision.

    The gradient w.r.t. ``spheres`` covers centre and radius: ``d cost / d r = weight * min(phi / eta, 1)``
    and ``d cost / d centre = -d cost / d r * grad d``; at the surface (``d = 0``) ``grad d`` is the face
    normal. It is computed in the forward kernel, only when ``spheres`` requires grad.
    ``activation_distance`` and ``weight`` are not differentiated.

    Precision: float32 (half and bfloat16 are computed in float32) or float64; the closest face is found in
    float32 (Warp meshes are float32), the distance to it in the input precision.

    Args:
        spheres: ``(..., 4)`` = x, y, z, radius in the world frame, e.g. cuRobo's ``(B, H, N, 4)``; float16,
            bfloat16, float32 or float64, on ``world.device``.
        world: the :class:`MeshWorld`.
        activation_distance: eta >= 0, a float or a 0-d / 1-element tensor (read on the device: no sync).
        weight: a float or a 0-d / 1-element tensor.
        env_index: optional integer ``(B,)``: the environment of each entry of the leading dimension
            (``B = spheres.shape[0]``); environment 0 by default.
        max_distance: optional speed hint >= 0: faces are searched within ``r + eta + max_distance`` of a
            centre outside a mesh. It never changes the cost (any radius >= r + eta is exact); ``None`` or
            ``float("inf")``: no bound.

    Returns:
        Cost of shape ``spheres.shape[:-1]``, dtype of ``spheres``, >= 0.

    Raises:
        TypeError: non-float ``spheres``, non-integer ``env_index``, bad ``activation_distance``/``weight``.
        ValueError: bad shapes, wrong device, NaN/inf in ``spheres``, negative ``activation_distance`` or
            ``max_distance``.
        IndexError: ``env_index`` outside ``[0, world.num_envs)``.

    Example:
        >>> world = MeshWorld([trimesh.creation.box((1, 1, 1))])
        >>> spheres = torch.tensor([[[[0.5, 0.0, 0.0, 0.1]]]], requires_grad=True)   # (B, H, N, 4)
        >>> cost = sphere_mesh_cost(spheres, world, activation_distance=0.02)       # (1, 1, 1)
        >>> cost.sum().backward()
    """
    flat, compute_grad = prepare_query(spheres, world, 4, "spheres")
    params = params_tensor(activation_distance, weight, flat)
    max_distance = 0.0 if max_distance is None else _check_max_distance(max_distance)
    args = world_args(world, flat.dtype)
    cost, _ = _cost.call(
        spheres=flat,
        env_index=env_index,
        world=args.world,
        all_cuboids=args.all_cuboids,
        params=params,
        max_distance=max_distance,
        compute_grad=compute_grad,
    )
    return _shaped(cost, spheres.shape[:-1])


def swept_sphere_mesh_cost(
    spheres: torch.Tensor,
    world: MeshWorld,
    *,
    sweep_steps: int = 4,
    activation_distance: float | torch.Tensor = 0.0,
    weight: float | torch.Tensor = 1.0,
    env_index: torch.Tensor | None = None,
    speed_metric: bool = False,
    dt: float | torch.Tensor = 1.0,
) -> torch.Tensor:
    """Collision cost along trajectories: the time average of the cost over each interval.

    For ``h < H - 1`` and ``S = sweep_steps``, step ``h``'s cost is the mean of the :func:`sphere_mesh_cost`
    of the ``S + 1`` spheres interpolated linearly (centre and radius) at ``t = j / (S + 1)``,
    ``j = 0..S``, from step ``h`` towards step ``h + 1``, and each sample's gradient is split ``(1 - t, t)``
    between the two steps. The last step, and a step whose next sphere is disabled (negative radius), is
    scored alone (its discrete cost); a disabled sphere costs 0. So a sphere that jumps through a thin wall
    between two steps is still penalised, a motionless trajectory costs exactly the discrete cost at every
    step, and ``weight`` means the same whatever ``sweep_steps`` is. With ``H = 1`` or ``sweep_steps=0``
    this is :func:`sphere_mesh_cost`. The samples are generated and scored inside the kernel (nothing of
    size ``(H - 1) * S * N`` is materialised), and the gradient is accumulated without atomics
    (deterministic).

    With ``speed_metric=True`` (cuRobo's ``enable_speed_metric``), the cost of each interior step
    ``0 < h < H - 1`` is multiplied by the speed of its sphere's centre ``c``, the central difference
    ``|c[h + 1] - c[h - 1]| / (2 dt)``; the first and last steps are not scaled (as cuRobo). Where one
    neighbour's sphere is disabled (negative radius), the one-sided difference with the other is used
    (``|c[h + 1] - c[h]| / dt`` or ``|c[h] - c[h - 1]| / dt``); where both are, the step is not scaled. The
    factor is continuous (a motionless interior step costs 0) and differentiated exactly: the gradient
    reaches ``c[h - 1]``, ``c[h]``, ``c[h + 1]`` and, through the cost, the radii (and ``dt`` if it is a
    tensor that requires grad). cuRobo differs in three ways: it scales only where the speed exceeds 1e-3
    (leaving slower steps unscaled), it takes a disabled neighbour's centre into the central difference as
    any other, and its gradient is a CHOMP-style functional gradient w.r.t. ``c[h]`` only, not the gradient
    of its cost (see ``docs/sdf.md``; ``benchmarks/curobo_speed_metric.py`` runs its kernel beside this).

    Args:
        spheres: ``(B, H, N, 4)`` = x, y, z, radius over H time steps; float dtypes as for
            :func:`sphere_mesh_cost`, on ``world.device``.
        world: the :class:`MeshWorld`.
        sweep_steps: interpolated spheres per interval, an int >= 0.
        activation_distance, weight, env_index: as for :func:`sphere_mesh_cost`.
        speed_metric: scale interior steps' costs by their sphere's speed (above), a bool.
        dt: the time between steps, > 0 (at least the compute precision's smallest normal number): a float
            or a 0-d / 1-element float tensor on ``world.device`` (its value is checked under the value
            checks). A speed beyond the precision's range is taken as its largest number.

    Returns:
        Cost ``(B, H, N)``, dtype of ``spheres``.

    Raises:
        As :func:`sphere_mesh_cost`; also ValueError for ``spheres`` not 4-D, a negative ``sweep_steps`` or
        a ``dt`` that is not finite and > 0, TypeError for a non-int ``sweep_steps``, a non-bool
        ``speed_metric`` or a ``dt`` that is neither a float nor a float tensor.

    Example:
        >>> world = MeshWorld([trimesh.creation.box((0.3, 1, 1))])           # a wall at x = 0
        >>> traj = torch.zeros(1, 2, 1, 4); traj[0, 0, 0] = torch.tensor([-1, 0, 0, 0.05])
        >>> traj[0, 1, 0] = torch.tensor([1, 0, 0, 0.05])                 # jumps through the wall
        >>> sphere_mesh_cost(traj, world)                                  # both steps are clear
        tensor([[[0.], [0.]]])
        >>> swept_sphere_mesh_cost(traj, world, sweep_steps=8)[0, 0] > 0   # the step between is not
        tensor([True])
    """
    if isinstance(spheres, torch.Tensor) and spheres.dim() != 4:
        raise ValueError(f"spheres must have shape (B, H, N, 4); got {tuple(spheres.shape)}")
    traj, compute_grad = prepare_query(spheres, world, 4, "spheres", reshape=False)
    if type(speed_metric) is not bool:
        raise TypeError(f"speed_metric must be a bool; got {type(speed_metric).__name__}")
    if speed_metric:
        dt = _check_dt(dt, traj)
    params = params_tensor(activation_distance, weight, traj)
    args = world_args(world, traj.dtype)
    cost, _ = _swept.call(
        spheres=traj,
        env_index=env_index,
        world=args.world,
        all_cuboids=args.all_cuboids,
        params=params,
        sweep_steps=sweep_steps,
        compute_grad=compute_grad,
    )
    if speed_metric:
        return _speed_scaled(cost, traj, dt)
    return cost


def signed_distance(
    points: torch.Tensor, world: MeshWorld, *, env_index: torch.Tensor | None = None
) -> torch.Tensor:
    """Signed distance from points to the union of the enabled meshes of their environment.

    Negative inside a mesh (Open3D / Warp convention); the minimum over the enabled meshes. A point whose
    environment has no enabled mesh gets ``+inf`` (gradient 0). Differentiable w.r.t. ``points``: the
    gradient is the unit direction away from the closest point (the face normal on the surface).

    Args:
        points: ``(..., 3)`` in the world frame; float16, bfloat16, float32 or float64, on ``world.device``.
        world: the :class:`MeshWorld`.
        env_index: optional integer ``(B,)``: the environment of each entry of the leading dimension.

    Returns:
        ``points.shape[:-1]`` distances, dtype of ``points``.

    Raises:
        TypeError: non-float ``points``, non-integer ``env_index``.
        ValueError: bad shapes, wrong device, NaN/inf in ``points``.
        IndexError: ``env_index`` outside ``[0, world.num_envs)``.

    Example:
        >>> world = MeshWorld([trimesh.creation.icosphere(subdivisions=4)])
        >>> signed_distance(torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]]), world).round(decimals=2)
        tensor([-1.,  1.])
    """
    flat, compute_grad = prepare_query(points, world, 3, "points")
    args = world_args(world, flat.dtype)
    dist, _ = _distance.call(
        points=flat,
        env_index=env_index,
        world=args.world,
        all_cuboids=args.all_cuboids,
        compute_grad=compute_grad,
    )
    return _shaped(dist, points.shape[:-1])


def _check_dt(dt, x: torch.Tensor) -> float | torch.Tensor:
    """``dt`` of the speed metric: a finite float > 0 (at least the compute precision's smallest normal number,
    so that ``1 / dt`` is finite), or a 1-element float tensor on ``x``'s device (then 0-d, in the compute
    precision; its value checked under the value checks, outside a compiled graph)."""
    compute = _warp.compute_dtype(x.dtype)
    tiny = torch.finfo(compute).tiny
    if isinstance(dt, torch.Tensor):
        if dt.numel() != 1:
            raise ValueError(f"dt must be a float or a 1-element tensor; got shape {tuple(dt.shape)}")
        if not dt.is_floating_point():
            raise TypeError(f"dt must be a float tensor; got {dt.dtype}")
        if dt.device != x.device:
            raise ValueError(f"dt must be on {x.device}, like spheres; got {dt.device}")
        dt = dt.reshape(()).to(compute)
        if checks.checking_values(x.device) and not torch.compiler.is_compiling():
            value = float(dt.detach())
            if not (value >= tiny and math.isfinite(value)):
                raise ValueError(f"dt must be finite and > 0 (at least {tiny:.4g} in {compute}); got {value}")
        return dt
    if isinstance(dt, bool) or not isinstance(dt, (int, float)):
        raise TypeError(f"dt must be a float or a tensor; got {type(dt).__name__}")
    value = as_float(dt, "dt")
    if not (value >= tiny and math.isfinite(value)):
        raise ValueError(f"dt must be finite and > 0 (at least {tiny:.4g} in {compute}); got {dt}")
    return value


def _speed_scaled(cost: torch.Tensor, spheres: torch.Tensor, dt: float | torch.Tensor) -> torch.Tensor:
    """``cost`` (B, H, N) with each interior step's multiplied by its sphere's speed (the central difference
    of the centres of ``spheres`` (B, H, N, 4) over ``2 dt``; one-sided where a neighbour is disabled, 1
    where both are), in the compute precision; torch ops, differentiated by autograd."""
    horizon = spheres.shape[1]
    if horizon < 3:
        return cost
    compute = _warp.compute_dtype(spheres.dtype)
    centres = spheres[..., :3].to(compute)
    enabled = spheres[..., 3] >= 0
    prev_on, next_on = enabled[:, :-2, :, None], enabled[:, 2:, :, None]
    prev, here, nxt = centres[:, :-2], centres[:, 1:-1], centres[:, 2:]
    # halves first: (nxt - prev) / 2 could overflow where the result does not
    diff = torch.where(
        prev_on & next_on, nxt * 0.5 - prev * 0.5, torch.where(next_on, nxt - here, here - prev)
    )
    # |diff| scaled by its largest component (no overflow or underflow of the squares); a safe divisor at 0
    largest = diff.abs().amax(-1, keepdim=True)
    safe = torch.where(largest > 0, largest, torch.ones_like(largest))
    speed = (largest * torch.linalg.vector_norm(diff / safe, dim=-1, keepdim=True))[..., 0] / dt
    # a speed beyond the precision's range (a huge step over a tiny dt) stays finite: a zero cost stays 0
    speed = speed.clamp(max=torch.finfo(compute).max)
    factor = torch.where(prev_on[..., 0] | next_on[..., 0], speed, torch.ones_like(speed))
    ones = torch.ones_like(factor[:, :1])
    scaled = cost.to(compute) * torch.cat([ones, factor, ones], dim=1)
    return scaled.to(cost.dtype)


def _check_params(params, x) -> None:
    compute = _warp.compute_dtype(x.dtype)
    if not isinstance(params, torch.Tensor) or params.dtype != compute:
        got = params.dtype if isinstance(params, torch.Tensor) else type(params).__name__
        raise TypeError(f"params must be a {compute} tensor (eta, weight); got {got}")
    if params.shape != (2,):
        raise ValueError(f"params must have shape (2,) (eta, weight); got {tuple(params.shape)}")
    if params.device != x.device:
        raise ValueError(f"params must be on the same device as the query ({x.device}); got {params.device}")


def _check_sweep_steps(sweep_steps) -> int:
    sweep_steps = checks.check_int(sweep_steps, "sweep_steps", minimum=0)
    if not isinstance(sweep_steps, torch.SymInt) and sweep_steps > _MAX_SWEEP_STEPS:
        shown = sweep_steps if sweep_steps.bit_length() <= 64 else f"an int of {len(str(sweep_steps))} digits"
        raise ValueError(f"sweep_steps must be at most 2**24 = {_MAX_SWEEP_STEPS}; got {shown}")
    return sweep_steps


def _check_cost(spheres, env_index, world, all_cuboids, params, max_distance, compute_grad) -> None:
    check_query(spheres, "spheres", 4, 3, env_index, world, all_cuboids)
    _check_params(params, spheres)
    _check_max_distance(max_distance)


def _check_max_distance(max_distance) -> float:
    """``max_distance`` as a float >= 0 (inf: no bound); TypeError / ValueError naming it."""
    if isinstance(max_distance, bool) or not isinstance(max_distance, (int, float)):
        raise TypeError(f"max_distance must be a float or None; got {type(max_distance).__name__}")
    value = as_float(max_distance, "max_distance")
    if not value >= 0.0:
        raise ValueError(f"max_distance must be >= 0 (or inf / None: no bound); got {value}")
    return value


def _check_swept(spheres, env_index, world, all_cuboids, params, sweep_steps, compute_grad) -> None:
    check_query(spheres, "spheres", 4, 4, env_index, world, all_cuboids)
    _check_params(params, spheres)
    _check_sweep_steps(sweep_steps)


def _check_distance(points, env_index, world, all_cuboids, compute_grad) -> None:
    check_query(points, "points", 3, 3, env_index, world, all_cuboids)


def _shaped(t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``t.view(shape)``, or ``t`` itself where it has that shape (no view, and no autograd node for it)."""
    return t if t.shape == shape else t.view(shape)


def _as_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)`` without the call where ``t`` has it (``to`` returns ``t`` itself then)."""
    return t if t.dtype == dtype else t.to(dtype)


def _grad_buffer(work: torch.Tensor, compute_grad: bool, *shape: int) -> torch.Tensor:
    """A fresh gradient tensor per call (nothing a second forward could overwrite), or an empty one."""
    if compute_grad:
        return torch.empty((*work.shape[:-1], *shape, work.shape[-1]), dtype=work.dtype, device=work.device)
    return work.new_empty(0, *([0] * (work.dim() - 2)), *shape, work.shape[-1])


def _fake_grad(x: torch.Tensor, compute_grad: bool, *shape: int) -> torch.Tensor:
    dtype = _warp.compute_dtype(x.dtype)
    lead = x.shape[:-1] if compute_grad else (0,) * (x.dim() - 1)
    return x.new_empty(*lead, *shape, x.shape[-1], dtype=dtype)


def _cost_impl(
    spheres: torch.Tensor,
    env_index: torch.Tensor | None,
    world: list[torch.Tensor],
    all_cuboids: bool,
    params: torch.Tensor,
    max_distance: float,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """spheres (B, S, 4), env_index (B,) or None, the world's tensors, params (2,) = (eta, weight) in the
    compute dtype -> cost (B, S) in spheres' dtype, grad (B, S, 4) = d cost / d spheres in the compute dtype
    ((0, 0, 4) unless compute_grad)."""
    work = prepare_launch(spheres, "spheres", env_index, world, params)
    cost = torch.empty(work.shape[:-1], dtype=work.dtype, device=work.device)
    grad = _grad_buffer(work, compute_grad)
    launch_query(
        kernels.SPHERE_MESH_COST,
        work,
        env_index,
        world,
        all_cuboids,
        {"spheres": work, "cost": cost, "grad": grad},
        work_per_row=QUERY_WORK,
        params=params,
        # a speed hint only: inf ("no bound") searches as None does (any radius >= r + eta is exact)
        extra_search=0.0 if math.isinf(max_distance) else float(max_distance),
        compute_grad=int(compute_grad),
    )
    return _as_dtype(cost, spheres.dtype), grad


def _cost_fake(spheres, env_index, world, all_cuboids, params, max_distance, compute_grad):
    return spheres.new_empty(spheres.shape[:-1]), _fake_grad(spheres, compute_grad)


def _swept_impl(
    spheres: torch.Tensor,
    env_index: torch.Tensor | None,
    world: list[torch.Tensor],
    all_cuboids: bool,
    params: torch.Tensor,
    sweep_steps: int,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """spheres (B, H, N, 4), env_index (B,) or None, the world's tensors, params (2,) -> cost (B, H, N) in
    spheres' dtype, grad (B, H, N, 2, 4) in the compute dtype: d cost[h] / d spheres[h] and
    d cost[h] / d spheres[h + 1] ((0, 0, 0, 2, 4) unless compute_grad)."""
    work = prepare_launch(spheres, "spheres", env_index, world, params)
    cost = torch.empty(work.shape[:-1], dtype=work.dtype, device=work.device)
    grad = _grad_buffer(work, compute_grad, 2)
    launch_query(
        kernels.SWEPT_SPHERE_MESH_COST,
        work,
        env_index,
        world,
        all_cuboids,
        {"spheres": work, "cost": cost, "grad_here": grad[..., 0, :], "grad_next": grad[..., 1, :]},
        work_per_row=QUERY_WORK * (sweep_steps + 1),
        params=params,
        sweep_steps=sweep_steps,
        compute_grad=int(compute_grad),
    )
    return _as_dtype(cost, spheres.dtype), grad


def _swept_fake(spheres, env_index, world, all_cuboids, params, sweep_steps, compute_grad):
    return spheres.new_empty(spheres.shape[:-1]), _fake_grad(spheres, compute_grad, 2)


def _distance_impl(
    points: torch.Tensor,
    env_index: torch.Tensor | None,
    world: list[torch.Tensor],
    all_cuboids: bool,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """points (B, S, 3), env_index (B,) or None, the world's tensors -> distance (B, S) in points' dtype,
    grad (B, S, 3) in the compute dtype ((0, 0, 3) unless compute_grad)."""
    work = prepare_launch(points, "points", env_index, world, None)
    dist = torch.empty(work.shape[:-1], dtype=work.dtype, device=work.device)
    grad = _grad_buffer(work, compute_grad)
    launch_query(
        kernels.SIGNED_DISTANCE,
        work,
        env_index,
        world,
        all_cuboids,
        {"points": work, "dist": dist, "grad": grad},
        work_per_row=QUERY_WORK,
        far=_NO_MESH_DISTANCE,
        compute_grad=int(compute_grad),
    )
    return _as_dtype(dist, points.dtype), grad


def _distance_fake(points, env_index, world, all_cuboids, compute_grad):
    return points.new_empty(points.shape[:-1]), _fake_grad(points, compute_grad)


def _setup(ctx, inputs, output) -> None:
    """setup_context of the three ops: keep the derivative the forward kernel wrote."""
    ctx.set_materialize_grads(False)
    ctx.compute_grad = inputs[-1]
    ctx.dtype = inputs[0].dtype
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(output[1])


def _kernel_grad(ctx, op: str) -> torch.Tensor:
    if not ctx.compute_grad:
        raise RuntimeError(
            f"warpgeo::{op} was called with compute_grad=False, so it has no gradient to give; call it with "
            "compute_grad=True (the public functions do when the input requires grad)"
        )
    (grad,) = ctx.saved_tensors
    return grad


def _backward_cost(ctx, grad_cost, _grad_grad):
    if grad_cost is None or not ctx.needs_input_grad[0]:
        return _cost.grads(ctx)
    grad = _kernel_grad(ctx, "sphere_mesh_cost")
    return _cost.grads(ctx, spheres=_as_dtype(_warp.scale_rows(grad_cost, grad), ctx.dtype))


def _backward_swept(ctx, grad_cost, _grad_grad):
    """Step h's cost depends on spheres h (``grad[..., 0, :]``) and h + 1 (``grad[..., 1, :]``)."""
    if grad_cost is None or not ctx.needs_input_grad[0]:
        return _swept.grads(ctx)
    grad = _kernel_grad(ctx, "swept_sphere_mesh_cost")
    g = grad_cost.to(grad.dtype)[..., None]
    spheres = g * grad[..., 0, :]
    spheres[:, 1:] += g[:, :-1] * grad[:, :-1, :, 1, :]
    return _swept.grads(ctx, spheres=spheres.to(ctx.dtype))


def _backward_distance(ctx, grad_dist, _grad_grad):
    if grad_dist is None or not ctx.needs_input_grad[0]:
        return _distance.grads(ctx)
    grad = _kernel_grad(ctx, "signed_distance")
    return _distance.grads(ctx, points=_as_dtype(_warp.scale_rows(grad_dist, grad), ctx.dtype))


_cost = Op(
    "warpgeo::sphere_mesh_cost",
    check=_check_cost,
    impl=_cost_impl,
    fake=_cost_fake,
    setup=_setup,
    backward=_backward_cost,
)


_swept = Op(
    "warpgeo::swept_sphere_mesh_cost",
    check=_check_swept,
    impl=_swept_impl,
    fake=_swept_fake,
    setup=_setup,
    backward=_backward_swept,
)


_distance = Op(
    "warpgeo::signed_distance",
    check=_check_distance,
    impl=_distance_impl,
    fake=_distance_fake,
    setup=_setup,
    backward=_backward_distance,
)


SdfMesh = _cost.function(
    "SdfMesh",
    """Sphere-mesh collision cost as an autograd Function (cuRobo's ``SdfMeshWarpPy``, fixed).

    ``apply`` is ``torch.ops.warpgeo.sphere_mesh_cost``, with the same backward. Prefer
    :func:`sphere_mesh_cost`, which takes any ``(..., 4)`` shape, floats for the parameters and a world:

    ``apply(spheres (B, S, 4), env_index (B,) | None, world, all_cuboids, params (2,), max_distance: float,
    compute_grad: bool)`` -> ``(cost (B, S), d cost / d spheres)``, where ``world, all_cuboids`` are
    ``world.kernel_args(spheres.dtype)`` and ``params = (activation_distance, weight)`` in the compute dtype
    (float32, or float64 for float64 spheres).
    """,
)


SweptSdfMesh = _swept.function(
    "SweptSdfMesh",
    """Swept sphere-mesh cost over a trajectory as an autograd Function.

    ``apply`` is ``torch.ops.warpgeo.swept_sphere_mesh_cost``, with the same backward. Prefer
    :func:`swept_sphere_mesh_cost`:

    ``apply(spheres (B, H, N, 4), env_index (B,) | None, world, all_cuboids, params (2,), sweep_steps: int,
    compute_grad: bool)`` -> ``(cost (B, H, N), grad (B, H, N, 2, 4))``.
    """,
)
