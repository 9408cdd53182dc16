"""DistanceGrid, its builders and DepthFusion (warpgeo/distance_grid.py) against independent references:
brute-force distance transforms over all voxel pairs (integer arithmetic), SciPy's EDT and linear
interpolation, analytic boxes, and depth frames of an analytic scene rendered here by ray casting."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import trimesh
from scipy import ndimage
from scipy.spatial.transform import Rotation

import warpgeo
from warpgeo.distance_grid import DepthFusion, DistanceGrid

# --------------------------------------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------------------------------------


def brute_d2(seeds: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Squared distance (voxel units, int64) from every voxel centre to the nearest of ``seeds`` ((S, 3) int
    voxel coordinates), over all pairs; -1 where there is no seed."""
    coords = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"), -1).reshape(-1, 3)
    if len(seeds) == 0:
        return np.full(shape, -1, dtype=np.int64)
    diff = coords[:, None, :].astype(np.int64) - seeds[None, :, :].astype(np.int64)
    return (diff * diff).sum(-1).min(1).reshape(shape)


def brute_signed_steps(occupied: np.ndarray) -> np.ndarray:
    """The documented signed transform in voxel units: +sqrt(d2 to the nearest occupied centre) for free
    voxels, -sqrt(d2 to the nearest free centre) for occupied ones; where one side is empty, the grid is
    taken as surrounded by a layer of the other side (brute force on the padded grid)."""
    shape = occupied.shape
    out = np.empty(shape, dtype=np.float64)
    for sign, seeds_mask, target in ((1.0, occupied, ~occupied), (-1.0, ~occupied, occupied)):
        seeds = np.argwhere(seeds_mask)
        if len(seeds) == 0:  # the surrounding layer: every position just outside the grid
            padded = np.ones([n + 2 for n in shape], dtype=bool)
            padded[1:-1, 1:-1, 1:-1] = False
            seeds = np.argwhere(padded) - 1
        d2 = brute_d2(seeds, shape)
        out[target] = sign * np.sqrt(d2[target].astype(np.float64))
    return out


def box_sdf(p: np.ndarray, half: np.ndarray) -> np.ndarray:
    """Exact signed distance to an axis-aligned box centred at 0 (negative inside)."""
    q = np.abs(p) - half
    outside = np.linalg.norm(np.maximum(q, 0.0), axis=-1)
    inside = np.minimum(q.max(-1), 0.0)
    return outside + inside


