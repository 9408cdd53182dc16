"""cuRobo world configurations as a :class:`~warpgeo.MeshWorld`.

cuRobo describes a robot's surroundings as a *world configuration*: a dict (usually a YAML file) that maps
each obstacle type to named obstacles, e.g.::

    cuboid:
      table: {dims: [2.0, 2.0, 0.2], pose: [0.4, 0.0, -0.1, 1, 0, 0, 0]}
    mesh:
      bin: {file_path: scene/bin.obj, pose: [0.5, 0.3, 0.1, 1, 0, 0, 0], scale: [0.5, 0.5, 0.5]}

:func:`load_world` builds the world of such a configuration, with cuRobo's primitives as warpgeo's analytic
primitives (exact distances) and the names kept (``world.names``), so ``world.set_poses({"table": ...})``
and ``world.set_enabled({"bin": False})`` work by name. Poses are cuRobo's ``[x, y, z, qw, qx, qy, qz]``,
the same as warpgeo's.

:func:`load_robot_spheres` reads a cuRobo *robot* configuration's collision spheres (with its self-collision
ignore list and buffers) for :func:`warpgeo.self_collision_cost` and :func:`warpgeo.sphere_mesh_cost`;
:func:`load_robot` reads the whole robot (its URDF too) into a :class:`warpgeo.Robot`, joint angles to spheres.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

import warpgeo

from ._curobo_yaml import (  # noqa: F401 (MAX_EXTRA_SPHERES: a public constant of this module)
    _DISABLED_RADIUS,
    _SPHERE_FIELDS,
    MAX_EXTRA_SPHERES,
    _buffers,
    _collision_links,
    _extra_spheres,
    _float_value,
    _ignored_links,
    _kinematics_section,
    _robot_config,
    _sphere,
    _sphere_table,
    _yaml_mapping,
)

__all__ = ["RobotSpheres", "load_robot", "load_robot_spheres", "load_world"]

#: Per-object fields of cuRobo's obstacles that carry no geometry (visualisation, cuRobo's tensor device):
#: accepted and ignored.
_COSMETIC = ("color", "texture_id", "texture", "material", "tensor_args")
#: Fields that describe geometry, per obstacle type (beside ``pose`` and the cosmetic ones).
_FIELDS = {
    "cuboid": ("dims", "scale"),
    "sphere": ("radius", "position", "scale"),
    "capsule": ("radius", "base", "tip", "scale"),
    "cylinder": ("radius", "height", "scale"),
    "mesh": ("file_path", "vertices", "faces", "scale", "file_string"),
    # xyzr_tensor (the voxel centres, implied by dims and voxel_size) and feature_dtype are accepted, unread
    "voxel": ("dims", "voxel_size", "feature_tensor", "feature_dtype", "xyzr_tensor"),
}
#: A mesh's fields for visualisation only (cuRobo's ``urdf_path`` is for Isaac Gym's viewer).
_MESH_COSMETIC = ("vertex_colors", "vertex_normals", "face_colors", "urdf_path")
#: cuRobo's map types, which are not obstacles warpgeo can build (nvblox's maps: see DepthFusion).
_MAPS = ("blox",)
_IDENTITY = np.array([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])


def load_world(
    config: Mapping[str, Any] | str | os.PathLike | Sequence[Mapping[str, Any] | str | os.PathLike],
    *,
    device: torch.device | str = "cpu",
    mesh_root: str | os.PathLike | None = None,
    sign_method: str = "ray",
    capacity: Mapping[str, int] | None = None,
) -> warpgeo.MeshWorld:
    """A :class:`~warpgeo.MeshWorld` from a cuRobo world configuration, or from a list of them (a batch of
    problems): one environment per configuration (:meth:`~warpgeo.MeshWorld.from_envs`), each named by its
    own obstacles (``world.names[e]``), in the list's order.

    Obstacle types (each maps names to obstacles; the order of the configuration is the order of the
    world's slots):

    * ``cuboid``: ``dims`` (full side lengths x, y, z) -> :class:`warpgeo.Cuboid`;
    * ``sphere``: ``radius``, and ``position`` (x, y, z) or ``pose`` -> :class:`warpgeo.Sphere`;
    * ``capsule``: ``radius``, ``base``, ``tip`` (the segment's ends in the obstacle's frame) ->
      :class:`warpgeo.Capsule` of length ``|tip - base|``, posed at the segment's middle with its z axis
      along ``tip - base`` (after ``pose``); ``base == tip`` gives a :class:`warpgeo.Sphere` there;
    * ``cylinder``: ``radius``, ``height`` (along z, centred) -> :class:`warpgeo.Cylinder`;
    * ``mesh``: ``file_path`` (relative to ``mesh_root``; loaded as one mesh, as cuRobo does, a scene file
      concatenated) or ``vertices`` and ``faces``; optional ``scale`` (one factor or one per axis, > 0,
      applied in the mesh's frame before ``pose``).
    * ``voxel`` (cuRobo's ``VoxelGrid``, an ESDF): ``dims`` (the box's full side lengths, centred on the
      obstacle's frame), ``voxel_size``, optional ``feature_tensor`` -> :class:`warpgeo.DistanceGrid` of
      ``round(dims / voxel_size)`` voxels per axis, voxel ``i``'s centre at ``(i + 1 - round(dims / (2
      voxel_size))) * voxel_size - voxel_size / 2`` along each axis (cuRobo's voxel centres). The
      ``feature_tensor`` (``X * Y * Z`` numbers, any shape, x-major, z fastest: cuRobo's order) holds
      cuRobo's ESDF, positive inside obstacles; the grid holds its negation (warpgeo's distances are
      negative inside). Without one, the grid is free space: every voxel holds the box's diagonal (fill
      it later with ``world.set_grid(name, values)``). ``xyzr_tensor`` and ``feature_dtype`` are accepted
      and not read (values are stored in float32).

    Every obstacle takes ``pose`` ``[x, y, z, qw, qx, qy, qz]`` (identity when absent). The fields that
    carry no geometry (``color``, ``texture_id``, ``texture``, ``material``, ``tensor_args``; for meshes
    ``vertex_colors``, ``vertex_normals``, ``face_colors``, ``urdf_path``) are accepted and ignored, as is a
    ``name`` equal to the obstacle's key. ``scale`` on a primitive is accepted only as ones (cuRobo ignores
    it there; put the size in ``dims`` / ``radius``). Anything else is refused, never dropped.

    Args:
        config: the configuration: a dict, or the path of a YAML file (read with PyYAML: ``pip install
            "warpgeo[curobo]"``); or a list of them, one environment each (a one-item list: a world of one
            environment, as the configuration alone gives).
        device: where the world lives (as for :class:`~warpgeo.MeshWorld`).
        mesh_root: the folder that a relative ``file_path`` starts from (joined as cuRobo joins its asset
            path); default: the YAML file's folder, or the current directory for a dict. It is where paths
            start, not a boundary: ``../`` and absolute paths are followed as cuRobo follows them, so a
            configuration can load any mesh file the process may read (check paths yourself before
            loading a configuration you do not trust).
        sign_method: the meshes' sign method (see :class:`~warpgeo.MeshWorld`; primitives are always signed).
        capacity: room per environment for obstacles added later (``{kind: count}``, see
            :class:`~warpgeo.MeshWorld`: ``world.add`` / ``world.remove``).

    Returns:
        The world, its slots named by the obstacles' names (``world.names[e]`` for configuration ``e``).

    Raises:
        TypeError: a configuration that is not a dict or a path; a field of the wrong type.
        ValueError: an unknown obstacle type or field (named), ``blox`` maps (not supported: see
            :class:`warpgeo.DepthFusion`), a ``feature_tensor`` of the wrong size or with NaN / inf,
            a missing field, a bad size or pose, a mesh file that does not exist or does not load, and what
            :class:`~warpgeo.MeshWorld` refuses.
        ImportError: a YAML path without PyYAML installed.

    Example:
        >>> from warpgeo.compat.curobo import load_world
        >>> world = load_world({"cuboid": {"table": {"dims": [1, 1, 0.1], "pose": [0, 0, -0.05, 1, 0, 0, 0]}}})
        >>> world.names
        [['table']]
    """
    if isinstance(config, Sequence) and not isinstance(config, (str, bytes, Mapping)):
        if len(config) == 0:
            raise ValueError("config: an empty list of configurations (give one per environment)")
        read = [_read_config(item, mesh_root, f"config[{e}]") for e, item in enumerate(config)]
        poses = {(e, name): pose for e, (_, env_poses) in enumerate(read) for name, pose in env_poses.items()}
        return warpgeo.MeshWorld.from_envs(
            [entries for entries, _ in read],
            poses=poses,
            device=device,
            sign_method=sign_method,
            capacity=capacity,
        )
    entries, poses = _read_config(config, mesh_root, "config")
    return warpgeo.MeshWorld(entries, poses=poses, device=device, sign_method=sign_method, capacity=capacity)


def _read_config(config: Any, mesh_root: Any, arg: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One configuration's ``(entries, poses)`` by obstacle name; ``arg`` names it in messages."""
    root = None if mesh_root is None else os.fspath(mesh_root)
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        config = _yaml_mapping(path, arg, "a mapping of obstacle types")
        if root is None:
            root = os.path.dirname(os.path.abspath(path))
    elif not isinstance(config, Mapping):
        raise TypeError(f"{arg} must be a dict or a YAML file path; got {type(config).__name__}")
    entries: dict[str, Any] = {}
    poses: dict[str, np.ndarray] = {}
    for kind, obstacles in config.items():
        if kind in _MAPS:
            raise ValueError(
                f"{arg}[{kind!r}]: cuRobo's {kind} maps (nvblox) are not supported; fuse the depth frames "
                "with warpgeo.DepthFusion (integrate(), then distance_grid()) and give the DistanceGrid to a "
                "MeshWorld, or give the map as a 'voxel' entry (an ESDF feature_tensor)"
            )
        if kind not in _FIELDS:
            known = ", ".join(repr(k) for k in _FIELDS)
            raise ValueError(f"{arg}: unknown obstacle type {kind!r}; the types are {known}")
        if obstacles is None:
            continue
        if not isinstance(obstacles, Mapping):
            raise TypeError(
                f"{arg}[{kind!r}] must map names to obstacles ({{name: {{...}}}}); got {type(obstacles).__name__}"
            )
        for name, fields in obstacles.items():
            where = f"{kind}.{name}" if arg == "config" else f"{arg}: {kind}.{name}"
            if not isinstance(name, str):
                raise TypeError(f"{arg}[{kind!r}]: obstacle names must be strings; got {name!r}")
            if name in entries:
                raise ValueError(f"{where}: the name {name!r} is given twice (names are unique in a world)")
            if not isinstance(fields, Mapping):
                raise TypeError(f"{where} must be a dict of fields; got {type(fields).__name__}")
            _check_fields(kind, name, fields, where)
            pose = _pose(fields.get("pose"), f"{where}.pose")
            entry, local = _entry(kind, fields, where, root)
            entries[name] = entry
            poses[name] = pose if local is None else _compose(pose, local)
    return entries, poses


