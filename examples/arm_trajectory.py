"""Example: a 7-DoF arm's joint-space trajectories optimised around obstacles, from joint angles to spheres.

The arm is the project's own URDF (``examples/data/arm7.urdf``: a Franka-like arm's kinematics) with 62
collision spheres (``examples/data/arm7_spheres.json``), read by ``warpgeo.Robot.from_urdf`` (the ``robot``
extra: yourdfpy). The world mixes a primitive and a mesh: a table (``warpgeo.Cuboid``) and a torus mesh
standing on it, across the arm's way. B trajectories of H waypoints start as straight lines in joint space
(plus a little noise) from a start to a goal configuration, through the torus; Adam moves the inner
waypoints' joint angles to minimise, for all trajectories at once,

    swept_sphere_mesh_cost(robot.spheres(q), world, activation_distance=0.05)     # the arm against the world,
                                                                                  # between waypoints too
    + self_collision_cost(robot.spheres(q), robot.pairs, margin=robot.self_margin) # the arm against itself
    + smoothness (squared joint-space velocity) + joint limits (squared excess)

``robot.spheres(q)`` is one Warp launch forward and one backward for the whole (B, H) batch of
configurations, as are both costs.

The script prints the costs every few iterations, counts the trajectories that end collision-free (every
waypoint and the swept spheres between them clear of the world, no self-collision) and saves a picture: the
hand's path before and after (3D), the arm at a few waypoints of the best trajectory, and the costs per
iteration. Needs the ``demo`` extra (matplotlib) for the picture.

    python3 examples/arm_trajectory.py                       # ~10-20 s on 2 CPU cores
    python3 examples/arm_trajectory.py --trajectories 64 --waypoints 48 --steps 300 --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import trimesh

import warpgeo
from warpgeo import demos

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
#: Start and goal configurations (rad): the arm swings from its left to its right, the hand low over the table.
START = (-1.1, 0.55, 0.0, -1.9, 0.0, 2.4, 0.8)
GOAL = (1.1, 0.55, 0.0, -1.9, 0.0, 2.4, 0.8)
#: The gripper's opening (m), held (not optimised).
FINGERS = 0.04
#: Weights: world and self costs, smoothness (per squared radian between waypoints), joint limits.
WORLD_WEIGHT = 100.0
SELF_WEIGHT = 100.0
SMOOTH_WEIGHT = 1.0
LIMIT_WEIGHT = 100.0
ACTIVATION = 0.05
SWEEP_STEPS = 4


def make_robot(device: torch.device) -> warpgeo.Robot:
    with open(os.path.join(DATA, "arm7_spheres.json")) as f:
        model = json.load(f)
    return warpgeo.Robot.from_urdf(
        os.path.join(DATA, "arm7.urdf"),
        spheres=model["spheres"],
        lock_joints={"arm_finger_joint1": FINGERS},
        self_collision_ignore=model["self_collision_ignore"],
        device=device,
    )


def make_world(device: torch.device) -> tuple[warpgeo.MeshWorld, dict]:
    """A table (a primitive) and a torus mesh standing on it in front of the arm; poses for the picture."""
    torus = trimesh.load(os.path.join(DATA, "torus.obj"), force="mesh")
    torus.apply_scale(0.3 / max(torus.extents))  # 30 cm across
    poses = {
        "table": [0.55, 0.0, -0.025, 1.0, 0.0, 0.0, 0.0],
        # standing up (its axis along x, facing the arm), its centre where the straight path passes
        "torus": [0.5, 0.0, 0.2, 0.7071067811865476, 0.0, 0.7071067811865476, 0.0],
    }
    world = warpgeo.MeshWorld(
        {"table": warpgeo.Cuboid([0.7, 1.4, 0.05]), "torus": torus}, poses=poses, device=device
    )
    return world, {"torus": torus, "poses": poses}


def straight_lines(trajectories: int, waypoints: int, noise: float, device: torch.device) -> torch.Tensor:
    """(B, H, 7) joint-space lines from START to GOAL, the inner waypoints jittered."""
    t = torch.linspace(0, 1, waypoints, dtype=torch.float32)[:, None]
    line = torch.tensor(START) * (1 - t) + torch.tensor(GOAL) * t
    gen = torch.Generator().manual_seed(0)
    jitter = noise * torch.randn(trajectories, waypoints, 7, generator=gen)
    jitter[:, 0] = jitter[:, -1] = 0.0
    return (line + jitter).to(device)


def costs(robot, world, q: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per trajectory (B,): each term of the objective."""
    spheres = robot.spheres(q)  # (B, H, S, 4): one launch
    world_cost = warpgeo.swept_sphere_mesh_cost(
        spheres, world, sweep_steps=SWEEP_STEPS, activation_distance=ACTIVATION
    ).sum((1, 2))
    self_cost = warpgeo.self_collision_cost(spheres, robot.pairs, margin=robot.self_margin).sum(1)
    smooth = (q[:, 1:] - q[:, :-1]).pow(2).sum((1, 2))
    limits = robot.joint_limits.to(q)
    excess = torch.relu(limits[:, 0] - q) + torch.relu(q - limits[:, 1])
    return {"world": world_cost, "self": self_cost, "smooth": smooth, "limits": excess.pow(2).sum((1, 2))}


