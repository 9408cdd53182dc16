# ruff: noqa: B023  (timing scripts: lambdas run at once, in their loop)
"""The ordering's NumPy steps one by one for a million rays (the keys as warpgeo._ray_order computes them now)."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
import torch
from bench_raycast import _one_mesh_rays

from warpgeo import _ray_order as rc

n = int(sys.argv[1])
o_np, d_np = _one_mesh_rays(n, np.random.default_rng(0))
lo, hi = np.full(3, -0.5), np.full(3, 0.5)
T = {}


def tic(name, f):
    s = time.perf_counter()
    r = f()
    T[name] = time.perf_counter() - s
    return r


for _ in range(2):
    first = np.linspace(0, n - 2, 1024).astype(np.int64)
    tic("incoherent", lambda: rc._incoherent(o_np[first], d_np[first], o_np[first + 1], d_np[first + 1]))
    keys = tic("keys", lambda: rc._morton_keys(o_np, d_np, lo, hi))
    order = tic("argsort", lambda: np.argsort(keys))
    og = tic("gather o", lambda: o_np[order])
    tic("gather d", lambda: d_np[order])
    out = np.empty((n, 3), np.float32)

    def sc():
        out[order] = og

    tic("scatter vec3", sc)
    out1 = np.empty(n, np.float32)
    src1 = np.ones(n, np.float32)

    def sc1():
        out1[order] = src1

    tic("scatter float", sc1)
    tic(
        "empty 4 outputs",
        lambda: [
            torch.empty((n, 1, 3)),
            torch.empty((n, 1, 3)),
            torch.empty((n, 1)),
            torch.empty((n, 1), dtype=torch.int64),
        ],
    )
print(", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in T.items()))
