"""The registry of live Warp mesh ids: what keeps a forged id away from Warp's mesh queries.

A mesh id is a pointer that Warp's queries dereference: an SDF op must never launch with an id that is not
a live mesh's on the query's device. The ops take ``mesh_ids`` as an input like any tensor, so
:func:`check_mesh_ids` vets it before every launch, value checks on or off, with no device sync when they
are off:
* a world's own ``mesh_ids`` tensor is registered when it is made, and that tensor (or a view with the same
  data pointer, shape and strides) is accepted while it is alive and unwritten: its version counter
  unchanged, and its bytes equal to those registered, which catches writes that bypass the version counter
  (``.data``, a NumPy or DLPack view). On the CPU the bytes are compared on every call (host memory: no
  sync, and no torch op); on CUDA with the op's other value checks, in the same transfer, so with value
  checks off such a write into a world's own device memory behind torch's back is not seen (as a write
  anywhere else in the process's memory would not be).
* any other tensor is vetted by value: every id in it must be a live mesh's on that device. On the CPU this
  reads host memory (always); on CUDA it needs a device-to-host read, so with value checks off it is
  refused.
The meshes live as long as their ``mesh_ids`` tensor (the registration holds them), so ids handed to an op
never dangle while it runs, even when the world itself is gone.

Why a registry keyed by ids at all: a mesh id is a raw pointer that no tensor property can vouch for, and a
world's ``mesh_ids`` tensor is an op input like any other (ops must take every tensor they read). The
registry is the one place that knows which pointers are live meshes; its entries hold weak references only
(a registered tensor's data pointer, version and values; the meshes' ids, counted), are written under a lock
and removed when the tensor dies, so an entry never outlives the meshes it vouches for.
"""

from __future__ import annotations

import collections
import ctypes
import weakref
from typing import Any

import numpy as np
import torch

from . import _constants, _threads

__all__ = ["check_mesh_ids", "refuse_changed_mesh_ids", "register_mesh_ids", "update_mesh_ids"]

#: Per device: how many live registered mesh-id tensors hold each mesh id.
_LIVE_IDS: dict[torch.device, collections.Counter] = {}
#: A registered tensor's data pointer -> (weak reference to it, its version, its values: bytes on the host
#: for a CPU tensor, a copy on the device for a CUDA one).
_OWN_IDS: dict[int, tuple[weakref.ref, int, Any]] = {}
_IDS_LOCK = _threads.ForkSafeLock()
#: A registered tensor's data pointer -> the id list and mesh list its finaliser forgets (mutable: a world
#: that adds or removes meshes in place updates them, :func:`update_mesh_ids`).
_HELD: dict[int, tuple[list[int], list]] = {}


def register_mesh_ids(ids: torch.Tensor, meshes: list, host: np.ndarray) -> None:
    """Register a world's ``mesh_ids`` tensor (``host``: its values); ``meshes`` live as long as it does."""
    values = [int(v) for v in host.reshape(-1) if v != _constants.NO_MESH]
    key = ids.data_ptr()
    reference = np.ascontiguousarray(host).tobytes() if ids.device.type == "cpu" else ids.clone()
    with _IDS_LOCK:
        _LIVE_IDS.setdefault(ids.device, collections.Counter()).update(values)
        _OWN_IDS[key] = (weakref.ref(ids), ids._version, reference)
        _HELD[key] = (values, meshes)
    weakref.finalize(ids, _forget_mesh_ids, key, ids.device, values, meshes)


def update_mesh_ids(ids: torch.Tensor, host: np.ndarray, keep: list) -> None:
    """Re-register a world's ``mesh_ids`` tensor after the world wrote into it in place (``MeshWorld.add`` /
    ``remove``): ``host`` its new values; ``keep`` the Warp meshes it names now (they live as long as the
    tensor does; meshes it no longer names are let go)."""
    values = [int(v) for v in host.reshape(-1) if v != _constants.NO_MESH]
    key = ids.data_ptr()
    reference = np.ascontiguousarray(host).tobytes() if ids.device.type == "cpu" else ids.clone()
    with _IDS_LOCK:
        held = _HELD.get(key)
        if held is None:
            raise RuntimeError("internal error: update_mesh_ids of a tensor that was never registered")
        old, meshes = held
        live = _LIVE_IDS.setdefault(ids.device, collections.Counter())
        live.update(values)
        live.subtract(old)
        for v in set(old):
            if live[v] <= 0:
                del live[v]
        old[:] = values
        meshes[:] = keep
        _OWN_IDS[key] = (weakref.ref(ids), ids._version, reference)


def _forget_mesh_ids(key: int, device: torch.device, values: list[int], meshes: list) -> None:
    with _IDS_LOCK:
        _OWN_IDS.pop(key, None)
        _HELD.pop(key, None)
        live = _LIVE_IDS[device]
        live.subtract(values)
        for v in values:
            if live[v] <= 0:
                del live[v]
    meshes.clear()  # the Warp meshes go with the last reference to their ids


def check_mesh_ids(mesh_ids: torch.Tensor, *, by_value: bool) -> torch.Tensor | None:
    """Raise ValueError unless every id in ``mesh_ids`` is :data:`~warpgeo._constants.NO_MESH` or a live Warp
    mesh's on ``mesh_ids``' device (see above). ``by_value``: value checks are on (reading values allowed).

    Returns None, or for a world's own CUDA tensor with ``by_value`` a 0-d bool tensor on the device, True
    where its values differ from those registered: the caller reads it with its other value checks and
    refuses the call where it is True (:func:`refuse_changed_mesh_ids`)."""
    own = _OWN_IDS.get(mesh_ids.data_ptr())
    if own is not None:
        ref, version, reference = own
        registered = ref()
        if (
            registered is not None
            and mesh_ids._version == version
            and registered.shape == mesh_ids.shape
            and registered.stride() == mesh_ids.stride()
            and registered.device == mesh_ids.device
        ):
            if mesh_ids.device.type == "cpu":
                if ctypes.string_at(mesh_ids.data_ptr(), len(reference)) == reference:
                    return None
            else:
                return (mesh_ids != reference).any() if by_value else None
    device = mesh_ids.device
    if device.type != "cpu" and not by_value:
        raise ValueError(
            "mesh_ids must be the mesh_ids tensor of a live MeshWorld (MeshWorld.kernel_args()), unwritten: "
            "other tensors are vetted by value, which needs value checks on (warpgeo.value_checks)"
        )
    values = set(mesh_ids.detach().cpu().reshape(-1).tolist())
    values.discard(_constants.NO_MESH)
    with _IDS_LOCK:
        live = _LIVE_IDS.get(device, {})
        forged = sorted(v for v in values if v not in live)
    if forged:
        raise ValueError(
            f"mesh_ids must hold the Warp mesh ids of live MeshWorld meshes on {device} (or {_constants.NO_MESH}); "
            f"got {len(forged)} other value(s), e.g. {forged[:3]}"
        )
    return None


def refuse_changed_mesh_ids() -> None:
    """The ValueError of a world's own ``mesh_ids`` written behind torch's back (see :func:`check_mesh_ids`)."""
    raise ValueError(
        "mesh_ids must hold the Warp mesh ids the MeshWorld made; its values were written since (through .data "
        "or a NumPy / DLPack view), so they may name no live mesh"
    )