def _check_fields(kind: str, name: str, fields: Mapping, where: str) -> None:
    allowed = {"pose", *_FIELDS[kind], *_COSMETIC, *(_MESH_COSMETIC if kind == "mesh" else ())}
    for key in fields:
        if key == "name":
            if fields[key] != name:
                raise ValueError(f"{where}: field 'name' is {fields[key]!r}, not the obstacle's key {name!r}")
        elif key not in allowed:
            known = ", ".join(sorted(allowed - set(_COSMETIC) - set(_MESH_COSMETIC)))
            raise ValueError(f"{where}: unknown field {key!r} (the geometric fields of a {kind}: {known})")
    if kind != "mesh" and fields.get("scale") is not None:
        scale = _vector(fields["scale"], None, f"{where}.scale")
        if not np.all(scale == 1.0):
            raise ValueError(
                f"{where}.scale: cuRobo ignores scale on a {kind}, so it is refused here unless it is 1; "
                f"give the size itself (got {scale.tolist()})"
            )


def _entry(kind: str, fields: Mapping, where: str, root: str | None) -> tuple[Any, Any]:
    """``(entry, local pose or None)``: the obstacle as a world entry, and its pose in the obstacle's frame."""

    def need(key: str) -> Any:
        if fields.get(key) is None:
            raise ValueError(f"{where}: a {kind} needs {key!r}")
        return fields[key]

    if kind == "cuboid":
        return warpgeo.Cuboid(_vector(need("dims"), 3, f"{where}.dims").tolist()), None
    if kind == "cylinder":
        return warpgeo.Cylinder(
            _number(need("radius"), f"{where}.radius"), _number(need("height"), f"{where}.height")
        ), None
    if kind == "sphere":
        radius = _number(need("radius"), f"{where}.radius")
        local = None
        if fields.get("position") is not None:
            position = _vector(fields["position"], 3, f"{where}.position")
            if fields.get("pose") is not None and not np.allclose(_pose(fields["pose"], where)[:3], position):
                raise ValueError(f"{where}: 'position' {position.tolist()} and 'pose' disagree; give one")
            if fields.get("pose") is None:
                local = np.concatenate([position, [1.0, 0.0, 0.0, 0.0]])
        return warpgeo.Sphere(radius), local
    if kind == "voxel":
        return _voxel(need("dims"), need("voxel_size"), fields.get("feature_tensor"), where), None
    if kind == "capsule":
        radius = _number(need("radius"), f"{where}.radius")
        base = _vector(need("base"), 3, f"{where}.base")
        tip = _vector(need("tip"), 3, f"{where}.tip")
        return _capsule(radius, base, tip)
    return _mesh(fields, where, root), None


