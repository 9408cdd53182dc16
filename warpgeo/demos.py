"""The demos behind ``warpgeo demo`` and ``examples/``: collision avoidance and farthest point sampling.

Each demo is a ``run_*`` function that returns its numbers (a dataclass) and a ``plot_*`` function that
writes a PNG. The command line and the example scripts both call these, so there is one copy of the code.
Plots use matplotlib's object API (``matplotlib.figure.Figure``, rendered by Agg), so they never open a
window and never touch pyplot's global state.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch

import warpgeo

__all__ = [
    "CollisionAvoidanceResult",
    "PointSamplingResult",
    "collision_scene",
    "plot_collision_avoidance",
    "plot_point_sampling",
    "run_collision_avoidance",
    "run_point_sampling",
    "sampling_mesh",
]


# --------------------------------------------------------------------------------------------------------
# collision avoidance
# --------------------------------------------------------------------------------------------------------

#: The trajectory runs along x in the plane z = 0, from START to GOAL.
START = (-2.2, 0.0, 0.0)
GOAL = (2.2, 0.0, 0.0)


def _yaw_pose(x: float, y: float, yaw_deg: float) -> list[float]:
    """A pose ``[x, y, z, qw, qx, qy, qz]`` at height 0, rotated ``yaw_deg`` about z."""
    half = math.radians(yaw_deg) / 2
    return [x, y, 0.0, math.cos(half), 0.0, 0.0, math.sin(half)]


def collision_scene(extra_mesh=None):
    """The obstacles of the collision-avoidance demo: meshes in their own frames, and their poses.

    Three trimesh primitives (a cylinder, a box turned 30° about z, a sphere) stand across the straight
    line from :data:`START` to :data:`GOAL`, each a little off the line so that the way around is clear.
    ``extra_mesh`` (a trimesh or a path trimesh can load) is centred, scaled to 0.5 across in x and y and
    put on the line too.

    Returns:
        ``(meshes, poses)``: a list of ``trimesh.Trimesh`` and a list of 7-element poses (world-from-mesh,
        ``[x, y, z, qw, qx, qy, qz]``).
    """
    import trimesh

    meshes = [
        trimesh.creation.cylinder(radius=0.35, height=1.5, sections=48),
        trimesh.creation.box(extents=(0.5, 0.5, 1.5)),
        trimesh.creation.icosphere(subdivisions=3, radius=0.4),
    ]
    poses = [_yaw_pose(-1.2, 0.06, 0.0), _yaw_pose(-0.3, -0.08, 30.0), _yaw_pose(0.6, 0.05, 0.0)]
    if extra_mesh is not None:
        mesh = extra_mesh if isinstance(extra_mesh, trimesh.Trimesh) else _load_mesh(extra_mesh)
        mesh = mesh.copy()
        mesh.apply_translation(-mesh.bounds.mean(axis=0))
        mesh.apply_scale(0.5 / max(float(mesh.extents[:2].max()), 1e-9))  # 0.5 across in the x-y plane
        meshes.append(mesh)
        poses.append(_yaw_pose(1.45, 0.03, 0.0))
    return meshes, poses


def _load_mesh(path: str | os.PathLike):
    import trimesh

    mesh = trimesh.load(os.fspath(path), force="mesh")
    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise ValueError(f"{os.fspath(path)!r} holds no triangle mesh")
    return mesh


@dataclass
class CollisionAvoidanceResult:
    """What :func:`run_collision_avoidance` returns. Arrays are numpy, float64."""

    initial: np.ndarray  #: (H, 3) waypoints before optimisation
    final: np.ndarray  #: (H, 3) waypoints after
    radius: float  #: sphere radius
    costs: list[float] = field(default_factory=list)  #: swept collision cost per iteration
    losses: list[float] = field(default_factory=list)  #: total objective per iteration
    clearances: list[float] = field(default_factory=list)  #: min signed distance - radius per iteration
    final_cost: float = math.nan  #: swept cost of the result with no activation margin (0 = collision-free)
    final_clearance: float = math.nan  #: min over waypoints of signed distance - radius, after
    collision_free: bool = False
    meshes: list = field(default_factory=list)
    poses: list = field(default_factory=list)
    device: str = "cpu"


def run_collision_avoidance(
    *,
    horizon: int = 40,
    iterations: int = 150,
    radius: float = 0.08,
    activation_distance: float = 0.05,
    sweep_steps: int = 4,
    smoothness: float = 0.05,
    lr: float = 0.03,
    extra_mesh=None,
    device: str | torch.device = "cpu",
    print_every: int = 0,
    progress: bool = False,
) -> CollisionAvoidanceResult:
    """Push a trajectory of one sphere out of collision by gradient descent on the swept collision cost.

    The trajectory is ``horizon`` waypoints on the straight line from :data:`START` to :data:`GOAL`, which
    crosses every obstacle of :func:`collision_scene`. The ends stay fixed; the inner waypoints move in the
    plane z = 0 (so the picture is exact) to minimise

        ``swept_sphere_mesh_cost(spheres).sum() + smoothness * sum ||x[h+1] - x[h]||^2 / segment^2``

    where ``segment`` is the straight line's step length: the smoothness term is 1 per segment for evenly
    spaced waypoints. The swept cost also scores ``sweep_steps`` spheres between consecutive waypoints,
    so the optimiser cannot leave a gap that jumps through a thin wall.

    Args:
        horizon: number of waypoints H (>= 3).
        iterations: Adam steps.
        radius: sphere radius (scene units; the obstacles are 0.7-0.8 across).
        activation_distance: cuRobo's η, the margin within which the cost starts to rise.
        sweep_steps: spheres scored between consecutive waypoints.
        smoothness: weight of the smoothness term.
        lr: Adam learning rate.
        extra_mesh: a mesh (trimesh or file path) to add to the scene.
        device: torch device for the trajectory and the world.
        print_every: print the cost every this many iterations (0: quiet).
        progress: show a tqdm progress bar.

    Returns:
        A :class:`CollisionAvoidanceResult`.
    """
    if horizon < 3:
        raise ValueError(f"horizon must be >= 3; got {horizon}")
    device = torch.device(device)
    meshes, poses = collision_scene(extra_mesh)
    sign_method = "ray" if all(m.is_watertight for m in meshes) else "winding"
    world = warpgeo.MeshWorld(meshes, poses=poses, device=str(device), sign_method=sign_method)

    dtype = torch.float32
    t = torch.linspace(0.0, 1.0, horizon, dtype=dtype, device=device)[:, None]
    start = torch.tensor(START, dtype=dtype, device=device)
    goal = torch.tensor(GOAL, dtype=dtype, device=device)
    line = start + t * (goal - start)  # (H, 3)
    segment = float(torch.linalg.norm(goal - start)) / (horizon - 1)
    inner_xy = line[1:-1, :2].clone().requires_grad_(True)
    optimiser = torch.optim.Adam([inner_xy], lr=lr)
    radii = torch.full((horizon, 1), radius, dtype=dtype, device=device)

    def spheres_of(xy: torch.Tensor) -> torch.Tensor:
        xyz = torch.cat([line[:1], torch.cat([xy, line[1:-1, 2:]], dim=1), line[-1:]], dim=0)
        return torch.cat([xyz, radii], dim=1).reshape(1, horizon, 1, 4)  # (B=1, H, N=1, 4)

    result = CollisionAvoidanceResult(
        initial=line.detach().cpu().double().numpy(),
        final=line.detach().cpu().double().numpy(),
        radius=radius,
        meshes=meshes,
        poses=poses,
        device=str(device),
    )
    bar = _progress(iterations, "collision avoidance", enabled=progress)
    for it in range(iterations + 1):
        spheres = spheres_of(inner_xy)
        cost = warpgeo.swept_sphere_mesh_cost(
            spheres, world, sweep_steps=sweep_steps, activation_distance=activation_distance
        ).sum()
        xyz = spheres[0, :, 0, :3]
        smooth = (xyz[1:] - xyz[:-1]).square().sum() / segment**2
        loss = cost + smoothness * smooth
        with torch.no_grad():
            clearance = float((warpgeo.signed_distance(xyz, world) - radius).min())
        result.costs.append(cost.item())
        result.losses.append(loss.item())
        result.clearances.append(clearance)
        if print_every and (it % print_every == 0 or it == iterations):
            print(
                f"iter {it:4d}  cost {float(cost):10.5f}  loss {float(loss):10.5f}  clearance {clearance:+.4f}"
            )
        if it == iterations:
            break
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        bar.update(1)
        bar.set_postfix(cost=f"{result.costs[-1]:.4f}")
    bar.close()

    with torch.no_grad():
        spheres = spheres_of(inner_xy)
        final_cost = warpgeo.swept_sphere_mesh_cost(spheres, world, sweep_steps=sweep_steps).sum()
        xyz = spheres[0, :, 0, :3]
        result.final = xyz.cpu().double().numpy()
        result.final_cost = final_cost.item()
        result.final_clearance = float((warpgeo.signed_distance(xyz, world) - radius).min())
    result.collision_free = result.final_cost == 0.0 and result.final_clearance > 0.0
    return result


def plot_collision_avoidance(
    result: CollisionAvoidanceResult, path: str | os.PathLike, *, dpi: int = 110
) -> str:
    """Write the before / after trajectories over the signed-distance slice z = 0, and the cost curve.

    Returns:
        The path written.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle

    world = warpgeo.MeshWorld(result.meshes, poses=result.poses, device=result.device)
    xs = np.linspace(-2.6, 2.6, 261)
    ys = np.linspace(-1.3, 1.3, 131)
    gx, gy = np.meshgrid(xs, ys)
    grid = torch.tensor(
        np.stack([gx, gy, np.zeros_like(gx)], axis=-1), dtype=torch.float32, device=result.device
    )
    with torch.no_grad():
        sd = warpgeo.signed_distance(grid, world).cpu().numpy()

    from matplotlib.colors import TwoSlopeNorm

    fig = Figure(figsize=(13, 4.2), layout="constrained")
    axes = fig.subplots(1, 3, width_ratios=[1, 1, 0.8])
    # Separate scales either side of 0, so the shallow insides show as clearly as the wide outside.
    norm = TwoSlopeNorm(vcenter=0.0, vmin=min(float(sd.min()), -1e-3), vmax=max(float(sd.max()), 1e-3))
    for ax, traj, title in (
        (axes[0], result.initial, "before: straight line, in collision"),
        (axes[1], result.final, "after: gradient descent on the swept cost"),
    ):
        image = ax.pcolormesh(xs, ys, sd, cmap="RdBu", norm=norm, shading="auto")
        ax.contour(xs, ys, sd, levels=[0.0], colors="k", linewidths=1.2)
        if traj is result.final:
            ax.plot(result.initial[:, 0], result.initial[:, 1], "--", color="0.4", lw=0.8)
        ax.plot(traj[:, 0], traj[:, 1], "-", color="0.15", lw=1)
        for x, y in traj[:, :2]:
            ax.add_patch(Circle((x, y), result.radius, fill=False, color="#e6550d", lw=0.8))
        ax.set_aspect("equal")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
    fig.colorbar(image, ax=axes[:2], shrink=0.8, label="signed distance at z = 0 (negative inside)")

    ax = axes[2]
    iters = np.arange(len(result.costs))
    ax.semilogy(iters, np.maximum(result.costs, 1e-6), label="swept collision cost")
    ax.semilogy(iters, np.maximum(result.losses, 1e-6), label="cost + smoothness")
    ax.set_xlabel("iteration")
    ax.set_title("objective", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=dpi)
    return os.fspath(path)


