"""sphere_mesh_cost, swept_sphere_mesh_cost and signed_distance against closed forms, trimesh and finite
differences; the autograd contract; torch.compile / opcheck."""

from __future__ import annotations

import math
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
import trimesh
from reference import box_sdf_reference, collision_cost_reference, triangle_distance_reference

import warpgeo
from warpgeo import MeshWorld, _launch, signed_distance, sphere_mesh_cost, swept_sphere_mesh_cost
from warpgeo import _world_query as world_query
from warpgeo import sdf as sdf_module

# --------------------------------------------------------------------------------------------------------
# input builders (the benchmark uses them too)
# --------------------------------------------------------------------------------------------------------

HALF = np.array([0.5, 0.3, 0.2])  # half extents of the test box


def box_mesh(half=HALF) -> trimesh.Trimesh:
    return trimesh.creation.box(extents=2 * np.asarray(half))


def sphere_mesh(radius: float = 1.0, subdivisions: int = 4) -> trimesh.Trimesh:
    return trimesh.creation.icosphere(subdivisions=subdivisions, radius=radius)


def torus_mesh() -> trimesh.Trimesh:
    return trimesh.creation.torus(major_radius=1.0, minor_radius=0.3, major_sections=48, minor_sections=24)


def random_pose(gen: torch.Generator) -> torch.Tensor:
    """A random ``[x, y, z, qw, qx, qy, qz]`` pose (float64)."""
    q = torch.randn(4, generator=gen, dtype=torch.float64)
    return torch.cat([torch.rand(3, generator=gen, dtype=torch.float64) * 2 - 1, q / q.norm()])


def scene_meshes() -> list[trimesh.Trimesh]:
    """Four obstacles of a manipulation scene: table top, box, sphere, torus (for the benchmark)."""
    return [
        box_mesh((0.6, 0.6, 0.02)),
        box_mesh((0.1, 0.15, 0.2)),
        sphere_mesh(0.15),
        torus_mesh().apply_scale(0.2),
    ]


SCENE_POSES = [
    [0.0, 0.0, -0.02, 1.0, 0.0, 0.0, 0.0],
    [0.3, -0.2, 0.2, math.cos(0.3), 0.0, 0.0, math.sin(0.3)],
    [-0.3, 0.25, 0.15, 1.0, 0.0, 0.0, 0.0],
    [0.1, 0.35, 0.3, math.cos(0.6), math.sin(0.6), 0.0, 0.0],
]


