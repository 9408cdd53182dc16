"""Sphere-to-mesh collision cost (discrete and swept) and signed distance against a :class:`MeshWorld`.

Three custom ops, one Warp kernel each (``warpgeo._kernels.sdf``): ``warpgeo::sphere_mesh_cost``,
``warpgeo::swept_sphere_mesh_cost`` and ``warpgeo::signed_distance``. Each forward kernel also writes the
derivative of its value w.r.t. its input (only when a gradient is wanted), and the one registered backward
of each op scales it by the incoming gradient. The public Function classes :class:`SdfMesh` and
:class:`SweptSdfMesh` are the same ops with the same setup / backward pair.

Each op takes the world as the fields of :class:`~warpgeo.world.MeshWorldArgs`, by name.
"""

from __future__ import annotations

import math

import torch

from . import _interop
from .world import MeshWorld, all_cuboids, grid_tables_of, mesh_ids_of

__all__ = ["SdfMesh", "SweptSdfMesh", "signed_distance", "sphere_mesh_cost", "swept_sphere_mesh_cost"]

#: Below this distance from the surface (mesh units) the gradient direction is the face normal: the
#: direction to the closest point is undefined at distance 0 and rounding noise just above it.
_SURFACE_EPS = {torch.float32: 1.0e-5, torch.float64: 1.0e-9}
#: Cost of one mesh query in launch_rows' work units (~ a few microseconds): with it, a CPU launch is split
#: among threads from about a thousand sphere-mesh pairs up.
_QUERY_WORK = 256
#: What signed_distance returns for a point with no enabled mesh in its environment.
_NO_MESH_DISTANCE = float("inf")
#: The most interpolated spheres per interval of the swept cost: ``t = j / (S + 1)`` stays exact in float32
#: and the kernel's int32 step counter cannot overflow.
_MAX_SWEEP_STEPS = 2**24
#: Rows of one launch when a query too large for one Warp launch (int32 thread ids, int32 byte strides) is
#: split into several.
_MAX_LAUNCH_ROWS = 2**30
#: Spheres (points) one CPU thread of an SDF kernel handles, one after the other: a CPU launch calls the
#: kernel once per thread, and each call reloads its ~25 array arguments and recomputes the row index
#: (uniform scene of bench_sdf.py, 100k spheres, forward, medians of 8 alternating rounds in one process:
#: 15.6 ms at 1, 14.0 at 4, 13.4 at 16, 13.1 at 64).
#: On CUDA every sphere is a thread of its own.
_ROWS_PER_CPU_THREAD = 32
#: A tensor dimension or byte stride reaching this does not fit one Warp launch (a name of its own so that
#: tests can lower it).
_STRIDE_LIMIT = _interop.INT32_LIMIT

#: The ops' inputs, in order (each backward returns one entry per name).
_WORLD = ("world_id", "inv_poses", "bounds", "enabled", "sign")
_COST_INPUTS = ("spheres", "env_index", *_WORLD, "params", "max_distance", "compute_grad")
_SWEPT_INPUTS = ("spheres", "env_index", *_WORLD, "params", "sweep_steps", "compute_grad")
_DISTANCE_INPUTS = ("points", "env_index", *_WORLD, "compute_grad")


# --------------------------------------------------------------------------------------------------------
# checks shared by the three ops
# --------------------------------------------------------------------------------------------------------


def _check_tensor(name: str, t, dtype: torch.dtype, shape: tuple[int, ...], device: torch.device) -> None:
    """TypeError / ValueError naming ``name`` unless ``t`` is a ``dtype`` tensor of ``shape`` on ``device``."""
    if not isinstance(t, torch.Tensor) or t.dtype != dtype:
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{name} must be a {dtype} tensor; got {got}")
    if t.shape != shape:
        _interop.check_shape(t, name, shape)  # raises, with the expected and the actual shape
    if t.device != device:
        raise ValueError(f"{name} must be on the same device as the query ({device}); got {t.device}")


