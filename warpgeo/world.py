"""MeshWorld: triangle meshes (Warp BVHs) grouped in environments, with poses and enable flags.

The world's state: its tensors (:data:`WORLD_FIELDS`, what the SDF ops take) and their updates
(:meth:`MeshWorld.set_poses`, :meth:`MeshWorld.set_enabled`, in place). Building the meshes and their tables
is ``warpgeo._mesh_prep``'s.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from . import _mesh_prep, _warp, checks
from ._kernels import sdf as kernels
from ._mesh_ids import register_mesh_ids
from ._mesh_prep import SIGN_METHODS as _SIGN_METHODS
from ._mesh_prep import MeshLike

__all__ = ["WORLD_FIELDS", "MeshWorld", "MeshWorldArgs"]


def _torch_layout(element: Any, dims: tuple) -> tuple[torch.dtype | None, tuple[int | str | None, ...]]:
    """The torch dtype and shape of a world field declared as ``(element, dims)`` (see
    ``warpgeo._kernels.sdf.WORLD_FIELDS``): a vector element adds its length as the last dimension; None (the
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
#: ``warpgeo._kernels.sdf.WORLD_FIELDS`` (whose struct the kernels read): ``name: (dtype, shape)``, with ``E`` /
#: ``M`` the numbers of environments and mesh slots, None a free size and dtype None the query's compute dtype
#: (float32, or float64 for float64 queries). ``set_poses`` / ``set_enabled`` update ``inv_poses``,
#: ``world_bounds`` and ``enabled`` in place; a large mesh's tables come in as new tensors (``wait_tables``);
#: the others never change.
WORLD_FIELDS: dict[str, tuple[torch.dtype | None, tuple[int | str | None, ...]]] = {
    name: _torch_layout(element, dims) for name, (element, dims) in kernels.WORLD_FIELDS.items()
}


class MeshWorldArgs(NamedTuple):
    """What a :class:`MeshWorld` hands the SDF ops (``torch.ops.warpgeo.*``, ``SdfMesh.apply``), by name."""

    #: The :data:`WORLD_FIELDS` tensors, in order, on the world's device: the live storage that
    #: :meth:`MeshWorld.set_poses` and :meth:`MeshWorld.set_enabled` update in place (so a captured CUDA
    #: graph sees new poses). ``inv_poses`` is in the precision asked for.
    world: list[torch.Tensor]
    #: Every mesh is a cuboid: the ops may run the kernels made for that (closed forms, no BVH query).
    all_cuboids: bool


#: A quaternion whose norm is within this of 1 is renormalised; farther off, it is refused.
QUAT_NORM_TOL = 1.0e-3
_IDENTITY_POSE = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)


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
    kernels (one launch over all meshes' faces or grid cells). On the CPU, a mesh of 16,384 faces or more,
    or new meshes that add up to 65,536 faces (thousands of environments of small objects), get the tables
    of the queries' exact shortcuts (closed-mesh check and pseudo-normals, distance grid sized to the mesh, a
    convex mesh's plane tree: seconds at a million faces) on background threads at the lowest priority, and
    the next op call after they are done takes them in (:meth:`wait_tables` waits for them). Queries before
    give the same distances (the same closest face up to float32 ties, the same side), only slower for
    points deep inside; the build stops if the world is dropped first. Smaller worlds, and every CUDA world,
    get their tables at once.

    Args:
        meshes: the entries of a one-environment world, a list or a dict ``{name: entry}``; each a
            ``trimesh.Trimesh``, a ``trimesh.Scene`` (its geometries, see Scenes), a file path (obj, stl,
            ply, off: one mesh; glb, gltf, dae, 3mf: a scene), a ``(vertices (V, 3), faces (F, 3))`` pair of
            arrays or tensors, or an analytic primitive (:mod:`warpgeo.primitives`).
        poses: ``(M, 7)`` world-from-mesh poses, one per entry as given (identity by default); any
            array-like, or a dict ``{name: pose}`` for named entries (the others: identity).
        device: where the meshes live; every query must be on this device.
        sign_method: how a mesh tells inside from outside: ``"ray"`` (Warp's vote of three axis-aligned
            rays; exact on closed meshes and forgiving of small holes; default), ``"winding"`` (generalised
            winding number; robust on open or self-intersecting meshes, slower; such meshes are built with
            winding-number support), ``"normal"`` (the closest feature's angle-weighted pseudo-normal:
            exact on closed, consistently wound, manifold meshes, and the cheapest) or ``"unsigned"``
            (no inside: thin shells and open containers such as bins and shelves; distances are >= 0 and
            a sphere collides only where it touches the surface). One name for every mesh, or a list
            with one per mesh. A world whose open meshes (edges that do not pair up: holes, an open top)
            are signed by ``"ray"`` or ``"normal"`` warns once, at construction (a ``UserWarning`` naming
            them, the method and the alternatives): points in the opening of a bin may read as inside.

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
    ) -> None:
        if (
            isinstance(meshes, (str, os.PathLike))
            or _mesh_prep.is_vf_pair(meshes)
            or not isinstance(meshes, (Sequence, Mapping))
        ):
            raise TypeError(
                "meshes must be a list of meshes (trimesh.Trimesh, path or (vertices, faces)) or a dict "
                f"{{name: mesh}}; got {type(meshes).__name__} (wrap a single mesh in a list)"
            )
        methods = sign_method if isinstance(sign_method, str) else [sign_method]
        device = _world_device(device)
        self._build([meshes], None if poses is None else [poses], device, methods, single=True)

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
            envs: one list of entries (or a dict ``{name: entry}``, see :class:`MeshWorld`) per environment,
                e.g. ``[[table, shelf], [table]]`` or ``[{"table": table, "shelf": shelf}, {"table": table}]``.
            poses: per-environment lists of poses (ragged like ``envs``), an ``(E, max_meshes, 7)`` array whose
                padding entries are ignored, or a dict ``{(env, name): pose}``; one per entry as given (a
                scene's composed with its nodes' transforms, see :class:`MeshWorld`). Identity by default.
            device: as for :class:`MeshWorld`.
            sign_method: one name for every mesh (see :class:`MeshWorld`), or per-environment lists nested
                like ``envs``.
        """
        if not isinstance(envs, Sequence) or isinstance(envs, str) or len(envs) == 0:
            raise ValueError("envs must be a non-empty list of per-environment mesh lists")
        env_lists = []
        for e, env in enumerate(envs):
            if (
                isinstance(env, (str, os.PathLike))
                or _mesh_prep.is_vf_pair(env)
                or not isinstance(env, (Sequence, Mapping))
            ):
                raise TypeError(
                    f"envs[{e}] must be a list of meshes or a dict {{name: mesh}}; got {type(env).__name__}"
                )
            env_lists.append(env)
        world = cls.__new__(cls)
        world._build(env_lists, poses, _world_device(device), sign_method, single=False)
        return world

    # ----------------------------------------------------------------------------------------------------

    def _build(self, given: list, poses: Any, device, sign_method, *, single: bool) -> None:
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
        if sum(counts) == 0:
            raise ValueError("a MeshWorld needs at least one mesh; got none")
        num_envs, max_meshes = len(envs), max(counts)
        self._num_meshes = tuple(counts)

        scenes = any(layout.scene_slots for layout in layouts)
        try:
            prepared = _mesh_prep.prepare(envs, methods, self._device, single=single)
        except (TypeError, ValueError, IndexError) as exc:
            if not scenes:
                raise
            # the message names a slot (meshes[m]), which scenes have shifted from the entries as given
            slots = "; ".join(note for layout in layouts for note in layout.scene_slots)
            raise type(exc)(f"{exc} [slots after expanding scenes: {slots}]") from exc
        # the Warp meshes own the BVHs the kernels query by id: they live as long as the mesh_ids tensor
        self._wp_meshes: list[list[Any]] = prepared.meshes
        #: the world's tensors by WORLD_FIELDS name (inv_poses: float64 here; float32 in _inv_poses32)
        self._tables = dict(prepared.tables)
        mesh_ids = self._tables["mesh_ids"]
        register_mesh_ids(mesh_ids, list(self._wp_meshes), mesh_ids.cpu().numpy())
        self._all_cuboids = prepared.all_cuboids
        if prepared.open_signed:
            _warn_open(prepared.open_signed, methods, self._names, single)

        # slot m of environment e holds a mesh where m < counts[e] (no loop over environments)
        self._present = torch.arange(max_meshes) < torch.tensor(counts)[:, None]
        self._present = self._present.to(self._device)
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
        #: the tables of large meshes, still being built on a background thread (None: all in; CPU only)
        self._later = prepared.later
        self._take_lock = threading.Lock()
        if scenes or any(isinstance(p, Mapping) for p in ([poses] if not single else poses or ())):
            # per-entry poses (or names) -> per-slot poses, each scene's node transforms composed in
            self.set_poses(_slot_poses(poses, layouts, single))
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
        """M, the largest number of meshes in one environment (the padded width of pose/enable tensors)."""
        return self._present.shape[1]

    @property
    def num_meshes(self) -> tuple[int, ...]:
        """The number of meshes of each environment."""
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
        not copies.

        Raises:
            TypeError: ``dtype`` is not one of the floating dtypes the ops take."""
        if self._later is not None and not torch.compiler.is_compiling() and self._later.done():
            self._take_tables()
        world = self._op_world.get(dtype)
        if world is None:
            if dtype not in _warp.FLOAT_DTYPES:
                raise TypeError(f"dtype must be one of {_warp.FLOAT_DTYPES}; got {dtype!r}")
            world = self._op_world[torch.float32]
        return MeshWorldArgs(world, self._all_cuboids)

    def wait_tables(self, timeout: float | None = None) -> bool:
        """Wait until the query tables of the world's large meshes are built, and put them in.

        Building a world on the CPU builds what a query needs (each mesh's BVH) and leaves the tables of its
        exact shortcuts (closed-mesh pseudo-normals, distance grid, a convex mesh's plane tree) for meshes of
        16,384 faces or more, or new meshes of 65,536 faces in all, to background threads; each op call takes
        them in once they are done. Queries
        give the same distances without them (only slower, for points deep inside a mesh). Call this for
        steady timings, or to have every query take the same path.

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
                f"MeshWorld: building the query tables of its large meshes failed ({exc!r}); queries stay exact "
                "without them, only slower",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        index = {name: i for i, name in enumerate(WORLD_FIELDS)}
        fresh = {dtype: list(world) for dtype, world in self._op_world.items()}
        for name in (*_mesh_prep.FLAT_FIELDS, *_mesh_prep.SLOT_FIELDS):
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


def _warn_open(slots: Sequence[tuple[int, int]], methods: list[list[str]], names: list[list], single: bool):
    """One UserWarning for a new world's open meshes ``slots`` ``(e, m)`` given a signed method that reads them
    as closed (see :class:`MeshWorld`, ``sign_method``): the slots (the first few), the methods, the
    alternatives."""

    def slot(e: int, m: int) -> str:
        where = f"meshes[{m}]" if single else f"envs[{e}][{m}]"
        return where if names[e][m] is None else f"{where} ({names[e][m]!r})"

    shown = ", ".join(slot(e, m) for e, m in slots[:_OPEN_SHOWN])
    if len(slots) > _OPEN_SHOWN:
        shown += f" and {len(slots) - _OPEN_SHOWN} more"
    used = " / ".join(sorted({repr(methods[e][m]) for e, m in slots}))
    warnings.warn(
        f"MeshWorld: {shown} {'is an open mesh' if len(slots) == 1 else 'are open meshes'} (edges that do not "
        f"pair up: holes, an open top) signed by sign_method={used}, which may call points in an opening "
        "inside (negative distances, false collisions); use sign_method='winding' for open or "
        "self-intersecting meshes, or 'unsigned' for thin shells and open containers (bins, shelves)",
        UserWarning,
        stacklevel=4,
    )


#: How many open meshes the warning of :func:`_warn_open` names.
_OPEN_SHOWN = 5


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
            if not isinstance(name, str) or name not in _SIGN_METHODS:
                raise ValueError(f"{where}[{m}] must be one of {names}; got {name!r}")
        out.append(list(env_methods))
    return out


def _check_poses(value: torch.Tensor, norm: torch.Tensor) -> None:
    """The pose value checks: finite, unit quaternions (one device-to-host copy)."""
    host = torch.cat([torch.isfinite(value).all().reshape(1).to(norm.dtype), norm.reshape(-1)]).cpu()
    finite, norm_host = bool(host[0]), host[1:].reshape(norm.shape)
    if not finite:
        raise ValueError("poses must be finite; got NaN or inf")
    bad = (norm_host - 1.0).abs() > QUAT_NORM_TOL
    if bool(bad.any()):
        e, m = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"poses[{e}, {m}] must hold a unit quaternion [qw, qx, qy, qz] (norm within {QUAT_NORM_TOL} "
            f"of 1); got {value[e, m, 3:].tolist()} with norm {float(norm_host[e, m]):.6g}"
        )


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
        try:  # ragged, or Python ints beyond float64's range (NumPy keeps those as objects)
            np.asarray(x, dtype=np.float64)
        except OverflowError:
            raise ValueError(f"{name} must be real numbers within the float64 range; got {x!r:.80}") from None
        except (ValueError, TypeError):
            pass
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


# --------------------------------------------------------------------------------------------------------
# entries: names and scenes
# --------------------------------------------------------------------------------------------------------

#: File types trimesh loads as scenes of several objects: such a file is one entry per geometry instance.
#: Other files (obj, stl, ply, off) are one mesh, concatenated: an OBJ's material groups are parts of one
#: object, which split apart would be open pieces with no inside.
_SCENE_SUFFIXES = (".glb", ".gltf", ".dae", ".zae", ".3mf")
#: A scene node's transform whose linear part is within this (largest entry) of a rotation is rigid.
_RIGID_TOL = 1.0e-6


class _Layout(NamedTuple):
    """One environment's entries as given (a list or a dict) and its slots (scenes expanded)."""

    given: list  # the entries as given
    given_names: list  # their names (the dict's keys; None for a list)
    entries: list  # one per slot, what _mesh_prep builds
    names: list  # the slots' names (None: unnamed)
    source: list  # each slot's given entry (index into given)
    local: list  # each slot's entry-from-geometry pose (7,) float64, or None (identity)
    scene_slots: list  # for error messages: "meshes[m] = node 'n' of meshes[i]" per scene slot


