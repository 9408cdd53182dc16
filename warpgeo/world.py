"""MeshWorld: triangle meshes (Warp BVHs) grouped in environments, with poses and enable flags.

The world's state: its tensors (:data:`WORLD_FIELDS`, what the SDF ops take) and their updates
(:meth:`MeshWorld.set_poses`, :meth:`MeshWorld.set_enabled`, in place). Reading the caller's entries, names and
poses, and building the meshes and their tables, is the world wing's (``warpgeo._world``)."""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from . import _threads, _warp, checks
from ._kernels import world as world_kernels
from ._mesh_ids import register_mesh_ids
from ._world import builder as _builder
from ._world import editing as _editing
from ._world import loading as _loading
from ._world import prepare as _prepare
from ._world.entries import _layout, _named_slot, _named_slots, _sign_methods, _slot_poses, _warn_open
from ._world.loading import MeshLike
from ._world.poses import (  # noqa: F401 (compat.curobo takes them from here)
    _IDENTITY_POSE,
    QUAT_NORM_TOL,
    _check_poses,
    _inverse_warp_transform,
    _pose_row,
    _pose_tensor,
    _posed_boxes,
    _real_tensor,
    compose_poses,
)

__all__ = ["WORLD_FIELDS", "MeshWorld", "MeshWorldArgs"]


def _torch_layout(element: Any, dims: tuple) -> tuple[torch.dtype | None, tuple[int | str | None, ...]]:
    """The torch dtype and shape of a world field declared as ``(element, dims)`` (see
    ``warpgeo._kernels.world.WORLD_FIELDS``): a vector element adds its length as the last dimension; None (the
    query's transform) is the compute dtype's 7 numbers. Reads Warp's types only: initialises nothing."""
    import warp as wp

    if element is None:
        return None, (*dims, 7)
    if not wp.types.type_is_vector(element):
        return wp.dtype_to_torch(element), dims
    length = wp.types.type_size(element)
    for scalar in (wp.float32, wp.float64, wp.int32, wp.int64):
        if wp.types.types_equal(element, wp.types.vector(length, scalar)):
            return wp.dtype_to_torch(scalar), (*dims, length)
    raise TypeError(f"internal error: a world field of element type {element} has no torch layout")


#: The world as the SDF ops take it (``world: list[Tensor]``, in this order), derived from its one declaration,
#: ``warpgeo._kernels.world.WORLD_FIELDS`` (whose struct the kernels read): ``name: (dtype, shape)``, with ``E`` /
#: ``M`` the numbers of environments and mesh slots, None a free size and dtype None the query's compute dtype
#: (float32, or float64 for float64 queries). ``set_poses`` / ``set_enabled`` update ``inv_poses``,
#: ``world_bounds`` and ``enabled`` in place; a mesh's tables come in as new tensors (``wait_tables``);
#: the others never change.
WORLD_FIELDS: dict[str, tuple[torch.dtype | None, tuple[int | str | None, ...]]] = {
    name: _torch_layout(element, dims) for name, (element, dims) in world_kernels.WORLD_FIELDS.items()
}


class MeshWorldArgs(NamedTuple):
    """What a :class:`MeshWorld` hands the SDF ops (``torch.ops.warpgeo.*``, ``SdfMesh.apply``), by name."""

    #: The :data:`WORLD_FIELDS` tensors, in order, on the world's device: the live storage that
    #: :meth:`MeshWorld.set_poses` and :meth:`MeshWorld.set_enabled` update in place (so a captured CUDA
    #: graph sees new poses). ``inv_poses`` is in the precision asked for.
    world: list[torch.Tensor]
    #: Every mesh is a cuboid: the ops may run the kernels made for that (closed forms, no BVH query).
    all_cuboids: bool