def _voxel(dims: Any, voxel_size: Any, feature: Any, where: str) -> warpgeo.DistanceGrid:
    """cuRobo's ``VoxelGrid`` (an ESDF, positive inside) as a :class:`warpgeo.DistanceGrid` (negative inside),
    with cuRobo's grid shape and voxel centres (see :func:`load_world`)."""
    sides = _vector(dims, 3, f"{where}.dims")
    h = _number(voxel_size, f"{where}.voxel_size")
    if not (math.isfinite(h) and h > 0):
        raise ValueError(f"{where}.voxel_size must be finite and > 0; got {h!r}")
    shape = [round(float(side) / h) for side in sides]
    if min(shape) < 1:
        raise ValueError(
            f"{where}.dims must be at least voxel_size along each axis (round(dims / voxel_size) voxels); "
            f"got dims {sides.tolist()}, voxel_size {h}"
        )
    origin = [(1 - round(0.5 * float(side) / h)) * h - 0.5 * h for side in sides]
    if feature is None:
        values = torch.full(shape, float(np.linalg.norm(sides)), dtype=torch.float32)
        return warpgeo.DistanceGrid(values, h, origin=origin)
    if isinstance(feature, (str, bytes, Mapping)):
        raise TypeError(f"{where}.feature_tensor must be numbers; got {type(feature).__name__}")
    try:
        tensor = torch.as_tensor(feature)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{where}.feature_tensor must be numbers; got {feature!r:.80}") from exc
    if not (tensor.is_floating_point() or tensor.dtype in (torch.int32, torch.int64)):
        raise TypeError(f"{where}.feature_tensor must be real numbers; got {tensor.dtype}")
    if tensor.numel() != math.prod(shape):
        raise ValueError(
            f"{where}.feature_tensor must hold {math.prod(shape)} values (round(dims / voxel_size) = {shape}); "
            f"got {tensor.numel()} (shape {tuple(tensor.shape)})"
        )
    dtype = torch.float64 if tensor.dtype == torch.float64 else torch.float32
    values = -tensor.detach().reshape(shape).to(dtype)
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"{where}.feature_tensor must be finite; found NaN or inf")
    return warpgeo.DistanceGrid(values, h, origin=origin)