def quat_matrix(q) -> np.ndarray:
    w, x, y, z = (float(v) for v in q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def torus_sdf(p) -> np.ndarray:
    """Closed-form signed distance of the ideal torus (R = 1, r = 0.3) around the z axis."""
    q = np.stack([np.linalg.norm(p[:, :2], axis=1) - 1.0, p[:, 2]], axis=1)
    return np.linalg.norm(q, axis=1) - 0.3


@pytest.fixture(scope="module")
def box_world_cpu():
    return MeshWorld([box_mesh()])


def _world(meshes, device, **kw):
    return MeshWorld(meshes, device=device, **kw)


# --------------------------------------------------------------------------------------------------------
# signed distance: closed forms and trimesh
# --------------------------------------------------------------------------------------------------------


def test_icosphere_matches_analytic_sphere(device):
    mesh = sphere_mesh(1.0, 4)
    # the mesh lies between its inscribed radius (the nearest face plane) and 1: that band is the tolerance
    inradius = np.abs((mesh.face_normals * mesh.triangles[:, 0]).sum(1)).min()
    tol = (1.0 - inradius) + 1e-5
    world = _world([mesh], device)
    gen = torch.Generator().manual_seed(1)
    pts = (torch.rand(2000, 3, generator=gen) * 4 - 2).to(device)
    d = signed_distance(pts, world).cpu().numpy()
    expected = np.linalg.norm(pts.cpu().numpy(), axis=1) - 1.0
    assert tol < 2e-3
    np.testing.assert_allclose(d, expected, atol=tol)
    assert (d[expected < -tol] < 0).all() and (d[expected > tol] > 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_box_matches_closed_form(device, dtype):
    world = _world([box_mesh()], device)
    gen = torch.Generator().manual_seed(2)
    pts = torch.rand(3000, 3, generator=gen, dtype=torch.float64) * 2 - 1
    pts[:500] *= torch.tensor(HALF)  # plenty of points deep inside
    d = signed_distance(pts.to(device, dtype), world)
    assert d.dtype == dtype
    expected = box_sdf_reference(pts.numpy(), HALF)
    # a box is tessellated exactly: only float32 vertices (and float32 queries) limit the agreement
    np.testing.assert_allclose(d.cpu().double().numpy(), expected, atol=2e-6)


def test_torus_matches_trimesh_and_brute_force(device):
    mesh = torus_mesh()
    world = _world([mesh], device)
    gen = np.random.default_rng(3)
    pts = gen.uniform([-1.5, -1.5, -0.5], [1.5, 1.5, 0.5], size=(400, 3))
    d = signed_distance(torch.from_numpy(pts).to(device), world).cpu().numpy()
    # brute-force distance magnitude (no BVH, float64) and the sign of the ideal torus
    unsigned = triangle_distance_reference(pts, mesh.vertices, mesh.faces)
    np.testing.assert_allclose(np.abs(d), unsigned, atol=1e-6)
    ideal = torus_sdf(pts)
    sure = np.abs(ideal) > 0.02  # farther from the ideal surface than the tessellation error
    assert sure.sum() > 300
    np.testing.assert_array_equal(np.sign(d[sure]), np.sign(ideal[sure]))
    # trimesh is positive inside
    pytest.importorskip("rtree", reason="trimesh.proximity needs rtree")
    theirs = -trimesh.proximity.signed_distance(mesh, pts)
    np.testing.assert_allclose(d, theirs, atol=1e-5)


def test_sdf_gradient_has_unit_length(device):
    world = _world([torus_mesh()], device)
    gen = np.random.default_rng(4)
    pts = gen.uniform([-1.5, -1.5, -0.5], [1.5, 1.5, 0.5], size=(500, 3))
    ideal = torus_sdf(pts)
    # away from the medial axis (the core circle, where ideal = -0.3) and the surface; inside and outside
    keep = (np.abs(ideal) > 0.02) & (ideal > -0.2) & (ideal < 0.5)
    x = torch.from_numpy(pts[keep]).to(device).requires_grad_(True)
    d = signed_distance(x, world)
    (grad,) = torch.autograd.grad(d.sum(), x)
    np.testing.assert_allclose(grad.norm(dim=1).cpu().numpy(), 1.0, atol=1e-6)
    # and it is the gradient: a small step along it changes d by the step length
    step = 1e-4
    d2 = signed_distance((x + step * grad).detach(), world)
    np.testing.assert_allclose((d2 - d).detach().cpu().numpy(), step, atol=2e-6)


def test_open_mesh_winding_sign(device):
    mesh = sphere_mesh(1.0, 4)
    # cut a hole around the north pole
    mesh = trimesh.Trimesh(mesh.vertices, mesh.faces[mesh.triangles_center[:, 2] < 0.85], process=False)
    assert not mesh.is_watertight
    world = _world([mesh], device, sign_method="winding")
    pts = torch.tensor(
        [
            [0, 0, 0],
            [0, 0, -0.5],
            [0.5, 0, 0],
            [0, -0.6, 0.2],
            [0, 0, 1.5],
            [1.5, 0, 0],
            [0, 2, -1],
            [0, 0, -1.3],
        ],
        dtype=torch.float64,
        device=device,
    )
    d = signed_distance(pts, world).cpu().numpy()
    expected = np.linalg.norm(pts.cpu().numpy(), axis=1) - 1.0
    np.testing.assert_array_equal(np.sign(d), np.sign(expected))
    np.testing.assert_allclose(d[[0, 1, 2, 3, 5, 6, 7]], expected[[0, 1, 2, 3, 5, 6, 7]], atol=2e-3)


# --------------------------------------------------------------------------------------------------------
# cost: closed forms, poses, environments
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("eta", [0.0, 0.05])
def test_cube_penetration_on_faces(device, eta):
    world = _world([box_mesh((0.5, 0.5, 0.5))], device)
    centres = torch.tensor(
        [
            [0.5, 0.1, -0.2],
            [-0.5, 0.3, 0.3],
            [0.2, 0.5, 0.0],
            [0.0, -0.5, 0.4],
            [0.1, 0.1, 0.5],
            [-0.3, 0.2, -0.5],
        ]
    )
    spheres = torch.cat([centres, torch.full((6, 1), 0.1)], dim=1).to(device)
    cost = sphere_mesh_cost(spheres, world, activation_distance=eta)
    expected = 0.1 if eta == 0 else 0.1 + eta - eta / 2
    np.testing.assert_allclose(cost.cpu().numpy(), expected, atol=1e-4)


@pytest.mark.parametrize("eta", [0.0, 0.1])
def test_cost_matches_reference_on_box(device, eta):
    world = _world([box_mesh()], device)
    gen = torch.Generator().manual_seed(5)
    spheres = torch.rand(2, 3, 200, 4, generator=gen, dtype=torch.float64)
    spheres[..., :3] = spheres[..., :3] * 1.6 - 0.8
    spheres[..., 3] *= 0.3
    spheres[0, 0, :10, 3] = -1.0  # disabled
    cost = sphere_mesh_cost(spheres.to(device), world, activation_distance=eta, weight=2.5)
    assert cost.shape == (2, 3, 200)
    d = box_sdf_reference(spheres[..., :3].numpy(), HALF)
    expected = collision_cost_reference(d, spheres[..., 3].numpy(), eta, 2.5)
    expected[0, 0, :10] = 0.0
    np.testing.assert_allclose(cost.cpu().numpy(), expected, atol=1e-5)
    assert (expected > 0).sum() > 200 and (expected == 0).sum() > 200


def test_deep_inside_is_a_collision_whatever_max_distance(device):
    world = _world([box_mesh((2.0, 2.0, 2.0))], device)
    spheres = torch.tensor([[0.0, 0.0, 0.0, 0.05], [1.0, 0.5, -0.3, 0.0]], device=device)
    for max_distance in (None, 0.0, 0.01, 10.0):
        cost = sphere_mesh_cost(spheres, world, max_distance=max_distance)
        np.testing.assert_allclose(cost.cpu().numpy(), [2.05, 1.0], atol=1e-5)


def test_cost_sums_over_meshes_and_respects_enabled(device):
    meshes = [box_mesh((0.5, 0.5, 0.5)), box_mesh((0.5, 0.5, 0.5))]
    world = MeshWorld(meshes, poses=[[0, 0, 0, 1, 0, 0, 0], [0.8, 0, 0, 1, 0, 0, 0]], device=device)
    sphere = torch.tensor([[0.4, 0.0, 0.0, 0.05]], device=device)  # inside both: d = -0.1 and -0.1
    np.testing.assert_allclose(sphere_mesh_cost(sphere, world).cpu().numpy(), [0.3], atol=1e-5)
    world.set_enabled([True, False])
    np.testing.assert_allclose(sphere_mesh_cost(sphere, world).cpu().numpy(), [0.15], atol=1e-5)
    world.set_enabled([False, False])
    assert sphere_mesh_cost(sphere, world).item() == 0.0
    assert signed_distance(sphere[:, :3], world).item() == float("inf")


def test_posed_mesh_equals_transformed_vertices(device):
    gen = torch.Generator().manual_seed(6)
    mesh = torus_mesh()
    pose = random_pose(gen)
    rot = quat_matrix(pose[3:])
    moved = trimesh.Trimesh(mesh.vertices @ rot.T + pose[:3].numpy(), mesh.faces, process=False)
    posed = MeshWorld([mesh], poses=pose[None], device=device)
    baked = MeshWorld([moved], device=device)
    spheres = torch.rand(300, 4, generator=gen, dtype=torch.float64)
    spheres[:, :3] = spheres[:, :3] * 3 - 1.5 + pose[:3]
    spheres[:, 3] *= 0.2
    spheres = spheres.to(device)
    results = []
    for world in (posed, baked):
        x = spheres.clone().requires_grad_(True)
        cost = sphere_mesh_cost(x, world, activation_distance=0.05)
        (grad,) = torch.autograd.grad(cost.sum(), x)
        results.append((cost.detach().cpu().numpy(), grad.cpu().numpy(), signed_distance(x[:, :3], world)))
    np.testing.assert_allclose(results[0][0], results[1][0], atol=2e-6)
    # float32 vertices round differently once moved: near the surface the closest-point direction follows
    np.testing.assert_allclose(results[0][1], results[1][1], atol=2e-3)
    np.testing.assert_allclose(
        results[0][2].detach().cpu().numpy(), results[1][2].detach().cpu().numpy(), atol=2e-6
    )
    assert (results[0][0] > 0).sum() > 30


def test_two_environments(device):
    world = MeshWorld.from_envs(
        [[box_mesh()], [sphere_mesh(0.5), box_mesh()]],
        poses=[[[0, 0, 0, 1, 0, 0, 0]], [[2, 0, 0, 1, 0, 0, 0], [0, 5, 0, 1, 0, 0, 0]]],
        device=device,
    )
    assert world.num_envs == 2 and world.max_meshes == 2 and world.num_meshes == (1, 2)
    probe = torch.tensor([[0.0, 0.0, 0.0, 0.1], [2.0, 0.0, 0.0, 0.1], [0.0, 5.0, 0.0, 0.1]], device=device)
    spheres = probe[None].repeat(2, 1, 1)
    cost = sphere_mesh_cost(spheres, world, env_index=torch.tensor([0, 1], device=device)).cpu().numpy()
    inner = 0.2 + 0.1  # box: d = -0.2 at its centre
    np.testing.assert_allclose(cost[0], [inner, 0.0, 0.0], atol=1e-5)
    np.testing.assert_allclose(cost[1], [0.0, 0.5 + 0.1, inner], atol=2e-3)
    d = signed_distance(probe[:, :3], world, env_index=torch.tensor([1, 1, 0], device=device)).cpu().numpy()
    # env 1 at the origin: the sphere (d = 1.5) is nearer than the box at y = 5; env 0 at y = 5: the box
    np.testing.assert_allclose(d, [1.5, -0.5, 5 - 0.3], atol=2e-3)


# --------------------------------------------------------------------------------------------------------
# gradients
# --------------------------------------------------------------------------------------------------------


def _numerical_grad(fn, x: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    grad = torch.zeros_like(x)
    for i in range(x.numel()):
        e = torch.zeros_like(x).view(-1)
        e[i] = h
        e = e.view_as(x)
        grad.view(-1)[i] = (fn(x + e).sum() - fn(x - e).sum()) / (2 * h)
    return grad


@pytest.mark.parametrize(
    "case, sphere",
    [
        ("outside the band", [0.0, 0.42, 0.05, 0.2]),  # d = 0.12, phi = 0.13 > eta
        ("in the band", [0.1, 0.05, 0.3, 0.08]),  # d = 0.1, phi = 0.03 < eta
        ("inside", [0.3, -0.1, 0.05, 0.05]),  # d = -0.15
        ("inside near an edge", [0.42, 0.25, 0.1, 0.01]),
        ("at the surface", [0.2, 0.3, -0.05, 0.1]),  # centre on the +y face: d = 0
        ("beyond reach", [0.9, 0.0, 0.0, 0.1]),  # no cost, no gradient
    ],
)
def test_cost_gradient_matches_finite_differences(device, case, sphere):
    world = _world([box_mesh()], device)
    eta = 0.05
    x = torch.tensor([sphere], dtype=torch.float64, device=device, requires_grad=True)
    cost = sphere_mesh_cost(x, world, activation_distance=eta, weight=3.0)
    (grad,) = torch.autograd.grad(cost.sum(), x)
    assert torch.isfinite(grad).all()
    numerical = _numerical_grad(
        lambda s: sphere_mesh_cost(s, world, activation_distance=eta, weight=3.0), x.detach()
    )
    np.testing.assert_allclose(grad.cpu().numpy(), numerical.cpu().numpy(), atol=1e-6, err_msg=case)
    # closed form: d cost / d r = weight * min(phi / eta, 1), d cost / d centre = -that * grad d
    d = box_sdf_reference(np.array(sphere[:3]), HALF)
    phi = sphere[3] + eta - d
    dr = 0.0 if phi <= 0 else 3.0 * min(phi / eta, 1.0)
    # (vertices are float32: 0.2 is stored as 0.2 + 3e-9)
    assert grad[0, 3].item() == pytest.approx(dr, abs=1e-6)
    if case == "at the surface":
        # centre on the +y face: moving in (-y) raises the cost; the gradient is the face normal, never 0/NaN
        np.testing.assert_allclose(grad[0, :3].cpu().numpy(), [0.0, -3.0, 0.0], atol=1e-6)


def test_gradcheck_chains_grad_output(device):
    world = _world([torus_mesh()], device)
    gen = torch.Generator().manual_seed(7)
    centres = torch.rand(6, 3, generator=gen, dtype=torch.float64) * 0.2 + torch.tensor([0.9, 0.0, 0.1])
    spheres = torch.cat([centres, torch.full((6, 1), 0.25, dtype=torch.float64)], dim=1)
    spheres = spheres.to(device).requires_grad_(True)
    assert (sphere_mesh_cost(spheres, world, activation_distance=0.1) > 0).all()
    # gradcheck feeds a random upstream gradient (vjp) and compares with central differences
    assert torch.autograd.gradcheck(
        lambda s: sphere_mesh_cost(s, world, activation_distance=0.1, weight=2.0), (spheres,), atol=1e-6
    )
    points = spheres[:, :3].detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda p: signed_distance(p, world), (points,), atol=1e-6)


# --------------------------------------------------------------------------------------------------------
# swept
# --------------------------------------------------------------------------------------------------------


def test_swept_catches_tunnelling_through_a_thin_wall(device):
    world = _world([box_mesh((1.0, 1.0, 0.005))], device)
    traj = torch.tensor(
        [[[[0.1, 0.2, -0.3, 0.02]], [[0.1, 0.2, 0.3, 0.02]], [[0.1, 0.2, 0.5, 0.02]]]], device=device
    )
    assert sphere_mesh_cost(traj, world).abs().max().item() == 0.0  # every step is free
    swept = swept_sphere_mesh_cost(traj, world, sweep_steps=5)
    assert swept.shape == (1, 3, 1)
    # step 0 is the mean over the 6 samples t = 0, 1/6, ..., 5/6; the one at t = 1/2 sits in the wall
    # (phi = 0.025), the others are clear
    assert swept[0, 0, 0].item() == pytest.approx(0.025 / 6, abs=1e-6)
    assert swept[0, 1:].abs().max().item() == 0.0
    # a disabled end disables the samples
    traj[0, 1, 0, 3] = -1.0
    assert swept_sphere_mesh_cost(traj, world, sweep_steps=5).abs().max().item() == 0.0


def test_swept_reduces_to_discrete(device):
    world = _world([box_mesh()], device)
    gen = torch.Generator().manual_seed(8)
    spheres = (torch.rand(3, 1, 50, 4, generator=gen) - 0.5).to(device)
    spheres[..., 3] = spheres[..., 3].abs() * 0.5
    discrete = sphere_mesh_cost(spheres, world, activation_distance=0.02)
    torch.testing.assert_close(swept_sphere_mesh_cost(spheres, world, activation_distance=0.02), discrete)
    long = spheres.expand(3, 4, 50, 4).contiguous()
    torch.testing.assert_close(
        swept_sphere_mesh_cost(long, world, sweep_steps=0, activation_distance=0.02),
        sphere_mesh_cost(long, world, activation_distance=0.02),
    )


def _swept_by_composition(spheres, world, steps, eta):
    """DESIGN's swept cost built from sphere_mesh_cost and torch ops (its gradient comes from autograd):
    step h < H - 1 is the mean of the costs at t = j / (S + 1), j = 0..S, of the sphere interpolated towards
    step h + 1, unless either end is disabled; the last step is scored alone."""
    t = torch.arange(0, steps + 1, dtype=spheres.dtype, device=spheres.device) / (steps + 1)
    a, b = spheres[:, :-1, None], spheres[:, 1:, None]
    mid = a + (b - a) * t[None, None, :, None, None]
    samples = sphere_mesh_cost(mid, world, activation_distance=eta).mean(dim=2)
    base = sphere_mesh_cost(spheres, world, activation_distance=eta)
    both = (spheres[:, :-1, :, 3] >= 0) & (spheres[:, 1:, :, 3] >= 0)
    return torch.cat([torch.where(both, samples, base[:, :-1]), base[:, -1:]], dim=1)


def test_swept_motionless_trajectory_costs_the_discrete_cost(device):
    world = _world([box_mesh()], device)
    gen = torch.Generator().manual_seed(10)
    still = (torch.rand(2, 1, 20, 4, generator=gen) - 0.5).expand(2, 5, 20, 4).contiguous().to(device)
    still[..., 3] = still[..., 3].abs() * 0.4
    discrete = sphere_mesh_cost(still, world, activation_distance=0.03, weight=2.0)
    assert discrete.abs().sum() > 0
    for steps in (0, 1, 4, 9):
        swept = swept_sphere_mesh_cost(still, world, sweep_steps=steps, activation_distance=0.03, weight=2.0)
        torch.testing.assert_close(swept, discrete)


def test_swept_gradcheck_float64():
    world = _world([box_mesh()], torch.device("cpu"))
    gen = torch.Generator().manual_seed(11)
    spheres = torch.rand(1, 3, 2, 4, generator=gen, dtype=torch.float64)
    spheres[..., :3] = spheres[..., :3] * 1.2 - 0.6
    spheres[..., 3] = spheres[..., 3] * 0.2 + 0.1
    spheres.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda s: swept_sphere_mesh_cost(s, world, sweep_steps=2, activation_distance=0.05),
        (spheres,),
        atol=1e-6,
    )


def test_swept_gradient(device):
    world = _world([box_mesh()], device)
    gen = torch.Generator().manual_seed(9)
    spheres = torch.rand(2, 4, 3, 4, generator=gen, dtype=torch.float64)
    spheres[..., :3] = spheres[..., :3] * 1.6 - 0.8
    spheres[..., 3] = spheres[..., 3] * 0.2 + 0.05
    spheres[1, 2, 0, 3] = -1.0
    spheres = spheres.to(device).requires_grad_(True)
    upstream = torch.rand(2, 4, 3, generator=gen, dtype=torch.float64).to(device)
    cost = swept_sphere_mesh_cost(spheres, world, sweep_steps=3, activation_distance=0.05)
    (grad,) = torch.autograd.grad(cost, spheres, upstream)
    ref = _swept_by_composition(spheres, world, 3, 0.05)
    (ref_grad,) = torch.autograd.grad(ref, spheres, upstream)
    torch.testing.assert_close(cost, ref)
    torch.testing.assert_close(grad, ref_grad)
    assert grad.abs().sum() > 0
    numerical = _numerical_grad(
        lambda s: swept_sphere_mesh_cost(s, world, sweep_steps=3, activation_distance=0.05) * upstream,
        spheres.detach(),
    )
    np.testing.assert_allclose(grad.cpu().numpy(), numerical.cpu().numpy(), atol=1e-5)


# --------------------------------------------------------------------------------------------------------
# dtypes and the autograd contract
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dtypes(device, dtype, box_world_cpu):
    world = box_world_cpu if device.type == "cpu" else _world([box_mesh()], device)
    spheres = torch.tensor([[0.5, 0.0, 0.0, 0.125], [0.0, 0.0, 0.0, 0.25]], device=device, dtype=dtype)
    spheres.requires_grad_(True)
    cost = sphere_mesh_cost(spheres, world)
    assert cost.dtype == dtype
    cost.sum().backward()
    assert spheres.grad.dtype == dtype
    np.testing.assert_allclose(cost.detach().double().cpu().numpy(), [0.125, 0.45], atol=1e-2)
    traj = spheres.detach()[None, :, None].contiguous()
    assert swept_sphere_mesh_cost(traj, world).dtype == dtype
    assert signed_distance(spheres.detach()[:, :3], world).dtype == dtype


def test_no_gradient_computed_unless_needed(monkeypatch, box_world_cpu):
    calls = []

    def spy(real):
        def call(**kwargs):
            calls.append(kwargs["compute_grad"])
            return real(**kwargs)

        return call

    for op in (sdf_module._cost, sdf_module._swept):
        monkeypatch.setattr(op, "call", spy(op.call))
    spheres = torch.tensor([[0.5, 0.0, 0.0, 0.1]])
    sphere_mesh_cost(spheres, box_world_cpu)
    swept_sphere_mesh_cost(spheres[None, None], box_world_cpu)
    with torch.no_grad():
        sphere_mesh_cost(spheres.clone().requires_grad_(True), box_world_cpu)
        swept_sphere_mesh_cost(spheres[None, None].clone().requires_grad_(True), box_world_cpu)
    assert calls == [False, False, False, False]
    sphere_mesh_cost(spheres.clone().requires_grad_(True), box_world_cpu)
    assert calls[-1] is True


def test_backward_with_none_grad_output():
    for backward, n_inputs in (
        (warpgeo.SdfMesh.backward, 7),
        (warpgeo.SweptSdfMesh.backward, 7),
        (sdf_module._backward_distance, 5),
    ):
        ctx = types.SimpleNamespace(needs_input_grad=(True,) + (False,) * (n_inputs - 1), saved_tensors=())
        assert backward(ctx, None, None) == (None,) * n_inputs


def test_second_forward_does_not_overwrite_the_first(box_world_cpu):
    a = torch.tensor([[0.45, 0.0, 0.0, 0.1]], requires_grad=True)
    b = torch.tensor([[0.0, 0.25, 0.0, 0.1]], requires_grad=True)
    cost_a = sphere_mesh_cost(a, box_world_cpu)
    cost_b = sphere_mesh_cost(b, box_world_cpu)
    (ga,) = torch.autograd.grad(cost_a.sum() * 2.0, a)
    (gb,) = torch.autograd.grad(cost_b.sum(), b)
    np.testing.assert_allclose(ga.numpy(), [[-2.0, 0.0, 0.0, 2.0]], atol=1e-6)
    np.testing.assert_allclose(gb.numpy(), [[0.0, -1.0, 0.0, 1.0]], atol=1e-6)


def test_tensor_parameters_need_no_host_sync(box_world_cpu):
    spheres = torch.tensor([[0.55, 0.0, 0.0, 0.1]])
    eta, weight = torch.tensor(0.1), torch.tensor([2.0])
    cost = sphere_mesh_cost(spheres, box_world_cpu, activation_distance=eta, weight=weight)
    np.testing.assert_allclose(cost.numpy(), collision_cost_reference(0.05, 0.1, 0.1, 2.0), atol=1e-6)


# --------------------------------------------------------------------------------------------------------
# errors (through the public functions)
# --------------------------------------------------------------------------------------------------------


def test_errors(box_world_cpu):
    w = box_world_cpu
    good = torch.zeros(2, 4)
    with pytest.raises(TypeError, match="spheres"):
        sphere_mesh_cost(torch.zeros(2, 4, dtype=torch.int32), w)
    with pytest.raises(ValueError, match=r"spheres must have shape \(\.\.\., 4\)"):
        sphere_mesh_cost(torch.zeros(2, 3), w)
    with pytest.raises(ValueError, match="device"):
        sphere_mesh_cost(torch.zeros(2, 4, device="meta"), w)
    with pytest.raises(ValueError, match="finite"):
        sphere_mesh_cost(torch.tensor([[0.0, float("nan"), 0.0, 0.1]]), w)
    with pytest.raises(ValueError, match="finite"):
        signed_distance(torch.tensor([[0.0, float("inf"), 0.0]]), w)
    with pytest.raises(IndexError, match="env_index"):
        sphere_mesh_cost(good, w, env_index=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="env_index must have shape"):
        sphere_mesh_cost(good, w, env_index=torch.tensor([0]))
    with pytest.raises(TypeError, match="env_index"):
        sphere_mesh_cost(good, w, env_index=torch.tensor([0.0, 0.0]))
    with pytest.raises(ValueError, match="activation_distance"):
        sphere_mesh_cost(good, w, activation_distance=-0.1)
    with pytest.raises(ValueError, match="activation_distance"):
        sphere_mesh_cost(good, w, activation_distance=torch.tensor(-0.1))
    with pytest.raises(ValueError, match="weight"):
        sphere_mesh_cost(good, w, weight=torch.ones(2))
    with pytest.raises(ValueError, match="max_distance"):
        sphere_mesh_cost(good, w, max_distance=-1.0)
    with pytest.raises(TypeError, match="world"):
        sphere_mesh_cost(good, [box_mesh()])
    with pytest.raises(ValueError, match=r"\(B, H, N, 4\)"):
        swept_sphere_mesh_cost(good, w)
    with pytest.raises(ValueError, match="sweep_steps"):
        swept_sphere_mesh_cost(good[None, None], w, sweep_steps=-1)
    with pytest.raises(TypeError, match="sweep_steps"):
        swept_sphere_mesh_cost(good[None, None], w, sweep_steps=2.0)
    with pytest.raises(ValueError, match=r"points must have shape \(\.\.\., 3\)"):
        signed_distance(good, w)


# --------------------------------------------------------------------------------------------------------
# torch.compile and opcheck
# --------------------------------------------------------------------------------------------------------


def _all_three(spheres, world, eta):
    traj = spheres.reshape(1, 2, -1, 4)
    return (
        sphere_mesh_cost(spheres, world, activation_distance=eta, weight=2.0).sum()
        + swept_sphere_mesh_cost(traj, world, sweep_steps=2, activation_distance=eta).sum()
        + signed_distance(spheres[..., :3], world).square().sum()
    )


def test_compile_fullgraph_matches_eager(device):
    world = _world([box_mesh(), sphere_mesh(0.3)], device)
    world.set_poses([[0, 0, 0, 1, 0, 0, 0], [0.6, 0, 0, 1, 0, 0, 0]])
    gen = torch.Generator().manual_seed(10)
    spheres = torch.rand(1, 8, 4, generator=gen)
    spheres[..., :3] = spheres[..., :3] * 1.2 - 0.4
    spheres[..., 3] *= 0.2
    spheres = spheres.to(device).requires_grad_(True)
    eta = torch.tensor(0.05, device=device)
    explanation = torch._dynamo.explain(_all_three)(spheres, world, eta)
    assert explanation.graph_break_count == 0
    compiled = torch.compile(_all_three, backend="aot_eager", fullgraph=True)
    out = compiled(spheres, world, eta)
    (g_compiled,) = torch.autograd.grad(out, spheres)
    ref = _all_three(spheres, world, eta)
    (g_eager,) = torch.autograd.grad(ref, spheres)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g_compiled, g_eager)
    assert g_eager.abs().sum() > 0


