"""The sort key's NumPy steps, old (axis-1 reductions) against whole-array steps, and gathers / scatters by
fancy indexing, np.take and row items."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
from bench_raycast import _one_mesh_rays

from warpgeo import _ray_order as rc

n = 1_000_000
o, d = _one_mesh_rays(n, np.random.default_rng(0))
lower, upper = np.full(3, -0.5), np.full(3, 0.5)
SP = rc._SPREAD


def keys_old(o, d, lower, upper):
    """The key's first version: float64, axis-1 reductions, nan_to_num."""
    cells = (1 << 10) - 1
    with np.errstate(all="ignore"):
        inv = 1.0 / d
        t1 = (lower - o) * inv
        t2 = (upper - o) * inv
        t_in = np.fmax(np.fmin(t1, t2).max(axis=1), 0.0)
        p = o + d * t_in[:, None]
        q = np.nan_to_num((p - lower) * (cells / np.maximum(upper - lower, 1.0e-30)), nan=0.0)
        q = np.clip(q, 0, cells).astype(np.int64)
    return SP[q[:, 0]] | (SP[q[:, 1]] << 1) | (SP[q[:, 2]] << 2)


def keys2(o, d, lower, upper):
    cells = 1023
    lower = lower.astype(o.dtype)
    upper = upper.astype(o.dtype)
    scale = (cells / np.maximum(upper - lower, 1e-30)).astype(o.dtype)
    with np.errstate(all="ignore"):
        inv = 1.0 / d
        t1 = (lower - o) * inv
        t2 = (upper - o) * inv
        np.fmin(t1, t2, out=t1)
        t_in = np.fmax(np.fmax(t1[:, 0], t1[:, 1]), np.fmax(t1[:, 2], 0))
        p = d * t_in[:, None]
        p += o
        p -= lower
        p *= scale
        np.fmax(p, 0, out=p)
        np.fmin(p, cells, out=p)
        q = p.astype(np.int32)
    return SP[q[:, 0]] | (SP[q[:, 1]] << 1) | (SP[q[:, 2]] << 2)


def tm(f, k=3):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return min(ts) * 1e3


k1 = keys_old(o, d, lower, upper)
k2 = keys2(o, d, lower, upper)
print("same keys", (k1 == k2).mean())
print(
    f"keys old {tm(lambda: keys_old(o, d, lower, upper)):.1f} ms, new {tm(lambda: keys2(o, d, lower, upper)):.1f} ms"
)
order = np.argsort(k2)
print(
    f"fancy {tm(lambda: o[order]):.1f}, take {tm(lambda: np.take(o, order, axis=0)):.1f}, void {tm(lambda: o.view(np.dtype((np.void, 12))).reshape(-1)[order]):.1f}, "
    f"flat3 {tm(lambda: o.reshape(-1)[(order[:, None] * 3 + np.arange(3)).reshape(-1)]):.1f}"
)
out = np.empty_like(o)


def sv():
    out.view(np.dtype((np.void, 12))).reshape(-1)[order] = o.view(np.dtype((np.void, 12))).reshape(-1)


def sf():
    out[order] = o


inv = np.empty_like(order)


def invp():
    inv[order] = np.arange(n)


print(
    f"scatter fancy {tm(sf):.1f}, scatter void {tm(sv):.1f}, inverse perm {tm(invp):.1f}, gather by inverse void {tm(lambda: o.view(np.dtype((np.void, 12))).reshape(-1)[inv]):.1f}"
)