def _capsule(radius: float, base: np.ndarray, tip: np.ndarray) -> tuple[Any, np.ndarray]:
    """cuRobo's capsule (the points within ``radius`` of the segment ``base``-``tip``) as a centred z capsule
    and its pose in the obstacle's frame: at the segment's middle, its z axis rotated onto ``tip - base``."""
    axis = tip - base
    length = float(np.linalg.norm(axis))
    middle = (base + tip) / 2
    if length < _MIN_LENGTH:
        return warpgeo.Sphere(radius), np.concatenate([middle, [1.0, 0.0, 0.0, 0.0]])
    u = axis / length
    # the shortest rotation taking z onto u: half the angle between them, about z x u
    w = 1.0 + u[2]
    if w < 1e-12:  # u = -z: half a turn about x
        q = np.array([0.0, 1.0, 0.0, 0.0])
    else:
        q = np.array([w, -u[1], u[0], 0.0])  # (1 + z.u, z x u), normalised below
        q /= np.linalg.norm(q)
    return warpgeo.Capsule(radius, length), np.concatenate([middle, q])


def _mesh(fields: Mapping, where: str, root: str | None) -> tuple[np.ndarray, np.ndarray]:
    if fields.get("file_string") is not None:
        raise ValueError(
            f"{where}: 'file_string' is not supported (cuRobo does not load it either); give file_path"
        )
    file_path, vertices = fields.get("file_path"), fields.get("vertices")
    if (file_path is None) == (vertices is None):
        raise ValueError(f"{where}: a mesh needs 'file_path' or 'vertices' and 'faces' (one of the two)")
    if file_path is not None:
        if not isinstance(file_path, (str, os.PathLike)):
            raise TypeError(f"{where}.file_path must be a path; got {type(file_path).__name__}")
        path = os.path.join(root, os.fspath(file_path)) if root is not None else os.fspath(file_path)
        if not os.path.isfile(path):
            raise ValueError(f"{where}.file_path: no such mesh file {path!r} (mesh_root: {root!r})")
        import trimesh

        try:
            mesh = trimesh.load(path, force="mesh")
        except Exception as exc:  # trimesh raises many types for unreadable files
            raise ValueError(f"{where}.file_path: trimesh could not load {path!r} as a mesh: {exc}") from exc
        if not isinstance(mesh, trimesh.Trimesh):
            raise ValueError(f"{where}.file_path: {path!r} did not load as a triangle mesh")
        vertices, faces = np.asarray(mesh.vertices, dtype=np.float64), np.asarray(mesh.faces)
    else:
        if fields.get("faces") is None:
            raise ValueError(f"{where}: a mesh given by 'vertices' needs 'faces'")
        vertices = np.asarray(vertices, dtype=np.float64)
        faces = np.asarray(fields["faces"])
        if faces.ndim == 1 and faces.size % 3 == 0:
            faces = faces.reshape(-1, 3)
    if fields.get("scale") is not None:
        scale = _vector(fields["scale"], None, f"{where}.scale")
        if scale.shape not in ((1,), (3,)) or not np.all(scale > 0):
            raise ValueError(
                f"{where}.scale must be one factor or three (x, y, z), each > 0; got {scale.tolist()}"
            )
        vertices = vertices * scale
    return vertices, faces