def test_compile_inductor(box_world_cpu, monkeypatch):
    """Inductor, fullgraph, on a first use of these parameters whatever ran before (the parameter cache
    emptied, dynamo reset): the test once passed only after an eager call had cached them."""
    from warpgeo import _world_query as query

    monkeypatch.setattr(query, "_PARAMS", {})
    monkeypatch.setattr(query, "_TRUSTED_PARAMS", {})
    torch._dynamo.reset()
    spheres = torch.tensor([[0.45, 0.0, 0.0, 0.1], [0.0, 0.25, 0.0, 0.1]], requires_grad=True)

    def loss(x):
        return sphere_mesh_cost(x * 1.0, box_world_cpu, activation_distance=0.02).sum()

    out = torch.compile(loss, fullgraph=True)(spheres)
    (g,) = torch.autograd.grad(out, spheres)
    (g_ref,) = torch.autograd.grad(loss(spheres), spheres)
    torch.testing.assert_close(g, g_ref)


_FRESH_COMPILE = """
import torch, trimesh, warpgeo
world = warpgeo.MeshWorld([trimesh.creation.box((1, 1, 1))])
spheres = torch.tensor([[0.45, 0.0, 0.0, 0.1], [0.0, 0.25, 0.0, 0.1]])
traj = spheres[None, None].expand(1, 2, 2, 4).contiguous()  # two steps, motionless
cost = lambda x: warpgeo.sphere_mesh_cost(x, world, activation_distance=0.05).sum()
swept = lambda x: warpgeo.swept_sphere_mesh_cost(x, world, activation_distance=0.05, weight=2.0).sum()
print(torch.compile(cost, fullgraph=True, backend="eager")(spheres).item())
print(torch.compile(swept, fullgraph=True, backend="eager")(traj).item())
"""