# --------------------------------------------------------------------------------------------------------
# farthest point sampling
# --------------------------------------------------------------------------------------------------------


def sampling_mesh():
    """The default mesh of the sampling demo: a torus (1.0 / 0.3) — a surface with a hole, easy to read."""
    import trimesh

    return trimesh.creation.torus(major_radius=1.0, minor_radius=0.3, major_sections=96, minor_sections=48)


@dataclass
class PointSamplingResult:
    """What :func:`run_point_sampling` returns. Arrays are numpy."""

    dense: np.ndarray  #: (N, 3) surface samples
    fps_points: np.ndarray  #: (K_show, 3) FPS samples gathered with warpgeo.gather_points
    random_points: np.ndarray  #: (K_show, 3) uniformly random samples
    ks: list[int] = field(default_factory=list)  #: K values compared
    fps_radius: list[float] = field(default_factory=list)  #: coverage radius of FPS at each K
    random_radius: list[float] = field(default_factory=list)  #: coverage radius of random sampling
    fps_curve: np.ndarray | None = None  #: (K_max,) FPS coverage radius for every K = 1..K_max


def _coverage_radius(dense: torch.Tensor, chosen: torch.Tensor, chunk: int = 8192) -> float:
    """max over the dense points of the distance to the nearest chosen point."""
    worst = 0.0
    for part in dense.split(chunk):
        worst = max(worst, float(torch.cdist(part, chosen).min(dim=1).values.max()))
    return worst


