"""MeshWorld: triangle meshes (Warp BVHs) grouped in environments, with poses and enable flags."""

from __future__ import annotations

import functools
import itertools
import math
import os
import sys
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from . import _interop

__all__ = ["MeshWorld", "MeshWorldArgs", "grid_tables_of", "mesh_ids_of"]

#: A mesh: a ``trimesh.Trimesh``, a path trimesh can load, or a ``(vertices (V, 3), faces (F, 3))`` pair.
MeshLike = Any

#: Sign method name -> the code the kernels read in ``sign[e, m]`` (``warpgeo._kernels.sdf.SIGN_*``).
_SIGN_METHODS = {"ray": 0, "winding": 1, "normal": 2, "unsigned": 3}
#: A quaternion whose norm is within this of 1 is renormalised; farther off, it is refused.
_QUAT_NORM_TOL = 1.0e-3
_IDENTITY_POSE = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
#: Warp meshes are float32: a vertex coordinate beyond this would become inf.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


class MeshWorldArgs(NamedTuple):
    """What a :class:`MeshWorld` hands the SDF ops, by name: the world's id (the ops look its Warp mesh
    ids up, so no forged or stale id ever reaches a kernel) and the tensors the kernels read, each the
    kernel parameter of that name.

    The tensors are ``(E, M, ...)`` on the world's device: the live storage that :meth:`MeshWorld.set_poses`
    and :meth:`MeshWorld.set_enabled` update in place (so a captured CUDA graph sees new poses).
    """

    #: The world's id (see :func:`mesh_ids_of`).
    world_id: int
    #: ``(E, M, 7)`` mesh-from-world transforms in Warp's layout ``[tx, ty, tz, qx, qy, qz, qw]``, in the
    #: precision of the query (float32 or float64).
    inv_poses: torch.Tensor
    #: ``(E, M, 2, 3)`` float32: each mesh's box ``(lower, upper)`` in its own frame.
    bounds: torch.Tensor
    #: ``(E, M)`` int32: 1 where a mesh is present and enabled.
    enabled: torch.Tensor
    #: ``(E, M)`` int32: each mesh's sign method code (see ``_SIGN_METHODS``).
    sign: torch.Tensor


#: id -> live world. A world's Warp meshes (whose ids the kernels dereference) live as long as the world.
_LIVE_WORLDS: dict[int, weakref.ref] = {}
_WORLD_IDS = itertools.count(1)


def mesh_ids_of(world_id: int) -> torch.Tensor:
    """The ``(E, M)`` int64 Warp mesh ids of the live world ``world_id`` (0 in padding slots).

    Raises:
        ValueError: no live :class:`MeshWorld` has this id (it was garbage-collected, or never existed).
    """
    ref = _LIVE_WORLDS.get(world_id)
    world = ref() if ref is not None else None
    if world is None:
        raise ValueError(f"world_id {world_id!r} names no live MeshWorld (use MeshWorld.kernel_args())")
    return world._mesh_ids


def grid_tables_of(world_id: int) -> dict[str, torch.Tensor]:
    """The SDF kernels' shortcut tables of the live world ``world_id``, by kernel parameter name:
    ``grid_dims`` ``(E, M, 4)`` int32 (cells along x, y, z and the first cell's offset in ``grid_cells``; 0 cells:
    no grid), ``grid_flags`` ``(E, M)`` int32 (``FLAG_CLOSED``), ``grid_cells`` ``(G,)`` float32 (cell-centre
    distances), and the closed meshes' pseudo-normal tables: ``topo_offsets`` ``(E, M, 2)`` int32 (each mesh's
    first row in ``face_neighbors`` and in ``vertex_normals``; -1: none), ``face_neighbors`` ``(F, 3)`` int32
    (the face across each edge of each face) and ``vertex_normals`` ``(V, 3)`` float64 (angle-weighted); the
    convex closed meshes' plane trees (see :func:`_plane_tree`): ``cone_offsets`` ``(E, M, 4)`` int32 (first
    rows in ``cone_nodes``, ``cone_links``, ``cone_planes`` / ``cone_faces``, and the node count; -1: none),
    ``cone_nodes`` ``(N, 4)`` float32, ``cone_links`` ``(K, 3)`` int32, ``cone_planes`` ``(F, 4)`` float32 and
    ``cone_faces`` ``(F,)`` int32; and the
    broad phase's ``world_bounds`` ``(E, M, 2, 3)`` float32, each mesh's box posed in the world (rounded
    outwards), which :meth:`MeshWorld.set_poses` updates in place with ``inv_poses``. See
    ``warpgeo._kernels.sdf``.

    Raises:
        ValueError: no live :class:`MeshWorld` has this id.
    """
    mesh_ids_of(world_id)  # the same check and message
    return _LIVE_WORLDS[world_id]()._grid_tables


