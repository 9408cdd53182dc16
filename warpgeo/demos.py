"""Scenes, runs and pictures behind ``warpgeo demo`` and the scripts in ``examples/``.

Nothing in warpgeo's ops imports this module. It holds what the demo command needs in an installed package
(the scenes, the two ``run_*`` demos, their pictures) and the plotting helpers the example scripts share;
the examples call the warpgeo ops themselves. The pictures need matplotlib, the optional ``demo`` extra
(``python3 -m pip install "warpgeo[demo]"``); :func:`matplotlib_missing` says so in one line. Plots use
matplotlib's object API (``matplotlib.figure.Figure``, rendered by Agg): no window, no pyplot state.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import warpgeo

__all__ = [
    "ARM_GOAL",
    "ARM_START",
    "DEMO_INSTALL",
    "GOAL",
    "START",
    "ArmTrajectoryResult",
    "CollisionAvoidanceResult",
    "PointSamplingResult",
    "arm_robot",
    "arm_scene",
    "collision_scene",
    "coverage_radius",
    "matplotlib_missing",
    "plot_arm_trajectory",
    "plot_collision_avoidance",
    "plot_point_sampling",
    "require_device",
    "require_matplotlib",
    "run_arm_trajectory",
    "run_collision_avoidance",
    "run_point_sampling",
    "sampling_ks",
    "sampling_mesh",
    "urdf_reader_missing",
]

#: What to run when matplotlib is missing.
DEMO_INSTALL = 'python3 -m pip install "warpgeo[demo]"'


def matplotlib_missing(what: str) -> str | None:
    """A one-line hint naming the ``demo`` extra if matplotlib cannot be imported, else ``None``."""
    if importlib.util.find_spec("matplotlib") is not None:
        return None
    return f"{what} draws its pictures with matplotlib, which is not installed; run: {DEMO_INSTALL}"


def require_matplotlib(what: str) -> None:
    """Exit with :func:`matplotlib_missing`'s one-line hint (on stderr, exit code 1) if matplotlib is missing."""
    hint = matplotlib_missing(what)
    if hint is not None:
        raise SystemExit(f"{what}: error: {hint}")


def require_device(name: str, what: str) -> torch.device:
    """An example's ``--device`` as a torch device, or exit as the ``warpgeo`` command does: one line on
    stderr (``what: error: --device ...``) and exit code 2, for a name that is not a device, a device type
    warpgeo does not run on, CUDA on a machine without it, or a CUDA index it does not have."""
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None:
        problem = "is not a device (try cpu, cuda, cuda:0)"
    elif device.type not in ("cpu", "cuda"):
        problem = "warpgeo runs on cpu and cuda only"
    elif device.type == "cuda" and not torch.cuda.is_available():
        problem = "CUDA is not available on this machine"
    elif device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        problem = f"this machine has {count} CUDA device{'s' if count != 1 else ''}"
    else:
        return device
    print(f"{what}: error: --device {name}: {problem}", file=sys.stderr)
    raise SystemExit(2)


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

    Three trimesh primitives (a cylinder, a box turned 30° about z, a sphere), centred on the plane z = 0,
    stand across the straight line from :data:`START` to :data:`GOAL`, each a little off the line so that
    the way around is clear. ``extra_mesh`` (a trimesh or a path trimesh can load) is centred, turned so
    that its thinnest side faces the path (its thinnest axis along y: a flat mesh such as a torus stands
    on edge, so the path is not caught in a hole of the slice z = 0), scaled to 0.5 across in x and y and
    put on the line too.

    Raises:
        ValueError: ``extra_mesh`` cannot be read or holds no triangles.

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
        thinnest = int(np.argmin(mesh.extents))
        if thinnest != 1:  # a quarter turn about the third axis takes the thinnest axis onto y
            about = [0.0, 0.0, 1.0] if thinnest == 0 else [1.0, 0.0, 0.0]
            mesh.apply_transform(trimesh.transformations.rotation_matrix(math.pi / 2, about))
        mesh.apply_scale(0.5 / max(float(mesh.extents[:2].max()), 1e-9))  # 0.5 across in the x-y plane
        meshes.append(mesh)
        poses.append(_yaw_pose(1.45, 0.03, 0.0))
    return meshes, poses


