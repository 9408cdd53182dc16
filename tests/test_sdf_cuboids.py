"""Worlds of cuboids run kernels of their own (``warpgeo._kernels.mesh_distance.slot_distance`` of a closed-forms world struct): the same kernels with the
cuboid's closed form in the place of the general mesh distance. They must agree bit for bit with the general
kernels (whose cuboid branch is the same code) and with an analytic box distance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import trimesh
from reference import box_sdf_reference

from warpgeo import MeshWorld, _launch, signed_distance, sphere_mesh_cost, swept_sphere_mesh_cost
from warpgeo import _world_query as world_query

POSES = [[0.3, -0.2, 0.1, 0.9238795, 0.0, 0.3826834, 0.0], [-0.4, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0]]
EXTENTS = [(0.6, 0.4, 0.2), (0.3, 0.3, 0.5)]


def cuboid_world(**kwargs) -> MeshWorld:
    return MeshWorld([trimesh.creation.box(extents) for extents in EXTENTS], poses=POSES, **kwargs)


def spheres(n: int, dtype=torch.float64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(3)
    centres = torch.rand(n, 3, generator=gen, dtype=torch.float64) * 1.6 - 0.8
    radii = torch.rand(n, 1, generator=gen, dtype=torch.float64) * 0.1
    return torch.cat([centres, radii], 1).to(dtype)


def run_all(world, s, eta=0.05):
    s = s.clone().requires_grad_(True)
    cost = sphere_mesh_cost(s, world, activation_distance=eta)
    (grad,) = torch.autograd.grad(cost.sum(), s)
    trajectory = s.detach().reshape(1, -1, 1, 4)[:, :16].clone().requires_grad_(True)
    swept = swept_sphere_mesh_cost(trajectory, world, sweep_steps=3, activation_distance=eta)
    (swept_grad,) = torch.autograd.grad(swept.sum(), trajectory)
    points = s.detach()[:, :3].clone().requires_grad_(True)
    dist = signed_distance(points, world)
    (dist_grad,) = torch.autograd.grad(dist.sum(), points)
    return [t.detach() for t in (cost, grad, swept, swept_grad, dist, dist_grad)]


def all_cuboids(world: MeshWorld) -> bool:
    return world.kernel_args().all_cuboids


def test_world_of_cuboids_is_told_apart():
    assert all_cuboids(cuboid_world())
    mixed = MeshWorld([trimesh.creation.box((1, 1, 1)), trimesh.creation.icosphere(2)])
    assert not all_cuboids(mixed)
    # one environment of cuboids and one with a sphere: the world is not all cuboids
    envs = MeshWorld.from_envs([[trimesh.creation.box((1, 1, 1))], [trimesh.creation.icosphere(2)]])
    assert not all_cuboids(envs)
    # a box whose faces wind inwards is no cuboid (FLAG_BOX needs an outward box surface)
    inverted = trimesh.creation.box((1, 1, 1))
    inverted.invert()
    assert not all_cuboids(MeshWorld([inverted]))


def test_cuboid_world_uses_the_cuboid_kernels(monkeypatch):
    launched = []
    run = _launch.run

    def watch(kernel, *args):
        launched.append(kernel.module.name)  # warpgeo._kernels.sdf.<kernel>_<precision>_<meshes|cuboids>
        return run(kernel, *args)

    monkeypatch.setattr(_launch, "run", watch)
    run_all(cuboid_world(), spheres(64))
    assert launched and all("_cuboids" in key for key in launched), launched
    launched.clear()
    run_all(MeshWorld([trimesh.creation.box((1, 1, 1)), trimesh.creation.icosphere(2)]), spheres(64))
    assert launched and not any("_cuboids" in key for key in launched), launched


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sign_method", ["ray", "unsigned"])
def test_cuboid_kernels_equal_the_general_kernels(monkeypatch, dtype, sign_method):
    world = cuboid_world(sign_method=sign_method)
    s = spheres(2000, dtype)
    fast = run_all(world, s)
    # every key mapped to the general kernels (whose cuboid branch is the same code)
    monkeypatch.setattr(world_query, "WORLD_KINDS", {False: "meshes", True: "meshes"})
    slow = run_all(world, s)
    for a, b in zip(fast, slow, strict=True):
        assert torch.equal(a, b)
    assert (fast[0] > 0).any() and (fast[0] == 0).any()  # both colliding and free spheres


def test_cuboid_world_matches_analytic_box_distance():
    world = cuboid_world()
    points = spheres(3000)[:, :3]
    dist = signed_distance(points, world).numpy()
    expected = np.full(len(points), np.inf)
    for extents, pose in zip(EXTENTS, POSES, strict=True):
        t = np.asarray(pose[:3])
        w, x, y, z = pose[3:]
        rot = trimesh.transformations.quaternion_matrix([w, x, y, z])[:3, :3]
        local = (points.numpy() - t) @ rot  # world -> mesh frame: R^T (p - t)
        expected = np.minimum(expected, box_sdf_reference(local, np.asarray(extents) / 2))
    np.testing.assert_allclose(dist, expected, atol=1e-6)


def test_cuboid_world_after_set_poses_and_set_enabled():
    world = cuboid_world()
    s = spheres(500)
    world.set_poses(torch.tensor([POSES[1], POSES[0]], dtype=torch.float64))
    world.set_enabled(torch.tensor([True, False]))
    moved = sphere_mesh_cost(s, world, activation_distance=0.05)
    single = MeshWorld([trimesh.creation.box(EXTENTS[0])], poses=[POSES[1]])
    assert torch.equal(moved, sphere_mesh_cost(s, single, activation_distance=0.05))
    assert (moved > 0).any()


def test_cuboid_world_through_the_registered_op():
    world = cuboid_world()
    s = spheres(100)
    params = torch.tensor([0.05, 1.0], dtype=s.dtype)
    cost, _ = torch.ops.warpgeo.sphere_mesh_cost(
        s[None], None, *world.kernel_args(s.dtype), params, 0.0, False
    )
    assert torch.equal(cost[0], sphere_mesh_cost(s, world, activation_distance=0.05))
    assert (cost > 0).any()
    # all_cuboids=False through the op: the general kernels, the same bits
    world_args, cuboids = world.kernel_args(s.dtype)
    assert cuboids
    general, _ = torch.ops.warpgeo.sphere_mesh_cost(s[None], None, world_args, False, params, 0.0, False)
    assert torch.equal(general, cost)
