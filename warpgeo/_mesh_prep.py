"""Mesh preprocessing for :class:`~warpgeo.world.MeshWorld` (NumPy, trimesh and the ``sdf_build`` kernels).

Everything here runs once per mesh when a world is built, never on a query's path: loading and validating a
mesh, building its Warp mesh (a BVH), and the tables of the SDF kernels' exact shortcuts (see
``warpgeo._kernels.sdf``): the cuboid test (a closed form), the closed-mesh test (edges, slivers,
self-intersections), angle-weighted pseudo-normals, plane trees of convex meshes and coarse distance grids.
:func:`prepare` assembles them into the world's tensors (``warpgeo.world.WORLD_FIELDS``).
"""

from __future__ import annotations

import functools
import math
import os
import sys
from typing import Any, NamedTuple

import numpy as np
import torch

from . import _constants, _interop

#: A mesh: a ``trimesh.Trimesh``, a path trimesh can load, or a ``(vertices (V, 3), faces (F, 3))`` pair.
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
    #: ``cone_planes``, ``cone_faces`` (see ``warpgeo.world.WORLD_FIELDS``)
    tables: dict[str, torch.Tensor]
    #: every mesh is a cuboid (``FLAG_BOX``): the world's queries may run the cuboid kernels
    all_cuboids: bool


def prepare(envs: list[list], methods: list[list[str]], device: torch.device, *, single: bool) -> Prepared:
    """Load, validate and build every mesh of ``envs`` (one list per environment; ``methods`` nested alike)
    on ``device``; padding slots (``m >= len(envs[e])``) get mesh id ``NO_MESH`` and no tables.

    Raises what :class:`~warpgeo.world.MeshWorld` documents for bad meshes (``single``: name them
    ``meshes[m]``, else ``envs[e][m]``)."""
    wp = _interop.warp()
    wdev = _interop.warp_device(device)
    num_envs, max_meshes = len(envs), max(len(env) for env in envs)
    if any(m == "winding" for env in methods for m in env):
        _check_winding_support(device)
    meshes: list[list[Any]] = []
    ids = np.zeros((num_envs, max_meshes), dtype=np.uint64)
    signs = np.zeros((num_envs, max_meshes), dtype=np.int32)
    bounds = np.zeros((num_envs, max_meshes, 2, 3), dtype=np.float32)
    flags = np.zeros((num_envs, max_meshes), dtype=np.int32)
    grid_dims = np.zeros((num_envs, max_meshes, 4), dtype=np.int32)
    grid_values: list[np.ndarray] = [np.zeros(0, dtype=np.float32)]
    # closed meshes' pseudo-normal tables, and each mesh's first rows in them (-1: none; int32 offsets)
    topo_offsets = np.full((num_envs, max_meshes, 2), -1, dtype=np.int32)
    neighbor_tables: list[np.ndarray] = [np.zeros((0, 3), dtype=np.int32)]
    normal_tables: list[np.ndarray] = [np.zeros((0, 3), dtype=np.float64)]
    # convex closed meshes' plane trees (see _plane_tree), and each mesh's first rows in them
    cone_offsets = np.full((num_envs, max_meshes, 4), -1, dtype=np.int32)
    cone_tables: list[list[np.ndarray]] = [[np.zeros((0, 4), np.float32)], [np.zeros((0, 3), np.int32)]]
    cone_tables += [[np.zeros((0, 4), np.float32)], [np.zeros(0, np.int32)]]
    for e, env in enumerate(envs):
        row = []
        for m, item in enumerate(env):
            where = f"meshes[{m}]" if single else f"envs[{e}][{m}]"
            vertices, faces = load_mesh(item, where)
            _check_queryable(vertices, faces, where)
            winding = methods[e][m] == "winding"
            signs[e, m] = SIGN_METHODS[methods[e][m]]
            mesh = wp.Mesh(
                points=wp.array(vertices, dtype=wp.vec3, device=wdev),
                indices=wp.array(faces.reshape(-1), dtype=wp.int32, device=wdev),
                support_winding_number=winding,
            )
            if winding and not getattr(mesh, "support_winding_number", False):
                raise RuntimeError(f"{where}: Warp did not build winding-number support for this mesh")
            row.append(mesh)
            ids[e, m] = mesh.id
            bounds[e, m, 0] = vertices.min(axis=0)
            bounds[e, m, 1] = vertices.max(axis=0)
            flags[e, m], dims, values, topology = _surface_tables(
                mesh, vertices, faces, methods[e][m], bounds[e, m], device
            )
            grid_dims[e, m] = (*dims, sum(len(v) for v in grid_values))
            grid_values.append(values)
            face_rows = sum(len(t) for t in neighbor_tables)
            vertex_rows = sum(len(t) for t in normal_tables)
            if topology is not None and max(face_rows, vertex_rows) + max(map(len, topology)) < 2**31:
                topo_offsets[e, m] = (face_rows, vertex_rows)
                neighbor_tables.append(topology[0])
                normal_tables.append(topology[1])
                tree = _plane_tree(vertices, faces, topology[0])
                rows = [sum(len(t) for t in tables) for tables in cone_tables]
                if tree is not None and max(rows) + max(map(len, tree)) < 2**31:
                    cone_offsets[e, m] = (rows[0], rows[1], rows[2], len(tree[1]))
                    for tables, part in zip(cone_tables, tree, strict=True):
                        tables.append(part)
        meshes.append(row)
    if device.type == "cuda":
        # BVHs are built on Warp's stream; kernels run on torch's. Wait once, here, not per query.
        wp.synchronize_device(wdev)
    tables = {
        "mesh_ids": torch.from_numpy(ids.view(np.int64)).to(device),
        "bounds": torch.from_numpy(bounds).to(device),
        "sign": torch.from_numpy(signs).to(device),
        "grid_dims": torch.from_numpy(grid_dims).to(device),
        "grid_flags": torch.from_numpy(flags).to(device),
        "grid_cells": torch.from_numpy(np.concatenate(grid_values)).to(device),
        "topo_offsets": torch.from_numpy(topo_offsets).to(device),
        "face_neighbors": _dense(np.concatenate(neighbor_tables), device),
        "vertex_normals": _dense(np.concatenate(normal_tables), device),
        "cone_offsets": torch.from_numpy(cone_offsets).to(device),
        "cone_nodes": _dense(np.concatenate(cone_tables[0]), device),
        "cone_links": _dense(np.concatenate(cone_tables[1]), device),
        "cone_planes": _dense(np.concatenate(cone_tables[2]), device),
        "cone_faces": _dense(np.concatenate(cone_tables[3]), device),
    }
    cuboids = all(flags[e, m] & _constants.FLAG_BOX for e, env in enumerate(envs) for m in range(len(env)))
    return Prepared(meshes, tables, bool(cuboids))


