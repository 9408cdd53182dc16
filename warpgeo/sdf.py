"""Sphere-to-mesh collision cost (discrete and swept) and signed distance against a :class:`MeshWorld`.

Three custom ops, one Warp kernel each (``warpgeo._kernels.sdf``), declared with :class:`~warpgeo._op.Op`:
``warpgeo::sphere_mesh_cost``, ``warpgeo::swept_sphere_mesh_cost`` and ``warpgeo::signed_distance``. Each
takes the world as declared inputs: ``world``, the list of the world's tensors (``MeshWorld.kernel_args``;
order and shapes in ``warpgeo.world.WORLD_FIELDS``), which the kernels read as one Warp struct, and
``all_cuboids`` (every mesh a cuboid: the kernels made for that run). Each forward kernel also writes the
derivative of its value w.r.t. its input (only when a gradient is wanted), and the one registered backward
of each op scales it by the incoming gradient. The public Function classes :class:`SdfMesh` and
:class:`SweptSdfMesh` are the same ops with the same setup / backward pair.

The file reads: checks, the three declarations (check, impl, fake), backward, public functions.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any, NamedTuple

import torch

from . import _launch, _warp, checks
from ._kernels import sdf as kernels
from ._kernels import world as world_kernels
from ._kernels._table import KernelTable
from ._mesh_ids import check_mesh_ids, refuse_changed_mesh_ids
from ._op import Op
from .world import WORLD_FIELDS, MeshWorld

__all__ = ["SdfMesh", "SweptSdfMesh", "signed_distance", "sphere_mesh_cost", "swept_sphere_mesh_cost"]

#: Below this distance from the surface (mesh units) the gradient direction is the face normal: the
#: direction to the closest point is undefined at distance 0 and rounding noise just above it.
_SURFACE_EPS = {torch.float32: 1.0e-5, torch.float64: 1.0e-9}
#: Cost of one mesh query in launch_rows' work units (~ a few microseconds): with it, a CPU launch is split
#: among threads from 512 sphere-mesh pairs up (1,000 points against an 82k-face mesh on 2 cores: 15 ms on one
#: thread, 9 ms on two; below that, handing rows to another thread costs about what it saves).
_QUERY_WORK = 512
#: What signed_distance returns for a point with no enabled mesh in its environment.
_NO_MESH_DISTANCE = float("inf")
#: The most interpolated spheres per interval of the swept cost: ``t = j / (S + 1)`` stays exact in float32
#: and the kernel's int32 step counter cannot overflow.
_MAX_SWEEP_STEPS = 2**24
#: Spheres (points) one CPU thread of an SDF kernel handles, one after the other: a CPU launch calls the
#: kernel once per thread, and each call reloads its arguments and recomputes the row index (uniform scene
#: of bench_sdf.py, 100k spheres, forward, medians of 8 alternating rounds in one process: 15.6 ms at 1,
#: 14.0 at 4, 13.4 at 16, 13.1 at 64). On CUDA every sphere is a thread of its own.
_ROWS_PER_CPU_THREAD = 32
#: (compute dtype, all cuboids) -> the key of the kernel tables (``warpgeo._kernels.sdf.KEYS``).
_KEYS = {
    (torch.float32, False): ("float32", "meshes"),
    (torch.float32, True): ("float32", "cuboids"),
    (torch.float64, False): ("float64", "meshes"),
    (torch.float64, True): ("float64", "cuboids"),
}
#: The world's fields, in order, with their dtype (None: the query's compute dtype) and shape rule.
_WORLD_SPEC = tuple((name, dtype, shape) for name, (dtype, shape) in WORLD_FIELDS.items())


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
    flat, compute_grad = _prepare(spheres, world, 4, "spheres")
    params = _params(activation_distance, weight, flat)
    max_distance = 0.0 if max_distance is None else _check_max_distance(max_distance)
    args = world.kernel_args(flat.dtype)
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
    traj, compute_grad = _prepare(spheres, world, 4, "spheres", reshape=False)
    params = _params(activation_distance, weight, traj)
    args = world.kernel_args(traj.dtype)
    cost, _ = _swept.call(
        spheres=traj,
        env_index=env_index,
        world=args.world,
        all_cuboids=args.all_cuboids,
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
    flat, compute_grad = _prepare(points, world, 3, "points")
    args = world.kernel_args(flat.dtype)
    dist, _ = _distance.call(
        points=flat,
        env_index=env_index,
        world=args.world,
        all_cuboids=args.all_cuboids,
        compute_grad=compute_grad,
    )
    return _shaped(dist, points.shape[:-1])


# --------------------------------------------------------------------------------------------------------
# checks (shapes, dtypes, devices: no tensor values) shared by the three ops
# --------------------------------------------------------------------------------------------------------


class _Verified(NamedTuple):
    """A world list that passed :func:`_check_world` (weakly: a cache entry pins no memory), and its struct
    per kernel key."""

    items: tuple  # weak references to its tensors, as checked
    ptrs: tuple  # their data pointers, as checked
    compute: torch.dtype
    device: torch.device
    structs: dict  # table key -> the world struct (``_launch.struct``) of these tensors


#: ``id(world list) -> _Verified``: a world's own lists come back call after call, so the full check of its
#: 17 tensors (~20 us) and the struct's build run once, and a call checks that the list holds the very
#: tensors it was checked with over the same memory (identity and data pointers, ~2 us; a list at a reused
#: id passes only with those same tensors, for which the entry is right). Whatever else a caller might
#: change in place (values, or a tensor's shape through ``.data =``) leaves the kernels reading the same
#: memory they were checked against; the mesh ids are vetted on every call (``check_mesh_ids``).
_VERIFIED: dict[int, _Verified] = {}
#: World lists kept (the oldest goes first).
_MAX_VERIFIED = 64
_VERIFIED_LOCK = threading.Lock()
#: Per thread, ``last``: the world list :func:`_check_world` just passed and its ``_VERIFIED`` entry (or
#: None), taken once by the launch of the same call (:func:`_world_struct`), which then does not look the
#: list up again (~2 us for 17 tensors). An op's check and its launch run on one thread, one right after the
#: other (``warpgeo._op``), and the list is held, so it is the very list just checked.
_CHECKED = threading.local()


def _verified(world: Any) -> _Verified | None:
    """The cache entry of ``world`` if it still holds the very tensors (over the same memory) it was checked
    with; None otherwise (fake / functional tensors are never cached)."""
    found = _VERIFIED.get(id(world))
    if (
        found is None
        or type(world) is not list
        or len(world) != len(found.items)
        or not all(ref() is t for ref, t in zip(found.items, world, strict=True))
        or tuple(map(torch.Tensor.data_ptr, world)) != found.ptrs
    ):
        return None
    return found


def _check_world(world, all_cuboids, dtype: torch.dtype, device: torch.device, name: str) -> None:
    """The world's tensors (``WORLD_FIELDS``, in order): dtypes, ranks, sizes (``E`` and ``M`` those of
    ``mesh_ids``), a dense last dimension, and the query's device (``dtype``: the query's)."""
    if type(all_cuboids) is not bool:
        raise TypeError(f"all_cuboids must be a bool; got {type(all_cuboids).__name__}")
    compute = _warp.compute_dtype(dtype)
    _CHECKED.last = None
    found = _verified(world)
    if found is not None and found.compute == compute and found.device == device:
        _CHECKED.last = (world, found)
        return
    _check_world_fully(world, compute, device, name)
    if type(world) is list and all(type(t) is torch.Tensor for t in world):
        entry = _Verified(
            tuple(map(weakref.ref, world)), tuple(t.data_ptr() for t in world), compute, device, {}
        )
        with _VERIFIED_LOCK:
            while len(_VERIFIED) >= _MAX_VERIFIED:
                del _VERIFIED[next(iter(_VERIFIED))]
            _VERIFIED[id(world)] = entry
        _CHECKED.last = (world, entry)


def _check_world_fully(world, compute: torch.dtype, device: torch.device, name: str) -> None:
    if not isinstance(world, (list, tuple)) or len(world) != len(_WORLD_SPEC):
        got = f"{len(world)} items" if isinstance(world, (list, tuple)) else type(world).__name__
        raise TypeError(
            f"world must be the list of the {len(_WORLD_SPEC)} tensors of MeshWorld.kernel_args(dtype).world; "
            f"got {got}"
        )
    mesh_ids = world[0]
    if isinstance(mesh_ids, torch.Tensor) and mesh_ids.device != device:
        raise ValueError(f"{name} must be on the world's device ({mesh_ids.device}); got {device}")
    if not isinstance(mesh_ids, torch.Tensor) or mesh_ids.dim() != 2:
        got = tuple(mesh_ids.shape) if isinstance(mesh_ids, torch.Tensor) else type(mesh_ids).__name__
        raise ValueError(f"world[0] (mesh_ids) must be an (E, M) tensor; got {got}")
    sizes = {"E": mesh_ids.shape[0], "M": mesh_ids.shape[1]}
    for (field, field_dtype, rule), t in zip(_WORLD_SPEC, world, strict=True):
        expected_dtype = field_dtype or compute
        if not isinstance(t, torch.Tensor) or t.dtype != expected_dtype:
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"world's {field} must be a {expected_dtype} tensor; got {got}")
        shape = t.shape
        if len(shape) != len(rule) or any(
            r is not None and shape[i] != sizes.get(r, r) for i, r in enumerate(rule)
        ):
            expected = ", ".join("*" if r is None else str(sizes.get(r, r)) for r in rule)
            raise ValueError(f"world's {field} must have shape ({expected}); got {tuple(shape)}")
        if t.device != device:
            raise ValueError(f"world's {field} must be on {device}, like the query; got {t.device}")
        if t.dim() > 1 and t.stride(-1) != 1 and shape[-1] > 1:
            raise ValueError(f"world's {field} must have a dense last dimension; got strides {t.stride()}")


def _check_query(x, name: str, width: int, rank: int, env_index, world, all_cuboids) -> None:
    """Every shape / dtype / device check of a query and its world."""
    checks.check_float(x, name)
    if x.dim() != rank or x.shape[-1] != width:
        dims = "(B, S, 4)" if rank == 3 and width == 4 else "(B, H, N, 4)" if width == 4 else "(B, S, 3)"
        raise ValueError(f"{name} must have shape {dims}; got {tuple(x.shape)}")
    device = x.device
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"warpgeo runs on 'cpu' and 'cuda' devices; got {name} on {device}")
    if env_index is not None:
        checks.check_index(env_index, "env_index")
        if env_index.dim() != 1 or env_index.shape[0] not in (0, x.shape[0]):
            raise ValueError(
                f"env_index must have shape ({x.shape[0]},) (the leading dimension of {name}); "
                f"got {tuple(env_index.shape)}"
            )
        if env_index.device != device:
            raise ValueError(
                f"env_index must be on the same device as {name} ({device}); got {env_index.device}"
            )
    _check_world(world, all_cuboids, x.dtype, device, name)


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
    _check_query(spheres, "spheres", 4, 3, env_index, world, all_cuboids)
    _check_params(params, spheres)
    _check_max_distance(max_distance)


def _check_max_distance(max_distance) -> float:
    """``max_distance`` as a float >= 0 (inf: no bound); TypeError / ValueError naming it."""
    if isinstance(max_distance, bool) or not isinstance(max_distance, (int, float)):
        raise TypeError(f"max_distance must be a float or None; got {type(max_distance).__name__}")
    value = _as_float(max_distance, "max_distance")
    if not value >= 0.0:
        raise ValueError(f"max_distance must be >= 0 (or inf / None: no bound); got {value}")
    return value


def _as_float(value: int | float, name: str) -> float:
    """A Python int or float as a float; an int beyond float64's range is a ValueError naming ``name``
    (not Python's OverflowError)."""
    try:
        return float(value)
    except OverflowError:
        digits = len(str(abs(value)))
        raise ValueError(
            f"{name} must be within the float64 range (|x| <= 1.798e308); got an int of {digits} digits"
        ) from None


def _check_swept(spheres, env_index, world, all_cuboids, params, sweep_steps, compute_grad) -> None:
    _check_query(spheres, "spheres", 4, 4, env_index, world, all_cuboids)
    _check_params(params, spheres)
    _check_sweep_steps(sweep_steps)


def _check_distance(points, env_index, world, all_cuboids, compute_grad) -> None:
    _check_query(points, "points", 3, 3, env_index, world, all_cuboids)


# --------------------------------------------------------------------------------------------------------
# value checks and the launch, shared by the three implementations
# --------------------------------------------------------------------------------------------------------


def _check_values(x, name: str, env_index, num_envs: int, params, ids_changed) -> None:
    """The checks that need tensor values, run inside the op: one device-to-host transfer for all.

    ``x`` is finite when its sum in float64 is (a NaN or inf propagates; float32 and half values cannot
    overflow a float64 sum; :func:`_warp.sum64`); only where the sum is not finite (a NaN/inf, or float64
    values summing past the float64 range) is every element tested. ``params`` is skipped when it is one of
    the parameter tensors :func:`_params` made from Python floats (checked on the host already).
    ``ids_changed``: None, or what ``check_mesh_ids`` left to be read here (a 0-d bool tensor)."""
    parts = [_warp.sum64(x)]
    check_env = env_index is not None and env_index.numel() > 0
    if check_env:
        parts.extend(torch.aminmax(env_index))
    check_params = params is not None and _TRUSTED_PARAMS.get(id(params)) is not params
    if check_params:
        parts.extend((params.amin(), params.amax()))
    if ids_changed is not None:
        parts.append(ids_changed)
    if x.device.type == "cpu":
        values = [v.item() for v in parts]
    else:
        values = torch.stack([v.to(torch.float64) for v in parts]).tolist()
    if ids_changed is not None and values.pop():
        refuse_changed_mesh_ids()
    if not math.isfinite(values[0]) and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} must be finite: found NaN or inf")
    if check_env and (values[1] < 0 or values[2] >= num_envs):
        raise IndexError(
            f"env_index must lie in [0, num_envs={num_envs}); got values {env_index.unique().tolist()}"
        )
    if check_params and not (values[-2] >= 0 and math.isfinite(values[-1])):
        raise ValueError(
            f"activation_distance and weight must be finite and >= 0; got {params.tolist()} (eta, weight)"
        )


