"""Mesh preprocessing for :class:`~warpgeo.world.MeshWorld` (NumPy, trimesh and the ``warpgeo._kernels.build_*`` kernels).

Everything here runs once per mesh when a world is built, never on a query's path: loading and validating a
mesh, building its Warp mesh (a BVH), and the tables of the SDF kernels' exact shortcuts (see
``warpgeo._kernels.sdf``): the cuboid test (a closed form), the closed-mesh test (edges, slivers,
self-intersections), angle-weighted pseudo-normals, plane trees of convex meshes and coarse distance grids.
:func:`prepare` assembles them into the world's tensors (``warpgeo.world.WORLD_FIELDS``).

Every step takes all of a world's new meshes at once (:func:`build_tables`): one kernel launch over all their
faces or grid cells, NumPy over their concatenated faces, the plane trees' levels over all their nodes, and
each mesh gets the tables of building it alone. What a query needs (the BVH, the box) is built at once; on a
CPU world the tables are built on a background thread (:class:`Later`, :data:`BACKGROUND_FACES`), because
they take longer than the BVHs by far (and compile modules of their own in a fresh process), and the queries
are exact without them. The world takes them in between ops (``MeshWorld.wait_tables``)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from .. import _constants, _warp, checks
from ..primitives import PRIMITIVES
from . import builder as _builder
from . import loading as _loading
from . import meshes as _meshes
from . import tables as _tables

#: Sign method name -> the code the kernels read in ``sign[e, m]``.
SIGN_METHODS = {
    "ray": _constants.SIGN_RAY,
    "winding": _constants.SIGN_WINDING,
    "normal": _constants.SIGN_NORMAL,
    "unsigned": _constants.SIGN_UNSIGNED,
}


class Prepared(NamedTuple):
    """What :func:`prepare` builds: the Warp meshes (which own the BVHs the kernels query by id: they must
    live as long as the ids are used) and the world's constant tensors on its device, by field name."""

    meshes: list[list[Any]]
    #: ``mesh_ids``, ``bounds``, ``sign``, ``grid_dims``, ``grid_flags``, ``grid_cells``, ``topo_offsets``,
    #: ``face_neighbors``, ``vertex_normals``, ``cone_offsets``, ``cone_nodes``, ``cone_links``,
    #: ``cone_planes``, ``cone_faces``, ``slot_kind``, ``prim_size`` (see ``warpgeo.world.WORLD_FIELDS``)
    tables: dict[str, torch.Tensor]
    #: every entry is a closed form (a cuboid mesh, ``FLAG_BOX``, or an analytic primitive, ``slot_kind``):
    #: the world's queries may run the kernels made for that (no BVH query in them)
    all_cuboids: bool
    #: the tables of the world's meshes, being built on a background thread (None: none left to build)
    later: _builder.Later | None
    #: the slots ``(e, m)`` of open meshes (their directed edges do not pair up with reversed ones: see
    #: :func:`_face_checks`) given a signed method that reads them as closed (``"ray"``, ``"normal"``)
    open_signed: tuple[tuple[int, int], ...] = ()
    #: the distance grids: ``((e, m), (first row in voxel_values, (X, Y, Z)))`` per grid slot
    grids: tuple = ()


