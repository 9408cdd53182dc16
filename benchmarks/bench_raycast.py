"""Ray casting: warpgeo.raycast against Open3D's RaycastingScene.cast_rays (Embree) on the same meshes.

    python benchmarks/bench_raycast.py                  # 1.3M-face icosphere x 1M rays; 256 envs x 10 objects
    python benchmarks/bench_raycast.py --quick          # 82k faces x 100k rays; 32 envs
    python benchmarks/bench_raycast.py --device cuda --envs 1024

Two scenes, rays per second of each (median of ``--repeat`` calls after a warm-up call; the world / the
scenes built beforehand, their build times printed apart):

* one mesh: an icosphere of radius 0.5 (``--subdivisions``, 8: 1.3M faces) and ``--rays`` rays from points on
  a sphere of radius 2 aimed at random points of its box (most hit, some graze, some miss);
* environments: ``--envs`` environments of 10 distinct objects each (icospheres, cylinders, capsules, tori,
  boxes and cones as triangle meshes of ~100-1,300 faces, each scaled per axis per environment, posed at random
  in a unit cube), a 64 x 64 pinhole camera per environment (``camera_rays``): warpgeo casts every
  environment's image in one call (``env_index``), Open3D one ``cast_rays`` per environment's scene (one scene
  per environment: Open3D has no environments).

The hits are compared (the share of rays both hit, the largest difference of their distances) so that the
two libraries are seen to answer the same question. Warp's kernels are compiled beforehand (a small call).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
import trimesh

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    add_size_arguments,
    device_time,
    fill_sizes,
    import_peer,
    print_header,
    report,
    timeit,
    write_figures,
)

import warpgeo
from warpgeo.raycasting import camera_rays, raycast, render_depth


def _one_mesh_rays(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    start = rng.normal(size=(count, 3))
    start = 2.0 * start / np.linalg.norm(start, axis=1, keepdims=True)
    aim = rng.uniform(-0.5, 0.5, (count, 3))
    direction = aim - start
    return start.astype(np.float32), (direction / np.linalg.norm(direction, axis=1, keepdims=True)).astype(
        np.float32
    )


def _objects(rng: np.random.Generator) -> list[trimesh.Trimesh]:
    """10 distinct meshes, scaled per axis, posed in a unit cube (vertices in the world frame)."""
    makers = [
        lambda: trimesh.creation.icosphere(subdivisions=3),
        lambda: trimesh.creation.icosphere(subdivisions=2),
        lambda: trimesh.creation.cylinder(radius=1.0, height=2.0, sections=48),
        lambda: trimesh.creation.capsule(radius=0.5, height=1.0, count=[24, 24]),
        lambda: trimesh.creation.torus(
            major_radius=1.0, minor_radius=0.3, major_sections=32, minor_sections=16
        ),
        lambda: trimesh.creation.box((1.0, 1.0, 1.0)),
        lambda: trimesh.creation.cone(radius=1.0, height=2.0, sections=48),
        lambda: trimesh.creation.box((2.0, 0.5, 1.0)),
        lambda: trimesh.creation.cylinder(radius=0.5, height=2.0, sections=24),
        lambda: trimesh.creation.icosphere(subdivisions=1),
    ]
    meshes = []
    for make in makers:
        mesh = make()
        mesh.apply_scale(rng.uniform(0.05, 0.15, 3))
        mesh.apply_transform(trimesh.transformations.random_rotation_matrix(rng.random(3)))
        mesh.apply_translation(rng.uniform(-0.5, 0.5, 3))
        meshes.append(mesh)
    return meshes


def _open3d_scene(o3d, meshes) -> object:
    scene = o3d.t.geometry.RaycastingScene()
    for mesh in meshes:
        scene.add_triangles(
            o3d.core.Tensor(np.asarray(mesh.vertices, dtype=np.float32)),
            o3d.core.Tensor(np.asarray(mesh.faces, dtype=np.uint32)),
        )
    return scene


def _compare(name: str, ours: torch.Tensor, theirs: np.ndarray) -> None:
    t = ours.detach().cpu().double().numpy().reshape(-1)
    o = theirs.reshape(-1).astype(np.float64)
    both = np.isfinite(t) & np.isfinite(o)
    agree = (np.isfinite(t) == np.isfinite(o)).mean()
    worst = np.abs(t[both] - o[both]).max() if both.any() else 0.0
    print(f"  {name}: hit/miss agree on {agree * 100:.3f} % of rays; max |distance difference| {worst:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument(
        "--subdivisions", type=int, default=None, help="icosphere subdivisions (8: 1.3M faces)"
    )
    parser.add_argument("--rays", type=int, default=None, help="rays against the one mesh")
    parser.add_argument("--envs", type=int, default=None, help="environments of 10 objects")
    parser.add_argument("--size", type=int, default=64, help="camera image side in pixels")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--json", default=None, help="write the figures to this JSON file")
    args = parser.parse_args()
    if args.envs is None and torch.device(args.device).type == "cuda" and not args.quick:
        args.envs = 1024  # the GPU target: 1,024 environments x a 64 x 64 depth image
    fill_sizes(args, subdivisions=(8, 6), rays=(1_000_000, 100_000), envs=(256, 32), repeat=(5, 3))
    device = torch.device(args.device)
    print_header(device)
    o3d = import_peer("open3d", "open3d")
    figures: dict[str, float | None] = {}
    rng = np.random.default_rng(0)

    # warm-up: compile the kernels (Warp's cache) on a small world of meshes
    small = warpgeo.MeshWorld([trimesh.creation.icosphere(subdivisions=1)], device=device)
    raycast(small, torch.zeros(1, 3, device=device) - 2, torch.ones(1, 3, device=device))

    # ---- one large mesh
    mesh = trimesh.creation.icosphere(subdivisions=args.subdivisions, radius=0.5)
    faces = len(mesh.faces)
    start = time.perf_counter()
    world = warpgeo.MeshWorld([(np.asarray(mesh.vertices), np.asarray(mesh.faces))], device=device)
    world.wait_tables()  # nothing may build on background threads while timing
    build = time.perf_counter() - start
    o_np, d_np = _one_mesh_rays(args.rays, rng)
    o = torch.from_numpy(o_np).to(device)
    d = torch.from_numpy(d_np).to(device)
    hits = raycast(world, o, d)
    rows = [("warpgeo raycast", timeit(lambda: raycast(world, o, d), device, repeat=args.repeat))]
    print(f"\none mesh: {faces:,} faces, {args.rays:,} rays; warpgeo world build {build:.2f} s")
    if o3d is not None:
        start = time.perf_counter()
        scene = _open3d_scene(o3d, [mesh])
        rays = o3d.core.Tensor(np.concatenate([o_np, d_np], axis=1))
        first = scene.cast_rays(rays)  # Open3D builds its BVH on the first query: part of its build
        o3d_build = time.perf_counter() - start
        print(f"  open3d scene build + first cast {o3d_build:.2f} s")
        rows.append(("open3d cast_rays", timeit(lambda: scene.cast_rays(rays), "cpu", repeat=args.repeat)))
        _compare("one mesh", hits.distance, first["t_hit"].numpy())
    report(f"one mesh ({faces:,} faces, {args.rays:,} rays)", rows, "warpgeo raycast")
    figures[f"raycast_one_mesh_f{faces}_r{args.rays}_ms"] = rows[0][1] * 1e3
    for name, seconds in rows:
        print(f"  {name}: {args.rays / seconds / 1e6:.2f} M rays/s")
    del world

    # ---- environments of distinct objects, a camera each
    envs = [_objects(rng) for _ in range(args.envs)]
    start = time.perf_counter()
    world = warpgeo.MeshWorld.from_envs([[(m.vertices, m.faces) for m in env] for env in envs], device=device)
    world.wait_tables()
    build = time.perf_counter() - start
    side = args.size
    k = torch.tensor([side * 0.9, side * 0.9, (side - 1) / 2, (side - 1) / 2])
    pose = torch.tensor([0.0, -2.0, 0.0, 0.70710678, -0.70710678, 0.0, 0.0])  # at -y, looking along +y
    origins, directions = camera_rays(k, side, side, pose.expand(args.envs, 7).contiguous())
    origins, directions = origins.contiguous().to(device), directions.contiguous().to(device)
    env_index = torch.arange(args.envs, device=device)
    hits = raycast(world, origins, directions, env_index=env_index)
    n_rays = args.envs * side * side
    timed = [
        (
            "warpgeo raycast",
            timeit(
                lambda: raycast(world, origins, directions, env_index=env_index), device, repeat=args.repeat
            ),
        )
    ]
    faces = sum(len(m.faces) for env in envs for m in env)
    print(f"\nenvironments: {args.envs} x 10 objects ({faces:,} faces), {side}x{side} camera each")
    print(f"  warpgeo world build {build:.2f} s")
    if o3d is not None:
        start = time.perf_counter()
        scenes = [_open3d_scene(o3d, env) for env in envs]
        o_cpu = origins.cpu().numpy().reshape(args.envs, -1, 3)
        d_cpu = directions.cpu().numpy().reshape(args.envs, -1, 3)
        per_env = [o3d.core.Tensor(np.concatenate([a, b], axis=1)) for a, b in zip(o_cpu, d_cpu, strict=True)]
        firsts = [s.cast_rays(r)["t_hit"].numpy() for s, r in zip(scenes, per_env, strict=True)]
        print(f"  open3d {args.envs} scenes build + first casts {time.perf_counter() - start:.2f} s")

        def cast_all():
            for s, r in zip(scenes, per_env, strict=True):
                s.cast_rays(r)

        timed.append(("open3d cast_rays, scene per env", timeit(cast_all, "cpu", repeat=args.repeat)))
        _compare("environments", hits.distance, np.stack(firsts))
    report(f"environments ({n_rays:,} rays)", timed, "warpgeo raycast")
    for name, seconds in timed:
        print(f"  {name}: {n_rays / seconds / 1e6:.2f} M rays/s")
    figures[f"raycast_envs{args.envs}_{side}x{side}_ms"] = timed[0][1] * 1e3
    if device.type == "cuda":  # the stream's time (CUDA events) of one call, and of render_depth
        cast = device_time(
            lambda: raycast(world, origins, directions, env_index=env_index), device, repeat=20
        )
        poses = pose.expand(args.envs, 7).contiguous().to(device)
        depth = device_time(
            lambda: render_depth(world, k.to(device), side, side, poses, env_index=env_index),
            device,
            repeat=20,
        )
        print(
            f"  CUDA events: raycast {cast * 1e3:.3f} ms, render_depth {depth * 1e3:.3f} ms "
            f"({args.envs} environments x {side}x{side}; target <= 2 ms at 1,024)"
        )
        figures[f"raycast_envs{args.envs}_{side}x{side}_cuda_ms"] = cast * 1e3
        figures[f"render_depth_envs{args.envs}_{side}x{side}_cuda_ms"] = depth * 1e3
    write_figures(args.json, figures)


if __name__ == "__main__":
    main()
