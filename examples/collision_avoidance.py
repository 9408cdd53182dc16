"""Example: collision avoidance with the swept sphere-mesh cost.

Shows how to push a trajectory out of collision with gradients from ``warpgeo.swept_sphere_mesh_cost``.
A sphere's trajectory (H waypoints, cuRobo's (B, H, N, 4) sphere layout with B = N = 1) starts as the
straight line through three obstacles built from trimesh primitives (a cylinder, a box posed with a
quaternion, a sphere) — plus any mesh file given with ``--mesh`` (stood with its thinnest side facing the
path, 0.5 across). Adam moves the waypoints' centres (in
the plane z = 0) to minimise

    swept_sphere_mesh_cost(spheres, world).sum() + smoothness * sum ||x[h+1] - x[h]||^2

with the end points fixed. The swept cost also scores spheres *between* waypoints, so the path cannot
jump through an obstacle between two samples. Only the centres are optimised: the radius is the size of
the robot's link, and with it in the optimiser the cheapest way out of collision is to shrink a sphere
until its radius is negative, which disables it (cost 0 while its centre is still inside the obstacle).

The script prints the cost per iteration, checks that the result is collision-free (cost 0 with no
margin, every waypoint clear of every mesh) and saves a picture: the signed-distance slice z = 0 with the
trajectory before and after, the objective and the clearance per iteration. Needs the ``demo`` extra
(matplotlib) for the picture.

    python3 examples/collision_avoidance.py                      # ~10 s on 2 CPU cores
    python3 examples/collision_avoidance.py --horizon 80 --iterations 400 --device cuda
    python3 examples/collision_avoidance.py --mesh examples/data/torus.obj   # add your own obstacle
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import warpgeo
from warpgeo import demos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device"
    )
    parser.add_argument("--horizon", type=int, default=40, help="waypoints H (default: 40)")
    parser.add_argument("--iterations", type=int, default=150, help="Adam steps (default: 150)")
    parser.add_argument("--radius", type=float, default=0.08, help="sphere radius (default: 0.08)")
    parser.add_argument(
        "--sweep-steps", type=int, default=4, help="spheres scored between waypoints (default: 4)"
    )
    parser.add_argument(
        "--mesh",
        default=None,
        help="a mesh file to add to the obstacles: centred, its thinnest side facing the path, scaled to "
        "0.5 across, placed last on the path at x = 1.45 (after the sphere)",
    )
    parser.add_argument("--print-every", type=int, default=10, help="print the cost every N iterations")
    parser.add_argument(
        "--quick", action="store_true", help="smallest settings (for tests): H = 24, 60 steps"
    )
    parser.add_argument(
        "--out",
        default="collision_avoidance.png",
        help="output picture (default: collision_avoidance.png, in the current folder)",
    )
    args = parser.parse_args(argv)
    if args.quick:  # smaller sizes; flags given explicitly still win
        parser.set_defaults(horizon=24, iterations=60)
        args = parser.parse_args(argv)
    if args.horizon < 3:
        parser.error(f"--horizon must be at least 3; got {args.horizon}")
    device = demos.require_device(args.device, "collision_avoidance.py")  # one line if it is not here
    demos.require_matplotlib("collision_avoidance.py")

    t0 = time.perf_counter()
    activation_distance, smoothness, lr = 0.05, 0.02, 0.03
    try:
        meshes, poses = demos.collision_scene(args.mesh)
    except ValueError as exc:  # a --mesh that is missing, unreadable or not a triangle mesh: one line
        parser.error(f"--mesh: {exc}")
    sign_method = "ray" if all(m.is_watertight for m in meshes) else "winding"  # winding: open meshes
    world = warpgeo.MeshWorld(meshes, poses=poses, device=str(device), sign_method=sign_method)

    # H waypoints on the straight line START -> GOAL; the two ends stay where they are.
    H = args.horizon
    start = torch.tensor(demos.START, device=device)
    goal = torch.tensor(demos.GOAL, device=device)
    line = start + torch.linspace(0.0, 1.0, H, device=device)[:, None] * (goal - start)  # (H, 3)
    segment = float(torch.linalg.norm(goal - start)) / (H - 1)
    # Optimise the centres only (radius fixed): a free radius would shrink below 0, which disables a sphere.
    # They move in the plane z = 0, which the picture shows; all three coordinates would do as well.
    centres_xy = line[1:-1, :2].clone().requires_grad_()  # (H - 2, 2)
    z = line[1:-1, 2:]  # (H - 2, 1), fixed
    radii = torch.full((H, 1), args.radius, device=device)  # (H, 1), fixed
    optimiser = torch.optim.Adam([centres_xy], lr=lr)

    print(
        f"Moving {H - 2} waypoints of a sphere (radius {args.radius:g}) off the straight line through "
        f"{len(meshes)} obstacles: Adam on the swept collision cost (activation distance η = "
        f"{activation_distance}) plus smoothness, {args.iterations} steps. Per step: the cost, the objective "
        "(loss) and the clearance (the closest sphere's distance to a mesh; < 0 is a collision)."
    )
    costs, losses, clearances = [], [], []
    for it in range(args.iterations + 1):
        xyz = torch.cat([line[:1], torch.cat([centres_xy, z], dim=1), line[-1:]])  # (H, 3)
        spheres = torch.cat([xyz, radii], dim=1).reshape(1, H, 1, 4)  # (B=1, H, N=1, 4) = x, y, z, r
        cost = warpgeo.swept_sphere_mesh_cost(
            spheres, world, sweep_steps=args.sweep_steps, activation_distance=activation_distance
        ).sum()
        loss = cost + smoothness * (xyz[1:] - xyz[:-1]).square().sum() / segment**2
        with torch.no_grad():  # how far the closest waypoint's sphere is from touching a mesh
            clearance = (warpgeo.signed_distance(xyz, world) - args.radius).min().item()
        costs.append(cost.item())
        losses.append(loss.item())
        clearances.append(clearance)
        if args.print_every and (it % args.print_every == 0 or it == args.iterations):
            print(
                f"iter {it:4d}  cost {costs[-1]:10.5f}  loss {losses[-1]:10.5f}  clearance {clearance:+.4f}"
            )
        if it == args.iterations:
            break
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()

    with torch.no_grad():  # collision-free: no sphere, at a waypoint or swept between two, touches a mesh
        final_cost = warpgeo.swept_sphere_mesh_cost(spheres, world, sweep_steps=args.sweep_steps).sum().item()
    collision_free = final_cost == 0.0 and clearances[-1] > 0.0

    result = demos.CollisionAvoidanceResult(
        world=world,
        initial=line.cpu().double().numpy(),
        final=xyz.detach().cpu().double().numpy(),
        radius=args.radius,
        activation_distance=activation_distance,
        costs=costs,
        losses=losses,
        clearances=clearances,
        final_cost=final_cost,
        final_clearance=clearances[-1],
        collision_free=collision_free,
    )
    path = demos.plot_collision_avoidance(result, args.out)
    print(
        f"initial cost {costs[0]:.6f}  final cost {costs[-1]:.6f}  "
        f"(> 0 while a sphere is within η = {activation_distance} of a surface)"
    )
    print(f"collision-free: {'yes' if collision_free else 'no'}  (clearance {clearances[-1]:+.4f})")
    print(f"saved {path}  ({time.perf_counter() - t0:.1f} s on {device})")
    return 0 if collision_free else 1


if __name__ == "__main__":
    sys.exit(main())