def all_cuboids(world_id: int) -> bool:
    """Whether every mesh of the live world ``world_id`` is a cuboid (``FLAG_BOX``: the surface of its box,
    computed in closed form), so that its queries can run the kernels made for that
    (``warpgeo._kernels.sdf.CUBOIDS``).

    Raises:
        ValueError: no live :class:`MeshWorld` has this id.
    """
    mesh_ids_of(world_id)  # the same check and message
    return _LIVE_WORLDS[world_id]()._all_cuboids


class MeshWorld:
    """Triangle meshes in one or more environments, posed in the world frame, for the SDF ops.

    Each mesh becomes a Warp mesh (a BVH over its triangles) on ``device``, built once. Poses and enable
    flags live in device tensors the kernels read, so :meth:`set_poses` and :meth:`set_enabled` rebuild
    nothing. Environments may hold different numbers of meshes: tensors are padded to ``max_meshes`` and
    padding slots are never enabled.

    Precision: Warp meshes are float32, so vertices are stored in float32 (about 1e-7 relative, i.e.
    0.1 micrometre at 1 m from the mesh origin). Poses are kept in float64 and applied in the precision of
    the query (float32, or float64 for float64 queries).

    Poses are ``[x, y, z, qw, qx, qy, qz]``, world-from-mesh: a vertex ``v`` of the mesh is at
    ``R(q) v + t`` in the world. A quaternion whose norm is within 1e-3 of 1 is renormalised; any other
    quaternion is refused (it is almost certainly in the wrong order or not a rotation).

    Threads: queries from several threads at once are safe. :meth:`set_poses` and :meth:`set_enabled`
    update the world in place (so captured CUDA graphs see the new state): a world is not to be updated
    while another thread queries it (that query may see half an update); serialise them, e.g. with a lock.

    Args:
        meshes: the meshes of a one-environment world; each a ``trimesh.Trimesh``, a file path trimesh
            loads as a single mesh (obj, stl, ply, glb, off; scenes are concatenated), or a
            ``(vertices (V, 3), faces (F, 3))`` pair of arrays or tensors.
        poses: ``(M, 7)`` world-from-mesh poses (identity by default); any array-like.
        device: where the meshes live; every query must be on this device.
        sign_method: how a mesh tells inside from outside: ``"ray"`` (Warp's vote of three axis-aligned
            rays; exact on closed meshes and forgiving of small holes; default), ``"winding"`` (generalised
            winding number; robust on open or self-intersecting meshes, slower; such meshes are built with
            winding-number support), ``"normal"`` (the closest feature's angle-weighted pseudo-normal:
            exact on closed, consistently wound, manifold meshes, and the cheapest) or ``"unsigned"``
            (no inside: thin shells and open containers such as bins and shelves; distances are >= 0 and
            a sphere collides only where it touches the surface). One name for every mesh, or a list
            with one per mesh.

    Raises:
        TypeError: a mesh of an unsupported type; faces that are not integers; complex vertices.
        ValueError: an empty mesh or environment list, non-finite vertices or vertices beyond float32's
            range (Warp meshes are float32), meta tensors, bad shapes, a file trimesh cannot load as a mesh,
            a bad ``sign_method``, a device that is not ``cpu`` / ``cuda[:N]`` or that this machine lacks,
            bad poses (see :meth:`set_poses`).
        IndexError: face indices outside ``[0, V)``.
        RuntimeError: ``sign_method="winding"`` and this Warp build does not honour winding numbers.

    Example:
        >>> import trimesh
        >>> table = (np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]]), np.array([[0, 1, 2], [0, 2, 3]]))
        >>> world = MeshWorld([trimesh.creation.box((1, 1, 1)), table],
        ...                   poses=[[0, 0, 0.5, 1, 0, 0, 0], [1, 0, 0, 1, 0, 0, 0]])
        >>> world.set_poses(torch.tensor([[0, 0, 0.6, 1, 0, 0, 0], [1, 0, 0, 1, 0, 0, 0]]))
        >>> world.set_enabled([True, False])
    """

    def __init__(
        self,
        meshes: Sequence[MeshLike],
        *,
        poses: Any = None,
        device: torch.device | str = "cpu",
        sign_method: str | Sequence[str] = "ray",
    ) -> None:
        if isinstance(meshes, (str, os.PathLike)) or _is_vf_pair(meshes) or not isinstance(meshes, Sequence):
            raise TypeError(
                "meshes must be a list of meshes (trimesh.Trimesh, path or (vertices, faces)); "
                f"got {type(meshes).__name__} (wrap a single mesh in a list)"
            )
        methods = sign_method if isinstance(sign_method, str) else [sign_method]
        device = _world_device(device)
        self._build([list(meshes)], None if poses is None else [poses], device, methods, single=True)

    @classmethod
    def from_envs(
        cls,
        envs: Sequence[Sequence[MeshLike]],
        *,
        poses: Any = None,
        device: torch.device | str = "cpu",
        sign_method: str | Sequence[Sequence[str]] = "ray",
    ) -> MeshWorld:
        """A world of several environments, which may hold different numbers of meshes.

        Args:
            envs: one list of meshes per environment, e.g. ``[[table, shelf], [table]]``.
            poses: per-environment lists of poses (ragged like ``envs``), or an ``(E, max_meshes, 7)``
                array whose padding entries are ignored. Identity by default.
            device: as for :class:`MeshWorld`.
            sign_method: one name for every mesh (see :class:`MeshWorld`), or per-environment lists nested
                like ``envs``.
        """
        if not isinstance(envs, Sequence) or isinstance(envs, str) or len(envs) == 0:
            raise ValueError("envs must be a non-empty list of per-environment mesh lists")
        env_lists = []
        for e, env in enumerate(envs):
            if isinstance(env, (str, os.PathLike)) or _is_vf_pair(env) or not isinstance(env, Sequence):
                raise TypeError(f"envs[{e}] must be a list of meshes; got {type(env).__name__}")
            env_lists.append(list(env))
        world = cls.__new__(cls)
        world._build(env_lists, poses, _world_device(device), sign_method, single=False)
        return world

    # ----------------------------------------------------------------------------------------------------

    def _build(self, envs: list[list], poses: Any, device, sign_method, *, single: bool) -> None:
        methods = _sign_methods(sign_method, envs, single)
        self._device = torch.device(device)
        wdev = _interop.warp_device(self._device)  # ValueError for devices Warp cannot run on
        if self._device.type == "cuda" and self._device.index is None:
            self._device = torch.device("cuda", torch.cuda.current_device())
        wp = _interop.warp()
        if isinstance(sign_method, str):
            self._sign_method: str | list = sign_method
        else:
            self._sign_method = methods[0] if single else methods
        self._single = single
        counts = [len(env) for env in envs]
        if sum(counts) == 0:
            raise ValueError("a MeshWorld needs at least one mesh; got none")
        num_envs, max_meshes = len(envs), max(counts)
        self._num_meshes = tuple(counts)

        if any(m == "winding" for env in methods for m in env):
            _check_winding_support(self._device)
        # the Warp meshes own the BVHs the kernels query by id: they live (and die) with the world
        self._wp_meshes: list[list[Any]] = []
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
                vertices, faces = _load_mesh(item, where)
                _check_queryable(vertices, faces, where)
                winding = methods[e][m] == "winding"
                signs[e, m] = _SIGN_METHODS[methods[e][m]]
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
                    mesh, vertices, faces, methods[e][m], bounds[e, m], self._device
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
            self._wp_meshes.append(row)
        if self._device.type == "cuda":
            # BVHs are built on Warp's stream; kernels run on torch's. Wait once, here, not per query.
            wp.synchronize_device(wdev)

        self._present = torch.zeros(num_envs, max_meshes, dtype=torch.bool)
        for e, n in enumerate(counts):
            self._present[e, :n] = True
        self._present = self._present.to(self._device)
        self._mesh_ids = torch.from_numpy(ids.view(np.int64)).to(self._device)
        self._bounds = torch.from_numpy(bounds).to(self._device)
        # the exact shortcuts of the SDF kernels (closed meshes, coarse distance grids): built once, read-only
        self._grid_tables = {
            "grid_dims": torch.from_numpy(grid_dims).to(self._device),
            "grid_flags": torch.from_numpy(flags).to(self._device),
            "grid_cells": torch.from_numpy(np.concatenate(grid_values)).to(self._device),
            "topo_offsets": torch.from_numpy(topo_offsets).to(self._device),
            "face_neighbors": _dense(np.concatenate(neighbor_tables), self._device),
            "vertex_normals": _dense(np.concatenate(normal_tables), self._device),
            "cone_offsets": torch.from_numpy(cone_offsets).to(self._device),
            "cone_nodes": _dense(np.concatenate(cone_tables[0]), self._device),
            "cone_links": _dense(np.concatenate(cone_tables[1]), self._device),
            "cone_planes": _dense(np.concatenate(cone_tables[2]), self._device),
            "cone_faces": _dense(np.concatenate(cone_tables[3]), self._device),
        }
        self._enabled = self._present.to(torch.int32)
        self._poses = torch.tensor(_IDENTITY_POSE, dtype=torch.float64).repeat(num_envs, max_meshes, 1)
        self._poses = self._poses.to(self._device)
        self._identity_pose = self._poses[
            0, 0
        ].clone()  # on the device: set_poses copies nothing from the host
        self._sign = torch.from_numpy(signs).to(self._device)
        self._inv_poses = _inverse_warp_transform(self._poses)
        self._inv_poses32 = self._inv_poses.to(torch.float32)
        # the kernels' broad phase: each mesh's box posed in the world (live, like the poses)
        self._grid_tables["world_bounds"] = _posed_boxes(self._bounds, self._poses)
        self._all_cuboids = all(flags[e, m] & _FLAG_BOX for e, n in enumerate(counts) for m in range(n))
        self._id = next(_WORLD_IDS)
        _LIVE_WORLDS[self._id] = weakref.ref(self)
        weakref.finalize(self, _LIVE_WORLDS.pop, self._id, None)
        if poses is not None:
            self.set_poses(poses if not single else poses[0])

    # ----------------------------------------------------------------------------------------------------
    # public state
    # ----------------------------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        """The device of the meshes; queries must be on it."""
        return self._device

    @property
    def sign_method(self) -> str | list:
        """The sign method(s) as given: one name, or a list (per-environment lists for ``from_envs``)."""
        return self._sign_method

    @property
    def num_envs(self) -> int:
        """E, the number of environments."""
        return self._mesh_ids.shape[0]

    @property
    def max_meshes(self) -> int:
        """M, the largest number of meshes in one environment (the padded width of pose/enable tensors)."""
        return self._mesh_ids.shape[1]

    @property
    def num_meshes(self) -> tuple[int, ...]:
        """The number of meshes of each environment."""
        return self._num_meshes

    @property
    def poses(self) -> torch.Tensor:
        """A copy of the ``(E, M, 7)`` float64 world-from-mesh poses (identity in padding slots)."""
        return self._poses.clone()

    @property
    def enabled(self) -> torch.Tensor:
        """A copy of the ``(E, M)`` bool enable flags (False in padding slots)."""
        return self._enabled.bool()

    def set_poses(self, poses: Any) -> None:
        """Move the meshes: new world-from-mesh poses, applied without rebuilding any BVH.

        Args:
            poses: ``(E, M, 7)``, or ``(M, 7)`` for a one-environment world, ``[x, y, z, qw, qx, qy, qz]``;
                any array-like or tensor (on any device); a ragged per-environment list is accepted too.
                Entries in padding slots (``m >= num_meshes[e]``) are ignored. Not differentiable.

        Raises:
            TypeError: complex or non-numeric poses.
            ValueError: wrong shape, a meta tensor, non-finite values, or a quaternion whose norm is not
                within 1e-3 of 1.

        With value checks on (the default; see :func:`warpgeo.value_checks`) the poses are validated on
        the host: one device-to-host copy per call. With them off nothing is read back (and a bad pose gives
        a wrong answer, never a crash). Not to be called while another thread queries this world: the
        update is in place (so captured CUDA graphs see it) and a concurrent query may see it half done.
        """
        num_envs, max_meshes = self.num_envs, self.max_meshes
        value = _pose_tensor(poses, num_envs, max_meshes, self._num_meshes)
        if value.dim() == 2 and num_envs == 1:
            value = value.unsqueeze(0)
        if tuple(value.shape) != (num_envs, max_meshes, 7):
            expected = f"({max_meshes}, 7) or " if num_envs == 1 else ""
            raise ValueError(
                f"poses must have shape {expected}({num_envs}, {max_meshes}, 7); got {tuple(value.shape)}"
            )
        value = value.to(device=self._device, dtype=torch.float64)
        value = torch.where(self._present[..., None], value, self._identity_pose)
        norm = value[..., 3:].norm(dim=-1)
        if _interop.checking_values(self._device):
            _check_poses(value, norm)
        value = torch.cat([value[..., :3], value[..., 3:] / norm[..., None]], dim=-1)
        # in place: compiled graphs, captured CUDA graphs and user references keep seeing the live tensors
        self._poses.copy_(value)
        self._inv_poses.copy_(_inverse_warp_transform(value))
        self._inv_poses32.copy_(self._inv_poses)
        self._grid_tables["world_bounds"].copy_(_posed_boxes(self._bounds, value))

    def set_enabled(self, mask: Any) -> None:
        """Switch meshes on and off (a disabled mesh contributes nothing); rebuilds nothing.

        Args:
            mask: ``(E, M)``, or ``(M,)`` for a one-environment world; bool (or 0/1 integers). Padding slots
                stay disabled whatever the mask says.

        Raises:
            TypeError: a floating, complex or non-numeric mask.
            ValueError: wrong shape, a meta tensor.

        Not to be called while another thread queries this world (the update is in place, see
        :meth:`set_poses`).
        """
        if isinstance(mask, torch.Tensor):
            value = _real_tensor(mask, "mask")
        else:
            try:
                array = np.asarray(mask)
            except Exception as exc:  # ragged lists, objects: all the caller's input
                raise TypeError(
                    f"mask must be an array of bools (or 0/1 integers); got {mask!r:.80}"
                ) from exc
            if array.dtype.kind not in "biu":
                raise TypeError(f"mask must be bool (or 0/1 integers); got dtype {array.dtype}")
            value = torch.as_tensor(array.astype(np.int64) if array.dtype.kind == "u" else array)
        if value.is_floating_point() or value.is_complex():
            raise TypeError(f"mask must be bool (or 0/1 integers); got {value.dtype}")
        if value.dim() == 1 and self.num_envs == 1:
            value = value.unsqueeze(0)
        if tuple(value.shape) != (self.num_envs, self.max_meshes):
            expected = f"({self.max_meshes},) or " if self.num_envs == 1 else ""
            raise ValueError(
                f"mask must have shape {expected}({self.num_envs}, {self.max_meshes}); got {tuple(value.shape)}"
            )
        value = value.to(self._device).bool() & self._present
        self._enabled.copy_(value.to(torch.int32))

    def kernel_args(self, dtype: torch.dtype = torch.float32) -> MeshWorldArgs:
        """The tensors the SDF kernels read, by kernel parameter name, for queries computed in ``dtype``
        (float32 or float64: the precision of ``inv_poses``). The live storage, not copies.

        Raises:
            TypeError: ``dtype`` is not one of the floating dtypes the ops take."""
        if dtype not in _interop.FLOAT_DTYPES:
            raise TypeError(f"dtype must be one of {_interop.FLOAT_DTYPES}; got {dtype!r}")
        inv_poses = self._inv_poses if dtype == torch.float64 else self._inv_poses32
        return MeshWorldArgs(self._id, inv_poses, self._bounds, self._enabled, self._sign)

    def __repr__(self) -> str:
        return (
            f"MeshWorld(num_envs={self.num_envs}, num_meshes={list(self._num_meshes)}, "
            f"device={str(self._device)!r}, sign_method={self._sign_method!r})"
        )