def _mark_static(op_world: dict[torch.dtype, list[torch.Tensor]]) -> None:
    """Mark a CUDA world's tensors as static addresses for ``torch.compile``: state the kernels read in place
    (``set_poses`` writes into them), not inputs for CUDA graphs (``mode="reduce-overhead"``) to copy into
    buffers of their own each call, where the copied ``mesh_ids`` would no longer be the world's own."""
    tensors = [t for world in op_world.values() for t in world if t.device.type == "cuda"]
    mark = getattr(getattr(torch, "_dynamo", None), "mark_static_address", None) if tensors else None
    for tensor in tensors if mark is not None else ():
        mark(tensor)


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

    Editing: a world built with ``capacity={kind: count}`` (kinds ``"mesh"``, ``"cuboid"``, ``"sphere"``,
    ``"capsule"``, ``"cylinder"``) keeps room, in every environment, for that many more entries of each kind than
    it was built with: :meth:`add` and :meth:`remove` write into the world's tensors in place (no tensor an op
    reads is reallocated, so captured CUDA graphs stay valid, as with :meth:`set_poses`); beyond the capacity,
    a ValueError naming the kind. The slots are one pool per environment (``max_meshes`` is the most entries an
    environment may hold at once: those built plus every kind's capacity); a removed entry's slot is reused. A
    world with room for meshes runs the general kernels from the start, even while it holds closed forms only.
    Threads: as :meth:`set_poses` (not while another thread queries the world).

    Names: entries given as a dict ``{name: entry}`` are named (``world.names``), and :meth:`set_poses` /
    :meth:`set_enabled` then also take ``{name: value}``; a list gives unnamed entries. Names are unique
    strings within an environment.

    Scenes: a ``trimesh.Scene`` entry (in memory, or a glb / gltf / dae / 3mf file trimesh loads as one)
    becomes one slot per geometry instance (``scene.graph.nodes_geometry``, in that order; a geometry at
    several nodes gives several slots, sharing one BVH), each posed by its node's transform: the rigid part
    of the transform goes into the slot's pose, any scale, shear or mirror is baked into that slot's
    vertices (so ``set_poses`` moves the geometry as the scene placed it, at its scaled size). A scene of
    several geometries names its slots by their nodes, ``"<name>/<node>"`` under a named entry. A scene of
    one geometry is one slot, named (or not) as its entry. OBJ, STL, PLY and OFF files are one mesh each,
    as before (an OBJ's material groups are parts of one object, not objects). At construction ``poses``
    and a per-mesh ``sign_method`` list hold one value per entry *as given*: a scene's pose is
    world-from-scene, composed with each node's transform; afterwards (``world.poses``, :meth:`set_poses`,
    :meth:`set_enabled`, ``num_meshes``) there is one per slot.

    Building: each mesh's BVH is built at once; the tables of every new mesh are built together, in batched
    kernels (one launch over all meshes' faces or grid cells). On the CPU the meshes get the tables of the
    queries' exact shortcuts (closed-mesh check and pseudo-normals, distance grid sized to the mesh, a convex
    mesh's plane tree: seconds at a million faces, and seconds for any mesh in a fresh process whose kernel
    cache is empty) on background threads at the lowest priority, and the next op call after they are done
    takes them in (:meth:`wait_tables` waits for them). Queries before give the same distances (the same
    closest face up to float32 ties, the same side), only slower for points deep inside; the build stops if
    the world is dropped first, or the interpreter exits. Every CUDA world gets its tables at once.

    Args:
        meshes: the entries of a one-environment world, a list or a dict ``{name: entry}``; each a
            ``trimesh.Trimesh``, a ``trimesh.Scene`` (its geometries, see Scenes), a file path (obj, stl,
            ply, off: one mesh; glb, gltf, dae, 3mf: a scene), a ``(vertices (V, 3), faces (F, 3))`` pair of
            arrays or tensors, an analytic primitive (:mod:`warpgeo.primitives`), or a
            :class:`~warpgeo.DistanceGrid` (its values copied in float32; trilinear distance and the exact
            gradient of the interpolant, the distance to its box outside it; new values by :meth:`set_grid`).
        poses: ``(M, 7)`` world-from-mesh poses, one per entry as given (identity by default); any
            array-like, or a dict ``{name: pose}`` for named entries (the others: identity).
        device: where the meshes live; every query must be on this device.
        sign_method: how a mesh tells inside from outside: ``"ray"`` (Warp's vote of three axis-aligned
            rays; exact on closed meshes and forgiving of small holes; default), ``"winding"`` (generalised
            winding number; robust on open or self-intersecting meshes, slower; such meshes are built with
            winding-number support), ``"normal"`` (the closest feature's angle-weighted pseudo-normal:
            exact on closed, consistently wound, manifold meshes, and the cheapest; Warp's own test where
            the mesh's edges do not pair up) or ``"unsigned"``
            (no inside: thin shells and open containers such as bins and shelves; distances are >= 0 and
            a sphere collides only where it touches the surface). One name for every mesh, or a list
            with one per mesh. A world whose open meshes (edges that do not pair up: holes, an open top)
            are signed by ``"ray"`` or ``"normal"`` warns once, at construction (a ``UserWarning`` naming
            them, the method and the alternatives): points in the opening of a bin may read as inside.
        capacity: ``{kind: count}``: room per environment for entries added later (see Editing); None: none
            (:meth:`add` refuses).

    Raises:
        TypeError: a mesh of an unsupported type; faces that are not integers; complex vertices; a
            ``capacity`` that is not a dict of ints.
        ValueError: an empty mesh or environment list, non-finite vertices or vertices beyond float32's
            range (Warp meshes are float32), meta tensors, bad shapes, a file trimesh cannot load as a mesh,
            a bad ``sign_method``, a ``capacity`` of an unknown kind or a negative count, a device that is not
            ``cpu`` / ``cuda[:N]`` or that this machine lacks,
            bad poses (see :meth:`set_poses`).
        IndexError: face indices outside ``[0, V)``.
        RuntimeError: ``sign_method="winding"`` and this Warp build does not honour winding numbers.

    Example:
        >>> import trimesh
        >>> table = (np.array([[-1, -1, 0], [1, -1, 0], [1, 1, 0], [-1, 1, 0]]), np.array([[0, 1, 2], [0, 2, 3]]))
        >>> world = MeshWorld([trimesh.creation.box((1, 1, 1)), table],  # a table top: open, unsigned
        ...                   poses=[[0, 0, 0.5, 1, 0, 0, 0], [1, 0, 0, 1, 0, 0, 0]],
        ...                   sign_method=["ray", "unsigned"])
        >>> world.set_poses(torch.tensor([[0, 0, 0.6, 1, 0, 0, 0], [1, 0, 0, 1, 0, 0, 0]]))
        >>> world.set_enabled([True, False])
        >>> named = MeshWorld({"box": trimesh.creation.box((1, 1, 1)), "ball": warpgeo.Sphere(0.2)})
        >>> named.names
        [['box', 'ball']]
        >>> named.set_poses({"ball": [0, 0, 1, 1, 0, 0, 0]})
        >>> named.set_enabled({"box": False})
    """

    def __init__(
        self,
        meshes: Sequence[MeshLike] | Mapping[str, MeshLike],
        *,
        poses: Any = None,
        device: torch.device | str = "cpu",
        sign_method: str | Sequence[str] = "ray",
        capacity: Mapping[str, int] | None = None,
    ) -> None:
        if (
            isinstance(meshes, (str, os.PathLike))
            or _loading.is_vf_pair(meshes)
            or not isinstance(meshes, (Sequence, Mapping))
        ):
            raise TypeError(
                "meshes must be a list of meshes (trimesh.Trimesh, path or (vertices, faces)) or a dict "
                f"{{name: mesh}}; got {type(meshes).__name__} (wrap a single mesh in a list)"
            )
        methods = sign_method if isinstance(sign_method, str) else [sign_method]
        device = _world_device(device)
        self._build(
            [meshes], None if poses is None else [poses], device, methods, single=True, capacity=capacity
        )

    @classmethod
    def from_envs(
        cls,
        envs: Sequence[Sequence[MeshLike]],
        *,
        poses: Any = None,
        device: torch.device | str = "cpu",
        sign_method: str | Sequence[Sequence[str]] = "ray",
        capacity: Mapping[str, int] | None = None,
    ) -> MeshWorld:
        """A world of several environments, which may hold different numbers of meshes.

        Args:
            envs: one list of entries (or a dict ``{name: entry}``, see :class:`MeshWorld`) per environment,
                e.g. ``[[table, shelf], [table]]`` or ``[{"table": table, "shelf": shelf}, {"table": table}]``.
            poses: per-environment lists of poses (ragged like ``envs``), an ``(E, max_meshes, 7)`` array whose
                padding entries are ignored, or a dict ``{(env, name): pose}``; one per entry as given (a
                scene's composed with its nodes' transforms, see :class:`MeshWorld`). Identity by default.
            device: as for :class:`MeshWorld`.
            sign_method: one name for every mesh (see :class:`MeshWorld`), or per-environment lists nested
                like ``envs``.
            capacity: room for entries added later, per environment (see :class:`MeshWorld`).
        """
        if not isinstance(envs, Sequence) or isinstance(envs, str) or len(envs) == 0:
            raise ValueError("envs must be a non-empty list of per-environment mesh lists")
        env_lists = []
        for e, env in enumerate(envs):
            if (
                isinstance(env, (str, os.PathLike))
                or _loading.is_vf_pair(env)
                or not isinstance(env, (Sequence, Mapping))
            ):
                raise TypeError(
                    f"envs[{e}] must be a list of meshes or a dict {{name: mesh}}; got {type(env).__name__}"
                )
            env_lists.append(env)
        world = cls.__new__(cls)
        world._build(env_lists, poses, _world_device(device), sign_method, single=False, capacity=capacity)
        return world

    # ----------------------------------------------------------------------------------------------------

    def _build(
        self, given: list, poses: Any, device, sign_method, *, single: bool, capacity: Any = None
    ) -> None:
        self._capacity = _editing.parse_capacity(capacity)
        # names and scenes: each environment's entries as given (a list or a dict) -> one entry per slot
        seen: dict = {}  # scenes met already (by path, by object): loaded and expanded once, whatever recurs
        layouts = [_layout(env, "meshes" if single else f"envs[{e}]", seen) for e, env in enumerate(given)]
        given_methods = _sign_methods(sign_method, [layout.given for layout in layouts], single)
        envs = [layout.entries for layout in layouts]
        methods = [
            [env_methods[i] for i in layout.source]
            for layout, env_methods in zip(layouts, given_methods, strict=True)
        ]
        self._names = [layout.names for layout in layouts]
        self._device = torch.device(device)
        _warp.warp_device(self._device)  # ValueError for devices Warp cannot run on
        if self._device.type == "cuda" and self._device.index is None:
            self._device = torch.device("cuda", torch.cuda.current_device())
        if isinstance(sign_method, str):
            self._sign_method: str | list = sign_method
        else:
            self._sign_method = given_methods[0] if single else given_methods
        self._single = single
        counts = [len(env) for env in envs]
        if sum(counts) == 0 and not any(self._capacity.values()):
            raise ValueError(
                "a MeshWorld needs at least one mesh (or a capacity for entries added later); got none"
            )
        # room for entries added later: every environment may reach its limit of every kind at once
        self._counts, self._limits = _editing.limits(envs, self._capacity) if self._capacity else ([], [])
        num_envs = len(envs)
        max_meshes = max(sum(limit.values()) for limit in self._limits) if self._capacity else max(counts)
        self._num_meshes = tuple(counts)

        scenes = any(layout.scene_slots for layout in layouts)
        try:
            prepared = _prepare.prepare(envs, methods, self._device, single=single, slots=max_meshes)
        except (TypeError, ValueError, IndexError) as exc:
            if not scenes:
                raise
            # the message names a slot (meshes[m]), which scenes have shifted from the entries as given
            slots = "; ".join(note for layout in layouts for note in layout.scene_slots)
            raise type(exc)(f"{exc} [slots after expanding scenes: {slots}]") from exc
        # the Warp meshes own the BVHs the kernels query by id: they live as long as the mesh_ids tensor
        self._wp_meshes: list[list[Any]] = [row + [None] * (max_meshes - len(row)) for row in prepared.meshes]
        #: the world's tensors by WORLD_FIELDS name (inv_poses: float64 here; float32 in _inv_poses32)
        self._tables = dict(prepared.tables)
        mesh_ids = self._tables["mesh_ids"]
        self._ids_host = mesh_ids.cpu().numpy().view(np.uint64).copy()  # what add / remove re-register
        register_mesh_ids(mesh_ids, list(self._wp_meshes), self._ids_host.view(np.int64))
        # a world with room for meshes runs the general kernels from the start (a captured graph stays valid)
        self._all_cuboids = prepared.all_cuboids and not self._capacity.get("mesh", 0)
        #: the distance grids' slots (e, m) -> (first row in voxel_values, (X, Y, Z)): what set_grid writes
        self._grids = dict(prepared.grids)
        if prepared.open_signed:
            _warn_open(prepared.open_signed, methods, self._names, single)

        # slot m of environment e holds a mesh where m < counts[e] (no loop over environments)
        self._present = torch.arange(max_meshes) < torch.tensor(counts)[:, None]
        self._present = self._present.to(self._device)
        self._present_host = (np.arange(max_meshes) < np.array(counts)[:, None]).copy()
        self._kinds_host = self._tables["slot_kind"].cpu().numpy().copy()
        self._enabled = self._present.to(torch.int32)
        self._poses = torch.tensor(_IDENTITY_POSE, dtype=torch.float64).repeat(num_envs, max_meshes, 1)
        self._poses = self._poses.to(self._device)
        self._identity_pose = self._poses[
            0, 0
        ].clone()  # on the device: set_poses copies nothing from the host
        self._inv_poses = _inverse_warp_transform(self._poses)
        self._inv_poses32 = self._inv_poses.to(torch.float32)
        self._tables["enabled"] = self._enabled
        # the kernels' broad phase: each mesh's box posed in the world (live, like the poses)
        self._tables["world_bounds"] = _posed_boxes(self._tables["bounds"], self._poses)
        #: the ops' world lists, per precision: the same list objects call after call
        self._op_world = {
            dtype: [inv if name == "inv_poses" else self._tables[name] for name in WORLD_FIELDS]
            for dtype, inv in ((torch.float32, self._inv_poses32), (torch.float64, self._inv_poses))
        }
        _mark_static(self._op_world)
        #: the tables of the meshes, still being built on a background thread (None: all in; CPU only)
        self._later = prepared.later
        self._take_lock = _threads.ForkSafeLock()
        if (
            scenes
            or max_meshes > max(counts)
            or any(isinstance(p, Mapping) for p in ([poses] if not single else poses or ()))
        ):
            # per-entry poses (or names) -> per-slot poses, each scene's node transforms composed in; the
            # slots kept for entries added later: identity
            slot_poses = np.tile(np.asarray(_IDENTITY_POSE), (num_envs, max_meshes, 1))
            if sum(counts):
                given_poses = _slot_poses(poses, layouts, single)
                slot_poses[:, : given_poses.shape[1]] = given_poses
            self.set_poses(slot_poses)
        elif poses is not None:
            self.set_poses(poses if not single else poses[0])
        if self._later is not None:
            self._later.start()

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
        return self._present.shape[0]

    @property
    def max_meshes(self) -> int:
        """M, the padded width of pose/enable tensors: the largest number of meshes in one environment, or with
        ``capacity`` the slots kept for them."""
        return self._present.shape[1]

    @property
    def num_meshes(self) -> tuple[int, ...]:
        """The number of meshes of each environment: its slots up to the last one in use (a slot emptied by
        :meth:`remove` before it stays a disabled hole, named None, until :meth:`add` fills it)."""
        return self._num_meshes

    @property
    def names(self) -> list[list[str | None]]:
        """Per environment, the name of each of its ``num_meshes[e]`` slots (None where unnamed): the keys of
        a dict of entries, and for a scene's geometries their node names (see :class:`MeshWorld`). A copy."""
        return [list(env) for env in self._names]

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
                Or by name, a dict of poses (shape ``(7,)`` each): ``{name: pose}`` in a one-environment
                world, ``{(env, name): pose}`` in any; the slots not named keep their pose. The dict is
                made into the full tensor from :attr:`poses` (on the device: the new rows cross from the
                host in one copy) and applied as one; the tensor form is the one to capture in a CUDA graph.

        Raises:
            TypeError: complex or non-numeric poses; a name that is not a string.
            ValueError: wrong shape, a meta tensor, non-finite values, or a quaternion whose norm is not
                within 1e-3 of 1; an unknown name (the message lists the names), a plain name key in a
                world of several environments, two keys for one slot.

        With value checks on (the default; see :func:`warpgeo.value_checks`) the poses are validated on
        the host: one device-to-host copy per call. With them off nothing is read back (and a bad pose gives
        a wrong answer, never a crash). Not to be called while another thread queries this world: the
        update is in place (so captured CUDA graphs see it) and a concurrent query may see it half done.
        """
        if isinstance(poses, Mapping):
            poses = self._poses_by_name(poses)
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
        if checks.checking_values(self._device):
            _check_poses(value, norm)
        value = torch.cat([value[..., :3], value[..., 3:] / norm[..., None]], dim=-1)
        # in place: compiled graphs, captured CUDA graphs and user references keep seeing the live tensors
        self._poses.copy_(value)
        self._inv_poses.copy_(_inverse_warp_transform(value))
        self._inv_poses32.copy_(self._inv_poses)
        self._tables["world_bounds"].copy_(_posed_boxes(self._tables["bounds"], value))

    def set_enabled(self, mask: Any) -> None:
        """Switch meshes on and off (a disabled mesh contributes nothing); rebuilds nothing.

        Args:
            mask: ``(E, M)``, or ``(M,)`` for a one-environment world; bool (or 0/1 integers). Padding slots
                stay disabled whatever the mask says. Or by name, as for :meth:`set_poses`: ``{name: bool}``
                or ``{(env, name): bool}`` (a Python bool, 0 / 1, or a one-element bool tensor); the slots
                not named keep their flag.

        Raises:
            TypeError: a floating, complex or non-numeric mask.
            ValueError: wrong shape, a meta tensor, an integer other than 0 and 1 (an integer tensor's values
                are checked with the value checks: one device-to-host read; with them off nothing is read
                back and any nonzero integer enables); by name: as for :meth:`set_poses`.

        Not to be called while another thread queries this world (the update is in place, see
        :meth:`set_poses`).
        """
        if isinstance(mask, Mapping):
            mask = self._enabled_by_name(mask)
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
            if array.dtype.kind != "b" and not ((array == 0) | (array == 1)).all():  # host values: no sync
                raise ValueError(f"mask must hold bools or 0/1 integers; got {sorted(set(array.flat))[:8]}")
            value = torch.as_tensor(array.astype(np.bool_))
        if value.is_floating_point() or value.is_complex():
            raise TypeError(f"mask must be bool (or 0/1 integers); got {value.dtype}")
        if value.dim() == 1 and self.num_envs == 1:
            value = value.unsqueeze(0)
        if tuple(value.shape) != (self.num_envs, self.max_meshes):
            expected = f"({self.max_meshes},) or " if self.num_envs == 1 else ""
            raise ValueError(
                f"mask must have shape {expected}({self.num_envs}, {self.max_meshes}); got {tuple(value.shape)}"
            )
        checking = value.dtype != torch.bool and checks.checking_values(value.device)
        if checking and bool(((value != 0) & (value != 1)).any()):  # one read (of the caller's own device)
            raise ValueError(
                f"mask must hold bools or 0/1 integers; got values {value.unique()[:8].tolist()}"
            )
        value = value.to(self._device).bool() & self._present
        self._enabled.copy_(value.to(torch.int32))

    def add(
        self,
        entry: MeshLike,
        *,
        name: str | None = None,
        pose: Any = None,
        env: int = 0,
        sign_method: str | None = None,
    ) -> int:
        """Put a new entry into environment ``env`` of a world built with ``capacity``, in place.

        The entry takes the environment's first free slot; every tensor the ops read keeps its storage (only
        that slot's row is written), so an op sees the entry at its next call and a captured CUDA graph at its
        next replay. A primitive is a few small writes. A mesh gets its BVH, built here, and the per-face
        checks a world's construction runs (beside the BVH build on a helper thread where a core is free: a
        little longer than the bare BVH build), and none of the tables of the queries' shortcuts (distance
        grid, pseudo-normals, plane tree: those live in flat tables shared by every mesh, which would have to
        grow): its queries are exact (the same closest face and side as in a world built with it), only
        slower for points deep inside it. A cuboid mesh is a closed form either way.

        Args:
            entry: a primitive (:mod:`warpgeo.primitives`) or a mesh (as :class:`MeshWorld` takes one; not a
                scene of several geometries).
            name: the entry's name (unique in its environment), for :meth:`set_poses` / :meth:`set_enabled` /
                :meth:`remove` by name; None: unnamed.
            pose: ``[x, y, z, qw, qx, qy, qz]`` world-from-entry (identity by default).
            env: the environment.
            sign_method: a mesh's sign method (see :class:`MeshWorld`); None: the world's, where it was given
                as one name, else ``"ray"``.

        Returns:
            The entry's slot index ``m`` (its row in ``poses[env]``, ``enabled[env]``, ``names[env]``); it is
            enabled.

        Raises:
            ValueError: a world built without ``capacity``; the environment holds as many entries of the kind
                as its capacity allows (the message names the kind and the capacity); a name in use; a bad
                pose (shape, NaN, not a unit quaternion), a bad mesh (see :class:`MeshWorld`), a scene.
            IndexError: ``env`` outside ``[0, num_envs)``.
            TypeError: ``env`` not an int, ``name`` not a string, an unsupported entry.

        Not to be called while another thread queries this world (as :meth:`set_poses`). On CUDA, adding a
        mesh waits for its BVH (a device synchronisation).
        """
        return _editing.add(self, entry, name, pose, env, sign_method)

    def remove(self, name_or_index: str | int, *, env: int = 0) -> None:
        """Take an entry out of environment ``env``, in place: its slot becomes free (for :meth:`add`), as a
        padding slot is (disabled, no mesh), its name is gone; the other entries keep their slots. A removed
        mesh's BVH is let go (on CUDA after a device synchronisation, so that no queued kernel still reads it).

        Args:
            name_or_index: the entry's name, or its slot index.
            env: the environment.

        Raises:
            ValueError: no entry of that name. IndexError: no entry in that slot, or ``env`` out of range.
            TypeError: neither a name nor an index.

        Not to be called while another thread queries this world (as :meth:`set_poses`)."""
        _editing.remove(self, name_or_index, env)

    @property
    def capacity(self) -> dict[str, int]:
        """The room kept per environment for entries added later, ``{kind: count}`` as given (empty: none)."""
        return dict(self._capacity)

    def set_grid(self, entry: int | str, values: torch.Tensor, *, env: int = 0) -> None:
        """Write new values into a distance grid entry (a :class:`~warpgeo.DistanceGrid` given to the world),
        in place: the same shape, no reallocation (the rows of the world's ``voxel_values`` it was given), so
        a captured CUDA graph reads the new values on its next replay, and ``set_grid`` itself may be captured.

        Args:
            entry: the entry's index in environment ``env`` (an int) or its name (see :attr:`names`).
            values: ``(X, Y, Z)`` signed distances (float32 or float64, any device: copied to the world's in
                float32, as it stores them), the shape of the grid the entry was built with.
            env: the environment (an int).

        Raises:
            TypeError: ``values`` not a float tensor; ``entry`` or ``env`` not an int (or a name).
            ValueError: an unknown name, an index or ``env`` out of range, an entry that is no distance grid,
                a shape other than the entry's; NaN or inf in ``values`` (with value checks on: one read).

        Not to be called while another thread queries this world (the update is in place, see
        :meth:`set_poses`).
        """
        if isinstance(env, bool) or not isinstance(env, (int, np.integer)):
            raise TypeError(f"env must be an int; got {type(env).__name__}")
        if not 0 <= env < self.num_envs:
            raise ValueError(f"env must be in [0, {self.num_envs}); got {env}")
        env = int(env)
        if isinstance(entry, str):
            _, m = _named_slot((env, entry), self._names, "entry")
        elif isinstance(entry, (int, np.integer)) and not isinstance(entry, bool):
            if not 0 <= entry < self._num_meshes[env]:
                raise ValueError(
                    f"entry must be in [0, {self._num_meshes[env]}) in environment {env}; got {entry}"
                )
            m = int(entry)
        else:
            raise TypeError(f"entry must be an int index or a name; got {type(entry).__name__}")
        slot = self._grids.get((env, m))
        if slot is None:
            raise ValueError(f"entry {entry!r} of environment {env} is not a DistanceGrid")
        first, shape = slot
        if not isinstance(values, torch.Tensor) or values.dtype not in (torch.float32, torch.float64):
            got = values.dtype if isinstance(values, torch.Tensor) else type(values).__name__
            raise TypeError(f"values must be a float32 or float64 tensor; got {got}")
        if tuple(values.shape) != tuple(shape):
            raise ValueError(f"values must have the grid's shape {tuple(shape)}; got {tuple(values.shape)}")
        checks.check_device("values", values=values)
        if checks.checking_values(values.device) and not bool(torch.isfinite(values).all()):
            raise ValueError("values must be finite (signed distances in metres); found NaN or inf")
        rows = self._tables["voxel_values"].narrow(0, first, values.numel())
        rows.copy_(values.detach().reshape(-1))

    # ----------------------------------------------------------------------------------------------------
    # by name: the dict forms of set_poses / set_enabled build the full tensor and take the tensor path
    # ----------------------------------------------------------------------------------------------------

    def _slots(self, mapping: Mapping, arg: str) -> tuple[list[int], list[int]]:
        return _named_slots(mapping, self._names, arg)

    def _poses_by_name(self, poses: Mapping) -> torch.Tensor:
        """The ``(E, M, 7)`` poses: the current ones, with the named entries' replaced."""
        envs, slots = self._slots(poses, "poses")
        value = self._poses.clone()
        if not envs:
            return value
        rows = [_pose_row(pose, key) for key, pose in poses.items()]
        if all(row.device.type == "cpu" for row in rows):
            stacked = torch.stack(rows).to(self._device)  # one copy from the host
        else:
            stacked = torch.stack([row.to(self._device) for row in rows])
        index = torch.tensor([envs, slots], dtype=torch.int64).to(self._device)
        value[index[0], index[1]] = stacked
        return value

    def _enabled_by_name(self, mask: Mapping) -> torch.Tensor:
        """The ``(E, M)`` enable flags: the current ones, with the named entries' replaced."""
        envs, slots = self._slots(mask, "mask")
        value = self._enabled.bool()
        if not envs:
            return value
        flags = []
        for key, flag in mask.items():
            if isinstance(flag, torch.Tensor) and flag.dtype == torch.bool and flag.numel() == 1:
                flags.append(flag.detach().reshape(()).to(self._device))
            elif isinstance(flag, (bool, np.bool_)) or (
                isinstance(flag, (int, np.integer)) and int(flag) in (0, 1)
            ):
                flags.append(bool(flag))
            else:
                raise TypeError(
                    f"mask[{key!r}] must be a bool (or a one-element bool tensor); got {flag!r:.60}"
                )
        if any(isinstance(flag, torch.Tensor) for flag in flags):
            stacked = torch.stack([torch.as_tensor(flag, device=self._device) for flag in flags])
        else:
            stacked = torch.tensor(flags, dtype=torch.bool).to(self._device)  # one copy from the host
        index = torch.tensor([envs, slots], dtype=torch.int64).to(self._device)
        value[index[0], index[1]] = stacked
        return value

    def kernel_args(self, dtype: torch.dtype = torch.float32) -> MeshWorldArgs:
        """What the SDF ops take of this world, for queries computed in ``dtype`` (float32 or float64: the
        precision of ``inv_poses``): ``(world, all_cuboids)``, see :class:`MeshWorldArgs`. The live storage,
        not copies. Reads only: tables built in the background come in by :meth:`take_tables` (which every
        op of warpgeo calls first; call it before this between calls of your own) or :meth:`wait_tables`.

        Raises:
            TypeError: ``dtype`` is not one of the floating dtypes the ops take."""
        world = self._op_world.get(dtype)
        if world is None:
            if dtype not in _warp.FLOAT_DTYPES:
                raise TypeError(f"dtype must be one of {_warp.FLOAT_DTYPES}; got {dtype!r}")
            world = self._op_world[torch.float32]
        return MeshWorldArgs(world, self._all_cuboids)

    def take_tables(self) -> bool:
        """Put the query tables built in the background in, if they are done (never waits): every op of
        warpgeo calls it before it reads the world (:meth:`kernel_args`). Returns whether no tables are left
        to come. Not while ``torch.compile`` traces (a traced op reads the tables it was traced with)."""
        later = self._later
        if later is None:
            return True
        if torch.compiler.is_compiling() or not later.done():
            return False
        self._take_tables()
        return self._later is None

    def wait_tables(self, timeout: float | None = None) -> bool:
        """Wait until the query tables of the world's meshes are built, and put them in.

        Building a world on the CPU builds what a query needs (each mesh's BVH) and leaves the tables of its
        exact shortcuts (closed-mesh pseudo-normals, distance grid, a convex mesh's plane tree) to background
        threads; each op call takes them in once they are done. Queries give the same distances without them
        (only slower, for points deep inside a mesh). Call this for steady timings, or to have every query
        take the same path.

        Args:
            timeout: seconds to wait at most (a float >= 0); None or ``float("inf")``: no limit.

        Returns whether the tables are in (False only when ``timeout`` seconds passed first).

        Raises:
            TypeError: ``timeout`` is not a number (or None).
            ValueError: ``timeout`` is NaN or negative."""
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout must be a number of seconds or None; got {type(timeout).__name__}")
            try:
                seconds = float(timeout)
            except OverflowError:  # an int beyond float64: longer than any wait
                seconds = math.inf
            if not seconds >= 0.0:
                raise ValueError(f"timeout must be >= 0 seconds (or None / inf: no limit); got {timeout!r}")
            # threading's waits refuse more than TIMEOUT_MAX (OverflowError): beyond it, as long as it takes
            timeout = None if seconds > threading.TIMEOUT_MAX else seconds
        later = self._later
        if later is None:
            return True
        if not later.wait(timeout):
            return False
        self._take_tables()
        return True

    def _take_tables(self) -> None:
        """Put the finished background tables in. Every table field gets a new tensor (the flat tables longer,
        with the rows already there in their place) in new world lists, never a write into a tensor or a list
        an op may be reading from another thread: an op runs on the list it got, old or new, whose tensors it
        keeps alive to its end. A build that failed leaves the world without them (exact, slower), with a
        warning."""
        with self._take_lock:
            later, self._later = self._later, None
        if later is None:  # another thread took them
            return
        try:
            tables = later.take(self._device)
        except Exception as exc:
            warnings.warn(
                f"MeshWorld: building the query tables of its meshes failed ({exc!r}); queries stay exact "
                "without them, only slower",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        index = {name: i for i, name in enumerate(WORLD_FIELDS)}
        fresh = {dtype: list(world) for dtype, world in self._op_world.items()}
        for name in (*_builder.FLAT_FIELDS, *_builder.SLOT_FIELDS):
            self._tables[name] = tables[name]
            for world in fresh.values():
                world[index[name]] = tables[name]
        # New lists, swapped in by one assignment: an op call holds the list it was handed (kernel_args), and
        # with it every tensor its kernels read, until it returns; the old tables go with the last such call.
        # (The lists were once written in place: the old tables' last references went while another thread's
        # kernel still read them, issue 33.) Later builds are CPU-only, so no stream can still be reading them.
        self._op_world = fresh

    def __repr__(self) -> str:
        return (
            f"MeshWorld(num_envs={self.num_envs}, num_meshes={list(self._num_meshes)}, "
            f"device={str(self._device)!r}, sign_method={self._sign_method!r})"
        )


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