def collision_free(robot, world, q: torch.Tensor) -> torch.Tensor:
    """(B,) bool: no penetration at any waypoint or swept sample, and no self-collision without margin."""
    with torch.no_grad():
        spheres = robot.spheres(q)
        hit = warpgeo.swept_sphere_mesh_cost(spheres, world, sweep_steps=SWEEP_STEPS).sum((1, 2)) > 0
        hit |= warpgeo.self_collision_cost(spheres, robot.pairs).amax(1) > 0
    return ~hit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trajectories", type=int, default=8, help="B trajectories optimised at once (default: 8)"
    )
    parser.add_argument("--waypoints", type=int, default=24, help="H waypoints per trajectory (default: 24)")
    parser.add_argument("--steps", type=int, default=150, help="Adam steps (default: 150)")
    parser.add_argument("--lr", type=float, default=0.03, help="Adam's learning rate, rad (default: 0.03)")
    parser.add_argument(
        "--print-every", type=int, default=25, help="print the costs every N steps (default: 25)"
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: cpu)")
    parser.add_argument(
        "--quick", action="store_true", help="smallest settings (for tests): B = 4, H = 12, 80 steps"
    )
    parser.add_argument(
        "--out",
        default="arm_trajectory.png",
        help="the picture to write (default: arm_trajectory.png, in the current folder)",
    )
    args = parser.parse_args(argv)
    if args.quick:  # smaller sizes; flags given explicitly still win
        parser.set_defaults(trajectories=4, waypoints=12, steps=80, print_every=20)
        args = parser.parse_args(argv)
    if min(args.trajectories, args.steps) < 1 or args.waypoints < 3:
        parser.error("--trajectories and --steps must be >= 1 and --waypoints >= 3")
    device = demos.require_device(args.device, "arm_trajectory.py")  # one line if it is not here
    demos.require_matplotlib("arm_trajectory.py")
    robot = make_robot(device)
    world, scene = make_world(device)
    print(
        f"Moving {args.trajectories} trajectories of {args.waypoints} waypoints of a 7-DoF arm "
        f"({robot.sphere_links.shape[0]} spheres) out of a torus mesh on a table (a Cuboid), {args.steps} Adam steps"
    )
    start = straight_lines(args.trajectories, args.waypoints, 0.05, device)
    inner = start[:, 1:-1].clone().requires_grad_(True)
    ends = (start[:, :1], start[:, -1:])
    optimiser = torch.optim.Adam([inner], lr=args.lr)
    history = []
    began = time.perf_counter()
    for step in range(args.steps + 1):
        q = torch.cat([ends[0], inner, ends[1]], dim=1)
        terms = costs(robot, world, q)
        total = (
            WORLD_WEIGHT * terms["world"]
            + SELF_WEIGHT * terms["self"]
            + SMOOTH_WEIGHT * terms["smooth"]
            + LIMIT_WEIGHT * terms["limits"]
        )
        history.append({k: v.mean().item() for k, v in terms.items()})
        if step % args.print_every == 0 or step == args.steps:
            h = history[-1]
            print(
                f"step {step:4d}  world {h['world']:.4f}  self {h['self']:.4f}  smooth {h['smooth']:.3f}  "
                f"limits {h['limits']:.5f}"
            )
        if step == args.steps:
            break
        optimiser.zero_grad()
        total.sum().backward()
        optimiser.step()
    elapsed = time.perf_counter() - began
    final = torch.cat([ends[0], inner.detach(), ends[1]], dim=1)
    before, after = collision_free(robot, world, start), collision_free(robot, world, final)
    print(f"initial world cost {history[0]['world']:.4g}  final {history[-1]['world']:.4g}")
    print(
        f"collision-free trajectories: {int(after.sum())}/{len(after)} (at the start: {int(before.sum())}/"
        f"{len(before)}; {args.steps} steps, {elapsed:.1f} s)"
    )
    draw(robot, scene, start, final, history, after, args.out)
    print(f"wrote {args.out}")
    return 0