def _load_mesh(path: str | os.PathLike):
    """A ``trimesh.Trimesh`` from a file; ValueError with one line saying why not."""
    import trimesh

    name = os.fspath(path)
    if not os.path.isfile(name):
        raise ValueError(f"{name!r}: no such file")
    try:
        mesh = trimesh.load(name, force="mesh")
    except Exception as exc:  # trimesh raises many kinds for a file it cannot read
        raise ValueError(f"{name!r}: trimesh cannot read it ({type(exc).__name__}: {exc})") from None
    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise ValueError(f"{name!r} holds no triangle mesh")
    return mesh


@dataclass
class CollisionAvoidanceResult:
    """A run of the collision-avoidance demo, as :func:`plot_collision_avoidance` draws it. Arrays: numpy."""

    world: warpgeo.MeshWorld  #: the obstacles
    initial: np.ndarray  #: (H, 3) waypoint centres before optimisation
    final: np.ndarray  #: (H, 3) waypoint centres after
    radius: float  #: sphere radius (fixed: only the centres are optimised)
    activation_distance: float  #: cuRobo's η: the cost is > 0 within η of a surface
    costs: list[float] = field(default_factory=list)  #: swept collision cost (with η) per iteration
    losses: list[float] = field(default_factory=list)  #: cost + smoothness per iteration
    clearances: list[float] = field(default_factory=list)  #: min over waypoints of signed distance - radius
    final_cost: float = math.nan  #: swept cost of the result with η = 0 (0: no sphere touches a mesh)
    final_clearance: float = math.nan  #: clearances of the result
    collision_free: bool = False