def run_point_sampling(
    *,
    mesh=None,
    num_surface: int = 20000,
    max_k: int = 1024,
    show_k: int = 256,
    seed: int = 0,
    device: str | torch.device = "cpu",
    print_table: bool = False,
) -> PointSamplingResult:
    """Sample a mesh surface densely, run FPS to ``max_k`` points, compare coverage with random sampling.

    The coverage radius of a subset is the largest distance from any dense sample to its nearest chosen
    point. For FPS it comes for free: the distance FPS reports for sample ``k`` (its distance to the ``k``
    samples before it) is the coverage radius of those ``k`` samples, because FPS picks the worst-covered
    point next. For random subsets it is computed by brute force.

    Args:
        mesh: a trimesh or a path trimesh can load; :func:`sampling_mesh` by default.
        num_surface: dense surface samples N (trimesh, area-uniform).
        max_k: the largest K compared.
        show_k: the K shown in the scatter plots.
        seed: seeds the surface sampling and the random subsets.
        device: torch device.
        print_table: print K, FPS radius, random radius.

    Returns:
        A :class:`PointSamplingResult`.
    """
    import trimesh

    if mesh is None:
        mesh = sampling_mesh()
    elif not isinstance(mesh, trimesh.Trimesh):
        mesh = _load_mesh(mesh)
    if not 1 <= show_k <= max_k < num_surface:
        raise ValueError(f"need 1 <= show_k <= max_k < num_surface; got {show_k}, {max_k}, {num_surface}")
    device = torch.device(device)
    dense_np, _ = trimesh.sample.sample_surface(mesh, num_surface, seed=seed)
    dense = torch.tensor(dense_np, dtype=torch.float32, device=device)

    # K_max + 1 samples: the distance of sample k is the coverage radius of samples 0..k-1.
    idx, dist = warpgeo.farthest_point_sampling(dense, max_k + 1, return_distances=True)
    fps_curve = dist[1:].double().cpu().numpy()
    # gather_points wants features (B, C, N): the coordinates are 3 feature channels.
    fps_show = warpgeo.gather_points(dense.T[None], idx[None, :show_k])[0].T

    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(num_surface, generator=generator).to(device)
    ks = sorted({k for k in (2**i for i in range(3, 20)) if k <= max_k} | {max_k})
    result = PointSamplingResult(
        dense=dense_np,
        fps_points=fps_show.cpu().numpy(),
        random_points=dense[order[:show_k]].cpu().numpy(),
        fps_curve=fps_curve,
    )
    if print_table:
        print(f"{'K':>6}  {'FPS radius':>10}  {'random radius':>13}  {'random / FPS':>12}")
    for k in ks:
        fps_r = float(fps_curve[k - 1])
        rnd_r = _coverage_radius(dense, dense[order[:k]])
        result.ks.append(k)
        result.fps_radius.append(fps_r)
        result.random_radius.append(rnd_r)
        if print_table:
            print(f"{k:6d}  {fps_r:10.4f}  {rnd_r:13.4f}  {rnd_r / fps_r:12.2f}")
    return result


