"""The order the CPU casts rays in (``warpgeo.raycasting``): rays that come in no coherent order against a
large environment are cast sorted by where they enter the world, so that neighbouring rays walk the same BVH
nodes while those are in the cache; every ray's answer is the same in any order (each ray is cast alone).

NumPy on the calling thread (torch's OpenMP workers would keep spinning and take cores from the launch
threads that follow: CONTRIBUTING, "Launching"); CPU tensors only, never under ``torch.compile`` or a
dispatch mode (``_warp._on_the_host``), never for CUDA's algorithms.
"""

from __future__ import annotations

import numpy as np
import torch

from . import _warp
from ._kernels.world import WORLD_FIELDS

#: On the CPU, a call of at least this many rays that come in no coherent order (neighbours in memory far
#: apart in direction or origin, :func:`_incoherent`) casts them in the order of where they enter the world's
#: box (:func:`ray_order`): neighbouring rays then walk the same BVH nodes while those are in the cache.
#: Every ray's answer is the same in any order. Measured (benchmarks/results/2026-11-29-cpu-round6-raycast.md):
#: 1M random rays on a 1.3M-face icosphere, 2 threads, 1095 ms in their order, 628 ms ordered here, 516 ms
#: sorted beforehand (the key, the sort and the copies: about 0.1 s of NumPy per million rays). A camera's or
#: a lidar's rays are coherent already and are cast as they come. Where a mesh's BVH stays in the cache in any
#: order the sort costs more than it saves (random rays, 2 threads: 82k faces 40 -> 44 ms; 327k faces
#: 101 -> 96 ms): the world's face counts are not among the op's inputs, so no threshold on them.
_SORT_MIN_RAYS = 1 << 14
#: Pairs of neighbouring rays :func:`_incoherent` looks at.
_SAMPLE_PAIRS = 1024
#: Bits per axis of the sort key's Morton code, and each 10-bit value spread to every third bit.
_MORTON_BITS = 10
_SPREAD = np.zeros(1 << _MORTON_BITS, dtype=np.int64)
for _bit in range(_MORTON_BITS):
    _SPREAD |= ((np.arange(1 << _MORTON_BITS, dtype=np.int64) >> _bit) & 1) << (3 * _bit)
_WORLD_BOUNDS = list(WORLD_FIELDS).index("world_bounds")
_ENABLED = list(WORLD_FIELDS).index("enabled")


def rows_as_items(t: torch.Tensor, count: int) -> np.ndarray:
    """A contiguous CPU tensor of ``count`` rows as a NumPy view of ``count`` opaque items, one per row (a
    scatter of items: 3 ms for 1M rows of 3 floats, of rows 9)."""
    rows = t.view(count, -1).numpy()
    return rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).reshape(count)