def _layout(env: Sequence | Mapping, where: str, seen: dict) -> _Layout:
    """An environment's entries (a list, or a dict ``{name: entry}``), scenes expanded into their geometries.
    ``seen``: the scenes of the world's environments so far, so that a scene that recurs (environments that
    repeat their obstacles) is loaded and expanded once and its slots share its meshes (and BVHs)."""
    if isinstance(env, Mapping):
        given_names = list(env.keys())
        for name in given_names:
            if not isinstance(name, str):
                raise TypeError(f"{where}: entry names must be strings; got {name!r} ({type(name).__name__})")
            if not name:
                raise ValueError(f"{where}: entry names must be non-empty strings; got ''")
        given = list(env.values())
    else:
        given = list(env)
        given_names = [None] * len(given)
    entries: list = []
    names: list = []
    source: list = []
    local: list = []
    scene_slots: list = []
    from_scene: set = set()
    for i, (item, name) in enumerate(zip(given, given_names, strict=True)):
        entry_where = f"{where}[{i}]" if name is None else f"{where}[{name!r}]"
        path = os.fspath(item) if isinstance(item, (str, os.PathLike)) else None
        key = ("path", path) if path is not None else ("object", id(item))
        if key not in seen:
            scene = _as_scene(item)
            seen[key] = (item, None if scene is None else _scene_parts(scene, entry_where))
        parts = seen[key][1]
        if parts is None:
            entries.append(item)
            names.append(name)
            source.append(i)
            local.append(None)
            continue
        for node, entry, pose in parts:
            if len(parts) == 1:
                slot_name = name
            else:
                slot_name = node if name is None else f"{name}/{node}"
                from_scene.add(slot_name)
            scene_slots.append(f"{where}[{len(entries)}] = node {node!r} of {entry_where}")
            entries.append(entry)
            names.append(slot_name)
            source.append(i)
            local.append(pose)
    seen: set = set()
    for name in names:
        if name is None:
            continue
        if name in seen:
            hint = ""
            if name in from_scene:
                hint = (
                    " (a scene's geometries are named by their nodes: give the scenes names, "
                    "{'a': scene_a, 'b': scene_b}, to name them 'a/<node>', 'b/<node>')"
                )
            raise ValueError(f"{where}: entry names must be unique; {name!r} names two entries{hint}")
        seen.add(name)
    return _Layout(given, given_names, entries, names, source, local, scene_slots)


