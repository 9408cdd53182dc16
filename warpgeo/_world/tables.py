"""The tables of the SDF kernels' exact shortcuts (see ``warpgeo._kernels.mesh_distance`` and ``docs/sdf.md``), every new
mesh of a world in one batch a step (:func:`build_tables`): the closed-mesh check's verdict, coarse distance
grids (:func:`_grids`), angle-weighted pseudo-normals (:func:`_pseudo_normal_tables`) and the plane trees of
convex closed meshes (:func:`_plane_trees`); and the once-per-process check that Warp's winding numbers
work (:func:`_check_winding_support`). Each mesh gets the tables of building it alone."""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import numpy as np
import torch

from .. import _constants, _launch, _threads, _warp
from .._kernels import build_checks, build_closed, build_grids
from . import meshes as _meshes


def _empty(device: torch.device) -> torch.Tensor:
    return torch.zeros(0, dtype=torch.float32, device=device)


class _Cancelled(Exception):
    """The world whose tables were being built is gone."""


class _Built:
    """What one mesh (one sign method) contributes to a world, built once however many slots hold it."""

    __slots__ = ("box", "dims", "flags", "topology", "tree", "values")

    def __init__(self, box, flags, dims, values, topology, tree) -> None:
        self.box, self.flags, self.dims, self.values = box, flags, dims, values
        self.topology, self.tree = topology, tree


#: Cells of a mesh's distance grid: about one per face, from _GRID_MIN_CELLS to _GRID_CELLS (at most
#: _GRID_MAX_AXIS along an axis). A cell costs about what a query does (a closest point and a vote of three
#: rays): a 500-face mesh gets 512 cells, a mesh of 8,192 faces or more 8,192.
_GRID_CELLS = 8192


_GRID_MIN_CELLS = 512


_GRID_MAX_AXIS = 64