# --------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------


def _world_device(device: Any) -> torch.device:
    """``device`` as a torch device warpgeo runs on here; ValueError naming it otherwise (no CUDA, ...)."""
    if isinstance(device, bool) or not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str or torch.device ('cpu', 'cuda', 'cuda:1'); got {device!r}")
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"device {device!r} is not a device (try 'cpu', 'cuda', 'cuda:0')") from exc
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(parsed)!r} was asked for, but torch sees no CUDA device")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {str(parsed)!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    elif parsed.type != "cpu":
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]' (where Warp runs); got {str(parsed)!r}")
    return parsed


def _sign_methods(sign_method: Any, envs: list[list], single: bool) -> list[list[str]]:
    """``sign_method`` (one name, a flat list for one environment, or nested lists) as one name per mesh."""
    names = ", ".join(repr(k) for k in _SIGN_METHODS)
    if isinstance(sign_method, str):
        if sign_method not in _SIGN_METHODS:
            raise ValueError(f"sign_method must be one of {names}; got {sign_method!r}")
        return [[sign_method] * len(env) for env in envs]
    if not isinstance(sign_method, Sequence) or len(sign_method) != len(envs):
        shape = "one name per mesh" if single else "one list per environment"
        raise ValueError(f"sign_method must be a name ({names}) or {shape}; got {sign_method!r}")
    out = []
    for e, (env_methods, env) in enumerate(zip(sign_method, envs, strict=True)):
        where = "sign_method" if single else f"sign_method[{e}]"
        if (
            isinstance(env_methods, str)
            or not isinstance(env_methods, Sequence)
            or len(env_methods) != len(env)
        ):
            raise ValueError(f"{where} must list one sign method per mesh ({len(env)}); got {env_methods!r}")
        for m, name in enumerate(env_methods):
            if name not in _SIGN_METHODS:
                raise ValueError(f"{where}[{m}] must be one of {names}; got {name!r}")
        out.append(list(env_methods))
    return out