def run_collision_avoidance(
    *,
    horizon: int = 40,
    iterations: int = 150,
    radius: float = 0.08,
    activation_distance: float = 0.05,
    sweep_steps: int = 4,
    smoothness: float = 0.02,
    lr: float = 0.03,
    extra_mesh=None,
    device: str | torch.device = "cpu",
    progress: bool = False,
) -> CollisionAvoidanceResult:
    """Push a sphere's trajectory out of collision by gradient descent on the swept collision cost.

    The trajectory is ``horizon`` waypoints on the straight line from :data:`START` to :data:`GOAL`, which
    crosses every obstacle of :func:`collision_scene`. The ends stay fixed; Adam moves the inner waypoints'
    centres in the plane z = 0 (never the radius) to minimise

        ``swept_sphere_mesh_cost(spheres).sum() + smoothness * sum ||x[h+1] - x[h]||^2 / segment^2``

    where ``segment`` is the straight line's step length. ``examples/collision_avoidance.py`` is the same
    loop written out in a script.

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

    t = torch.linspace(0.0, 1.0, horizon, device=device)[:, None]
    start, goal = torch.tensor(START, device=device), torch.tensor(GOAL, device=device)
    line = start + t * (goal - start)  # (H, 3)
    segment = float(torch.linalg.norm(goal - start)) / (horizon - 1)
    # Centres only: with the radius in the optimiser, shrinking a sphere below 0 (disabled: cost 0) wins.
    # They move in the plane z = 0, the plane the picture shows.
    centres_xy = line[1:-1, :2].clone().requires_grad_()
    z = line[1:-1, 2:]
    radii = torch.full((horizon, 1), radius, device=device)
    optimiser = torch.optim.Adam([centres_xy], lr=lr)

    result = CollisionAvoidanceResult(
        world=world,
        initial=line.cpu().double().numpy(),
        final=line.cpu().double().numpy(),
        radius=radius,
        activation_distance=activation_distance,
    )
    bar = _progress(iterations, "collision avoidance", enabled=progress)
    for it in range(iterations + 1):
        xyz = torch.cat([line[:1], torch.cat([centres_xy, z], dim=1), line[-1:]])  # (H, 3)
        spheres = torch.cat([xyz, radii], dim=1).reshape(1, horizon, 1, 4)  # (B=1, H, N=1, 4)
        cost = warpgeo.swept_sphere_mesh_cost(
            spheres, world, sweep_steps=sweep_steps, activation_distance=activation_distance
        ).sum()
        loss = cost + smoothness * (xyz[1:] - xyz[:-1]).square().sum() / segment**2
        with torch.no_grad():
            result.clearances.append((warpgeo.signed_distance(xyz, world) - radius).min().item())
        result.costs.append(cost.item())
        result.losses.append(loss.item())
        if it == iterations:
            break
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        bar.update(1)
    bar.close()

    with torch.no_grad():
        result.final = xyz.detach().cpu().double().numpy()
        result.final_cost = (
            warpgeo.swept_sphere_mesh_cost(spheres, world, sweep_steps=sweep_steps).sum().item()
        )
    result.final_clearance = result.clearances[-1]
    result.collision_free = result.final_cost == 0.0 and result.final_clearance > 0.0
    return result


def _signed_distance_ticks(vmin: float, vmax: float) -> list[float]:
    """Colour-bar ticks with both signs: 0, two inside (negative) and a few outside (positive)."""
    from matplotlib.ticker import MaxNLocator

    # Round steps on each side (the two sides have their own scales), none beyond the bar's ends (a tick
    # there breaks the layout); vmin < 0 <= vmax.
    inside = [float(v) for v in MaxNLocator(4, steps=[1, 2, 5, 10]).tick_values(vmin, 0.0) if vmin <= v < 0]
    outside = [float(v) for v in MaxNLocator(4, steps=[1, 2, 5, 10]).tick_values(0.0, vmax) if 0 < v <= vmax]
    return [*inside, 0.0, *outside]


def plot_collision_avoidance(
    result: CollisionAvoidanceResult, path: str | os.PathLike, *, dpi: int = 110
) -> str:
    """Write the trajectories before / after over the signed-distance slice z = 0, the objective and the
    clearance per iteration.

    Returns:
        The path written.
    """
    from matplotlib.colors import TwoSlopeNorm
    from matplotlib.figure import Figure
    from matplotlib.patches import Circle

    xs = np.linspace(-2.6, 2.6, 261)
    ys = np.linspace(-1.3, 1.3, 131)
    gx, gy = np.meshgrid(xs, ys)
    grid = np.stack([gx, gy, np.zeros_like(gx)], axis=-1)
    with torch.no_grad():
        sd = warpgeo.signed_distance(
            torch.tensor(grid, dtype=torch.float32, device=result.world.device), result.world
        )
    sd = sd.cpu().numpy()

    fig = Figure(figsize=(12, 7.4), layout="constrained")
    fig.suptitle(
        "Collision avoidance: Adam on warpgeo.swept_sphere_mesh_cost moves the centres of a sphere's "
        f"waypoints (radius {result.radius:g}, fixed)",
        fontsize=11,
    )
    axes = fig.subplots(2, 2, height_ratios=[1.0, 0.8])
    # Separate scales either side of 0, so the shallow insides show as clearly as the wide outside.
    vmin, vmax = min(float(sd.min()), -1e-3), max(float(sd.max()), 1e-3)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=vmin, vmax=vmax)
    for ax, traj, title in (
        (
            axes[0, 0],
            result.initial,
            f"before: the straight line, through {result.world.max_meshes} obstacles",
        ),
        (axes[0, 1], result.final, "after: the optimised trajectory (dashed: before)"),
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
    axes[0, 0].text(
        0.02, 0.03, "orange: the sphere at each waypoint; black: obstacle outlines",
        transform=axes[0, 0].transAxes, fontsize=8,
    )  # fmt: skip
    bar = fig.colorbar(image, ax=axes[0, :], shrink=0.9, aspect=25)
    bar.set_ticks(_signed_distance_ticks(vmin, vmax))
    bar.set_label("signed distance in the plane z = 0 (negative inside)")

    iters = np.arange(len(result.costs))
    eta = result.activation_distance
    ax = axes[1, 0]
    ax.semilogy(iters, np.maximum(result.losses, 1e-6), label="objective = cost + smoothness")
    ax.semilogy(iters, np.maximum(result.costs, 1e-6), label=f"swept collision cost (η = {eta:g})")
    ax.set_xlabel("iteration")
    ax.set_ylabel("value (log scale)")
    ax.set_title(
        f"objective; the cost is > 0 while a sphere is within η = {eta:g} of a surface,\n"
        "so it levels off above 0 once the path is clear",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[1, 1]
    ax.plot(iters, result.clearances, color="C2", label="clearance")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.axhline(eta, color="0.5", lw=0.8, ls="--", label=f"η = {eta:g}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("clearance (scene units)")
    ax.set_title(
        "clearance = min over waypoints of (signed distance − radius);\nbelow 0: a sphere is in collision",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="lower right")
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


def coverage_radius(dense: torch.Tensor, chosen: torch.Tensor, chunk: int = 8192) -> float:
    """The coverage radius of ``chosen (K, 3)`` over ``dense (N, 3)``: max over the dense points of the
    distance to the nearest chosen point (brute force, in chunks of ``chunk`` dense points)."""
    worst = 0.0
    for part in dense.split(chunk):
        worst = max(worst, torch.cdist(part, chosen).min(dim=1).values.max().item())
    return worst


@dataclass
class PointSamplingResult:
    """FPS against random sampling of a surface, as :func:`plot_point_sampling` draws it. Arrays: numpy."""

    dense: np.ndarray  #: (N, 3) surface samples
    fps_points: np.ndarray  #: (K_show, 3) FPS samples
    random_points: np.ndarray  #: (K_show, 3) uniformly random samples
    fps_curve: np.ndarray  #: (K_max,) FPS coverage radius for every K = 1..K_max
    ks: list[int] = field(default_factory=list)  #: K values where random sampling is scored
    random_radius: list[float] = field(default_factory=list)  #: its coverage radius at each of ks
    name: str = "a mesh"  #: what was sampled, for the title ("a torus", "bunny.obj")

    @property
    def fps_radius(self) -> list[float]:
        """FPS coverage radius at each of :attr:`ks`."""
        return [float(self.fps_curve[k - 1]) for k in self.ks]


def sampling_ks(max_k: int) -> list[int]:
    """K = 8, 16, 32, ... up to ``max_k``, and ``max_k`` itself."""
    return sorted({k for k in (2**i for i in range(3, 40)) if k <= max_k} | {max_k})


def run_point_sampling(
    *,
    mesh=None,
    num_surface: int = 20000,
    max_k: int = 1024,
    show_k: int = 256,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> PointSamplingResult:
    """Sample a mesh surface densely, run FPS to ``max_k`` points, compare coverage with random sampling.

    The coverage radius of a subset is the largest distance from any dense sample to its nearest chosen
    point. FPS reports it for free (``return_distances=True``: the distance of pick ``k`` to the picks
    before it is the coverage radius of those ``k``, because FPS picks the worst-covered point next).
    Random subsets are scored by brute force. ``examples/point_sampling.py`` is the same written out.

    Args:
        mesh: a trimesh or a path trimesh can load; :func:`sampling_mesh` by default.
        num_surface: dense surface samples N (trimesh, area-uniform).
        max_k: the largest K compared.
        show_k: the K shown in the scatter plots.
        seed: seeds the surface sampling and the random subsets.
        device: torch device.

    Returns:
        A :class:`PointSamplingResult`.
    """
    import trimesh

    if mesh is None:
        mesh, name = sampling_mesh(), "a torus"
    elif not isinstance(mesh, trimesh.Trimesh):
        mesh, name = _load_mesh(mesh), os.path.basename(os.fspath(mesh))
    else:
        name = "a mesh"
    if not 1 <= show_k <= max_k < num_surface:
        raise ValueError(f"need 1 <= show_k <= max_k < num_surface; got {show_k}, {max_k}, {num_surface}")
    dense_np, _ = trimesh.sample.sample_surface(mesh, num_surface, seed=seed)
    dense = torch.tensor(dense_np, dtype=torch.float32, device=device)

    idx, dist = warpgeo.farthest_point_sampling(dense, max_k + 1, return_distances=True)
    order = torch.randperm(num_surface, generator=torch.Generator().manual_seed(seed)).to(dense.device)
    ks = sampling_ks(max_k)
    return PointSamplingResult(
        dense=dense_np,
        fps_points=dense[idx[:show_k]].cpu().numpy(),
        random_points=dense[order[:show_k]].cpu().numpy(),
        fps_curve=dist[1:].double().cpu().numpy(),
        ks=ks,
        random_radius=[coverage_radius(dense, dense[order[:k]]) for k in ks],
        name=name,
    )


def plot_point_sampling(result: PointSamplingResult, path: str | os.PathLike, *, dpi: int = 110) -> str:
    """Write FPS samples vs random samples on the surface, and coverage radius vs K.

    Returns:
        The path written.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, FormatStrFormatter, LogLocator, NullLocator, ScalarFormatter

    fig = Figure(figsize=(13, 4.8), layout="constrained")
    fig.suptitle(
        "Farthest point sampling (warpgeo.farthest_point_sampling) vs random sampling of "
        f"{len(result.dense)} samples on the surface of {result.name}\ncoverage radius = the largest "
        "distance from any surface sample to its nearest chosen point (lower: no big gaps)",
        fontsize=10.5,
    )
    k_show = len(result.fps_points)
    rng = np.random.default_rng(0)
    background = result.dense[rng.choice(len(result.dense), min(4000, len(result.dense)), replace=False)]
    panels = (
        (result.fps_points, "C0", f"farthest point sampling, K = {k_show}"),
        (result.random_points, "C1", f"random, K = {k_show}"),
    )
    for col, (points, colour, title) in enumerate(panels):
        ax = fig.add_subplot(1, 3, col + 1, projection="3d")
        ax.scatter(*background.T, s=0.5, c="0.82", depthshade=False, label="the surface (dense samples)")
        ax.scatter(*points.T, s=7, c=colour, depthshade=False, label="chosen samples")
        ax.set_title(title, fontsize=10)
        ax.legend(
            fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.04), ncol=2, frameon=False, markerscale=2
        )
        ax.view_init(elev=40, azim=-60)
        ax.set_box_aspect(np.ptp(result.dense, axis=0) + 1e-9)
        ax.set_axis_off()

    ax = fig.add_subplot(1, 3, 3)
    k_all = np.arange(1, len(result.fps_curve) + 1)
    ks = np.asarray(result.ks)
    ax.plot(
        k_all,
        result.fps_curve,
        "-s",
        color="C0",
        ms=4,
        markevery=list(ks - 1),
        label="farthest point sampling (its own distances: one call, every K)",
    )
    ax.plot(
        ks,
        result.random_radius,
        "-o",
        color="C1",
        ms=4,
        label="random sampling (measured against every sample)",
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    # the whole FPS curve, from K = 1: ticks at the powers of two below the first scored K, then at those
    ax.xaxis.set_major_locator(FixedLocator([k for k in (1, 2, 4) if k < ks[0]] + list(ks)))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_xlim(1 / 1.3, ks[-1] * 1.3)
    finite = result.fps_curve[np.isfinite(result.fps_curve)]
    ax.set_ylim(
        min(result.fps_curve[ks[-1] - 1], *result.random_radius) / 1.3,
        max(float(finite.max()), *result.random_radius) * 1.3,
    )
    ax.set_xlabel("K (number of chosen samples)")
    ax.set_ylabel("coverage radius (scene units)")
    ax.set_title("coverage radius vs K (lower is better)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=dpi)
    return os.fspath(path)


# --------------------------------------------------------------------------------------------------------
# a 7-DoF arm's trajectories around an obstacle (examples/arm_trajectory.py, smaller)
# --------------------------------------------------------------------------------------------------------

#: The arm demo's start and goal configurations (rad): the arm swings from its left to its right, the hand
#: low over the table, through a torus standing in its way (as ``examples/arm_trajectory.py``).
ARM_START = (-1.1, 0.55, 0.0, -1.9, 0.0, 2.4, 0.8)
ARM_GOAL = (1.1, 0.55, 0.0, -1.9, 0.0, 2.4, 0.8)
#: The arm demo's objective: weights of the world and self costs, smoothness, joint limits; the world cost's
#: activation distance (m) and its samples between waypoints.
_ARM_WEIGHTS = {"world": 100.0, "self": 100.0, "smooth": 1.0, "limits": 100.0}
_ARM_ACTIVATION = 0.05
_ARM_SWEEP = 4


def urdf_reader_missing(what: str) -> str | None:
    """A one-line hint naming the extras if yourdfpy (the arm demo's URDF reader) is missing, else ``None``."""
    if importlib.util.find_spec("yourdfpy") is not None:
        return None
    return f"{what} reads the arm's URDF with yourdfpy, which is not installed; run: {DEMO_INSTALL}"


def arm_robot(device: torch.device | str = "cpu") -> warpgeo.Robot:
    """The demo's 7-DoF arm: warpgeo's own URDF (a Franka-like arm's kinematics, ``warpgeo/data/arm7.urdf``,
    a copy of ``examples/data/``'s) and its 62 collision spheres, the gripper held 4 cm open."""
    data = importlib.resources.files("warpgeo") / "data"
    model = json.loads((data / "arm7_spheres.json").read_text(encoding="utf-8"))
    return warpgeo.Robot.from_urdf(
        (data / "arm7.urdf").read_text(encoding="utf-8"),
        spheres=model["spheres"],
        lock_joints={"arm_finger_joint1": 0.04},
        self_collision_ignore=model["self_collision_ignore"],
        device=device,
    )


def arm_scene(device: torch.device | str = "cpu"):
    """``(world, torus, poses)``: a table (a :class:`warpgeo.Cuboid`) and a torus mesh 30 cm across standing
    on it across the arm's way (its axis along x, facing the arm); ``poses``: ``{name: [x, y, z, qw, qx, qy,
    qz]}``."""
    import trimesh

    torus = trimesh.creation.torus(major_radius=0.11, minor_radius=0.04, major_sections=48, minor_sections=16)
    poses = {
        "table": [0.55, 0.0, -0.025, 1.0, 0.0, 0.0, 0.0],
        "torus": [0.5, 0.0, 0.2, math.sqrt(0.5), 0.0, math.sqrt(0.5), 0.0],
    }
    world = warpgeo.MeshWorld(
        {"table": warpgeo.Cuboid([0.7, 1.4, 0.05]), "torus": torus}, poses=poses, device=device
    )
    return world, torus, poses


@dataclass
class ArmTrajectoryResult:
    """The arm demo's run, as :func:`plot_arm_trajectory` draws it. Arrays: numpy."""

    spheres: np.ndarray  #: (H, S, 4) the arm's spheres along the drawn trajectory, after
    hand_before: np.ndarray  #: (B, H, 3) the hand's path of every trajectory before
    hand_after: np.ndarray  #: (B, H, 3) and after
    costs: list[dict[str, float]]  #: per Adam step, each term's mean over the trajectories
    free_before: np.ndarray  #: (B,) bool: collision-free before (every waypoint, swept, no self-collision)
    free_after: np.ndarray  #: (B,) bool: and after
    drawn: int  #: the trajectory drawn (the first collision-free one after, else 0)
    torus: Any = None  #: the obstacle's mesh (trimesh), in its own frame
    poses: dict = field(default_factory=dict)  #: the world's poses


def _arm_costs(robot: warpgeo.Robot, world: warpgeo.MeshWorld, q: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per trajectory (B,): the arm against the world (swept between waypoints), against itself, smoothness
    (squared joint steps) and joint limits (squared excess)."""
    spheres = robot.spheres(q)
    world_cost = warpgeo.swept_sphere_mesh_cost(
        spheres, world, sweep_steps=_ARM_SWEEP, activation_distance=_ARM_ACTIVATION
    ).sum((1, 2))
    self_cost = warpgeo.self_collision_cost(spheres, robot.pairs, margin=robot.self_margin).sum(1)
    smooth = (q[:, 1:] - q[:, :-1]).pow(2).sum((1, 2))
    limits = robot.joint_limits.to(q)
    excess = torch.relu(limits[:, 0] - q) + torch.relu(q - limits[:, 1])
    return {"world": world_cost, "self": self_cost, "smooth": smooth, "limits": excess.pow(2).sum((1, 2))}


def _arm_free(robot: warpgeo.Robot, world: warpgeo.MeshWorld, q: torch.Tensor) -> torch.Tensor:
    """(B,) bool: no sphere in the world at any waypoint or swept sample, no self-collision (no margin)."""
    with torch.no_grad():
        spheres = robot.spheres(q)
        hit = warpgeo.swept_sphere_mesh_cost(spheres, world, sweep_steps=_ARM_SWEEP).sum((1, 2)) > 0
        hit |= warpgeo.self_collision_cost(spheres, robot.pairs).amax(1) > 0
    return ~hit


def run_arm_trajectory(
    *,
    trajectories: int = 8,
    waypoints: int = 24,
    steps: int = 150,
    lr: float = 0.03,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> ArmTrajectoryResult:
    """B joint-space trajectories of H waypoints, straight lines from :data:`ARM_START` to :data:`ARM_GOAL`
    (the inner waypoints jittered by 0.05 rad, seed 0) through the torus of :func:`arm_scene`, optimised all
    at once by Adam on the inner waypoints' joint angles: the world and self costs (weight 100 each), joint
    steps squared (1), joint limits' excess squared (100). Needs yourdfpy (:func:`urdf_reader_missing`)."""
    robot = arm_robot(device)
    world, torus, poses = arm_scene(device)
    t = torch.linspace(0, 1, waypoints, dtype=torch.float32)[:, None]
    line = torch.tensor(ARM_START) * (1 - t) + torch.tensor(ARM_GOAL) * t
    jitter = 0.05 * torch.randn(trajectories, waypoints, 7, generator=torch.Generator().manual_seed(0))
    jitter[:, 0] = jitter[:, -1] = 0.0
    start = (line + jitter).to(device)
    inner = start[:, 1:-1].clone().requires_grad_(True)
    optimiser = torch.optim.Adam([inner], lr=lr)
    history: list[dict[str, float]] = []
    bar = _progress(steps, "arm", enabled=progress)
    for step in range(steps + 1):
        q = torch.cat([start[:, :1], inner, start[:, -1:]], dim=1)
        terms = _arm_costs(robot, world, q)
        history.append({k: v.mean().item() for k, v in terms.items()})
        if step == steps:
            break
        total = sum(_ARM_WEIGHTS[k] * v for k, v in terms.items())
        optimiser.zero_grad()
        total.sum().backward()
        optimiser.step()
        bar.update()
    bar.close()
    final = torch.cat([start[:, :1], inner.detach(), start[:, -1:]], dim=1)
    before, after = _arm_free(robot, world, start), _arm_free(robot, world, final)
    drawn = int(torch.nonzero(after)[0]) if bool(after.any()) else 0
    hand = robot.link_names.index("arm_hand")
    with torch.no_grad():
        return ArmTrajectoryResult(
            spheres=robot.spheres(final[drawn]).cpu().numpy(),
            hand_before=robot.link_poses(start)[..., hand, :3].cpu().numpy(),
            hand_after=robot.link_poses(final)[..., hand, :3].cpu().numpy(),
            costs=history,
            free_before=before.cpu().numpy(),
            free_after=after.cpu().numpy(),
            drawn=drawn,
            torus=torus,
            poses=poses,
        )


def plot_arm_trajectory(result: ArmTrajectoryResult, path: str | os.PathLike, *, dpi: int = 110) -> str:
    """Left: the arm's spheres at a few waypoints of the drawn trajectory (darker later), the hand's paths
    before (red) and after (blue), the torus and the table's outline. Right: each cost per Adam step."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 5.5))
    ax = fig.add_subplot(1, 2, 1, projection="3d")
    torus = result.torus.copy()
    x, y, z, w, qx, qy, qz = result.poses["torus"]
    rotation = np.array(
        [
            [1 - 2 * (qy * qy + qz * qz), 2 * (qx * qy - w * qz), 2 * (qx * qz + w * qy)],
            [2 * (qx * qy + w * qz), 1 - 2 * (qx * qx + qz * qz), 2 * (qy * qz - w * qx)],
            [2 * (qx * qz - w * qy), 2 * (qy * qz + w * qx), 1 - 2 * (qx * qx + qy * qy)],
        ]
    )
    v = torus.vertices @ rotation.T + np.array([x, y, z])
    ax.plot_trisurf(
        v[:, 0], v[:, 1], v[:, 2], triangles=torus.faces, color="tab:orange", alpha=0.3, linewidth=0
    )
    x0, x1, y0, y1 = 0.2, 0.9, -0.7, 0.7
    ax.plot([x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0], [0, 0, 0, 0, 0], color="0.5")
    for b in range(result.hand_before.shape[0]):
        ax.plot(
            *result.hand_before[b].T,
            color="tab:red",
            alpha=0.4,
            lw=1,
            label="hand before" if b == 0 else None,
        )
        ax.plot(
            *result.hand_after[b].T, color="tab:blue", alpha=0.6, lw=1, label="hand after" if b == 0 else None
        )
    horizon = result.spheres.shape[0]
    shown = sorted(set(np.linspace(0, horizon - 1, min(5, horizon)).round().astype(int).tolist()))
    for j, h in enumerate(shown):
        s = result.spheres[h]
        s = s[s[:, 3] > 0]
        shade = 0.35 + 0.65 * j / max(1, len(shown) - 1)
        ax.scatter(*s[:, :3].T, s=(s[:, 3] * 400) ** 2 / 4, color=(0.1, 0.2 + 0.5 * shade, shade), alpha=0.5)
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_zlabel("z (m)")
    ax.set_title(f"the arm's spheres along trajectory {result.drawn}, after")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_box_aspect((1, 1.4, 0.8))
    ax2 = fig.add_subplot(1, 2, 2)
    for key, colour in (("world", "tab:orange"), ("self", "tab:green"), ("smooth", "tab:blue")):
        ax2.plot([c[key] for c in result.costs], color=colour, label=f"{key} cost")
    ax2.set_yscale("symlog", linthresh=1e-3)
    ax2.set_xlabel("Adam step")
    ax2.set_ylabel("cost (mean over trajectories)")
    ax2.set_title(f"collision-free: {int(result.free_after.sum())}/{len(result.free_after)} after")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return os.fspath(path)


# --------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str, *, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    # disable=None: no bar when stderr is not a terminal (logs, CI).
    return tqdm(total=total, desc=desc, unit="it", leave=False, disable=None)