def trilinear(values: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Linear interpolation of ``values`` at grid coordinates ``u`` (N, 3) (SciPy's map_coordinates)."""
    return ndimage.map_coordinates(values, u.T, order=1, mode="nearest")


# --------------------------------------------------------------------------------------------------------
# from_occupancy
# --------------------------------------------------------------------------------------------------------

SHAPES = [(1, 1, 1), (1, 5, 1), (7, 1, 3), (1, 1, 9), (4, 6, 5), (9, 8, 7), (3, 11, 2)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("density", [0.0, 0.03, 0.3, 0.8, 1.0])
def test_occupancy_equals_brute_force_exactly(shape, density, device):
    gen = torch.Generator().manual_seed(hash((shape, density)) % 2**31)
    occupied = torch.rand(shape, generator=gen) < density
    if density == 1.0:
        occupied[:] = True
    h = 0.25
    grid = DistanceGrid.from_occupancy(occupied.to(device), h, origin=(1.0, -2.0, 0.5), dtype=torch.float64)
    assert grid.shape == shape and grid.dtype == torch.float64 and grid.device.type == device.type
    assert grid.origin == (1.0, -2.0, 0.5) and grid.voxel_size == h
    values = grid.values.cpu().numpy()
    steps = brute_signed_steps(occupied.numpy())
    # the squared distances, recovered from the values, are the brute-force integers
    np.testing.assert_array_equal(np.rint((values / h) ** 2), np.rint(steps**2))
    np.testing.assert_array_equal(np.sign(values), np.sign(steps))
    np.testing.assert_allclose(values, h * steps, rtol=1e-15, atol=0)


def test_occupancy_of_a_skinny_grid_matches_scipy():
    # a long x, one y: each pass's scratch is sized for that pass (not the longest axis times the most lines)
    occupied = torch.rand(2**16, 1, 64) < 0.001
    grid = DistanceGrid.from_occupancy(occupied, 1.0)
    o = occupied.numpy()
    ref = np.where(o, -ndimage.distance_transform_edt(o), ndimage.distance_transform_edt(~o))
    np.testing.assert_allclose(grid.values.numpy(), ref, rtol=1e-6)


def test_occupancy_cuda_path_on_cpu_tensors(monkeypatch):
    # CUDA's choice (a thread per line, scratch per line) run on the CPU against the brute force
    from warpgeo import _warp

    occupied = torch.rand(9, 7, 11) < 0.2
    monkeypatch.setattr(_warp.PATHS, "cuda_on_cpu", True)
    grid = DistanceGrid.from_occupancy(occupied, 1.0, dtype=torch.float64)
    np.testing.assert_array_equal(grid.values.numpy(), brute_signed_steps(occupied.numpy()))


def test_occupancy_float32_matches_scipy(device):
    occupied = torch.rand(23, 17, 20) < 0.1
    grid = DistanceGrid.from_occupancy(occupied.to(device), 0.1)
    o = occupied.numpy()
    ref = 0.1 * np.where(o, -ndimage.distance_transform_edt(o), ndimage.distance_transform_edt(~o))
    assert grid.values.dtype == torch.float32
    np.testing.assert_allclose(grid.values.cpu().numpy(), ref, rtol=1e-6, atol=1e-6)


def test_occupancy_long_axis_takes_int64_distances(device):
    # (X - 1)**2 beyond int32: the transform's int64 variant; a 1-d reference
    n = 50_000
    occupied = torch.zeros(n, 1, 1, dtype=torch.bool)
    occupied[[3, 20_000, 20_001]] = True
    grid = DistanceGrid.from_occupancy(occupied.to(device), 1.0, dtype=torch.float64)
    x = np.arange(n)
    seeds = np.array([3, 20_000, 20_001])
    free = np.abs(x[:, None] - seeds[None]).min(1).astype(np.float64)
    ref = np.where(occupied.numpy()[:, 0, 0], -1.0, free)
    np.testing.assert_array_equal(grid.values.cpu().numpy()[:, 0, 0], ref)
    # no seed at all along a line longer than int32's squares: the steps to just outside the grid
    empty = DistanceGrid.from_occupancy(torch.zeros(n, 1, 1, dtype=torch.bool, device=device), 1.0)
    assert float(empty.values.max()) == 1.0  # a (n, 1, 1) grid: one step sideways leaves it


# --------------------------------------------------------------------------------------------------------
# from_points
# --------------------------------------------------------------------------------------------------------


def _points_reference(points: np.ndarray, lo: np.ndarray, h: float, shape) -> np.ndarray:
    idx = np.floor((points - lo) / h + 0.5).astype(np.int64)
    inside = ((idx >= 0) & (idx < np.array(shape))).all(1)
    seeds = np.unique(idx[inside], axis=0)
    d2 = brute_d2(seeds, shape)
    return h * np.sqrt(d2.astype(np.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_points_with_bounds_equals_brute_force(dtype, device):
    points = torch.rand(40, 3, dtype=torch.float64) * torch.tensor([1.0, 0.7, 0.5]) - 0.1  # some outside
    bounds = ((0.0, 0.0, 0.0), (0.8, 0.6, 0.4))
    grid = DistanceGrid.from_points(points.to(dtype).to(device), 0.1, bounds=bounds, dtype=torch.float64)
    assert grid.shape == (9, 7, 5) and grid.origin == (0.0, 0.0, 0.0)
    ref = _points_reference(points.to(dtype).double().numpy(), np.zeros(3), 0.1, grid.shape)
    np.testing.assert_allclose(grid.values.cpu().numpy(), ref, rtol=1e-12, atol=1e-12)
    assert float(grid.values.min()) == 0.0


def test_points_without_bounds_spans_the_cloud(device):
    points = torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.2, 0.31], [0.25, 0.1, 0.1]], dtype=torch.float64)
    grid = DistanceGrid.from_points(points.to(device), 0.1)
    assert grid.origin == (0.0, 0.0, 0.0)
    assert grid.shape == (6, 3, 5)  # centres up to at least the far corner
    assert grid.values.dtype == torch.float64
    ref = _points_reference(points.numpy(), np.zeros(3), 0.1, grid.shape)
    np.testing.assert_allclose(grid.values.cpu().numpy(), ref, rtol=1e-12, atol=1e-12)


def test_points_outside_every_voxel_leave_the_grid_empty(device):
    points = torch.tensor([[5.0, 5.0, 5.0]], device=device)
    grid = DistanceGrid.from_points(points, 0.5, bounds=((0, 0, 0), (1, 1, 1)))
    steps = brute_signed_steps(np.zeros((3, 3, 3), dtype=bool))  # no surface: steps to just outside
    np.testing.assert_allclose(grid.values.cpu().numpy(), 0.5 * steps)


# --------------------------------------------------------------------------------------------------------
# query (trilinear value and gradient)
# --------------------------------------------------------------------------------------------------------


def test_query_is_trilinear_inside_and_box_distance_outside(device):
    values = torch.randn(5, 4, 6, dtype=torch.float64)
    h, origin = 0.2, np.array([0.3, -0.1, 0.05])
    grid = DistanceGrid(values.to(device), h, origin=tuple(origin))
    hi = origin + h * (np.array(values.shape) - 1)
    inside = origin + np.random.default_rng(1).random((300, 3)) * (hi - origin)
    res = grid.query(torch.tensor(inside, device=device))
    u = (inside - origin) / h
    np.testing.assert_allclose(res.distance.cpu().numpy(), trilinear(values.numpy(), u), atol=1e-12)
    # the gradient: central differences of the reference interpolant (points away from cell faces)
    eps = 1e-6
    frac = u - np.floor(u)
    away = (np.minimum(frac, 1 - frac) > 1e-3).all(1)
    for axis in range(3):
        step = np.zeros(3)
        step[axis] = eps
        fd = (
            trilinear(values.numpy(), (inside + step - origin) / h)
            - trilinear(values.numpy(), (inside - step - origin) / h)
        ) / (2 * eps)
        np.testing.assert_allclose(res.gradient.cpu().numpy()[away, axis], fd[away], atol=1e-5)
    outside = np.array([[-1.0, 0.0, 0.2], [2.0, 3.0, -4.0], [0.5, 0.2, 1.5]])
    res = grid.query(torch.tensor(outside, device=device))
    closest = np.clip(outside, origin, hi)
    dist = np.linalg.norm(outside - closest, axis=1)
    np.testing.assert_allclose(res.distance.cpu().numpy(), dist, rtol=1e-12)
    np.testing.assert_allclose(res.gradient.cpu().numpy(), (outside - closest) / dist[:, None], rtol=1e-12)


def test_query_far_out_is_finite(device):
    grid = DistanceGrid(torch.zeros(3, 3, 3, device=device), 0.5)
    far = torch.tensor([[3.0e38, 0.0, 0.5], [-2.0e38, 1.0e38, 0.0]], device=device)
    res = grid.query(far)
    expected = torch.tensor([3.0e38 - 1.0, math.hypot(2.0e38, 1.0e38 - 1.0)])
    torch.testing.assert_close(res.distance.cpu(), expected, rtol=1e-6, atol=0)
    assert bool(torch.isfinite(res.gradient).all())
    torch.testing.assert_close(res.gradient.norm(dim=1).cpu(), torch.ones(2))


def test_query_shapes_dtypes_and_single_voxel_axes(device):
    grid = DistanceGrid(torch.tensor([[[1.0, 3.0]]], device=device), 0.5)  # (1, 1, 2)
    pts = torch.tensor([[[0.0, 0.0, 0.25]]], dtype=torch.float16, device=device)
    res = grid.query(pts)
    assert res.distance.shape == (1, 1) and res.gradient.shape == (1, 1, 3)
    assert res.distance.dtype == torch.float16
    assert float(res.distance) == 2.0
    assert res.gradient.float().flatten().tolist() == [0.0, 0.0, 4.0]


def test_query_gradcheck_and_backward(device):
    values = torch.randn(4, 5, 3, dtype=torch.float64, device=device)
    grid = DistanceGrid(values, 0.3, origin=(0.1, 0.2, 0.3))
    pts = (torch.rand(20, 3, dtype=torch.float64) * torch.tensor([0.9, 1.2, 0.6]) + 0.1).to(device)
    pts = torch.cat((pts, torch.tensor([[5.0, 0.0, 0.0]], dtype=torch.float64, device=device)))
    pts.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda p: grid.query(p).distance, (pts,), eps=1e-7, atol=1e-6)
    w = torch.randn(21, dtype=torch.float64, device=device)
    (g,) = torch.autograd.grad((grid.query(pts).distance * w).sum(), pts)
    torch.testing.assert_close(g, w[:, None] * grid.query(pts.detach()).gradient)


def test_query_opcheck_and_compile():
    values = torch.randn(4, 5, 3)
    pts = torch.rand(16, 3) * 1.2
    op = torch.ops.warpgeo.distance_grid_query
    torch.library.opcheck(op, (pts.requires_grad_(True), values, 0.3, [0.0, 0.0, 0.0]))
    grid = DistanceGrid(values, 0.3)

    @torch.compile(fullgraph=True)
    def cost(p):
        return grid.query(p).distance.square().sum()

    p = pts.detach().clone().requires_grad_(True)
    c = cost(p)
    c.backward()
    p2 = pts.detach().clone().requires_grad_(True)
    grid.query(p2).distance.square().sum().backward()
    torch.testing.assert_close(c, grid.query(pts.detach()).distance.square().sum())
    torch.testing.assert_close(p.grad, p2.grad)


def test_builders_compile():
    occupied = torch.rand(6, 5, 4) < 0.3

    @torch.compile(fullgraph=True)
    def build(occ):
        return DistanceGrid.from_occupancy(occ, 0.1).values * 2

    torch.testing.assert_close(build(occupied), DistanceGrid.from_occupancy(occupied, 0.1).values * 2)


def test_builder_ops_opcheck():
    occupied = torch.rand(5, 4, 3) < 0.3
    torch.library.opcheck(torch.ops.warpgeo.distance_grid_from_occupancy, (occupied, 0.1, torch.float32))
    pts = torch.rand(10, 3)
    torch.library.opcheck(
        torch.ops.warpgeo.distance_grid_from_points, (pts, [4, 4, 4], [0.0, 0.0, 0.0], 0.3, torch.float64)
    )
    tsdf = torch.rand(6, 5, 4) * 2 - 1
    weight = (torch.rand(6, 5, 4) < 0.5).float()
    torch.library.opcheck(torch.ops.warpgeo.depth_fusion_distance, (tsdf, weight, 0.1, 0.3, torch.float32))
    depth = torch.rand(2, 12, 16) + 0.5
    k = torch.tensor([[10.0, 0.0, 7.5], [0.0, 10.0, 5.5], [0.0, 0.0, 1.0]]).expand(2, 3, 3).contiguous()
    pose = torch.tensor([[0.0, 0.0, -0.5, 1.0, 0.0, 0.0, 0.0]] * 2)
    args = (tsdf.clone(), weight.clone(), depth, k, pose, [-0.3, -0.2, 0.0], 0.1, 0.3, 5.0)
    torch.library.opcheck(torch.ops.warpgeo.depth_fusion_integrate, args)


# --------------------------------------------------------------------------------------------------------
# from_mesh
# --------------------------------------------------------------------------------------------------------


def test_from_mesh_is_within_the_trilinear_bound(device):
    half = np.array([0.3, 0.2, 0.25])
    rot = Rotation.from_euler("xyz", [0.3, -0.5, 0.9])
    shift = np.array([0.1, -0.2, 0.4])
    mesh = trimesh.creation.box(extents=2 * half)
    transform = np.eye(4)
    transform[:3, :3] = rot.as_matrix()
    transform[:3, 3] = shift
    mesh.apply_transform(transform)
    h = 0.05
    grid = DistanceGrid.from_mesh(mesh, h, device=device)
    lo = np.array(grid.origin)
    assert np.all(lo <= mesh.vertices.min(0) - 2 * h + 1e-9)
    hi = lo + h * (np.array(grid.shape) - 1)
    assert np.all(hi >= mesh.vertices.max(0) + 2 * h - 1e-9)
    probes = lo + np.random.default_rng(3).random((4000, 3)) * (hi - lo)
    exact = box_sdf(rot.inv().apply(probes - shift), half)
    got = grid.query(torch.tensor(probes, dtype=torch.float32, device=device)).distance.cpu().numpy()
    bound = math.sqrt(3) / 2 * h
    assert np.abs(got - exact).max() <= bound + 1e-5
    far = np.abs(exact) > h
    assert np.array_equal(np.sign(got[far]), np.sign(exact[far]))
    assert (exact < -h).any() and (exact > h).any()


# --------------------------------------------------------------------------------------------------------
# DepthFusion
# --------------------------------------------------------------------------------------------------------

SPHERE_C, SPHERE_R = np.array([0.05, -0.05, 0.3]), 0.2
K = np.array([[150.0, 0.0, 79.5], [0.0, 150.0, 59.5], [0.0, 0.0, 1.0]])
H, W = 120, 160


def scene_sdf(p: np.ndarray) -> np.ndarray:
    """A floor (z = 0, solid below) and a sphere."""
    return np.minimum(p[..., 2], np.linalg.norm(p - SPHERE_C, axis=-1) - SPHERE_R)


def look_at(eye: np.ndarray, target: np.ndarray) -> np.ndarray:
    """World-from-camera pose [x, y, z, qw, qx, qy, qz], OpenCV axes (+z forward, +y down)."""
    z = target - eye
    z /= np.linalg.norm(z)
    x = np.cross(z, np.array([0.0, 0.0, 1.0]))
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    qx, qy, qz, qw = Rotation.from_matrix(np.stack((x, y, z), 1)).as_quat()
    return np.array([*eye, qw, qx, qy, qz])


def render(pose: np.ndarray) -> np.ndarray:
    """z-depth of the scene by ray casting: for pixel (u, v) the ray R K^-1 (u, v, 1), whose parameter is the
    z-depth; 0 where the ray hits nothing."""
    rot = Rotation.from_quat([pose[4], pose[5], pose[6], pose[3]]).as_matrix()
    u, v = np.meshgrid(np.arange(W), np.arange(H))
    dirs_c = np.stack(((u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u, dtype=float)), -1)
    d = dirs_c @ rot.T
    o = pose[:3]
    t_floor = np.where(d[..., 2] < 0, -o[2] / np.where(d[..., 2] < 0, d[..., 2], -1.0), np.inf)
    oc = o - SPHERE_C
    b = (d * oc).sum(-1)
    a = (d * d).sum(-1)
    disc = b * b - a * ((oc * oc).sum() - SPHERE_R**2)
    t_sphere = np.where(disc >= 0, (-b - np.sqrt(np.maximum(disc, 0))) / a, np.inf)
    t_sphere = np.where(t_sphere > 0, t_sphere, np.inf)
    t = np.minimum(t_floor, t_sphere)
    return np.where(np.isfinite(t), t, 0.0)


def _poses() -> list[np.ndarray]:
    target = np.array([0.0, 0.0, 0.1])
    out = []
    for i, az in enumerate(np.linspace(0, 2 * np.pi, 6, endpoint=False)):
        elev = 0.9 if i % 2 else 0.6
        eye = target + 1.1 * np.array([np.cos(az) * np.cos(elev), np.sin(az) * np.cos(elev), np.sin(elev)])
        out.append(look_at(eye, target))
    return out


BOUNDS = ((-0.5, -0.5, -0.1), (0.5, 0.5, 0.6))


def _visible(points: np.ndarray, poses, depths, tol: float) -> np.ndarray:
    """Points that some frame sees (in the image, in front of, or within ``tol`` of, its reading)."""
    seen = np.zeros(len(points), dtype=bool)
    for pose, depth in zip(poses, depths, strict=True):
        rot = Rotation.from_quat([pose[4], pose[5], pose[6], pose[3]])
        pc = rot.inv().apply(points - pose[:3])
        z = pc[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.floor(K[0, 0] * pc[:, 0] / z + K[0, 2] + 0.5)
            v = np.floor(K[1, 1] * pc[:, 1] / z + K[1, 2] + 0.5)
        ok = (z > 0) & (u >= 0) & (u < W) & (v >= 0) & (v < H)
        reading = np.zeros(len(points))
        reading[ok] = depth[v[ok].astype(int), u[ok].astype(int)]
        seen |= ok & (reading > 0) & (z <= reading + tol)
    return seen


def test_fused_frames_give_the_scene_within_two_voxels(device):
    poses = _poses()
    depths = [render(p) for p in poses]
    h = 0.02
    fusion = DepthFusion(BOUNDS, h, device=device)
    fusion.integrate(np.stack(depths), K, np.stack(poses))
    grid = fusion.distance_grid()
    assert isinstance(grid, DistanceGrid) and grid.origin == (-0.5, -0.5, -0.1)
    rng = np.random.default_rng(5)
    lo, hi = np.array(BOUNDS[0]) + 0.05, np.array(BOUNDS[1]) - 0.05
    probes = lo + rng.random((20000, 3)) * (hi - lo)
    exact = scene_sdf(probes)
    # observed space: free points and points just inside a surface, whose nearest surface point is seen
    band = (exact > -0.5 * fusion.truncation) & (exact < 0.25)
    floor_pt = probes * np.array([1.0, 1.0, 0.0])
    towards = probes - SPHERE_C
    sphere_pt = SPHERE_C + SPHERE_R * towards / np.linalg.norm(towards, axis=1, keepdims=True)
    nearest = np.where(
        (probes[:, 2] < np.linalg.norm(towards, axis=1) - SPHERE_R)[:, None], floor_pt, sphere_pt
    )
    observed = (
        band & _visible(nearest, poses, depths, 0.5 * h) & _visible(probes, poses, depths, fusion.truncation)
    )
    assert observed.sum() > 2000
    got = (
        grid.query(torch.tensor(probes[observed], dtype=torch.float32, device=device)).distance.cpu().numpy()
    )
    err = np.abs(got - exact[observed])
    assert err.max() <= 2 * h, f"worst {err.max() / h:.2f} voxels"
    # free points well away from the surfaces are free (inside, near a view's silhouette, a voxel can take
    # in a reading of the background: the TSDF's own limit, within the two voxels above)
    clear = exact[observed] > 1.5 * h
    assert bool((got[clear] > 0).all())


def test_frames_one_by_one_equal_the_batch(device):
    poses = _poses()[:3]
    depths = [render(p) for p in poses]
    batch = DepthFusion(BOUNDS, 0.04, device=device)
    batch.integrate(
        torch.tensor(np.stack(depths)), torch.tensor(K).expand(3, 3, 3), torch.tensor(np.stack(poses))
    )
    single = DepthFusion(BOUNDS, 0.04, device=device)
    for p, d in zip(poses, depths, strict=True):
        single.integrate(d, K, p)
    assert float(batch.weight.max()) >= 2  # the frames overlap
    torch.testing.assert_close(single.weight, batch.weight, rtol=0, atol=0)
    torch.testing.assert_close(single.tsdf, batch.tsdf, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(single.distance_grid().values, batch.distance_grid().values)


def _reference_fusion(shape, origin, h, trunc, frames, max_range):
    """A naive numpy TSDF integration (nearest pixel, the truncation band, running mean) of every voxel."""
    idx = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"), -1).reshape(-1, 3)
    centres = np.array(origin) + h * idx
    tsdf = np.ones(len(centres))
    weight = np.zeros(len(centres))
    for depth, pose in frames:
        rot = Rotation.from_quat([pose[4], pose[5], pose[6], pose[3]])
        pc = rot.inv().apply(centres - pose[:3])
        z = pc[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.floor(K[0, 0] * pc[:, 0] / z + K[0, 2] + 0.5)
            v = np.floor(K[1, 1] * pc[:, 1] / z + K[1, 2] + 0.5)
        ok = (z > 0) & (u >= 0) & (u < W) & (v >= 0) & (v < H)
        reading = np.zeros(len(centres))
        reading[ok] = depth[v[ok].astype(int), u[ok].astype(int)]
        with np.errstate(invalid="ignore"):
            ok &= (reading > 0) & (reading <= max_range)
        sdf = reading - z
        ok &= np.abs(sdf) <= trunc
        val = sdf / trunc
        tsdf[ok] = (tsdf[ok] * weight[ok] + val[ok]) / (weight[ok] + 1)
        weight[ok] += 1
    return tsdf.reshape(shape), weight.reshape(shape)


def test_invalid_pixels_are_ignored(device):
    poses = _poses()[:2]
    depths = [render(p) for p in poses]
    broken = depths[0].copy()
    broken[10:50, 20:90] = np.nan
    broken[60:80, :] = 0.0
    broken[90:, 100:] = 1.35  # beyond max_range, inside the volume
    broken[:5, :] = -1.0
    fusion = DepthFusion(BOUNDS, 0.02, device=device)
    fusion.integrate(np.stack((broken, depths[1])), K, np.stack(poses), max_range=1.3)
    tsdf, weight = _reference_fusion(
        fusion.shape, fusion.origin, 0.02, fusion.truncation, [(broken, poses[0]), (depths[1], poses[1])], 1.3
    )
    got_w = fusion.weight.cpu().numpy()
    # float32 kernel vs float64 reference: a voxel projecting onto a pixel border may pick the neighbour
    same = (got_w == weight) & (np.abs(fusion.tsdf.cpu().numpy() - tsdf) <= 2e-3)
    assert same.mean() > 0.998
    assert (weight > 0).sum() > 5000 and ((got_w > 0) & (weight == 0)).sum() <= 0.002 * (weight > 0).sum()
    # a frame with no valid reading changes nothing
    before = (fusion.tsdf.clone(), fusion.weight.clone())
    junk = np.full((H, W), np.nan)
    junk[::2] = 0.0
    fusion.integrate(junk, K, poses[0])
    fusion.integrate(np.full((H, W), 9.0), K, poses[0], max_range=5.0)
    assert torch.equal(fusion.tsdf, before[0]) and torch.equal(fusion.weight, before[1])


def test_unobserved_volume_is_free():
    fusion = DepthFusion(((0, 0, 0), (0.2, 0.1, 0.1)), 0.05)
    grid = fusion.distance_grid()
    assert bool((grid.values > 0).all())


# --------------------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------------------


def test_bad_grids_are_refused():
    with pytest.raises(TypeError, match="values"):
        DistanceGrid(torch.zeros(2, 2, 2, dtype=torch.int32), 0.1)
    with pytest.raises(ValueError, match="values"):
        DistanceGrid(torch.zeros(2, 2), 0.1)
    with pytest.raises(ValueError, match="values"):
        DistanceGrid(torch.zeros(2, 0, 2), 0.1)
    with pytest.raises(ValueError, match="finite"):
        DistanceGrid(torch.tensor([[[0.0, float("nan")]]]), 0.1)
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="voxel_size"):
            DistanceGrid(torch.zeros(2, 2, 2), bad)
    with pytest.raises(TypeError, match="voxel_size"):
        DistanceGrid(torch.zeros(2, 2, 2), "0.1")
    with pytest.raises(ValueError, match="origin"):
        DistanceGrid(torch.zeros(2, 2, 2), 0.1, origin=(0, 0))
    with pytest.raises(ValueError, match="origin"):
        DistanceGrid(torch.zeros(2, 2, 2), 0.1, origin=(0, float("inf"), 0))
    with pytest.raises(TypeError, match="occupied"):
        DistanceGrid.from_occupancy(torch.zeros(2, 2, 2), 0.1)
    with pytest.raises(ValueError, match="occupied"):
        DistanceGrid.from_occupancy(torch.zeros(2, 2, dtype=torch.bool), 0.1)
    with pytest.raises(ValueError, match="bounds"):
        DistanceGrid.from_points(torch.zeros(3, 3), 0.1, bounds=((0, 0, 0), (1e6, 1e6, 1e6)))
    with pytest.raises(ValueError, match="points"):
        DistanceGrid.from_points(torch.zeros(0, 3), 0.1)
    with pytest.raises(ValueError, match="finite"):
        DistanceGrid.from_points(torch.tensor([[0.0, float("nan"), 0.0]]), 0.1)
    grid = DistanceGrid(torch.zeros(2, 2, 2), 0.1)
    with pytest.raises(ValueError, match="points"):
        grid.query(torch.zeros(4, 2))
    with pytest.raises(ValueError, match="finite"):
        grid.query(torch.tensor([[float("nan"), 0.0, 0.0]]))
    with pytest.raises(ValueError, match="points"):
        torch.ops.warpgeo.distance_grid_query(torch.zeros(4, 2), torch.zeros(2, 2, 2), 0.1, [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="voxel_size"):
        torch.ops.warpgeo.distance_grid_query(torch.zeros(4, 3), torch.zeros(2, 2, 2), -0.1, [0.0, 0.0, 0.0])


def test_bad_cameras_are_refused():
    fusion = DepthFusion(((0, 0, 0), (0.2, 0.2, 0.2)), 0.05)
    depth = np.ones((4, 5))
    pose = [0, 0, -1, 1, 0, 0, 0]
    for bad in ([[0, 0, 2], [0, 1, 2], [0, 0, 1]], [[1, 0, 2], [0, -1, 2], [0, 0, 1]]):
        with pytest.raises(ValueError, match=r"intrinsics.*focal"):
            fusion.integrate(depth, bad, pose)
    with pytest.raises(ValueError, match="intrinsics"):
        fusion.integrate(depth, [[1, 0, 2], [0, 1, 2], [0, 0, float("nan")]], pose)
    with pytest.raises(ValueError, match="intrinsics"):
        fusion.integrate(depth, [[1, 0, 2], [0, 1, 2], [0, 0, 2]], pose)
    with pytest.raises(ValueError, match="intrinsics"):
        fusion.integrate(depth, np.eye(4), pose)
    k = [[1, 0, 2], [0, 1, 2], [0, 0, 1]]
    with pytest.raises(ValueError, match=r"camera_pose.*unit quaternion"):
        fusion.integrate(depth, k, [0, 0, -1, 2, 0, 0, 0])
    with pytest.raises(ValueError, match=r"camera_pose.*finite"):
        fusion.integrate(depth, k, [float("nan"), 0, -1, 1, 0, 0, 0])
    with pytest.raises(ValueError, match="camera_pose"):
        fusion.integrate(depth, k, [0, 0, 1])
    with pytest.raises(ValueError, match="depth"):
        fusion.integrate(np.ones(5), k, pose)
    with pytest.raises(ValueError, match="truncation"):
        DepthFusion(((0, 0, 0), (1, 1, 1)), 0.1, truncation=0.0)
    with pytest.raises(ValueError, match="bounds"):
        DepthFusion(((0, 0, 0), (-1, 1, 1)), 0.1)
    assert torch.equal(fusion.weight, torch.zeros_like(fusion.weight))


def test_hostile_values_with_checks_off_never_crash():
    with warpgeo.value_checks(False):
        grid = DistanceGrid(torch.tensor([[[float("nan"), 1.0]]]), 0.1)
        pts = torch.tensor([[float("nan"), 0.0, 0.0], [float("inf"), -float("inf"), 0.0], [1e30, 0.0, 0.0]])
        grid.query(pts)
        DistanceGrid.from_points(
            torch.tensor([[float("nan"), 1e30, -1e30]]), 0.1, bounds=((0, 0, 0), (1, 1, 1))
        )
        fusion = DepthFusion(((0, 0, 0), (0.2, 0.2, 0.2)), 0.05)
        fusion.integrate(
            np.full((4, 5), 1e30), [[float("nan"), 0, 2], [0, 0, 2], [0, 0, 1]], [0, 0, -1, 0, 0, 0, 0]
        )
        fusion.integrate(
            np.ones((4, 5)), [[1e-30, 0, 1e30], [0, 1e30, 2], [0, 0, 1]], [1e30, 0, -1, 5, 0, 0, 0]
        )
        fusion.distance_grid()


def test_every_op_entry_refuses_bad_shapes():
    ops = torch.ops.warpgeo
    z3 = [0.0, 0.0, 0.0]
    with pytest.raises(TypeError, match="occupied"):
        ops.distance_grid_from_occupancy(torch.zeros(2, 2, 2, dtype=torch.uint8), 0.1, torch.float32)
    with pytest.raises(TypeError, match="dtype"):
        ops.distance_grid_from_occupancy(torch.zeros(2, 2, 2, dtype=torch.bool), 0.1, torch.float16)
    with pytest.raises(ValueError, match="occupied"):
        ops.distance_grid_from_occupancy(torch.zeros(2**21, 1, 1, dtype=torch.bool), 0.1, torch.float32)
    with pytest.raises(ValueError, match="dims"):
        ops.distance_grid_from_points(torch.zeros(3, 3), [4, 0, 4], z3, 0.1, torch.float32)
    with pytest.raises(ValueError, match="dims"):
        ops.distance_grid_from_points(torch.zeros(3, 3), [2**20, 2**20, 2**20], z3, 0.1, torch.float32)
    with pytest.raises(ValueError, match="origin"):
        ops.distance_grid_from_points(torch.zeros(3, 3), [4, 4, 4], [0.0, 0.0], 0.1, torch.float32)
    tsdf, weight = torch.zeros(4, 4, 4), torch.zeros(4, 4, 4)
    depth, k, pose = torch.ones(2, 5, 6), torch.eye(3).expand(2, 3, 3), torch.zeros(2, 7)
    with pytest.raises(ValueError, match="weight"):
        ops.depth_fusion_distance(tsdf, torch.zeros(4, 4, 5), 0.1, 0.3, torch.float32)
    with pytest.raises(TypeError, match="tsdf"):
        ops.depth_fusion_distance(tsdf.double(), weight, 0.1, 0.3, torch.float32)
    with pytest.raises(ValueError, match="intrinsics"):
        ops.depth_fusion_integrate(tsdf, weight, depth, k[:1], pose, z3, 0.1, 0.3, 5.0)
    with pytest.raises(ValueError, match="camera_pose"):
        ops.depth_fusion_integrate(tsdf, weight, depth, k, pose[:, :6], z3, 0.1, 0.3, 5.0)
    with pytest.raises(ValueError, match="truncation"):
        ops.depth_fusion_integrate(tsdf, weight, depth, k, pose, z3, 0.1, -0.3, 5.0)
    with warpgeo.value_checks(False):  # values unchecked: a garbage pose is read, never out of bounds
        ops.depth_fusion_integrate(tsdf, weight, depth, k, pose, z3, 0.1, 0.3, 5.0)
        ops.distance_grid_from_points(torch.full((3, 3), float("nan")), [4, 4, 4], z3, 0.1, torch.float32)


def test_fusion_cuda_path_on_cpu_tensors(monkeypatch):
    # CUDA's choice (a thread per block, unmarked ones returning) equals the CPU's (the marked blocks listed)
    from warpgeo import _warp

    poses = _poses()[:3]
    depths = np.stack([render(p) for p in poses])
    cpu = DepthFusion(BOUNDS, 0.03)
    cpu.integrate(depths, K, np.stack(poses))
    monkeypatch.setattr(_warp.PATHS, "cuda_on_cpu", True)
    cuda = DepthFusion(BOUNDS, 0.03)
    cuda.integrate(depths, K, np.stack(poses))
    assert float(cpu.weight.sum()) > 1000
    assert torch.equal(cpu.weight, cuda.weight) and torch.equal(cpu.tsdf, cuda.tsdf)
