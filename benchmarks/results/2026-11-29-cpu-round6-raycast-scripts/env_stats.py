# ruff: noqa: B023  (timing scripts: lambdas run at once, in their loop)
"""The environment scene of bench_raycast.py: per ray, is the union box hit, how many slot boxes are hit, how
many before the hit slot (index order), and timings of raycast vs Open3D at 1 thread."""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
import open3d as o3d
import torch
import trimesh
from bench_raycast import _objects, _open3d_scene

import warpgeo
from warpgeo.raycasting import camera_rays, raycast

n_envs = int(sys.argv[1])
threads = int(sys.argv[2])
torch.set_num_threads(threads)
rng = np.random.default_rng(0)
_ = trimesh.creation.icosphere(subdivisions=8, radius=0.5)  # bench draws the one-mesh rays first; not needed
rng.normal(size=(1_000_000, 3))
rng.uniform(-0.5, 0.5, (1_000_000, 3))
envs = [_objects(rng) for _ in range(n_envs)]
ew = warpgeo.MeshWorld.from_envs([[(m.vertices, m.faces) for m in env] for env in envs])
ew.wait_tables()
side = 64
k = torch.tensor([side * 0.9, side * 0.9, (side - 1) / 2, (side - 1) / 2])
pose = torch.tensor([0.0, -2.0, 0.0, 0.70710678, -0.70710678, 0.0, 0.0])
origins, directions = camera_rays(k, side, side, pose.expand(n_envs, 7).contiguous())
origins, directions = origins.contiguous(), directions.contiguous()
env_index = torch.arange(n_envs)
hits = raycast(ew, origins, directions, env_index=env_index)
wb = ew.kernel_args().world[3].numpy()  # (E, M, 2, 3)
o = origins.numpy().reshape(n_envs, -1, 3)
d = directions.numpy().reshape(n_envs, -1, 3)
with np.errstate(all="ignore"):
    t1 = (wb[:, None, :, 0, :] - o[:, :, None, :]) / d[:, :, None, :]
    t2 = (wb[:, None, :, 1, :] - o[:, :, None, :]) / d[:, :, None, :]
tin = np.minimum(t1, t2).max(-1)
tout = np.maximum(t1, t2).min(-1)
boxhit = (tin <= tout) & (tout >= 0)  # (E, R, M)
lo = wb[:, :, 0].min(1)
hi = wb[:, :, 1].max(1)
with np.errstate(all="ignore"):
    u1 = (lo[:, None] - o) / d
    u2 = (hi[:, None] - o) / d
uhit = np.minimum(u1, u2).max(-1) <= np.maximum(u1, u2).min(-1)
nb = boxhit.sum(-1)
hit = np.isfinite(hits.distance.numpy().reshape(n_envs, -1))
print(
    f"{n_envs} envs x {side * side} rays: env box hit {uhit.mean() * 100:.1f}%, slot boxes hit per ray: mean {nb.mean():.2f}, "
    f"rays with >=1 slot box {(nb > 0).mean() * 100:.1f}%, >=2 {(nb > 1).mean() * 100:.1f}%, surface hits {hit.mean() * 100:.1f}%"
)
scenes = [_open3d_scene(o3d, env) for env in envs]
per_env = [o3d.core.Tensor(np.concatenate([a, b], axis=1)) for a, b in zip(o, d, strict=False)]


def cast_all():
    for s, r in zip(scenes, per_env, strict=False):
        s.cast_rays(r, nthreads=threads)


cast_all()


def med(f, k=5):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return float(np.median(ts))


# rays that hit no slot box: what an all-miss launch costs
miss_o = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(np.array([0, -2.0, 0], np.float32), o.shape)))
miss_d = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(np.array([0, -1.0, 0], np.float32), d.shape)))
for _r in range(2):
    a = med(lambda: raycast(ew, origins, directions, env_index=env_index))
    b = med(cast_all)
    c = med(lambda: raycast(ew, miss_o.view(n_envs, -1, 3), miss_d.view(n_envs, -1, 3), env_index=env_index))
    print(
        f"  threads {threads}: raycast {a * 1e3:.1f} ms, open3d {b * 1e3:.1f} ms (ratio {b / a:.2f}); raycast of rays looking away (all miss the env box) {c * 1e3:.1f} ms  (load {os.getloadavg()[0]:.2f})",
        flush=True,
    )
# per-ray costs by class: rays as (R, 1, 3) with their environment each
cls = {
    "miss env box": ~uhit,
    "env box, no slot box": uhit & (nb == 0),
    "slot box, no surface": (nb > 0) & ~hit,
    "surface hit": hit,
}
E = np.broadcast_to(np.arange(n_envs)[:, None], uhit.shape)
for name, mask in cls.items():
    oo = torch.from_numpy(np.ascontiguousarray(o[mask])).view(-1, 1, 3)
    dd = torch.from_numpy(np.ascontiguousarray(d[mask])).view(-1, 1, 3)
    ee = torch.from_numpy(np.ascontiguousarray(E[mask])).long()
    raycast(ew, oo, dd, env_index=ee)
    t = med(lambda: raycast(ew, oo, dd, env_index=ee))
    print(f"  {name}: {mask.sum():,} rays, {t * 1e3:.1f} ms, {t / mask.sum() * 1e9:.0f} ns/ray", flush=True)
