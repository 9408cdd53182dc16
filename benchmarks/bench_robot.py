"""warpgeo.Robot against pytorch_kinematics: joint angles to collision spheres, forward + backward.

The robot is the project's own 7-DoF arm (``examples/data/arm7.urdf``: a Franka-like arm's kinematics,
``arm7_spheres.json``: 62 spheres on 11 links; the fingers locked). Two measurements, each with torch's
default threads and with one thread:

1. ``spheres(q)`` forward + backward for ``--batch`` configurations (default 1,024): warpgeo's one launch
   each way against pytorch_kinematics' ``forward_kinematics`` plus the same sphere transform in torch
   (``R @ c + t`` per sphere), both with a random upstream gradient;
2. a planner iteration (``--trajectories`` x ``--steps``, default 32 x 32): spheres, swept world cost
   (a table and a box), self-collision and smoothness, forward + backward to the joint angles, with
   warpgeo's spheres or pytorch_kinematics' (the rest of the loop is the same warpgeo ops).

Run: ``python benchmarks/bench_robot.py [--device cuda] [--batch 1024] [--repeat 10] [--quick] [--json f]``.
On a GPU a third row times 32,768 configurations (``--gpu-batch``; issue 45's bar: <= 0.2 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import trimesh

sys.path.insert(0, os.path.dirname(__file__))
from _common import device_time, import_peer, print_header, size_key, write_figures

import warpgeo

DATA = os.path.join(os.path.dirname(__file__), "..", "examples", "data")
URDF = os.path.join(DATA, "arm7.urdf")
LOCKED = {"arm_finger_joint1": 0.04}


def make_robot(device: torch.device) -> tuple[warpgeo.Robot, list[float]]:
    with open(os.path.join(DATA, "arm7_spheres.json")) as f:
        model = json.load(f)
    robot = warpgeo.Robot.from_urdf(
        URDF,
        spheres=model["spheres"],
        lock_joints=LOCKED,
        self_collision_ignore=model["self_collision_ignore"],
        device=device,
    )
    return robot, model["retract"][:7]


class TorchSpheres:
    """pytorch_kinematics' forward kinematics, then each sphere moved by its link's matrix in torch."""

    def __init__(self, pk, robot: warpgeo.Robot, device: torch.device, dtype: torch.dtype) -> None:
        with open(URDF, "rb") as f:
            self.chain = pk.build_chain_from_urdf(f.read()).to(dtype=dtype, device=device)
        names = self.chain.get_joint_parameter_names()
        self.columns = [names.index(n) for n in robot.joint_names]
        self.fixed = {names.index(n): LOCKED["arm_finger_joint1"] for n in names if "finger" in n}
        self.width = len(names)
        links = [robot.link_names[int(k)] for k in robot.sphere_links]
        self.link_order = sorted(set(links), key=links.index)
        self.index = torch.tensor([self.link_order.index(name) for name in links], device=device)
        self.local = robot.local_spheres.to(dtype)

    def __call__(self, q: torch.Tensor) -> torch.Tensor:
        lead = q.shape[:-1]
        flat = q.reshape(-1, q.shape[-1])
        th = flat.new_zeros(flat.shape[0], self.width)
        th[:, self.columns] = flat
        for column, value in self.fixed.items():
            th[:, column] = value
        frames = self.chain.forward_kinematics(th)
        m = torch.stack([frames[name].get_matrix() for name in self.link_order], dim=1)[:, self.index]
        centres = (m[..., :3, :3] @ self.local[:, :3, None]).squeeze(-1) + m[..., :3, 3]
        radii = self.local[:, 3].expand(flat.shape[0], -1)
        return torch.cat([centres, radii[..., None]], dim=-1).reshape(*lead, -1, 4)


def spheres_step(fn, q: torch.Tensor, grad: torch.Tensor):
    def step() -> None:
        x = q.detach().requires_grad_(True)
        fn(x).backward(grad)

    return step


def planner_step(fn, robot: warpgeo.Robot, world: warpgeo.MeshWorld, q: torch.Tensor):
    def step() -> None:
        x = q.detach().requires_grad_(True)
        spheres = fn(x)
        world_cost = warpgeo.swept_sphere_mesh_cost(spheres, world, activation_distance=0.02).sum()
        self_cost = warpgeo.self_collision_cost(spheres, robot.pairs, margin=robot.self_margin).sum()
        smooth = (x[:, 1:] - x[:, :-1]).pow(2).sum()
        (world_cost + self_cost + smooth).backward()

    return step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--gpu-batch", type=int, default=32768)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="small sizes: 256 configurations, 8 x 8, 4,096")
    parser.add_argument("--json", type=str, default=None, help="write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.quick:  # smaller sizes; flags given explicitly still win
        parser.set_defaults(batch=256, trajectories=8, steps=8, gpu_batch=4096, repeat=5)
        args = parser.parse_args(argv)
    device = torch.device(args.device)
    print_header(device, f"arm7: 7 DoF, {args.batch} configurations")
    pk = import_peer("pytorch_kinematics", "pytorch-kinematics")
    robot, retract = make_robot(device)
    print(f"robot: {robot}")
    gen = torch.Generator().manual_seed(0)
    q = (torch.tensor(retract) + 0.3 * torch.randn(args.batch, 7, generator=gen)).to(device)
    grad = torch.randn(args.batch, robot.sphere_links.shape[0], 4, generator=gen).to(device)
    table = trimesh.creation.box((1.2, 1.6, 0.05))
    box = trimesh.creation.box((0.2, 0.3, 0.4))
    world = warpgeo.MeshWorld(
        {"table": table, "box": box},
        poses={"table": [0.5, 0.0, -0.03, 1, 0, 0, 0], "box": [0.5, 0.2, 0.2, 1, 0, 0, 0]},
        device=device,
    )
    plan = (torch.tensor(retract) + 0.2 * torch.randn(args.trajectories, args.steps, 7, generator=gen)).to(
        device
    )
    peer = TorchSpheres(pk, robot, device, torch.float32) if pk is not None else None
    default_threads = torch.get_num_threads()
    figures: dict[str, float | None] = {}
    for threads in sorted({default_threads, 1}, reverse=True):
        torch.set_num_threads(threads)
        print(f"\ntorch threads: {threads}")
        rows = {
            ("spheres fwd+bwd", f"spheres_fwd_bwd_{size_key(b=args.batch)}"): (
                spheres_step(robot.spheres, q, grad),
                peer and spheres_step(peer, q, grad),
            ),
            (
                f"planner iteration {args.trajectories}x{args.steps}",
                f"planner_{size_key(b=args.trajectories, h=args.steps)}",
            ): (
                planner_step(robot.spheres, robot, world, plan),
                peer and planner_step(peer, robot, world, plan),
            ),
        }
        for (name, key), (ours, theirs) in rows.items():
            t_ours = device_time(ours, device, repeat=args.repeat, warmup=2)
            line = f"  {name:<28} warpgeo {t_ours * 1e3:8.3f} ms"
            figures[f"robot_{key}_threads{threads}_ms"] = t_ours * 1e3
            if theirs is not None:
                t_theirs = device_time(theirs, device, repeat=args.repeat, warmup=2)
                line += f"   pytorch_kinematics {t_theirs * 1e3:8.3f} ms   ratio {t_theirs / t_ours:6.1f}x"
                figures[f"pytorch_kinematics_{key}_threads{threads}_ms"] = t_theirs * 1e3
            print(line)
    torch.set_num_threads(default_threads)
    if device.type == "cuda":
        big = (torch.tensor(retract) + 0.3 * torch.randn(args.gpu_batch, 7, generator=gen)).to(device)
        big_grad = torch.randn(args.gpu_batch, robot.sphere_links.shape[0], 4, generator=gen).to(device)
        t = device_time(spheres_step(robot.spheres, big, big_grad), device, repeat=args.repeat, warmup=3)
        print(f"\n{args.gpu_batch} configurations spheres fwd+bwd on {device}: {t * 1e3:.3f} ms")
        figures[f"robot_spheres_fwd_bwd_{size_key(b=args.gpu_batch)}_ms"] = t * 1e3
    write_figures(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