def is_vf_pair(item: Any) -> bool:
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        return False
    return all(isinstance(x, (np.ndarray, torch.Tensor)) for x in item)


def load_mesh(item: MeshLike, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(vertices (V, 3) float32, faces (F, 3) int32)`` of one mesh argument, validated."""
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
            f"{where} must be a trimesh.Trimesh, a file path or a (vertices, faces) pair; got {type(item).__name__}"
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
    lo, hi = int(faces.min()), int(faces.max())
    if lo < 0 or hi >= len(vertices):
        raise IndexError(
            f"{where}: face indices must lie in [0, {len(vertices)}); got values in [{lo}, {hi}]"
        )
    return np.ascontiguousarray(vertices, dtype=np.float32), np.ascontiguousarray(faces, dtype=np.int32)


def _to_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise ValueError(f"{name} is a meta tensor (it holds no values)")
        return x.detach().cpu().resolve_conj().resolve_neg().numpy()
    try:
        return np.asarray(x)
    except Exception as exc:  # ragged lists, objects: the caller's input
        raise ValueError(f"{name} could not be read as an array: {exc}") from exc


#: Warp's mesh queries skip a face whose |e0 x e1| / (|e0|^2 + |e1|^2 + |e2|^2) is below this (a sliver).
_SLIVER_RATIO = 1.0e-6
#: Mesh coordinates (mesh units) up to which Warp's float32 squared distances cannot overflow.
_COORDINATE_LIMIT = 2.0**60
#: Cells of a mesh's distance grid (about; at most _GRID_MAX_AXIS along an axis).
_GRID_CELLS = 8192
_GRID_MAX_AXIS = 64


def _slivers(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Which faces Warp's queries skip as slivers (its own test, in float32)."""
    tri = vertices[faces]
    e0, e1, e2 = tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0], tri[:, 2] - tri[:, 1]
    area2 = np.linalg.norm(np.cross(e0, e1), axis=1)
    scale = (e0 * e0).sum(1) + (e1 * e1).sum(1) + (e2 * e2).sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return ~(area2 / scale >= _SLIVER_RATIO)


