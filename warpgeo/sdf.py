"""Sphere-to-mesh collision cost (discrete and swept) and signed distance against a :class:`MeshWorld`."""

from __future__ import annotations

import math

import torch

from . import _interop
from .world import MeshWorld

__all__ = ["SdfMesh", "SweptSdfMesh", "signed_distance", "sphere_mesh_cost", "swept_sphere_mesh_cost"]

#: Below this distance from the surface (mesh units) the gradient direction is the face normal: the
#: direction to the closest point is undefined at distance 0 and rounding noise just above it.
_SURFACE_EPS = {torch.float32: 1.0e-5, torch.float64: 1.0e-9}
#: Cost of one mesh query in launch_rows' work units (~ a few microseconds): with it, a CPU launch is split
#: among threads from about a thousand sphere-mesh pairs up.
_QUERY_WORK = 256
#: What signed_distance returns for a point with no enabled mesh in its environment.
_NO_MESH_DISTANCE = float("inf")


def _kernel_name(dtype: torch.dtype) -> str:
    return "float64" if dtype == torch.float64 else "float32"


# --------------------------------------------------------------------------------------------------------
# custom ops (each one opaque node for torch.compile)
# --------------------------------------------------------------------------------------------------------


def _query(
    table: dict,
    x: torch.Tensor,
    env_index: torch.Tensor,
    world: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    options,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run one of the mesh-query kernels over ``x`` (B, S, 3 or 4): the launch both ops share.

    ``world`` = (mesh_ids, inv_poses, bounds, enabled); ``options(dtype)`` gives the kernel's op-specific
    arguments between the world tensors and ``compute_grad``. Returns the value (B, S) in ``x``'s dtype and
    the gradient (B, S, D) in the compute dtype (an empty (0, 0, D) tensor unless ``compute_grad``).
    """
    mesh_ids, inv_poses, bounds, enabled = world
    work = _interop.to_compute(x)
    dtype = work.dtype
    batch, count = x.shape[0], x.shape[1]
    value = torch.empty(batch, count, dtype=dtype, device=x.device)
    grad = _grad_buffer(work, compute_grad)
    _interop.launch_rows(
        table[_kernel_name(dtype)],
        batch * count,
        [
            work,
            env_index.to(torch.int32),
            mesh_ids,
            inv_poses.to(dtype).contiguous(),
            bounds,
            enabled,
            *options(dtype),
            int(compute_grad),
            value,
            grad,
        ],
        device=x.device,
        work_per_row=_QUERY_WORK * mesh_ids.shape[1],
    )
    return value.to(x.dtype), grad


def _fake_query(x: torch.Tensor, compute_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = _interop.compute_dtype(x.dtype)
    rows = (x.shape[0], x.shape[1]) if compute_grad else (0, 0)
    return x.new_empty(x.shape[:2]), x.new_empty(*rows, x.shape[-1], dtype=dtype)


def _save_kernel_grad(ctx, inputs, output) -> None:
    """setup_context of both ops: keep the gradient the forward kernel wrote (inputs[-1] = compute_grad)."""
    ctx.compute_grad = inputs[-1]
    ctx.dtype = inputs[0].dtype
    ctx.save_for_backward(output[1])


def _chain_kernel_grad(op_name: str, num_inputs: int):
    """The backward of an op whose forward wrote d value / d input: scale it by the incoming gradient."""

    def backward(ctx, grad_value, _grad_kernel_grad):
        if not ctx.compute_grad:
            raise RuntimeError(f"warpgeo::{op_name} was called with compute_grad=False: no gradient to chain")
        (grad,) = ctx.saved_tensors
        return ((grad_value[..., None] * grad).to(ctx.dtype),) + (None,) * (num_inputs - 1)

    return backward


@torch.library.custom_op("warpgeo::sphere_mesh_cost", mutates_args=())
def _cost_op(
    spheres: torch.Tensor,
    env_index: torch.Tensor,
    mesh_ids: torch.Tensor,
    inv_poses: torch.Tensor,
    bounds: torch.Tensor,
    enabled: torch.Tensor,
    params: torch.Tensor,
    max_distance: float,
    winding: bool,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """spheres (B, S, 4), env_index (B,) int64, world tensors (E, M, ...), params (2,) = (eta, weight)
    -> cost (B, S) in spheres' dtype, grad (B, S, 4) in the compute dtype ((0, 0, 4) unless compute_grad)."""
    _check_values(spheres, env_index, mesh_ids.shape[0], params)
    from ._kernels import mesh as kernels

    def options(dtype):
        return [params.to(dtype).contiguous(), float(max_distance), int(winding), _SURFACE_EPS[dtype]]

    world = (mesh_ids, inv_poses, bounds, enabled)
    return _query(kernels.SPHERE_MESH_COST, spheres, env_index, world, options, compute_grad)


@_cost_op.register_fake
def _(spheres, env_index, mesh_ids, inv_poses, bounds, enabled, params, max_distance, winding, compute_grad):
    return _fake_query(spheres, compute_grad)


_cost_op.register_autograd(_chain_kernel_grad("sphere_mesh_cost", 10), setup_context=_save_kernel_grad)


@torch.library.custom_op("warpgeo::signed_distance", mutates_args=())
def _distance_op(
    points: torch.Tensor,
    env_index: torch.Tensor,
    mesh_ids: torch.Tensor,
    inv_poses: torch.Tensor,
    bounds: torch.Tensor,
    enabled: torch.Tensor,
    winding: bool,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """points (B, S, 3), env_index (B,) int64, world tensors -> distance (B, S) in points' dtype,
    grad (B, S, 3) in the compute dtype ((0, 0, 3) unless compute_grad)."""
    _check_values(points, env_index, mesh_ids.shape[0], None)
    from ._kernels import mesh as kernels

    def options(dtype):
        return [int(winding), _SURFACE_EPS[dtype], _NO_MESH_DISTANCE]

    world = (mesh_ids, inv_poses, bounds, enabled)
    return _query(kernels.SIGNED_DISTANCE, points, env_index, world, options, compute_grad)


@_distance_op.register_fake
def _(points, env_index, mesh_ids, inv_poses, bounds, enabled, winding, compute_grad):
    return _fake_query(points, compute_grad)


_distance_op.register_autograd(_chain_kernel_grad("signed_distance", 8), setup_context=_save_kernel_grad)


def _grad_buffer(work: torch.Tensor, compute_grad: bool) -> torch.Tensor:
    """A fresh gradient tensor per call (nothing a second forward could overwrite), or an empty one."""
    if compute_grad:
        return torch.zeros(work.shape, dtype=work.dtype, device=work.device)
    return work.new_empty(0, 0, work.shape[-1])


def _check_values(
    x: torch.Tensor, env_index: torch.Tensor, num_envs: int, params: torch.Tensor | None
) -> None:
    """The checks that need tensor values, run inside the op: one device-to-host transfer for all."""
    flags = [
        ~torch.isfinite(x).all(),
        ((env_index < 0) | (env_index >= num_envs)).any(),
    ]
    if params is not None:
        flags.append(~torch.isfinite(params).all() | (params[0] < 0))
    flags = torch.stack(flags).tolist()
    name = "spheres" if x.shape[-1] == 4 else "points"
    if flags[0]:
        raise ValueError(f"{name} must be finite: found NaN or inf")
    if flags[1]:
        raise IndexError(
            f"env_index must lie in [0, num_envs={num_envs}); got values {env_index.unique().tolist()}"
        )
    if params is not None and flags[2]:
        raise ValueError(
            f"activation_distance must be finite and >= 0 and weight finite; got {params.tolist()} (eta, weight)"
        )


# --------------------------------------------------------------------------------------------------------
# autograd Functions
# --------------------------------------------------------------------------------------------------------


class SdfMesh(torch.autograd.Function):
    """Sphere-mesh collision cost as an autograd Function (cuRobo's ``SdfMeshWarpPy``, fixed).

    The forward kernel also writes d cost / d sphere, into a fresh tensor and only when the spheres need a
    gradient; backward scales it by ``grad_output``. Prefer :func:`sphere_mesh_cost`, which validates.

    ``apply(spheres (B, S, 4), env_index (B,) int64, mesh_ids, inv_poses, bounds, enabled, params (2,),
    max_distance: float, winding: bool)`` -> cost ``(B, S)``; the world tensors are
    ``MeshWorld._kernel_tensors()``, ``params = (activation_distance, weight)``.
    """

    @staticmethod
    def forward(ctx, spheres, env_index, mesh_ids, inv_poses, bounds, enabled, params, max_distance, winding):
        ctx.set_materialize_grads(False)
        compute_grad = ctx.needs_input_grad[0]
        cost, grad = _cost_op(
            spheres,
            env_index,
            mesh_ids,
            inv_poses,
            bounds,
            enabled,
            params,
            max_distance,
            winding,
            compute_grad,
        )
        if compute_grad:
            ctx.save_for_backward(grad)
        return cost

    @staticmethod
    def backward(ctx, grad_cost):
        if grad_cost is None or not ctx.needs_input_grad[0]:
            return (None,) * 9
        (grad,) = ctx.saved_tensors
        grad_spheres = (grad_cost[..., None] * grad).to(grad_cost.dtype)
        return (grad_spheres,) + (None,) * 8


class SweptSdfMesh(torch.autograd.Function):
    """Swept sphere-mesh cost over a trajectory as an autograd Function.

    Step ``h`` scores its spheres and ``sweep_steps`` spheres interpolated (centre and radius) at
    ``t = j / (sweep_steps + 1)`` towards step ``h + 1``; their gradient is split ``(1 - t, t)`` between
    the two steps. Prefer :func:`swept_sphere_mesh_cost`, which validates.

    ``apply(spheres (B, H, N, 4), env_index (B,) int64, mesh_ids, inv_poses, bounds, enabled, params (2,),
    sweep_steps: int, winding: bool)`` -> cost ``(B, H, N)``.
    """

    @staticmethod
    def forward(ctx, spheres, env_index, mesh_ids, inv_poses, bounds, enabled, params, sweep_steps, winding):
        ctx.set_materialize_grads(False)
        compute_grad = ctx.needs_input_grad[0]
        batch, horizon, n, _ = spheres.shape
        steps = sweep_steps if horizon > 1 else 0
        t = _sweep_fractions(steps, spheres)
        flat = _interop.to_compute(spheres).reshape(batch, horizon * n, 4)
        if steps > 0:
            samples = _interpolate(spheres, t).reshape(batch, (horizon - 1) * steps * n, 4)
            flat = torch.cat([flat, samples], dim=1)
        cost_all, grad_all = _cost_op(
            flat, env_index, mesh_ids, inv_poses, bounds, enabled, params, 0.0, winding, compute_grad
        )
        cost = cost_all[:, : horizon * n].reshape(batch, horizon, n)
        if steps > 0:
            swept = cost_all[:, horizon * n :].reshape(batch, horizon - 1, steps, n).sum(dim=2)
            cost = cost + torch.nn.functional.pad(swept, (0, 0, 0, 1))
        if compute_grad:
            ctx.save_for_backward(grad_all, t)
        ctx.shape = (batch, horizon, n, steps)
        return cost.to(spheres.dtype)

    @staticmethod
    def backward(ctx, grad_cost):
        if grad_cost is None or not ctx.needs_input_grad[0]:
            return (None,) * 9
        grad_all, t = ctx.saved_tensors
        batch, horizon, n, steps = ctx.shape
        g = grad_cost.to(grad_all.dtype)
        grad = g[..., None] * grad_all[:, : horizon * n].reshape(batch, horizon, n, 4)
        if steps > 0:
            # sample (h, j) moves with step h by (1 - t_j) and with step h + 1 by t_j
            samples = grad_all[:, horizon * n :].reshape(batch, horizon - 1, steps, n, 4)
            samples = samples * g[:, :-1, None, :, None]
            w = t[None, None, :, None, None]
            to_left = ((1 - w) * samples).sum(dim=2)
            to_right = (w * samples).sum(dim=2)
            pad = torch.nn.functional.pad
            grad = grad + pad(to_left, (0, 0, 0, 0, 0, 1)) + pad(to_right, (0, 0, 0, 0, 1, 0))
        return (grad.to(grad_cost.dtype),) + (None,) * 8


def _sweep_fractions(steps: int, like: torch.Tensor) -> torch.Tensor:
    dtype = _interop.compute_dtype(like.dtype)
    return torch.arange(1, steps + 1, dtype=dtype, device=like.device) / (steps + 1)


def _interpolate(spheres: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``(B, H - 1, K, N, 4)`` spheres between consecutive steps; disabled where either end is."""
    a = spheres[:, :-1, None].to(t.dtype)
    b = spheres[:, 1:, None].to(t.dtype)
    w = t[None, None, :, None, None]
    mid = a + (b - a) * w
    off = (a[..., 3] < 0) | (b[..., 3] < 0)
    radius = torch.where(off.expand_as(mid[..., 3]), torch.full_like(mid[..., 3], -1.0), mid[..., 3])
    return torch.cat([mid[..., :3], radius[..., None]], dim=-1)


class _SignedDistance(torch.autograd.Function):
    """Union signed distance; ``apply(points (B, S, 3), env_index, mesh_ids, inv_poses, bounds, enabled,
    winding)`` -> ``(B, S)``."""

    @staticmethod
    def forward(ctx, points, env_index, mesh_ids, inv_poses, bounds, enabled, winding):
        ctx.set_materialize_grads(False)
        compute_grad = ctx.needs_input_grad[0]
        dist, grad = _distance_op(
            points, env_index, mesh_ids, inv_poses, bounds, enabled, winding, compute_grad
        )
        if compute_grad:
            ctx.save_for_backward(grad)
        return dist

    @staticmethod
    def backward(ctx, grad_dist):
        if grad_dist is None or not ctx.needs_input_grad[0]:
            return (None,) * 7
        (grad,) = ctx.saved_tensors
        return ((grad_dist[..., None] * grad).to(grad_dist.dtype),) + (None,) * 6


# --------------------------------------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------------------------------------


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
            centre outside a mesh. It never changes the cost (any radius >= r + eta is exact).

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
    flat, shape, env, params = _prepare(spheres, world, 4, "spheres", env_index, activation_distance, weight)
    if max_distance is None:
        max_distance = 0.0
    if isinstance(max_distance, bool) or not isinstance(max_distance, (int, float)):
        raise TypeError(f"max_distance must be a float or None; got {type(max_distance).__name__}")
    if not max_distance >= 0.0:
        raise ValueError(f"max_distance must be >= 0; got {max_distance}")
    ids, inv, bounds, enabled = world._kernel_tensors()
    winding = world.sign_method == "winding"
    cost = SdfMesh.apply(flat, env, ids, inv, bounds, enabled, params, float(max_distance), winding)
    return cost.reshape(shape)


def swept_sphere_mesh_cost(
    spheres: torch.Tensor,
    world: MeshWorld,
    *,
    sweep_steps: int = 4,
    activation_distance: float | torch.Tensor = 0.0,
    weight: float | torch.Tensor = 1.0,
    env_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Collision cost along trajectories: each step also scores spheres swept towards the next step.

    For ``h < H - 1``, ``sweep_steps`` spheres interpolated linearly (centre and radius) at
    ``t = j / (sweep_steps + 1)``, ``j = 1..sweep_steps``, between steps ``h`` and ``h + 1`` are scored with
    the cost of :func:`sphere_mesh_cost`; their cost is added to step ``h`` and their gradient split
    ``(1 - t, t)`` between steps ``h`` and ``h + 1``. A sample is disabled if either end is (negative
    radius). So a sphere that jumps through a thin wall between two steps is still penalised. With
    ``H = 1`` (or ``sweep_steps=0``) this is :func:`sphere_mesh_cost`.

    Args:
        spheres: ``(B, H, N, 4)`` = x, y, z, radius over H time steps; float dtypes as for
            :func:`sphere_mesh_cost`, on ``world.device``.
        world: the :class:`MeshWorld`.
        sweep_steps: interpolated spheres per interval, an int >= 0.
        activation_distance, weight, env_index: as for :func:`sphere_mesh_cost`.

    Returns:
        Cost ``(B, H, N)``, dtype of ``spheres``.

    Raises:
        As :func:`sphere_mesh_cost`; also ValueError for ``spheres`` not 4-D or a negative ``sweep_steps``,
        TypeError for a non-int ``sweep_steps``.

    Example:
        >>> traj = torch.zeros(1, 2, 1, 4); traj[0, 0, 0] = torch.tensor([-1, 0, 0, 0.05])
        >>> traj[0, 1, 0] = torch.tensor([1, 0, 0, 0.05])                 # jumps through the origin
        >>> swept_sphere_mesh_cost(traj, world, sweep_steps=8)             # step 0 is penalised
    """
    if isinstance(spheres, torch.Tensor) and spheres.dim() != 4:
        raise ValueError(f"spheres must have shape (B, H, N, 4); got {tuple(spheres.shape)}")
    if isinstance(sweep_steps, bool) or not isinstance(sweep_steps, int):
        raise TypeError(f"sweep_steps must be an int; got {type(sweep_steps).__name__}")
    if sweep_steps < 0:
        raise ValueError(f"sweep_steps must be >= 0; got {sweep_steps}")
    flat, _, env, params = _prepare(spheres, world, 4, "spheres", env_index, activation_distance, weight)
    ids, inv, bounds, enabled = world._kernel_tensors()
    winding = world.sign_method == "winding"
    traj = flat.reshape(spheres.shape)
    return SweptSdfMesh.apply(traj, env, ids, inv, bounds, enabled, params, sweep_steps, winding)


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
        >>> signed_distance(torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]]), world)   # about [-1, 1]
    """
    flat, shape, env, _ = _prepare(points, world, 3, "points", env_index, None, None)
    ids, inv, bounds, enabled = world._kernel_tensors()
    winding = world.sign_method == "winding"
    return _SignedDistance.apply(flat, env, ids, inv, bounds, enabled, winding).reshape(shape)


# --------------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------------


def _prepare(x, world, width: int, name: str, env_index, activation_distance, weight):
    """Validate; return ``(x as (B, S, width), output shape, env_index (B,) int64, params (2,) or None)``."""
    if not isinstance(world, MeshWorld):
        raise TypeError(f"world must be a warpgeo.MeshWorld; got {type(world).__name__}")
    _interop.check_float(x, name)
    if x.dim() == 0 or x.shape[-1] != width:
        raise ValueError(f"{name} must have shape (..., {width}); got {tuple(x.shape)}")
    if x.device != world.device:
        raise ValueError(f"{name} must be on the world's device ({world.device}); got {x.device}")
    if not torch.is_grad_enabled():
        x = x.detach()  # under no_grad a Function still sees requires_grad inputs as needing a gradient
    shape = x.shape[:-1]
    flat = x.reshape(1, 1, width) if x.dim() == 1 else x.reshape(x.shape[0], math.prod(x.shape[1:-1]), width)
    batch = flat.shape[0]
    if env_index is None:
        env = torch.zeros(batch, dtype=torch.int64, device=x.device)
    else:
        _interop.check_index(env_index, "env_index")
        if tuple(env_index.shape) != (batch,):
            raise ValueError(
                f"env_index must have shape ({batch},) (the leading dimension of {name}); "
                f"got {tuple(env_index.shape)}"
            )
        if env_index.device != x.device:
            raise ValueError(f"env_index must be on {x.device}, like {name}; got {env_index.device}")
        env = env_index.to(torch.int64)
    params = None
    if activation_distance is not None:
        eta = _scalar(activation_distance, "activation_distance", x)
        w = _scalar(weight, "weight", x)
        params = torch.stack([eta, w])
    return flat, shape, env, params


def _scalar(value, name: str, like: torch.Tensor) -> torch.Tensor:
    """A 0-d tensor on ``like``'s device in its compute dtype, without reading device values."""
    dtype = _interop.compute_dtype(like.dtype)
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a float or a 1-element tensor; got shape {tuple(value.shape)}")
        if not value.is_floating_point():
            raise TypeError(f"{name} must be a float tensor; got {value.dtype}")
        return value.detach().reshape(()).to(device=like.device, dtype=dtype)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float or a tensor; got {type(value).__name__}")
    if name == "activation_distance" and not value >= 0.0:
        raise ValueError(f"activation_distance must be >= 0; got {value}")
    # torch.full, not torch.tensor: no host-to-device copy (which would wait for the CUDA stream)
    return torch.full((), float(value), dtype=dtype, device=like.device)
