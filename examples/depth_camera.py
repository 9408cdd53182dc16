"""Example: depth images and lidar scans of a world with a moving obstacle, three environments side by side.

A table-top scene given as a cuRobo world configuration (cuboids, a cylinder, a capsule and a mesh: the torus
of ``examples/data/torus.obj``), loaded with ``warpgeo.compat.curobo.load_world``, is copied into three
environments of one ``MeshWorld``; in each the capsule obstacle stands at another place along its path
across the table (time steps 0, 1, 2 side by side). Then, in one call each for all three environments:

* ``render_depth``: a pinhole depth camera (OpenCV convention) looking at the table, z-depth in metres,
  0 where a pixel sees nothing;
* ``raycast`` of a ``lidar_rays`` pattern (a 16-channel spinning lidar beside the table, the star): the hit points,
  drawn from above and coloured by height, and which entry each beam hit (``world.names``).

It prints what each environment's camera and lidar saw and writes one picture (needs matplotlib, the
``demo`` extra).

    python3 examples/depth_camera.py                   # ~10 s on 2 CPU cores; writes depth_camera.png
    python3 examples/depth_camera.py --device cuda --width 640 --height 480 --out depth.png
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import torch
import trimesh

import warpgeo
from warpgeo import demos
from warpgeo.compat.curobo import load_world
from warpgeo.raycasting import lidar_rays, raycast, render_depth

TORUS = Path(__file__).resolve().parent / "data" / "torus.obj"
#: where the capsule obstacle stands in environments 0, 1, 2 (it moves along y across the table)
OBSTACLE_Y = (-0.45, 0.0, 0.45)


def scene_config() -> dict:
    """A cuRobo world configuration: a floor, a table, things on it, and the obstacle (at y = 0)."""
    scale = 0.12 / max(trimesh.load(TORUS, force="mesh").extents)  # the torus ~12 cm across
    return {
        "cuboid": {
            "floor": {"dims": [6.0, 6.0, 0.02], "pose": [0, 0, -0.01, 1, 0, 0, 0]},
            "table": {"dims": [1.0, 1.4, 0.05], "pose": [0, 0, 0.725, 1, 0, 0, 0]},
            "crate": {"dims": [0.25, 0.2, 0.2], "pose": [-0.2, 0.35, 0.85, 0.966, 0, 0, 0.259]},
        },
        "cylinder": {"can": {"radius": 0.05, "height": 0.2, "pose": [0.15, -0.3, 0.85, 1, 0, 0, 0]}},
        "capsule": {
            "obstacle": {
                "radius": 0.07,
                "base": [0, 0, -0.15],
                "tip": [0, 0, 0.15],
                "pose": [0.1, 0, 0.97, 1, 0, 0, 0],
            }
        },
        "mesh": {
            "torus": {
                "file_path": str(TORUS),
                "scale": scale,
                "pose": [-0.15, -0.1, 0.77, 0.924, 0.383, 0, 0],
            }
        },
    }


def look_at(eye, target) -> list[float]:
    """A world-from-camera pose [x, y, z, qw, qx, qy, qz] at ``eye`` whose +z looks at ``target``, +y down."""
    z = np.asarray(target, float) - np.asarray(eye, float)
    z /= np.linalg.norm(z)
    x = np.cross(z, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    r = np.stack([x, y, z], axis=1)
    w = math.sqrt(max(1.0 + np.trace(r), 1e-12)) / 2
    q = [w, (r[2, 1] - r[1, 2]) / (4 * w), (r[0, 2] - r[2, 0]) / (4 * w), (r[1, 0] - r[0, 1]) / (4 * w)]
    return [*map(float, eye), *q]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device"
    )
    parser.add_argument("--width", type=int, default=160, help="depth image width in pixels (default: 160)")
    parser.add_argument("--height", type=int, default=120, help="depth image height in pixels (default: 120)")
    parser.add_argument("--channels", type=int, default=16, help="lidar channels (default: 16)")
    parser.add_argument("--samples", type=int, default=720, help="lidar azimuth samples (default: 720)")
    parser.add_argument("--quick", action="store_true", help="smaller images and scans (for tests)")
    parser.add_argument(
        "--out",
        default="depth_camera.png",
        help="output picture (default: depth_camera.png, in the current folder)",
    )
    args = parser.parse_args(argv)
    if args.quick:  # smaller sizes; flags given explicitly still win
        parser.set_defaults(width=64, height=48, samples=180)
        args = parser.parse_args(argv)
    device = demos.require_device(args.device, "depth_camera.py")
    demos.require_matplotlib("depth_camera.py")
    start = time.perf_counter()

    # one environment from the cuRobo configuration, copied three times with the obstacle moved
    scene = load_world(scene_config())
    names = scene.names[0]
    poses = scene.poses[0].clone()
    k = names.index("obstacle")
    env_poses = []
    for y in OBSTACLE_Y:
        p = poses.clone()
        p[k, 1] = y
        env_poses.append(p)
    entries = _entries(scene_config(), names)
    world = warpgeo.MeshWorld.from_envs([entries] * 3, poses=torch.stack(env_poses).numpy(), device=device)
    envs = torch.arange(3, device=device)
    print(f"Casting rays in {world.num_envs} environments of {len(names)} entries ({', '.join(names)})")

    # the depth camera: one per environment, same pose (B = 3, env_index = 0, 1, 2)
    w, h = args.width, args.height
    focal = 0.9 * w
    intrinsics = torch.tensor([focal, focal, (w - 1) / 2, (h - 1) / 2], device=device)
    camera = torch.tensor(look_at([1.5, 0.0, 1.45], [0.0, 0.0, 0.8]), device=device).expand(3, 7)
    depth = render_depth(world, intrinsics, w, h, camera, env_index=envs)  # (3, H, W)

    # the lidar: 16 channels from 35 degrees down to 5 up, a full turn, beside the table (its rays in the world frame)
    lidar_pose = torch.tensor([-0.9, -0.9, 1.1, 1, 0, 0, 0], device=device).expand(3, 7)
    origins, directions = lidar_rays(
        args.channels, args.samples, vertical_fov=(-35.0, 5.0), pose=lidar_pose, device=device
    )
    scan = raycast(world, origins, directions, max_distance=6.0, env_index=envs)  # (3, C, N)

    for e, y in enumerate(OBSTACLE_Y):
        seen = depth[e][depth[e] > 0]
        hit = scan.entry[e][scan.entry[e] >= 0]
        counts = torch.bincount(hit, minlength=len(names)).tolist()
        print(
            f"env {e} (obstacle at y = {y:+.2f}): camera sees {seen.numel()}/{w * h} pixels, depth "
            f"{seen.min():.2f}-{seen.max():.2f} m; lidar returns {hit.numel()}/{scan.entry[e].numel()}, "
            f"obstacle {counts[k]}"
        )
    _plot(depth.cpu(), scan, names, args.out)
    print(f"wrote {args.out} ({time.perf_counter() - start:.1f} s)")
    return 0


def _entries(config: dict, names: list[str]) -> dict:
    """The entries of ``config`` by name, as ``load_world`` makes them (primitives, the scaled mesh; their poses
    are the loaded world's), for ``MeshWorld.from_envs``."""
    out = {}
    for kind, items in config.items():
        for name, fields in items.items():
            if kind == "cuboid":
                out[name] = warpgeo.Cuboid(fields["dims"])
            elif kind == "cylinder":
                out[name] = warpgeo.Cylinder(fields["radius"], fields["height"])
            elif kind == "capsule":
                out[name] = warpgeo.Capsule(fields["radius"], abs(fields["tip"][2] - fields["base"][2]))
            else:
                mesh = trimesh.load(fields["file_path"], force="mesh")
                mesh.apply_scale(fields["scale"])
                out[name] = mesh
    return {name: out[name] for name in names}


def _plot(depth: torch.Tensor, scan, names: list[str], path: str) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 9), dpi=100, layout="constrained")
    axes = fig.subplots(2, 3)
    shown = depth[depth > 0]
    vmin, vmax = (float(shown.min()), float(shown.max())) if shown.numel() else (0.0, 1.0)
    for e in range(3):
        ax = axes[0, e]
        image = np.ma.masked_equal(depth[e].numpy(), 0.0)
        im = ax.imshow(image, cmap="viridis_r", vmin=vmin, vmax=vmax)
        ax.set_title(f"env {e}: depth, obstacle at y = {OBSTACLE_Y[e]:+.2f}")
        ax.set_axis_off()
        ax = axes[1, e]
        hit = (scan.entry[e] >= 0).cpu()
        points = scan.point[e].cpu()[hit]
        sc = ax.scatter(points[:, 0], points[:, 1], c=points[:, 2], s=2, cmap="plasma", vmin=0.0, vmax=1.2)
        obstacle = (scan.entry[e].cpu()[hit] == names.index("obstacle")).numpy()
        ax.scatter(points[obstacle, 0], points[obstacle, 1], s=8, facecolors="none", edgecolors="red")
        ax.plot([-0.9], [-0.9], marker="*", color="black", markersize=12)
        ax.set_xlim(-3.0, 3.0)
        ax.set_ylim(-3.0, 3.0)
        ax.set_aspect("equal")
        ax.set_title(f"env {e}: lidar hits, top view (red: obstacle)")
    fig.colorbar(im, ax=axes[0, :].tolist(), label="z-depth (m)")
    fig.colorbar(sc, ax=axes[1, :].tolist(), label="hit height z (m)")
    fig.savefig(path)


if __name__ == "__main__":
    raise SystemExit(main())