def _check_queryable(vertices: np.ndarray, faces: np.ndarray, where: str) -> None:
    """Refuse a mesh the float32 queries cannot answer: only zero-area (sliver) faces, which every Warp
    query skips (the mesh would read as absent), or coordinates whose squares overflow float32."""
    largest = float(np.abs(vertices).max())
    if largest > _COORDINATE_LIMIT:
        raise ValueError(
            f"{where}: vertex coordinates must stay within 2**60 (~1.15e18) of the mesh origin, where Warp's "
            f"float32 queries can square distances; got {largest:.3g} (scale the mesh, or pose it instead)"
        )
    if _slivers(vertices, faces).all():
        raise ValueError(
            f"{where}: every face has zero area (or is a sliver Warp's queries skip), so the mesh has no "
            f"surface to measure; got {len(faces)} degenerate faces"
        )


def _surface_tables(mesh: Any, vertices: np.ndarray, faces: np.ndarray, method: str, box: np.ndarray, device):
    """``(flags, (nx, ny, nz), cell-centre distances (nx * ny * nz,) float32, topology)`` of one mesh: the
    exact shortcuts of the SDF kernels (see ``warpgeo._kernels.sdf``). A closed mesh gets a signed grid and
    its pseudo-normal tables (``topology = (face_neighbors (F, 3) int32, vertex_normals (V, 3) float64)``,
    else None), an ``"unsigned"`` one an unsigned grid, any other none (its sign may change away from its
    surface). A cuboid (exactly the surface of its box, see :func:`_is_cuboid`) gets neither: the kernels
    compute its distance in closed form, and building it launches no kernel."""
    if _is_cuboid(vertices, faces, box):
        return _constants.FLAG_CLOSED | _constants.FLAG_BOX, (0, 0, 0), np.zeros(0, dtype=np.float32), None
    edge_index = _closed_edges(mesh, vertices, faces, device)
    closed = edge_index is not None
    topology = _pseudo_normal_tables(vertices, faces, edge_index) if closed else None
    extent = (box[1] - box[0]).astype(np.float64)
    if not (closed or method == "unsigned") or not (extent > 0).all():
        return (_constants.FLAG_CLOSED if closed else 0), (0, 0, 0), np.zeros(0, dtype=np.float32), topology
    cell = float(np.prod(extent) / _GRID_CELLS) ** (1.0 / 3.0)
    dims = np.clip(np.round(extent / cell), 1, _GRID_MAX_AXIS).astype(int)
    size = (extent / dims).astype(np.float32)
    wp = _interop.warp()
    values = torch.empty(int(dims.prod()), dtype=torch.float32, device=device)
    _interop.launch(
        _interop.kernels("sdf_build").BUILD["float32"].grid_centres,
        values.shape[0],
        device=device,
        mesh=mesh.id,
        lower=wp.vec3(*box[0].tolist()),
        size=wp.vec3(*size.tolist()),
        ny=int(dims[1]),
        nz=int(dims[2]),
        with_sign=int(closed and method != "unsigned"),
        out=values,
    )
    return (
        (_constants.FLAG_CLOSED if closed else 0),
        tuple(int(n) for n in dims),
        values.cpu().numpy(),
        topology,
    )


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


def _closed_edges(mesh: Any, vertices: np.ndarray, faces: np.ndarray, device) -> np.ndarray | None:
    """For a closed mesh, the undirected edge of each directed edge (``(3F,)``: face ``i % F``'s edge
    ``i // F``, edges ab, bc, ca); None for any other mesh.

    Closed: every edge in exactly two faces, with opposite orientations (watertight, consistently wound), no
    sliver face, and no two faces without a shared vertex intersecting. Inside is then well defined, and the
    ray vote, the winding number and the pseudo-normal all compute it."""
    edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    key = np.sort(edges, axis=1)
    _, index, count = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    index = index.reshape(-1)
    if not (count == 2).all() or _slivers(vertices, faces).any():
        return None
    # each undirected edge twice, once in each direction
    forward = edges[:, 0] < edges[:, 1]
    if not (np.bincount(index, weights=forward, minlength=len(count)) == 1).all():
        return None
    found = torch.zeros(1, dtype=torch.int32, device=device)
    _interop.launch(
        _interop.kernels("sdf_build").BUILD["float32"].face_intersections,
        len(faces),
        device=device,
        mesh=mesh.id,
        num_faces=len(faces),
        found=found,
    )
    return index if int(found.item()) == 0 else None


