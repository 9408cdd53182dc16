"""raycast vs a bare mesh_query_ray kernel on the same rays, same thread count (bare split by hand)."""

import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import itertools

import numpy as np
import torch
import trimesh
import warp as wp
from bench_raycast import _one_mesh_rays

import warpgeo
from warpgeo import checks
from warpgeo.raycasting import raycast

threads = int(sys.argv[1])
sub = int(sys.argv[2])
n = int(sys.argv[3])
torch.set_num_threads(threads)


@wp.kernel
def bare(
    mesh: wp.uint64,
    o: wp.array(dtype=wp.vec3),
    d: wp.array(dtype=wp.vec3),
    t: wp.array(dtype=float),
    start: int,
):
    i = wp.tid() + start
    q = wp.mesh_query_ray(mesh, o[i], d[i], 1.0e6)
    if q.result:
        t[i] = q.t
    else:
        t[i] = wp.inf


mesh = trimesh.creation.icosphere(subdivisions=sub, radius=0.5)
world = warpgeo.MeshWorld([(np.asarray(mesh.vertices), np.asarray(mesh.faces))])
world.wait_tables()
rng = np.random.default_rng(0)
o_np, d_np = _one_mesh_rays(n, rng)
o, d = torch.from_numpy(o_np), torch.from_numpy(d_np)
V = wp.array(np.asarray(mesh.vertices, np.float32), dtype=wp.vec3, device="cpu")
F = wp.array(np.asarray(mesh.faces, np.int32).reshape(-1), dtype=wp.int32, device="cpu")
m = wp.Mesh(points=V, indices=F)
O = wp.array(o_np, dtype=wp.vec3, device="cpu")
D = wp.array(d_np, dtype=wp.vec3, device="cpu")
T = wp.zeros(n, dtype=float, device="cpu")
wp.launch(bare, dim=n, inputs=[m.id, O, D, T, 0], device="cpu")


def run_bare():
    if threads == 1:
        wp.launch(bare, dim=n, inputs=[m.id, O, D, T, 0], device="cpu")
        return
    parts = 16
    b = [n * p // parts for p in range(parts + 1)]
    it = iter(itertools.pairwise(b))
    lock = threading.Lock()

    def w():
        while True:
            with lock:
                s = next(it, None)
            if s is None:
                return
            wp.launch(bare, dim=s[1] - s[0], inputs=[m.id, O, D, T, s[0]], device="cpu")

    ts = [threading.Thread(target=w) for _ in range(threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]


raycast(world, o, d)


def med(f, k=3):
    ts = []
    for _ in range(k):
        s = time.perf_counter()
        f()
        ts.append(time.perf_counter() - s)
    return float(np.median(ts))


print(f"faces {len(mesh.faces):,} rays {n:,} threads {threads}")
for _r in range(2):
    a = med(run_bare)
    b = med(lambda: raycast(world, o, d))
    with checks.value_checks(False):
        c = med(lambda: raycast(world, o, d))
    print(
        f"  bare {a * 1e3:.0f} ms  raycast {b * 1e3:.0f} ms  raycast checks off {c * 1e3:.0f} ms  (load {os.getloadavg()[0]:.2f})",
        flush=True,
    )
