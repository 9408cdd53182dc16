# ruff: noqa: B023  (timing scripts: lambdas run at once, in their loop)
"""Ray order: bare mesh_query_ray kernel, one thread, random order vs rays sorted by a Morton key."""

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


@wp.kernel
def bare(mesh: wp.uint64, o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_ray(mesh, o[i], d[i], 1.0e6)
    if q.result:
        t[i] = q.t
    else:
        t[i] = wp.inf


def morton(p, bits=10):
    lo, hi = p.min(0), p.max(0)
    q = ((p - lo) / np.maximum(hi - lo, 1e-30) * ((1 << bits) - 1)).astype(np.uint64)
    key = np.zeros(len(p), np.uint64)
    for b in range(bits):
        for a in range(3):
            key |= ((q[:, a] >> np.uint64(b)) & np.uint64(1)) << np.uint64(3 * b + a)
    return key


mesh = trimesh.creation.icosphere(subdivisions=sub, radius=0.5)
rng = np.random.default_rng(0)
start = rng.normal(size=(n, 3))
start = 2.0 * start / np.linalg.norm(start, axis=1, keepdims=True)
aim = rng.uniform(-0.5, 0.5, (n, 3))
d = aim - start
d /= np.linalg.norm(d, axis=1, keepdims=True)
start = start.astype(np.float32)
d = d.astype(np.float32)
# entry into the box [-0.5, 0.5]^3
inv = 1.0 / d
t1 = (-0.5 - start) * inv
t2 = (0.5 - start) * inv
tin = np.maximum(np.minimum(t1, t2).max(1), 0)
entry = start + d * tin[:, None]
orders = {
    "random": np.arange(n),
    "by origin": np.argsort(morton(start)),
    "by box entry": np.argsort(morton(entry)),
    "by entry+dir": np.lexsort((morton(d, 3), morton(entry))),
}
V = wp.array(np.asarray(mesh.vertices, np.float32), dtype=wp.vec3, device="cpu")
F = wp.array(np.asarray(mesh.faces, np.int32).reshape(-1), dtype=wp.int32, device="cpu")
m = wp.Mesh(points=V, indices=F)
T = wp.zeros(n, dtype=float, device="cpu")
scene = o3d.t.geometry.RaycastingScene()
scene.add_triangles(
    o3d.core.Tensor(np.asarray(mesh.vertices, np.float32)), o3d.core.Tensor(np.asarray(mesh.faces, np.uint32))
)
arrs = {}
for k, idx in orders.items():
    arrs[k] = (
        wp.array(start[idx], dtype=wp.vec3, device="cpu"),
        wp.array(d[idx], dtype=wp.vec3, device="cpu"),
        o3d.core.Tensor(np.concatenate([start[idx], d[idx]], 1)),
    )
    scene.cast_rays(arrs[k][2], nthreads=1)
wp.launch(bare, dim=n, inputs=[m.id, arrs["random"][0], arrs["random"][1], T], device="cpu")


def med(f, k=3):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return float(np.median(ts))


s = time.perf_counter()
np.argsort(morton(entry))
print(f"faces {len(mesh.faces):,}, rays {n:,}; numpy key+argsort {1e3 * (time.perf_counter() - s):.0f} ms")
for _rnd in range(2):
    for k, (O, D, R) in arrs.items():
        tw = med(lambda: wp.launch(bare, dim=n, inputs=[m.id, O, D, T], device="cpu"))
        to = med(lambda: scene.cast_rays(R, nthreads=1))
        print(
            f"  {k:13s} warp bare {tw * 1e3:6.0f} ms   open3d(1 thread) {to * 1e3:5.0f} ms   ratio {to / tw:.2f}",
            flush=True,
        )
