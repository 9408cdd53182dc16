"""raycast on the one-mesh scene of bench_raycast.py, interleaved rounds: ordered by raycast (on), rays as
given (ordering off), rays sorted beforehand, Open3D. Arguments: threads, subdivisions, rays, rounds."""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
import open3d as o3d
import torch
import trimesh
from bench_raycast import _one_mesh_rays, _open3d_scene

import warpgeo
from warpgeo import _ray_order as rc
from warpgeo.raycasting import raycast

threads = int(sys.argv[1])
sub = int(sys.argv[2])
n = int(sys.argv[3])
rounds = int(sys.argv[4])
torch.set_num_threads(threads)
mesh = trimesh.creation.icosphere(subdivisions=sub, radius=0.5)
world = warpgeo.MeshWorld([(np.asarray(mesh.vertices), np.asarray(mesh.faces))])
world.wait_tables()
o_np, d_np = _one_mesh_rays(n, np.random.default_rng(0))
o, d = torch.from_numpy(o_np), torch.from_numpy(d_np)
scene = _open3d_scene(o3d, [mesh])
rays = o3d.core.Tensor(np.concatenate([o_np, d_np], 1))
scene.cast_rays(rays, nthreads=threads)
idx = rc.ray_order(o.view(n, 1, 3), d.view(n, 1, 3), None, world.kernel_args(torch.float32).world, False)
os_, ds_ = o[idx].contiguous(), d[idx].contiguous()
keep = rc._SORT_MIN_RAYS


def t(f):
    s = time.perf_counter()
    f()
    return time.perf_counter() - s


def unordered(x, y):
    rc._SORT_MIN_RAYS = 1 << 62
    try:
        raycast(world, x, y)
    finally:
        rc._SORT_MIN_RAYS = keep


raycast(world, o, d)
unordered(o, d)
res = {"ordered": [], "unordered": [], "presorted": [], "open3d": []}
for _r in range(rounds):
    res["ordered"].append(t(lambda: raycast(world, o, d)))
    res["unordered"].append(t(lambda: unordered(o, d)))
    res["presorted"].append(t(lambda: unordered(os_, ds_)))
    res["open3d"].append(t(lambda: scene.cast_rays(rays, nthreads=threads)))
m = {k: float(np.median(v)) for k, v in res.items()}
print(
    f"faces {len(mesh.faces):,} rays {n:,} threads {threads}, medians of {rounds} interleaved rounds (load {os.getloadavg()[0]:.2f}): "
    + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in m.items())
    + f"; ratio vs open3d: unordered {m['open3d'] / m['unordered']:.2f}, ordered {m['open3d'] / m['ordered']:.2f}"
)
