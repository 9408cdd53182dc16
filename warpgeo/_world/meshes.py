"""What a world builds of each mesh before its first query: its Warp mesh (a BVH, :func:`_build_meshes`), the
per-face checks (slivers, whether its edges may pair up: :func:`face_checks`), the cuboid test, and the
exact closed-mesh check: edge pairs (:func:`edge_pairs`) and whether two faces that share no vertex meet
(:func:`faces_meet`, with hub vertices' fans split, :func:`_faces_meet_fans`). :class:`_MeshSpec` is what a
table build (:mod:`warpgeo._world.tables`) reads of one mesh; ``warpgeo._launch.launch_rows``' ``between`` the launches of a build
that may run on the background thread (stopping between chunks once its world is gone)."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import Any

import numpy as np
import torch

from .. import _constants, _launch, _threads, _warp
from .._kernels import build_checks, build_meet, build_pairs


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
    """``(Warp mesh, may be closed, its edges may pair up, edge pairs or None, has slivers)`` of each new mesh
    ``(vertices, faces, winding, where)`` (may be closed: its edges may pair up and it has no sliver; see
    :func:`_face_checks`): the per-face checks of all of them in one launch (:func:`face_checks`), then their
    BVHs (on the CPU in runs of meshes on threads, :func:`_in_chunks`: Warp builds a host BVH with the GIL
    released) and, side by side with them where they leave a core free (from :data:`_CHUNK_FACES` faces),
    the edge pairs of those that may be closed and are no cuboid (:func:`edge_pairs`, as a :class:`_Pairing`
    that the table build waits for; :data:`_NOT_PAIRED` where not looked for). A cuboid's faces are halves of its box's sides: none
    is a sliver, and it launches nothing."""
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
    for k, (vertices, faces, _, where) in enumerate(arrays):
        if slivers[k] == len(faces) and not _has_area(vertices, faces):
            raise ValueError(
                f"{where}: every face has zero area, so the mesh has no surface to measure; got {len(faces)} "
                "degenerate faces"
            )

    # the edge pairs of the meshes that may be closed (NumPy) on a thread of their own, side by side with the
    # BVH builds (Warp), where those leave a core free and the pairs are worth a thread; else the table build
    # finds them (see build_tables)
    closable = [k for k in range(len(arrays)) if slivers[k] == 0 and pairs_up[k] and not cuboid[k]]
    weights = [len(arrays[k][1]) for k in closable]
    spare = (
        device.type != "cpu" or _threads._chunk_count([len(a[1]) for a in arrays]) < _threads._thread_count()
    )
    pairing = None
    if spare and sum(weights) >= _threads._CHUNK_FACES:
        meshes = [(arrays[k][1], len(arrays[k][0])) for k in closable]
        pairing = _threads.pool("warpgeo-bvh", 2).submit(edge_pairs, meshes)

    def build(k: int) -> Any:
        v0, v1, f0, f1 = (
            int(x) for x in (vertex_rows[k], vertex_rows[k + 1], face_rows[k], face_rows[k + 1])
        )
        return _warp_mesh(points[v0:v1], indices[3 * f0 : 3 * f1], arrays[k][2], arrays[k][3])

    # on the CPU, runs of meshes of about equal faces on threads (Warp builds a host BVH with the GIL released)
    if device.type == "cpu":
        built = _threads._in_chunks(
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
        (
            mesh,
            slivers[k] == 0 and pairs_up[k],
            bool(pairs_up[k]),
            pairs[k],
            bool(slivers[k] > 0) and slivers_matter(*arrays[k][:2]),
        )
        for k, mesh in enumerate(built)
    ]


def slivers_matter(vertices: np.ndarray, faces: np.ndarray) -> bool:
    """Whether skipping a mesh's slivers (the faces Warp's closest-point queries skip) could move a distance by
    more than a few float32 roundings of its vertices: False where every sliver's longest edge is an edge of a
    face that is no sliver and its height onto that edge is at most ``2**-22`` of the mesh's largest
    coordinate (every point of a triangle lies within that height of its longest edge): a degenerate face
    of a mesh, which costs nothing to skip. Else the mesh gets ``FLAG_SLIVERS`` (its queries look at every
    face). NumPy, for meshes with slivers only; a face counts as a sliver here from twice Warp's threshold
    (float32 rounding may differ), as a face that is no sliver only above it."""
    v = np.asarray(vertices, dtype=np.float32)
    p, q, r = (v[faces[:, k]] for k in range(3))
    e0, e1, e2 = q - p, r - p, r - q
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ratio = np.linalg.norm(np.cross(e0, e1), axis=1) / (
            (e0 * e0).sum(1) + (e1 * e1).sum(1) + (e2 * e2).sum(1)
        )
    thin = ~(ratio >= 2 * _SLIVER_RATIO)
    if not thin.any():
        return False
    solid = faces[~thin].astype(np.int64)
    n = np.int64(len(v))
    edges = np.concatenate(
        [
            np.minimum(solid[:, i], solid[:, (i + 1) % 3]) * n
            + np.maximum(solid[:, i], solid[:, (i + 1) % 3])
            for i in range(3)
        ]
    )
    mine = faces[thin].astype(np.int64)
    a, b, c = (v[mine[:, k]].astype(np.float64) for k in range(3))
    lengths = np.stack(
        [np.linalg.norm(b - a, axis=1), np.linalg.norm(c - b, axis=1), np.linalg.norm(a - c, axis=1)], 1
    )
    longest = lengths.argmax(axis=1)
    span = lengths.max(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        height = np.where(span > 0, np.linalg.norm(np.cross(b - a, c - a), axis=1) / span, 0.0)
    rows = np.arange(len(mine))
    i, j = mine[rows, longest], mine[rows, (longest + 1) % 3]
    shared = np.isin(np.minimum(i, j) * n + np.maximum(i, j), edges)
    shared |= (span == 0) & np.isin(i, solid)  # all three corners at one point: a vertex of a face
    covered = shared & (height <= 2.0**-22 * float(np.abs(v).max()))
    return not bool(covered.all())


def _has_area(vertices: np.ndarray, faces: np.ndarray) -> bool:
    """Whether some face of a mesh whose every face is a sliver has an area (float64, of its float32
    corners): then it is measured (``FLAG_SLIVERS``), else refused."""
    v = np.asarray(vertices, dtype=np.float32).astype(np.float64)
    p, q, r = (v[faces[:, k]] for k in range(3))
    return bool((np.abs(np.cross(q - p, r - p)).max(axis=1) > 0).any())


#: Warp's sliver threshold (``warpgeo._kernels.build_checks.SLIVER_RATIO``).
_SLIVER_RATIO = 1.0e-6


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
    points: torch.Tensor,
    indices: torch.Tensor,
    vertex_rows: np.ndarray,
    face_rows: np.ndarray,
    device,
    *,
    split: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """``(slivers (K,) int64, pairs_up (K,) bool)`` of K meshes whose vertices and faces are concatenated in
    ``points`` / ``indices`` (mesh ``k``: vertex rows ``vertex_rows[k:k + 2]``, face rows ``face_rows[k:k +
    2]``, its faces indexing its own vertices), in one launch of ``build_checks.face_checks_rows`` over all their
    faces: how many faces Warp's queries skip as slivers, and whether the directed edges may pair up with
    reversed ones (False for an open mesh: a boundary edge has no reverse), from one O(F) hash sum per mesh:
    equal multisets of directed and reversed edges have equal sums of a hash ``h(a) g(b)`` of each edge ``a ->
    b`` (wrapping uint64 arithmetic). True for a closed mesh; then :func:`edge_pairs` decides, exactly. One
    host read. ``split`` False: one launch on the calling thread however many the faces (beside a BVH
    build, :func:`build_beside`)."""
    num_faces = int(face_rows[-1])
    slivers = torch.empty(num_faces, dtype=torch.int32, device=device)
    edge_hash = torch.empty(num_faces, dtype=torch.int64, device=device)
    kernel = build_checks.FACE_CHECKS["float32"].face_checks_rows
    (_launch.launch_rows if split else _launch.launch)(
        kernel,
        num_faces,
        device=device,
        **({} if split else {_launch.ROW_START: 0}),
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


def build_beside(
    vertices: np.ndarray,
    faces: np.ndarray,
    method: str,
    where: str,
    device: torch.device,
    beside: Callable[[_MeshSpec, bool], Any],
) -> tuple[_MeshSpec, Any]:
    """One new mesh (``MeshWorld.add``): ``(its spec, beside(spec, pairs_up))``, with what
    :func:`_build_meshes` finds of a mesh (``pairs_up``: its directed edges may pair up, see
    :func:`_face_checks`) and no edge pairs looked for (:data:`_NOT_PAIRED`: an added mesh gets no tables).

    On the CPU, where a core is likely free (:func:`warpgeo._threads.core_to_spare`), this thread builds the
    BVH (Warp releases the GIL) while a helper thread runs the rest side by side: the per-face checks (one
    launch on that thread), the spec (box, cuboid test) and ``beside`` (the caller's work that needs no BVH);
    where the helper has not started by the time the BVH is built, this thread does its work instead of
    waiting for it. Elsewhere one after the other (on CUDA the BVH on Warp's stream, waited for): the same
    results either way. ``spec.mesh`` is set once both are done. ``vertices`` / ``faces``: validated
    float32 / int32 arrays of the caller's own (:func:`warpgeo._world.loading.load_mesh`); the mesh points
    into them. Raises what the checks raise (every face a sliver of no area), after the BVH is built."""
    winding = method == "winding"
    if device.type != "cpu":
        mesh, may_close, pairs_up, _, slivers = _build_meshes([(vertices, faces, winding, where)], device)[0]
        _warp.warp().synchronize_device(_warp.warp_device(device))  # the BVH (Warp's stream) before any query
        spec = _MeshSpec(mesh, vertices, faces, may_close, method, _NOT_PAIRED, slivers=slivers)
        return spec, beside(spec, pairs_up)
    points, indices = torch.from_numpy(vertices), torch.from_numpy(faces.reshape(-1))
    work = (vertices, faces, points, indices, method, where, device, beside)
    if not _threads.core_to_spare():  # no core free: a helper would only slow the BVH build down
        spec, extra = _checked_beside(*work, split=True)  # the checks first, as a construction runs them
        spec.mesh = _warp_mesh(points, indices, winding, where)
        return spec, extra
    _launch._load(build_checks.FACE_CHECKS["float32"].face_checks_rows, device)  # compiled here, not there
    helper = _threads.pool("warpgeo-add", 1).submit(_checked_beside, *work, split=False)
    try:
        mesh = _warp_mesh(points, indices, winding, where)
    except BaseException:
        wait([helper])  # nothing left running on arrays the caller may let go
        raise
    # a helper that has not started yet (no core was free) is not waited for: its work is done here
    spec, extra = _checked_beside(*work, split=True) if helper.cancel() else helper.result()  # raises theirs
    spec.mesh = mesh
    return spec, extra


def _checked_beside(vertices, faces, points, indices, method, where, device, beside, *, split: bool) -> tuple:
    """:func:`build_beside`'s helper: the per-face checks of one mesh (``split``: over threads as a launch by
    rows splits; else on this thread, beside a BVH build), its spec (no mesh yet), and ``beside(spec,
    pairs_up)``; the checks' ValueError (every face a sliver of no area) as :func:`_build_meshes` raises it."""
    if len(faces) == 12 and _is_cuboid(vertices, faces, _box_of(vertices)):
        count, pairs_up = 0, True  # a cuboid's faces are halves of its box's sides: no sliver, closed
    else:
        counts, ups = _face_checks(
            points, indices, np.array([0, len(vertices)]), np.array([0, len(faces)]), device, split=split
        )
        count, pairs_up = int(counts[0]), bool(ups[0])
    if count == len(faces) and not _has_area(vertices, faces):
        raise ValueError(
            f"{where}: every face has zero area, so the mesh has no surface to measure; got {len(faces)} "
            "degenerate faces"
        )
    slivers = count > 0 and slivers_matter(vertices, faces)
    may_close = count == 0 and pairs_up
    spec = _MeshSpec(None, vertices, faces, may_close, method, _NOT_PAIRED, slivers=slivers)
    return spec, beside(spec, pairs_up)


def _warp_mesh(points: torch.Tensor, indices: torch.Tensor, winding: bool, where: str) -> Any:
    """A Warp mesh (its BVH, Warp's default constructor) over ``points (V, 3)`` / ``indices (3F,)`` (it points
    into them), with winding-number support where ``winding``."""
    wp = _warp.warp()
    mesh = wp.Mesh(
        points=wp.from_torch(points, dtype=wp.vec3),
        indices=wp.from_torch(indices),
        support_winding_number=winding,
    )
    if winding and not getattr(mesh, "support_winding_number", False):
        raise RuntimeError(f"{where}: Warp did not build winding-number support for this mesh")
    return mesh


class _MeshSpec:
    """What building one mesh's tables reads: its Warp mesh, its arrays and what was found loading it: its box,
    whether it is a cuboid, and whether it may be closed (no sliver, and its directed edges may pair up:
    :func:`_face_checks`)."""

    __slots__ = ("box", "cuboid", "faces", "may_be_closed", "mesh", "method", "pairs", "slivers", "vertices")

    def __init__(
        self,
        mesh: Any,
        vertices: np.ndarray,
        faces: np.ndarray,
        may_close: bool,
        method: str,
        pairs: np.ndarray | None,
        slivers: bool = False,
    ) -> None:
        self.mesh, self.vertices, self.faces, self.method = mesh, vertices, faces, method
        # some faces are slivers Warp's closest-point queries skip (FLAG_SLIVERS): no grid, never closed
        self.slivers = slivers
        self.box = _box_of(vertices)
        self.cuboid = _is_cuboid(vertices, faces, self.box)
        self.may_be_closed = may_close and not self.cuboid
        # its edge pairs (see edge_pairs) if they pair up, else None; a _Pairing: being found on a thread;
        # _NOT_PAIRED: not looked for yet
        self.pairs = pairs if self.may_be_closed else None

    @property
    def pending_flags(self) -> int:
        """``grid_flags`` of its slots while its tables are built on the background thread."""
        return self.flags | (_constants.FLAG_PENDING if self.may_be_closed else 0)

    @property
    def flags(self) -> int:
        """The ``grid_flags`` bits of the mesh itself, whatever its tables: ``FLAG_SLIVERS``."""
        return _constants.FLAG_SLIVERS if self.slivers else 0


def _box_of(vertices: np.ndarray) -> np.ndarray:
    """The mesh's box ``(lower, upper)`` (2, 3), column by column (NumPy's ``min(axis=0)`` of a ``(V, 3)`` array
    is a strided loop: 17 ms at 655k vertices, against 0.3 ms per column)."""
    columns = [vertices[:, k] for k in range(3)]
    return np.array([[c.min() for c in columns], [c.max() for c in columns]], dtype=vertices.dtype)


#: The most rows of one batched launch (faces or grid cells; a launch's rows are int32): more go in parts.
_MAX_BATCH_ROWS = 1 << 30


#: Where the closed meshes' tables are built, whatever the world's device (see build_tables).
_HOST = torch.device("cpu")


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

    All meshes at once, on the host's cores: each vertex's list of faces (``build_pairs.incident_faces_rows``),
    then for each directed edge ``a -> b`` the one face that runs ``b -> a``, looked for in the shorter of the
    two vertices' lists (``build_pairs.edge_partners_rows``: O(F) for any mesh, fans included). The pairs
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
    kernels = build_pairs.EDGE_PAIRS["float32"]
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
    one launch of ``build_meet.mesh_intersections_rows`` over every face of every mesh; ``check``: see
    ``warpgeo._launch.launch_rows``' ``between``.

    A mesh with a fan of :data:`_FAN_SPLIT_DEGREE` faces or more around one vertex (a cone's apex and base
    centre, a cylinder's cap centres: every box of a fan holds its hub, so the box query of each face returns
    every other face of the fan, and a cone's side and base fans every pair of each other's) is checked by
    ``build_meet.fan_intersections_rows`` instead (``split_fans``; False: every mesh the old way, for the
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
    _launch.launch_rows(
        build_meet.FACES_MEET["float32"].mesh_intersections_rows,
        int(first[-1]),
        device=device,
        between=check,
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
    kernels = build_meet.FANS_MEET["float32"]
    first = np.concatenate([[0], np.cumsum([len(spec.faces) for spec in specs])]).astype(np.int64)
    face_group, group_first, stored = _fan_plan(specs)
    if not len(stored):  # no hub (cannot happen: each mesh has a vertex of _FAN_SPLIT_DEGREE faces)
        return _faces_meet_plain(specs, device, check)
    pieces = int(build_meet.STORED_PIECES)
    items = pieces * len(stored)
    ids = np.array([spec.mesh.id for spec in specs], dtype=np.uint64).view(np.int64)
    ids = torch.from_numpy(ids).to(device)
    first_t = torch.from_numpy(first).to(device)
    lowers = torch.zeros((items, 3), dtype=torch.float32, device=device)
    uppers = torch.zeros((items, 3), dtype=torch.float32, device=device)
    _launch.launch_rows(
        kernels.fan_pieces_rows,
        len(stored),
        device=device,
        between=check,
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
    _launch.launch_rows(
        kernels.fan_intersections_rows,
        int(first[-1]),
        device=device,
        between=check,
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


def _dense(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` as a row-major tensor on ``device``, also when it is empty (NumPy gives an empty array zero
    strides, which a Warp vector array refuses)."""
    out = torch.empty(array.shape, dtype=torch.from_numpy(array).dtype, device=device)
    return out.copy_(torch.from_numpy(array))
