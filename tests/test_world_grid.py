"""A DistanceGrid as a world entry (DESIGN §7): posed, enabled, named, per environment, mixed with meshes and
primitives, read by sphere_mesh_cost, swept_sphere_mesh_cost and signed_distance, rewritten by set_grid.

References, all written here in NumPy: the trilinear interpolant of the voxel values (float32, as a world
stores them) and its gradient by the product rule, the box distance outside the grid; a cuboid's exact signed
distance; a mesh's signed distance from trimesh's closest points; cuRobo's cost formula over the union."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import trimesh
from scipy.spatial.transform import Rotation

import warpgeo
from warpgeo import DistanceGrid

# --------------------------------------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------------------------------------


def trilinear_ref(values: np.ndarray, h: float, origin, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Trilinear value and gradient of ``values`` (X, Y, Z) at ``p`` (N, 3) in the grid's frame; outside the
    box of voxel centres, the distance to that box and the unit direction away from it."""
    values = values.astype(np.float64)
    dims = np.array(values.shape)
    u = (p - np.asarray(origin)) / h
    c = np.clip(u, 0.0, dims - 1)
    away = (u - c) * h
    out_d = np.linalg.norm(away, axis=1)
    d = np.empty(len(p))
    g = np.empty((len(p), 3))
    for n in range(len(p)):
        if out_d[n] > 0:
            d[n], g[n] = out_d[n], away[n] / out_d[n]
            continue
        lo = np.clip(np.floor(c[n]).astype(int), 0, np.maximum(dims - 2, 0))
        hi = np.minimum(lo + 1, dims - 1)
        t = np.clip(c[n] - lo, 0.0, 1.0)
        value, grad = 0.0, np.zeros(3)
        for corner in range(8):
            bits = [(corner >> k) & 1 for k in range(3)]
            idx = tuple(hi[k] if bits[k] else lo[k] for k in range(3))
            w = [t[k] if bits[k] else 1.0 - t[k] for k in range(3)]
            dw = [1.0 if bits[k] else -1.0 for k in range(3)]
            value += w[0] * w[1] * w[2] * values[idx]
            grad += np.array([dw[0] * w[1] * w[2], w[0] * dw[1] * w[2], w[0] * w[1] * dw[2]]) * values[idx]
        for k in range(3):
            if dims[k] == 1:
                grad[k] = 0.0
        d[n], g[n] = value, grad / h
    return d, g


def box_ref(p: np.ndarray, half) -> tuple[np.ndarray, np.ndarray]:
    """Exact signed distance of a centred box and its gradient by central differences of the formula."""

    def sdf(x):
        q = np.abs(x) - np.asarray(half)
        return np.linalg.norm(np.maximum(q, 0.0), axis=-1) + np.minimum(q.max(-1), 0.0)

    eps = 1e-6
    grad = np.stack([(sdf(p + eps * e) - sdf(p - eps * e)) / (2 * eps) for e in np.eye(3)], -1)
    return sdf(p), grad


def mesh_ref(mesh: trimesh.Trimesh, p: np.ndarray) -> np.ndarray:
    """Signed distance of a closed mesh (negative inside) from trimesh's closest points."""
    return -trimesh.proximity.signed_distance(mesh, p)


