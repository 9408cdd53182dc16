# ruff: noqa: B023  (timing scripts: lambdas run at once, in their loop)
"""A/B: Warp module options (optimization_level, fast_math) for a bare mesh_query_ray kernel, one thread."""

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


def make(opts):
    @wp.kernel(module_options=opts, module="unique")
    def bare(
        mesh: wp.uint64, o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)
    ):
        i = wp.tid()
        q = wp.mesh_query_ray(mesh, o[i], d[i], 1.0e6)
        if q.result:
            t[i] = q.t
        else:
            t[i] = wp.inf

    return bare


variants = {
    "O2": make({"enable_backward": False}),
    "O3": make({"enable_backward": False, "optimization_level": 3}),
    "O3+fast_math": make({"enable_backward": False, "optimization_level": 3, "fast_math": True}),
}
mesh = trimesh.creation.icosphere(subdivisions=sub, radius=0.5)
rng = np.random.default_rng(0)
start = rng.normal(size=(n, 3))
start = 2.0 * start / np.linalg.norm(start, axis=1, keepdims=True)
aim = rng.uniform(-0.5, 0.5, (n, 3))
d = aim - start
d /= np.linalg.norm(d, axis=1, keepdims=True)
start = start.astype(np.float32)
d = d.astype(np.float32)
V = wp.array(np.asarray(mesh.vertices, np.float32), dtype=wp.vec3, device="cpu")
F = wp.array(np.asarray(mesh.faces, np.int32).reshape(-1), dtype=wp.int32, device="cpu")
O = wp.array(start, dtype=wp.vec3, device="cpu")
D = wp.array(d, dtype=wp.vec3, device="cpu")
T = wp.zeros(n, dtype=float, device="cpu")
m = wp.Mesh(points=V, indices=F)
scene = o3d.t.geometry.RaycastingScene()
scene.add_triangles(
    o3d.core.Tensor(np.asarray(mesh.vertices, np.float32)), o3d.core.Tensor(np.asarray(mesh.faces, np.uint32))
)
rays = o3d.core.Tensor(np.concatenate([start, d], 1))
scene.cast_rays(rays, nthreads=1)
for k in variants.values():
    wp.launch(k, dim=n, inputs=[m.id, O, D, T], device="cpu")


def med(f, k=3):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return float(np.median(ts))


for rnd in range(2):
    t_o3d = med(lambda: scene.cast_rays(rays, nthreads=1))
    print(f"round {rnd}: open3d nthreads=1 {t_o3d * 1e3:.0f} ms", flush=True)
    for name, k in variants.items():
        tr = med(lambda: wp.launch(k, dim=n, inputs=[m.id, O, D, T], device="cpu"))
        print(f"  {name:13s} {tr * 1e3:6.0f} ms ({t_o3d / tr:.2f}x o3d)", flush=True)