def test_compile_fullgraph_on_a_first_use_in_a_fresh_process():
    """``torch.compile(fullgraph=True)`` of sphere_mesh_cost and swept_sphere_mesh_cost as the first use of
    their parameters in a fresh process (the parameter cache's ids once broke the trace: "Reconstruction of
    FakeIdVariable"); the costs against the closed form: a box of side 1, sphere centres 0.05 and 0.25 inside
    (d = -0.05, -0.25), r = 0.1, eta = 0.05, so phi = 0.2, 0.4 > eta and each cost is phi - eta / 2."""
    done = subprocess.run([sys.executable, "-c", _FRESH_COMPILE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cost, swept = (float(line) for line in done.stdout.split())
    want = (0.2 - 0.025) + (0.4 - 0.025)
    assert cost == pytest.approx(want, rel=1e-6)
    assert swept == pytest.approx(2 * 2.0 * want, rel=1e-6)  # motionless: each step's discrete cost, weight 2


def test_opcheck(device):
    world = _world([box_mesh()], device)
    args = world.kernel_args(torch.float64)._asdict()  # world, all_cuboids
    gen = torch.Generator().manual_seed(11)
    spheres = (torch.rand(2, 5, 4, generator=gen, dtype=torch.float64) * 0.8 - 0.4).to(device)
    spheres[..., 3] = 0.1
    env = torch.zeros(2, dtype=torch.int64, device=device)
    params = torch.tensor([0.05, 1.5], dtype=torch.float64, device=device)
    for compute_grad in (True, False):
        x = spheres.clone().requires_grad_(compute_grad)
        torch.library.opcheck(
            sdf_module._cost.custom,
            (x, env),
            dict(args, params=params, max_distance=0.0, compute_grad=compute_grad),
        )
        traj = spheres.reshape(2, 5, 1, 4).clone().requires_grad_(compute_grad)
        torch.library.opcheck(
            sdf_module._swept.custom,
            (traj, None),
            dict(args, params=params, sweep_steps=2, compute_grad=compute_grad),
        )
        p = spheres[..., :3].clone().requires_grad_(compute_grad)
        torch.library.opcheck(sdf_module._distance.custom, (p, env), dict(args, compute_grad=compute_grad))


def test_shapes(box_world_cpu):
    w = box_world_cpu
    assert sphere_mesh_cost(torch.tensor([0.5, 0.0, 0.0, 0.1]), w).shape == ()
    assert sphere_mesh_cost(torch.zeros(0, 4), w).shape == (0,)
    assert sphere_mesh_cost(torch.zeros(2, 0, 3, 4), w).shape == (2, 0, 3)
    assert swept_sphere_mesh_cost(torch.zeros(0, 3, 2, 4), w).shape == (0, 3, 2)
    assert signed_distance(torch.zeros(5, 2, 3), w).shape == (5, 2)


def test_cpu_launch_split_among_threads_gives_the_same_answer(monkeypatch):
    """One launch or one per torch thread; one sphere per Warp thread or several in a row (chunks that
    straddle the end of a batch entry's row, and a last chunk cut short): the same bits everywhere."""
    world = MeshWorld(scene_meshes(), poses=SCENE_POSES)
    gen = torch.Generator().manual_seed(3)
    spheres = torch.rand(3, 700, 4, generator=gen) * torch.tensor([1.4, 1.4, 0.8, 0.1])
    spheres[..., :3] -= torch.tensor([0.7, 0.7, 0.1])
    points = spheres[..., :3].clone()
    results = []
    cases = [(1 << 60, 1), (1, 1), (1 << 60, 3), (1, 3), (1 << 60, 32), (1, 32), (1, 5000)]
    for threshold, per in cases:  # one launch, then one launch per torch thread
        monkeypatch.setattr(_launch, "_MIN_SPLIT_WORK", threshold)
        monkeypatch.setattr(world_query, "ROWS_PER_CPU_THREAD", per)
        s = spheres.clone().requires_grad_()
        p = points.clone().requires_grad_()
        t = spheres.reshape(3, 7, 100, 4).clone().requires_grad_()
        cost = sphere_mesh_cost(s, world, activation_distance=0.02)
        dist = signed_distance(p, world)
        swept = swept_sphere_mesh_cost(t, world, sweep_steps=2, activation_distance=0.02)
        (cost.sum() + dist.sum() + swept.sum()).backward()
        results.append((cost, dist, swept, s.grad, p.grad, t.grad))
    assert results[0][0].gt(0).any(), "some spheres must collide for this test to mean anything"
    assert results[0][2].gt(0).any()
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert torch.equal(a, b)


# --------------------------------------------------------------------------------------------------------
# sign methods and the exact shortcuts (closed meshes, distance grids) against the reference path
# --------------------------------------------------------------------------------------------------------


def _reference_path(world: MeshWorld) -> MeshWorld:
    """``world`` with its shortcuts off (no closed flag, no grid, no broad phase: posed boxes without bounds):
    every query takes the plain path."""
    world._tables["grid_dims"].zero_()
    world._tables["grid_flags"].zero_()
    bounds = world._tables["world_bounds"]
    bounds[..., 0, :] = -math.inf
    bounds[..., 1, :] = math.inf
    return world


def _probe_points(meshes, poses, n: int, seed: int) -> torch.Tensor:
    """Points deep inside, near the surfaces (surface samples + noise) and around the posed meshes."""
    gen = np.random.default_rng(seed)
    posed = [
        m.vertices @ quat_matrix(p[3:]).T + np.asarray(p[:3]) for m, p in zip(meshes, poses, strict=True)
    ]
    allv = np.concatenate(posed)
    lo, hi = allv.min(0) - 0.2, allv.max(0) + 0.2
    near = np.concatenate(
        [
            trimesh.sample.sample_surface(trimesh.Trimesh(v, m.faces, process=False), n, seed=seed)[0]
            for v, m in zip(posed, meshes, strict=True)
        ]
    )
    near = near + gen.normal(scale=0.02, size=near.shape)
    return torch.from_numpy(np.concatenate([gen.uniform(lo, hi, size=(3 * n, 3)), near]))


_CLOSED_SCENE = [box_mesh((0.3, 0.2, 0.25)), sphere_mesh(0.3, 3), torus_mesh().apply_scale(0.4)]
_CLOSED_POSES = [
    [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
    [0.5, 0.2, -0.1, math.cos(0.4), 0.0, math.sin(0.4), 0.0],
    [-0.4, 0.3, 0.2, math.cos(0.7), math.sin(0.7), 0.0, 0.0],
]


@pytest.mark.parametrize("method", ["ray", "normal", "winding", "unsigned"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shortcuts_match_the_reference_path(device, method, dtype):
    """Closed-mesh sign and distance grids and the cuboid's closed form change no distance, cost or gradient
    (posed box, icosphere, torus; points deep inside, near the surfaces and around)."""
    fast = MeshWorld(_CLOSED_SCENE, poses=_CLOSED_POSES, device=device, sign_method=method)
    assert fast._tables["grid_flags"].tolist() == [[3, 1, 1]]  # the box is a cuboid (closed form)
    assert (fast._tables["grid_dims"][0, 1:, 0] > 0).all()
    slow = _reference_path(MeshWorld(_CLOSED_SCENE, poses=_CLOSED_POSES, device=device, sign_method=method))
    pts = _probe_points(_CLOSED_SCENE, _CLOSED_POSES, 300, seed=11).to(device, dtype)
    gen = torch.Generator().manual_seed(12)
    radii = (torch.rand(len(pts), 1, generator=gen, dtype=torch.float64) * 0.06).to(device, dtype)
    out = []
    for world in (fast, slow):
        x = pts.clone().requires_grad_(True)
        d = signed_distance(x, world)
        (gd,) = torch.autograd.grad(d.sum(), x)
        s = torch.cat([pts, radii], 1).requires_grad_(True)
        cost = sphere_mesh_cost(s, world, activation_distance=0.02)
        (gc,) = torch.autograd.grad(cost.sum(), s)
        out.append([t.detach().cpu().double().numpy() for t in (d, gd, cost, gc)])
    (d0, gd0, c0, gc0), (d1, gd1, c1, gc1) = out
    tol = 1e-6 if dtype == torch.float32 else 1e-9
    np.testing.assert_allclose(d0, d1, atol=tol)
    np.testing.assert_allclose(c0, c1, atol=tol)
    # a near-tie between two faces (a point on or by the medial axis: equal distances, two closest points) may
    # go either way, depending on the order a bounded query visits the BVH (it differs on CUDA, whose BVH is
    # built differently): the direction then differs a little at a handful of points
    close = 1e-6 if dtype == torch.float64 else 1e-5
    ties = 0.0 if dtype == torch.float64 and torch.device(device).type == "cpu" else 0.005
    for a, b in ((gd0, gd1), (gc0, gc1)):
        np.testing.assert_allclose(a, b, atol=1e-3)
        assert (np.abs(a - b).max(axis=1) > close).mean() <= ties
    assert (np.abs(d0) < 0.02).sum() > 100  # near the surfaces
    if method == "unsigned":
        assert (d0 >= 0).all()
    else:
        assert (d0 < -0.05).sum() > 50  # deep inside


def _without_broad_phase(world: MeshWorld) -> MeshWorld:
    """``world`` with its broad phase off (posed boxes without bounds) and every other shortcut on."""
    bounds = world._tables["world_bounds"]
    bounds[..., 0, :] = -math.inf
    bounds[..., 1, :] = math.inf
    return world


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_broad_phase_changes_nothing_and_follows_set_poses(device, dtype):
    """The posed-box broad phase drops only pairs that score nothing: cost, gradient and signed distance are
    bit for bit those of the same world without it (closed, open and unsigned meshes), also after set_poses
    has moved every mesh far from where it was (a stale box would miss all of those collisions)."""
    meshes = [*_CLOSED_SCENE, _open_bin(0.6, 0.4)]
    methods = ["ray", "normal", "unsigned", "winding"]
    fast = MeshWorld(meshes, poses=[*_CLOSED_POSES, _CLOSED_POSES[0]], device=device, sign_method=methods)
    slow = MeshWorld(meshes, poses=[*_CLOSED_POSES, _CLOSED_POSES[0]], device=device, sign_method=methods)
    moved = [[p[0] + 5.0, p[1] - 3.0, *p[2:]] for p in [*_CLOSED_POSES, _CLOSED_POSES[1]]]
    gen = torch.Generator().manual_seed(31)
    for poses in (None, moved):
        if poses is not None:
            fast.set_poses(poses)
            slow.set_poses(poses)
        _without_broad_phase(slow)
        placed = poses if poses is not None else [*_CLOSED_POSES, _CLOSED_POSES[0]]
        pts = _probe_points(meshes, placed, 200, seed=32).to(device, dtype)
        radii = (torch.rand(len(pts), 1, generator=gen, dtype=torch.float64) * 0.08).to(device, dtype)
        out = []
        for world in (fast, slow):
            s = torch.cat([pts, radii], 1).requires_grad_(True)
            cost = sphere_mesh_cost(s, world, activation_distance=0.02)
            (grad,) = torch.autograd.grad(cost.sum(), s)
            out.append([t.detach().cpu() for t in (cost, grad, signed_distance(pts, world))])
        for a, b in zip(*out, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert (out[0][0] > 0).sum() > 200 and (out[0][0] == 0).sum() > 200


def test_normal_equals_ray_on_closed_meshes(device):
    """On closed meshes the pseudo-normal sign and the ray vote agree (both on their plain paths)."""
    pts = _probe_points(_CLOSED_SCENE, _CLOSED_POSES, 300, seed=13).to(device)
    d = {
        method: signed_distance(
            pts,
            _reference_path(MeshWorld(_CLOSED_SCENE, poses=_CLOSED_POSES, device=device, sign_method=method)),
        )
        .cpu()
        .numpy()
        for method in ("ray", "normal", "winding")
    }
    np.testing.assert_allclose(d["normal"], d["ray"], atol=1e-9)
    np.testing.assert_allclose(d["winding"], d["ray"], atol=1e-9)
    assert (d["ray"] < 0).sum() > 300
    # and the icosphere's sign is the analytic one away from its tessellation band
    sphere = signed_distance(pts, MeshWorld([sphere_mesh(0.3, 3)], poses=[_CLOSED_POSES[1]], device=device))
    ideal = np.linalg.norm(pts.cpu().numpy() - np.asarray(_CLOSED_POSES[1][:3]), axis=1) - 0.3
    sure = np.abs(ideal) > 0.01
    np.testing.assert_array_equal(np.sign(sphere.cpu().numpy()[sure]), np.sign(ideal[sure]))


def _open_bin(size: float = 1.0, height: float = 0.5) -> trimesh.Trimesh:
    """A box of side ``size`` and ``height`` without its top (an open container: a surface, not a solid)."""
    box = trimesh.creation.box(extents=(size, size, height))
    keep = box.face_normals[:, 2] < 0.5
    return trimesh.Trimesh(box.vertices, box.faces[keep], process=False)


def test_unsigned_open_bin(device):
    """A sphere in an open bin collides only where it touches a wall or the floor; distances are >= 0."""
    world = MeshWorld([_open_bin()], device=device, sign_method="unsigned")
    assert world._tables["grid_flags"].item() == 0  # open: not closed
    assert world._tables["grid_dims"][0, 0, 0] > 0  # but it has an (unsigned) grid
    spheres = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.1],  # in the middle of the bin: touches nothing
            [0.45, 0.0, 0.0, 0.1],  # 0.05 from the +x wall: penetrates by 0.05
            [0.0, 0.0, -0.2, 0.1],  # 0.05 above the floor: penetrates by 0.05
            [0.0, 0.0, 0.4, 0.1],  # above the open top
            [0.7, 0.0, 0.0, 0.1],  # outside, 0.2 from the wall
        ],
        dtype=torch.float64,
        device=device,
    )
    cost = sphere_mesh_cost(spheres, world).cpu().numpy()
    np.testing.assert_allclose(cost, [0.0, 0.05, 0.05, 0.0, 0.0], atol=1e-6)
    d = signed_distance(spheres[:, :3], world).cpu().numpy()
    np.testing.assert_allclose(d, [0.25, 0.05, 0.05, math.hypot(0.5, 0.4 - 0.25), 0.2], atol=1e-6)
    # against brute force on many points, and never negative
    bin_mesh = _open_bin()
    pts = np.random.default_rng(14).uniform(-0.8, 0.8, size=(2000, 3))
    d = signed_distance(torch.from_numpy(pts).to(device), world).cpu().numpy()
    assert (d >= 0).all()
    np.testing.assert_allclose(
        d, triangle_distance_reference(pts, bin_mesh.vertices, bin_mesh.faces), atol=1e-6
    )
    # the ray vote calls the middle of the bin inside (a deep collision); unsigned does not
    assert sphere_mesh_cost(spheres[:1], MeshWorld([_open_bin()], device=device)).item() > 0.2


def test_unsigned_gives_the_magnitude_of_the_signed_distance(device):
    pts = _probe_points(_CLOSED_SCENE, _CLOSED_POSES, 200, seed=15).to(device)
    for mesh, pose in zip(_CLOSED_SCENE, _CLOSED_POSES, strict=True):
        signed = signed_distance(pts, MeshWorld([mesh], poses=[pose], device=device))
        unsigned = signed_distance(
            pts, MeshWorld([mesh], poses=[pose], device=device, sign_method="unsigned")
        )
        assert (unsigned >= 0).all() and (signed < 0).sum() > 50
        np.testing.assert_allclose(unsigned.cpu().numpy(), signed.abs().cpu().numpy(), atol=1e-9)


def test_winding_on_an_open_mesh_matches_the_reference_path(device):
    mesh = sphere_mesh(1.0, 3)
    mesh = trimesh.Trimesh(mesh.vertices, mesh.faces[mesh.triangles_center[:, 2] < 0.85], process=False)
    world = MeshWorld([mesh], device=device, sign_method="winding")
    assert world._tables["grid_flags"].item() == 0 and world._tables["grid_dims"][0, 0, 0] == 0
    pts = torch.from_numpy(np.random.default_rng(16).uniform(-1.5, 1.5, size=(1000, 3))).to(device)
    d = signed_distance(pts, world).cpu().numpy()
    ideal = np.linalg.norm(pts.cpu().numpy(), axis=1) - 1.0
    sure = (np.abs(ideal) > 0.02) & (pts[:, 2].cpu().numpy() < 0.7)  # off the surface, away from the hole
    np.testing.assert_array_equal(np.sign(d[sure]), np.sign(ideal[sure]))


def test_self_intersecting_mesh_is_not_closed(device):
    """Two overlapping boxes in one mesh: watertight and consistently wound, but not closed in the sense of
    the shortcut (faces intersect); it keeps its method's plain path."""
    a, b = box_mesh((0.3, 0.3, 0.3)), box_mesh((0.3, 0.3, 0.3)).apply_translation((0.2, 0.1, 0.0))
    both = trimesh.Trimesh(
        np.concatenate([a.vertices, b.vertices]), np.concatenate([a.faces, b.faces + 8]), process=False
    )
    world = MeshWorld([both], device=device)
    assert world._tables["grid_flags"].item() == 0
    assert MeshWorld([a], device=device)._tables["grid_flags"].item() == 3  # closed, a cuboid
    pts = torch.from_numpy(np.random.default_rng(17).uniform(-0.5, 0.6, size=(500, 3))).to(device)
    np.testing.assert_array_equal(
        signed_distance(pts, world).cpu().numpy(),
        signed_distance(pts, _reference_path(MeshWorld([both], device=device))).cpu().numpy(),
    )


def test_per_mesh_sign_methods(device):
    """One method per mesh: a flat list for MeshWorld, nested lists for from_envs."""
    world = MeshWorld(
        [box_mesh(), _open_bin()],
        poses=[[0, 0, 0, 1, 0, 0, 0], [3, 0, 0, 1, 0, 0, 0]],
        device=device,
        sign_method=["ray", "unsigned"],
    )
    assert world.sign_method == ["ray", "unsigned"]
    d = signed_distance(torch.tensor([[0.0, 0.0, 0.0], [3.0, 0.0, 0.0]], device=device), world).cpu().numpy()
    np.testing.assert_allclose(d, [-0.2, 0.25], atol=1e-6)  # inside the box; in the bin, unsigned
    envs = MeshWorld.from_envs(
        [[_open_bin()], [_open_bin(), box_mesh()]],
        poses=[[[0, 0, 0, 1, 0, 0, 0]], [[0, 0, 0, 1, 0, 0, 0], [3, 0, 0, 1, 0, 0, 0]]],
        device=device,
        sign_method=[["unsigned"], ["ray", "normal"]],
    )
    assert envs.sign_method == [["unsigned"], ["ray", "normal"]]
    probe = torch.tensor([[[0.0, 0.0, 0.0, 0.1]], [[0.0, 0.0, 0.0, 0.1]]], device=device)
    cost = sphere_mesh_cost(probe, envs, env_index=torch.tensor([0, 1], device=device)).cpu().numpy()
    assert cost[0, 0] == 0.0 and cost[1, 0] > 0.3  # env 1's bin votes "inside" by ray


def test_per_mesh_sign_method_errors():
    cube = box_mesh()
    with pytest.raises(ValueError, match=r"sign_method must list one sign method per mesh \(2\)"):
        MeshWorld([cube, cube], sign_method=["ray"])
    with pytest.raises(ValueError, match=r"sign_method\[1\] must be one of"):
        MeshWorld([cube, cube], sign_method=["ray", "parity"])
    with pytest.raises(ValueError, match="one list per environment"):
        MeshWorld.from_envs([[cube], [cube]], sign_method=[["ray"]])
    with pytest.raises(ValueError, match=r"sign_method\[1\] must list one sign method per mesh \(2\)"):
        MeshWorld.from_envs([[cube], [cube, cube]], sign_method=[["ray"], ["ray"]])
    with pytest.raises(ValueError, match=r"sign_method\[0\] must list one sign method per mesh"):
        MeshWorld.from_envs([[cube]], sign_method=["ray"])  # flat where nested is needed
    with pytest.raises(ValueError, match=r"sign_method\[0\]\[0\] must be one of"):
        MeshWorld.from_envs([[cube]], sign_method=[["Ray"]])


# --------------------------------------------------------------------------------------------------------
# finite in, finite out (issue 9)
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["cuboid", "reference"])
def test_far_points_get_their_distance(device, path):
    """The cuboid's closed form and the plain path (no grid: no bound from one, not a cap near 3.4e38)."""
    world = MeshWorld([box_mesh((0.5, 0.5, 0.5))], device=device)
    if path == "reference":
        world = _reference_path(world)
    for dtype in (torch.float32, torch.float64):
        pts = torch.tensor([[1e18, 0.0, 0.0], [0.0, -3e20, 0.0], [1e7, 1e7, 0.0]], dtype=dtype, device=device)
        d = signed_distance(pts, world).cpu().double().numpy()
        expected = np.array([1e18 - 0.5, 3e20 - 0.5, math.hypot(1e7 - 0.5, 1e7 - 0.5)])
        np.testing.assert_allclose(d, expected, rtol=1e-6 if dtype == torch.float32 else 1e-12)
    huge = torch.tensor([[1e300, -1e300, 0.0]], dtype=torch.float64, device=device, requires_grad=True)
    d = signed_distance(huge, world)
    assert math.isclose(d.item(), math.hypot(1e300, 1e300), rel_tol=1e-12)
    (g,) = torch.autograd.grad(d.sum(), huge)
    np.testing.assert_allclose(g.cpu().numpy(), [[2**-0.5, -(2**-0.5), 0.0]], atol=1e-12)
    # float32 points near the top of the range: the distance, or inf where it exceeds float32
    edge = torch.tensor([[3e38, 0.0, 0.0], [-3e38, -3e38, 0.0]], device=device)
    d = signed_distance(edge, world).cpu()
    assert d[0].item() == pytest.approx(3e38, rel=1e-6) and d[1].item() == float("inf")


def test_far_path_matches_the_near_path_where_both_apply(device):
    """Beyond 2**20 box diagonals the nearest vertex stands in for the closest point: exact to ~L^2/(2D)."""
    mesh = torus_mesh()
    world = MeshWorld([mesh], device=device)
    gen = np.random.default_rng(18)
    dirs = gen.normal(size=(200, 3))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    diagonal = np.linalg.norm(mesh.vertices.max(0) - mesh.vertices.min(0))
    for scale in (1e4, 1e6, 1e12):  # the far path from 2048 box diagonals (~5.5e3 here)
        pts = dirs * scale
        d = signed_distance(torch.from_numpy(pts).to(device), world).cpu().numpy()
        exact = triangle_distance_reference(pts, mesh.vertices, mesh.faces)
        rounding = 1e-6 + 1e-15 * exact  # float32 vertices
        assert (d >= exact - rounding).all()  # a vertex is never nearer than the closest point
        assert (d - exact <= diagonal**2 / (2 * exact) + rounding).all()


def test_huge_float64_sphere_costs_the_formula(device):
    world = MeshWorld([box_mesh((0.5, 0.5, 0.5))], device=device)
    spheres = torch.tensor(
        [[1e300, 0.0, 0.0, 1e301], [1e300, 0.0, 0.0, 1e299]], dtype=torch.float64, device=device
    )
    cost = sphere_mesh_cost(spheres, world, activation_distance=0.1).cpu().numpy()
    np.testing.assert_allclose(cost, [1e301 - (1e300 - 0.5) - 0.05, 0.0], rtol=1e-12)
    swept = sphere_mesh_cost(spheres[:1, None, None].repeat(1, 2, 1, 1)[:, :, 0], world)
    assert torch.isfinite(swept).all() and swept.min() > 1e300


@pytest.mark.parametrize(
    ("dtype", "eta"),
    [(torch.float32, 1e20), (torch.float32, 3e38), (torch.float64, 1e200), (torch.float64, 1e308)],
)
def test_huge_activation_distance_costs_the_formula(device, dtype, eta):
    """phi**2 / (2 eta) with eta near the top of the dtype: phi**2 (and 2 eta) overflow, the cost does not."""
    world = MeshWorld([box_mesh((0.5, 0.5, 0.5))], device=device)
    spheres = torch.tensor([[3.0, 0.0, 0.0, 0.5]], dtype=dtype, device=device, requires_grad=True)
    cost = sphere_mesh_cost(spheres, world, activation_distance=eta)
    phi = 0.5 + eta - 2.5  # d = 2.5, phi <= eta: the quadratic branch
    np.testing.assert_allclose(cost.detach().cpu().numpy(), [phi * (phi / eta) / 2], rtol=1e-6)
    cost.sum().backward()
    np.testing.assert_allclose(
        spheres.grad.cpu().numpy(), [[-1.0, 0.0, 0.0, 1.0]], rtol=1e-6
    )  # phi / eta ~ 1
    # and tiny ones: phi**2 underflows (float32: (1e-24)**2), the cost does not. The surface x = 0 exactly
    # (float32 vertices), the centre 0.5 eta outside: phi = eta / 2 (eta if it counts as on the surface)
    wall = MeshWorld([box_mesh((0.5, 0.5, 0.5)).apply_translation((-0.5, 0.0, 0.0))], device=device)
    tiny = 1e-24 if dtype == torch.float32 else 1e-170
    spheres = torch.tensor([[0.5 * tiny, 0.0, 0.0, 0.0]], dtype=dtype, device=device)
    cost = sphere_mesh_cost(spheres, wall, activation_distance=tiny).item()
    assert tiny / 8 * (1 - 1e-3) <= cost <= tiny / 2 * (1 + 1e-3)


def test_max_distance_inf_means_no_bound(device):
    world = MeshWorld([box_mesh()], device=device)
    spheres = torch.tensor([[0.6, 0.0, 0.0, 0.2], [0.0, 0.0, 0.0, 0.1], [3.0, 0.0, 0.0, 0.5]], device=device)
    base = sphere_mesh_cost(spheres, world, activation_distance=0.05)
    assert torch.equal(
        sphere_mesh_cost(spheres, world, activation_distance=0.05, max_distance=math.inf), base
    )
    args = world.kernel_args(torch.float32)
    params = torch.tensor([0.05, 1.0], device=device)
    cost, _ = torch.ops.warpgeo.sphere_mesh_cost(
        spheres[None], None, args.world, args.all_cuboids, params, math.inf, False
    )
    assert torch.equal(cost[0], base)


@pytest.mark.parametrize("name", ["weight", "activation_distance", "max_distance"])
def test_huge_python_ints_are_value_errors(box_world_cpu, name):
    with pytest.raises(ValueError, match=rf"^{name} "):
        sphere_mesh_cost(torch.zeros(2, 4), box_world_cpu, **{name: 10**400})
    if name != "max_distance":
        with pytest.raises(ValueError, match=rf"^{name} "):
            swept_sphere_mesh_cost(torch.zeros(1, 2, 1, 4), box_world_cpu, **{name: 10**400})


def test_swept_across_the_whole_float32_range(device):
    """Steps from x = -3e38 to 3e38: the interpolated samples stay finite (no (next - here) overflow)."""
    world = MeshWorld([box_mesh((0.5, 0.5, 0.5))], device=device)
    traj = torch.tensor([[[[-3e38, 0.0, 0.0, 0.1]], [[3e38, 0.0, 0.0, 0.1]]]], device=device)
    cost = swept_sphere_mesh_cost(traj, world, sweep_steps=1)  # samples at t = 0 and 0.5 (the origin)
    np.testing.assert_allclose(cost.cpu().numpy(), [[[0.5 * (0.5 + 0.1)], [0.0]]], rtol=1e-5)


def test_mesh_of_zero_area_faces_is_refused():
    v = np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0], [0, 1, 0]], dtype=np.float64)
    with pytest.raises(ValueError, match=r"meshes\[1\]: every face has zero area"):
        MeshWorld([box_mesh(), (v, np.array([[0, 1, 2], [0, 0, 3]]))])
    with pytest.raises(ValueError, match=r"envs\[0\]\[0\]: every face has zero area"):
        MeshWorld.from_envs([[(v, np.array([[0, 1, 2]]))]])
    # one good face among degenerate ones is a mesh
    world = MeshWorld([(v, np.array([[0, 1, 2], [0, 1, 3]]))])
    assert signed_distance(torch.tensor([[0.0, 0.0, 1.0]]), world).item() == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match=r"within 2\*\*60"):
        MeshWorld([(v * 1e19, np.array([[0, 1, 3]]))])