def to_local(pose, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points in an entry's frame (pose world-from-entry [x, y, z, qw, qx, qy, qz]) and the rotation matrix."""
    rot = Rotation.from_quat([pose[4], pose[5], pose[6], pose[3]]).as_matrix()
    return (p - np.asarray(pose[:3])) @ rot, rot


def cost_ref(d: np.ndarray, r: np.ndarray, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """cuRobo's cost of signed distance ``d`` for radius ``r`` and its derivative w.r.t. phi = r + eta - d."""
    phi = r + eta - d
    cost = np.where(phi <= 0, 0.0, np.where(phi <= eta, phi**2 / (2 * eta), phi - eta / 2))
    dphi = np.where(phi <= 0, 0.0, np.where(phi <= eta, phi / eta, 1.0))
    return cost, dphi


# --------------------------------------------------------------------------------------------------------
# scenes
# --------------------------------------------------------------------------------------------------------

POSE_GRID = [0.1, -0.05, 0.2, *(Rotation.from_euler("xyz", [0.3, -0.2, 0.5]).as_quat()[[3, 0, 1, 2]])]
POSE_BOX = [0.7, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
POSE_MESH = [-0.6, 0.1, 0.0, 1.0, 0.0, 0.0, 0.0]
HALF = (0.1, 0.15, 0.2)
ORIGIN = (-0.3, -0.25, -0.2)
H = 0.07


def _grid_values(seed: int, shape=(9, 8, 7)) -> np.ndarray:
    """A smooth signed field with an inside (a ball of radius 0.15 at the grid's middle) plus noise."""
    rng = np.random.default_rng(seed)
    ijk = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"), -1)
    centres = np.asarray(ORIGIN) + H * ijk
    middle = np.asarray(ORIGIN) + H * (np.asarray(shape) - 1) / 2
    values = np.linalg.norm(centres - middle, axis=-1) - 0.15 + 0.01 * rng.standard_normal(shape)
    return values.astype(np.float32)


def _grid(values: np.ndarray, device, dtype=torch.float32) -> DistanceGrid:
    return DistanceGrid(torch.from_numpy(values).to(device=device, dtype=dtype), H, origin=ORIGIN)


def _mesh() -> trimesh.Trimesh:
    return trimesh.creation.icosphere(subdivisions=2, radius=0.15)


def _points(n: int, seed: int, dtype, device) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.uniform([-0.9, -0.45, -0.4], [0.95, 0.45, 0.6], (n, 3))).to(device, dtype)


def _union_ref(values, entries, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """Per-entry (distance, world gradient) of every enabled entry at world points ``p``."""
    per = []
    for kind, pose in entries:
        local, rot = to_local(pose, p)
        if kind == "grid":
            d, g = trilinear_ref(values, H, ORIGIN, local)
        elif kind == "box":
            d, g = box_ref(local, HALF)
        else:
            d = mesh_ref(_mesh(), local)
            g = None
        per.append((d, None if g is None else g @ rot.T))
    return per


# --------------------------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_mesh", [False, True], ids=["closed-forms", "meshes"])
def test_signed_distance_and_gradient(device, dtype, with_mesh):
    values = _grid_values(0)
    entries = [("grid", POSE_GRID), ("box", POSE_BOX)] + ([("mesh", POSE_MESH)] if with_mesh else [])
    items = [_grid(values, device, torch.float64), warpgeo.Cuboid([2 * x for x in HALF])]
    items += [_mesh()] if with_mesh else []
    world = warpgeo.MeshWorld(items, poses=[pose for _, pose in entries], device=device)
    assert world.kernel_args().all_cuboids is (not with_mesh)  # a grid is a closed form
    points = _points(400, 1, dtype, device).requires_grad_(True)
    dist = warpgeo.signed_distance(points, world)
    (grad,) = torch.autograd.grad(dist.sum(), points)
    p = points.detach().double().cpu().numpy()
    per = _union_ref(values, entries, p)
    stacked = np.stack([d for d, _ in per])
    best = stacked.argmin(0)
    tol = 2e-4 if dtype == torch.float32 else 1e-7  # float64: the box's sizes are float32 (1e-8)
    torch.testing.assert_close(dist.double().cpu(), torch.from_numpy(stacked.min(0)), atol=tol, rtol=0)
    # gradients where a grid or the box is the nearest entry, away from ties between entries
    gap = np.sort(stacked, 0)[1] - stacked.min(0) > 1e-3
    for k, (kind, _) in enumerate(entries):
        if kind == "mesh":
            continue
        mask = (best == k) & gap
        assert mask.sum() > 20, (kind, mask.sum())
        want = torch.from_numpy(per[k][1][mask])
        gtol = 2e-3 if dtype == torch.float32 else (1e-7 if kind == "grid" else 1e-5)
        torch.testing.assert_close(grad.double().cpu()[torch.from_numpy(mask)], want, atol=gtol, rtol=0)


def test_grid_entry_equals_the_grids_own_query(device):
    """Unposed, alone: the world's distance is DistanceGrid.query's (on the float32 values a world stores)."""
    values = _grid_values(2)
    grid = _grid(values, device)
    world = warpgeo.MeshWorld([grid], device=device)
    points = _points(300, 3, torch.float32, device)
    torch.testing.assert_close(warpgeo.signed_distance(points, world), grid.query(points).distance)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sphere_costs_envs_and_enable_flags(device, dtype):
    """Two environments: [grid posed, box] and [box, grid unposed]; env_index per batch entry; a disabled grid
    costs nothing. Cost and gradient (centre and radius) against the union reference."""
    values = _grid_values(4)
    grid = _grid(values, device)
    box = warpgeo.Cuboid([2 * x for x in HALF])
    identity = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    envs_entries = [[("grid", POSE_GRID), ("box", POSE_BOX)], [("box", POSE_BOX), ("grid", identity)]]
    world = warpgeo.MeshWorld.from_envs(
        [{"map": grid, "table": box}, {"table": box, "map": grid}],
        poses=[[pose for _, pose in env] for env in envs_entries],
        device=device,
    )
    assert world.names == [["map", "table"], ["table", "map"]]
    eta = 0.04
    centres = _points(2 * 150, 5, dtype, device).view(2, 150, 3)
    radii = torch.linspace(0.01, 0.12, 150, dtype=dtype, device=device).expand(2, 150)[..., None]
    spheres = torch.cat([centres, radii], -1).requires_grad_(True)
    env_index = torch.tensor([1, 0], device=device)
    for disabled in (False, True):
        if disabled:
            world.set_enabled({(0, "map"): False, (1, "map"): False})
        cost = warpgeo.sphere_mesh_cost(spheres, world, activation_distance=eta, env_index=env_index)
        (grad,) = torch.autograd.grad(cost.sum(), spheres)
        for b, e in enumerate((1, 0)):
            entries = [x for x in envs_entries[e] if not (disabled and x[0] == "grid")]
            s = spheres[b].detach().double().cpu().numpy()
            want_cost = np.zeros(150)
            want_grad = np.zeros((150, 4))
            for d, g in _union_ref(values, entries, s[:, :3]):
                c, dphi = cost_ref(d, s[:, 3], eta)
                want_cost += c
                want_grad[:, :3] -= dphi[:, None] * g
                want_grad[:, 3] += dphi
            tol = 5e-4 if dtype == torch.float32 else 1e-7
            torch.testing.assert_close(cost[b].double().cpu(), torch.from_numpy(want_cost), atol=tol, rtol=0)
            torch.testing.assert_close(grad[b].double().cpu(), torch.from_numpy(want_grad), atol=5e-3, rtol=0)
        assert float(cost.detach().sum()) > 0


def test_swept_cost_against_samples(device):
    """The swept cost of a grid world is the mean of the discrete costs at the samples (DESIGN §3)."""
    values = _grid_values(6)
    world = warpgeo.MeshWorld(
        [_grid(values, device), warpgeo.Sphere(0.1)], poses=[POSE_GRID, POSE_BOX], device=device
    )
    rng = np.random.default_rng(7)
    path = np.cumsum(rng.normal(0, 0.05, (1, 5, 6, 3)), axis=1) + rng.uniform(-0.3, 0.3, (1, 1, 6, 3))
    spheres = torch.from_numpy(np.concatenate([path, np.full((1, 5, 6, 1), 0.06)], -1)).to(device)
    steps, eta = 3, 0.03
    swept = warpgeo.swept_sphere_mesh_cost(spheres, world, sweep_steps=steps, activation_distance=eta)
    s = spheres[0].cpu().numpy()
    want = np.zeros((5, 6))
    for h in range(5):
        ts = [j / (steps + 1) for j in range(steps + 1)] if h < 4 else [0.0]
        for t in ts:
            x = s[h] * (1 - t) + s[min(h + 1, 4)] * t
            total = np.zeros(6)
            for d, _ in _union_ref(values, [("grid", POSE_GRID)], x[:, :3]):
                total += cost_ref(d, x[:, 3], eta)[0]
            local = x[:, :3] - np.asarray(POSE_BOX[:3])
            total += cost_ref(np.linalg.norm(local, axis=1) - 0.1, x[:, 3], eta)[0]
            want[h] += total / len(ts)
    torch.testing.assert_close(swept[0].cpu(), torch.from_numpy(want), atol=1e-9, rtol=0)
    assert want.sum() > 0


def test_gradcheck_float64(device):
    values = _grid_values(8)
    world = warpgeo.MeshWorld(
        [_grid(values, device), warpgeo.Cuboid([2 * x for x in HALF])],
        poses=[POSE_GRID, POSE_BOX],
        device=device,
    )
    points = _points(12, 9, torch.float64, device).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x: warpgeo.signed_distance(x, world), (points,), eps=1e-7, atol=1e-5
    )
    spheres = torch.cat([points.detach(), torch.full((12, 1), 0.08, dtype=torch.float64, device=device)], -1)
    spheres.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda s: warpgeo.sphere_mesh_cost(s, world, activation_distance=0.05),
        (spheres,),
        eps=1e-7,
        atol=1e-5,
    )


def test_set_grid_in_place(device):
    values = _grid_values(10)
    world = warpgeo.MeshWorld(
        {"map": _grid(values, device), "box": warpgeo.Cuboid((0.1, 0.1, 0.1))}, device=device
    )
    world.set_poses({"box": POSE_BOX})
    table = world.kernel_args().world[list(warpgeo.world.WORLD_FIELDS).index("voxel_values")]
    ptr = table.data_ptr()
    points = _points(200, 11, torch.float32, device)
    before = warpgeo.signed_distance(points, world)
    new = _grid_values(12) + 0.05
    world.set_grid("map", torch.from_numpy(new).to(device))
    after = warpgeo.signed_distance(points, world)
    assert table.data_ptr() == ptr and world.kernel_args().world[-1] is table
    p = points.double().cpu().numpy()
    want = np.minimum(
        trilinear_ref(new, H, ORIGIN, p)[0], box_ref(p - np.asarray(POSE_BOX[:3]), (0.05,) * 3)[0]
    )
    torch.testing.assert_close(after.double().cpu(), torch.from_numpy(want), atol=2e-4, rtol=0)
    assert not torch.equal(before, after)
    world.set_grid(0, torch.from_numpy(values).double().to(device))  # by index, float64 values
    torch.testing.assert_close(warpgeo.signed_distance(points, world), before)
    world.set_grid("map", torch.from_numpy(values).to(device).requires_grad_(True) * 1.0)  # the values only
    assert not table.requires_grad and table.grad_fn is None


def test_set_grid_refusals(device):
    world = warpgeo.MeshWorld(
        {"map": _grid(_grid_values(0), device), "box": warpgeo.Cuboid((1, 1, 1))}, device=device
    )
    good = torch.zeros(9, 8, 7, device=device)
    with pytest.raises(ValueError, match="shape"):
        world.set_grid("map", torch.zeros(9, 8, 6, device=device))
    with pytest.raises(ValueError, match="finite"):
        world.set_grid("map", torch.full((9, 8, 7), float("nan"), device=device))
    with pytest.raises(ValueError, match="not a DistanceGrid"):
        world.set_grid("box", good)
    with pytest.raises(ValueError, match="no entry named"):
        world.set_grid("nothing", good)
    with pytest.raises(ValueError, match="entry"):
        world.set_grid(5, good)
    with pytest.raises(ValueError, match="env"):
        world.set_grid(0, good, env=1)
    with pytest.raises(TypeError, match="values"):
        world.set_grid(0, torch.zeros(9, 8, 7, dtype=torch.int32, device=device))


def test_nan_grid_refused_by_the_world(device):
    with warpgeo.value_checks(False):
        grid = DistanceGrid(torch.full((3, 3, 3), float("nan"), device=device), 0.1)
    with pytest.raises(ValueError, match=r"meshes\[1\].*finite"):
        warpgeo.MeshWorld([warpgeo.Sphere(0.1), grid], device=device)


def test_forged_voxel_rows_read_nothing():
    """torch.ops.warpgeo.signed_distance with voxel_dims pointing past voxel_values: no read out of it (the
    grid reads as its box: 0 inside), never a crash."""
    world = warpgeo.MeshWorld([DistanceGrid(torch.full((3, 3, 3), 0.5), 0.1)])
    args = world.kernel_args()
    fields = list(warpgeo.world.WORLD_FIELDS)
    forged = list(args.world)
    i = fields.index("voxel_dims")
    for dims in ([3, 3, 3, 10**6], [3, 3, 3, -5], [1000, 1000, 1000, 0], [3, 3, 3, 1]):
        forged[i] = torch.tensor([[dims]], dtype=torch.int32)
        dist, _ = torch.ops.warpgeo.signed_distance(torch.full((1, 2, 3), 0.1), None, forged, True, True)
        assert dist.flatten().tolist() == [0.0, 0.0]


# --------------------------------------------------------------------------------------------------------
# cuRobo's voxel entries (compat.curobo.load_world)
# --------------------------------------------------------------------------------------------------------


def _curobo_centres(dims, h) -> list[np.ndarray]:
    """cuRobo's VoxelGrid voxel centres per axis: round(d / h) voxels, voxel i at
    (i + 1 - round(d / (2 h))) h - h / 2 (its create_xyzr_tensor)."""
    return [(np.arange(round(d / h)) + 1 - round(0.5 * d / h)) * h - 0.5 * h for d in dims]


@pytest.mark.parametrize("dims", [(0.4, 0.3, 0.2), (0.25, 0.35, 0.15)], ids=["even", "odd"])
def test_curobo_voxel_entry(dims):
    """A cuRobo ESDF (positive inside: a ball of radius 0.08 at the grid's centre) posed beside a cuboid: the
    world's distance at cuRobo's voxel centres is minus the feature, and between them the ball's distance
    within the interpolation error; names kept, set_grid by name."""
    from warpgeo.compat.curobo import load_world

    h = 0.05
    axes = _curobo_centres(dims, h)
    centres = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    feature = 0.08 - np.linalg.norm(centres, axis=1)  # cuRobo's sign: positive inside
    pose = [0.3, -0.2, 0.1, *(Rotation.from_euler("z", 0.4).as_quat()[[3, 0, 1, 2]])]
    config = {
        "cuboid": {"table": {"dims": [0.2, 0.2, 0.2], "pose": [1.5, 0, 0, 1, 0, 0, 0]}},
        "voxel": {
            "esdf": {"dims": list(dims), "voxel_size": h, "pose": pose, "feature_tensor": feature.tolist()}
        },
    }
    world = load_world(config)
    assert world.names == [["table", "esdf"]] and world.kernel_args().all_cuboids
    rot = Rotation.from_quat([pose[4], pose[5], pose[6], pose[3]]).as_matrix()
    at_centres = centres @ rot.T + np.asarray(pose[:3])
    # the centres off the box's faces (on a face, a rounding of the pose may put a point just outside,
    # where the entry is the distance to its box, by design)
    inside = np.all([(c > a[0]) & (c < a[-1]) for c, a in zip(centres.T, axes, strict=True)], axis=0)
    got = warpgeo.signed_distance(torch.from_numpy(at_centres[inside]), world)
    torch.testing.assert_close(got, torch.from_numpy(-feature[inside]), atol=1e-7, rtol=0)
    unposed = load_world({"voxel": {"esdf": {**config["voxel"]["esdf"], "pose": [0, 0, 0, 1, 0, 0, 0]}}})
    got = warpgeo.signed_distance(torch.from_numpy(centres), unposed)
    torch.testing.assert_close(got, torch.from_numpy(-feature), atol=1e-7, rtol=0)
    # between the centres: the ball's distance, within the trilinear interpolation error of |x| - r
    rng = np.random.default_rng(0)
    inner = rng.uniform([a[0] for a in axes], [a[-1] for a in axes], (200, 3))
    got = warpgeo.signed_distance(torch.from_numpy(inner @ rot.T + np.asarray(pose[:3])), world)
    ball = np.linalg.norm(inner, axis=1) - 0.08
    assert np.abs(got.numpy() - ball).max() < 0.6 * h
    world.set_grid("esdf", torch.zeros(*[len(a) for a in axes], dtype=torch.float64))
    assert warpgeo.signed_distance(torch.from_numpy(at_centres[inside]), world).abs().max() == 0


def test_curobo_voxel_without_features_and_blox():
    from warpgeo.compat.curobo import load_world

    world = load_world({"voxel": {"v": {"dims": [0.4, 0.4, 0.2], "voxel_size": 0.1}}})
    got = warpgeo.signed_distance(
        torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64), world
    )
    # free space: inside the box the box's diagonal, outside the distance to the box of voxel centres
    torch.testing.assert_close(got, torch.tensor([0.6, 0.85], dtype=torch.float64), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="DepthFusion"):
        load_world({"blox": {"map": {"map_path": "x.nvblx"}}})
    with pytest.raises(ValueError, match="finite"):
        load_world(
            {"voxel": {"v": {"dims": [0.1, 0.1, 0.1], "voxel_size": 0.1, "feature_tensor": [float("nan")]}}}
        )
    with pytest.raises(ValueError, match="at least voxel_size"):
        load_world({"voxel": {"v": {"dims": [0.01, 0.1, 0.1], "voxel_size": 0.1}}})