def host_rows(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor ``(B, S, 3)`` as NumPy ``(B * S, 3)`` (a view where its strides allow)."""
    return t.detach().numpy().reshape(-1, 3)


def environment_rows(env_index: torch.Tensor, per_entry: int) -> np.ndarray:
    """Each ray's ``env_index`` entry (int64), rays of batch entry ``b`` in a row."""
    return np.repeat(env_index.detach().to(torch.int64).numpy(), per_entry)


def ray_order(o, d, env_index, world, all_cuboids) -> np.ndarray | None:
    """On the CPU, for :data:`_SORT_MIN_RAYS` rays or more in no coherent order (:func:`_incoherent`) against
    a world with meshes: the order to cast them in (NumPy int64, a permutation of the flattened ``(B, S)`` rays), by environment, then by the Morton
    code of the point where the ray enters the box of every enabled entry (the world's, all environments':
    the key only orders the rays; a ray that misses the box keys on a point of its line clamped to the
    box). None: cast them as they come."""
    rows = o.shape[0] * o.shape[1]
    if (
        all_cuboids
        or rows < _SORT_MIN_RAYS
        or _warp.cuda_algorithms(o.device)
        or not _warp._on_the_host(o, d, world[_WORLD_BOUNDS])
        or (env_index is not None and env_index.shape[0] != o.shape[0])
    ):
        return None
    o_np = o.detach().numpy()
    d_np = d.detach().numpy()
    first = np.linspace(0, rows - 2, min(_SAMPLE_PAIRS, rows - 1)).astype(np.int64)
    b0, s0 = np.divmod(first, o.shape[1])
    b1, s1 = np.divmod(first + 1, o.shape[1])
    if not _incoherent(o_np[b0, s0], d_np[b0, s0], o_np[b1, s1], d_np[b1, s1]):
        return None
    box = _world_box(world)
    if box is None:
        return None
    keys = _morton_keys(host_rows(o), host_rows(d), *box)
    if env_index is not None:
        env = np.clip(environment_rows(env_index, o.shape[1]), -1, (1 << 31) - 2)
        keys |= (env + 1) << (3 * _MORTON_BITS)
    return np.argsort(keys)


def _incoherent(o0: np.ndarray, d0: np.ndarray, o1: np.ndarray, d1: np.ndarray) -> bool:
    """Whether pairs of neighbouring rays ``(o0, d0)``, ``(o1, d1)`` (NumPy ``(P, 3)``) are far apart: the median
    pair's directions more than about 8 degrees apart, or its origins more than a tenth of the sample's
    extent apart (pairs with a non-finite or zero ray left out: checks off, such a ray misses)."""
    with np.errstate(all="ignore"):
        u0 = d0 / np.linalg.norm(d0, axis=1, keepdims=True)
        u1 = d1 / np.linalg.norm(d1, axis=1, keepdims=True)
        turn = 1.0 - (u0 * u1).sum(axis=1)
        gap = np.linalg.norm(o1 - o0, axis=1)
        usable = np.isfinite(turn) & np.isfinite(gap)
        if not usable.any():
            return False
        extent = float(np.ptp(o0[usable], axis=0).max())
        return bool(np.median(turn[usable]) > 1.0e-2) or bool(
            extent > 0.0 and np.median(gap[usable]) > 0.1 * extent
        )


def _world_box(world: list[torch.Tensor]) -> tuple[np.ndarray, np.ndarray] | None:
    """The box ``(lower, upper)`` (float64) of the posed boxes of the enabled entries of every environment, or
    None where there is none (or none finite)."""
    bounds = world[_WORLD_BOUNDS].detach().numpy().reshape(-1, 2, 3)
    used = (world[_ENABLED].detach().numpy().reshape(-1) != 0) & np.isfinite(bounds).all(axis=(1, 2))
    if bounds.shape[0] != used.shape[0] or not used.any():
        return None
    lower = bounds[used, 0].min(axis=0).astype(np.float64)
    upper = bounds[used, 1].max(axis=0).astype(np.float64)
    return lower, upper


def _morton_keys(o: np.ndarray, d: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Each ray's sort key (int64, ``3 * _MORTON_BITS`` bits): the Morton code of where it enters the box
    ``[lower, upper]`` (its origin when inside), quantised to ``2**_MORTON_BITS`` cells per axis, in the
    rays' precision (NaN and inf are clamped: a key only orders). Whole-array NumPy steps (an axis-1
    reduction of width 3 is a slow NumPy loop): 30 ms for 1M rays."""
    cells = (1 << _MORTON_BITS) - 1
    lower = lower.astype(o.dtype)
    scale = (cells / np.maximum(upper.astype(o.dtype) - lower, 1.0e-30)).astype(o.dtype)
    with np.errstate(all="ignore"):
        t1 = (lower - o) / d
        t2 = (upper.astype(o.dtype) - o) / d
        np.fmin(t1, t2, out=t1)
        t_in = np.fmax(np.fmax(t1[:, 0], t1[:, 1]), np.fmax(t1[:, 2], 0.0))
        p = d * t_in[:, None]
        p += o
        p -= lower
        p *= scale
        np.fmin(np.fmax(p, 0.0, out=p), cells, out=p)
        q = p.astype(np.int32)
    return _SPREAD[q[:, 0]] | (_SPREAD[q[:, 1]] << 1) | (_SPREAD[q[:, 2]] << 2)
