# ruff: noqa: B007, B023  (timing scripts: lambdas run at once, in their loop)
"""Mesh memory order: Warp BVH ray queries (one thread) on the icosphere as trimesh orders it vs its faces
sorted by the Morton code of their centroids (vertices renumbered in first-use order); shuffled faces too."""

import sys
import time

import numpy as np
import trimesh
import warp as wp

wp.config.quiet = True
wp.init()
sub = int(sys.argv[1])
n = int(sys.argv[2])


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


def renumber(v, f):
    order, first = np.unique(f.reshape(-1), return_index=True)
    seq = order[np.argsort(first)]
    new = np.empty(len(v), np.int64)
    new[seq] = np.arange(len(seq))
    return v[seq], new[f]


mesh = trimesh.creation.icosphere(subdivisions=sub, radius=0.5)
v = np.asarray(mesh.vertices, np.float32)
f = np.asarray(mesh.faces, np.int64)
rng = np.random.default_rng(0)
variants = {"trimesh order": (v, f)}
variants["morton faces"] = renumber(v, f[np.argsort(morton(v[f].mean(1)))])
variants["shuffled"] = renumber(v, f[rng.permutation(len(f))])
start = rng.normal(size=(n, 3))
start = 2.0 * start / np.linalg.norm(start, axis=1, keepdims=True)
aim = rng.uniform(-0.5, 0.5, (n, 3))
d = aim - start
d /= np.linalg.norm(d, axis=1, keepdims=True)
O = wp.array(start.astype(np.float32), dtype=wp.vec3, device="cpu")
D = wp.array(d.astype(np.float32), dtype=wp.vec3, device="cpu")
T = wp.zeros(n, dtype=float, device="cpu")
meshes = {}
for k, (vv, ff) in variants.items():
    V = wp.array(vv, dtype=wp.vec3, device="cpu")
    F = wp.array(ff.astype(np.int32).reshape(-1), dtype=wp.int32, device="cpu")
    s = time.perf_counter()
    m = wp.Mesh(points=V, indices=F)
    meshes[k] = (m, V, F, time.perf_counter() - s)
wp.launch(bare, dim=n, inputs=[meshes["trimesh order"][0].id, O, D, T], device="cpu")


def med(f, k=3):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return float(np.median(ts))


print(f"faces {len(f):,} rays {n:,}")
for _r in range(2):
    for k, (m, V, F, b) in meshes.items():
        t = med(lambda: wp.launch(bare, dim=n, inputs=[m.id, O, D, T], device="cpu"))
        print(f"  {k:14s} build {b * 1e3:5.0f} ms rays {t * 1e3:5.0f} ms", flush=True)