# --------------------------------------------------------------------------------------------------------
# compile, opcheck, threads
# --------------------------------------------------------------------------------------------------------


def _grid_world_costs(spheres, world, eta):
    traj = spheres.reshape(1, 2, -1, 4)
    return (
        warpgeo.sphere_mesh_cost(spheres, world, activation_distance=eta).sum()
        + warpgeo.swept_sphere_mesh_cost(traj, world, sweep_steps=2, activation_distance=eta).sum()
        + warpgeo.signed_distance(spheres[..., :3], world).square().sum()
    )


def test_compile_fullgraph_and_opcheck(device):
    from warpgeo import sdf as sdf_module

    world = warpgeo.MeshWorld(
        [_grid(_grid_values(13), device), warpgeo.Cuboid((0.2, 0.2, 0.2))],
        poses=[POSE_GRID, POSE_BOX],
        device=device,
    )
    spheres = torch.cat([_points(8, 14, torch.float32, device), torch.full((8, 1), 0.08, device=device)], -1)
    spheres = spheres.reshape(1, 8, 4).requires_grad_(True)
    eta = torch.tensor(0.05, device=device)
    compiled = torch.compile(_grid_world_costs, backend="aot_eager", fullgraph=True)
    out = compiled(spheres, world, eta)
    (g_compiled,) = torch.autograd.grad(out, spheres)
    ref = _grid_world_costs(spheres, world, eta)
    (g_eager,) = torch.autograd.grad(ref, spheres)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g_compiled, g_eager)
    assert g_eager.abs().sum() > 0
    args = world.kernel_args(torch.float64)._asdict()
    x = spheres.detach().double().clone().requires_grad_(True)
    params = torch.tensor([0.05, 1.5], dtype=torch.float64, device=device)
    torch.library.opcheck(
        sdf_module._cost.custom, (x, None), dict(args, params=params, max_distance=0.0, compute_grad=True)
    )
    p = x[..., :3].detach().clone().requires_grad_(True)
    torch.library.opcheck(sdf_module._distance.custom, (p, None), dict(args, compute_grad=True))


