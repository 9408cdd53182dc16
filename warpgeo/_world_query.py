"""What every world op shares, between its public function and its kernel: the checks of a query and its
world (shapes, dtypes, devices: :func:`check_query`; the world's tensors against ``WORLD_FIELDS``, once per
world list: :func:`check_world`), the value checks and the vetting of the mesh ids before a launch
(:func:`prepare_launch`), and the launch itself (:func:`launch_query`: the kernel of the table key of the
query's precision and the world's kind, over the query's rows, the world as one struct). A world op
(``warpgeo.sdf``; see CONTRIBUTING, "Adding a world op") is its checks, its kernel's outputs and these."""

from __future__ import annotations

import math
import weakref
from typing import Any, NamedTuple

import torch

from . import _launch, _threads, _warp, checks
from ._kernels import world as world_kernels
from ._kernels._table import KernelTable
from ._mesh_ids import check_mesh_ids, refuse_changed_mesh_ids
from .world import WORLD_FIELDS, MeshWorld

#: Below this distance from the surface (mesh units) the gradient direction is the face normal: the
#: direction to the closest point is undefined at distance 0 and rounding noise just above it.
SURFACE_EPS = {torch.float32: 1.0e-5, torch.float64: 1.0e-9}


#: Cost of one mesh query in launch_rows' work units (~ a few microseconds): with it, a CPU launch is split
#: among threads from 512 sphere-mesh pairs up (1,000 points against an 82k-face mesh on 2 cores: 15 ms on one
#: thread, 9 ms on two; below that, handing rows to another thread costs about what it saves).
QUERY_WORK = 512


#: Spheres (points) one CPU thread of an SDF kernel handles, one after the other: a CPU launch calls the
#: kernel once per thread, and each call reloads its arguments and recomputes the row index (uniform scene
#: of bench_sdf.py, 100k spheres, forward, medians of 8 alternating rounds in one process: 15.6 ms at 1,
#: 14.0 at 4, 13.4 at 16, 13.1 at 64). On CUDA every sphere is a thread of its own.
ROWS_PER_CPU_THREAD = 32


#: A world's kind in the kernel tables' keys, by ``all_cuboids``: a world of closed forms only runs the
#: kernels compiled for it (``warpgeo._kernels.world.KEYS``).
WORLD_KINDS = {False: "meshes", True: "cuboids"}


#: The world's fields, in order, with their dtype (None: the query's compute dtype) and shape rule.
_WORLD_SPEC = tuple((name, dtype, shape) for name, (dtype, shape) in WORLD_FIELDS.items())


