"""Argument helpers of the distance grids (``warpgeo/distance_grid.py``): host values, no device reads."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ._kernels.distance_grid import MAX_AXIS

__all__ = ["GRID_DTYPES", "MAX_AXIS", "MAX_VOXELS"]

#: The most voxels a grid may hold (the transform's int64 squared distances, two channels, stay addressable by
#: one Warp launch: byte strides below 2**31).
MAX_VOXELS = 2**27
#: The dtypes of a grid's values.
GRID_DTYPES = (torch.float32, torch.float64)


def number(value: Any, name: str) -> float:
    if (
        isinstance(value, (torch.Tensor, np.ndarray))
        and value.ndim == 0
        and value.dtype not in (torch.bool, np.bool_)
    ):
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number; got {type(value).__name__}")
    return float(value)


def positive(value: Any, name: str) -> float:
    x = number(value, name)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be positive and finite; got {x}")
    return x


def non_negative(value: Any, name: str) -> float:
    x = number(value, name)
    if not (math.isfinite(x) and x >= 0):
        raise ValueError(f"{name} must be >= 0 and finite; got {x}")
    return x


def point3(value: Any, name: str) -> tuple[float, float, float]:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().tolist()
    try:
        items = [number(v, name) for v in value]
    except TypeError:
        raise TypeError(f"{name} must be 3 numbers; got {value!r}") from None
    if len(items) != 3 or not all(math.isfinite(v) for v in items):
        raise ValueError(f"{name} must be 3 finite numbers; got {value!r}")
    return tuple(items)  # type: ignore[return-value]


def parse_bounds(bounds: Any) -> tuple[list[float], list[float]]:
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise ValueError(f"bounds must be ((x0, y0, z0), (x1, y1, z1)); got {bounds!r}") from None
    lo, hi = list(point3(lo, "bounds")), list(point3(hi, "bounds"))
    if any(b < a for a, b in zip(lo, hi, strict=True)):
        raise ValueError(f"bounds must have x1 >= x0, y1 >= y0, z1 >= z0; got {lo}, {hi}")
    return lo, hi


def grid_dims(lo: Sequence[float], hi: Sequence[float], h: float, name: str) -> tuple[int, int, int]:
    dims = tuple(max(math.ceil((b - a) / h - 1e-6), 0) + 1 for a, b in zip(lo, hi, strict=True))
    check_dims(dims, name)  # type: ignore[arg-type]
    return dims  # type: ignore[return-value]


def check_dims(dims: tuple[int, ...], name: str) -> None:
    if min(dims) < 1:
        raise ValueError(f"{name}: a grid needs at least one voxel along each axis; got {dims}")
    if max(dims) > MAX_AXIS or math.prod(dims) > MAX_VOXELS:
        raise ValueError(
            f"{name}: a grid may have at most {MAX_AXIS} voxels along an axis and {MAX_VOXELS} in all; "
            f"got {dims} (a larger voxel_size or smaller bounds)"
        )


def check_dtype(dtype: Any) -> None:
    if dtype not in GRID_DTYPES:
        raise TypeError(f"dtype must be torch.float32 or torch.float64; got {dtype}")


def as_float32(value: Any, name: str, device: torch.device) -> torch.Tensor:
    try:
        t = torch.as_tensor(value, device=device)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(
            f"{name} must be a tensor or an array of numbers; got {type(value).__name__} ({error})"
        ) from None
    if t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{name} must hold real numbers; got {t.dtype}")
    return t.to(torch.float32)


def mesh_vertices(mesh: Any) -> np.ndarray:
    if isinstance(mesh, (str, os.PathLike)):
        import trimesh

        mesh = trimesh.load(mesh, force="mesh")
    vertices = getattr(mesh, "vertices", None)
    if vertices is None and isinstance(mesh, (tuple, list)) and len(mesh) == 2:
        vertices = mesh[0]
    if vertices is None:
        raise TypeError(
            f"mesh must be a trimesh.Trimesh, a (vertices, faces) pair or a path; got {type(mesh).__name__}"
        )
    v = np.asarray(
        vertices.detach().cpu() if isinstance(vertices, torch.Tensor) else vertices, dtype=np.float64
    )
    if v.ndim != 2 or v.shape[1] != 3 or v.shape[0] == 0 or not np.isfinite(v).all():
        raise ValueError(f"mesh vertices must be a non-empty finite (V, 3) array; got shape {v.shape}")
    return v


def check_grid_args(voxel_size: float, origin: list[float]) -> None:
    """The plain arguments every op entry checks (host values)."""
    if not isinstance(voxel_size, float) or not (math.isfinite(voxel_size) and voxel_size > 0):
        raise ValueError(f"voxel_size must be a positive finite float; got {voxel_size!r}")
    if len(origin) != 3 or not all(isinstance(o, float) and math.isfinite(o) for o in origin):
        raise ValueError(f"origin must be 3 finite floats; got {origin!r}")


def check_values_tensor(values: Any, name: str) -> None:
    if not isinstance(values, torch.Tensor) or values.dtype not in GRID_DTYPES:
        got = values.dtype if isinstance(values, torch.Tensor) else type(values).__name__
        raise TypeError(f"{name} must be a float32 or float64 tensor; got {got}")
    if values.dim() != 3:
        raise ValueError(f"{name} must have shape (X, Y, Z); got {tuple(values.shape)}")
    check_dims(tuple(values.shape), name)


def zeros_u8(shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """A zeroed uint8 tensor; on the CPU from numpy (its zeroed pages come from the OS on first touch): a
    torch fill of this size wakes torch's OpenMP workers, which then spin beside the launch that follows
    (measured: 14 ms for a 132 kB mask before a fusion launch on 2 cores)."""
    if device.type == "cpu":
        return torch.from_numpy(np.zeros(shape, dtype=np.uint8))
    return torch.zeros(shape, dtype=torch.uint8, device=device)