@pytest.mark.parametrize("method", ["ray", "normal"])
def test_thin_closed_part_keeps_its_sign_near_its_mid_plane(device, method):
    """A 4 cm slab 1.2 m wide: a point 0.2 mm off its mid-plane is inside (the shortcuts must not hand the
    sign to Warp's pseudo-normal test, whose tie band of 1e-3 average edge lengths is wider than that; on a
    closed mesh the closest feature's own pseudo-normal, which has no such band, decides for every method)."""
    world = MeshWorld([box_mesh((0.6, 0.6, 0.02))], device=device, sign_method=method)
    pts = torch.tensor([[0.138, -0.135, -0.0002], [0.0, 0.0, 0.0001], [0.3, 0.3, 0.0]], device=device)
    np.testing.assert_allclose(
        signed_distance(pts, world).cpu().numpy(), [-0.0198, -0.0199, -0.02], atol=1e-6
    )


def test_grid_cells_of_unknown_side_give_no_bound(device):
    """A cell whose centre's side is unknown (NaN) must bound nothing: with every cell so, the union signed
    distance and the cost equal the reference path's (a stored 0 once made |p - c| a false upper bound)."""
    fast = MeshWorld(_CLOSED_SCENE, poses=_CLOSED_POSES, device=device)
    fast._tables["grid_cells"][::2] = float("nan")
    slow = _reference_path(MeshWorld(_CLOSED_SCENE, poses=_CLOSED_POSES, device=device))
    pts = _probe_points(_CLOSED_SCENE, _CLOSED_POSES, 200, seed=19).to(device)
    d = signed_distance(pts, fast)
    assert torch.isfinite(d).all()
    np.testing.assert_allclose(d.cpu().numpy(), signed_distance(pts, slow).cpu().numpy(), atol=1e-6)
    spheres = torch.cat([pts, torch.full_like(pts[:, :1], 0.03)], 1)
    np.testing.assert_allclose(
        sphere_mesh_cost(spheres, fast).cpu().numpy(),
        sphere_mesh_cost(spheres, slow).cpu().numpy(),
        atol=1e-6,
    )