def plot_point_sampling(result: PointSamplingResult, path: str | os.PathLike, *, dpi: int = 110) -> str:
    """Write FPS samples vs random samples on the surface, and coverage radius vs K.

    Returns:
        The path written.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 4.3), layout="constrained")
    k_show = len(result.fps_points)
    rng = np.random.default_rng(0)
    background = result.dense[rng.choice(len(result.dense), min(4000, len(result.dense)), replace=False)]
    panels = (
        (result.fps_points, "C0", f"farthest point sampling, K = {k_show}"),
        (result.random_points, "C1", f"random, K = {k_show}"),
    )
    for col, (points, colour, title) in enumerate(panels):
        ax = fig.add_subplot(1, 3, col + 1, projection="3d")
        ax.scatter(*background.T, s=0.5, c="0.82", depthshade=False)
        ax.scatter(*points.T, s=7, c=colour, depthshade=False)
        ax.set_title(title, fontsize=10)
        ax.view_init(elev=40, azim=-60)
        ax.set_box_aspect(np.ptp(result.dense, axis=0) + 1e-9)
        ax.set_axis_off()

    ax = fig.add_subplot(1, 3, 3)
    k_all = np.arange(1, len(result.fps_curve) + 1)
    ax.loglog(k_all, result.fps_curve, label="FPS")
    ax.loglog(result.ks, result.random_radius, "o-", label="random")
    ax.loglog(result.ks, result.fps_radius, "s", color="C0", ms=4)
    ax.set_xlabel("K (samples)")
    ax.set_ylabel("coverage radius")
    ax.set_title("coverage radius vs K (lower is better)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=dpi)
    return os.fspath(path)


# --------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str, *, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    # disable=None: no bar when stderr is not a terminal (logs, CI).
    return tqdm(total=total, desc=desc, unit="it", leave=False, disable=None)
