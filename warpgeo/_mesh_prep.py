"""Mesh preprocessing for :class:`~warpgeo.world.MeshWorld` (NumPy, trimesh and the ``sdf_build`` kernels).

Everything here runs once per mesh when a world is built, never on a query's path: loading and validating a
mesh, building its Warp mesh (a BVH), and the tables of the SDF kernels' exact shortcuts (see
``warpgeo._kernels.sdf``): the cuboid test (a closed form), the closed-mesh test (edges, slivers,
self-intersections), angle-weighted pseudo-normals, plane trees of convex meshes and coarse distance grids.
:func:`prepare` assembles them into the world's tensors (``warpgeo.world.WORLD_FIELDS``).

Every step takes all of a world's new meshes at once (:func:`build_tables`): one kernel launch over all their
faces or grid cells, NumPy over their concatenated faces, the plane trees' levels over all their nodes, and
each mesh gets the tables of building it alone. What a query needs (the BVH, the box) is built at once; on a
CPU world the tables of a large mesh (:data:`BACKGROUND_FACES`), or of many meshes that add up
(:data:`BACKGROUND_WORLD_FACES`: thousands of environments of small objects), are built on a background
thread (:class:`Later`), because they take longer than the BVHs by far, and the queries are exact without
them. The world takes them in between ops (``MeshWorld.wait_tables``)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import math
import os
import sys
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import torch

from . import _constants, _launch, _warp
from ._kernels import sdf_build as build_kernels
from .primitives import PRIMITIVES

#: A world entry: a ``trimesh.Trimesh``, a path trimesh can load, a ``(vertices (V, 3), faces (F, 3))`` pair, or
#: an analytic primitive (:mod:`warpgeo.primitives`).
MeshLike = Any

#: Sign method name -> the code the kernels read in ``sign[e, m]``.
SIGN_METHODS = {
    "ray": _constants.SIGN_RAY,
    "winding": _constants.SIGN_WINDING,
    "normal": _constants.SIGN_NORMAL,
    "unsigned": _constants.SIGN_UNSIGNED,
}
#: Warp meshes are float32: a vertex coordinate beyond this would become inf.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


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
    #: the tables of the world's large meshes, being built on a background thread (None: none left to build)
    later: Later | None
    #: the slots ``(e, m)`` of open meshes (their directed edges do not pair up with reversed ones: see
    #: :func:`_face_checks`) given a signed method that reads them as closed (``"ray"``, ``"normal"``)
    open_signed: tuple[tuple[int, int], ...] = ()


def prepare(envs: list[list], methods: list[list[str]], device: torch.device, *, single: bool) -> Prepared:
    """Load, validate and build every mesh of ``envs`` (one list per environment; ``methods`` nested alike)
    on ``device``; padding slots (``m >= len(envs[e])``) get mesh id ``NO_MESH`` and no tables.

    What a query needs is built here: each mesh's Warp mesh (its BVH) and box, the per-face checks of every
    new mesh in one launch. The tables of the kernels' exact shortcuts (see :func:`build_tables`: every
    mesh's in one batch of launches) are built here too, unless the world is on the CPU and a mesh has
    :data:`BACKGROUND_FACES` faces or more, or its new meshes :data:`BACKGROUND_WORLD_FACES` in all: then on
    a background thread (:class:`Later`); until they are in, its queries take the exact path without them
    (the same closest face, the mesh's own sign method), only slower for points deep inside.

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
    num_envs, max_meshes = len(envs), max(len(env) for env in envs)
    if any(
        method == "winding" and not isinstance(item, PRIMITIVES)
        for env, env_methods in zip(envs, methods, strict=True)
        for item, method in zip(env, env_methods, strict=True)
    ):
        _check_winding_support(device)
    meshes: list[list[Any]] = [[None] * len(env) for env in envs]
    ids = np.zeros((num_envs, max_meshes), dtype=np.uint64)
    signs = np.zeros((num_envs, max_meshes), dtype=np.int32)
    bounds = np.zeros((num_envs, max_meshes, 2, 3), dtype=np.float32)
    kinds = np.full((num_envs, max_meshes), _constants.KIND_MESH, dtype=np.int32)
    sizes = np.zeros((num_envs, max_meshes, 3), dtype=np.float32)
    assembly = _Assembly(num_envs, max_meshes)
    loaded: dict[int, tuple[Any, tuple]] = {}  # id(item) -> (item, (vertices, faces, content key))
    # reading the caller's entries (the one loop over slots): each distinct mesh (content, winding support)
    # once, each distinct table job (content, sign method) once, and the slots of each
    new: dict[tuple, int] = {}  # (content, winding) -> index into `arrays`
    arrays: list[tuple[np.ndarray, np.ndarray, bool, str]] = []  # (vertices, faces, winding, where)
    jobs: dict[tuple, int] = {}  # (content, method) -> index into `job_meshes`
    job_meshes: list[tuple[int, str]] = []  # (index into `arrays`, method)
    slots: list[tuple[int, int, int]] = []  # (e, m, job) of every mesh slot, in slot order
    for e, env in enumerate(envs):
        for m, item in enumerate(env):
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
                vertices, faces = load_mesh(item, f"meshes[{m}]" if single else f"envs[{e}][{m}]")
                content = _content_key(vertices, faces)
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
    built_meshes = _build_meshes(arrays, device)
    open_arrays = {
        i
        for i, method in job_meshes
        if method in ("ray", "normal") and not built_meshes[i][2] and open_when_welded(*arrays[i][:2])
    }
    open_signed = tuple((e, m) for e, m, job in slots if job_meshes[job][0] in open_arrays)
    specs = [
        _MeshSpec(
            built_meshes[i][0], arrays[i][0], arrays[i][1], built_meshes[i][1], method, built_meshes[i][3]
        )
        for i, method in job_meshes
    ]
    total = sum(len(spec.faces) for spec in specs if not spec.cuboid)
    later_jobs = [
        device.type == "cpu"
        and not spec.cuboid
        and (len(spec.faces) >= BACKGROUND_FACES or total >= BACKGROUND_WORLD_FACES)
        for spec in specs
    ]
    now = [k for k, later in enumerate(later_jobs) if not later]
    tables_now = dict(zip(now, build_tables([specs[k] for k in now], device), strict=True))
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
    }
    closed_forms = all(
        kinds[e, m] != _constants.KIND_MESH or assembly.flags[e, m] & _constants.FLAG_BOX
        for e, env in enumerate(envs)
        for m in range(len(env))
    )
    later = None
    if deferred:
        later = Later(assembly, [(specs[job], job_slots) for job, job_slots in deferred.items()], device)
    return Prepared(meshes, tables, bool(closed_forms), later, open_signed)


def open_when_welded(vertices: np.ndarray, faces: np.ndarray) -> bool:
    """Whether a mesh whose directed edges do not pair up (see :func:`_face_checks`) stays open once its
    vertices at one position are one vertex: False for a closed surface given as unwelded parts (an OBJ's
    material groups, an STL's triangle soup), whose edges pair up by position. Exact: first the edge-pairing
    hash of :func:`_face_checks` over hashes of the vertices' positions (:func:`_position_hash`): a rest means
    the directed edges and their reverses are different multisets of positions, so the mesh is open (a real
    open mesh, a scan, ends here in O(F)); else sorted integer edge codes of the welded vertices, O(F log F)."""
    first = _position_hash(vertices, np.uint64(0x9E3779B97F4A7C15))
    second = _position_hash(vertices, np.uint64(0xD1B54A32D192ED03))
    rest = np.uint64(0)
    with np.errstate(over="ignore"):  # wrapping uint64 arithmetic
        for k in range(3):
            a, b = faces[:, k], faces[:, (k + 1) % 3]
            rest += (first[a] * second[b]).sum(dtype=np.uint64) - (first[b] * second[a]).sum(dtype=np.uint64)
    if rest != 0:
        return True
    _, inverse = np.unique(vertices, axis=0, return_inverse=True)
    welded = inverse.reshape(-1)[faces].astype(np.int64)
    n = np.int64(len(vertices))
    tails = welded.reshape(-1)
    heads = np.roll(welded, -1, axis=1).reshape(-1)  # edges ab, bc, ca of each face
    return not np.array_equal(np.sort(tails * n + heads), np.sort(heads * n + tails))