def _as_scene(item: Any) -> Any:
    """``item`` as a ``trimesh.Scene`` (an in-memory one, or a scene file's), or None for any other entry
    (which ``_mesh_prep`` loads, or refuses, as a single mesh)."""
    trimesh = sys.modules.get("trimesh")  # an object can only be a Scene if trimesh is imported already
    if trimesh is not None and isinstance(item, trimesh.Scene):
        return item
    if not isinstance(item, (str, os.PathLike)):
        return None
    path = os.fspath(item)
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in _SCENE_SUFFIXES or not os.path.isfile(path):
        return None
    import trimesh

    # a glTF mesh's primitives (one per material) are parts of one object: merged, not split apart
    options = {"merge_primitives": True} if suffix in (".glb", ".gltf") else {}
    try:
        loaded = trimesh.load(path, **options)
    except Exception:  # unreadable: _mesh_prep loads it again and says why, naming the file
        return None
    return loaded if isinstance(loaded, trimesh.Scene) else None


def _scene_parts(scene: Any, where: str) -> list[tuple[str, Any, np.ndarray]]:
    """``(node name, entry, entry-from-geometry pose (7,))`` per geometry instance of ``scene``, in the scene
    graph's order; a transform with scale or shear has that part baked into the entry's vertices."""
    import trimesh

    nodes = list(scene.graph.nodes_geometry)
    if not nodes:
        raise ValueError(f"{where}: the scene holds no geometry")
    parts = []
    baked: dict[tuple, tuple] = {}  # instances with the same scaling share one baked mesh (built once)
    for node in nodes:
        matrix, geometry_name = scene.graph[node]
        geometry = scene.geometry.get(geometry_name)
        if not isinstance(geometry, trimesh.Trimesh):
            raise ValueError(
                f"{where}: scene node {node!r} holds a {type(geometry).__name__}, not a triangle mesh"
            )
        pose, linear = _split_transform(np.asarray(matrix, dtype=np.float64), f"{where}: scene node {node!r}")
        entry: Any = geometry
        if linear is not None:
            key = (geometry_name, linear.tobytes())
            if key not in baked:
                vertices = np.asarray(geometry.vertices, dtype=np.float64) @ linear.T
                faces = np.asarray(geometry.faces)
                if np.linalg.det(linear) < 0:  # a mirror image: wound the other way, or inside-out
                    faces = faces[:, ::-1]
                baked[key] = (np.ascontiguousarray(vertices), np.ascontiguousarray(faces))
            entry = baked[key]
        parts.append((str(node), entry, pose))
    return parts