def prepare(
    envs: list[list], methods: list[list[str]], device: torch.device, *, single: bool, slots: int = 0
) -> Prepared:
    """Load, validate and build every mesh of ``envs`` (one list per environment; ``methods`` nested alike)
    on ``device``; padding slots (``m >= len(envs[e])``) get mesh id ``NO_MESH`` and no tables. ``slots``: the
    world's width ``M`` at least (room kept for entries added later, ``MeshWorld(capacity=...)``).

    What a query needs is built here: each mesh's Warp mesh (its BVH) and box, the per-face checks of every
    new mesh in one launch. The tables of the kernels' exact shortcuts (see :func:`build_tables`: every
    mesh's in one batch of launches) are built here on CUDA (a background thread launching kernels could
    break the caller's graph captures); on the CPU on a background thread (:class:`Later`,
    :data:`BACKGROUND_FACES`): until they are in, its queries take the exact path without them (the same
    closest face, the mesh's own sign method), only slower for points deep inside.

    An analytic primitive (:class:`~warpgeo.primitives.Primitive`) gets fields of its own: its kind in
    ``slot_kind`` and its half-extents in ``prim_size`` (float32), from which the kernels compute its distance
    in closed form; its box as ``bounds`` (the queries' broad phase), and no mesh (mesh id ``NO_MESH``: no
    kernel reads a mesh for a slot whose kind is not ``KIND_MESH``), no grid nor other tables (``grid_flags``
    0), whatever its sign method (primitives are always signed).

    A mesh that recurs (the same object, or the same vertices and faces: environments that repeat their
    obstacles) is built once: its slots share one Warp mesh (BVH) and get copies of the same table rows, so
    the world's tables are those of building every slot alone.

    Raises what :class:`~warpgeo.world.MeshWorld` documents for bad meshes (``single``: name them
    ``meshes[m]``, else ``envs[e][m]``)."""
    wp = _warp.warp()
    wdev = _warp.warp_device(device)
    num_envs, max_meshes = len(envs), max(slots, *(len(env) for env in envs))
    if any(
        method == "winding" and not (isinstance(item, PRIMITIVES) or is_grid(item))
        for env, env_methods in zip(envs, methods, strict=True)
        for item, method in zip(env, env_methods, strict=True)
    ):
        _tables._check_winding_support(device)
    meshes: list[list[Any]] = [[None] * len(env) for env in envs]
    ids = np.zeros((num_envs, max_meshes), dtype=np.uint64)
    signs = np.zeros((num_envs, max_meshes), dtype=np.int32)
    bounds = np.zeros((num_envs, max_meshes, 2, 3), dtype=np.float32)
    kinds = np.full((num_envs, max_meshes), _constants.KIND_MESH, dtype=np.int32)
    sizes = np.zeros((num_envs, max_meshes, 3), dtype=np.float32)
    assembly = _builder._Assembly(num_envs, max_meshes)
    loaded: dict[int, tuple[Any, tuple]] = {}  # id(item) -> (item, (vertices, faces, content key))
    # reading the caller's entries (the one loop over slots): each distinct mesh (content, winding support)
    # once, each distinct table job (content, sign method) once, and the slots of each
    new: dict[tuple, int] = {}  # (content, winding) -> index into `arrays`
    arrays: list[tuple[np.ndarray, np.ndarray, bool, str]] = []  # (vertices, faces, winding, where)
    jobs: dict[tuple, int] = {}  # (content, method) -> index into `job_meshes`
    job_meshes: list[tuple[int, str]] = []  # (index into `arrays`, method)
    slots: list[tuple[int, int, int]] = []  # (e, m, job) of every mesh slot, in slot order
    grids: dict[tuple[int, int], tuple[int, tuple[int, int, int]]] = {}
    for e, env in enumerate(envs):
        for m, item in enumerate(env):
            if is_grid(item):
                values = _grid_values(item, device, f"meshes[{m}]" if single else f"envs[{e}][{m}]")
                kinds[e, m], bounds[e, m] = _constants.KIND_GRID, _grid_box(item)
                grids[e, m] = (assembly.add_grid(e, m, values, item.origin, item.voxel_size), item.shape)
                continue  # no mesh, no tables: a closed form (trilinear), whatever its sign method
            if isinstance(item, PRIMITIVES):
                half = np.asarray(item.half_extents(), dtype=np.float32)  # float32, as the kernels read it
                kinds[e, m], sizes[e, m], bounds[e, m] = item._kind, half, (-half, half)
                continue  # no mesh (NO_MESH), no tables; its sign code is not read (a primitive is signed)
            method = methods[e][m]
            signs[e, m] = SIGN_METHODS[method]
            known = loaded.get(id(item))
            if known is not None and known[0] is item:
                vertices, faces, content = known[1]
            else:
                vertices, faces = _loading.load_mesh(item, f"meshes[{m}]" if single else f"envs[{e}][{m}]")
                content = _loading._content_key(vertices, faces)
                loaded[id(item)] = (item, (vertices, faces, content))
            key = (content, method == "winding")
            index = new.get(key)
            if index is None:
                index = new[key] = len(arrays)
                arrays.append((vertices, faces, key[1], f"meshes[{m}]" if single else f"envs[{e}][{m}]"))
            job = jobs.get((content, method))
            if job is None:
                job = jobs[(content, method)] = len(job_meshes)
                job_meshes.append((index, method))
            slots.append((e, m, job))
    built_meshes = _meshes._build_meshes(arrays, device)
    # the slots of open meshes whose own sign method reads them as closed (the mesh's data may be shared with
    # slots of other methods: those are not to be blamed)
    signed_as_closed = {job for job, (_, method) in enumerate(job_meshes) if method in ("ray", "normal")}
    open_arrays = {
        i
        for i in {job_meshes[job][0] for job in signed_as_closed}
        if not built_meshes[i][2] and _meshes.open_when_welded(*arrays[i][:2])
    }
    open_signed = tuple(
        (e, m) for e, m, job in slots if job in signed_as_closed and job_meshes[job][0] in open_arrays
    )
    specs = [
        _meshes._MeshSpec(
            built_meshes[i][0],
            arrays[i][0],
            arrays[i][1],
            built_meshes[i][1],
            method,
            built_meshes[i][3],
            slivers=built_meshes[i][4],
        )
        for i, method in job_meshes
    ]
    later_jobs = [
        device.type == "cpu" and not spec.cuboid and len(spec.faces) >= BACKGROUND_FACES for spec in specs
    ]
    now = [k for k, later in enumerate(later_jobs) if not later]
    tables_now = dict(zip(now, _tables.build_tables([specs[k] for k in now], device), strict=True))
    deferred: dict[int, list[tuple[int, int]]] = {}
    if slots:
        # every mesh slot's id, box and (pending) flags at once; the tables built now slot by slot, in order
        slot_e, slot_m, slot_job = (np.array(column, dtype=np.int64) for column in zip(*slots, strict=True))
        ids[slot_e, slot_m] = np.array([spec.mesh.id for spec in specs], dtype=np.uint64)[slot_job]
        bounds[slot_e, slot_m] = np.stack([spec.box for spec in specs])[slot_job]
        pending = np.array([spec.pending_flags for spec in specs], dtype=np.int32)
        later_slots = np.array(later_jobs)[slot_job]
        assembly.flags[slot_e[later_slots], slot_m[later_slots]] = pending[slot_job[later_slots]]
        for e, m, job in slots:
            meshes[e][m] = specs[job].mesh
            if later_jobs[job]:
                deferred.setdefault(job, []).append((e, m))
            else:
                assembly.add(e, m, tables_now[job])
    if device.type == "cuda":
        # BVHs are built on Warp's stream; kernels run on torch's. Wait once, here, not per query.
        wp.synchronize_device(wdev)
    tables = {
        "mesh_ids": torch.from_numpy(ids.view(np.int64)).to(device),
        "bounds": torch.from_numpy(bounds).to(device),
        "sign": torch.from_numpy(signs).to(device),
        **assembly.tensors(device),
        "slot_kind": torch.from_numpy(kinds).to(device),
        "prim_size": torch.from_numpy(sizes).to(device),
        **assembly.grid_tensors(device),
    }
    closed_forms = all(
        kinds[e, m] != _constants.KIND_MESH or assembly.flags[e, m] & _constants.FLAG_BOX
        for e, env in enumerate(envs)
        for m in range(len(env))
    )
    later = None
    if deferred:
        later = _builder.Later(
            assembly, [(specs[job], job_slots) for job, job_slots in deferred.items()], device
        )
    return Prepared(meshes, tables, bool(closed_forms), later, open_signed, tuple(grids.items()))