_FIRST_QUERY = """
import re, torch, trimesh, warpgeo
from warpgeo._kernels import _table
def loaded():  # the Warp modules of warpgeo's kernel tables that were loaded (compiled or read from the cache)
    return sorted(
        t.module_name(k) for t in _table.TABLES for k, kernels in t._built.items()
        if any(getattr(kernel.module, "execs", None) for kernel in vars(kernels).values())
    )
def created(*names):
    return [sorted(t._built) for t in _table.TABLES for n in names if t.name.endswith("sdf." + n)]
world = warpgeo.MeshWorld([trimesh.creation.box((1, 1, 1))])
after_box = loaded()
assert warpgeo.MeshWorld([trimesh.creation.icosphere(1)]).wait_tables(600)  # its tables built (background)
after_build = created("sphere_mesh_cost", "signed_distance")
warpgeo.sphere_mesh_cost(torch.rand(8, 4, dtype=torch.float64, requires_grad=True), world).sum().backward()
tables = created("sphere_mesh_cost", "swept_sphere_mesh_cost", "signed_distance")
print(after_box, after_build, tables, loaded())
"""


def test_a_first_query_creates_and_compiles_only_its_kernel():
    """Per-precision kernel modules, created on first lookup: a fresh process that builds a world and runs
    one float64 sphere_mesh_cost has created only that kernel and loaded (compiled) only the build modules
    of its meshes' jobs and that kernel's module; a world of cuboids (closed form) loads no module at all to be built, and its
    queries run the kernels made for cuboids (no BVH query in them)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _FIRST_QUERY], capture_output=True, text=True, check=True)
    line = out.stdout.strip().splitlines()[-1]
    build = [  # the icosphere's build jobs, a module each (a cuboid's world loads none)
        f"warpgeo._kernels.build_{job}_float32"
        for job in (
            "checks.face_checks",
            "closed.closed_faces",
            "closed.plane_trees",
            "grids.grids",
            "meet.faces_meet",
            "pairs.edge_pairs",
        )
    ]
    # building a world does not even import the query kernels' file (no table of theirs exists yet)
    assert line == (
        f"[] [] [[('float64', 'cuboids')], [], []] {sorted([*build, 'warpgeo._kernels.sdf.sphere_mesh_cost_float64_cuboids'])}"
    ), line


def prism(outline, fan, height: float = 1.0) -> trimesh.Trimesh:
    """A closed prism: the polygon ``outline`` (counter-clockwise, triangulated by ``fan``) extruded to
    ``height``, built face by face (outward winding)."""
    outline = np.asarray(outline, dtype=np.float64)
    n = len(outline)
    vertices = np.concatenate([np.c_[outline, np.zeros(n)], np.c_[outline, np.full(n, height)]])
    vertices = vertices.astype(np.float32).astype(np.float64)  # what the Warp mesh holds
    faces = [(c, b, a) for a, b, c in fan] + [(a + n, b + n, c + n) for a, b, c in fan]
    for i in range(n):
        j = (i + 1) % n
        faces += [(i, j, j + n), (i, j + n, i + n)]
    mesh = trimesh.Trimesh(vertices, np.array(faces), process=False)
    assert mesh.is_volume
    return mesh


def _in_polygon(xy: np.ndarray, outline) -> np.ndarray:
    """Inside a simple polygon (even-odd rule on a +x ray)."""
    outline = np.asarray(outline, dtype=np.float64)
    inside = np.zeros(len(xy), dtype=bool)
    for (x0, y0), (x1, y1) in zip(outline, np.roll(outline, -1, axis=0), strict=True):
        crosses = (y0 > xy[:, 1]) != (y1 > xy[:, 1])
        with np.errstate(divide="ignore", invalid="ignore"):
            x_at = x0 + (xy[:, 1] - y0) * (x1 - x0) / (y1 - y0)
        inside ^= crosses & (xy[:, 0] < x_at)
    return inside


#: An L (convex and reflex edges and corners) and a 30-degree wedge (an edge and corners so sharp that the
#: normal of one of their faces alone would put points beside them on the wrong side), with points around.
_L = [[0, 0], [2, 0], [2, 1], [1, 1], [1, 2], [0, 2]]
_WEDGE = [[0, 0], [1, 0], [0.5, 0.5 / math.tan(math.radians(15))]]
_PRISMS = {
    "L": (_L, [(3, 4, 5), (3, 5, 0), (3, 0, 1), (3, 1, 2)], [[1, 1, 0.5], [2, 1, 0.5], [0, 0, 0], [1, 1, 1]]),
    "wedge": (_WEDGE, [(0, 1, 2)], [[0.5, 1.866, 0.5], [0.5, 1.866, 0], [0.5, 1.866, 1], [1, 0, 1]]),
}


@pytest.mark.parametrize("shape", list(_PRISMS))
@pytest.mark.parametrize("method", ["ray", "normal", "winding"])
def test_closed_mesh_sign_next_to_edges_and_vertices(device, method, shape):
    """Near a closed mesh's surface the side comes from the pseudo-normal of the closest feature: points by
    the edges and corners of posed prisms, inside and out, get the analytic side, the brute-force distance,
    and the reference path's (the mesh's own sign method's) answer."""
    outline, fan, anchors = _PRISMS[shape]
    mesh = prism(outline, fan)
    pose = [0.3, -0.2, 0.1, math.cos(0.35), 0.0, math.sin(0.35) * 0.6, math.sin(0.35) * 0.8]
    gen = np.random.default_rng(23)
    local = np.concatenate(
        [np.asarray(a) + gen.normal(scale=0.03, size=(250, 3)) for a in anchors]
        + [mesh.sample(300, seed=5) + gen.normal(scale=0.02, size=(300, 3))]
    )
    inside = _in_polygon(local[:, :2], outline) & (local[:, 2] > 0) & (local[:, 2] < 1)
    assert 100 < inside.sum() < len(local) - 100
    rot = quat_matrix(pose[3:])
    world_pts = torch.from_numpy(local @ rot.T + np.asarray(pose[:3]))
    fast = MeshWorld([mesh], poses=[pose], device=device, sign_method=method)
    assert fast._tables["grid_flags"].item() == 1
    assert fast._tables["topo_offsets"].tolist() == [[[0, 0]]]
    slow = _reference_path(MeshWorld([mesh], poses=[pose], device=device, sign_method=method))
    d = signed_distance(world_pts.to(device), fast).cpu().numpy()
    unsigned = triangle_distance_reference(local, mesh.vertices, mesh.faces)
    sure = unsigned > 1e-6
    np.testing.assert_array_equal(d[sure] < 0, inside[sure])
    np.testing.assert_allclose(np.abs(d), unsigned, atol=1e-6)  # the face is chosen in float32
    reference = signed_distance(world_pts.to(device), slow).cpu().numpy()
    np.testing.assert_allclose(np.abs(d), np.abs(reference), atol=1e-9)
    if method != "normal":  # Warp's pseudo-normal test (its tie band) errs by the wedge's sharp corners
        np.testing.assert_array_equal(d < 0, reference < 0)
    # the spheres' cost sees the same sides: the exact cost of the analytic side and distance
    radius = 0.01
    spheres = torch.cat([world_pts, torch.full((len(local), 1), radius, dtype=torch.float64)], 1).to(device)
    phi = radius - np.where(inside, -unsigned, unsigned)
    np.testing.assert_allclose(sphere_mesh_cost(spheres, fast).cpu().numpy(), np.maximum(phi, 0.0), atol=1e-6)