def _prepare_launch(x, name: str, env_index, world, params) -> torch.Tensor:
    """Before any launch: the value checks (when on) and the world's mesh ids vetted (always: a forged id
    must never reach Warp's mesh queries, see ``warpgeo._mesh_ids``); ``x`` in its compute
    precision."""
    checking = checks.checking_values(x.device)
    ids_changed = check_mesh_ids(world[0], by_value=checking)
    if checking:
        _check_values(x, name, env_index, world[0].shape[0], params, ids_changed)
    return _warp.to_compute(x)


def _launch_query(
    table: KernelTable,
    work: torch.Tensor,
    env_index: torch.Tensor | None,
    world: list[torch.Tensor],
    all_cuboids: bool,
    sliced: dict[str, torch.Tensor],
    *,
    work_per_row: int,
    **args,
) -> None:
    """Launch the one kernel of ``table`` (``kernels.SPHERE_MESH_COST``, ...) over the rows of ``work`` (the
    query in its compute precision; ``sliced``: the tensors with its rows, itself first), with ``env_index``
    per batch entry and the world as its struct: the closed-form kernels where every entry is a closed form."""
    key = _KEYS[work.dtype, all_cuboids]
    (kernel,) = vars(table[key]).values()
    per = 1 if _warp.cuda_algorithms(work.device) else _ROWS_PER_CPU_THREAD
    _launch.launch_blocks(
        kernel,
        work.shape[:-1],
        device=work.device,
        sliced=sliced,
        per_batch={"env_index": _env(env_index, work)},
        rows_per_thread=per,
        work_per_row=work_per_row * world[0].shape[1],
        what=next(iter(sliced)),
        world=_world_struct(key, world),
        per_thread=per,
        surface_eps=_SURFACE_EPS[work.dtype],
        **args,
    )


