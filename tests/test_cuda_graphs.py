"""CUDA graphs: warpgeo's ops captured with ``torch.cuda.graph`` and replayed with new inputs equal eager.

The pattern is the one of torch's CUDA-graph documentation: static input tensors, a warm-up on a side stream
(it loads the Warp modules and lets the caching allocator settle), capture, then ``copy_`` new values into
the static inputs and ``replay()``. ``MeshWorld.set_poses`` / ``set_enabled`` write in place into the
tensors the kernels read, so a captured graph sees new poses, whether they are set between replays or
captured themselves. Value checks are skipped automatically during capture (the default, "auto") or
switched off ("off"). CUDA only: listed in ``tests/conftest.py`` (``CUDA_ONLY``).
"""

from __future__ import annotations

import contextlib
import functools

import pytest
import torch
import trimesh
from conftest import assert_covers_every_op

import warpgeo

_ETA = 0.05
_SWEEP = 3


def _checks(mode: str):
    return warpgeo.value_checks(False) if mode == "off" else contextlib.nullcontext()


def _world() -> warpgeo.MeshWorld:
    box = trimesh.creation.box((0.4, 0.4, 0.4))
    ball = trimesh.creation.icosphere(subdivisions=2, radius=0.2)
    poses = [[0.0, 0.0, 0.0, 1, 0, 0, 0], [0.4, 0.0, 0.0, 1, 0, 0, 0]]
    return warpgeo.MeshWorld([box, ball], poses=poses, device="cuda")


@functools.cache
def _one_world() -> warpgeo.MeshWorld:
    return _world()


def _spheres(seed: int, shape=(2, 5, 40)) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    centres = torch.rand(*shape, 3, generator=gen) - 0.5
    radii = 0.02 + 0.06 * torch.rand(*shape, 1, generator=gen)
    return torch.cat([centres, radii], dim=-1).cuda()


def _poses(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 4, generator=gen, dtype=torch.float64)
    t = 0.2 * torch.randn(2, 3, generator=gen, dtype=torch.float64)
    return torch.cat([t, q / q.norm(dim=-1, keepdim=True)], dim=-1).cuda()


def _warm_up(fn, iterations: int = 3) -> None:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(iterations):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def _costs(spheres: torch.Tensor, world: warpgeo.MeshWorld):
    """(cost, swept cost, d(cost + swept) / d spheres) for leaf ``spheres`` (B, H, N, 4)."""
    cost = warpgeo.sphere_mesh_cost(spheres, world, activation_distance=_ETA)
    swept = warpgeo.swept_sphere_mesh_cost(spheres, world, sweep_steps=_SWEEP, activation_distance=_ETA)
    weights = torch.linspace(0.5, 1.5, cost.numel(), device=cost.device).view(cost.shape)
    (grad,) = torch.autograd.grad((cost * weights).sum() + (swept * weights).sum(), spheres)
    return cost, swept, grad


def _eager_costs(spheres, world):
    return _costs(spheres.detach().clone().requires_grad_(True), world)


@pytest.mark.parametrize("checks", ["auto", "off"])
def test_costs_replay_with_new_spheres_and_poses(checks):
    """(a) sphere cost + swept cost, forward and backward, in one graph; new spheres copied into the static
    input and new poses set between replays; every replay equals eager."""
    world = _world()
    static = _spheres(0).requires_grad_(True)
    with _checks(checks):
        _warm_up(lambda: _costs(static, world))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = _costs(static, world)
        hits = 0
        for step in range(1, 5):
            new = _spheres(step)
            with torch.no_grad():
                static.copy_(new)
            world.set_poses(_poses(step))
            if step == 3:
                world.set_enabled(torch.tensor([True, False], device="cuda"))
            graph.replay()
            torch.cuda.synchronize()
            expected = _eager_costs(new, world)
            for got, want in zip(out, expected, strict=True):
                torch.testing.assert_close(got, want)
            hits += int((expected[0] > 0).sum())
    assert hits > 0, "no sphere collides in any replay: the comparison would show nothing"