def _check_poses(value: torch.Tensor, norm: torch.Tensor) -> None:
    """The pose value checks: finite, unit quaternions (one device-to-host copy)."""
    host = torch.cat([torch.isfinite(value).all().reshape(1).to(norm.dtype), norm.reshape(-1)]).cpu()
    finite, norm_host = bool(host[0]), host[1:].reshape(norm.shape)
    if not finite:
        raise ValueError("poses must be finite; got NaN or inf")
    bad = (norm_host - 1.0).abs() > _QUAT_NORM_TOL
    if bool(bad.any()):
        e, m = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"poses[{e}, {m}] must hold a unit quaternion [qw, qx, qy, qz] (norm within {_QUAT_NORM_TOL} "
            f"of 1); got {value[e, m, 3:].tolist()} with norm {float(norm_host[e, m]):.6g}"
        )


def _is_vf_pair(item: Any) -> bool:
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        return False
    return all(isinstance(x, (np.ndarray, torch.Tensor)) for x in item)


def _load_mesh(item: MeshLike, where: str) -> tuple[np.ndarray, np.ndarray]:
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


def _real_tensor(t: torch.Tensor, name: str) -> torch.Tensor:
    """``t`` detached; TypeError for complex (never silently cast to real), ValueError for meta tensors."""
    if t.is_complex():
        raise TypeError(f"{name} must be real numbers; got {t.dtype}")
    if t.device.type == "meta":
        raise ValueError(f"{name} is a meta tensor (it holds no values)")
    return t.detach()


