"""Entries added to and removed from a built world in place (``MeshWorld(capacity=...)``, ``MeshWorld.add`` /
``MeshWorld.remove``): the capacity as given (:func:`parse_capacity`), the kind of an entry, and the writes into
the world's preallocated ``(E, M)`` tensors (:func:`add`, :func:`remove`).

The world's slots are one pool of ``M`` per environment (each slot has its ``slot_kind``); ``capacity`` counts
per kind: environment ``e`` may hold as many entries of kind ``k`` as it was built with plus ``capacity[k]``,
and ``M`` is wide enough for every environment to reach all its limits at once. An edit writes one slot's row
of each per-slot tensor (``slot_kind``, ``prim_size``, ``bounds``, ``world_bounds``, ``enabled``, ``inv_poses``
in both precisions, ``mesh_ids``, ``sign``, the table offsets and flags): no tensor an op reads is reallocated,
so a captured CUDA graph replays the edited world. An added mesh gets its BVH (built on ``add``) and none of
the flat tables of the queries' shortcuts (``grid_cells``, ``face_neighbors``, ``cone_*``: appending rows would
reallocate them): its slot carries the flags of a mesh whose tables are still being built (``FLAG_PENDING``),
with which every query is exact (the same closest face and side), only slower for points deep inside it. A
cuboid mesh (``FLAG_BOX``) is a closed form and needs none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from .. import _constants
from .._mesh_ids import update_mesh_ids
from ..primitives import PRIMITIVES
from . import loading as _loading
from . import meshes as _meshes
from . import tables as _tables
from .poses import QUAT_NORM_TOL, _inverse_warp_transform, _pose_row

#: The kinds of entries a capacity counts, by name, and their ``slot_kind`` codes.
KINDS = {
    "mesh": _constants.KIND_MESH,
    "cuboid": _constants.KIND_CUBOID,
    "sphere": _constants.KIND_SPHERE,
    "capsule": _constants.KIND_CAPSULE,
    "cylinder": _constants.KIND_CYLINDER,
}


_KIND_NAMES = {code: name for name, code in KINDS.items()}


def parse_capacity(capacity: Any) -> dict[str, int]:
    """``capacity`` (None, or ``{kind: count}``) as a dict of the kinds given (counts >= 0)."""
    if capacity is None:
        return {}
    kinds = ", ".join(repr(k) for k in KINDS)
    if not isinstance(capacity, Mapping):
        raise TypeError(
            f"capacity must be a dict {{kind: count}} (kinds {kinds}); got {type(capacity).__name__}"
        )
    out = {}
    for kind, count in capacity.items():
        if kind not in KINDS:
            raise ValueError(f"capacity: unknown kind {kind!r}; the kinds are {kinds}")
        if isinstance(count, (bool, np.bool_)) or not isinstance(count, (int, np.integer)):
            raise TypeError(f"capacity[{kind!r}] must be an int; got {count!r:.40}")
        if count < 0:
            raise ValueError(f"capacity[{kind!r}] must be >= 0; got {count}")
        out[kind] = int(count)
    return out


def kind_of(item: Any) -> str:
    """The kind (a key of :data:`KINDS`) of an entry as given: a primitive's, else ``"mesh"``."""
    return _KIND_NAMES[item._kind] if isinstance(item, PRIMITIVES) else "mesh"


def limits(envs: list[list], capacity: dict[str, int]) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    """Per environment, the entries of each kind it holds (slots as built) and the most it may hold."""
    counts = []
    for env in envs:
        count = dict.fromkeys(KINDS, 0)
        for item in env:
            kind = kind_of(item)
            count[kind] = count.get(kind, 0) + 1
        counts.append(count)
    return counts, [{k: n + capacity.get(k, 0) for k, n in count.items()} for count in counts]


def _env(world: Any, env: Any) -> int:
    if isinstance(env, (bool, np.bool_)) or not isinstance(env, (int, np.integer)):
        raise TypeError(f"env must be an int; got {env!r:.40}")
    if not 0 <= env < world.num_envs:
        raise IndexError(f"env must lie in [0, num_envs={world.num_envs}); got {env}")
    return int(env)


def _pose(pose: Any) -> torch.Tensor:
    """``pose`` (None: identity) as a ``(7,)`` float64 tensor on the host, checked (normalised by
    :func:`_slot_rows`, as :meth:`MeshWorld.set_poses` normalises)."""
    if pose is None:
        return torch.tensor((0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0), dtype=torch.float64)
    row = _pose_row(pose, "pose").cpu().numpy()
    if not np.isfinite(row).all():
        raise ValueError(f"pose must be finite; got {row.tolist()}")
    norm = float(np.sqrt(row[3:] @ row[3:]))
    if abs(norm - 1.0) > QUAT_NORM_TOL:
        raise ValueError(
            f"pose must hold a unit quaternion [qw, qx, qy, qz] (norm within {QUAT_NORM_TOL} of 1); "
            f"got {row[3:].tolist()} with norm {norm:.6g}"
        )
    return torch.from_numpy(row)