def _world_struct(key: tuple[str, str], world: list[torch.Tensor]) -> Any:
    """The kernels' world struct of table key ``key`` (``world_kernels.WORLD[key]``) over the world's tensors, by
    field name (built once per checked world list, see ``_VERIFIED``)."""
    last = getattr(_CHECKED, "last", None)
    _CHECKED.last = None
    found = last[1] if last is not None and last[0] is world else _verified(world)
    if found is not None:
        instance = found.structs.get(key)
        if instance is None:
            instance = found.structs[key] = _world_struct_of(key, world)
        return instance
    return _world_struct_of(key, world)


def _world_struct_of(key: tuple[str, str], world: list[torch.Tensor]) -> Any:
    return _launch.struct(world_kernels.WORLD[key], **dict(zip(world_kernels.WORLD_FIELDS, world, strict=True)))


#: Per device, the empty int64 tensor the kernels read as "environment 0 everywhere" (never written).
_NO_ENV: dict[torch.device, torch.Tensor] = {}


def _env(env_index: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """The kernels' ``env_index``: int64, empty for "environment 0 everywhere"."""
    if env_index is None:
        empty = _NO_ENV.get(like.device)
        if empty is None:
            empty = _NO_ENV[like.device] = _launch.constant(like.new_empty(0, dtype=torch.int64))
        return empty
    return env_index.to(torch.int64)


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


# --------------------------------------------------------------------------------------------------------
# warpgeo::sphere_mesh_cost
# --------------------------------------------------------------------------------------------------------


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
    work = _prepare_launch(spheres, "spheres", env_index, world, params)
    cost = torch.empty(work.shape[:-1], dtype=work.dtype, device=work.device)
    grad = _grad_buffer(work, compute_grad)
    _launch_query(
        kernels.SPHERE_MESH_COST,
        work,
        env_index,
        world,
        all_cuboids,
        {"spheres": work, "cost": cost, "grad": grad},
        work_per_row=_QUERY_WORK,
        params=params,
        # a speed hint only: inf ("no bound") searches as None does (any radius >= r + eta is exact)
        extra_search=0.0 if math.isinf(max_distance) else float(max_distance),
        compute_grad=int(compute_grad),
    )
    return _as_dtype(cost, spheres.dtype), grad


def _cost_fake(spheres, env_index, world, all_cuboids, params, max_distance, compute_grad):
    return spheres.new_empty(spheres.shape[:-1]), _fake_grad(spheres, compute_grad)


# --------------------------------------------------------------------------------------------------------
# warpgeo::swept_sphere_mesh_cost
# --------------------------------------------------------------------------------------------------------


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
    work = _prepare_launch(spheres, "spheres", env_index, world, params)
    cost = torch.empty(work.shape[:-1], dtype=work.dtype, device=work.device)
    grad = _grad_buffer(work, compute_grad, 2)
    _launch_query(
        kernels.SWEPT_SPHERE_MESH_COST,
        work,
        env_index,
        world,
        all_cuboids,
        {"spheres": work, "cost": cost, "grad_here": grad[..., 0, :], "grad_next": grad[..., 1, :]},
        work_per_row=_QUERY_WORK * (sweep_steps + 1),
        params=params,
        sweep_steps=sweep_steps,
        compute_grad=int(compute_grad),
    )
    return _as_dtype(cost, spheres.dtype), grad


def _swept_fake(spheres, env_index, world, all_cuboids, params, sweep_steps, compute_grad):
    return spheres.new_empty(spheres.shape[:-1]), _fake_grad(spheres, compute_grad, 2)


# --------------------------------------------------------------------------------------------------------
# warpgeo::signed_distance
# --------------------------------------------------------------------------------------------------------


def _distance_impl(
    points: torch.Tensor,
    env_index: torch.Tensor | None,
    world: list[torch.Tensor],
    all_cuboids: bool,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """points (B, S, 3), env_index (B,) or None, the world's tensors -> distance (B, S) in points' dtype,
    grad (B, S, 3) in the compute dtype ((0, 0, 3) unless compute_grad)."""
    work = _prepare_launch(points, "points", env_index, world, None)
    dist = torch.empty(work.shape[:-1], dtype=work.dtype, device=work.device)
    grad = _grad_buffer(work, compute_grad)
    _launch_query(
        kernels.SIGNED_DISTANCE,
        work,
        env_index,
        world,
        all_cuboids,
        {"points": work, "dist": dist, "grad": grad},
        work_per_row=_QUERY_WORK,
        far=_NO_MESH_DISTANCE,
        compute_grad=int(compute_grad),
    )
    return _as_dtype(dist, points.dtype), grad


def _distance_fake(points, env_index, world, all_cuboids, compute_grad):
    return points.new_empty(points.shape[:-1]), _fake_grad(points, compute_grad)


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


# --------------------------------------------------------------------------------------------------------
# what the public functions prepare for the ops
# --------------------------------------------------------------------------------------------------------


def _prepare(x, world, width: int, name: str, *, reshape: bool = True) -> tuple[torch.Tensor, bool]:
    """``(x as (B, S, width) (as given unless reshape), compute_grad)``; the checks the op cannot make (the
    world's type, the trailing width before the reshape). The op checks the rest, once."""
    if not isinstance(world, MeshWorld):
        raise TypeError(f"world must be a warpgeo.MeshWorld; got {type(world).__name__}")
    checks.check_float(x, name)
    shape = x.shape
    if not shape or shape[-1] != width:
        raise ValueError(f"{name} must have shape (..., {width}); got {tuple(shape)}")
    compute_grad = x.requires_grad and torch.is_grad_enabled()
    if reshape and len(shape) != 3:
        x = x.reshape(1, 1, width) if len(shape) == 1 else x.reshape(shape[0], math.prod(shape[1:-1]), width)
    return x, compute_grad


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
    dtype = _warp.compute_dtype(like.dtype)
    cached = type(activation_distance) in (float, int) and type(weight) in (float, int)
    if cached and not torch.compiler.is_compiling():  # the usual case, eager: cached
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
        elif not (value >= 0.0 and math.isfinite(_as_float(value, name))):
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
    if torch.compiler.is_compiling():
        return out  # traced: a constant of the graph (dynamo cannot trace the cache's ids)
    if like.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return out  # memory of the graph being captured: not to be kept beyond it
    if len(_PARAMS) >= _MAX_PARAMS:
        # never evicted: a CUDA graph captured earlier may read a cached tensor on every replay
        return out
    _PARAMS[(values[0], values[1], dtype, like.device)] = out
    _TRUSTED_PARAMS[id(out)] = out
    return out