def test_grid_world_from_four_threads_at_once():
    """A grid world's first queries from four threads in a fresh process: every answer the same."""
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    code = textwrap.dedent(
        """
        import threading, torch, warpgeo as g
        torch.manual_seed(0)
        grid = g.DistanceGrid(torch.rand(7, 6, 5) - 0.5, 0.1, origin=(-0.3, -0.25, -0.2))
        w = g.MeshWorld([grid, g.Sphere(0.1)], poses=[[0, 0, 0, 1, 0, 0, 0], [0.5, 0, 0, 1, 0, 0, 0]])
        s = torch.cat([torch.rand(1, 64, 3) - 0.3, torch.full((1, 64, 1), 0.05)], -1)
        call = lambda: g.sphere_mesh_cost(s, w, activation_distance=0.02)
        results, errors = [], []
        start = threading.Barrier(4)
        def body():
            try:
                start.wait()
                results.extend(call() for _ in range(20))
            except BaseException as error:
                errors.append(repr(error))
        threads = [threading.Thread(target=body) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not errors, errors
        assert all(torch.equal(r, call()) for r in results) and len(results) == 80
        print("ok")
        """
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-3000:])


def test_grids_and_world_editing():
    """A grid is not added in place (a clear error); a removed grid slot is no grid for set_grid."""
    grid = warpgeo.DistanceGrid(torch.rand(4, 4, 4, dtype=torch.float64) - 0.5, 0.1)
    world = warpgeo.MeshWorld([warpgeo.Cuboid((1.0, 1.0, 1.0)), grid], capacity={"cuboid": 2})
    with pytest.raises(ValueError, match="DistanceGrid cannot be added"):
        world.add(grid)
    world.set_grid(1, torch.zeros(4, 4, 4))
    world.remove(1)
    with pytest.raises(ValueError):
        world.set_grid(1, torch.zeros(4, 4, 4))
    world.add(warpgeo.Cuboid((0.5, 0.5, 0.5)))  # the freed slot takes a cuboid: still no grid there
    with pytest.raises(ValueError, match="not a DistanceGrid"):
        world.set_grid(1, torch.zeros(4, 4, 4))