def add(world: Any, entry: Any, name: Any, pose: Any, env: Any, sign_method: Any) -> int:
    """``MeshWorld.add`` (see there): the entry written into the first free slot of ``env``; its index."""
    from .entries import _as_scene, _warn_open
    from .prepare import SIGN_METHODS, is_grid

    if not world._limits:
        raise ValueError(
            "this MeshWorld was built without capacity, so it keeps no room for entries added later; build it "
            "with capacity={kind: count}, e.g. MeshWorld(entries, capacity={'cuboid': 16, 'mesh': 4})"
        )
    e = _env(world, env)
    if name is not None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a string (or None); got {type(name).__name__}")
        if not name:
            raise ValueError("name must be a non-empty string (or None)")
        if name in world._names[e]:
            raise ValueError(f"name {name!r} names an entry of environment {e} already (names are unique)")
    if _as_scene(entry) is not None:
        raise ValueError("entry is a scene (several geometries): add its geometries one at a time")
    if is_grid(entry):
        raise ValueError(
            "entry: a DistanceGrid cannot be added in place (its values live in a table shared by the world's "
            "grids); build the world with it, and change its values in place with world.set_grid"
        )
    kind = kind_of(entry)
    held, limit = world._counts[e][kind], world._limits[e][kind]
    if held >= limit:
        raise ValueError(
            f"environment {e} holds {held} {kind} entries, as many as its capacity allows ({limit}: those it was "
            f"built with plus capacity[{kind!r}]={world._capacity.get(kind, 0)}); remove one first, or build "
            f"the world with a larger capacity={{{kind!r}: ...}}"
        )
    row = _pose(pose)
    free = np.flatnonzero(~world._present_host[e])
    if len(free) == 0:  # never, by the width the capacity gave M
        raise ValueError(f"environment {e} has no free slot (capacity {world._capacity})")
    m = int(free[0])
    mesh, warn = None, False
    if isinstance(entry, PRIMITIVES):
        half = np.asarray(entry.half_extents(), dtype=np.float32)
        rows = _slot_rows(world, kind=KINDS[kind], size=half, box=np.stack([-half, half]), sign=0, pose=row)
        flags = 0
    else:
        method = sign_method
        if method is None:
            method = world._sign_method if isinstance(world._sign_method, str) else "ray"
        if not isinstance(method, str) or method not in SIGN_METHODS:
            raise ValueError(
                f"sign_method must be one of {', '.join(map(repr, SIGN_METHODS))}; got {method!r}"
            )
        vertices, faces = _loading.load_mesh(entry, "entry")
        if method == "winding":
            _tables._check_winding_support(world._device)

        def beside(spec: _meshes._MeshSpec, pairs_up: bool) -> tuple:
            # what needs no BVH, computed while it is built: the slot's rows, and whether the mesh is open
            # (the construction's warning for an open mesh given a method that reads it as closed)
            rows = _slot_rows(
                world, kind=KINDS[kind], size=np.zeros(3, dtype=np.float32), box=spec.box.astype(np.float32),
                sign=SIGN_METHODS[method], pose=row,
            )  # fmt: skip
            opened = (
                method in ("ray", "normal") and not pairs_up and _meshes.open_when_welded(vertices, faces)
            )
            return rows, opened

        spec, (rows, warn) = _meshes.build_beside(vertices, faces, method, "entry", world._device, beside)
        mesh = spec.mesh
        flags = _constants.FLAG_CLOSED | _constants.FLAG_BOX if spec.cuboid else spec.pending_flags
    _commit(world, e, m, rows, flags, mesh)
    world._counts[e][kind] += 1
    names = world._names[e]
    names.extend([None] * (m + 1 - len(names)))
    names[m] = name
    _refresh_counts(world, e)
    if warn:
        _warn_open([(e, m)], {e: {m: method}}, world._names, world._single)
    return m