def draw(robot, scene, start, final, history, free, path: str) -> None:
    from matplotlib.figure import Figure

    hand = robot.link_names.index("arm_hand")
    with torch.no_grad():
        path_before = robot.link_poses(start)[..., hand, :3].cpu()
        poses_after = robot.link_poses(final).cpu()
    path_after = poses_after[..., hand, :3]
    best = int(torch.nonzero(free)[0]) if bool(free.any()) else 0
    fig = Figure(figsize=(13, 5.5))
    ax = fig.add_subplot(1, 2, 1, projection="3d")
    torus = scene["torus"].copy()
    torus.apply_transform(_matrix(scene["poses"]["torus"]))
    v = torus.vertices
    ax.plot_trisurf(
        v[:, 0], v[:, 1], v[:, 2], triangles=torus.faces, color="tab:orange", alpha=0.35, linewidth=0
    )
    x0, x1, y0, y1 = 0.2, 0.9, -0.7, 0.7
    ax.plot([x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0], [0, 0, 0, 0, 0], color="0.5")
    for b in range(path_before.shape[0]):
        label = "hand's path before" if b == 0 else None
        ax.plot(*path_before[b].T, color="tab:red", alpha=0.5, linewidth=1, label=label)
        label = "after" if b == 0 else None
        ax.plot(*path_after[b].T, color="tab:blue", alpha=0.7, linewidth=1.2, label=label)
    for h in range(0, poses_after.shape[1], max(1, poses_after.shape[1] // 6)):
        chain = poses_after[best, h, : robot.link_names.index("arm_flange") + 1, :3]
        ax.plot(*chain.T, color="k", alpha=0.6, linewidth=2, marker="o", markersize=2)
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_zlabel("z (m)")
    ax.set_title(f"hand paths; the arm along trajectory {best} after")
    ax.legend(loc="upper left")
    ax.set_box_aspect((1, 1.4, 0.8))
    ax2 = fig.add_subplot(1, 2, 2)
    for key, colour in (("world", "tab:orange"), ("self", "tab:green"), ("smooth", "tab:blue")):
        ax2.plot([h[key] for h in history], color=colour, label=f"{key} cost")
    ax2.set_yscale("symlog", linthresh=1e-3)
    ax2.set_xlabel("Adam step")
    ax2.set_ylabel("cost (mean over trajectories)")
    ax2.set_title(f"costs; collision-free after: {int(free.sum())}/{len(free)}")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _matrix(pose) -> list:
    x, y, z, w, qx, qy, qz = pose
    return [
        [1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - w * qz), 2 * (qx * qz + w * qy), x],
        [2 * (qx * qy + w * qz), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - w * qx), y],
        [2 * (qx * qz - w * qy), 2 * (qy * qz + w * qx), 1 - 2 * (qx * qx + qy * qy), z],
        [0, 0, 0, 1],
    ]


if __name__ == "__main__":
    sys.exit(main())