def test_parameter_cache_keeps_each_pair_apart(monkeypatch):
    """(activation_distance, weight) floats are turned into a device tensor once per pair and kept: each pair
    must keep its own values, beyond the cache's capacity too (later pairs get fresh tensors)."""
    from warpgeo import _world_query as query

    monkeypatch.setattr(query, "_PARAMS", {})
    monkeypatch.setattr(query, "_TRUSTED_PARAMS", {})
    monkeypatch.setattr(query, "_MAX_PARAMS", 2)
    world = MeshWorld([trimesh.creation.box((1.0, 1.0, 1.0))])
    spheres = torch.tensor([[0.45, 0.0, 0.0, 0.1], [0.6, 0.0, 0.0, 0.05]])
    pairs = [(0.0, 1.0), (0.05, 1.0), (0.05, 2.0), (0.1, 0.5), (0.0, 1.0), (0.1, 0.5)]
    for eta, w in pairs:
        got = sphere_mesh_cost(spheres, world, activation_distance=eta, weight=w)
        d = torch.tensor([-0.05, 0.1])  # signed distances of the centres to the box
        phi = spheres[:, 3] + eta - d
        want = torch.where(
            phi <= 0, 0.0, torch.where(phi <= eta, phi**2 / (2 * max(eta, 1e-30)), phi - eta / 2)
        )
        torch.testing.assert_close(got, w * want, rtol=1e-5, atol=1e-6)
    assert len(query._PARAMS) == 2


