"""Loading a world entry's mesh: a trimesh, a file, a ``(vertices, faces)`` pair, validated into arrays of its
own, and the content key that recognises a mesh that recurs."""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

import numpy as np
import torch

#: A world entry: a ``trimesh.Trimesh``, a path trimesh can load, a ``(vertices (V, 3), faces (F, 3))`` pair, or
#: an analytic primitive (:mod:`warpgeo.primitives`).
MeshLike = Any


#: Warp meshes are float32: a vertex coordinate beyond this would become inf.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


#: Meshes up to this many bytes of vertices and faces are recognised by content when they recur (larger ones
#: only as the same object): hashing them costs less than building them again.
_HASHED_BYTES = 1 << 22


def _content_key(vertices: np.ndarray, faces: np.ndarray) -> Any:
    """A key equal for meshes with equal vertices and faces (small ones: by content; large ones: a key of
    their own, unless they are the very same arrays)."""
    size = vertices.nbytes + faces.nbytes
    if size > _HASHED_BYTES:
        return ("arrays", id(vertices), id(faces))
    digest = hashlib.blake2b(vertices.tobytes(), digest_size=16)
    digest.update(faces.tobytes())
    return ("content", vertices.shape, faces.shape, digest.digest())


def is_vf_pair(item: Any) -> bool:
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        return False
    return all(isinstance(x, (np.ndarray, torch.Tensor)) for x in item)


def load_mesh(item: MeshLike, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(vertices (V, 3) float32, faces (F, 3) int32)`` of one mesh argument, validated: arrays of their own
    (never views of the caller's)."""
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
            f"{where} must be a trimesh.Trimesh, a file path, a (vertices, faces) pair or a primitive "
            f"(warpgeo.Cuboid, Sphere, Capsule, Cylinder); got {type(item).__name__}"
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
    # copies of our own, also where the input is float32 / int32 already: the Warp mesh points into them and
    # the background tables read them after the build returns, so a caller writing into its arrays later
    # must not reach either
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float32: inf, refused below
        own = np.array(vertices, dtype=np.float32, order="C")
    # a NaN or inf of the copy is in its extremes (min / max carry NaN on); float32 rounding keeps order, so a
    # copy within 2**60 comes of values within it: else the values as given decide
    low, high = float(own.min()), float(own.max())
    if not (low > -_COORDINATE_LIMIT and high < _COORDINATE_LIMIT):  # also False for NaN
        _check_vertices(vertices, where)
    lo, hi = int(faces.min()), int(faces.max())
    if lo < 0 or hi >= len(vertices):
        raise IndexError(
            f"{where}: face indices must lie in [0, {len(vertices)}); got values in [{lo}, {hi}]"
        )
    return own, np.array(faces, dtype=np.int32, order="C")


def _check_vertices(vertices: np.ndarray, where: str) -> None:
    """Raise ValueError where a mesh's vertices (real numbers, as given) are not finite, or lie beyond float32's
    range or :data:`_COORDINATE_LIMIT`."""
    if not np.isfinite(vertices).all():
        raise ValueError(f"{where}: vertices must be finite; found NaN or inf")
    largest = float(np.abs(vertices.astype(np.float64)).max())  # float64: no integer wraps (abs of int64 min)
    if largest > _FLOAT32_MAX:
        raise ValueError(
            f"{where}: vertices must lie within float32's range (|v| <= {_FLOAT32_MAX:.4g}: Warp meshes are "
            f"float32); got a coordinate of magnitude {largest:.4g}"
        )
    if largest > _COORDINATE_LIMIT:
        raise ValueError(
            f"{where}: vertex coordinates must stay within 2**60 (~1.15e18) of the mesh origin, where Warp's "
            f"float32 queries can square distances; got {largest:.3g} (scale the mesh, or pose it instead)"
        )


def _to_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        if x.device.type == "meta":
            raise ValueError(f"{name} is a meta tensor (it holds no values)")
        return x.detach().cpu().resolve_conj().resolve_neg().numpy()
    try:
        return np.asarray(x)
    except Exception as exc:  # ragged lists, objects: the caller's input
        raise ValueError(f"{name} could not be read as an array: {exc}") from exc


#: Mesh coordinates (mesh units) up to which Warp's float32 squared distances cannot overflow.
_COORDINATE_LIMIT = 2.0**60
