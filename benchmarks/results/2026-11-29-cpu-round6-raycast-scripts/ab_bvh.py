# ruff: noqa: B023  (timing scripts: lambdas run at once, in their loop)
"""A/B: Warp BVH constructor / leaf size, bare mesh_query_ray kernel, one thread, vs Open3D nthreads=1."""

import sys
import time

import numpy as np
import open3d as o3d
import trimesh
import warp as wp

wp.config.quiet = True
wp.init()
sub = int(sys.argv[1]) if len(sys.argv) > 1 else 7
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
configs = sys.argv[3].split(",") if len(sys.argv) > 3 else ["sah:4", "sah:1", "sah:2", "sah:8", "median:4"]


@wp.kernel
def bare(mesh: wp.uint64, o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_ray(mesh, o[i], d[i], 1.0e6)
    if q.result:
        t[i] = q.t
    else:
        t[i] = wp.inf


@wp.kernel
def closest(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, p[i], 1.0e6)
    if q.result:
        t[i] = float(q.face)


mesh = trimesh.creation.icosphere(subdivisions=sub, radius=0.5)
rng = np.random.default_rng(0)
start = rng.normal(size=(n, 3))
start = 2.0 * start / np.linalg.norm(start, axis=1, keepdims=True)
aim = rng.uniform(-0.5, 0.5, (n, 3))
d = aim - start
d /= np.linalg.norm(d, axis=1, keepdims=True)
start = start.astype(np.float32)
d = d.astype(np.float32)
pts = rng.uniform(-1, 1, (n // 20, 3)).astype(np.float32)
V = wp.array(np.asarray(mesh.vertices, np.float32), dtype=wp.vec3, device="cpu")
F = wp.array(np.asarray(mesh.faces, np.int32).reshape(-1), dtype=wp.int32, device="cpu")
O = wp.array(start, dtype=wp.vec3, device="cpu")
D = wp.array(d, dtype=wp.vec3, device="cpu")
P = wp.array(pts, dtype=wp.vec3, device="cpu")
T = wp.zeros(n, dtype=float, device="cpu")
TP = wp.zeros(len(pts), dtype=float, device="cpu")
print(f"faces {len(mesh.faces):,} rays {n:,} points {len(pts):,}", flush=True)

scene = o3d.t.geometry.RaycastingScene()
scene.add_triangles(
    o3d.core.Tensor(np.asarray(mesh.vertices, np.float32)), o3d.core.Tensor(np.asarray(mesh.faces, np.uint32))
)
rays = o3d.core.Tensor(np.concatenate([start, d], 1))
ref = scene.cast_rays(rays, nthreads=1)["t_hit"].numpy()


def med(f, k=3):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return float(np.median(ts))


meshes = {}
for c in configs:
    ctor, leaf = c.split(":")
    s = time.perf_counter()
    m = wp.Mesh(points=V, indices=F, bvh_constructor=ctor, bvh_leaf_size=int(leaf))
    meshes[c] = (m, time.perf_counter() - s)
# warm up compile
wp.launch(bare, dim=n, inputs=[meshes[configs[0]][0].id, O, D, T], device="cpu")
wp.launch(closest, dim=len(pts), inputs=[meshes[configs[0]][0].id, P, TP], device="cpu")
for rnd in range(2):
    t_o3d = med(lambda: scene.cast_rays(rays, nthreads=1))
    print(f"round {rnd}: open3d nthreads=1 {t_o3d * 1e3:.0f} ms ({n / t_o3d / 1e6:.2f} M rays/s)", flush=True)
    for c, (m, build) in meshes.items():
        tr = med(lambda: wp.launch(bare, dim=n, inputs=[m.id, O, D, T], device="cpu"))
        tc = med(lambda: wp.launch(closest, dim=len(pts), inputs=[m.id, P, TP], device="cpu"))
        t = T.numpy()
        agree = (np.isfinite(t) == np.isfinite(ref)).mean()
        print(
            f"  {c:9s} build {build * 1e3:7.0f} ms  rays {tr * 1e3:6.0f} ms ({n / tr / 1e6:.2f} M/s, {t_o3d / tr:.2f}x o3d)  closest {tc * 1e3:6.0f} ms  agree {agree * 100:.3f}%",
            flush=True,
        )
