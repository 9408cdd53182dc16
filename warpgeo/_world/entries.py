"""A world's entries as the caller gives them: lists or dicts of meshes, primitives and scene files (a scene
is one entry per geometry instance), their names, their sign methods, and the poses given with them, read
into one slot per mesh (:func:`_layout`); and the warning for open meshes given a signed method."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .poses import _IDENTITY_POSE, QUAT_NORM_TOL, _pose_row, _real_array, _split_transform, compose_poses
from .prepare import SIGN_METHODS as _SIGN_METHODS


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


#: File types trimesh loads as scenes of several objects: such a file is one entry per geometry instance.
#: Other files (obj, stl, ply, off) are one mesh, concatenated: an OBJ's material groups are parts of one
#: object, which split apart would be open pieces with no inside.
_SCENE_SUFFIXES = (".glb", ".gltf", ".dae", ".zae", ".3mf")


class _Layout(NamedTuple):
    """One environment's entries as given (a list or a dict) and its slots (scenes expanded)."""

    given: list  # the entries as given
    given_names: list  # their names (the dict's keys; None for a list)
    entries: list  # one per slot, what warpgeo._world.prepare builds
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
    (which ``warpgeo._world.loading`` loads, or refuses, as a single mesh)."""
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
    except Exception:  # unreadable: load_mesh loads it again and says why, naming the file
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
