"""raycast with its ray ordering vs without (_SORT_MIN_RAYS huge): identical answers, and the times."""

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
dtype = getattr(torch, sys.argv[4]) if len(sys.argv) > 4 else torch.float32
torch.set_num_threads(threads)
mesh = trimesh.creation.icosphere(subdivisions=sub, radius=0.5)
world = warpgeo.MeshWorld([(np.asarray(mesh.vertices), np.asarray(mesh.faces))])
world.wait_tables()
rng = np.random.default_rng(0)
o_np, d_np = _one_mesh_rays(n, rng)
o, d = torch.from_numpy(o_np).to(dtype), torch.from_numpy(d_np).to(dtype)
scene = _open3d_scene(o3d, [mesh])
rays = o3d.core.Tensor(np.concatenate([o_np, d_np], 1))
scene.cast_rays(rays, nthreads=threads)


def med(f, k=3):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return float(np.median(ts))


a = raycast(world, o, d)
keep = rc._SORT_MIN_RAYS
rc._SORT_MIN_RAYS = 1 << 62
b = raycast(world, o, d)
rc._SORT_MIN_RAYS = keep
for x, y in zip(a, b, strict=False):
    assert torch.equal(x.nan_to_num(), y.nan_to_num()) if x.is_floating_point() else torch.equal(x, y)
print(
    f"faces {len(mesh.faces):,} rays {n:,} threads {threads} {dtype}: sorted and unsorted answers identical"
)
o_, d_ = rc.host_rows(o), rc.host_rows(d)
s = time.perf_counter()
rc.ray_order(o.view(n, 1, 3), d.view(n, 1, 3), None, world.kernel_args(dtype).world, False)
print(f"  _ray_order {1e3 * (time.perf_counter() - s):.0f} ms")
for _r in range(2):
    t1 = med(lambda: raycast(world, o, d))
    rc._SORT_MIN_RAYS = 1 << 62
    t0 = med(lambda: raycast(world, o, d))
    rc._SORT_MIN_RAYS = keep
    t2 = med(lambda: scene.cast_rays(rays, nthreads=threads))
    print(
        f"  unsorted {t0 * 1e3:.0f} ms ({t2 / t0:.2f}x o3d)  ordered {t1 * 1e3:.0f} ms ({t2 / t1:.2f}x o3d)  open3d {t2 * 1e3:.0f} ms (load {os.getloadavg()[0]:.2f})",
        flush=True,
    )
