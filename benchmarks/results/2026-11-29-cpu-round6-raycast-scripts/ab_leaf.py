# ruff: noqa: B023, UP018, RUF046  (timing scripts: lambdas run at once; Warp kernels: int(0) declares a dynamic variable)
"""Warp BVH leaf size on the CPU (SAH, Warp's CPU default constructor): build time, ray queries, closest-point
queries (points near the surface, as a planner's spheres; and far points), winding-number sign, AABB queries,
on icospheres of 1.3k / 20k / 327k faces and a torus; one thread, interleaved rounds, medians."""

import sys
import time

import numpy as np
import trimesh
import warp as wp

wp.config.quiet = True
wp.init()
leaves = [int(x) for x in sys.argv[1].split(",")] if len(sys.argv) > 1 else [4, 8]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5


@wp.kernel
def rays(mesh: wp.uint64, o: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_ray(mesh, o[i], d[i], 1.0e6)
    if q.result:
        t[i] = q.t


@wp.kernel
def closest(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, p[i], 1.0e6)
    if q.result:
        t[i] = float(q.face)


@wp.kernel
def winding(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_sign_winding_number(mesh, p[i], 1.0e6, 2.0, 0.5)
    if q.result:
        t[i] = q.sign


@wp.kernel
def aabb(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    i = wp.tid()
    r = wp.vec3(0.05, 0.05, 0.05)
    q = wp.mesh_query_aabb(mesh, p[i] - r, p[i] + r)
    f = int(0)
    c = int(0)
    while wp.mesh_query_aabb_next(q, f):
        c += 1
    t[i] = float(c)


shapes = {
    "ico 1.3k": trimesh.creation.icosphere(subdivisions=3, radius=0.5),
    "torus 1k": trimesh.creation.torus(
        major_radius=0.35, minor_radius=0.12, major_sections=32, minor_sections=16
    ),
    "ico 20k": trimesh.creation.icosphere(subdivisions=5, radius=0.5),
    "ico 327k": trimesh.creation.icosphere(subdivisions=7, radius=0.5),
}
rng = np.random.default_rng(0)
n = 50_000
start = rng.normal(size=(n, 3))
start = 2.0 * start / np.linalg.norm(start, axis=1, keepdims=True)
aim = rng.uniform(-0.5, 0.5, (n, 3))
d = aim - start
d /= np.linalg.norm(d, axis=1, keepdims=True)
near = rng.normal(size=(n, 3))
near = near / np.linalg.norm(near, axis=1, keepdims=True) * rng.uniform(0.4, 0.6, (n, 1))
far = rng.uniform(-1.5, 1.5, (n // 10, 3))


def A(x):
    return wp.array(np.asarray(x, np.float32), dtype=wp.vec3, device="cpu")


O, D, NEAR, FAR = A(start), A(d), A(near), A(far)
T = wp.zeros(n, dtype=float, device="cpu")


def med(f, k=3):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return float(np.median(ts))


tests = {
    "rays": (rays, O, D),
    "closest near": (closest, NEAR),
    "closest far": (closest, FAR),
    "winding near": (winding, NEAR),
    "aabb near": (aabb, NEAR),
}
first = True
for name, mesh in shapes.items():
    V = A(mesh.vertices)
    F = wp.array(np.asarray(mesh.faces, np.int32).reshape(-1), dtype=wp.int32, device="cpu")
    res = {leaf: {k: [] for k in ["build", *tests]} for leaf in leaves}
    for _r in range(rounds):
        for leaf in leaves:
            s = time.perf_counter()
            m = wp.Mesh(points=V, indices=F, bvh_leaf_size=leaf, support_winding_number=True)
            res[leaf]["build"].append(time.perf_counter() - s)
            s = time.perf_counter()
            m2 = wp.Mesh(points=V, indices=F, bvh_leaf_size=leaf)
            res[leaf].setdefault("build plain", []).append(time.perf_counter() - s)
            for k, (kern, *arrs) in tests.items():
                dim = arrs[0].shape[0]
                if first:
                    wp.launch(kern, dim=dim, inputs=[m.id, *arrs, T], device="cpu")
                res[leaf][k].append(
                    med(lambda: wp.launch(kern, dim=dim, inputs=[m.id, *arrs, T], device="cpu"), 1)
                )
            first = False
    print(f"{name} ({len(mesh.faces):,} faces), medians of {rounds} rounds, ms:")
    for leaf in leaves:
        print(
            f"  leaf {leaf:2d}: " + ", ".join(f"{k} {np.median(v) * 1e3:.2f}" for k, v in res[leaf].items()),
            flush=True,
        )