class _Verified(NamedTuple):
    """A world list that passed :func:`check_world` (weakly: a cache entry pins no memory), and its struct
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


_VERIFIED_LOCK = _threads.ForkSafeLock()


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


def check_world(world, all_cuboids, dtype: torch.dtype, device: torch.device, name: str) -> None:
    """The world's tensors (``WORLD_FIELDS``, in order): dtypes, ranks, sizes (``E`` and ``M`` those of
    ``mesh_ids``), a dense last dimension, and the query's device (``dtype``: the query's)."""
    if type(all_cuboids) is not bool:
        raise TypeError(f"all_cuboids must be a bool; got {type(all_cuboids).__name__}")
    compute = _warp.compute_dtype(dtype)
    found = _verified(world)
    if found is not None and found.compute == compute and found.device == device:
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


def check_query(x, name: str, width: int, rank: int, env_index, world, all_cuboids) -> None:
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
    check_world(world, all_cuboids, x.dtype, device, name)


def as_float(value: int | float, name: str) -> float:
    """A Python int or float as a float; an int beyond float64's range is a ValueError naming ``name``
    (not Python's OverflowError)."""
    try:
        return float(value)
    except OverflowError:
        digits = len(str(abs(value)))
        raise ValueError(
            f"{name} must be within the float64 range (|x| <= 1.798e308); got an int of {digits} digits"
        ) from None


def check_values(x, name: str, env_index, num_envs: int, params, ids_changed, extra=()) -> None:
    """The checks that need tensor values, run inside the op: one device-to-host transfer for all.

    ``x`` is finite when its sum in float64 is (a NaN or inf propagates; float32 and half values cannot
    overflow a float64 sum; :func:`_warp.sum64`); only where the sum is not finite (a NaN/inf, or float64
    values summing past the float64 range) is every element tested. ``params`` is skipped when it is one of
    the parameter tensors :func:`params_tensor` made from Python floats (checked on the host already).
    ``ids_changed``: None, or what ``check_mesh_ids`` left to be read here (a 0-d bool tensor). ``extra``: an
    op's own checks, ``(0-d tensor, check)`` pairs: each tensor is read in the same transfer and its value
    handed to ``check`` (which raises), after the checks above."""
    parts = [_warp.sum64(x)]
    check_env = env_index is not None and env_index.numel() > 0
    if check_env:
        parts.extend(torch.aminmax(env_index))
    check_params = params is not None and _TRUSTED_PARAMS.get(id(params)) is not params
    if check_params:
        parts.extend((params.amin(), params.amax()))
    if ids_changed is not None:
        parts.append(ids_changed)
    parts.extend(value for value, _ in extra)
    if x.device.type == "cpu":
        values = [v.item() for v in parts]
    else:
        values = torch.stack([v.to(torch.float64) for v in parts]).tolist()
    own = values[len(values) - len(extra) :]
    del values[len(values) - len(extra) :]
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
    for (_, check), value in zip(extra, own, strict=True):
        check(value)


def prepare_launch(x, name: str, env_index, world, params, extra=None) -> torch.Tensor:
    """Before any launch: the value checks (when on) and the world's mesh ids vetted (always: a forged id
    must never reach Warp's mesh queries, see ``warpgeo._mesh_ids``); ``x`` in its compute
    precision. ``extra``: None, or a callable that returns the op's own value checks (``extra`` of
    :func:`check_values`: read in the same transfer), called only when value checks are on."""
    checking = checks.checking_values(x.device)
    ids_changed = check_mesh_ids(world[0], by_value=checking)
    if checking:
        own = () if extra is None else extra()
        check_values(x, name, env_index, world[0].shape[0], params, ids_changed, own)
    return _warp.to_compute(x)


def launch_query(
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
    key = (_warp.KEY[work.dtype], WORLD_KINDS[all_cuboids])
    (kernel,) = vars(table[key]).values()
    per = 1 if _warp.cuda_algorithms(work.device) else ROWS_PER_CPU_THREAD
    _launch.launch_blocks(
        kernel,
        work.shape[:-1],
        device=work.device,
        sliced=sliced,
        per_batch={"env_index": _env(env_index, work)},
        rows_per_thread=per,
        work_per_row=work_per_row * world[0].shape[1],
        what=next(iter(sliced)),
        world=world_struct(key, world),
        per_thread=per,
        surface_eps=SURFACE_EPS[work.dtype],
        **args,
    )


def world_struct(key: tuple[str, str], world: list[torch.Tensor]) -> Any:
    """The kernels' world struct of table key ``key`` (``world_kernels.WORLD[key]``) over the world's tensors, by
    field name (built once per checked world list, see ``_VERIFIED``). Called by an op's implementation, whose
    check (:func:`check_world`) has just vetted this very list, which the call holds (so no other list has
    its id): its entry is looked up by id, not vetted again (its first tensor still the one checked)."""
    found = _VERIFIED.get(id(world))
    if found is not None and type(world) is list and world and found.items[0]() is world[0]:
        instance = found.structs.get(key)
        if instance is None:
            instance = found.structs[key] = _world_struct_of(key, world)
        return instance
    return _world_struct_of(key, world)


def _world_struct_of(key: tuple[str, str], world: list[torch.Tensor]) -> Any:
    return _launch.struct(
        world_kernels.WORLD[key], **dict(zip(world_kernels.WORLD_FIELDS, world, strict=True))
    )


def _env(env_index: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """The kernels' ``env_index``: int64, empty for "environment 0 everywhere"."""
    if env_index is None:
        return _launch.empty(torch.int64, like.device)
    return env_index.to(torch.int64)


def world_args(world: MeshWorld, dtype: torch.dtype) -> Any:
    """What a world op passes its op of ``world`` for a query computed in ``dtype``
    (``MeshWorld.kernel_args``), the tables its background build has finished taken in first
    (``MeshWorld.take_tables``)."""
    world.take_tables()
    return world.kernel_args(dtype)


def prepare_query(x, world, width: int, name: str, *, reshape: bool = True) -> tuple[torch.Tensor, bool]:
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


def params_tensor(activation_distance, weight, like: torch.Tensor) -> torch.Tensor:
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
        elif not (value >= 0.0 and math.isfinite(as_float(value, name))):
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
