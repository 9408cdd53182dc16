"""raycast vs Open3D, both scenes of bench_raycast.py at smaller sizes, same process; threads per argv."""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
import open3d as o3d
import torch
import trimesh
from bench_raycast import _objects, _one_mesh_rays, _open3d_scene

import warpgeo
from warpgeo.raycasting import camera_rays, raycast

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
sub = int(sys.argv[2]) if len(sys.argv) > 2 else 7
n = int(sys.argv[3]) if len(sys.argv) > 3 else 200_000
n_envs = int(sys.argv[4]) if len(sys.argv) > 4 else 64
rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 2
torch.set_num_threads(threads)
rng = np.random.default_rng(0)


def med(f, k=3):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return float(np.median(ts))


small = warpgeo.MeshWorld([trimesh.creation.icosphere(subdivisions=1)])
raycast(small, torch.zeros(1, 3) - 2, torch.ones(1, 3))
mesh = trimesh.creation.icosphere(subdivisions=sub, radius=0.5)
s = time.perf_counter()
world = warpgeo.MeshWorld([(np.asarray(mesh.vertices), np.asarray(mesh.faces))])
world.wait_tables()
print(
    f"one mesh {len(mesh.faces):,} faces; world build {time.perf_counter() - s:.2f} s; {n:,} rays; threads {threads}"
)
o_np, d_np = _one_mesh_rays(n, rng)
o, d = torch.from_numpy(o_np), torch.from_numpy(d_np)
scene = _open3d_scene(o3d, [mesh])
rays = o3d.core.Tensor(np.concatenate([o_np, d_np], 1))
ref = scene.cast_rays(rays, nthreads=threads)["t_hit"].numpy()
hits = raycast(world, o, d)
t = hits.distance.numpy()
both = np.isfinite(t) & np.isfinite(ref)
print(
    f"  agree {(np.isfinite(t) == np.isfinite(ref)).mean() * 100:.3f}%  max diff {np.abs(t[both] - ref[both]).max():.1e}"
)
envs = [_objects(rng) for _ in range(n_envs)]
ew = warpgeo.MeshWorld.from_envs([[(m.vertices, m.faces) for m in env] for env in envs])
ew.wait_tables()
side = 64
k = torch.tensor([side * 0.9, side * 0.9, (side - 1) / 2, (side - 1) / 2])
pose = torch.tensor([0.0, -2.0, 0.0, 0.70710678, -0.70710678, 0.0, 0.0])
origins, directions = camera_rays(k, side, side, pose.expand(n_envs, 7).contiguous())
origins, directions = origins.contiguous(), directions.contiguous()
env_index = torch.arange(n_envs)
scenes = [_open3d_scene(o3d, env) for env in envs]
per_env = [
    o3d.core.Tensor(np.concatenate([a, b], axis=1))
    for a, b in zip(
        origins.numpy().reshape(n_envs, -1, 3), directions.numpy().reshape(n_envs, -1, 3), strict=False
    )
]
for sc, r in zip(scenes, per_env, strict=False):
    sc.cast_rays(r, nthreads=threads)
raycast(ew, origins, directions, env_index=env_index)
nr = n_envs * side * side


def cast_all():
    for sc, r in zip(scenes, per_env, strict=False):
        sc.cast_rays(r, nthreads=threads)


for rnd in range(rounds):
    a = med(lambda: raycast(world, o, d))
    b = med(lambda: scene.cast_rays(rays, nthreads=threads))
    c = med(lambda: raycast(ew, origins, directions, env_index=env_index))
    e = med(cast_all)
    print(
        f"round {rnd} (load {os.getloadavg()[0]:.2f}): one mesh warpgeo {a * 1e3:.0f} ms o3d {b * 1e3:.0f} ms ratio {b / a:.2f} | "
        f"envs {n_envs} warpgeo {c * 1e3:.1f} ms o3d {e * 1e3:.1f} ms ratio {e / c:.2f}",
        flush=True,
    )