def _position_hash(vertices: np.ndarray, seed: np.uint64) -> np.ndarray:
    """A 64-bit hash (uint64, odd) of each float32 vertex's position: equal positions (-0.0 counted as 0.0)
    hash alike. Splitmix64's finaliser over the coordinates' bits."""
    bits = (np.asarray(vertices, dtype=np.float32) + np.float32(0.0)).view(np.uint32).astype(np.uint64)
    x = np.full(len(bits), seed, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for axis in range(3):
            x = (x ^ bits[:, axis]) * np.uint64(0x9E3779B97F4A7C15) + seed
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            x ^= x >> np.uint64(31)
    return x | np.uint64(1)


def _build_meshes(
    arrays: list[tuple[np.ndarray, np.ndarray, bool, str]], device: torch.device
) -> list[tuple]:
    """``(Warp mesh, may be closed, its edges may pair up, edge pairs or None)`` of each new mesh ``(vertices,
    faces, winding, where)`` (may be closed: its edges may pair up and it has no sliver; see
    :func:`_face_checks`): the per-face checks of all of them in one launch (:func:`face_checks`), then their
    BVHs (on the CPU in runs of meshes on threads, :func:`_in_chunks`: Warp builds a host BVH with the GIL
    released) and, side by side with them where they leave a core free (from :data:`_CHUNK_FACES` faces),
    the edge pairs of those that may be closed and are no cuboid (:func:`edge_pairs`, as a :class:`_Pairing`
    that the table build waits for; :data:`_NOT_PAIRED` where not looked for). A cuboid's faces are halves of its box's sides: none
    is a sliver, and it launches nothing."""
    wp = _warp.warp()
    if not arrays:
        return []
    vertex_rows = np.cumsum([0] + [len(a[0]) for a in arrays])
    face_rows = np.cumsum([0] + [len(a[1]) for a in arrays])
    # the Warp meshes point into one tensor of every new mesh's vertices and one of their faces (on the device)
    points = torch.from_numpy(np.concatenate([a[0] for a in arrays])).to(device)
    indices = torch.from_numpy(np.concatenate([a[1] for a in arrays]).reshape(-1)).to(device)
    if device.type == "cuda":
        # the copies run on torch's stream, the BVH builds on Warp's: the arrays are in before any build reads
        torch.cuda.current_stream(device).synchronize()
    cuboid = [len(f) == 12 and _is_cuboid(v, f, _box_of(v)) for v, f, _, _ in arrays]
    slivers = np.zeros(len(arrays), dtype=np.int64)
    pairs_up = np.ones(len(arrays), dtype=bool)
    if not all(cuboid):
        slivers, pairs_up = _face_checks(points, indices, vertex_rows, face_rows, device)
        slivers[cuboid] = 0
        pairs_up[cuboid] = True
    for k, (_, faces, _, where) in enumerate(arrays):
        if slivers[k] == len(faces):
            raise ValueError(
                f"{where}: every face has zero area (or is a sliver Warp's queries skip), so the mesh "
                f"has no surface to measure; got {len(faces)} degenerate faces"
            )

    # the edge pairs of the meshes that may be closed (NumPy) on a thread of their own, side by side with the
    # BVH builds (Warp), where those leave a core free and the pairs are worth a thread; else the table build
    # finds them (see build_tables)
    closable = [k for k in range(len(arrays)) if slivers[k] == 0 and pairs_up[k] and not cuboid[k]]
    weights = [len(arrays[k][1]) for k in closable]
    spare = device.type != "cpu" or _chunk_count([len(a[1]) for a in arrays]) < _thread_count()
    pairing = None
    if spare and sum(weights) >= _CHUNK_FACES:
        meshes = [(arrays[k][1], len(arrays[k][0])) for k in closable]
        pairing = _mesh_pool(os.getpid()).submit(edge_pairs, meshes)

    def build(k: int) -> Any:
        v0, v1, f0, f1 = (
            int(x) for x in (vertex_rows[k], vertex_rows[k + 1], face_rows[k], face_rows[k + 1])
        )
        winding, where = arrays[k][2], arrays[k][3]
        mesh = wp.Mesh(
            points=wp.from_torch(points[v0:v1], dtype=wp.vec3),
            indices=wp.from_torch(indices[3 * f0 : 3 * f1]),
            support_winding_number=winding,
        )
        if winding and not getattr(mesh, "support_winding_number", False):
            raise RuntimeError(f"{where}: Warp did not build winding-number support for this mesh")
        return mesh

    # on the CPU, runs of meshes of about equal faces on threads (Warp builds a host BVH with the GIL released)
    if device.type == "cpu":
        built = _in_chunks(
            lambda run: [build(k) for k in run],
            list(range(len(arrays))),
            [len(a[1]) for a in arrays],
            background=False,
        )
    else:
        built = [build(k) for k in range(len(arrays))]
    pairs: list[Any] = [_NOT_PAIRED] * len(arrays)
    if pairing is not None:
        for j, k in enumerate(closable):
            pairs[k] = _Pairing(pairing, j)
    return [
        (mesh, slivers[k] == 0 and pairs_up[k], bool(pairs_up[k]), pairs[k]) for k, mesh in enumerate(built)
    ]


#: A mesh's edge pairs not looked for yet (:func:`build_tables` does).
_NOT_PAIRED = "not paired yet"


class _Pairing:
    """Mesh ``j``'s edge pairs of a batch still being found on a thread (:func:`_build_meshes`): the world's
    constructor does not wait for them, its table build does (:meth:`get`)."""

    def __init__(self, batch: Future, j: int) -> None:
        self.batch, self.j, self.pid = batch, j, os.getpid()

    def get(self, faces: np.ndarray, num_vertices: int) -> np.ndarray | None:
        """The pairs (of the mesh's ``faces`` and ``num_vertices``: found here in a forked child, which has
        the batch's future but not its thread); raises what the batch raised."""
        if self.pid != os.getpid() and not self.batch.done():
            return edge_pairs([(faces, num_vertices)])[0]
        return self.batch.result()[self.j]


@functools.cache
def _mesh_pool(pid: int) -> ThreadPoolExecutor:
    # by process id: a forked child inherits the pool object but not its threads
    return ThreadPoolExecutor(max_workers=2, thread_name_prefix="warpgeo-bvh")


def _helper_pool(background: bool) -> ThreadPoolExecutor | None:
    """A second thread for a table build (None on one core): at the lowest priority for the background
    build's."""
    if torch.get_num_threads() < 2:
        return None
    return _low_pool(os.getpid()) if background else _mesh_pool(os.getpid())


@functools.cache
def _low_pool(pid: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="warpgeo-tables", initializer=_yield_cores)


def face_checks(
    meshes: list[tuple[np.ndarray, np.ndarray]], device: torch.device
) -> tuple[np.ndarray, np.ndarray]:
    """``(slivers (K,) int64, pairs_up (K,) bool)`` of meshes ``(vertices, faces)`` (see :func:`_face_checks`:
    all in one launch)."""
    vertex_rows = np.cumsum([0] + [len(v) for v, _ in meshes])
    face_rows = np.cumsum([0] + [len(f) for _, f in meshes])
    points = torch.from_numpy(np.concatenate([v for v, _ in meshes])).to(device)
    indices = torch.from_numpy(np.concatenate([f for _, f in meshes]).reshape(-1)).to(device)
    return _face_checks(points, indices, vertex_rows, face_rows, device)


def _face_checks(
    points: torch.Tensor, indices: torch.Tensor, vertex_rows: np.ndarray, face_rows: np.ndarray, device
) -> tuple[np.ndarray, np.ndarray]:
    """``(slivers (K,) int64, pairs_up (K,) bool)`` of K meshes whose vertices and faces are concatenated in
    ``points`` / ``indices`` (mesh ``k``: vertex rows ``vertex_rows[k:k + 2]``, face rows ``face_rows[k:k +
    2]``, its faces indexing its own vertices), in one launch of ``sdf_build.face_checks_rows`` over all their
    faces: how many faces Warp's queries skip as slivers, and whether the directed edges may pair up with
    reversed ones (False for an open mesh: a boundary edge has no reverse), from one O(F) hash sum per mesh:
    equal multisets of directed and reversed edges have equal sums of a hash ``h(a) g(b)`` of each edge ``a ->
    b`` (wrapping uint64 arithmetic). True for a closed mesh; then :func:`edge_pairs` decides, exactly. One
    host read."""
    num_faces = int(face_rows[-1])
    slivers = torch.empty(num_faces, dtype=torch.int32, device=device)
    edge_hash = torch.empty(num_faces, dtype=torch.int64, device=device)
    _launch.launch_rows(
        build_kernels.BUILD["float32"].face_checks_rows,
        num_faces,
        device=device,
        points=points,
        indices=indices,
        vertex_first=torch.from_numpy(np.asarray(vertex_rows, dtype=np.int64)).to(device),
        face_first=torch.from_numpy(np.asarray(face_rows, dtype=np.int64)).to(device),
        slivers=slivers,
        edge_hash=edge_hash,
    )
    starts = np.asarray(face_rows[:-1], dtype=np.int64)
    if device.type == "cpu":
        flags, hashes = slivers.numpy(), edge_hash.numpy()
    else:
        both = torch.cat([slivers.to(torch.int64), edge_hash]).cpu().numpy()  # one read
        flags, hashes = both[:num_faces], both[num_faces:]
    counts = np.add.reduceat(flags, starts, dtype=np.int64)
    rest = np.add.reduceat(hashes.view(np.uint64), starts)  # wraps modulo 2**64
    return counts, rest == 0


def _empty(device: torch.device) -> torch.Tensor:
    return torch.zeros(0, dtype=torch.float32, device=device)


#: Meshes of at least this many faces get their tables on a background thread (CPU worlds): building them
#: takes longer than the BVH (seconds at a million faces: the closed-mesh check, pseudo-normals, plane tree,
#: grid), and a query is exact without them.
BACKGROUND_FACES = 1 << 14

#: The per-slot table fields (``(E, M, ...)``) and the flat ones (rows of every mesh, concatenated); when a
#: world's later tables go in, each gets a new tensor (``MeshWorld._take_tables``).
SLOT_FIELDS = ("grid_dims", "grid_flags", "topo_offsets", "cone_offsets")
FLAT_FIELDS = (
    "grid_cells", "face_neighbors", "vertex_normals", "cone_nodes", "cone_links", "cone_planes", "cone_faces"
)  # fmt: skip


class _Assembly:
    """A world's tables as they are put together: each slot's flags and first rows, and the flat tables'
    parts (a mesh's rows are appended, so rows already handed out never move)."""

    def __init__(self, num_envs: int, max_meshes: int) -> None:
        self.flags = np.zeros((num_envs, max_meshes), dtype=np.int32)
        self.grid_dims = np.zeros((num_envs, max_meshes, 4), dtype=np.int32)
        # closed meshes' pseudo-normal tables, and each mesh's first rows in them (-1: none; int32 offsets)
        self.topo_offsets = np.full((num_envs, max_meshes, 2), -1, dtype=np.int32)
        # convex closed meshes' plane trees (see _plane_tree): first rows in each table, node count
        self.cone_offsets = np.full((num_envs, max_meshes, 4), -1, dtype=np.int32)
        self.grid_values: list[torch.Tensor] = []
        self.grid_rows = 0
        self.topo_parts: list[list[np.ndarray]] = [
            [np.zeros((0, 3), np.int32)],
            [np.zeros((0, 3), np.float64)],
        ]
        self.topo_rows = [0, 0]
        self.cone_parts: list[list[np.ndarray]] = [
            [np.zeros((0, 4), np.float32)],
            [np.zeros((0, 3), np.int32)],
        ]
        self.cone_parts += [[np.zeros((0, 4), np.float32)], [np.zeros(0, np.int32)]]
        self.cone_rows = [0, 0, 0, 0]

    def add(self, e: int, m: int, tables: _Built) -> None:
        """Give slot ``(e, m)`` the tables of its mesh (appending its rows)."""
        self.flags[e, m] = tables.flags
        self.grid_dims[e, m] = (*tables.dims, self.grid_rows)
        self.grid_values.append(tables.values)
        self.grid_rows += tables.values.shape[0]
        topology = tables.topology
        if topology is not None and max(self.topo_rows) + max(map(len, topology)) < 2**31:
            self.topo_offsets[e, m] = self.topo_rows
            for parts, part in zip(self.topo_parts, topology, strict=True):
                parts.append(part)
            self.topo_rows = [rows + len(part) for rows, part in zip(self.topo_rows, topology, strict=True)]
            tree = tables.tree
            if tree is not None and max(self.cone_rows) + max(map(len, tree)) < 2**31:
                rows = self.cone_rows
                self.cone_offsets[e, m] = (rows[0], rows[1], rows[2], len(tree[1]))
                for parts, part in zip(self.cone_parts, tree, strict=True):
                    parts.append(part)
                self.cone_rows = [rows + len(part) for rows, part in zip(self.cone_rows, tree, strict=True)]

    def tensors(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The :data:`SLOT_FIELDS` and :data:`FLAT_FIELDS` tensors on ``device``."""
        parts = [*self.topo_parts, *self.cone_parts]
        names = ("face_neighbors", "vertex_normals", "cone_nodes", "cone_links", "cone_planes", "cone_faces")
        return {
            # copies (also on the CPU): the arrays change as later tables are added, the tensors never do
            "grid_dims": _dense(self.grid_dims, device),
            "grid_flags": _dense(self.flags, device),
            "grid_cells": _concat(self.grid_values, device),
            "topo_offsets": _dense(self.topo_offsets, device),
            "cone_offsets": _dense(self.cone_offsets, device),
            **{name: _dense(np.concatenate(part), device) for name, part in zip(names, parts, strict=True)},
        }


class _MeshSpec:
    """What building one mesh's tables reads: its Warp mesh, its arrays and what was found loading it: its box,
    whether it is a cuboid, and whether it may be closed (no sliver, and its directed edges may pair up:
    :func:`_face_checks`)."""

    __slots__ = ("box", "cuboid", "faces", "may_be_closed", "mesh", "method", "pairs", "vertices")

    def __init__(
        self,
        mesh: Any,
        vertices: np.ndarray,
        faces: np.ndarray,
        may_close: bool,
        method: str,
        pairs: np.ndarray | None,
    ) -> None:
        self.mesh, self.vertices, self.faces, self.method = mesh, vertices, faces, method
        self.box = _box_of(vertices)
        self.cuboid = _is_cuboid(vertices, faces, self.box)
        self.may_be_closed = may_close and not self.cuboid
        # its edge pairs (see edge_pairs) if they pair up, else None; a _Pairing: being found on a thread;
        # _NOT_PAIRED: not looked for yet
        self.pairs = pairs if self.may_be_closed else None

    @property
    def pending_flags(self) -> int:
        """``grid_flags`` of its slots while its tables are built on the background thread."""
        return _constants.FLAG_PENDING if self.may_be_closed else 0


def _box_of(vertices: np.ndarray) -> np.ndarray:
    """The mesh's box ``(lower, upper)`` (2, 3), column by column (NumPy's ``min(axis=0)`` of a ``(V, 3)`` array
    is a strided loop: 17 ms at 655k vertices, against 0.3 ms per column)."""
    columns = [vertices[:, k] for k in range(3)]
    return np.array([[c.min() for c in columns], [c.max() for c in columns]], dtype=vertices.dtype)


class _Cancelled(Exception):
    """The world whose tables were being built is gone."""


class Later:
    """The tables of a world's large meshes (:data:`BACKGROUND_FACES`), built on a background thread; the
    world takes them in (:meth:`take`) on its caller's thread, between ops. If the world goes first, the build
    stops at its next step. CPU worlds only: on CUDA a thread of its own launching kernels could break the
    caller's graph captures, and the tables' tensors are state that captured graphs read in place."""

    def __init__(
        self, assembly: _Assembly, jobs: list[tuple[_MeshSpec, list[tuple[int, int]]]], device
    ) -> None:
        self.assembly, self._jobs, self._device = assembly, jobs, device
        self._token = _Token()  # only this object holds it: the thread sees it through a weak reference
        self.future: Future = Future()
        self._pid: int | None = None

    def start(self) -> None:
        """Start the build (once the world is set up: its own set-up does not share the CPU with it)."""
        if self._pid is not None:
            return
        self._pid = os.getpid()
        jobs, device, future, alive = self._jobs, self._device, self.future, weakref.ref(self._token)

        def run() -> None:
            try:
                built = build_tables([spec for spec, _ in jobs], device, alive=alive)
                future.set_result([(tables, slots) for tables, (_, slots) in zip(built, jobs, strict=True)])
            except BaseException as exc:  # handed to the world by take()
                future.set_exception(exc)

        _side_pool(self._pid).submit(run)

    def _forked(self) -> None:
        # a forked child (a DataLoader worker) has the parent's world but not its building thread: build again
        if self._pid is not None and self._pid != os.getpid() and not self.future.done():
            self.future, self._pid = Future(), None
            self.start()

    def done(self) -> bool:
        if self.future.done():
            return True
        self._forked()
        return False

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the build finished (or failed) within ``timeout`` seconds."""
        self._forked()
        self.start()  # a no-op once started (the world starts it at the end of its set-up)
        try:
            self.future.exception(timeout)
        except TimeoutError:
            return False
        return True

    def take(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The world's table tensors (:data:`SLOT_FIELDS` and :data:`FLAT_FIELDS`) with the later meshes'
        tables in; raises what the build raised."""
        for tables, slots in self.future.result():
            for e, m in slots:
                self.assembly.add(e, m, tables)
        return self.assembly.tensors(device)


class _Token:
    """A world's build token (weakly referenced by its background build)."""


#: Meshes up to this many bytes of vertices and faces are recognised by content when they recur (larger ones
#: only as the same object): hashing them costs less than building them again.
_HASHED_BYTES = 1 << 22


class _Built:
    """What one mesh (one sign method) contributes to a world, built once however many slots hold it."""

    __slots__ = ("box", "dims", "flags", "topology", "tree", "values")

    def __init__(self, box, flags, dims, values, topology, tree) -> None:
        self.box, self.flags, self.dims, self.values = box, flags, dims, values
        self.topology, self.tree = topology, tree


def _content_key(vertices: np.ndarray, faces: np.ndarray) -> Any:
    """A key equal for meshes with equal vertices and faces (small ones: by content; large ones: a key of
    their own, unless they are the very same arrays)."""
    size = vertices.nbytes + faces.nbytes
    if size > _HASHED_BYTES:
        return ("arrays", id(vertices), id(faces))
    digest = hashlib.blake2b(vertices.tobytes(), digest_size=16)
    digest.update(faces.tobytes())
    return ("content", vertices.shape, faces.shape, digest.digest())


def _concat(values: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    if not values:
        return torch.zeros(0, dtype=torch.float32, device=device)
    return torch.cat(values).to(device)


def is_vf_pair(item: Any) -> bool:
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        return False
    return all(isinstance(x, (np.ndarray, torch.Tensor)) for x in item)


def load_mesh(item: MeshLike, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(vertices (V, 3) float32, faces (F, 3) int32)`` of one mesh argument, validated: arrays of their own
    (never views of the caller's)."""
    # trimesh is imported only to load a file (its import costs most of a second): an object can only be a
    # trimesh.Trimesh if the caller has imported trimesh already
    trimesh = sys.modules.get("trimesh")
    if isinstance(item, (str, os.PathLike)):
        import trimesh

        path = os.fspath(item)
        if not os.path.exists(path):
            raise ValueError(f"{where}: no such mesh file {path!r}")
        try:
            loaded = trimesh.load(path, force="mesh")
        except ImportError as exc:
            # trimesh reaches for an optional text-encoding guesser (charset_normalizer) only when a file is
            # neither a valid binary file nor UTF-8 text: the file is corrupt, the module is not the problem
            raise ValueError(
                f"{where}: {path!r} is not a readable mesh file (neither valid binary nor UTF-8 text)"
            ) from exc
        except Exception as exc:  # trimesh raises many types for unreadable files
            raise ValueError(f"{where}: trimesh could not load {path!r} as a mesh: {exc}") from exc
        if not isinstance(loaded, trimesh.Trimesh):
            raise ValueError(
                f"{where}: {path!r} did not load as a triangle mesh (got {type(loaded).__name__})"
            )
        vertices, faces = loaded.vertices, loaded.faces
        where = f"{where} ({path})"
    elif trimesh is not None and isinstance(item, trimesh.Trimesh):
        vertices, faces = item.vertices, item.faces
    elif isinstance(item, (tuple, list)) and len(item) == 2:
        vertices, faces = item
    else:
        raise TypeError(
            f"{where} must be a trimesh.Trimesh, a file path, a (vertices, faces) pair or a primitive "
            f"(warpgeo.Cuboid, Sphere, Capsule, Cylinder); got {type(item).__name__}"
        )
    vertices = _to_numpy(vertices, f"{where}: vertices")
    faces = _to_numpy(faces, f"{where}: faces")
    if vertices.ndim != 2 or vertices.shape[1] != 3 or vertices.shape[0] == 0:
        raise ValueError(f"{where}: vertices must have shape (V, 3) with V >= 1; got {vertices.shape}")
    if faces.ndim != 2 or faces.shape[1] != 3 or faces.shape[0] == 0:
        raise ValueError(
            f"{where}: faces must have shape (F, 3) with F >= 1 (an empty mesh?); got {faces.shape}"
        )
    if not np.issubdtype(vertices.dtype, np.number) or np.issubdtype(vertices.dtype, np.complexfloating):
        raise TypeError(f"{where}: vertices must be real numbers; got dtype {vertices.dtype}")
    if not np.issubdtype(faces.dtype, np.integer):
        raise TypeError(f"{where}: faces must be integers; got dtype {faces.dtype}")
    if not np.isfinite(vertices).all():
        raise ValueError(f"{where}: vertices must be finite; found NaN or inf")
    largest = float(np.abs(vertices).max())
    if largest > _FLOAT32_MAX:
        raise ValueError(
            f"{where}: vertices must lie within float32's range (|v| <= {_FLOAT32_MAX:.4g}: Warp meshes are "
            f"float32); got a coordinate of magnitude {largest:.4g}"
        )
    if largest > _COORDINATE_LIMIT:
        raise ValueError(
            f"{where}: vertex coordinates must stay within 2**60 (~1.15e18) of the mesh origin, where Warp's "
            f"float32 queries can square distances; got {largest:.3g} (scale the mesh, or pose it instead)"
        )
    lo, hi = int(faces.min()), int(faces.max())
    if lo < 0 or hi >= len(vertices):
        raise IndexError(
            f"{where}: face indices must lie in [0, {len(vertices)}); got values in [{lo}, {hi}]"
        )
    # copies of our own, also where the input is float32 / int32 already: the Warp mesh points into them and
    # the background tables read them after the build returns, so a caller writing into its arrays later
    # must not reach either
    return np.array(vertices, dtype=np.float32, order="C"), np.array(faces, dtype=np.int32, order="C")


def _to_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise ValueError(f"{name} is a meta tensor (it holds no values)")
        return x.detach().cpu().resolve_conj().resolve_neg().numpy()
    try:
        return np.asarray(x)
    except Exception as exc:  # ragged lists, objects: the caller's input
        raise ValueError(f"{name} could not be read as an array: {exc}") from exc


#: Mesh coordinates (mesh units) up to which Warp's float32 squared distances cannot overflow.
_COORDINATE_LIMIT = 2.0**60
#: Cells of a mesh's distance grid: about one per face, from _GRID_MIN_CELLS to _GRID_CELLS (at most
#: _GRID_MAX_AXIS along an axis). A cell costs about what a query does (a closest point and a vote of three
#: rays): a 500-face mesh gets 512 cells, a mesh of 8,192 faces or more 8,192.
_GRID_CELLS = 8192
_GRID_MIN_CELLS = 512
_GRID_MAX_AXIS = 64
#: The most rows of one batched launch (faces or grid cells; a launch's rows are int32): more go in parts.
_MAX_BATCH_ROWS = 1 << 30
#: A world whose new meshes hold this many faces in all (on the CPU) builds their tables on the background
#: thread, however small each is (thousands of environments of small distinct objects).
BACKGROUND_WORLD_FACES = 1 << 16


def build_tables(specs: list[_MeshSpec], device: torch.device, *, alive: Any = None) -> list[_Built]:
    """The tables of many meshes, the exact shortcuts of the SDF kernels (see ``warpgeo._kernels.sdf``), each
    step one batch over all of them: one launch of the closed-mesh check over every face, one of the grids
    over every cell, NumPy over the concatenated faces for the edge pairs, pseudo-normals and convexity.

    A cuboid (exactly the surface of its box, see :func:`_is_cuboid`) gets none: the kernels compute its
    distance in closed form. A closed mesh (see :func:`edge_pairs`) gets a signed grid and its pseudo-normal
    tables (``topology = (face_neighbors (F, 3) int32, vertex_normals (V, 3) float64)``), and a convex one its
    plane tree (see :func:`_plane_tree`); an ``"unsigned"`` one an unsigned grid, any other none (its sign may
    change away from its surface). Each mesh's tables are those of building it alone. ``alive``: built on the
    background thread (:class:`Later`), its kernels launched on that thread alone, stopping with
    :class:`_Cancelled` once ``alive()`` is None."""

    def check() -> None:
        if alive is not None and alive() is None:
            raise _Cancelled

    launches = check if alive is not None else None  # the background thread's launches check between chunks
    count = len(specs)
    closed = np.zeros(count, dtype=bool)
    topology: list[tuple | None] = [None] * count
    trees: list[tuple | None] = [None] * count
    background = alive is not None
    pairs = [
        spec.pairs.get(spec.faces, len(spec.vertices)) if isinstance(spec.pairs, _Pairing) else spec.pairs
        for spec in specs
    ]
    unpaired = [k for k, found in enumerate(pairs) if found is _NOT_PAIRED]
    if unpaired:
        check()
        found = _in_chunks(
            edge_pairs,
            [(specs[k].faces, len(specs[k].vertices)) for k in unpaired],
            [len(specs[k].faces) for k in unpaired],
            background=background,
        )
        for k, mesh_pairs in zip(unpaired, found, strict=True):
            pairs[k] = mesh_pairs
    paired = [k for k, found in enumerate(pairs) if found is not None]
    jobs = [(specs[k].vertices, specs[k].faces, specs[k].box, pairs[k]) for k in paired]
    weights = [len(specs[k].faces) for k in paired]

    def closed_tables(chosen: list[int]) -> list[tuple]:
        if not chosen:
            return []
        return _in_chunks(
            lambda chunk: _closed_tables(chunk, launches),
            [jobs[j] for j in chosen],
            [weights[j] for j in chosen],
            background=background,
        )

    # The closed meshes' tables are built on the host (the kernels on its cores, for a CUDA world too: they
    # end in host arrays, and a plane tree's top levels are one thread a node). From _CHUNK_FACES faces every
    # paired mesh's are built on a thread of their own, side by side with the closed-mesh check and the grids
    # (those of a mesh that turns out to intersect itself are dropped); else after the check, for the closed
    # meshes only.
    side = None
    if paired and sum(weights) >= _CHUNK_FACES:
        check()
        # the host's build module loaded here, never by two threads at once (a CUDA world's first host launch)
        _launch._load(build_kernels.BUILD["float32"].closed_faces_rows, _HOST)
        side = _closed_pool(os.getpid(), background).submit(closed_tables, list(range(len(paired))))
    try:
        if paired:
            check()
            meet = faces_meet([specs[k] for k in paired], device, launches)
            closed[paired] = np.logical_not(meet)
        gridded = [
            k
            for k, spec in enumerate(specs)
            if not spec.cuboid
            and (closed[k] or spec.method == "unsigned")
            and ((spec.box[1] - spec.box[0]).astype(np.float64) > 0).all()
        ]
        check()
        grids = dict(
            zip(gridded, _grids([specs[k] for k in gridded], closed[gridded], device, launches), strict=True)
        )
    finally:
        built = None if side is None else side.result()  # its errors (a cancelled build) raise here
    if built is None:
        check()
        chosen = [j for j, k in enumerate(paired) if closed[k]]
        built = dict(zip(chosen, closed_tables(chosen), strict=True))
    else:
        built = dict(enumerate(built))
    for j, k in enumerate(paired):
        if closed[k]:
            topology[k], trees[k] = built[j]
    out = []
    for k, spec in enumerate(specs):
        if spec.cuboid:
            flags = _constants.FLAG_CLOSED | _constants.FLAG_BOX
            out.append(_Built(spec.box, flags, (0, 0, 0), _empty(device), None, None))
            continue
        dims, values = grids.get(k, ((0, 0, 0), _empty(device)))
        flags = _constants.FLAG_CLOSED if closed[k] else 0
        out.append(_Built(spec.box, flags, dims, values, topology[k], trees[k]))
    return out


def _closed_tables(jobs: list[tuple], check: Any) -> list[tuple]:
    """Per closed mesh ``(vertices, faces, box, edge pairs)``: ``(topology, plane tree or None)`` (see
    :func:`build_tables`), all of ``jobs`` at once: what they read of each face in one launch of
    ``sdf_build.closed_faces_rows`` on the host, NumPy over their concatenated faces for the rest, the plane
    trees' nodes in launches of their own; ``check``: see :func:`_launch_rows`."""
    faces = _Faces([(vertices, faces, pairs) for vertices, faces, _, pairs in jobs], check)
    topology = _pseudo_normal_tables(faces)
    if check is not None:
        check()
    convex = _is_convex(faces, [box for _, _, box, _ in jobs])
    chosen = [j for j in range(len(jobs)) if convex[j]]
    trees: list[tuple | None] = [None] * len(jobs)
    if chosen:
        for j, tree in zip(chosen, _plane_trees([faces.part(j) for j in chosen], check), strict=True):
            trees[j] = tree
    return list(zip(topology, trees, strict=True))


#: Where the closed meshes' tables are built, whatever the world's device (see build_tables).
_HOST = torch.device("cpu")
#: The NumPy steps of a table build run in chunks of at least this many faces, one a thread (below it the
#: per-call overheads of the vectorised passes outweigh a second thread).
_CHUNK_FACES = 1 << 15


def _thread_count() -> int:
    """Threads a table build uses at most: one a core, as many as torch's ops do."""
    return max(1, min(os.cpu_count() or 1, torch.get_num_threads()))


def _chunk_count(weights: list[int]) -> int:
    """How many chunks :func:`_in_chunks` makes of items weighing ``weights`` (faces)."""
    return max(1, min(_thread_count(), len(weights), sum(weights) // _CHUNK_FACES))


def _in_chunks(fn: Any, items: list, weights: list[int], *, background: bool) -> list:
    """``fn(items)`` (a list with one result per item, each item's result independent of the others in the
    list) computed in up to :func:`_chunk_count` runs of consecutive items of about equal weight, side by side
    on threads (NumPy releases the GIL in its passes): the same results as one call. ``background``: the
    threads run at the lowest priority (a :class:`Later` build)."""
    chunks = _chunk_count(weights)
    if chunks == 1:
        return fn(items)
    ends = np.searchsorted(np.cumsum(weights), np.arange(1, chunks) * (sum(weights) / chunks), side="left")
    bounds = [0, *sorted({int(e) + 1 for e in ends} - {0, len(items)}), len(items)]
    pool = _chunk_pool(os.getpid(), chunks, background)
    futures = [pool.submit(fn, items[a:b]) for a, b in itertools.pairwise(bounds)]
    out = []
    for future in futures:
        out.extend(future.result())
    return out


@functools.cache
def _closed_pool(pid: int, background: bool) -> ThreadPoolExecutor:
    # by process id: a forked child inherits the pool object but not its thread
    return ThreadPoolExecutor(
        max_workers=1,
        thread_name_prefix="warpgeo-tables-closed",
        initializer=_yield_cores if background else None,
    )


@functools.cache
def _chunk_pool(pid: int, workers: int, background: bool) -> ThreadPoolExecutor:
    # by process id: a forked child inherits the pool object but not its threads
    return ThreadPoolExecutor(
        max_workers=workers,
        thread_name_prefix="warpgeo-tables-chunk",
        initializer=_yield_cores if background else None,
    )


def _grids(specs: list[_MeshSpec], signed: np.ndarray, device: torch.device, check: Any) -> list[tuple]:
    """``(dims (3,), cell values)`` of each mesh's distance grid, in one launch of ``sdf_build.grid_cells_rows``
    over every cell (values: views of one tensor)."""
    if not specs:
        return []
    if len(specs) > 1 and len(specs) * _GRID_MAX_AXIS**3 > _MAX_BATCH_ROWS:  # one launch's rows are int32
        half = len(specs) // 2
        return _grids(specs[:half], signed[:half], device, check) + _grids(
            specs[half:], signed[half:], device, check
        )
    dims = np.zeros((len(specs), 4), dtype=np.int32)
    sizes = np.zeros((len(specs), 3), dtype=np.float32)
    lowers = np.zeros((len(specs), 3), dtype=np.float32)
    for k, spec in enumerate(specs):
        extent = (spec.box[1] - spec.box[0]).astype(np.float64)
        target = min(_GRID_CELLS, max(_GRID_MIN_CELLS, len(spec.faces)))
        cell = float(np.prod(extent) / target) ** (1.0 / 3.0)
        dims[k, :3] = np.clip(np.round(extent / cell), 1, _GRID_MAX_AXIS).astype(int)
        dims[k, 3] = int(signed[k] and spec.method != "unsigned")
        sizes[k] = (extent / dims[k, :3]).astype(np.float32)
        lowers[k] = spec.box[0]
    first = np.concatenate([[0], np.cumsum(dims[:, :3].astype(np.int64).prod(axis=1))])
    values = torch.empty(int(first[-1]), dtype=torch.float32, device=device)
    ids = np.array([spec.mesh.id for spec in specs], dtype=np.uint64).view(np.int64)
    faces = max(len(spec.faces) for spec in specs)
    _launch_rows(
        build_kernels.BUILD["float32"].grid_cells_rows,
        values.shape[0],
        device=device,
        check=check,
        # a cell costs two BVH queries (closest point, then the ray vote): split it across the cores
        work_per_row=_GRID_QUERY_WORK * max(1, faces.bit_length()),
        mesh_ids=torch.from_numpy(ids).to(device),
        lowers=torch.from_numpy(lowers).to(device),
        sizes=torch.from_numpy(sizes).to(device),
        dims=torch.from_numpy(dims).to(device),
        first=torch.from_numpy(first).to(device),
        out=values,
    )
    return [
        (tuple(int(n) for n in dims[k, :3]), values[int(first[k]) : int(first[k + 1])])
        for k in range(len(specs))
    ]


#: Rows per launch of a kernel on the background thread, between which it checks that its world still lives.
_BACKGROUND_ROWS = 1 << 16


def _launch_rows(kernel: Any, rows: int, *, device: torch.device, check: Any, **args: Any) -> None:
    """:func:`warpgeo._launch.launch_rows` (``check`` None), or on the background thread launches of at most
    :data:`_BACKGROUND_ROWS` rows, ``check()`` before each, handed out in turn to that thread and a second
    one at the lowest priority (:func:`_helper_pool`; its module was loaded by the world's build, on the
    caller's thread)."""
    if check is None:
        _launch.launch_rows(kernel, rows, device=device, **args)
        return
    args.pop("work_per_row", None)
    pool = _helper_pool(True)
    chunk = _BACKGROUND_ROWS if pool is None else min(_BACKGROUND_ROWS, max(256, -(-rows // 8)))
    chunks = iter(range(0, rows, chunk))
    lock = threading.Lock()

    def work_through() -> None:
        while True:
            with lock:
                start = next(chunks, None)
            if start is None:
                return
            check()
            _launch.launch(kernel, min(chunk, rows - start), device=device, row_start=start, **args)

    helper = None if pool is None or rows <= chunk else pool.submit(work_through)
    try:
        work_through()
    finally:
        if helper is not None:
            helper.result()


class _Faces:
    """What the tables of closed meshes ``(vertices, faces, edge pairs)`` (see :func:`edge_pairs`) read of their
    faces, computed once, many meshes' rows side by side (each row as for its mesh alone): ``neighbors`` (F, 3)
    the row of the face across each edge of each face (ab, bc, ca); and in float64 (one launch of
    ``sdf_build.closed_faces_rows`` on the host) each face's unit ``normal`` (F, 3), its plane's offset from
    the origin (``support`` (F,)), its normal times its angle at each corner (``corner_normals`` (3, F, 3)),
    and ``convexity`` (F,): how far the far corner of a neighbour lies above its plane at most."""

    def __init__(self, meshes: list[tuple[np.ndarray, np.ndarray, np.ndarray]], check: Any):
        self.vertex_rows = np.cumsum([0] + [len(v) for v, _, _ in meshes])
        self.face_rows = np.cumsum([0] + [len(f) for _, f, _ in meshes])
        counts = np.diff(self.face_rows)
        self.points = np.concatenate([v for v, _, _ in meshes]).astype(np.float64)
        self.faces = np.concatenate([f for _, f, _ in meshes]).astype(np.int64)
        self.faces += np.repeat(self.vertex_rows[:-1], counts)[:, None]
        neighbors = np.full((3, len(self.faces)), -1, dtype=np.int64)
        for j, (_, mesh_faces, pairs) in enumerate(meshes):
            # each undirected edge is a pair of directed edges (see edge_pairs): directed edge i is face
            # i % F's edge i // F
            num_faces, first_row = len(mesh_faces), int(self.face_rows[j])
            (edge, face), (other_edge, other_face) = (np.divmod(pairs[:, i], num_faces) for i in (0, 1))
            neighbors[edge, first_row + face] = first_row + other_face
            neighbors[other_edge, first_row + other_face] = first_row + face
        self.neighbors = np.ascontiguousarray(neighbors.T)
        count = len(self.faces)
        normal = torch.empty((count, 3), dtype=torch.float64, device=_HOST)
        support = torch.empty(count, dtype=torch.float64, device=_HOST)
        corner_normals = torch.empty((3, count, 3), dtype=torch.float64, device=_HOST)
        convexity = torch.empty(count, dtype=torch.float64, device=_HOST)
        _launch_rows(
            build_kernels.BUILD["float32"].closed_faces_rows,
            count,
            device=_HOST,
            check=check,
            work_per_row=8,
            points=_dense(np.concatenate([v for v, _, _ in meshes]).astype(np.float32), _HOST),
            faces=_dense(self.faces.astype(np.int32), _HOST),
            neighbors=_dense(self.neighbors.astype(np.int32), _HOST),
            normals=normal,
            supports=support,
            corner_normals=corner_normals.view(3 * count, 3),
            convexity=convexity,
        )
        self.normal, self.support, self.corner_normals, self.convexity = (
            t.numpy() for t in (normal, support, corner_normals, convexity)
        )

    def part(self, j: int) -> _Part:
        """Mesh ``j``'s rows (views; faces numbered in the mesh)."""
        v0, v1 = int(self.vertex_rows[j]), int(self.vertex_rows[j + 1])
        f0, f1 = int(self.face_rows[j]), int(self.face_rows[j + 1])
        return _Part(self.points[v0:v1], self.faces[f0:f1] - v0, self.normal[f0:f1], self.support[f0:f1])


class _Part(NamedTuple):
    """One mesh's rows of a :class:`_Faces`: its float64 points, its faces, their unit normals and their planes'
    offsets from the origin (``n . a`` for a corner ``a``)."""

    points: np.ndarray
    faces: np.ndarray
    normal: np.ndarray
    support: np.ndarray


#: The work (in launch_rows' units) of one BVH query per level of the tree: enough for a grid of a mesh of a
#: few hundred faces to be split across the cores.
_GRID_QUERY_WORK = 8


def _is_cuboid(vertices: np.ndarray, faces: np.ndarray, box: np.ndarray) -> bool:
    """Whether the mesh is exactly the surface of its box ``(lower, upper)`` (with positive extents), wound
    outwards: 12 faces whose vertices all lie on corners of the box (by coordinates: duplicated vertices are
    fine), two on each of its six sides, which split that side along a diagonal (together they hold its four
    corners, sharing two opposite ones), each with its normal pointing out of the box. Such a mesh is closed
    and does not intersect itself, and its distance is the box's."""
    lower, upper = box.astype(np.float64)
    if len(faces) != 12 or not (upper > lower).all():
        return False
    tri = vertices.astype(np.float64)[faces]  # (12, 3 corners, 3 axes)
    at_upper = tri == upper
    if not ((tri == lower) | at_upper).all():
        return False
    normals = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    sides = []
    for axis in range(3):
        others = [a for a in range(3) if a != axis]
        for outward, on in ((-1.0, ~at_upper[..., axis]), (1.0, at_upper[..., axis])):
            members = np.flatnonzero(on.all(axis=1))  # the faces lying in this side's plane
            if len(members) != 2 or not (normals[members, axis] * outward > 0).all():
                return False
            # each vertex as its corner of the side (its two other coordinates: lower 0 / upper 1)
            corners = [{tuple(c) for c in at_upper[f][:, others].tolist()} for f in members]
            if len(corners[0]) != 3 or len(corners[1]) != 3 or len(corners[0] | corners[1]) != 4:
                return False
            first, second = sorted(corners[0] & corners[1])
            if first[0] == second[0] or first[1] == second[1]:  # they share an edge, not a diagonal
                return False
            sides.extend(members.tolist())
    return sorted(sides) == list(range(12))


def edge_pairs(meshes: list[tuple[np.ndarray, int]]) -> list[np.ndarray | None]:
    """For each mesh ``(faces, number of vertices)`` that is watertight and consistently wound, its edges as
    pairs of directed edges (``(3F / 2, 2)``: directed edge ``i`` is face ``i % F``'s edge ``i // F``, edges
    ab, bc, ca; each undirected edge once, in no particular order); None for any other mesh.

    Closed (see :func:`build_tables`): every edge in exactly two faces, with opposite orientations, no
    sliver face (the caller has ruled them out), and no two faces without a shared vertex intersecting
    (:func:`faces_meet`). Inside is then well defined, and the ray vote, the winding number and the
    pseudo-normal all compute it.

    All meshes at once, on the host's cores: each vertex's list of faces (``sdf_build.incident_faces_rows``),
    then for each directed edge ``a -> b`` the one face that runs ``b -> a``, looked for in the shorter of the
    two vertices' lists (``sdf_build.edge_partners_rows``: O(F) for any mesh, fans included). The pairs
    depend on the faces alone, not on the lists' order."""
    out: list[np.ndarray | None] = [None] * len(meshes)
    even = [k for k, (faces, _) in enumerate(meshes) if len(faces) and (3 * len(faces)) % 2 == 0]
    if not even:
        return out
    counts = np.array([len(meshes[k][0]) for k in even], dtype=np.int64)
    vertex_rows = np.cumsum([0] + [meshes[k][1] for k in even])
    face_rows = np.concatenate([[0], np.cumsum(counts)])
    if 3 * face_rows[-1] >= _launch.INT32_LIMIT or vertex_rows[-1] >= _launch.INT32_LIMIT:  # int32 edges
        if len(even) == 1:  # one mesh beyond them (Warp's own int32 indices are too): not paired here
            return out
        half = len(even) // 2
        for part in (even[:half], even[half:]):
            for k, found in zip(part, edge_pairs([meshes[k] for k in part]), strict=True):
                out[k] = found
        return out
    faces = np.concatenate([meshes[k][0] for k in even]).astype(np.int64)
    faces += np.repeat(vertex_rows[:-1], counts)[:, None]
    degree = np.bincount(faces.reshape(-1), minlength=int(vertex_rows[-1]))
    first = np.concatenate([[0], np.cumsum(degree)]).astype(np.int32)
    kernels = build_kernels.BUILD["float32"]
    _launch._load(kernels.edge_partners_rows, _HOST)  # on this thread, never by two at once
    face_rows_t = _dense(faces.astype(np.int32), _HOST)
    first_t = torch.from_numpy(first)
    incident = torch.full((int(first[-1]),), -1, dtype=torch.int32)
    # one launch, not split over threads: Warp's CPU atomics are plain read-modify-writes (one launch runs its
    # rows one after another)
    _launch.launch(
        kernels.incident_faces_rows,
        len(faces),
        device=_HOST,
        faces=face_rows_t,
        first=first_t,
        cursor=torch.zeros(len(degree), dtype=torch.int32),
        incident=incident,
        row_start=0,
    )
    partner = torch.empty(3 * len(faces), dtype=torch.int32)
    _launch.launch_rows(
        kernels.edge_partners_rows,
        len(faces),
        device=_HOST,
        work_per_row=8,
        faces=face_rows_t,
        first=first_t,
        incident=incident,
        partner=partner,
    )
    partner = partner.numpy().astype(np.int64)
    for j, k in enumerate(even):
        f0, f1 = int(face_rows[j]), int(face_rows[j + 1])
        mine = partner[3 * f0 : 3 * f1]
        if (mine < 3 * f0).any() or (mine >= 3 * f1).any():  # unpaired (-1), or paired out of the mesh
            continue
        edge = np.arange(3 * (f1 - f0))
        mine = mine - 3 * f0
        here = edge[edge < mine]  # each undirected edge once, from its lower directed edge
        num_faces = f1 - f0
        # edge 3 f + k is directed edge k F + f
        out[k] = np.stack(
            [(here % 3) * num_faces + here // 3, (mine[here] % 3) * num_faces + mine[here] // 3], axis=1
        )
    return out


def faces_meet(
    specs: list[_MeshSpec], device: torch.device, check: Any = None, *, split_fans: bool = True
) -> list[bool]:
    """Whether, in each mesh, two faces that share no vertex intersect (or touch, or come too near to tell):
    one launch of ``sdf_build.mesh_intersections_rows`` over every face of every mesh; ``check``: see
    :func:`_launch_rows`.

    A mesh with a fan of :data:`_FAN_SPLIT_DEGREE` faces or more around one vertex (a cone's apex and base
    centre, a cylinder's cap centres: every box of a fan holds its hub, so the box query of each face returns
    every other face of the fan, and a cone's side and base fans every pair of each other's) is checked by
    ``sdf_build.fan_intersections_rows`` instead (``split_fans``; False: every mesh the old way, for the
    benchmark): the faces of a fan share its hub, so no pair of them is even looked at, and the pairs of two
    fans are found through the boxes of the faces' pieces, which shrink towards the rims (see
    :func:`_fan_plan`). Both test every pair they find with the same ``triangles_meet``."""
    if not specs:
        return []
    first = np.concatenate([[0], np.cumsum([len(spec.faces) for spec in specs])]).astype(np.int64)
    if first[-1] > _MAX_BATCH_ROWS and len(specs) > 1:  # one launch's rows are int32: in parts
        half = len(specs) // 2
        return faces_meet(specs[:half], device, check, split_fans=split_fans) + faces_meet(
            specs[half:], device, check, split_fans=split_fans
        )
    fans = _fan_meshes(specs) if split_fans else np.zeros(len(specs), dtype=bool)
    out = np.zeros(len(specs), dtype=bool)
    plain = np.flatnonzero(~fans)
    if len(plain):
        out[plain] = _faces_meet_plain([specs[k] for k in plain], device, check)
    if fans.any():
        chosen = np.flatnonzero(fans)
        out[chosen] = _faces_meet_fans([specs[k] for k in chosen], device, check)
    return out.tolist()


def _faces_meet_plain(specs: list[_MeshSpec], device: torch.device, check: Any) -> np.ndarray:
    """:func:`faces_meet` by ``mesh_intersections_rows``: every face's box queries its mesh's BVH."""
    first = np.concatenate([[0], np.cumsum([len(spec.faces) for spec in specs])]).astype(np.int64)
    found = torch.zeros(len(specs), dtype=torch.int32, device=device)
    ids = np.array([spec.mesh.id for spec in specs], dtype=np.uint64).view(np.int64)
    faces = max(len(spec.faces) for spec in specs)
    _launch_rows(
        build_kernels.BUILD["float32"].mesh_intersections_rows,
        int(first[-1]),
        device=device,
        check=check,
        # a face costs a box query of the BVH (a few dozen nodes and faces)
        work_per_row=_GRID_QUERY_WORK * max(1, faces.bit_length()),
        mesh_ids=torch.from_numpy(ids).to(device),
        first=torch.from_numpy(first).to(device),
        found=found,
    )
    return found.cpu().numpy() != 0


#: A vertex of this many faces or more is a hub: its faces form a group of :func:`_fan_plan` (at most
#: :data:`_MAX_HUBS` hubs a mesh, those of the most faces).
_HUB_DEGREE = 64
_MAX_HUBS = 8
#: A mesh with a vertex of this many faces or more is checked by fans (:func:`faces_meet`). Below it, the
#: shared-vertex pairs of a fan cost less than building the pieces' BVH (a cylinder of 128 sections: 0.3 ms).
_FAN_SPLIT_DEGREE = 256


def _degrees(specs: list[_MeshSpec]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(faces, vertex_first, degree)``: every mesh's faces (int64) with its vertices numbered after the
    earlier meshes' (``vertex_first``: each mesh's first vertex, then the total), and each vertex's count of
    face corners."""
    vertex_first = np.concatenate([[0], np.cumsum([len(spec.vertices) for spec in specs])]).astype(np.int64)
    faces = np.concatenate(
        [spec.faces.astype(np.int64).reshape(-1, 3) + vertex_first[k] for k, spec in enumerate(specs)]
    )
    return faces, vertex_first, np.bincount(faces.reshape(-1), minlength=int(vertex_first[-1]))


def _fan_meshes(specs: list[_MeshSpec]) -> np.ndarray:
    """Which meshes have a vertex of :data:`_FAN_SPLIT_DEGREE` faces or more (a mesh of fewer faces has
    none; a 1.3M-face mesh takes 7 ms)."""
    return np.array(
        [
            len(spec.faces) >= _FAN_SPLIT_DEGREE
            and int(np.bincount(spec.faces.reshape(-1)).max()) >= _FAN_SPLIT_DEGREE
            for spec in specs
        ],
        dtype=bool,
    )


def _fan_plan(specs: list[_MeshSpec]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The groups of :func:`_faces_meet_fans`: ``(face_group (F,) int32, group_first (M + 1,) int64, stored
    (S,) int64)``. Each mesh's hubs (vertices of :data:`_HUB_DEGREE` faces or more, at most :data:`_MAX_HUBS`
    of them, by most faces) get global group ids in order, mesh by mesh (mesh ``k``'s are ``[group_first[k],
    group_first[k + 1])``, by most faces first); a face belongs to the group of its corner that is the first
    hub of its mesh (every face of a group holds its hub), -1 if none is. ``stored``: the face rows of every
    group, whose pieces are the BVH's items."""
    faces, vertex_first, degree = _degrees(specs)
    hubs = np.flatnonzero(degree >= _HUB_DEGREE)
    mesh = np.searchsorted(vertex_first, hubs, side="right") - 1
    order = np.lexsort((hubs, -degree[hubs], mesh))  # by mesh, then most faces first
    hubs, mesh = hubs[order], mesh[order]
    run_start = np.searchsorted(mesh, mesh, side="left")
    keep = np.arange(len(hubs)) - run_start < _MAX_HUBS
    hubs, mesh = hubs[keep], mesh[keep]
    group_of_vertex = np.full(int(vertex_first[-1]), np.iinfo(np.int32).max, dtype=np.int64)
    group_of_vertex[hubs] = np.arange(len(hubs))
    face_group = group_of_vertex[faces].min(axis=1)
    face_group[face_group == np.iinfo(np.int32).max] = -1
    group_first = np.searchsorted(mesh, np.arange(len(specs) + 1), side="left").astype(np.int64)
    return face_group.astype(np.int32), group_first, np.flatnonzero(face_group >= 0).astype(np.int64)


def _faces_meet_fans(specs: list[_MeshSpec], device: torch.device, check: Any) -> np.ndarray:
    """:func:`faces_meet` by fans: the stored pieces of every group's faces (``fan_pieces_rows``), one grouped
    BVH of them (a group a subtree), then ``fan_intersections_rows`` over every face."""
    wp = _warp.warp()
    kernels = build_kernels.BUILD["float32"]
    first = np.concatenate([[0], np.cumsum([len(spec.faces) for spec in specs])]).astype(np.int64)
    face_group, group_first, stored = _fan_plan(specs)
    if not len(stored):  # no hub (cannot happen: each mesh has a vertex of _FAN_SPLIT_DEGREE faces)
        return _faces_meet_plain(specs, device, check)
    pieces = int(build_kernels.STORED_PIECES)
    items = pieces * len(stored)
    ids = np.array([spec.mesh.id for spec in specs], dtype=np.uint64).view(np.int64)
    ids = torch.from_numpy(ids).to(device)
    first_t = torch.from_numpy(first).to(device)
    lowers = torch.zeros((items, 3), dtype=torch.float32, device=device)
    uppers = torch.zeros((items, 3), dtype=torch.float32, device=device)
    _launch_rows(
        kernels.fan_pieces_rows,
        len(stored),
        device=device,
        check=check,
        work_per_row=_GRID_QUERY_WORK,
        mesh_ids=ids,
        first=first_t,
        stored=torch.from_numpy(stored).to(device),
        lowers=lowers,
        uppers=uppers,
    )
    if check is not None:
        check()
    groups = torch.from_numpy(np.repeat(face_group[stored], pieces)).to(device)
    # the tensors live until the launch below is done: the BVH and its arrays view them
    bvh = wp.Bvh(
        wp.from_torch(lowers, dtype=wp.vec3),
        wp.from_torch(uppers, dtype=wp.vec3),
        groups=wp.from_torch(groups, dtype=wp.int32),
    )
    local = stored - first[np.searchsorted(first, stored, side="right") - 1]  # each stored face in its mesh
    item_face = np.repeat(local, pieces).astype(np.int32)
    found = torch.zeros(len(specs), dtype=torch.int32, device=device)
    faces = max(len(spec.faces) for spec in specs)
    _launch_rows(
        kernels.fan_intersections_rows,
        int(first[-1]),
        device=device,
        check=check,
        work_per_row=_GRID_QUERY_WORK * max(1, faces.bit_length()) * 4,
        mesh_ids=ids,
        first=first_t,
        face_group=torch.from_numpy(face_group).to(device),
        group_first=torch.from_numpy(group_first).to(device),
        bvh=bvh.id,
        item_face=torch.from_numpy(item_face).to(device),
        found=found,
    )
    return found.cpu().numpy() != 0


@functools.cache
def _side_pool(pid: int) -> ThreadPoolExecutor:
    # by process id: a forked child inherits the pool object but not its thread
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="warpgeo-mesh-prep", initializer=_yield_cores)


def _yield_cores() -> None:
    """Run the background builds at the lowest CPU priority (Linux: a thread's own nice value), so that they
    take the cores the caller's queries leave idle rather than slowing those queries down."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or not allowed: the default priority
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def _dense(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` as a row-major tensor on ``device``, also when it is empty (NumPy gives an empty array zero
    strides, which a Warp vector array refuses)."""
    out = torch.empty(array.shape, dtype=torch.from_numpy(array).dtype, device=device)
    return out.copy_(torch.from_numpy(array))


def _pseudo_normal_tables(faces: _Faces) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per mesh of ``faces`` (closed), ``(face_neighbors (F, 3) int32, vertex_normals (V, 3) float64)``: the face
    across each edge of each face (ab, bc, ca) and each vertex's angle-weighted normal (the sum of the unit
    normals of its faces, each times the face's angle at the vertex), from which the kernels take the side of
    a point whose closest point lies on an edge or a vertex. The normals of all meshes are summed at once,
    each vertex's terms in the order of its mesh alone (corner by corner, face by face)."""
    num_vertices = int(faces.vertex_rows[-1])
    vertex_normals = np.zeros((num_vertices, 3))
    for k in range(3):
        for axis in range(3):
            vertex_normals[:, axis] += np.bincount(
                faces.faces[:, k], weights=faces.corner_normals[k, :, axis], minlength=num_vertices
            )
    out = []
    for j in range(len(faces.face_rows) - 1):
        f0, f1 = int(faces.face_rows[j]), int(faces.face_rows[j + 1])
        neighbors = (faces.neighbors[f0:f1] - f0).astype(np.int32)
        out.append((neighbors, vertex_normals[int(faces.vertex_rows[j]) : int(faces.vertex_rows[j + 1])]))
    return out


#: Faces per leaf of a plane tree.
_PLANE_LEAF = 8
#: Quickselect rounds of a plane-tree split beyond which it heap-sorts the node's rest (negative: the
#: kernel's ``2 log2 n + 16``; tests set 0: every node heap-sorted, the same tables).
_SPLIT_ROUNDS = -1
#: Relative tolerance of the convexity test (of the mesh's extent): coplanar neighbours pass.
_CONVEX_TOL = 1.0e-6
#: Radians added to each cone's half-angle in a plane tree (float32 rounds a cosine near 1 by ~3.5e-4 rad).
_CONE_PAD = 1.0e-3


def _is_convex(faces: _Faces, boxes: list[np.ndarray]) -> np.ndarray:
    """Per closed mesh of ``faces`` (``boxes``: its box), whether it gets a plane tree: at least ``2 *
    _PLANE_LEAF`` faces, convex at every edge (the far corner of each neighbour face on the inner side of the
    face's plane, up to rounding) and one surface: Euler characteristic ``V - E + F = V - F / 2`` of 2 (its
    vertices counted where a face uses them). Each part of a closed mesh that does not intersect itself and is
    convex at every edge is the surface of a convex solid, a sphere's topology (characteristic 2), so ``k``
    parts make ``2k``. Only decides whether a mesh gets a plane tree: the kernels' use of the tree is exact on
    any mesh (see ``warpgeo._kernels.sdf``). All meshes at once."""
    face_rows, vertex_rows = faces.face_rows, faces.vertex_rows
    counts = np.diff(face_rows)
    tol = np.array([_CONVEX_TOL * float(np.linalg.norm(box[1] - box[0])) for box in boxes])
    convex = (np.maximum.reduceat(faces.convexity, face_rows[:-1]) <= tol) & (counts >= 2 * _PLANE_LEAF)
    if convex.any():
        used = np.bincount(faces.faces.reshape(-1), minlength=int(vertex_rows[-1])) > 0
        used_rows = np.concatenate([[0], np.cumsum(used)])
        convex &= 2 * (used_rows[vertex_rows[1:]] - used_rows[vertex_rows[:-1]]) - counts == 4
    return convex


def _plane_tree(geometry: _Part) -> tuple:
    """The plane tree of one convex closed mesh (see :func:`_plane_trees`)."""
    return _plane_trees([geometry])[0]


def _plane_trees(parts: list[_Part], check: Any = None) -> list[tuple]:
    """The plane trees of convex closed meshes (:func:`_is_convex`), each ``(nodes (1 + 2K, 4) float32, links
    (K, 3) int32, planes (F, 4) float32, faces (F,) int32)``; ``check``: see :func:`_launch_rows`.

    Each face's plane ``(n, b)`` (unit normal, ``b = n . (a - o)`` for a corner ``a`` and the origin ``o``, the
    box centre) in leaf order, with the face's index. The K nodes in depth-first order split the faces by
    their normals: a node of ``n > _PLANE_LEAF`` faces gives its first child the ``n // 2`` first in the order
    of the normals' component of widest spread (max - min; the lowest axis of equal spreads; ties by face
    index) and its second the rest; a leaf's faces are in the order of their indices. Node ``k`` holds rows
    ``1 + 2k`` = (cone axis ``u``: the normalised sum of its normals, the least ``b`` below it) and ``2 + 2k``
    = (cos, sin of the cone's half-angle: the largest angle between ``u`` and a normal below, plus
    :data:`_CONE_PAD`), and link ``k`` = (the node after its subtree, first plane row, plane count; 0 for an
    inner node). Row 0 is (``o``, the margin that covers the float32 rounding of the kernels' bounds). For a
    point ``p = o + w``, every face below node ``k`` is at least ``b_min - max over the cone of n . w`` from
    it.

    The nodes' rows are laid out level by level (NumPy over the nodes of a level, every mesh at once); then
    one launch of ``sdf_build.plane_tree_split_rows`` a level puts each node's faces in its children's rows
    (every node of the level side by side, in place), and one of ``sdf_build.plane_tree_nodes_rows`` over
    every node computes the cones and least offsets, on the host's cores."""
    if sum(len(part.faces) for part in parts) > _MAX_BATCH_ROWS and len(parts) > 1:  # int32 rows: in parts
        half = len(parts) // 2
        return _plane_trees(parts[:half], check) + _plane_trees(parts[half:], check)
    if check is not None:
        check()
    sizes: dict[int, int] = {}

    def subtree(n: int) -> int:  # the nodes of the subtree over n faces
        found = sizes.get(n)
        if found is None:
            found = 1 if n <= _PLANE_LEAF else 1 + subtree(n // 2) + subtree(n - n // 2)
            sizes[n] = found
        return found

    def subtrees(counts: np.ndarray) -> np.ndarray:
        values, inverse = np.unique(counts, return_inverse=True)
        return np.array([subtree(int(n)) for n in values], dtype=np.int64)[inverse.reshape(-1)]

    counts = np.array([len(part.faces) for part in parts], dtype=np.int64)
    row_first = np.concatenate([[0], np.cumsum(counts)])
    node_first = np.concatenate([[0], np.cumsum(subtrees(counts))])
    num_nodes = int(node_first[-1])
    origins, offsets = [], []
    for part in parts:
        origin = (
            ((part.points.min(axis=0) + part.points.max(axis=0)) / 2).astype(np.float32).astype(np.float64)
        )
        origins.append(origin)
        offsets.append(part.support - part.normal @ origin)  # n . (a - o)
    # the nodes, a level at a time: first row and face count of every node (by depth-first index), links
    starts = np.zeros(num_nodes, dtype=np.int64)
    sizes_of = np.zeros(num_nodes, dtype=np.int64)
    links = np.zeros((num_nodes, 3), dtype=np.int64)
    levels = []  # the nodes each launch of the splits takes: a node of <= 8 leaves' faces splits its subtree
    level = (row_first[:-1], counts, node_first[:-1], np.zeros(len(counts), dtype=bool))
    while len(level[0]):
        start, n, k, below = level  # below: in the subtree of a node of <= 8 leaves' faces
        starts[k], sizes_of[k] = start, n
        levels.append(k[~below])
        leaf = n <= _PLANE_LEAF
        links[k[leaf]] = np.stack([k[leaf] + 1, start[leaf], n[leaf]], axis=1)
        start, n, k, below = start[~leaf], n[~leaf], k[~leaf], below[~leaf]
        links[k, 0] = k + subtrees(n)
        half = n // 2
        below = below | (n <= 8 * _PLANE_LEAF)
        level = (
            np.concatenate([start, start + half]),
            np.concatenate([half, n - half]),
            np.concatenate([k + 1, k + 1 + subtrees(half)]),
            np.concatenate([below, below]),
        )
    levels = [k for k in levels if len(k)]
    # the faces (their unit normals and rows) put in leaf order by the levels' splits, in place
    normals = torch.from_numpy(np.concatenate([part.normal for part in parts]))  # a copy: in place
    faces = torch.arange(int(row_first[-1]), dtype=torch.int32, device=_HOST)
    split = build_kernels.BUILD["float32"].plane_tree_split_rows
    for k in levels:
        if check is not None:
            check()
        _launch_rows(
            split,
            len(k),
            device=_HOST,
            check=check,
            work_per_row=max(1, int(row_first[-1]) // len(k)),
            normals=normals,
            faces=faces,
            starts=_dense(starts[k], _HOST),
            counts=_dense(sizes_of[k], _HOST),
            leaf=_PLANE_LEAF,
            round_limit=_SPLIT_ROUNDS,
        )
    offset = torch.from_numpy(np.concatenate(offsets))[faces.long()]
    faces = faces.numpy()
    axes = torch.zeros((num_nodes, 3), dtype=torch.float64, device=_HOST)
    least = torch.ones(num_nodes, dtype=torch.float64, device=_HOST)
    lowest = torch.zeros(num_nodes, dtype=torch.float64, device=_HOST)
    depth = max(1, int(counts.max()).bit_length() - _PLANE_LEAF.bit_length() + 1)
    _launch_rows(
        build_kernels.BUILD["float32"].plane_tree_nodes_rows,
        num_nodes,
        device=_HOST,
        check=check,
        # a node reads its faces twice; the average node (of ~F / 4) holds ~4 faces per level below it
        work_per_row=8 * depth,
        normals=normals,
        offsets=offset,
        starts=_dense(starts, _HOST),
        counts=_dense(sizes_of, _HOST),
        axes=axes,
        least_cosines=least,
        lowest=lowest,
    )
    axes, least, lowest, normals, offset = (t.numpy() for t in (axes, least, lowest, normals, offset))
    # the cone's half-angle, widened far beyond the float32 rounding of its cosine and sine
    angles = np.minimum(math.pi, np.arccos(np.clip(least, -1.0, 1.0)) + _CONE_PAD)
    out = []
    for j, part in enumerate(parts):
        r0, r1, n0, n1 = (int(x) for x in (row_first[j], row_first[j + 1], node_first[j], node_first[j + 1]))
        points = part.points
        scale = float(np.abs(points).max() + np.linalg.norm(points.max(axis=0) - points.min(axis=0)))
        table = np.zeros((1 + 2 * (n1 - n0), 4), dtype=np.float32)
        table[0] = (*origins[j], 1.0e-5 * scale)
        table[1::2, :3] = axes[n0:n1]
        table[1::2, 3] = lowest[n0:n1]
        table[2::2, 0] = np.cos(angles[n0:n1])
        table[2::2, 1] = np.sin(angles[n0:n1])
        mesh_links = links[n0:n1].copy()
        mesh_links[:, 0] -= n0
        mesh_links[:, 1] -= np.where(mesh_links[:, 2] > 0, r0, 0)
        planes = np.empty((r1 - r0, 4), dtype=np.float32)
        planes[:, :3], planes[:, 3] = normals[r0:r1], offset[r0:r1]
        out.append((table, mesh_links.astype(np.int32), planes, faces[r0:r1] - r0))
    return out


# the probe: a unit cube without its +x and +y faces. Seen from its centre the four remaining faces make a
# winding number of 4/6 (inside), while the +x and +y rays of the ray vote escape (outside).
_PROBE_VERTICES = np.array(
    [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], dtype=np.float32
)
_PROBE_FACES = np.array(
    [[0, 3, 2], [0, 2, 1], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4], [0, 4, 7], [0, 7, 3]], dtype=np.int32
)


@functools.cache
def _winding_probe_result(device: torch.device) -> float:
    wp = _warp.warp()
    kernel = build_kernels.WINDING_PROBE["float32"].winding_probe
    wdev = _warp.warp_device(device)
    probe = wp.Mesh(
        points=wp.array(_PROBE_VERTICES, dtype=wp.vec3, device=wdev),
        indices=wp.array(_PROBE_FACES.reshape(-1), dtype=wp.int32, device=wdev),
        support_winding_number=True,
    )
    if device.type == "cuda":
        wp.synchronize_device(wdev)
    out = torch.zeros(1, dtype=torch.float32, device=device)
    _launch.launch(kernel, 1, device=device, mesh=probe.id, p=wp.vec3(0.5, 0.5, 0.5), out_sign=out)
    return float(out.item())


def _check_winding_support(device: torch.device) -> None:
    """Raise unless Warp really classifies by winding number on ``device`` (it falls back silently)."""
    if _winding_probe_result(device) >= 0.0:
        raise RuntimeError(
            "sign_method='winding': this Warp build classified a winding-number probe with the ray vote "
            "(winding-number support did not take); use sign_method='ray' or another warp-lang version"
        )
