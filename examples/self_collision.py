"""Example: a planar arm's joint angles moved out of self-collision and away from an obstacle.

A toy robot in the plane z = 0: a fixed base and three links on revolute joints, each link a row of spheres
(the way cuRobo describes a robot: spheres on links, here built in code rather than read with
``warpgeo.compat.curobo.load_robot_spheres``). Its forward kinematics is a few lines of torch: the angles
``q`` (B, 3) give each link's origin and direction, and each sphere sits at a fixed distance along its link.
A batch of B configurations starts folded onto itself (the arm's end over its first link), some of them
also reaching into a box. Adam moves the joint angles to minimise

    self_collision_cost(spheres, pairs, margin=0.02, reduction="sum")      # the arm against itself
    + sphere_mesh_cost(spheres, world, activation_distance=0.05).sum(-1)   # the arm against the box
    + 0.002 * ||q - q_start||^2                                             # the nearest way out

for every configuration at once. ``pairs`` are the sphere pairs on different links less the neighbouring
links (they touch at their joint): ``warpgeo.collision_pairs(sphere_links, ignore=...)``. Both costs are
one kernel launch forward and one backward for the whole batch.

The script prints both costs per iteration, counts the configurations that end collision-free (no
penetration with no margin, every sphere clear of the box) and saves a picture: a few configurations before
and after, and the costs per iteration. Needs the ``demo`` extra (matplotlib) for the picture.

    python3 examples/self_collision.py                       # ~10 s on 2 CPU cores
    python3 examples/self_collision.py --batch 4096 --steps 300 --device cuda
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch

import warpgeo
from warpgeo import demos

#: The arm: link lengths (the base, link 0, does not move), sphere radius and spacing along a link.
LINK_LENGTHS = (1.0, 0.8, 0.6)
RADIUS = 0.07
SPACING = 0.1
#: Self-collision margin (cuRobo's self_collision_buffer) and the world cost's activation distance.
SELF_MARGIN = 0.02
ACTIVATION = 0.05
#: Weight of the distance to the start configuration (rad^-2): the nearest way out, not any way out.
REGULARISER = 0.002
#: The obstacle: a box standing on the plane, its centre and (x, y) size.
BOX_CENTRE = (0.95, 0.75)
BOX_SIZE = (0.4, 0.6)


def make_arm(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The arm's spheres: ``(sphere_links (S,), along (S,) distance from the link's origin, radii (S,))``.

    Link 0, the base, is a row of spheres under the first joint; link k (1..3) is a row along its length."""
    links, along = [], []
    for x in (-0.3, -0.15, 0.0, 0.15, 0.3):  # the base: along x, under the first joint
        links.append(0)
        along.append(x)
    for k, length in enumerate(LINK_LENGTHS, start=1):
        count = round(length / SPACING)
        for n in range(count):
            links.append(k)
            along.append((n + 0.5) * length / count)
    sphere_links = torch.tensor(links, device=device)
    return sphere_links, torch.tensor(along, device=device), torch.full((len(links),), RADIUS, device=device)


def forward_kinematics(q: torch.Tensor, sphere_links, along, radii) -> torch.Tensor:
    """Joint angles ``q`` (B, 3) -> the spheres (B, S, 4) in the world frame (z = 0).

    Link k's direction is the sum of the first k angles; its origin is the end of link k - 1 (link 1 starts
    at the origin). The base (link 0) lies along x, its spheres ``along`` x from the first joint, lowered
    by one radius."""
    batch = q.shape[0]
    angles = torch.cumsum(q, dim=1)  # (B, 3): each moving link's direction
    directions = torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)  # (B, 3, 2)
    lengths = torch.tensor(LINK_LENGTHS, device=q.device, dtype=q.dtype)
    ends = torch.cumsum(directions * lengths[:, None], dim=1)  # (B, 3, 2): where each link ends
    origins = torch.cat([q.new_zeros(batch, 2, 2), ends[:, :-1]], dim=1)  # (B, 4, 2): base, links 1-3
    base_direction = torch.tensor([[1.0, 0.0]], device=q.device, dtype=q.dtype).expand(batch, 1, 2)
    directions = torch.cat([base_direction, directions], dim=1)  # (B, 4, 2)
    origins[:, 0, 1] = -RADIUS  # the base sits just under the first joint
    xy = origins[:, sphere_links] + along[None, :, None] * directions[:, sphere_links]  # (B, S, 2)
    z = q.new_zeros(batch, len(sphere_links), 1)
    return torch.cat([xy, z, radii.expand(batch, -1)[..., None]], dim=-1)