def _split_transform(matrix: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray | None]:
    """A 4x4 transform ``[A t; 0 1]`` as ``(pose (7,), S)`` with ``A = R S``: ``pose`` the rigid part
    ``(t, R)`` and ``S = R^T A`` what is left (scale, shear, a mirror), or None where ``A`` is a rotation.
    ``R`` is the rotation nearest ``A`` (the polar decomposition's)."""
    if matrix.shape != (4, 4) or not np.isfinite(matrix).all():
        raise ValueError(f"{where}: the transform must be a finite 4x4 matrix; got {matrix!r:.80}")
    if not np.allclose(matrix[3], (0.0, 0.0, 0.0, 1.0), atol=1e-9):
        raise ValueError(f"{where}: the transform must be affine (last row 0, 0, 0, 1); got {matrix[3]}")
    linear = matrix[:3, :3]
    u, _, vt = np.linalg.svd(linear)
    if np.linalg.det(u @ vt) < 0:
        u[:, -1] = -u[:, -1]
    rotation = u @ vt
    rest = rotation.T @ linear
    pose = np.concatenate([matrix[:3, 3], _quaternion_of(rotation)])
    if np.abs(rest - np.eye(3)).max() <= _RIGID_TOL:
        return pose, None
    return pose, rest


def _quaternion_of(rotation: np.ndarray) -> np.ndarray:
    """The unit quaternion ``(w, x, y, z)``, ``w >= 0``, of a rotation matrix (its largest component first,
    the others from the matrix's off-diagonal sums and differences)."""
    m = rotation
    trace = np.trace(m)
    candidates = [trace, m[0, 0], m[1, 1], m[2, 2]]
    k = int(np.argmax(candidates))
    if k == 0:
        w = math.sqrt(max(1.0 + trace, 0.0)) / 2
        q = np.array(
            [w, (m[2, 1] - m[1, 2]) / (4 * w), (m[0, 2] - m[2, 0]) / (4 * w), (m[1, 0] - m[0, 1]) / (4 * w)]
        )
    else:
        i = k - 1
        j, l = (i + 1) % 3, (i + 2) % 3
        r = math.sqrt(max(1.0 + m[i, i] - m[j, j] - m[l, l], 0.0))
        s = 0.5 / r
        v = np.zeros(3)
        v[i] = r / 2
        v[j] = (m[j, i] + m[i, j]) * s
        v[l] = (m[l, i] + m[i, l]) * s
        q = np.array([(m[l, j] - m[j, l]) * s, *v])
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def compose_poses(outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """``outer ∘ inner`` of poses ``[x, y, z, qw, qx, qy, qz]`` (float64, unit quaternions): where ``inner``
    places a geometry in a frame that ``outer`` places in the world, the geometry's world pose."""
    t_a, q_a = outer[:3], outer[3:]
    t_b, q_b = inner[:3], inner[3:]
    w1, v1 = q_a[0], q_a[1:]
    w2, v2 = q_b[0], q_b[1:]
    q = np.concatenate([[w1 * w2 - v1 @ v2], w1 * v2 + w2 * v1 + np.cross(v1, v2)])
    twice = 2.0 * np.cross(v1, t_b)  # t_b rotated by q_a: t_b + w1 (2 v1 x t_b) + v1 x (2 v1 x t_b)
    t = t_a + t_b + w1 * twice + np.cross(v1, twice)
    return np.concatenate([t, q / np.linalg.norm(q)])


def _named_slot(key: Any, names: list[list], arg: str) -> tuple[int, int]:
    """The ``(env, index)`` that a dict key names among ``names`` (per environment, the names of its entries;
    None: unnamed): ``name`` in a one-environment world, ``(env, name)`` in any, ``env`` an int (a NumPy
    integer too; not a bool). The one reading of names: ``set_poses`` / ``set_enabled`` (slot names) and the
    constructors' ``poses`` (names of the entries as given)."""
    num_envs = len(names)
    if isinstance(key, tuple) and len(key) == 2:
        env, name = key
        if isinstance(env, (bool, np.bool_)) or not isinstance(env, (int, np.integer)):
            raise TypeError(f"{arg}: the environment of key {key!r} must be an int; got {type(env).__name__}")
        if not 0 <= env < num_envs:
            raise ValueError(f"{arg}: key {key!r} names environment {env}; this world has {num_envs}")
        env = int(env)
    elif num_envs == 1:
        env, name = 0, key
    else:
        raise ValueError(
            f"{arg}: key {key!r}: this world has {num_envs} environments, so keys are (env, name) "
            f"pairs, e.g. (0, {key!r})"
        )
    if not isinstance(name, str):
        raise TypeError(f"{arg}: names are strings; got key {key!r}")
    env_names = names[env]
    if name not in env_names:
        known = [n for n in env_names if n is not None]
        shown = ", ".join(repr(n) for n in known[:20]) + (", ..." if len(known) > 20 else "")
        where = f" in environment {env}" if num_envs > 1 else ""
        raise ValueError(f"{arg}: no entry named {name!r}{where}; the names are [{shown}]")
    return env, env_names.index(name)


def _named_slots(mapping: Mapping, names: list[list], arg: str) -> tuple[list[int], list[int]]:
    """``(envs, indices)`` of the keys of ``mapping`` (see :func:`_named_slot`); two keys for one entry are a
    ValueError."""
    envs, slots, seen = [], [], {}
    for key in mapping:
        e, m = _named_slot(key, names, arg)
        if (e, m) in seen:
            raise ValueError(f"{arg}: keys {seen[(e, m)]!r} and {key!r} name the same entry")
        seen[(e, m)] = key
        envs.append(e)
        slots.append(m)
    return envs, slots


def _pose_row(pose: Any, key: Any) -> torch.Tensor:
    """One pose of a dict of poses, ``[x, y, z, qw, qx, qy, qz]``, as a float64 tensor (on its device)."""
    row = _real_array(pose, f"poses[{key!r}]")
    if row is None or tuple(row.shape) != (7,):
        got = "a ragged list" if row is None else tuple(row.shape)
        raise ValueError(f"poses[{key!r}] must be [x, y, z, qw, qx, qy, qz] (shape (7,)); got {got}")
    return row.to(torch.float64)


def _slot_poses(poses: Any, layouts: list[_Layout], single: bool) -> np.ndarray:
    """``(E, M, 7)`` slot poses from the poses of the entries as given (``poses`` as the constructor takes
    it; None: identity), each scene geometry's node pose composed after its scene's."""
    given = _given_poses(poses, layouts, single)
    max_slots = max(len(layout.entries) for layout in layouts)
    out = np.tile(np.asarray(_IDENTITY_POSE, dtype=np.float64), (len(layouts), max_slots, 1))
    for e, layout in enumerate(layouts):
        for m, (i, local) in enumerate(zip(layout.source, layout.local, strict=True)):
            out[e, m] = given[e][i] if local is None else compose_poses(given[e][i], local)
    return out


def _given_poses(poses: Any, layouts: list[_Layout], single: bool) -> list[np.ndarray]:
    """Per environment, ``(entries as given, 7)`` float64 poses with unit quaternions (renormalised)."""
    counts = [len(layout.given) for layout in layouts]
    out = [np.tile(np.asarray(_IDENTITY_POSE, dtype=np.float64), (n, 1)) for n in counts]
    if poses is None:
        return out
    source = poses[0] if single else poses
    if isinstance(source, Mapping):
        # read as set_poses reads its dict (the same parser), by the names of the entries as given
        envs, indices = _named_slots(source, [layout.given_names for layout in layouts], "poses")
        for e, i, (key, pose) in zip(envs, indices, source.items(), strict=True):
            out[e][i] = _pose_row(pose, key).cpu().numpy()
    else:
        value = _real_array(source, "poses")
        if value is not None:
            shape = (counts[0], 7) if single else (len(layouts), max(counts), 7)
            if tuple(value.shape) != shape:
                raise ValueError(
                    f"poses must have shape {shape} (one per entry as given; a scene's is the world-from-scene "
                    f"pose); got {tuple(value.shape)}"
                )
            array = value.cpu().double().numpy()
            for e, n in enumerate(counts):
                out[e] = array[:n] if single else array[e, :n]
        else:
            if single or not isinstance(source, Sequence) or len(source) != len(layouts):
                raise ValueError("poses must be an array of shape (M, 7) (or per-environment lists)")
            for e, env_poses in enumerate(source):
                row = _real_array(env_poses, f"poses[{e}]")
                if row is None or tuple(row.shape) != (counts[e], 7):
                    raise ValueError(f"poses[{e}] must have shape ({counts[e]}, 7)")
                out[e] = row.cpu().double().numpy()
    for e, array in enumerate(out):
        if not np.isfinite(array).all():
            raise ValueError("poses must be finite; got NaN or inf")
        norm = np.linalg.norm(array[:, 3:], axis=1)
        bad = np.nonzero(np.abs(norm - 1.0) > QUAT_NORM_TOL)[0]
        if len(bad):
            where = f"poses[{bad[0]}]" if single else f"poses[{e}][{bad[0]}]"
            raise ValueError(
                f"{where} must hold a unit quaternion [qw, qx, qy, qz] (norm within {QUAT_NORM_TOL} of 1); "
                f"got {array[bad[0], 3:].tolist()} with norm {norm[bad[0]]:.6g}"
            )
        array[:, 3:] /= norm[:, None]
    return out