def _real_array(x: Any, name: str) -> torch.Tensor | None:
    """``x`` as a tensor (float64 unless it was one), or None when it is ragged (an object array);
    TypeError for complex or non-numeric values (never silently cast to real)."""
    if isinstance(x, torch.Tensor):
        return _real_tensor(x, name)
    try:
        arr = np.asarray(x)
    except ValueError:  # ragged nested lists (NumPy >= 1.24)
        return None
    except Exception as exc:  # e.g. a list of meta tensors
        raise ValueError(f"{name} could not be read as an array of numbers: {exc}") from exc
    if arr.dtype == object:
        return None
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be real numbers; got dtype {arr.dtype}")
    return torch.as_tensor(arr.astype(np.float64))


def _pose_tensor(poses: Any, num_envs: int, max_meshes: int, counts: tuple[int, ...]) -> torch.Tensor:
    value = _real_array(poses, "poses")
    if value is not None:
        return value
    # ragged: one list of (x, y, z, qw, qx, qy, qz) per environment
    if not isinstance(poses, Sequence) or len(poses) != num_envs:
        raise ValueError(f"poses must be an array of shape ({num_envs}, {max_meshes}, 7) or one list per env")
    out = torch.tensor(_IDENTITY_POSE, dtype=torch.float64).repeat(num_envs, max_meshes, 1)
    for e, env_poses in enumerate(poses):
        arr = _real_array(env_poses, f"poses[{e}]")
        if arr is None or arr.dim() != 2 or arr.shape[1] != 7 or arr.shape[0] != counts[e]:
            got = "a ragged list" if arr is None else tuple(arr.shape)
            raise ValueError(f"poses[{e}] must have shape ({counts[e]}, 7); got {got}")
        out[e, : counts[e]] = arr
    return out