# --------------------------------------------------------------------------------------------------------
# the plane tree of convex closed meshes (deep inside: the face of the nearest plane)
# --------------------------------------------------------------------------------------------------------


def _convex_shapes() -> dict[str, trimesh.Trimesh]:
    gen = np.random.default_rng(5)
    blob = gen.normal(size=(120, 3))
    blob /= np.linalg.norm(blob, axis=1, keepdims=True)
    return {
        "icosphere": sphere_mesh(0.3, 3),
        # elongated: the plane distances have local minima that are not the global one
        "ellipsoid": trimesh.convex.convex_hull(blob * [0.5, 0.12, 0.07]),
        # fans of coplanar faces on the caps: feet on shared edges (the bounded query decides there)
        "cylinder": trimesh.creation.cylinder(radius=0.2, height=0.3, sections=24),
        "hull": trimesh.convex.convex_hull(gen.uniform(-0.3, 0.3, size=(60, 3))),
    }


def _inside_points(mesh: trimesh.Trimesh, n: int, seed: int) -> np.ndarray:
    """Points inside a convex mesh (by its face planes): uniform, and just inside faces, edges and vertices."""
    gen = np.random.default_rng(seed)
    lo, hi = mesh.bounds
    pts = gen.uniform(lo, hi, size=(20 * n, 3))
    centre = mesh.vertices.mean(axis=0)
    tri = mesh.vertices[mesh.faces]
    edges = (tri + np.roll(tri, 1, axis=1)).reshape(-1, 3) / 2
    features = np.concatenate([tri.mean(axis=1), edges, mesh.vertices])
    near = features + (centre - features) * gen.uniform(1e-4, 0.05, size=(len(features), 1))
    pts = np.concatenate([pts, near[gen.permutation(len(near))[:n]]])
    offsets = (mesh.face_normals * tri[:, 0]).sum(axis=1)
    inside = (pts @ mesh.face_normals.T < offsets).all(axis=1)
    return pts[inside][: 2 * n]


def _no_plane_tree(world: MeshWorld) -> MeshWorld:
    world._tables["cone_offsets"].fill_(-1)
    return world


def test_plane_tree_only_for_convex_closed_meshes(device):
    shapes = _convex_shapes()
    world = MeshWorld(list(shapes.values()), device=device)
    assert (world._tables["cone_offsets"][0, :, 3] > 0).all()
    two = trimesh.util.concatenate([sphere_mesh(0.2, 2), sphere_mesh(0.2, 2).apply_translation([1, 0, 0])])
    dented = sphere_mesh(0.3, 3)
    dented.vertices[0] *= 0.8
    others = [torus_mesh(), box_mesh(), two, dented, _open_bin()]
    world = MeshWorld(others, device=device, sign_method="winding")
    assert (world._tables["cone_offsets"] == -1).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_plane_tree_matches_brute_force_inside_convex_meshes(device, dtype):
    """Deep inside and just inside faces, edges and vertices of posed convex meshes: distances against a brute
    force over every face, and cost and gradient against the world without plane trees; after set_poses too."""
    shapes = _convex_shapes()
    meshes = list(shapes.values())
    gen = torch.Generator().manual_seed(21)
    fast = MeshWorld(meshes, device=device)
    slow = _no_plane_tree(MeshWorld(meshes, device=device))
    # the face is chosen in float32 (as by the BVH query): a near-tie may go to a face 1e-8 farther
    tol = 2e-6 if dtype == torch.float32 else 1e-7
    for _ in range(2):
        poses = torch.stack([random_pose(gen) for _ in meshes])
        poses[:, :3] *= 5.0  # apart
        fast.set_poses(poses)
        slow.set_poses(poses)
        for m, mesh in enumerate(meshes):
            local = _inside_points(mesh, 150, seed=m)
            expected = -triangle_distance_reference(local, mesh.vertices.astype(np.float32), mesh.faces)
            assert (expected < -0.03).sum() > 50
            pose = poses[m].numpy()
            world_pts = local @ quat_matrix(pose[3:]).T + pose[:3]
            pts = torch.from_numpy(world_pts).to(device, dtype)
            d = signed_distance(pts, fast).cpu().double().numpy()
            np.testing.assert_allclose(d, expected, atol=tol, rtol=0, err_msg=f"{list(shapes)[m]}")
            radii = torch.rand(len(pts), 1, generator=gen, dtype=torch.float64).to(device, dtype) * 0.05
            out = []
            for world in (fast, slow):
                s = torch.cat([pts, radii], 1).requires_grad_(True)
                cost = sphere_mesh_cost(s, world, activation_distance=0.02)
                (g,) = torch.autograd.grad(cost.sum(), s)
                out.append((cost.detach().cpu().double().numpy(), g.cpu().double().numpy()))
            np.testing.assert_allclose(out[0][0], out[1][0], atol=tol, rtol=0)
            # a near-tie between two faces (coplanar fans, rounding) may pick the other: same distance
            close = np.abs(out[0][1] - out[1][1]).max(axis=1) < (1e-3 if dtype == torch.float32 else 1e-6)
            assert close.mean() > 0.99


def test_plane_tree_is_used():
    """A tree that names face 0 for every plane: points on face 0's normal past the centre (closest to the
    opposite face) get the distance to face 0, whose foot lies inside it. The plane tree decides there,
    and the check that the foot lies inside the chosen face is all that stands behind it."""
    mesh = sphere_mesh(0.3, 3)
    tri = mesh.vertices[mesh.faces[0]]
    normal = mesh.face_normals[0]
    depth = np.linspace(0.35, 0.5, 20)[:, None]
    pts = torch.from_numpy(tri.mean(axis=0) - depth * normal)
    world = MeshWorld([mesh])
    before = signed_distance(pts, world)
    np.testing.assert_allclose(
        -before.numpy(),
        triangle_distance_reference(pts.numpy(), mesh.vertices.astype(np.float32), mesh.faces),
        atol=1e-6,
    )
    world._tables["cone_faces"].fill_(0)
    after = signed_distance(pts, world)
    assert (after - before).abs().min() > 0.1


def test_hostile_plane_tree_never_crashes():
    mesh = sphere_mesh(0.3, 3)
    pts = torch.from_numpy(_inside_points(mesh, 100, seed=4)).float()
    assert (MeshWorld([mesh])._tables["cone_offsets"][..., 3] > 0).all()
    for change in (
        lambda t: t["cone_links"].fill_(-(2**31)),
        lambda t: t["cone_links"].fill_(2**31 - 1),
        lambda t: t["cone_links"][:, 0].fill_(0),  # every subtree ends at the root
        lambda t: t["cone_faces"].fill_(2**31 - 1),
        lambda t: t["cone_faces"].fill_(-5),
        lambda t: t["cone_offsets"].fill_(2**31 - 1),
        lambda t: t["cone_offsets"][..., 3].fill_(2**31 - 1),
        lambda t: t["cone_nodes"].fill_(float("nan")),
    ):
        world = MeshWorld([mesh])
        change(world._tables)
        d = signed_distance(pts, world)
        assert torch.isfinite(d).all()


def test_fakes_run_the_shape_checks(box_world_cpu):
    """torch.compile / opcheck see the ops through their fakes: those refuse what the ops refuse (shapes,
    dtypes, the world's tensors), reading no values."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    args = box_world_cpu.kernel_args()
    with FakeTensorMode() as mode:
        world = [mode.from_tensor(t) for t in args.world]
        params = torch.empty(2)
        cost, grad = torch.ops.warpgeo.sphere_mesh_cost(
            torch.empty(2, 3, 4), None, world, False, params, 0.0, True
        )
        assert cost.shape == (2, 3) and grad.shape == (2, 3, 4)
        with pytest.raises(ValueError, match="spheres"):
            torch.ops.warpgeo.sphere_mesh_cost(torch.empty(1, 3, 5), None, world, False, params, 0.0, False)
        with pytest.raises(ValueError, match="sweep_steps"):
            torch.ops.warpgeo.swept_sphere_mesh_cost(
                torch.empty(1, 2, 3, 4), None, world, False, params, -1, False
            )
        wide = [*world[:4], torch.empty(1, 2, dtype=torch.int32), *world[5:]]  # enabled (E, M + 1)
        with pytest.raises(ValueError, match="enabled"):
            torch.ops.warpgeo.signed_distance(torch.empty(1, 3, 3), None, wide, False, False)
        with pytest.raises(TypeError, match="inv_poses"):  # float32 poses for a float64 query
            torch.ops.warpgeo.signed_distance(
                torch.empty(1, 3, 3, dtype=torch.float64), None, world, False, False
            )


def test_ops_declare_what_they_read_and_write():
    """The world reaches each op as a declared input (a list of tensors), and no op writes its inputs."""
    for name in ("sphere_mesh_cost", "swept_sphere_mesh_cost", "signed_distance"):
        schema = getattr(torch.ops.warpgeo, name).default._schema
        world = next(a for a in schema.arguments if a.name == "world")
        assert str(world.type) == "List[Tensor]"
        assert not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments), schema