def _vector(value: Any, size: int | None, where: str) -> np.ndarray:
    """``value`` as a finite float64 vector (of ``size`` numbers when given)."""
    if isinstance(value, (str, bytes, Mapping)):
        raise TypeError(f"{where} must be numbers; got {type(value).__name__}")
    try:
        array = np.asarray(value, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where} must be numbers; got {value!r:.80}") from exc
    if size is not None and array.shape != (size,):
        raise ValueError(f"{where} must hold {size} numbers; got {array.size}: {value!r:.80}")
    if not np.isfinite(array).all():
        raise ValueError(f"{where} must be finite; got {array.tolist()}")
    return array


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{where} must be a number; got {type(value).__name__} {value!r:.60}")
    return float(value)


#: a capsule shorter than this is a sphere (warpgeo's primitives refuse sizes below 2**-126)
_MIN_LENGTH = 2.0**-126

#: how far from 1 a pose's quaternion norm may be (MeshWorld's tolerance for the poses it is given)
_QUAT_NORM_TOL = 1.0e-3


def _compose(outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """``outer ∘ inner`` of poses ``[x, y, z, qw, qx, qy, qz]`` (float64, unit quaternions): the world pose of
    a geometry that ``inner`` places in a frame, itself placed in the world by ``outer``."""
    w, v = outer[3], outer[4:]
    cross = np.cross(v, inner[:3])
    rotated = inner[:3] + 2.0 * (
        w * cross + np.cross(v, cross)
    )  # inner's position turned by outer's rotation
    w2, v2 = inner[3], inner[4:]
    q = np.concatenate([[w * w2 - v @ v2], w * v2 + w2 * v + np.cross(v, v2)])  # Hamilton product
    return np.concatenate([outer[:3] + rotated, q / np.linalg.norm(q)])


def _pose(value: Any, where: str) -> np.ndarray:
    """A pose ``[x, y, z, qw, qx, qy, qz]`` with a unit quaternion (within the world's tolerance,
    renormalised); identity for None."""
    if value is None:
        return _IDENTITY.copy()
    pose = _vector(value, 7, where)
    norm = math.sqrt(float(pose[3:] @ pose[3:]))
    if abs(norm - 1.0) > _QUAT_NORM_TOL:
        raise ValueError(
            f"{where} must be [x, y, z, qw, qx, qy, qz] with a unit quaternion; got {pose.tolist()} (norm {norm:.6g})"
        )
    pose[3:] /= norm
    return pose


# --------------------------------------------------------------------------------------------------------
# robot configurations: collision spheres for self-collision (and world collision)
# --------------------------------------------------------------------------------------------------------


class RobotSpheres(NamedTuple):
    """A robot's collision spheres, as :func:`load_robot_spheres` reads them from a cuRobo configuration.

    ``link_names``: the robot's collision links, ``link_names[k]`` the name of link ``k``.
    ``sphere_links`` ``(S,)`` int64: the link of each sphere (an index into ``link_names``).
    ``local_spheres`` ``(S, 4)`` float32: each sphere's centre x, y, z in its link's frame and its radius
    (negative: a disabled slot of ``extra_collision_spheres``).
    ``pairs`` ``(P, 2)`` int64: the sphere pairs to check, :func:`warpgeo.collision_pairs` of ``sphere_links``
    less ``self_collision_ignore``.
    ``self_margin`` ``(S,)`` float32: each sphere's ``self_collision_buffer`` (its link's; 0 where none).
    """

    link_names: list[str]
    sphere_links: torch.Tensor
    local_spheres: torch.Tensor
    pairs: torch.Tensor
    self_margin: torch.Tensor


def load_robot_spheres(
    config: Mapping[str, Any] | str | os.PathLike, *, root: str | os.PathLike | None = None
) -> RobotSpheres:
    """A robot's collision spheres, self-collision pairs and margins from a cuRobo robot configuration.

    cuRobo nests a robot's collision model in ``robot_cfg: kinematics:``; the configuration (or that
    ``kinematics`` section itself, or a cuRobo spheres file) is read for:

    * ``collision_spheres``: ``{link: [{center: [x, y, z], radius: r}, ...]}`` inline, or the path of a YAML
      file holding that under ``collision_spheres`` (relative to ``root``); a list of one-link mappings
      (Isaac Sim's robot descriptions) is read too. A sphere of negative radius is disabled;
    * ``collision_link_names`` (where given): the links whose spheres are checked, in that order (cuRobo's
      sphere order; a spheres file may describe more links). Otherwise every link of ``collision_spheres``,
      in its order, then the links of ``extra_collision_spheres`` that have none;
    * ``extra_collision_spheres``: ``{link: count}``: that many disabled spheres (radius -10, at the link's
      origin) after the link's own, cuRobo's slots for attached objects (cuRobo replaces a link's spheres by
      them; no published configuration has both);
    * ``self_collision_ignore``: ``{link: [links]}``: link pairs never checked (either way round);
    * ``self_collision_buffer``: ``{link: metres}``: the self-collision margin of the link's spheres.

    The ignore and buffer lists may name links that carry no sphere (cuRobo's own configurations do): those
    entries are skipped. Other keys (URDF, c-space, ``collision_sphere_buffer``, ...) are not read: pad the
    radii for the world cost yourself if you want cuRobo's ``collision_sphere_buffer``.
    ``self_collision_cost(spheres, robot.pairs, margin=robot.self_margin)``, with ``spheres`` the local
    spheres moved by your forward kinematics, is cuRobo's self-collision check.

    Args:
        config: a dict, or the path of a YAML file (read with PyYAML: ``pip install "warpgeo[curobo]"``).
        root: the folder a relative ``collision_spheres`` path is in; default: the YAML file's folder (the
            layout of cuRobo's ``configs/robot``), or the current directory for a dict.

    Returns:
        :class:`RobotSpheres` ``(link_names, sphere_links, local_spheres, pairs, self_margin)``, on the CPU.

    Raises:
        TypeError: a configuration that is not a dict or a path, a ``root`` that is not a path; an ignore
            list that is not a list of link names, a buffer that is not a number, a ``collision_link_names``
            entry that is not a name.
        ValueError: no ``collision_spheres`` (missing or null); a malformed sphere (not ``{center, radius}``,
            a centre not of three finite numbers, a radius not a finite number, an unknown field: the message
            names the link and the entry); a centre, radius or buffer beyond float32's range (the spheres are
            computed in float32); a missing or unreadable file (not UTF-8, not YAML), a spheres file whose
            ``collision_spheres`` is a path again; a link of ``collision_link_names`` with no spheres; a count
            of ``extra_collision_spheres`` not an int in ``[0, MAX_EXTRA_SPHERES]`` (65,536); a non-finite
            buffer.
        ImportError: a YAML path without PyYAML installed.

    Example:
        >>> from warpgeo.compat.curobo import load_robot_spheres
        >>> robot = load_robot_spheres({"robot_cfg": {"kinematics": {
        ...     "collision_spheres": {
        ...         "base": [{"center": [0, 0, 0.05], "radius": 0.08}],
        ...         "arm": [{"center": [0, 0, 0], "radius": 0.05}, {"center": [0.2, 0, 0], "radius": 0.05}],
        ...         "hand": [{"center": [0, 0, 0.02], "radius": 0.03}]},
        ...     "self_collision_ignore": {"base": ["arm"], "arm": ["hand"]},
        ...     "self_collision_buffer": {"hand": 0.01}}}})
        >>> robot.link_names, robot.sphere_links.tolist()
        (['base', 'arm', 'hand'], [0, 1, 1, 2])
        >>> robot.pairs.tolist()                         # base-hand only: the others are ignored
        [[0, 3]]
        >>> spheres = robot.local_spheres.expand(16, 4, 4)   # your forward kinematics here: (B, S, 4)
        >>> warpgeo.self_collision_cost(spheres, robot.pairs, margin=robot.self_margin).shape
        torch.Size([16])
    """
    from .. import collision_pairs

    config, root_dir = _robot_config(config, root)
    kinematics = _kinematics_section(config)
    if kinematics["collision_spheres"] is None:
        raise ValueError(
            "collision_spheres is null: the configuration has no collision spheres (cuRobo's template and "
            "mimic examples); give them, or use load_robot for the kinematics alone"
        )
    table = _sphere_table(kinematics["collision_spheres"], root_dir)
    extra = _extra_spheres(kinematics.get("extra_collision_spheres"))
    order = _collision_links(kinematics.get("collision_link_names"), table, extra)
    buffers = _buffers(kinematics.get("self_collision_buffer"))
    rows: list[list[float]] = []
    links: list[int] = []
    margins: list[float] = []
    for k, link in enumerate(order):
        own = [_sphere(entry, link, n) for n, entry in enumerate(table.get(link, ()))]
        own += [[0.0, 0.0, 0.0, _DISABLED_RADIUS]] * extra.get(link, 0)
        rows += own
        links += [k] * len(own)
        margins += [buffers.get(link, 0.0)] * len(own)
    known = set(order)
    ignore = _ignored_links(kinematics.get("self_collision_ignore"))
    ignore = [(a, b) for a, b in ignore if a in known and b in known]  # links with no sphere: nothing to drop
    return RobotSpheres(
        link_names=list(order),
        sphere_links=torch.tensor(links, dtype=torch.int64),
        local_spheres=torch.tensor(rows, dtype=torch.float32).reshape(len(rows), 4),
        pairs=collision_pairs(links, ignore=ignore, names=list(order)),
        self_margin=torch.tensor(margins, dtype=torch.float32),
    )


def load_robot(
    config: Mapping[str, Any] | str | os.PathLike,
    *,
    root: str | os.PathLike | None = None,
    device: torch.device | str = "cpu",
):
    """A :class:`warpgeo.Robot` from a cuRobo robot configuration and its URDF: joint angles to spheres.

    Reads from ``robot_cfg: kinematics:`` (or ``kinematics:``, or the top level):

    * ``urdf_path``: the URDF, relative to ``root`` (cuRobo's ``content/assets``), else to the YAML file's
      folder, else the current directory; read with yourdfpy (``pip install "warpgeo[robot]"``), meshes not
      loaded;
    * ``base_link`` (the base frame), ``ee_link`` or the first of ``tool_frames`` (``robot.ee_link``);
    * ``collision_spheres`` (inline, or a spheres file relative to the YAML file's folder, else ``root``;
      null: no spheres), ``collision_link_names``, ``extra_collision_spheres`` (disabled slots, filled by
      :meth:`~warpgeo.Robot.attach`), ``self_collision_ignore``, ``self_collision_buffer`` — as
      :func:`load_robot_spheres` reads them;
    * ``collision_sphere_buffer``: metres added to every enabled sphere's radius (a number, or
      ``{link: metres}``);
    * ``extra_links``: links such as ``attached_object`` (``parent_link_name``, ``link_name``,
      ``fixed_transform`` ``[x, y, z, qw, qx, qy, qz]``, ``joint_type`` ``FIXED`` or a joint along an axis,
      ``X_PRISM`` ... ``Z_ROT``, ``X_PRISM_NEG`` ..., with ``joint_limits``; ``child_link_name`` re-parents
      that URDF link under the extra one: cuRobo's floating bases);
    * ``lock_joints`` ``{joint: value}`` (held, not in ``q``) and ``cspace.joint_names`` (the order of ``q``;
      the locked joints it lists are left out).

    As in cuRobo, the tree keeps the links the robot needs: the collision links, the tool frame, the extra
    links and their ancestors (a gripper without spheres past them is dropped with its joints). Other keys
    are not read.

    Args:
        config: a dict, or the path of a YAML file (PyYAML: ``pip install "warpgeo[curobo]"``).
        root: the folder ``urdf_path`` starts from.
        device: where the robot's tables live.

    Returns:
        The :class:`warpgeo.Robot`; ``robot.spheres(q)`` feeds ``sphere_mesh_cost`` /
        ``swept_sphere_mesh_cost``, and ``self_collision_cost(spheres, robot.pairs, margin=robot.self_margin)``
        is cuRobo's self-collision check.

    Raises:
        TypeError, ValueError: as :func:`load_robot_spheres` and :meth:`warpgeo.Robot.from_urdf`; no
            ``urdf_path`` or no such file; an ``extra_links`` entry of an unknown joint type, parent or child,
            or without a unit-quaternion ``fixed_transform``; ``cspace.joint_names`` that miss a moving joint.
        ImportError: yourdfpy (or, for a YAML path, PyYAML) is not installed.

    Example:
        >>> content = "curobo/content"                                  # a cuRobo checkout's content folder
        >>> robot = load_robot(f"{content}/configs/robot/franka.yml", root=f"{content}/assets")  # doctest: +SKIP
        >>> robot.joint_names[:2], robot.dof                           # doctest: +SKIP
        (['panda_joint1', 'panda_joint2'], 7)
        >>> spheres = robot.spheres(torch.zeros(32, 32, 7))            # doctest: +SKIP
        >>> cost = warpgeo.self_collision_cost(spheres, robot.pairs, margin=robot.self_margin)  # doctest: +SKIP
    """
    from . import _curobo_robot

    return _curobo_robot.load(config, root, device)