def _dense(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` as a row-major tensor on ``device``, also when it is empty (NumPy gives an empty array zero
    strides, which a Warp vector array refuses)."""
    out = torch.empty(array.shape, dtype=torch.from_numpy(array).dtype, device=device)
    return out.copy_(torch.from_numpy(array))


def _pseudo_normal_tables(
    vertices: np.ndarray, faces: np.ndarray, edge_index: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(face_neighbors (F, 3) int32, vertex_normals (V, 3) float64)`` of a closed mesh: the face across
    each edge of each face (ab, bc, ca) and each vertex's angle-weighted normal (the sum of the unit normals
    of its faces, each times the face's angle at the vertex), from which the kernels take the side of a point
    whose closest point lies on an edge or a vertex."""
    num_faces = len(faces)
    # each undirected edge is two directed edges: sorted by edge, they come in pairs
    pairs = np.argsort(edge_index, kind="stable").reshape(-1, 2)
    neighbors = np.full((3, num_faces), -1, dtype=np.int64)
    first, second = pairs[:, 0], pairs[:, 1]
    neighbors[first // num_faces, first % num_faces] = second % num_faces
    neighbors[second // num_faces, second % num_faces] = first % num_faces
    tri = vertices.astype(np.float64)[faces]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    vertex_normals = np.zeros((len(vertices), 3))
    for k in range(3):
        u = tri[:, (k + 1) % 3] - tri[:, k]
        v = tri[:, (k + 2) % 3] - tri[:, k]
        angle = np.arctan2(np.linalg.norm(np.cross(u, v), axis=1), (u * v).sum(axis=1))
        for axis in range(3):
            vertex_normals[:, axis] += np.bincount(
                faces[:, k], weights=angle * normal[:, axis], minlength=len(vertices)
            )
    return np.ascontiguousarray(neighbors.T, dtype=np.int32), vertex_normals


#: Faces per leaf of a plane tree.
_PLANE_LEAF = 8
#: Relative tolerance of the convexity test (of the mesh's extent): coplanar neighbours pass.
_CONVEX_TOL = 1.0e-6
#: Radians added to each cone's half-angle in a plane tree (float32 rounds a cosine near 1 by ~3.5e-4 rad).
_CONE_PAD = 1.0e-3


def _is_convex(vertices: np.ndarray, faces: np.ndarray, neighbors: np.ndarray) -> bool:
    """Whether a closed mesh (``neighbors``: the face across each edge of each face) is convex: one connected
    surface, convex at every edge (the far corner of each neighbour face on the inner side of the face's
    plane, up to rounding). Only decides whether a mesh gets a plane tree: the kernels' use of the tree is
    exact on any mesh (see ``warpgeo._kernels.sdf``)."""
    tri = vertices.astype(np.float64)[faces]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    tol = _CONVEX_TOL * float(np.linalg.norm(vertices.max(axis=0) - vertices.min(axis=0)))
    for k in range(3):
        other = neighbors[:, k]
        if (other < 0).any():
            return False
        # the neighbour's corner that is not on the shared edge: the one not among this face's vertices
        theirs = faces[other]
        far = np.zeros(len(faces), dtype=np.int64)
        for j in range(3):
            free = (theirs[:, j, None] != faces).all(axis=1)
            far = np.where(free, theirs[:, j], far)
        if ((vertices.astype(np.float64)[far] - tri[:, 0]) * normal).sum(axis=1).max() > tol:
            return False
    # connected: labels spread along the neighbours (pointer jumping) until they settle
    label = np.arange(len(faces))
    while True:
        spread = np.minimum(label, label[neighbors].min(axis=1))
        spread = spread[spread]
        if (spread == label).all():
            return bool((label == 0).all())
        label = spread


def _plane_tree(vertices: np.ndarray, faces: np.ndarray, neighbors: np.ndarray) -> tuple | None:
    """The plane tree of a convex closed mesh (None for any other): ``(nodes (1 + 2K, 4) float32, links
    (K, 3) int32, planes (F, 4) float32, faces (F,) int32)``.

    Each face's plane ``(n, b)`` (unit normal, ``b = n . (a - o)`` for a corner ``a`` and the origin ``o``, the
    box centre) in leaf order, with the face's index. The K nodes in depth-first order split the faces by
    their normals (median along the axis of widest spread) down to ``_PLANE_LEAF`` faces; node ``k`` holds
    rows ``1 + 2k`` = (cone axis ``u``, the least ``b`` below it) and ``2 + 2k`` = (cos, sin of the cone's
    half-angle), and link ``k`` = (the node after its subtree, first plane row, plane count; 0 for an inner
    node). Row 0 is (``o``, the margin that covers the float32 rounding of the kernels' bounds). For a point
    ``p = o + w``, every face below node ``k`` is at least ``b_min - max over the cone of n . w`` from it."""
    if len(faces) < 2 * _PLANE_LEAF or not _is_convex(vertices, faces, neighbors):
        return None
    points = vertices.astype(np.float64)
    tri = points[faces]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    origin = ((points.min(axis=0) + points.max(axis=0)) / 2).astype(np.float32).astype(np.float64)
    offset = (normal * (tri[:, 0] - origin)).sum(axis=1)
    nodes: list[tuple] = []
    links: list[list[int]] = []
    order: list[np.ndarray] = []
    placed = 0
    pending = [np.arange(len(faces))]  # depth-first: the first half of a split is taken next
    while pending:
        members = pending.pop()
        k = len(nodes)
        axis = normal[members].sum(axis=0)
        length = np.linalg.norm(axis)
        axis = axis / length if length > 1e-12 else np.array([1.0, 0.0, 0.0])
        # the cone's half-angle, widened far beyond the float32 rounding of its cosine and sine
        angle = min(math.pi, float(np.arccos(np.clip(normal[members] @ axis, -1.0, 1.0)).max()) + _CONE_PAD)
        nodes.append((*axis, offset[members].min(), math.cos(angle), math.sin(angle)))
        if len(members) <= _PLANE_LEAF:
            links.append([k + 1, placed, len(members)])
            order.append(members)
            placed += len(members)
        else:
            spread = normal[members].max(axis=0) - normal[members].min(axis=0)
            ranked = members[np.argsort(normal[members, int(np.argmax(spread))], kind="stable")]
            half = len(ranked) // 2
            links.append([-1, 0, 0])
            pending.append(ranked[half:])
            pending.append(ranked[:half])
    # the node after each subtree: subtrees are contiguous in depth-first order
    size = [1] * len(nodes)
    for k in range(len(nodes) - 1, -1, -1):
        if links[k][2] == 0:
            child = k + 1
            size[k] = 1 + size[child] + size[child + size[child]]
        links[k][0] = k + size[k]
    ordered = np.concatenate(order)
    scale = float(np.abs(points).max() + np.linalg.norm(points.max(axis=0) - points.min(axis=0)))
    table = np.zeros((1 + 2 * len(nodes), 4), dtype=np.float32)
    table[0] = (*origin, 1.0e-5 * scale)
    table[1::2] = [n[:4] for n in nodes]
    table[2::2, :2] = [n[4:] for n in nodes]
    planes = np.concatenate([normal[ordered], offset[ordered, None]], axis=1).astype(np.float32)
    return table, np.asarray(links, dtype=np.int32), planes, ordered.astype(np.int32)


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
    wp = _interop.warp()
    kernel = _interop.kernels("sdf_build").WINDING_PROBE["float32"].winding_probe
    wdev = _interop.warp_device(device)
    probe = wp.Mesh(
        points=wp.array(_PROBE_VERTICES, dtype=wp.vec3, device=wdev),
        indices=wp.array(_PROBE_FACES.reshape(-1), dtype=wp.int32, device=wdev),
        support_winding_number=True,
    )
    if device.type == "cuda":
        wp.synchronize_device(wdev)
    out = torch.zeros(1, dtype=torch.float32, device=device)
    _interop.launch(kernel, 1, device=device, mesh=probe.id, p=wp.vec3(0.5, 0.5, 0.5), out_sign=out)
    return float(out.item())


def _check_winding_support(device: torch.device) -> None:
    """Raise unless Warp really classifies by winding number on ``device`` (it falls back silently)."""
    if _winding_probe_result(device) >= 0.0:
        raise RuntimeError(
            "sign_method='winding': this Warp build classified a winding-number probe with the ray vote "
            "(winding-number support did not take); use sign_method='ray' or another warp-lang version"
        )
