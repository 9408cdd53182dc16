"""Example: a world seen by a depth camera, fused into a distance grid, and a trajectory planned around it.

A small cuRobo-style world (a table, a box, a post and a ball; ``SCENE`` below, built as a ``MeshWorld`` by
``warpgeo.compat.curobo.load_world`` for the ground truth) is seen by a pinhole depth camera from a few poses
around it. The depth frames are rendered here by analytic ray casting in NumPy (z-depth along the optical
axis, OpenCV axes), fused by ``warpgeo.DepthFusion`` (TSDF integration, one launch for the batch) and turned
into a signed ``warpgeo.DistanceGrid`` (``fusion.distance_grid()``). That grid is the planning world:
``MeshWorld([grid])``, an entry like any other. A sphere's trajectory (H waypoints, cuRobo's (B, H, N, 4)
layout with B = N = 1) starts as the straight line through the obstacles; Adam moves its inner waypoints to
minimise

    swept_sphere_mesh_cost(spheres, fused_world).sum() + smoothness * sum ||x[h+1] - x[h]||^2

The script prints how far the fused distance is from the true one near the surfaces, the cost as it goes,
and whether the final path is clear of the *true* world (its signed distance, sphere by sphere), and saves a
picture: ESDF slices of the fused grid (through the path's plane, and a vertical one along it) with the true
objects' outline and the trajectory before and after, and the cost per iteration. Needs the ``demo`` extra
(matplotlib) for the picture.

    python3 examples/sensor_world.py                    # ~10 s on 2 CPU cores
    python3 examples/sensor_world.py --voxel 0.01 --width 320 --device cuda
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

import warpgeo
from warpgeo import demos
from warpgeo.compat.curobo import load_world

#: The world, as a cuRobo world configuration (poses [x, y, z, qw, qx, qy, qz]; axis-aligned boxes here).
SCENE = {
    "cuboid": {
        "table": {"dims": [1.6, 1.0, 0.04], "pose": [0.0, 0.0, -0.02, 1, 0, 0, 0]},
        "box": {"dims": [0.14, 0.14, 0.3], "pose": [-0.25, 0.05, 0.15, 1, 0, 0, 0]},
    },
    "cylinder": {"post": {"radius": 0.05, "height": 0.4, "pose": [0.1, -0.05, 0.2, 1, 0, 0, 0]}},
    "sphere": {"ball": {"radius": 0.08, "pose": [0.4, 0.08, 0.2, 1, 0, 0, 0]}},
}
#: The fused volume (world frame, metres) and the path's ends (through the obstacles at z = 0.2).
BOUNDS = ((-0.8, -0.5, -0.1), (0.8, 0.5, 0.5))
START = (-0.65, 0.0, 0.2)
GOAL = (0.65, 0.0, 0.2)


# --------------------------------------------------------------------------------------------------------
# rendering: analytic ray casting of SCENE (z-depth per pixel, inf where a ray meets nothing)
# --------------------------------------------------------------------------------------------------------


def _hit_box(o: np.ndarray, d: np.ndarray, centre, dims) -> np.ndarray:
    """Ray parameter of the first hit of rays ``o + t d`` with an axis-aligned box (slabs), inf on a miss."""
    half = np.asarray(dims) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
        t1 = (np.asarray(centre) - half - o) / d
        t2 = (np.asarray(centre) + half - o) / d
    near = np.nanmax(np.minimum(t1, t2), axis=-1)
    far = np.nanmin(np.maximum(t1, t2), axis=-1)
    return np.where((far >= near) & (near > 0), near, np.inf)


def _hit_sphere(o: np.ndarray, d: np.ndarray, centre, radius: float) -> np.ndarray:
    oc = o - np.asarray(centre)
    a = (d * d).sum(-1)
    b = (oc * d).sum(-1)
    disc = b * b - a * ((oc * oc).sum(-1) - radius**2)
    t = (-b - np.sqrt(np.maximum(disc, 0.0))) / a
    return np.where((disc >= 0) & (t > 0), t, np.inf)


def _hit_cylinder(o: np.ndarray, d: np.ndarray, centre, radius: float, height: float) -> np.ndarray:
    """A z-axis cylinder with flat caps: its side (a quadratic in x, y) or a cap, whichever comes first."""
    oc = o - np.asarray(centre)
    a = d[..., 0] ** 2 + d[..., 1] ** 2
    b = oc[..., 0] * d[..., 0] + oc[..., 1] * d[..., 1]
    disc = b * b - a * (oc[..., 0] ** 2 + oc[..., 1] ** 2 - radius**2)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_side = (-b - np.sqrt(np.maximum(disc, 0.0))) / a
        z_side = oc[..., 2] + t_side * d[..., 2]
        side = np.where((disc >= 0) & (t_side > 0) & (np.abs(z_side) <= height / 2), t_side, np.inf)
        t_cap = (np.sign(-oc[..., 2]) * -height / 2 - oc[..., 2]) / d[
            ..., 2
        ]  # the cap facing the ray's origin
        x = oc[..., :2] + t_cap[..., None] * d[..., :2]
        cap = np.where((t_cap > 0) & ((x * x).sum(-1) <= radius**2), t_cap, np.inf)
    return np.minimum(side, cap)


def render_depth(eye, target, k: np.ndarray, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """z-depth (H, W) of SCENE seen from ``eye`` looking at ``target`` (0 where nothing is hit), and the
    camera pose [x, y, z, qw, qx, qy, qz] (world from camera, OpenCV axes: +z forward, +y down)."""
    forward = np.asarray(target, float) - np.asarray(eye, float)
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    rot = np.stack([right, down, forward], axis=1)  # columns: the camera's axes in the world
    v, u = np.mgrid[0:height, 0:width].astype(np.float64)
    rays_cam = np.stack([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], np.ones_like(u)], -1)
    d = rays_cam @ rot.T  # a ray's parameter t is then its z-depth
    o = np.broadcast_to(np.asarray(eye, float), d.shape)
    t = np.full((height, width), np.inf)
    for fields in SCENE["cuboid"].values():
        t = np.minimum(t, _hit_box(o, d, fields["pose"][:3], fields["dims"]))
    for fields in SCENE["cylinder"].values():
        t = np.minimum(t, _hit_cylinder(o, d, fields["pose"][:3], fields["radius"], fields["height"]))
    for fields in SCENE["sphere"].values():
        t = np.minimum(t, _hit_sphere(o, d, fields["pose"][:3], fields["radius"]))
    return np.where(np.isfinite(t), t, 0.0).astype(np.float32), np.concatenate([eye, _quaternion(rot)])


def _quaternion(m: np.ndarray) -> np.ndarray:
    """[qw, qx, qy, qz] of a rotation matrix (the branch of the largest diagonal term: no cancellation)."""
    trace = np.trace(m)
    if trace > 0:
        s = 2.0 * np.sqrt(1.0 + trace)
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + m[i, i] - m[j, j] - m[k, k])
        q = [0.0, 0.0, 0.0, 0.0]
        q[0] = (m[k, j] - m[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (m[j, i] + m[i, j]) / s
        q[1 + k] = (m[k, i] + m[i, k]) / s
    q = np.asarray(q)
    return q / np.linalg.norm(q)


# --------------------------------------------------------------------------------------------------------
# the example
# --------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device"
    )
    parser.add_argument("--voxel", type=float, default=0.02, help="voxel size in metres (default: 0.02)")
    parser.add_argument("--width", type=int, default=240, help="depth image width in pixels (default: 240)")
    parser.add_argument("--views", type=int, default=6, help="camera poses around the scene (default: 6)")
    parser.add_argument("--horizon", type=int, default=40, help="waypoints H (default: 40)")
    parser.add_argument("--iterations", type=int, default=150, help="Adam steps (default: 150)")
    parser.add_argument("--radius", type=float, default=0.04, help="sphere radius (default: 0.04)")
    parser.add_argument("--print-every", type=int, default=25, help="print the cost every N iterations")
    parser.add_argument(
        "--quick", action="store_true", help="smallest settings (for tests): 160 px, 24 waypoints, 80 steps"
    )
    parser.add_argument(
        "--out",
        default="sensor_world.png",
        help="output picture (default: sensor_world.png, in the current folder)",
    )
    args = parser.parse_args(argv)
    if args.quick:  # smaller sizes; flags given explicitly still win
        parser.set_defaults(width=160, horizon=24, iterations=80)
        args = parser.parse_args(argv)
    if args.horizon < 3 or args.views < 1 or args.width < 16 or not args.voxel > 0:
        parser.error("--horizon >= 3, --views >= 1, --width >= 16 and --voxel > 0, please")
    device = demos.require_device(args.device, "sensor_world.py")  # one line if it is not here
    demos.require_matplotlib("sensor_world.py")
    t0 = time.perf_counter()

    # 1. depth frames from cameras on a circle around the scene, looking at its middle
    width, height = args.width, args.width * 3 // 4
    f = 0.9 * width
    k = np.array([[f, 0.0, (width - 1) / 2], [0.0, f, (height - 1) / 2], [0.0, 0.0, 1.0]])
    angles = np.linspace(0.0, 2 * np.pi, args.views, endpoint=False) + 0.3
    eyes = [(1.3 * np.cos(a), 1.0 * np.sin(a), 0.9) for a in angles]
    frames = [render_depth(eye, (0.0, 0.0, 0.1), k, height, width) for eye in eyes]
    depth = np.stack([d for d, _ in frames])
    poses = np.stack([p for _, p in frames])
    print(
        f"Fusing {args.views} depth frames ({width}x{height}) of a table with three objects into a "
        f"{args.voxel:g} m grid, then moving {args.horizon - 2} waypoints of a sphere (radius {args.radius:g}) "
        "off the straight line through them, on the fused world alone."
    )

    # 2. fusion: TSDF, then the signed distance grid; the planning world holds that grid only
    fusion = warpgeo.DepthFusion(BOUNDS, args.voxel, device=device)
    fusion.integrate(torch.from_numpy(depth), torch.from_numpy(k), torch.from_numpy(poses))
    grid = fusion.distance_grid()
    fused_world = warpgeo.MeshWorld({"map": grid}, device=device)
    true_world = load_world(SCENE, device=device)
    # how close the fused distance is to the truth near the surfaces (where the camera saw them)
    gen = torch.Generator().manual_seed(0)
    lo, hi = torch.tensor(BOUNDS[0]), torch.tensor(BOUNDS[1])
    probes = (lo + torch.rand(20000, 3, generator=gen, dtype=torch.float64) * (hi - lo)).to(device)
    truth = warpgeo.signed_distance(probes, true_world)
    fused = warpgeo.signed_distance(probes, fused_world)
    near = (truth.abs() < 0.05) & (probes[:, 2] > 0.01)
    error = (fused - truth)[near].abs()
    print(
        f"grid {tuple(grid.shape)}; fused vs true distance within 5 cm of a surface: median "
        f"{error.median().item():.4f} m, 90th percentile {error.quantile(0.9).item():.4f} m "
        f"({time.perf_counter() - t0:.1f} s so far)"
    )

    # 3. the trajectory: Adam on the swept cost against the fused world, plus smoothness
    activation, smoothness, lr, sweep = 0.04, 0.02, 0.02, 4
    n = args.horizon
    start = torch.tensor(START, device=device)
    goal = torch.tensor(GOAL, device=device)
    line = start + torch.linspace(0.0, 1.0, n, device=device)[:, None] * (goal - start)
    segment = float(torch.linalg.norm(goal - start)) / (n - 1)
    inner = line[1:-1].clone().requires_grad_()
    radii = torch.full((n, 1), args.radius, device=device)
    optimiser = torch.optim.Adam([inner], lr=lr)
    costs = []
    for it in range(args.iterations + 1):
        xyz = torch.cat([line[:1], inner, line[-1:]])
        spheres = torch.cat([xyz, radii], 1).reshape(1, n, 1, 4)
        cost = warpgeo.swept_sphere_mesh_cost(
            spheres, fused_world, sweep_steps=sweep, activation_distance=activation
        )
        cost = cost.sum()
        loss = cost + smoothness * (xyz[1:] - xyz[:-1]).square().sum() / segment**2
        costs.append(cost.item())
        if args.print_every and (it % args.print_every == 0 or it == args.iterations):
            print(f"iter {it:4d}  cost {costs[-1]:10.5f}  loss {loss.item():10.5f}")
        if it == args.iterations:
            break
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()

    # 4. checked against the true world: every waypoint's sphere, and samples between waypoints
    final = xyz.detach()
    dense = (
        final[:-1, None]
        + torch.linspace(0, 1, 9, device=device)[None, :, None] * (final[1:] - final[:-1])[:, None]
    )
    clearance = (
        (warpgeo.signed_distance(dense.reshape(-1, 3).double(), true_world) - args.radius).min().item()
    )
    before = (warpgeo.signed_distance(line.double(), true_world) - args.radius).min().item()
    free = clearance > 0
    print(f"initial cost {costs[0]:.5f}  final {costs[-1]:.5f}  (swept cost against the fused world)")
    print(
        f"collision-free in the true world: {'yes' if free else 'no'}  (clearance {clearance:+.4f} m; "
        f"the straight line: {before:+.4f} m)"
    )
    path = _plot(args.out, grid, true_world, line.cpu().numpy(), final.cpu().numpy(), costs, args.radius)
    print(f"saved {path}  ({time.perf_counter() - t0:.1f} s on {device})")
    return 0 if free else 1


def _plot(out: str, grid, true_world, initial, final, costs, radius) -> str:
    """ESDF slices of the fused grid with the true outline and the trajectories, and the cost per iteration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8), gridspec_kw={"width_ratios": [1.6, 1.6, 1.0]})
    (x0, y0, z0), (x1, y1, z1) = BOUNDS
    device = grid.device
    for ax, plane in zip(axes[:2], ("xy", "xz"), strict=True):
        if plane == "xy":
            a, b = np.meshgrid(np.linspace(x0, x1, 320), np.linspace(y0, y1, 200))
            pts = np.stack([a, b, np.full_like(a, START[2])], -1)
            extent, labels, cols = (x0, x1, y0, y1), ("x (m)", "y (m)"), (0, 1)
            title = f"fused ESDF, slice z = {START[2]:g} m"
        else:
            a, b = np.meshgrid(np.linspace(x0, x1, 320), np.linspace(z0, z1, 120))
            pts = np.stack([a, np.full_like(a, START[1]), b], -1)
            extent, labels, cols = (x0, x1, z0, z1), ("x (m)", "z (m)"), (0, 2)
            title = f"fused ESDF, slice y = {START[1]:g} m"
        flat = torch.from_numpy(pts.reshape(-1, 3)).to(device)
        fused = grid.query(flat.float()).distance.cpu().numpy().reshape(a.shape)
        truth = warpgeo.signed_distance(flat, true_world).cpu().numpy().reshape(a.shape)
        image = ax.imshow(fused, origin="lower", extent=extent, cmap="RdBu", vmin=-0.1, vmax=0.3)
        ax.contour(a, b, truth, levels=[0.0], colors="k", linewidths=1.5)
        ax.contour(a, b, fused, levels=[0.0], colors="orange", linewidths=1.0, linestyles="--")
        ax.plot(initial[:, cols[0]], initial[:, cols[1]], "o--", color="0.4", ms=3, label="straight line")
        ax.plot(
            final[:, cols[0]],
            final[:, cols[1]],
            "o-",
            color="green",
            ms=3,
            label=f"optimised (r = {radius:g})",
        )
        ax.set_title(title)
        ax.set_xlabel(labels[0])
        ax.set_ylabel(labels[1])
        ax.set_aspect("equal")
        fig.colorbar(image, ax=ax, fraction=0.03, label="signed distance (m)")
    axes[0].plot([], [], "k-", label="true outline")
    axes[0].plot([], [], "--", color="orange", label="fused zero level")
    axes[0].legend(loc="lower left", fontsize=8)
    axes[2].semilogy(np.maximum(costs, 1e-8))
    axes[2].set_title("swept cost (fused world)")
    axes[2].set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


if __name__ == "__main__":
    sys.exit(main())