def _check_world(world_id, inv_poses, bounds, enabled, sign, *, dtype: torch.dtype, device) -> torch.Tensor:
    """Shape / dtype / device checks of the world fields (reads no tensor values); returns the world's mesh
    ids. ``dtype`` is the query's, ``device`` its device."""
    if isinstance(world_id, bool) or not isinstance(world_id, int):
        raise TypeError(
            f"world_id must be an int (MeshWorld.kernel_args().world_id); got {type(world_id).__name__}"
        )
    mesh_ids = mesh_ids_of(world_id)
    if mesh_ids.device != device:
        raise ValueError(f"the world lives on {mesh_ids.device}; the query is on {device}")
    envs, slots = mesh_ids.shape
    compute = _interop.compute_dtype(dtype)
    _check_tensor("inv_poses", inv_poses, compute, (envs, slots, 7), device)
    _check_tensor("bounds", bounds, torch.float32, (envs, slots, 2, 3), device)
    _check_tensor("enabled", enabled, torch.int32, (envs, slots), device)
    _check_tensor("sign", sign, torch.int32, (envs, slots), device)
    return mesh_ids


def _check_query(x, name: str, width: int, env_index, world: tuple, rank: int = 3) -> torch.Tensor:
    """Every shape / dtype / device check of a query (``world``: the five world fields in order); returns
    the world's mesh ids."""
    _interop.check_float(x, name)
    if x.dim() != rank or x.shape[-1] != width:
        dims = "(B, S, 4)" if rank == 3 and width == 4 else "(B, H, N, 4)" if width == 4 else "(B, S, 3)"
        raise ValueError(f"{name} must have shape {dims}; got {tuple(x.shape)}")
    device = x.device
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"warpgeo runs on 'cpu' and 'cuda' devices; got {name} on {device}")
    if env_index is not None:
        _interop.check_index(env_index, "env_index")
        if env_index.dim() != 1 or env_index.shape[0] not in (0, x.shape[0]):
            raise ValueError(
                f"env_index must have shape ({x.shape[0]},) (the leading dimension of {name}); "
                f"got {tuple(env_index.shape)}"
            )
        if env_index.device != device:
            raise ValueError(
                f"env_index must be on the same device as {name} ({device}); got {env_index.device}"
            )
    return _check_world(*world, dtype=x.dtype, device=device)


def _check_params(params, x) -> None:
    compute = _interop.compute_dtype(x.dtype)
    if not isinstance(params, torch.Tensor) or params.dtype != compute:
        raise TypeError(f"params must be a {compute} tensor (eta, weight)")
    _check_tensor("params", params, compute, (2,), x.device)


def _check_values(x, name: str, env_index, num_envs: int, params) -> None:
    """The checks that need tensor values, run inside the op: one device-to-host transfer for all.

    ``x`` is finite when its sum in float64 is (a NaN or inf propagates; float32 and half values cannot
    overflow a float64 sum; :func:`_interop.sum64`); only where the sum is not finite (a NaN/inf, or float64
    values summing past the float64 range) is every element tested. ``params`` is skipped when it is one of the parameter
    tensors :func:`_params` made from Python floats (checked on the host already)."""
    parts = [_interop.sum64(x)]
    if env_index is not None and env_index.numel() > 0:
        parts.extend(torch.aminmax(env_index))
    check_params = params is not None and _TRUSTED_PARAMS.get(id(params)) is not params
    if check_params:
        parts.extend((params.amin(), params.amax()))
    if x.device.type == "cpu":
        values = [v.item() for v in parts]
    else:
        values = torch.stack([v.to(torch.float64) for v in parts]).tolist()
    if not math.isfinite(values[0]) and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite: found NaN or inf")
    if env_index is not None and env_index.numel() > 0 and (values[1] < 0 or values[2] >= num_envs):
        raise IndexError(
            f"env_index must lie in [0, num_envs={num_envs}); got values {env_index.unique().tolist()}"
        )
    if check_params and not (values[-2] >= 0 and math.isfinite(values[-1])):
        raise ValueError(
            f"activation_distance and weight must be finite and >= 0; got {params.tolist()} (eta, weight)"
        )


