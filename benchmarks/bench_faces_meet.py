"""The closed-mesh check (``_meshes.faces_meet``), the old way (every face's box against its mesh's BVH)
against the fan way (groups around hubs, pieces' boxes; issue 37), in the same run, process CPU time.

    python benchmarks/bench_faces_meet.py [--repeat 3] [--envs 256] [--no-icosphere]

Meshes: a 2,000-section cone, cylinder and annulus (trimesh), a 1.3M-face icosphere (subdivisions 8: no hub,
the old way either way; it must not get slower), and every closed mesh of ``bench_world.py``'s 256
environments (``rl_scenes``), all in one call as a world builds them. Old and new alternate; medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from types import SimpleNamespace

import numpy as np
import torch
import trimesh

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from warpgeo import _warp
from warpgeo._world import meshes as _meshes


def spec(vertices, faces) -> SimpleNamespace:
    wp = _warp.warp()
    v = np.ascontiguousarray(vertices, dtype=np.float32)
    f = np.ascontiguousarray(faces, dtype=np.int32)
    mesh = wp.Mesh(points=wp.array(v, dtype=wp.vec3), indices=wp.array(f.reshape(-1), dtype=wp.int32))
    return SimpleNamespace(mesh=mesh, vertices=v, faces=f)


def timed(specs, split: bool) -> tuple[float, list[bool]]:
    start = time.process_time()
    out = _meshes.faces_meet(specs, torch.device("cpu"), split_fans=split)
    return time.process_time() - start, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--no-icosphere", action="store_true")
    args = parser.parse_args()
    cases = {
        "cone, 2,000 sections": [trimesh.creation.cone(1.0, 2.0, sections=2000)],
        "cylinder, 2,000 sections": [trimesh.creation.cylinder(1.0, 2.0, sections=2000)],
        "annulus, 2,000 sections": [trimesh.creation.annulus(0.5, 1.0, 1.0, sections=2000)],
    }
    if not args.no_icosphere:
        cases["icosphere, 1.3M faces"] = [trimesh.creation.icosphere(subdivisions=8)]
    if args.envs:
        from bench_world import rl_scenes

        meshes, _, _ = rl_scenes(args.envs)
        cases[f"rl_scenes({args.envs}): {10 * args.envs} meshes"] = [m for env in meshes for m in env]
    warm = [spec(*(lambda m: (m.vertices, m.faces))(trimesh.creation.cone(1.0, 2.0, sections=300)))]
    timed(warm, False), timed(warm, True)  # compile (untimed)
    print(f"{'meshes':40s} {'faces':>10s} {'old s':>8s} {'new s':>8s} {'old/new':>8s}  answers")
    for name, meshes in cases.items():
        specs = [spec(m.vertices, m.faces) for m in meshes]
        faces = sum(len(s.faces) for s in specs)
        old, new = [], []
        for _ in range(args.repeat):
            t, a_old = timed(specs, False)
            old.append(t)
            t, a_new = timed(specs, True)
            new.append(t)
        same = "equal" if a_old == a_new else "DIFFER"
        o, n = statistics.median(old), statistics.median(new)
        print(f"{name:40s} {faces:10,d} {o:8.3f} {n:8.3f} {o / n:8.2f}  {same} ({sum(a_new)} meet)")


if __name__ == "__main__":
    main()