def remove(world: Any, name_or_index: Any, env: Any) -> None:
    """``MeshWorld.remove`` (see there): the slot emptied, as a padding slot is."""
    e = _env(world, env)
    names = world._names[e]
    if isinstance(name_or_index, str):
        if name_or_index not in names:
            known = ", ".join(repr(n) for n in names if n is not None)
            raise ValueError(
                f"name_or_index: no entry named {name_or_index!r} in environment {e}; the names are [{known}]"
            )
        m = names.index(name_or_index)
    elif isinstance(name_or_index, (int, np.integer)) and not isinstance(name_or_index, (bool, np.bool_)):
        m = int(name_or_index)
        if not 0 <= m < world.max_meshes or not world._present_host[e, m]:
            raise IndexError(f"name_or_index: environment {e} has no entry in slot {m}")
    else:
        raise TypeError(
            f"name_or_index must be an entry's name (str) or slot index (int); got {name_or_index!r:.40}"
        )
    # a kind editing does not know (one added to the world since): removed as any slot is, counted by none
    kind = _KIND_NAMES.get(int(world._kinds_host[e, m]))
    if world._wp_meshes[e][m] is not None and world._device.type == "cuda":
        torch.cuda.synchronize(world._device)  # no queued kernel still reads the BVH let go below
    _commit(world, e, m, _padding_rows(world), 0, None)
    if kind is not None and world._counts:
        world._counts[e][kind] -= 1
    names[m] = None
    world._grids.pop((e, m), None)  # a removed distance grid's rows are no entry's any more
    _refresh_counts(world, e)


def _refresh_counts(world: Any, e: int) -> None:
    """Environment ``e``'s ``num_meshes``: its slots up to the last one in use; its names list as long."""
    used = np.flatnonzero(world._present_host[e])
    counts = list(world._num_meshes)
    counts[e] = int(used[-1]) + 1 if len(used) else 0
    world._num_meshes = tuple(counts)
    names = world._names[e]
    del names[counts[e] :]
    names.extend([None] * (counts[e] - len(names)))


def _padding_rows(world: Any) -> dict[str, Any]:
    """:func:`_slot_rows` of an empty slot (as padding is: no entry, identity pose, zero box), made once per
    world (they never change; :func:`_commit` copies them in)."""
    rows = world.__dict__.get("_padding")
    if rows is None:
        zero = np.zeros(3, dtype=np.float32)
        box = np.zeros((2, 3), dtype=np.float32)
        rows = world.__dict__["_padding"] = _slot_rows(
            world, kind=_constants.KIND_MESH, size=zero, box=box, sign=0, pose=None
        )
    return rows


def _slot_rows(world: Any, *, kind, size, box, sign, pose) -> dict[str, Any]:
    """The values of one slot's rows (no write: :func:`add` computes them beside a BVH build), by field:
    ``pose`` None: an empty slot (padding). ``inv_poses`` is computed by the same torch function as
    :meth:`MeshWorld.set_poses` on the world's device (the same bits as a world built with the entry), the
    posed box (the broad phase's, any box that holds the entry) on the host."""
    device = world._device
    present = pose is not None
    pose64 = (
        np.array((0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)) if pose is None else pose.numpy().astype(np.float64)
    )
    box = np.asarray(box, dtype=np.float32)
    posed = torch.from_numpy(pose64).to(device).reshape(1, 1, 7)
    norm = posed[..., 3:].norm(dim=-1)  # set_poses' normalisation, to the bit
    posed = torch.cat([posed[..., :3], posed[..., 3:] / norm[..., None]], dim=-1)
    inverse = _inverse_warp_transform(posed)[0, 0]
    posed = posed[0, 0]
    posed_host = posed.numpy() if device.type == "cpu" else posed.cpu().numpy()
    return {
        "bounds": box,
        "world_bounds": _posed_box(box, posed_host),
        "slot_kind": kind,
        "prim_size": np.asarray(size, dtype=np.float32),
        "sign": sign,
        "enabled": int(present),
        # on the CPU NumPy rows (written through views), on CUDA tensors on the device
        "poses": posed_host if device.type == "cpu" else posed,
        "inv_poses": inverse.numpy() if device.type == "cpu" else inverse,
        "present": present,
    }