def _check_sweep_steps(sweep_steps) -> int:
    sweep_steps = _interop.check_int(sweep_steps, "sweep_steps", minimum=0)
    if not isinstance(sweep_steps, torch.SymInt) and sweep_steps > _MAX_SWEEP_STEPS:
        raise ValueError(f"sweep_steps must be at most 2**24 = {_MAX_SWEEP_STEPS}; got {sweep_steps}")
    return sweep_steps


def _launch_blocks(
    kernel,
    name: str,
    grid: tuple[int, ...],
    *,
    device: torch.device,
    work_per_row: int,
    env_index: torch.Tensor,
    blocked: dict[str, torch.Tensor],
    **whole,
) -> None:
    """Launch a row kernel over ``grid = (B, *inner)``: on CUDA thread ``t`` handles row ``t`` of the flattened
    grid, on the CPU rows ``t * _ROWS_PER_CPU_THREAD`` onwards (the kernel's ``rows_per_thread``).

    One launch when it fits Warp's int32 thread ids and byte strides (the usual case); otherwise blocks of
    the grid, each launched on slices (views) of the ``blocked`` tensors (whose leading dimensions are
    ``grid``; ``env_index`` is sliced along B): ranges of B where one B entry's rows fit, else one B entry
    at a time (its size-1 dimension's stride is not used, see ``_interop``) in chunks of the last grid
    dimension. A tensor whose stride along a middle dimension (a swept trajectory's time step) reaches 2**31
    bytes cannot be split so: ValueError naming ``name``.
    """
    limit = _STRIDE_LIMIT
    rows = math.prod(grid)
    per = _ROWS_PER_CPU_THREAD if device.type == "cpu" else 1

    def launch(count: int, env: torch.Tensor, tensors: dict[str, torch.Tensor]) -> None:
        _interop.launch_rows(
            kernel,
            -(-count // per),
            device=device,
            work_per_row=work_per_row * per,
            env_index=env,
            rows_per_thread=per,
            **tensors,
            **whole,
        )

    if rows <= _MAX_LAUNCH_ROWS and _interop.dense_below(blocked.values(), limit):  # the usual case
        launch(rows, env_index, blocked)
        return

    def too_big(dim: int) -> bool:
        return any(
            t.shape[dim] > 1 and (t.shape[dim] >= limit or t.stride(dim) * t.element_size() >= limit)
            for t in blocked.values()
            if t.numel() > 0
        )

    def run(b: slice, last: slice, count: int) -> None:
        index = (b, *[slice(None)] * (len(grid) - 2), last)
        sliced = {k: t[index] if t.numel() > 0 else t for k, t in blocked.items()}
        launch(count, env_index[b] if env_index.shape[0] > 0 else env_index, sliced)

    if rows < limit and rows <= _MAX_LAUNCH_ROWS and not any(too_big(d) for d in range(len(grid))):
        launch(rows, env_index, blocked)
        return
    for d in range(1, len(grid) - 1):
        if too_big(d):
            raise ValueError(
                f"{name} of shape {tuple(grid)} + (...): one entry of dimension {d} spans >= 2**31 bytes (with "
                "its gradient), beyond what a Warp launch addresses (int32 byte strides); split the last "
                "dimension into smaller calls"
            )
    batch, last = grid[0], grid[-1]
    per_b = rows // batch if batch else 0
    if not too_big(0) and not too_big(len(grid) - 1) and 0 < per_b <= _MAX_LAUNCH_ROWS:
        step = _MAX_LAUNCH_ROWS // per_b
        for b0 in range(0, batch, step):
            b1 = min(b0 + step, batch)
            run(slice(b0, b1), slice(None), (b1 - b0) * per_b)
        return
    inner = per_b // last if last else 0
    step = max(1, _MAX_LAUNCH_ROWS // max(inner, 1))
    for b in range(batch):
        for n0 in range(0, last, step):
            n1 = min(n0 + step, last)
            run(slice(b, b + 1), slice(n0, n1), inner * (n1 - n0))


def _table(world_id: int, name: str):
    """The SDF kernel table ``name`` (``SPHERE_MESH_COST``, ...) for the world ``world_id``: the one made for a
    world of cuboids (``<name>_CUBOIDS``) where every mesh is one (it compiles in a fraction of the general
    kernel's time), the general one otherwise."""
    return getattr(_interop.kernels("sdf"), f"{name}_CUBOIDS" if all_cuboids(world_id) else name)


def _world_kernel_args(world_id: int, mesh_ids, inv_poses, bounds, enabled, sign) -> dict:
    """The world's kernel parameters by name: its fields, its mesh ids and its distance-grid tables."""
    return {
        "mesh_ids": mesh_ids,
        "inv_poses": inv_poses,
        "bounds": bounds,
        "enabled": enabled,
        "sign": sign,
        **grid_tables_of(world_id),
    }


#: Per device, the empty int64 tensor the kernels read as "environment 0 everywhere" (never written).
_NO_ENV: dict[torch.device, torch.Tensor] = {}


def _env(env_index: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """The kernels' ``env_index``: int64, empty for "environment 0 everywhere"."""
    if env_index is None:
        empty = _NO_ENV.get(like.device)
        if empty is None:
            empty = _NO_ENV[like.device] = like.new_empty(0, dtype=torch.int64)
        return empty
    return env_index.to(torch.int64)


def _grad_buffer(work: torch.Tensor, compute_grad: bool, *shape: int) -> torch.Tensor:
    """A fresh gradient tensor per call (nothing a second forward could overwrite), or an empty one."""
    if compute_grad:
        return torch.empty((*work.shape[:-1], *shape, work.shape[-1]), dtype=work.dtype, device=work.device)
    return work.new_empty(0, *([0] * (work.dim() - 2)), *shape, work.shape[-1])


# --------------------------------------------------------------------------------------------------------
# the custom ops (each one opaque node for torch.compile)
# --------------------------------------------------------------------------------------------------------


def _cost_impl(
    spheres: torch.Tensor,
    env_index: torch.Tensor | None,
    world_id: int,
    inv_poses: torch.Tensor,
    bounds: torch.Tensor,
    enabled: torch.Tensor,
    sign: torch.Tensor,
    params: torch.Tensor,
    max_distance: float,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """spheres (B, S, 4), env_index (B,) or None, the world's fields, params (2,) = (eta, weight) in the
    compute dtype -> cost (B, S) in spheres' dtype, grad (B, S, 4) = d cost / d spheres in the compute dtype
    ((0, 0, 4) unless compute_grad)."""
    world = (world_id, inv_poses, bounds, enabled, sign)
    mesh_ids = _check_query(spheres, "spheres", 4, env_index, world)
    _check_params(params, spheres)
    if not max_distance >= 0.0 or math.isinf(max_distance):
        raise ValueError(f"max_distance must be finite and >= 0; got {max_distance}")
    if _interop.checking_values(spheres.device):
        _check_values(spheres, "spheres", env_index, mesh_ids.shape[0], params)
    work = _interop.to_compute(spheres)
    cost = torch.empty(work.shape[:-1], dtype=work.dtype, device=work.device)
    grad = _grad_buffer(work, compute_grad)
    _launch_blocks(
        _interop.overload(_table(world_id, "SPHERE_MESH_COST"), work.dtype),
        "spheres",
        work.shape[:-1],
        device=work.device,
        work_per_row=_QUERY_WORK * mesh_ids.shape[1],
        env_index=_env(env_index, work),
        blocked={"spheres": work, "cost": cost, "grad": grad},
        params=params,
        extra_search=float(max_distance),
        surface_eps=_SURFACE_EPS[work.dtype],
        compute_grad=int(compute_grad),
        **_world_kernel_args(world_id, mesh_ids, inv_poses, bounds, enabled, sign),
    )
    return cost.to(spheres.dtype), grad


_cost_op = torch.library.custom_op("warpgeo::sphere_mesh_cost", _cost_impl, mutates_args=())


@_cost_op.register_fake
def _(spheres, env_index, world_id, inv_poses, bounds, enabled, sign, params, max_distance, compute_grad):
    return spheres.new_empty(spheres.shape[:-1]), _fake_grad(spheres, compute_grad)


def _swept_impl(
    spheres: torch.Tensor,
    env_index: torch.Tensor | None,
    world_id: int,
    inv_poses: torch.Tensor,
    bounds: torch.Tensor,
    enabled: torch.Tensor,
    sign: torch.Tensor,
    params: torch.Tensor,
    sweep_steps: int,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """spheres (B, H, N, 4), env_index (B,) or None, the world's fields, params (2,) -> cost (B, H, N) in
    spheres' dtype, grad (B, H, N, 2, 4) in the compute dtype: d cost[h] / d spheres[h] and
    d cost[h] / d spheres[h + 1] ((0, 0, 0, 2, 4) unless compute_grad)."""
    world = (world_id, inv_poses, bounds, enabled, sign)
    mesh_ids = _check_query(spheres, "spheres", 4, env_index, world, rank=4)
    _check_params(params, spheres)
    _check_sweep_steps(sweep_steps)
    if _interop.checking_values(spheres.device):
        _check_values(spheres, "spheres", env_index, mesh_ids.shape[0], params)
    work = _interop.to_compute(spheres)
    cost = torch.empty(work.shape[:-1], dtype=work.dtype, device=work.device)
    grad = _grad_buffer(work, compute_grad, 2)
    _launch_blocks(
        _interop.overload(_table(world_id, "SWEPT_SPHERE_MESH_COST"), work.dtype),
        "spheres",
        work.shape[:-1],
        device=work.device,
        work_per_row=_QUERY_WORK * mesh_ids.shape[1] * (sweep_steps + 1),
        env_index=_env(env_index, work),
        blocked={"spheres": work, "cost": cost, "grad_here": grad[..., 0, :], "grad_next": grad[..., 1, :]},
        params=params,
        sweep_steps=sweep_steps,
        surface_eps=_SURFACE_EPS[work.dtype],
        compute_grad=int(compute_grad),
        **_world_kernel_args(world_id, mesh_ids, inv_poses, bounds, enabled, sign),
    )
    return cost.to(spheres.dtype), grad


_swept_op = torch.library.custom_op("warpgeo::swept_sphere_mesh_cost", _swept_impl, mutates_args=())


@_swept_op.register_fake
def _(spheres, env_index, world_id, inv_poses, bounds, enabled, sign, params, sweep_steps, compute_grad):
    return spheres.new_empty(spheres.shape[:-1]), _fake_grad(spheres, compute_grad, 2)


def _distance_impl(
    points: torch.Tensor,
    env_index: torch.Tensor | None,
    world_id: int,
    inv_poses: torch.Tensor,
    bounds: torch.Tensor,
    enabled: torch.Tensor,
    sign: torch.Tensor,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """points (B, S, 3), env_index (B,) or None, the world's fields -> distance (B, S) in points' dtype,
    grad (B, S, 3) in the compute dtype ((0, 0, 3) unless compute_grad)."""
    world = (world_id, inv_poses, bounds, enabled, sign)
    mesh_ids = _check_query(points, "points", 3, env_index, world)
    if _interop.checking_values(points.device):
        _check_values(points, "points", env_index, mesh_ids.shape[0], None)
    work = _interop.to_compute(points)
    dist = torch.empty(work.shape[:-1], dtype=work.dtype, device=work.device)
    grad = _grad_buffer(work, compute_grad)
    _launch_blocks(
        _interop.overload(_table(world_id, "SIGNED_DISTANCE"), work.dtype),
        "points",
        work.shape[:-1],
        device=work.device,
        work_per_row=_QUERY_WORK * mesh_ids.shape[1],
        env_index=_env(env_index, work),
        blocked={"points": work, "dist": dist, "grad": grad},
        surface_eps=_SURFACE_EPS[work.dtype],
        far=_NO_MESH_DISTANCE,
        compute_grad=int(compute_grad),
        **_world_kernel_args(world_id, mesh_ids, inv_poses, bounds, enabled, sign),
    )
    return dist.to(points.dtype), grad


_distance_op = torch.library.custom_op("warpgeo::signed_distance", _distance_impl, mutates_args=())


@_distance_op.register_fake
def _(points, env_index, world_id, inv_poses, bounds, enabled, sign, compute_grad):
    return points.new_empty(points.shape[:-1]), _fake_grad(points, compute_grad)


def _fake_grad(x: torch.Tensor, compute_grad: bool, *shape: int) -> torch.Tensor:
    dtype = _interop.compute_dtype(x.dtype)
    lead = x.shape[:-1] if compute_grad else (0,) * (x.dim() - 1)
    return x.new_empty(*lead, *shape, x.shape[-1], dtype=dtype)


# --------------------------------------------------------------------------------------------------------
# autograd: one setup / backward pair per op, registered on the op and reused by its Function class
# --------------------------------------------------------------------------------------------------------


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
        return _interop.grads(_COST_INPUTS)
    grad = _kernel_grad(ctx, "sphere_mesh_cost")
    return _interop.grads(_COST_INPUTS, spheres=_interop.scale_rows(grad_cost, grad).to(ctx.dtype))


def _backward_distance(ctx, grad_dist, _grad_grad):
    if grad_dist is None or not ctx.needs_input_grad[0]:
        return _interop.grads(_DISTANCE_INPUTS)
    grad = _kernel_grad(ctx, "signed_distance")
    return _interop.grads(_DISTANCE_INPUTS, points=_interop.scale_rows(grad_dist, grad).to(ctx.dtype))


def _backward_swept(ctx, grad_cost, _grad_grad):
    """Step h's cost depends on spheres h (``grad[..., 0, :]``) and h + 1 (``grad[..., 1, :]``)."""
    if grad_cost is None or not ctx.needs_input_grad[0]:
        return _interop.grads(_SWEPT_INPUTS)
    grad = _kernel_grad(ctx, "swept_sphere_mesh_cost")
    g = grad_cost.to(grad.dtype)[..., None]
    spheres = g * grad[..., 0, :]
    spheres[:, 1:] += g[:, :-1] * grad[:, :-1, :, 1, :]
    return _interop.grads(_SWEPT_INPUTS, spheres=spheres.to(ctx.dtype))


_cost_op.register_autograd(_backward_cost, setup_context=_setup)
_swept_op.register_autograd(_backward_swept, setup_context=_setup)
_distance_op.register_autograd(_backward_distance, setup_context=_setup)


class SdfMesh(torch.autograd.Function):
    """Sphere-mesh collision cost as an autograd Function (cuRobo's ``SdfMeshWarpPy``, fixed).

    ``apply`` is ``torch.ops.warpgeo.sphere_mesh_cost``, with the same backward. Prefer
    :func:`sphere_mesh_cost`, which takes any ``(..., 4)`` shape, floats for the parameters and a world:

    ``apply(spheres (B, S, 4), env_index (B,) | None, world_id, inv_poses, bounds, enabled, sign,
    params (2,), max_distance: float, compute_grad: bool)`` -> ``(cost (B, S), d cost / d spheres)``, where
    the world's fields are ``world.kernel_args(spheres.dtype)`` and ``params = (activation_distance,
    weight)`` in the compute dtype (float32, or float64 for float64 spheres).
    """

    @staticmethod
    def forward(ctx, *inputs):
        output = _cost_impl(*inputs)
        _setup(ctx, inputs, output)
        return output

    backward = staticmethod(_backward_cost)


class SweptSdfMesh(torch.autograd.Function):
    """Swept sphere-mesh cost over a trajectory as an autograd Function.

    ``apply`` is ``torch.ops.warpgeo.swept_sphere_mesh_cost``, with the same backward. Prefer
    :func:`swept_sphere_mesh_cost`:

    ``apply(spheres (B, H, N, 4), env_index (B,) | None, world_id, inv_poses, bounds, enabled, sign,
    params (2,), sweep_steps: int, compute_grad: bool)`` -> ``(cost (B, H, N), grad (B, H, N, 2, 4))``.
    """

    @staticmethod
    def forward(ctx, *inputs):
        output = _swept_impl(*inputs)
        _setup(ctx, inputs, output)
        return output

    backward = staticmethod(_backward_swept)


class _SignedDistance(torch.autograd.Function):
    """``torch.ops.warpgeo.signed_distance`` as a Function (the eager path of :func:`signed_distance`)."""

    @staticmethod
    def forward(ctx, *inputs):
        output = _distance_impl(*inputs)
        _setup(ctx, inputs, output)
        return output

    backward = staticmethod(_backward_distance)


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
    flat, env, params, compute_grad = _prepare(
        spheres, world, 4, "spheres", env_index, activation_distance, weight
    )
    if max_distance is None:
        max_distance = 0.0
    if isinstance(max_distance, bool) or not isinstance(max_distance, (int, float)):
        raise TypeError(f"max_distance must be a float or None; got {type(max_distance).__name__}")
    if not max_distance >= 0.0 or math.isinf(max_distance):
        raise ValueError(f"max_distance must be finite and >= 0; got {max_distance}")
    cost, _ = _interop.call(
        _cost_op,
        SdfMesh,
        _cost_impl,
        _COST_INPUTS,
        compute_grad,
        spheres=flat,
        env_index=env,
        **world.kernel_args(flat.dtype)._asdict(),
        params=params,
        max_distance=float(max_distance),
        compute_grad=compute_grad,
    )
    return cost.view(spheres.shape[:-1])


def swept_sphere_mesh_cost(
    spheres: torch.Tensor,
    world: MeshWorld,
    *,
    sweep_steps: int = 4,
    activation_distance: float | torch.Tensor = 0.0,
    weight: float | torch.Tensor = 1.0,
    env_index: torch.Tensor | None = None,
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
    sweep_steps = _check_sweep_steps(sweep_steps)
    traj, env, params, compute_grad = _prepare(
        spheres, world, 4, "spheres", env_index, activation_distance, weight, rank=4
    )
    cost, _ = _interop.call(
        _swept_op,
        SweptSdfMesh,
        _swept_impl,
        _SWEPT_INPUTS,
        compute_grad,
        spheres=traj,
        env_index=env,
        **world.kernel_args(traj.dtype)._asdict(),
        params=params,
        sweep_steps=sweep_steps,
        compute_grad=compute_grad,
    )
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
    flat, env, _, compute_grad = _prepare(points, world, 3, "points", env_index, None, None)
    dist, _ = _interop.call(
        _distance_op,
        _SignedDistance,
        _distance_impl,
        _DISTANCE_INPUTS,
        compute_grad,
        points=flat,
        env_index=env,
        **world.kernel_args(flat.dtype)._asdict(),
        compute_grad=compute_grad,
    )
    return dist.view(points.shape[:-1])


# --------------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------------


def _prepare(
    x, world, width: int, name: str, env_index, activation_distance, weight, rank: int | None = None
):
    """Validate; return ``(x as (B, S, width) or as given for rank 4, env_index or None, params or None,
    compute_grad)``."""
    if not isinstance(world, MeshWorld):
        raise TypeError(f"world must be a warpgeo.MeshWorld; got {type(world).__name__}")
    _interop.check_float(x, name)
    shape = x.shape
    if not shape or shape[-1] != width:
        raise ValueError(f"{name} must have shape (..., {width}); got {tuple(shape)}")
    if x.device != world.device:
        raise ValueError(f"{name} must be on the world's device ({world.device}); got {x.device}")
    compute_grad = x.requires_grad and torch.is_grad_enabled()
    if rank is None and len(shape) != 3:
        x = x.reshape(1, 1, width) if len(shape) == 1 else x.reshape(shape[0], math.prod(shape[1:-1]), width)
    if env_index is not None:
        _interop.check_index(env_index, "env_index")
        batch = x.shape[0]
        if tuple(env_index.shape) != (batch,):
            raise ValueError(
                f"env_index must have shape ({batch},) (the leading dimension of {name}); "
                f"got {tuple(env_index.shape)}"
            )
        if env_index.device != x.device:
            raise ValueError(f"env_index must be on {x.device}, like {name}; got {env_index.device}")
    params = None
    if activation_distance is not None:
        params = _params(activation_distance, weight, x)
    return x, env_index, params, compute_grad


#: ``(eta, weight)`` tensors made from Python floats, by ``(eta, weight, dtype, device)``: a trajectory
#: optimiser passes the same floats call after call. Read-only for the kernels; never handed to the user.
_PARAMS: dict[tuple, torch.Tensor] = {}
#: ``id -> tensor`` of the tensors in ``_PARAMS``: their values were checked on the host when made.
_TRUSTED_PARAMS: dict[int, torch.Tensor] = {}
#: Distinct parameter pairs kept (later pairs get a fresh tensor per call).
_MAX_PARAMS = 256


def _params(activation_distance, weight, like: torch.Tensor) -> torch.Tensor:
    """``(eta, weight)`` as a (2,) tensor on ``like``'s device in its compute dtype, without reading device
    values (floats are checked here; tensor values by the op's value checks)."""
    dtype = _interop.compute_dtype(like.dtype)
    if type(activation_distance) in (float, int) and type(weight) in (float, int):  # the usual case: cached
        key = (activation_distance, weight, dtype, like.device)
        found = _PARAMS.get(key)
        if found is not None:
            return found
    values = []
    for name, value in (("activation_distance", activation_distance), ("weight", weight)):
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(
                    f"{name} must be a float or a 1-element tensor; got shape {tuple(value.shape)}"
                )
            if not value.is_floating_point():
                raise TypeError(f"{name} must be a float tensor; got {value.dtype}")
            if value.device != like.device:
                raise ValueError(f"{name} must be on {like.device}, like the query; got {value.device}")
            values.append(value.detach().reshape(1).to(dtype))
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a float or a tensor; got {type(value).__name__}")
        elif not (value >= 0.0 and math.isfinite(value)):
            raise ValueError(f"{name} must be finite and >= 0; got {value}")
        elif value > torch.finfo(dtype).max:
            raise ValueError(
                f"{name} must be at most {torch.finfo(dtype).max:.4g} (the {dtype} range); got {value}"
            )
        else:
            values.append(float(value))
    if any(isinstance(v, torch.Tensor) for v in values):
        return torch.cat(
            [
                v if isinstance(v, torch.Tensor) else torch.full((1,), v, dtype=dtype, device=like.device)
                for v in values
            ]
        )
    # torch.full on the device, not torch.tensor: no host-to-device copy (capturable in a CUDA graph)
    out = torch.full((2,), values[0], dtype=dtype, device=like.device)
    if values[1] != values[0]:
        out[1] = values[1]
    if like.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return out  # memory of the graph being captured: not to be kept beyond it
    if len(_PARAMS) >= _MAX_PARAMS:
        # never evicted: a CUDA graph captured earlier may read a cached tensor on every replay
        return out
    _PARAMS[(values[0], values[1], dtype, like.device)] = out
    _TRUSTED_PARAMS[id(out)] = out
    return out