def folded_starts(batch: int, device: torch.device, seed: int = 0) -> torch.Tensor:
    """B configurations folded onto themselves, in a Z: the elbow bent back by 158-178 degrees, the wrist
    forward again by as much, so that the last link lies along the first (a fold that crosses itself, an X,
    would be a local minimum: its spheres push both ways)."""
    gen = torch.Generator().manual_seed(seed)
    shoulder = math.pi * (0.2 + 0.6 * torch.rand(batch, generator=gen))
    sign = torch.where(torch.rand(batch, generator=gen) < 0.5, -1.0, 1.0)
    bends = math.radians(158) + math.radians(20) * torch.rand(batch, 2, generator=gen)
    return torch.stack([shoulder, sign * bends[:, 0], -sign * bends[:, 1]], dim=1).to(device)


def costs(q, arm, pairs, world):
    """Per configuration (B,): the self-collision cost (with the margin) and the world cost."""
    spheres = forward_kinematics(q, *arm)
    self_cost = warpgeo.self_collision_cost(spheres, pairs, margin=SELF_MARGIN, reduction="sum")
    world_cost = warpgeo.sphere_mesh_cost(spheres, world, activation_distance=ACTIVATION).sum(-1)
    return spheres, self_cost, world_cost


def collision_free(q, arm, pairs, world) -> torch.Tensor:
    """(B,) bool: no pair penetrates (no margin) and every sphere is clear of the box."""
    with torch.no_grad():
        spheres = forward_kinematics(q, *arm)
        deepest = warpgeo.self_collision_cost(spheres, pairs)  # "max", no margin
        clearance = warpgeo.signed_distance(spheres[..., :3], world) - spheres[..., 3]
        return (deepest == 0) & (clearance > 0).all(-1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device"
    )
    parser.add_argument(
        "--batch", type=int, default=512, help="configurations optimised at once (default: 512)"
    )
    parser.add_argument("--steps", type=int, default=200, help="Adam steps (default: 200)")
    parser.add_argument("--print-every", type=int, default=20, help="print the costs every N steps")
    parser.add_argument(
        "--quick", action="store_true", help="smallest settings (for tests): B = 64, 100 steps"
    )
    parser.add_argument(
        "--out",
        default="self_collision.png",
        help="output picture (default: self_collision.png, in the current folder)",
    )
    args = parser.parse_args(argv)
    if args.quick:  # smaller sizes; flags given explicitly still win
        parser.set_defaults(batch=64, steps=100)
        args = parser.parse_args(argv)
    if args.batch < 1 or args.steps < 1:
        parser.error(f"--batch and --steps must be at least 1; got {args.batch}, {args.steps}")
    device = demos.require_device(args.device, "self_collision.py")  # one line if it is not here
    demos.require_matplotlib("self_collision.py")

    t0 = time.perf_counter()
    arm = make_arm(device)
    sphere_links = arm[0]
    # neighbouring links touch at their joint: never a collision
    pairs = warpgeo.collision_pairs(sphere_links, ignore=[(0, 1), (1, 2), (2, 3)])
    box = warpgeo.Cuboid([*BOX_SIZE, 1.0])
    world = warpgeo.MeshWorld([box], poses=[[*BOX_CENTRE, 0.0, 1, 0, 0, 0]], device=str(device))

    q_start = folded_starts(args.batch, device)
    q = q_start.clone().requires_grad_()
    optimiser = torch.optim.Adam([q], lr=0.05)
    free_before = int(collision_free(q_start, arm, pairs, world).sum())
    print(
        f"Moving {args.batch} configurations of a planar arm ({len(sphere_links)} spheres on 4 links, "
        f"{len(pairs)} sphere pairs) out of self-collision and away from a box: Adam on the joint angles, "
        f"{args.steps} steps. Per step: the mean self-collision cost, the mean world cost and the objective."
    )
    history = []
    for step in range(args.steps + 1):
        spheres, self_cost, world_cost = costs(q, arm, pairs, world)
        if step == 0:
            world_start = world_cost.detach()
        loss = (self_cost + world_cost + REGULARISER * (q - q_start).square().sum(-1)).sum()
        history.append((self_cost.mean().item(), world_cost.mean().item()))
        if args.print_every and (step % args.print_every == 0 or step == args.steps):
            print(
                f"step {step:4d}  self {history[-1][0]:9.5f}  world {history[-1][1]:9.5f}  "
                f"loss {loss.item() / args.batch:9.5f}"
            )
        if step == args.steps:
            break
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()

    free_after = int(collision_free(q.detach(), arm, pairs, world).sum())
    before = forward_kinematics(q_start, *arm)
    after = spheres.detach()
    hit_before, hit_after = in_collision(before, pairs, world), in_collision(after, pairs, world)
    path = draw(
        args.out,
        before.cpu(),
        after.cpu(),
        hit_before.cpu(),
        hit_after.cpu(),
        world_start.cpu(),
        sphere_links.cpu(),
        history,
    )
    print(f"initial self-collision cost {history[0][0]:.5f}  final {history[-1][0]:.5f}")
    print(f"initial world cost {history[0][1]:.5f}  final {history[-1][1]:.5f}")
    print(
        f"collision-free: {free_after}/{args.batch} configurations (at the start: {free_before}/{args.batch})"
    )
    print(f"saved {path}  ({time.perf_counter() - t0:.1f} s on {device})")
    return 0