def is_grid(entry: Any) -> bool:
    """Whether ``entry`` is a distance grid (:class:`warpgeo.DistanceGrid`, which says so by its class attribute
    ``WORLD_ENTRY``: the wing reads its ``values``, ``voxel_size`` and ``origin`` and imports nothing of the op
    module above it)."""
    return getattr(type(entry), "WORLD_ENTRY", None) == "distance_grid"


def _grid_values(grid: Any, device: torch.device, where: str) -> torch.Tensor:
    """A distance grid's values as a world stores them: ``(X, Y, Z)`` float32 on ``device`` (a copy is made
    when the world's table is put together); with value checks on, NaN / inf is a ValueError naming it."""
    values = grid.values.detach().to(device=device, dtype=torch.float32)
    if checks.checking_values(device) and not bool(torch.isfinite(values).all()):
        raise ValueError(f"{where}: a DistanceGrid's values must be finite (float32); found NaN or inf")
    return values


def _grid_box(grid: Any) -> np.ndarray:
    """The box of a grid's voxel centres ``(lower, upper)`` in its frame, float32 rounded outwards (the
    queries' broad phase must not cut off a point the grid's own box reaches)."""
    lower = np.asarray(grid.origin, dtype=np.float64)
    upper = lower + grid.voxel_size * (np.asarray(grid.shape, dtype=np.float64) - 1.0)
    lo32, hi32 = lower.astype(np.float32), upper.astype(np.float32)
    lo32 = np.where(lo32 > lower, np.nextafter(lo32, np.float32(-np.inf)), lo32)
    hi32 = np.where(hi32 < upper, np.nextafter(hi32, np.float32(np.inf)), hi32)
    return np.stack([lo32, hi32])


#: A CPU world builds the tables of its meshes of this many faces or more (0: every mesh) on a background
#: thread (:class:`~warpgeo._world.builder.Later`): building them takes longer than the BVHs (seconds at a
#: million faces: the closed-mesh check, pseudo-normals, plane tree, grid; and in a fresh process with an
#: empty kernel cache seconds for any mesh, five build modules compiling), and a query is exact without them.
#: Tests and benchmarks raise it to compare with tables built at once.
BACKGROUND_FACES = 0