def _quat_rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate ``v (..., 3)`` by unit quaternions ``q (..., 4) = (w, x, y, z)``."""
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v + w * t + torch.cross(u, t, dim=-1)


#: Relative padding of a posed box (of its largest coordinate and its diagonal): far more than the rounding of
#: a float32 transform of a point into the mesh's frame, so the broad phase never drops a pair the exact path
#: would score.
_POSED_BOX_PAD = 2.0**-20


def _posed_boxes(bounds: torch.Tensor, poses: torch.Tensor) -> torch.Tensor:
    """``(E, M, 2, 3)`` float32: the world-frame axis-aligned box ``(lower, upper)`` around each mesh's box
    ``bounds`` (``(E, M, 2, 3)``, mesh frame) posed by ``poses`` (``(E, M, 7)`` float64, unit quaternions),
    padded and rounded outwards (beyond float32's range: the largest float32 or inf), so that it holds the
    posed mesh. Tensor operations only (no host sync)."""
    box = bounds.to(torch.float64)
    lo, hi = box[..., 0, :], box[..., 1, :]
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    q = poses[..., 3:]
    # the box's half-extent along world axis k: sum over mesh axes j of |R[k, j]| * half[j]
    axes = torch.eye(3, dtype=torch.float64, device=box.device).expand(*q.shape[:-1], 3, 3)
    columns = _quat_rotate(q[..., None, :].expand(*q.shape[:-1], 3, 4), axes)  # (E, M, 3 (j), 3 (k))
    extent = (columns.abs() * half[..., :, None]).sum(dim=-2)
    middle = _quat_rotate(q, centre) + poses[..., :3]
    pad = _POSED_BOX_PAD * (middle.abs() + extent).amax(dim=-1, keepdim=True)
    lower, upper = middle - extent - pad, middle + extent + pad
    lower32, upper32 = lower.to(torch.float32), upper.to(torch.float32)
    down = torch.nextafter(lower32, torch.full_like(lower32, -math.inf))  # a fill on the device, no host copy
    up = torch.nextafter(upper32, torch.full_like(upper32, math.inf))
    lower32 = torch.where(lower32.double() > lower, down, lower32)
    upper32 = torch.where(upper32.double() < upper, up, upper32)
    return torch.stack([lower32, upper32], dim=-2).contiguous()


def _inverse_warp_transform(poses: torch.Tensor) -> torch.Tensor:
    """World-from-mesh ``[t, qw, qx, qy, qz]`` -> mesh-from-world in Warp's ``[t, qx, qy, qz, qw]``."""
    t, q = poses[..., :3], poses[..., 3:]
    q_inv = torch.cat([q[..., :1], -q[..., 1:]], dim=-1)
    t_inv = -_quat_rotate(q_inv, t)
    return torch.cat([t_inv, q_inv[..., 1:], q_inv[..., :1]], dim=-1).contiguous()


#: Warp's mesh queries skip a face whose |e0 x e1| / (|e0|^2 + |e1|^2 + |e2|^2) is below this (a sliver).
_SLIVER_RATIO = 1.0e-6
#: Mesh coordinates (mesh units) up to which Warp's float32 squared distances cannot overflow.
_COORDINATE_LIMIT = 2.0**60
#: Cells of a mesh's distance grid (about; at most _GRID_MAX_AXIS along an axis).
_GRID_CELLS = 8192
_GRID_MAX_AXIS = 64
_FLAG_CLOSED = 1  # warpgeo._kernels.sdf.FLAG_CLOSED
_FLAG_BOX = 2  # warpgeo._kernels.sdf.FLAG_BOX


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
        return _FLAG_CLOSED | _FLAG_BOX, (0, 0, 0), np.zeros(0, dtype=np.float32), None
    edge_index = _closed_edges(mesh, vertices, faces, device)
    closed = edge_index is not None
    topology = _pseudo_normal_tables(vertices, faces, edge_index) if closed else None
    extent = (box[1] - box[0]).astype(np.float64)
    if not (closed or method == "unsigned") or not (extent > 0).all():
        return (_FLAG_CLOSED if closed else 0), (0, 0, 0), np.zeros(0, dtype=np.float32), topology
    cell = float(np.prod(extent) / _GRID_CELLS) ** (1.0 / 3.0)
    dims = np.clip(np.round(extent / cell), 1, _GRID_MAX_AXIS).astype(int)
    size = (extent / dims).astype(np.float32)
    wp = _interop.warp()
    values = torch.empty(int(dims.prod()), dtype=torch.float32, device=device)
    _interop.launch(
        _interop.kernels("sdf_build").grid_centres,
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
    return (_FLAG_CLOSED if closed else 0), tuple(int(n) for n in dims), values.cpu().numpy(), topology


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
        _interop.kernels("sdf_build").face_intersections,
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
    kernels = _interop.kernels("sdf_build")
    wdev = _interop.warp_device(device)
    probe = wp.Mesh(
        points=wp.array(_PROBE_VERTICES, dtype=wp.vec3, device=wdev),
        indices=wp.array(_PROBE_FACES.reshape(-1), dtype=wp.int32, device=wdev),
        support_winding_number=True,
    )
    if device.type == "cuda":
        wp.synchronize_device(wdev)
    out = torch.zeros(1, dtype=torch.float32, device=device)
    _interop.launch(
        kernels.winding_probe(), 1, device=device, mesh=probe.id, p=wp.vec3(0.5, 0.5, 0.5), out_sign=out
    )
    return float(out.item())


def _check_winding_support(device: torch.device) -> None:
    """Raise unless Warp really classifies by winding number on ``device`` (it falls back silently)."""
    if _winding_probe_result(device) >= 0.0:
        raise RuntimeError(
            "sign_method='winding': this Warp build classified a winding-number probe with the ray vote "
            "(winding-number support did not take); use sign_method='ray' or another warp-lang version"
        )