def in_collision(spheres: torch.Tensor, pairs: torch.Tensor, world) -> torch.Tensor:
    """(B, S) bool: the spheres of a penetrating pair (no margin) and the spheres that touch the box."""
    with torch.no_grad():
        per_pair = warpgeo.self_collision_cost(spheres, pairs, reduction=None) > 0  # (B, P)
        hit = torch.zeros(spheres.shape[:-1], dtype=torch.bool, device=spheres.device)
        for column in (0, 1):
            hit.scatter_reduce_(1, pairs[:, column].expand_as(per_pair), per_pair, reduce="amax")
        return hit | (warpgeo.signed_distance(spheres[..., :3], world) < spheres[..., 3])


def draw(path, before, after, hit_before, hit_after, world_before, sphere_links, history) -> str:
    """Three configurations that start in collision (the two with the most spheres in collision, the one
    deepest in the box), before (top) and after (bottom): spheres coloured by link, those in collision
    outlined in red; the mean costs per step on the right."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle, Rectangle

    colours = ["0.35", "tab:blue", "tab:orange", "tab:green"]
    order = hit_before.sum(-1).argsort(descending=True, stable=True).tolist()
    deepest = int(world_before.argmax())
    worst = [*[b for b in order if b != deepest][:2], deepest]
    fig = Figure(figsize=(14, 6.6), dpi=100)
    grid = fig.add_gridspec(2, 4, width_ratios=[1, 1, 1, 1.3])
    links = sphere_links.tolist()
    for row, (spheres, hit, when) in enumerate(((before, hit_before, "before"), (after, hit_after, "after"))):
        for col, b in enumerate(worst):
            ax = fig.add_subplot(grid[row, col])
            corner = (BOX_CENTRE[0] - BOX_SIZE[0] / 2, BOX_CENTRE[1] - BOX_SIZE[1] / 2)
            ax.add_patch(Rectangle(corner, *BOX_SIZE, color="0.8"))
            for (x, y, _, r), link, bad in zip(spheres[b].tolist(), links, hit[b].tolist(), strict=True):
                edge = "red" if bad else "none"
                ax.add_patch(
                    Circle((x, y), r, facecolor=colours[link], alpha=0.6, edgecolor=edge, linewidth=1.5)
                )
            count = int(hit[b].sum())
            ax.set_title(f"configuration {b}, {when}: {count} spheres in collision", fontsize=9)
            ax.set_xlim(-1.3, 1.5)
            ax.set_ylim(-0.4, 1.9)
            ax.set_aspect("equal")
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
    cost_panel(fig.add_subplot(grid[:, 3]), history)
    fig.suptitle(
        "Planar arm: base grey, links 1-3 blue, orange, green; red outline: a sphere in collision "
        "(with another link or the grey box)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path)
    return path


def cost_panel(ax, history: list[tuple[float, float]]) -> None:
    """The costs per Adam step (mean over the batch of each configuration's cost), on a symlog axis."""
    steps = range(len(history))
    ax.plot(steps, [h[0] for h in history], label="self-collision cost (mean)")
    ax.plot(steps, [h[1] for h in history], label="world cost (mean)")
    ax.set_yscale("symlog", linthresh=1e-4)
    ax.set_xlabel("Adam step")
    ax.set_ylabel("cost of a configuration, mean over the batch (symlog)")
    ax.legend()
    ax.grid(alpha=0.3)


if __name__ == "__main__":
    sys.exit(main())