def test_grid_world_replays_with_set_grid():
    """A world holding a DistanceGrid beside a mesh: sphere cost fwd+bwd captured; set_grid between replays
    (in place) and set_grid captured itself (from a static values tensor); every replay equals eager."""
    gen = torch.Generator().manual_seed(3)
    grid = warpgeo.DistanceGrid((torch.rand(8, 8, 8, generator=gen) - 0.3).cuda(), 0.1, origin=(-0.35,) * 3)
    world = warpgeo.MeshWorld(
        {"map": grid, "ball": trimesh.creation.icosphere(subdivisions=2, radius=0.2)},
        poses=[[0.0, 0.0, 0.0, 1, 0, 0, 0], [0.4, 0.0, 0.0, 1, 0, 0, 0]],
        device="cuda",
    )
    static = _spheres(0).requires_grad_(True)
    values = (torch.rand(8, 8, 8, generator=gen) - 0.3).cuda()

    def step():
        world.set_grid("map", values)
        static.grad = None
        cost = warpgeo.sphere_mesh_cost(static, world, activation_distance=_ETA)
        cost.sum().backward()
        return cost, static.grad

    _warm_up(step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for _ in range(3):
        new = (torch.rand(8, 8, 8, generator=gen) - 0.3).cuda()
        values.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        leaf = static.detach().clone().requires_grad_(True)
        eager_world = warpgeo.MeshWorld(
            {
                "map": warpgeo.DistanceGrid(new, 0.1, origin=(-0.35,) * 3),
                "ball": trimesh.creation.icosphere(subdivisions=2, radius=0.2),
            },
            poses=[[0.0, 0.0, 0.0, 1, 0, 0, 0], [0.4, 0.0, 0.0, 1, 0, 0, 0]],
            device="cuda",
        )
        cost = warpgeo.sphere_mesh_cost(leaf, eager_world, activation_distance=_ETA)
        cost.sum().backward()
        torch.testing.assert_close(out[0], cost)
        torch.testing.assert_close(out[1], leaf.grad)
        assert float(cost.detach().sum()) > 0


def test_world_updates_captured():
    """set_poses / set_enabled captured in the graph, from static pose and mask tensors."""
    world = _world()
    static_spheres = _spheres(0)
    static_poses = _poses(0)
    static_mask = torch.tensor([True, True], device="cuda")

    def step():
        world.set_poses(static_poses)
        world.set_enabled(static_mask)
        return warpgeo.sphere_mesh_cost(static_spheres, world, activation_distance=_ETA)

    _warm_up(step)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for seed in range(1, 4):
        static_spheres.copy_(_spheres(seed))
        static_poses.copy_(_poses(seed))
        static_mask.copy_(torch.tensor([True, seed != 2], device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(world.poses[0], static_poses)  # (E, M, 7), one environment
        assert world.enabled.tolist() == [[True, seed != 2]]
        torch.testing.assert_close(
            out, warpgeo.sphere_mesh_cost(static_spheres, world, activation_distance=_ETA)
        )


def _robot_costs(spheres: torch.Tensor, pairs: torch.Tensor, margin: torch.Tensor, world: warpgeo.MeshWorld):
    """A planner's two collision costs of leaf ``spheres`` (B, S, 4): self-collision (max with a per-sphere
    margin, sum, per pair) and the world cost, with d(all of them) / d spheres."""
    worst = warpgeo.self_collision_cost(spheres, pairs, margin=margin)
    total = warpgeo.self_collision_cost(spheres, pairs, margin=0.01, reduction="sum")
    each = warpgeo.self_collision_cost(spheres, pairs, reduction=None)
    world_cost = warpgeo.sphere_mesh_cost(spheres, world, activation_distance=_ETA)
    weights = torch.linspace(0.5, 1.5, each.numel(), device=each.device).view(each.shape)
    loss = worst.sum() + 0.5 * total.sum() + (each * weights).sum() + world_cost.sum()
    (grad,) = torch.autograd.grad(loss, spheres)
    return worst, total, each, world_cost, grad


@pytest.mark.parametrize("checks", ["auto", "off"])
def test_self_collision_with_the_world_cost_replays(checks):
    """(issue 38) self_collision_cost (three reductions) and sphere_mesh_cost, forward and backward, in one
    graph; new spheres copied into the static input; every replay equals eager."""
    world = _world()
    pairs = warpgeo.collision_pairs([k // 5 for k in range(20)], ignore=[(0, 1)]).cuda()  # 4 links
    margin = torch.linspace(0.0, 0.02, 20, device="cuda")
    static = _spheres(0, shape=(64, 20)).requires_grad_(True)
    with _checks(checks):
        _warm_up(lambda: _robot_costs(static, pairs, margin, world))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = _robot_costs(static, pairs, margin, world)
        hits = [0, 0]
        for step in range(1, 4):
            new = _spheres(step, shape=(64, 20))
            with torch.no_grad():
                static.copy_(new)
            graph.replay()
            torch.cuda.synchronize()
            expected = _robot_costs(new.detach().clone().requires_grad_(True), pairs, margin, world)
            for got, want in zip(out, expected, strict=True):
                torch.testing.assert_close(got, want)
            hits[0] += int((expected[0] > 0).sum())
            hits[1] += int((expected[3] > 0).sum())
    assert min(hits) > 0, f"no self-collision or no world collision in any replay: {hits}"


def _arm_step(robot: warpgeo.Robot, q: torch.Tensor, world: warpgeo.MeshWorld):
    """A planner's step from joint angles: spheres, swept world cost, self-collision, d / d q."""
    spheres = robot.spheres(q)
    world_cost = warpgeo.swept_sphere_mesh_cost(spheres, world, sweep_steps=_SWEEP, activation_distance=_ETA)
    self_cost = warpgeo.self_collision_cost(spheres, robot.pairs, margin=robot.self_margin)
    (grad,) = torch.autograd.grad(world_cost.sum() + self_cost.sum(), q)
    return spheres, world_cost, self_cost, grad


@pytest.mark.parametrize("checks", ["auto", "off"])
def test_robot_spheres_replay(checks):
    """(issue 45) Robot.spheres (one forward launch, one backward) with the world and self costs in one
    graph; new joint angles copied into the static input, and a sphere attached in place between replays;
    every replay equals eager."""
    import json
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "examples" / "data"
    model = json.loads((data / "arm7_spheres.json").read_text())
    from warpgeo import _robot_tree

    tree = _robot_tree.build(
        *_robot_tree.read_urdf(str(data / "arm7.urdf")),
        spheres=model["spheres"],
        slots={"arm_hand": 2},
        lock_joints={"arm_finger_joint1": 0.04},
        self_collision_ignore=model["self_collision_ignore"],
    )
    robot = warpgeo.Robot(tree, device="cuda")
    world = _world()
    retract = torch.tensor(model["retract"][:7])
    gen = torch.Generator().manual_seed(0)
    static = (retract + 0.5 * torch.randn(8, 16, 7, generator=gen)).cuda().requires_grad_(True)
    with _checks(checks):
        _warm_up(lambda: _arm_step(robot, static, world))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = _arm_step(robot, static, world)
        for step in range(1, 4):
            new = (retract + 0.5 * torch.randn(8, 16, 7, generator=gen)).cuda()
            with torch.no_grad():
                static.copy_(new)
            if step == 2:
                robot.attach("arm_hand", [[0.0, 0.0, 0.1, 0.05]])
            graph.replay()
            torch.cuda.synchronize()
            expected = _arm_step(robot, new.clone().requires_grad_(True), world)
            for got, want in zip(out, expected, strict=True):
                torch.testing.assert_close(got, want)


class _Net(torch.nn.Module):
    """FPS -> gather of point features -> a small MLP on the sampled features."""

    def __init__(self, channels: int, samples: int):
        super().__init__()
        self.samples = samples
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(channels + 3, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)
        )

    def forward(self, points: torch.Tensor, features: torch.Tensor):
        idx = warpgeo.farthest_point_sampling(points, self.samples)
        sampled = warpgeo.gather_points(torch.cat([points.transpose(1, 2), features], dim=1), idx)
        out = self.mlp(sampled.transpose(1, 2))
        return idx, out


def _net_step(net: _Net, points, features):
    idx, out = net(points, features)
    loss = out.square().mean()
    grads = torch.autograd.grad(loss, [features, *net.parameters()])
    return idx, out, loss, grads


def _points(seed: int, batch=2, n=500, channels=6):
    gen = torch.Generator().manual_seed(seed)
    points = torch.rand(batch, n, 3, generator=gen).cuda()
    features = torch.randn(batch, channels, n, generator=gen).cuda()
    return points, features


@pytest.mark.parametrize("checks", ["auto", "off"])
def test_fps_gather_mlp_replay(checks):
    """(b) FPS -> gather -> MLP forward and backward in one graph; replay with new clouds equals eager."""
    torch.manual_seed(0)
    net = _Net(channels=6, samples=32).cuda()
    static_points, static_features = _points(0)
    static_features.requires_grad_(True)
    with _checks(checks):
        _warm_up(lambda: _net_step(net, static_points, static_features))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            idx, out, loss, grads = _net_step(net, static_points, static_features)
        for seed in range(1, 4):
            points, features = _points(seed)
            with torch.no_grad():
                static_points.copy_(points)
                static_features.copy_(features)
            graph.replay()
            torch.cuda.synchronize()
            e_idx, e_out, e_loss, e_grads = _net_step(net, points, features.requires_grad_(True))
            assert torch.equal(idx, e_idx)
            torch.testing.assert_close(out, e_out)
            torch.testing.assert_close(loss, e_loss)
            for got, want in zip(grads, e_grads, strict=True):
                torch.testing.assert_close(got, want)
            assert grads[0].abs().sum() > 0


def test_compile_reduce_overhead_costs():
    """(a) under ``torch.compile(mode="reduce-overhead")`` (CUDA graphs through cudagraph trees): forward
    and backward with new spheres and new poses each call equal eager."""
    world = _world()

    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def costs(spheres):
        cost = warpgeo.sphere_mesh_cost(spheres, world, activation_distance=_ETA)
        swept = warpgeo.swept_sphere_mesh_cost(spheres, world, sweep_steps=_SWEEP, activation_distance=_ETA)
        return cost, swept

    for step in range(5):
        world.set_poses(_poses(step))
        torch.compiler.cudagraph_mark_step_begin()
        new = _spheres(step)
        leaf = new.clone().requires_grad_(True)
        cost, swept = costs(leaf)
        weights = torch.linspace(0.5, 1.5, cost.numel(), device="cuda").view(cost.shape)
        ((cost * weights).sum() + (swept * weights).sum()).backward()
        expected = _eager_costs(new, world)
        torch.testing.assert_close(cost, expected[0])
        torch.testing.assert_close(swept, expected[1])
        torch.testing.assert_close(leaf.grad, expected[2])


# --------------------------------------------------------------------------------------------------------
# every other op: one graph of its forward (and backward), replayed with new inputs
# --------------------------------------------------------------------------------------------------------


def _leaf(seed: int, *shape: int, device="cuda") -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=gen).to(device).requires_grad_(True)


def _with_grads(out: torch.Tensor, *leaves: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``out`` and the gradients of a weighted sum of it w.r.t. ``leaves``."""
    weights = torch.linspace(0.5, 1.5, out.numel(), device=out.device).view(out.shape)
    return (out, *torch.autograd.grad((out * weights).sum(), leaves))


def _knn(q, p):
    result = warpgeo.knn(q, p, 4)
    return (result.idx, *_with_grads(result.dists, q, p))


def _ball_query(q, p):
    return (warpgeo.ball_query(q.detach(), p.detach(), 0.3, 6),)


def _chamfer(x, y):
    return _with_grads(warpgeo.chamfer_distance(x, y, reduction=None).loss, x, y)


def _gather_weighted(features, weight, idx_source):
    idx = (idx_source.detach() * 41).long() - 1  # in [-1, 40): -1 is padding
    return _with_grads(warpgeo.gather_points(features, idx, weight=weight), features, weight)


def _signed_distance(points):
    return _with_grads(warpgeo.signed_distance(points, _one_world()), points)


def _raycast(origins, directions):
    """Rays from x = -2 towards the world's meshes (leaves in [0, 1)): hits, normals, entries, and the
    distance's gradients (misses: distance 0 in the weighted sum)."""
    o = origins - torch.tensor([2.0, 0.5, 0.5], device=origins.device)
    d = directions + torch.tensor([1.0, -0.5, -0.5], device=directions.device)
    hits = warpgeo.raycast(_one_world(), o, d)
    return (hits.normal, hits.entry, *_with_grads(hits.distance.nan_to_num(posinf=0.0), origins, directions))


@functools.cache
def _one_grid() -> warpgeo.DistanceGrid:
    gen = torch.Generator().manual_seed(7)
    return warpgeo.DistanceGrid(
        (torch.rand(9, 8, 7, generator=gen) - 0.5).cuda(), 0.1, origin=(-0.4, -0.4, -0.3)
    )


def _grid_query(points):
    return _with_grads(_one_grid().query(points).distance, points)


def _grid_build(occupancy_source, cloud):
    occupied = occupancy_source.detach() > 0.7
    bounds = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    return (
        warpgeo.DistanceGrid.from_occupancy(occupied, 0.1).values,
        warpgeo.DistanceGrid.from_points(cloud.detach(), 0.1, bounds=bounds).values,
    )


def _fusion_inputs(seed: int):
    k = torch.tensor([[40.0, 0.0, 31.5], [0.0, 40.0, 23.5], [0.0, 0.0, 1.0]]).cuda()
    pose = torch.tensor([0.0, 0.0, -0.4, 1.0, 0.0, 0.0, 0.0]).cuda()
    return _leaf(seed, 48, 64), k, pose


def _depth_fusion(depth_source, k, pose):
    fusion = warpgeo.DepthFusion(((-0.5, -0.5, 0.0), (0.5, 0.5, 0.8)), 0.05, device="cuda")
    fusion.integrate(0.9 + 0.1 * depth_source.detach(), k, pose)
    return fusion.tsdf, fusion.weight, fusion.distance_grid().values


def _sphere_collision(points):
    spheres = torch.cat([points.detach(), points.detach()[..., :1] * 0.2], -1)
    return (warpgeo.sphere_collision(spheres, _one_world()),)


def _closest_point(points):
    closest = warpgeo.closest_point(points, _one_world())
    return (closest.entry, closest.normal, *_with_grads(closest.distance + closest.point.sum(-1), points))


#: case -> (its inputs for a seed, the graph's body: the op's outputs and gradients)
_OP_CASES = {
    "grid_query": (lambda s: ((_leaf(s, 2, 64, 3) - 0.2).detach().requires_grad_(True),), _grid_query),
    "grid_build": (lambda s: (_leaf(s, 10, 8, 6), _leaf(s + 50, 100, 3)), _grid_build),
    "depth_fusion": (_fusion_inputs, _depth_fusion),
    "knn": (lambda s: (_leaf(s, 2, 30, 3), _leaf(s + 50, 2, 80, 3)), _knn),
    "ball_query": (lambda s: (_leaf(s, 2, 30, 3), _leaf(s + 50, 2, 80, 3)), _ball_query),
    "chamfer": (lambda s: (_leaf(s, 2, 60, 3), _leaf(s + 50, 2, 45, 3)), _chamfer),
    "gather_weighted": (
        lambda s: (_leaf(s, 2, 5, 40), _leaf(s + 50, 2, 6, 3), _leaf(s + 90, 2, 6, 3)),
        _gather_weighted,
    ),
    "signed_distance": (
        lambda s: ((_leaf(s, 2, 64, 3) - 0.5).detach().requires_grad_(True),),
        _signed_distance,
    ),
    "raycast": (lambda s: (_leaf(s, 2, 64, 3), _leaf(s + 50, 2, 64, 3)), _raycast),
    "sphere_collision": (lambda s: ((_leaf(s, 2, 64, 3) - 0.5).detach(),), _sphere_collision),
    "closest_point": (
        lambda s: ((_leaf(s, 2, 64, 3) - 0.5).detach().requires_grad_(True),),
        _closest_point,
    ),
}


@pytest.mark.parametrize("checks", ["auto", "off"])
@pytest.mark.parametrize("case", sorted(_OP_CASES))
def test_op_replays(case, checks):
    """One op's forward and backward captured; each replay with new inputs copied in equals eager."""
    make, body = _OP_CASES[case]
    static = make(0)
    with _checks(checks):
        _warm_up(lambda: body(*static))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = body(*static)
        for seed in range(1, 3):
            new = make(seed)
            with torch.no_grad():
                for s, n in zip(static, new, strict=True):
                    s.copy_(n)
            graph.replay()
            torch.cuda.synchronize()
            expected = body(*make(seed))
            for got, want in zip(out, expected, strict=True):
                torch.testing.assert_close(got, want)


#: every op -> the test above that captures it
COVERS = {
    "warpgeo::sphere_mesh_cost": test_costs_replay_with_new_spheres_and_poses,
    "warpgeo::swept_sphere_mesh_cost": test_costs_replay_with_new_spheres_and_poses,
    "warpgeo::self_collision_cost": test_self_collision_with_the_world_cost_replays,
    "warpgeo::self_collision_cost_backward": test_self_collision_with_the_world_cost_replays,
    "warpgeo::farthest_point_sampling": test_fps_gather_mlp_replay,
    "warpgeo::gather_points": test_fps_gather_mlp_replay,
    "warpgeo::gather_points_backward": test_fps_gather_mlp_replay,
    "warpgeo::gather_points_weighted": "test_op_replays[gather_weighted]",
    "warpgeo::gather_points_weighted_backward": "test_op_replays[gather_weighted]",
    "warpgeo::knn": "test_op_replays[knn]",
    "warpgeo::ball_query": "test_op_replays[ball_query]",
    "warpgeo::chamfer_distance": "test_op_replays[chamfer]",
    "warpgeo::chamfer_distance_backward": "test_op_replays[chamfer]",
    "warpgeo::signed_distance": "test_op_replays[signed_distance]",
    "warpgeo::sphere_collision": "test_op_replays[sphere_collision]",
    "warpgeo::closest_point": "test_op_replays[closest_point]",
    "warpgeo::forward_kinematics": test_robot_spheres_replay,
    "warpgeo::forward_kinematics_backward": test_robot_spheres_replay,
    "warpgeo::raycast": "test_op_replays[raycast]",
    "warpgeo::distance_grid_query": "test_op_replays[grid_query]",
    "warpgeo::distance_grid_from_occupancy": "test_op_replays[grid_build]",
    "warpgeo::distance_grid_from_points": "test_op_replays[grid_build]",
    "warpgeo::depth_fusion_integrate": "test_op_replays[depth_fusion]",
    "warpgeo::depth_fusion_distance": "test_op_replays[depth_fusion]",
}


def test_every_op_is_covered():
    """Runs without CUDA too (conftest): it reads the op registry only."""
    assert_covers_every_op(COVERS, "test_cuda_graphs")