def _commit(world: Any, e: int, m: int, rows: dict[str, Any], flags: int, mesh: Any) -> None:
    """Slot ``(e, m)`` of every per-slot tensor written, in place: ``rows`` (:func:`_slot_rows`), the table
    offsets and ``flags``, and ``mesh`` (None: none).

    On the CPU the rows are written through NumPy views of the tensors (a few microseconds each, no torch
    dispatch); on CUDA by indexed copies on the current stream."""
    tables = world._tables
    later = world._later
    with world._take_lock:
        if later is not None:  # a slot whose tables were still to come holds another entry now
            for _, slots in later._jobs:
                if (e, m) in slots:
                    slots.remove((e, m))
            assembly = later.assembly
            assembly.flags[e, m] = flags
            assembly.grid_dims[e, m] = 0
            assembly.topo_offsets[e, m] = -1
            assembly.cone_offsets[e, m] = -1
        for field, value in (
            ("grid_flags", flags),
            ("grid_dims", 0),
            ("topo_offsets", -1),
            ("cone_offsets", -1),
        ):
            _put(world, field, tables[field], e, m, value)
    for field in _TABLE_ROWS:
        _put(world, field, tables[field], e, m, rows[field])
    inverse = rows["inv_poses"]
    if world._device.type == "cpu":
        _put(world, "poses", world._poses, e, m, rows["poses"])
        _put(world, "inv_poses", world._inv_poses, e, m, inverse)
        _put(
            world, "inv_poses32", world._inv_poses32, e, m, inverse
        )  # rounded to float32 as torch's .to rounds
    else:
        world._poses[e, m] = rows["poses"]
        world._inv_poses[e, m] = inverse
        world._inv_poses32[e, m] = inverse.to(torch.float32)
    present = rows["present"]
    _put(world, "present", world._present, e, m, present)
    world._present_host[e, m] = present
    world._kinds_host[e, m] = rows["slot_kind"]
    world._wp_meshes[e][m] = mesh
    # the mesh id last, re-registered (the ops vet the world's own ids by their registered values)
    host_ids = world._ids_host
    new_id = _constants.NO_MESH if mesh is None else mesh.id
    if int(host_ids[e, m]) != new_id:
        ids = tables["mesh_ids"]
        host_ids[e, m] = new_id
        ids[e, m] = int(host_ids.view(np.int64)[e, m])
        live = [x for row in world._wp_meshes for x in row if x is not None]
        update_mesh_ids(ids, host_ids.view(np.int64), live)


#: The per-slot fields of ``world._tables`` a slot's rows fill (:func:`_slot_rows`).
_TABLE_ROWS = ("bounds", "world_bounds", "slot_kind", "prim_size", "sign", "enabled")


def _put(world: Any, name: str, tensor: torch.Tensor, e: int, m: int, value: Any) -> None:
    """``tensor[e, m] = value`` in place: on the CPU through a NumPy view of it, kept per field while the field
    is that tensor (``tensor.numpy()`` costs microseconds)."""
    if tensor.device.type != "cpu":
        tensor[e, m] = (
            torch.from_numpy(value).to(tensor.device, tensor.dtype)
            if isinstance(value, np.ndarray)
            else value
        )
        return
    views = world.__dict__.setdefault("_host_views", {})
    held = views.get(name)
    if held is None or held[0] is not tensor:
        held = views[name] = (tensor, tensor.numpy())
    held[1][e, m] = value


def _posed_box(box: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """``(2, 3)`` float32: a world-frame box around the box ``box`` (its frame) posed by ``pose`` (a unit
    quaternion), padded and rounded outwards as ``warpgeo._world.poses._posed_boxes`` pads (there for all
    slots, on the device). Python floats: a handful of microseconds for one slot."""
    (l0, l1, l2), (h0, h1, h2) = box.tolist()
    c0, c1, c2 = (l0 + h0) / 2, (l1 + h1) / 2, (l2 + h2) / 2  # centre
    a0, a1, a2 = (h0 - l0) / 2, (h1 - l1) / 2, (h2 - l2) / 2  # half-extents
    t0, t1, t2, w, x, y, z = pose.tolist()
    r00, r01, r02 = 1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)
    r10, r11, r12 = 2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)
    r20, r21, r22 = 2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)
    e0 = abs(r00) * a0 + abs(r01) * a1 + abs(r02) * a2  # the posed box's half-extents
    e1 = abs(r10) * a0 + abs(r11) * a1 + abs(r12) * a2
    e2 = abs(r20) * a0 + abs(r21) * a1 + abs(r22) * a2
    m0 = r00 * c0 + r01 * c1 + r02 * c2 + t0  # its centre
    m1 = r10 * c0 + r11 * c1 + r12 * c2 + t1
    m2 = r20 * c0 + r21 * c1 + r22 * c2 + t2
    pad = _PAD * max(abs(m0) + e0, abs(m1) + e1, abs(m2) + e2)
    with np.errstate(over="ignore"):
        out = np.array(
            [[m0 - e0 - pad, m1 - e1 - pad, m2 - e2 - pad], [m0 + e0 + pad, m1 + e1 + pad, m2 + e2 + pad]],
            dtype=np.float32,
        )
    # two float32 steps outwards: beyond any rounding of the float64 box, or of the rotation above
    return np.nextafter(np.nextafter(out, _OUTWARDS), _OUTWARDS)


_OUTWARDS = np.array([[-np.inf], [np.inf]], dtype=np.float32)


#: Relative padding of a posed box: that of ``_posed_boxes`` (``_POSED_BOX_PAD``), doubled.
_PAD = 2.0**-19