def build_tables(specs: list[_meshes._MeshSpec], device: torch.device, *, alive: Any = None) -> list[_Built]:
    """The tables of many meshes, the exact shortcuts of the SDF kernels (see ``warpgeo._kernels.mesh_distance``), each
    step one batch over all of them: one launch of the closed-mesh check over every face, one of the grids
    over every cell, NumPy over the concatenated faces for the edge pairs, pseudo-normals and convexity.

    A cuboid (exactly the surface of its box, see :func:`_is_cuboid`) gets none: the kernels compute its
    distance in closed form. A closed mesh (see :func:`edge_pairs`) gets a signed grid and its pseudo-normal
    tables (``topology = (face_neighbors (F, 3) int32, vertex_normals (V, 3) float64)``), and a convex one its
    plane tree (see :func:`_plane_tree`); a ``"normal"`` one whose edges pair up its pseudo-normal tables,
    closed or not; an ``"unsigned"`` one an unsigned grid, any other none (its sign may change away from its
    surface). Each mesh's tables are those of building it alone. ``alive``: built on the
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
        spec.pairs.get(spec.faces, len(spec.vertices))
        if isinstance(spec.pairs, _meshes._Pairing)
        else spec.pairs
        for spec in specs
    ]
    unpaired = [k for k, found in enumerate(pairs) if found is _meshes._NOT_PAIRED]
    if unpaired:
        check()
        found = _threads._in_chunks(
            _meshes.edge_pairs,
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
        return _threads._in_chunks(
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
    if paired and sum(weights) >= _threads._CHUNK_FACES:
        check()
        # the host's build module loaded here, never by two threads at once (a CUDA world's first host launch)
        _launch._load(build_closed.CLOSED_FACES["float32"].closed_faces_rows, _meshes._HOST)
        side = _threads.pool("warpgeo-tables-closed", 1, low_priority=background).submit(
            closed_tables, list(range(len(paired)))
        )
    try:
        if paired:
            check()
            meet = _meshes.faces_meet([specs[k] for k in paired], device, launches)
            closed[paired] = np.logical_not(meet)
        gridded = [
            k
            for k, spec in enumerate(specs)
            if not spec.cuboid
            and not spec.slivers  # its grid would be Warp's distances, which skip the slivers
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
        chosen = [j for j, k in enumerate(paired) if closed[k] or specs[k].method == "normal"]
        built = dict(zip(chosen, closed_tables(chosen), strict=True))
    else:
        built = dict(enumerate(built))
    for j, k in enumerate(paired):
        if closed[k]:
            topology[k], trees[k] = built[j]
        elif specs[k].method == "normal":
            # the side "normal" names is the angle-weighted pseudo-normal's: its tables, whether or not the
            # mesh is closed (two faces of it may meet, or be too near for the closed-mesh check to tell)
            topology[k] = built[j][0]
    out = []
    for k, spec in enumerate(specs):
        if spec.cuboid:
            flags = _constants.FLAG_CLOSED | _constants.FLAG_BOX
            out.append(_Built(spec.box, flags, (0, 0, 0), _empty(device), None, None))
            continue
        dims, values = grids.get(k, ((0, 0, 0), _empty(device)))
        flags = (_constants.FLAG_CLOSED if closed[k] else 0) | spec.flags
        out.append(_Built(spec.box, flags, dims, values, topology[k], trees[k]))
    return out


def _closed_tables(jobs: list[tuple], check: Any) -> list[tuple]:
    """Per closed mesh ``(vertices, faces, box, edge pairs)``: ``(topology, plane tree or None)`` (see
    :func:`build_tables`), all of ``jobs`` at once: what they read of each face in one launch of
    ``build_closed.closed_faces_rows`` on the host, NumPy over their concatenated faces for the rest, the plane
    trees' nodes in launches of their own; ``check``: see ``warpgeo._launch.launch_rows``' ``between``."""
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


def _grids(
    specs: list[_meshes._MeshSpec], signed: np.ndarray, device: torch.device, check: Any
) -> list[tuple]:
    """``(dims (3,), cell values)`` of each mesh's distance grid, in one launch of ``build_grids.grid_cells_rows``
    over every cell (values: views of one tensor)."""
    if not specs:
        return []
    if (
        len(specs) > 1 and len(specs) * _GRID_MAX_AXIS**3 > _meshes._MAX_BATCH_ROWS
    ):  # one launch's rows are int32
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
    _launch.launch_rows(
        build_grids.GRIDS["float32"].grid_cells_rows,
        values.shape[0],
        device=device,
        between=check,
        # a cell costs two BVH queries (closest point, then the ray vote): split it across the cores
        work_per_row=_meshes._GRID_QUERY_WORK * max(1, faces.bit_length()),
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


class _Faces:
    """What the tables of closed meshes ``(vertices, faces, edge pairs)`` (see :func:`edge_pairs`) read of their
    faces, computed once, many meshes' rows side by side (each row as for its mesh alone): ``neighbors`` (F, 3)
    the row of the face across each edge of each face (ab, bc, ca); and in float64 (one launch of
    ``build_closed.closed_faces_rows`` on the host) each face's unit ``normal`` (F, 3), its plane's offset from
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
        normal = torch.empty((count, 3), dtype=torch.float64, device=_meshes._HOST)
        support = torch.empty(count, dtype=torch.float64, device=_meshes._HOST)
        corner_normals = torch.empty((3, count, 3), dtype=torch.float64, device=_meshes._HOST)
        convexity = torch.empty(count, dtype=torch.float64, device=_meshes._HOST)
        _launch.launch_rows(
            build_closed.CLOSED_FACES["float32"].closed_faces_rows,
            count,
            device=_meshes._HOST,
            between=check,
            work_per_row=8,
            points=_meshes._dense(
                np.concatenate([v for v, _, _ in meshes]).astype(np.float32), _meshes._HOST
            ),
            faces=_meshes._dense(self.faces.astype(np.int32), _meshes._HOST),
            neighbors=_meshes._dense(self.neighbors.astype(np.int32), _meshes._HOST),
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
    any mesh (see ``warpgeo._kernels.mesh_distance``). All meshes at once."""
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
    (K, 3) int32, planes (F, 4) float32, faces (F,) int32)``; ``check``: see ``warpgeo._launch.launch_rows``' ``between``.

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
    one launch of ``build_closed.plane_tree_split_rows`` a level puts each node's faces in its children's rows
    (every node of the level side by side, in place), and one of ``build_closed.plane_tree_nodes_rows`` over
    every node computes the cones and least offsets, on the host's cores."""
    if (
        sum(len(part.faces) for part in parts) > _meshes._MAX_BATCH_ROWS and len(parts) > 1
    ):  # int32 rows: in parts
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
    faces = torch.arange(int(row_first[-1]), dtype=torch.int32, device=_meshes._HOST)
    split = build_closed.PLANE_TREES["float32"].plane_tree_split_rows
    for k in levels:
        if check is not None:
            check()
        _launch.launch_rows(
            split,
            len(k),
            device=_meshes._HOST,
            between=check,
            work_per_row=max(1, int(row_first[-1]) // len(k)),
            normals=normals,
            faces=faces,
            starts=_meshes._dense(starts[k], _meshes._HOST),
            counts=_meshes._dense(sizes_of[k], _meshes._HOST),
            leaf=_PLANE_LEAF,
            round_limit=_SPLIT_ROUNDS,
        )
    offset = torch.from_numpy(np.concatenate(offsets))[faces.long()]
    faces = faces.numpy()
    axes = torch.zeros((num_nodes, 3), dtype=torch.float64, device=_meshes._HOST)
    least = torch.ones(num_nodes, dtype=torch.float64, device=_meshes._HOST)
    lowest = torch.zeros(num_nodes, dtype=torch.float64, device=_meshes._HOST)
    depth = max(1, int(counts.max()).bit_length() - _PLANE_LEAF.bit_length() + 1)
    _launch.launch_rows(
        build_closed.PLANE_TREES["float32"].plane_tree_nodes_rows,
        num_nodes,
        device=_meshes._HOST,
        between=check,
        # a node reads its faces twice; the average node (of ~F / 4) holds ~4 faces per level below it
        work_per_row=8 * depth,
        normals=normals,
        offsets=offset,
        starts=_meshes._dense(starts, _meshes._HOST),
        counts=_meshes._dense(sizes_of, _meshes._HOST),
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
    kernel = build_checks.WINDING_PROBE["float32"].winding_probe
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
