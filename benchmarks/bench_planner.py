"""What a planner asks of a world: sphere_collision against sphere_mesh_cost, closest_point against Open3D.

    python benchmarks/bench_planner.py                  # CPU, 100k spheres / points
    python benchmarks/bench_planner.py --quick          # 10k, 3 runs
    python benchmarks/bench_planner.py --device cuda --count 1000000

* ``sphere_collision`` against ``sphere_mesh_cost(activation_distance=0) > 0`` (the glue it replaces) on the
  same spheres, in the four-obstacle scene of ``tests/test_sdf.py``: spheres of which most collide (centres
  on and inside the surfaces: surface samples moved inwards, radius 2-5 cm) and spheres of which none do
  (uniform in the scene box, those of cost 0 kept). Goals (issue 48): >= 1.5x faster when most collide
  (the search stops at the first penetrated entry, a grid cell decides without a BVH query), no slower
  when none do. It also checks the two answers agree.
* ``closest_point`` points/s against Open3D's ``RaycastingScene.compute_closest_points`` on the same mesh (an
  icosphere of 20k faces; points uniform in twice its box). Open3D's answer is unsigned (no side), so
  warpgeo is timed on the mesh as ``sign_method="unsigned"`` (the same work) and as a closed, signed mesh
  (its default: the side too). Goal: >= 1.0x Open3D's rate. Open3D runs on every core; so does warpgeo's
  CPU launch (``torch.get_num_threads()`` threads).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
import trimesh

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import add_size_arguments, fill_sizes, import_peer, print_header, report, timeit
from test_sdf import SCENE_POSES, scene_meshes

import warpgeo


def _colliding(world, meshes, count, rng, device):
    """Spheres on and just inside the posed surfaces (most collide)."""
    per = count // len(meshes) + 1
    centres = []
    for mesh, pose in zip(meshes, SCENE_POSES, strict=True):
        points, faces = trimesh.sample.sample_surface(mesh, per, seed=int(rng.integers(1 << 30)))
        inward = -mesh.face_normals[faces] * rng.uniform(0.0, 0.03, (per, 1))
        local = points + inward
        mat = trimesh.transformations.quaternion_matrix(pose[3:])
        mat[:3, 3] = pose[:3]
        centres.append(trimesh.transform_points(local, mat))
    centres = np.concatenate(centres)[:count]
    rng.shuffle(centres)
    radii = rng.uniform(0.02, 0.05, (count, 1))
    return torch.tensor(np.concatenate([centres, radii], -1), dtype=torch.float32, device=device)


def _free(world, count, rng, device):
    """Spheres in the scene box, of cost 0 (none collides)."""
    kept = []
    total = 0
    while total < count:
        s = np.concatenate(
            [
                rng.uniform([-0.7, -0.7, -0.2], [0.7, 0.7, 0.7], (count, 3)),
                rng.uniform(0.01, 0.03, (count, 1)),
            ],
            -1,
        )
        t = torch.tensor(s, dtype=torch.float32, device=device)
        free = t[warpgeo.sphere_mesh_cost(t, world) == 0]
        kept.append(free)
        total += len(free)
    return torch.cat(kept)[:count]


def _collision(args, device) -> None:
    meshes = scene_meshes()
    world = warpgeo.MeshWorld(meshes, poses=SCENE_POSES, device=device)
    world.wait_tables()
    rng = np.random.default_rng(0)
    for label, spheres in (
        ("most collide", _colliding(world, meshes, args.count, rng, device)),
        ("none collide", _free(world, args.count, rng, device)),
    ):
        with warpgeo.value_checks(False):
            hit = warpgeo.sphere_collision(spheres, world)
            glue = warpgeo.sphere_mesh_cost(spheres, world) > 0
            assert torch.equal(hit, glue), "sphere_collision and the cost disagree"
            t_hit = timeit(lambda s=spheres: warpgeo.sphere_collision(s, world), device, repeat=args.repeat)
            t_cost = timeit(
                lambda s=spheres: warpgeo.sphere_mesh_cost(s, world) > 0, device, repeat=args.repeat
            )
        report(
            f"{len(spheres)} spheres, {label} ({hit.float().mean().item():.0%} collide), 4 posed meshes",
            [("sphere_collision", t_hit), ("sphere_mesh_cost(eta=0) > 0", t_cost)],
            "sphere_collision",
        )
        print(f"  speed-up of sphere_collision: {t_cost / t_hit:.2f}x")


def _closest(args, device) -> None:
    o3d = import_peer("open3d", "open3d", " (on the CPU)")
    mesh = trimesh.creation.icosphere(subdivisions=5, radius=0.3)  # 20,480 faces
    rng = np.random.default_rng(1)
    points = rng.uniform(-0.6, 0.6, (args.count, 3)).astype(np.float32)
    query = torch.tensor(points, device=device)
    rows = []
    results = {}
    for method in ("unsigned", "ray"):
        world = warpgeo.MeshWorld([mesh], device=device, sign_method=method)
        world.wait_tables()
        with warpgeo.value_checks(False):
            results[method] = warpgeo.closest_point(query, world)
            t = timeit(lambda w=world: warpgeo.closest_point(query, w), device, repeat=args.repeat)
        rows.append((f"warpgeo closest_point ({method})", t))
    if o3d is not None:
        scene = o3d.t.geometry.RaycastingScene()
        scene.add_triangles(
            o3d.core.Tensor(np.asarray(mesh.vertices, dtype=np.float32)),
            o3d.core.Tensor(np.asarray(mesh.faces, dtype=np.uint32)),
        )
        o3d_query = o3d.core.Tensor(points)
        answer = scene.compute_closest_points(o3d_query)["points"].numpy()

        def run_o3d():
            scene.compute_closest_points(o3d.core.Tensor(points))

        rows.append(("open3d compute_closest_points", timeit(run_o3d, "cpu", repeat=args.repeat)))
        gap = np.linalg.norm(results["ray"].point.cpu().numpy() - answer, axis=-1)
        print(f"  vs open3d: max |closest point difference| {gap.max():.2e}")
    report(f"closest points of {args.count} points, icosphere of {len(mesh.faces)} faces", rows, rows[0][0])
    if o3d is not None:
        o3d_time = rows[-1][1]
        for name, t in rows[:-1]:
            print(f"  {name}: {o3d_time / t:.2f}x open3d's rate")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument("--count", type=int, default=None, help="spheres / points (default 100k; 10k quick)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs (default 7; 3 with --quick)")
    args = parser.parse_args(argv)
    fill_sizes(args, count=(100_000, 10_000), repeat=(7, 3))
    device = torch.device(args.device)
    print_header(device)
    print(f"trimesh {trimesh.__version__}")
    _collision(args, device)
    _closest(args, device)


if __name__ == "__main__":
    main()
