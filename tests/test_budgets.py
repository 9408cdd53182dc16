"""Work per call (issue 34): torch ops and Warp launches of one eager call, against each op's budget.

On a GPU every non-view torch op is a kernel launch or an allocator call and every Warp launch a kernel
launch: 5-8 µs of host time each, more than a small op's kernel. So the CUDA algorithms (on CUDA, and here on
CPU tensors: ``warpgeo._warp.PATHS.cuda_on_cpu``) must stay within a budget of **work = non-view torch ops
+ Warp launches** per call, value checks off. Views (``view``, ``expand``, ``detach``: no allocation, no
launch) are counted apart and reported in the failure message.

The torch ops are counted by a ``TorchDispatchMode`` and the launches at ``warpgeo._launch.run`` (where
every launch ends). The fwd+bwd cases include the caller's ``.sum()`` and autograd's seed (``ones_like``),
as a training step has them. Sizes: the issue's (B=8, N=2048) where the CPU runs it quickly, smaller ones
on the same algorithm otherwise, and for the neighbour searches both the small-cloud scan and the grid.
"""

from __future__ import annotations

import collections
import contextlib

import pytest
import torch
from conftest import assert_covers_every_op
from torch.utils._python_dispatch import TorchDispatchMode

import warpgeo
from warpgeo import _launch, _warp

#: issue 34's budgets: non-view torch ops + Warp launches per call, value checks off
BUDGETS = {
    "fps": 4,
    "gather fwd": 2,
    "gather fwd+bwd": 8,
    "knn": 6,
    "ball_query": 6,
    "chamfer fwd": 8,
    "chamfer fwd+bwd": 18,
    "sphere cost fwd+bwd": 8,
    # not in issue 34: the work measured when each op joined this suite (a bound against regressions)
    "gather weighted fwd+bwd": 24,
    "swept cost fwd+bwd": 9,
    "signed distance fwd+bwd": 6,
    "self collision fwd+bwd": 7,
    "robot spheres fwd+bwd": 8,
    "raycast fwd": 5,
    "raycast fwd+bwd": 42,  # the tangent-plane backward in torch ops (a Warp backward: ~6)
    "grid query fwd+bwd": 6,
    "grid from occupancy": 11,
    "grid from points": 9,
    "depth fusion integrate": 2,
    "depth fusion distance": 13,
    "sphere collision": 2,
    "closest point fwd+bwd": 8,
}


class _Counter(TorchDispatchMode):
    """Every aten op dispatched inside it, views (an alias that is not written) apart."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.views: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        view = any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)
        (self.views if view else self.ops).append(str(func))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _cuda_algorithms(device: torch.device):
    """CUDA's algorithms: on CUDA as they are, on the CPU through ``PATHS.cuda_on_cpu`` (and Warp's CPU
    blocks, so that block kernels run with real lanes, as tests/test_cuda_paths.py runs them)."""
    if device.type == "cuda":
        yield
        return
    wp = _warp.warp()
    previous = wp.config.enable_cpu_blocks
    _warp.PATHS.cuda_on_cpu = True
    wp.config.enable_cpu_blocks = True
    try:
        yield
    finally:
        _warp.PATHS.cuda_on_cpu = False
        wp.config.enable_cpu_blocks = previous


def _work(fn, monkeypatch) -> tuple[list[str], list[str], list[str]]:
    """(non-view torch ops, views, launched kernels) of one call of ``fn``, after a warm-up call."""
    fn()
    launched: list[str] = []
    real_run = _launch.run

    def counted(kernel, *args):
        launched.append(kernel.key)
        return real_run(kernel, *args)

    monkeypatch.setattr(_launch, "run", counted)
    with _Counter() as counter:
        fn()
    monkeypatch.setattr(_launch, "run", real_run)
    return counter.ops, counter.views, launched


def _check(name: str, fn, monkeypatch) -> None:
    ops, views, launched = _work(fn, monkeypatch)
    work = len(ops) + len(launched)
    detail = (
        f"{name}: {len(ops)} torch ops {dict(collections.Counter(ops))}, {len(launched)} launches "
        f"{launched}, {len(views)} views {dict(collections.Counter(views))}"
    )
    assert launched, f"no launch counted: is the counter watching? {detail}"
    assert work <= BUDGETS[name], f"work {work} > budget {BUDGETS[name]}: {detail}"


def _clouds(device, b, n, m, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, n, 3, generator=g).to(device), torch.rand(b, m, 3, generator=g).to(device)


def _fwd_bwd(fn, leaf):
    def call():
        leaf.grad = None
        fn().sum().backward()

    return call


def test_the_counter_counts_views_apart(monkeypatch):
    """The counter itself: a view is a view, an allocation and a launch are work."""
    x = torch.rand(4, 3)
    with _Counter() as counter:
        x.view(12)
        torch.empty(3)
    assert counter.views == ["aten.view.default"] and counter.ops == ["aten.empty.memory_format"]


def test_fps(device, monkeypatch):
    points, _ = _clouds(device, 2, 256, 1)
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        _check("fps", lambda: warpgeo.farthest_point_sampling(points, 32), monkeypatch)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_gather(device, monkeypatch, index_dtype):
    g = torch.Generator().manual_seed(1)
    features = torch.rand(8, 16, 2048, generator=g).to(device)
    idx = torch.randint(0, 2048, (8, 512), generator=g).to(device, index_dtype)
    leaf = features.clone().requires_grad_()
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        _check("gather fwd", lambda: warpgeo.gather_points(features, idx), monkeypatch)
        _check("gather fwd+bwd", _fwd_bwd(lambda: warpgeo.gather_points(leaf, idx), leaf), monkeypatch)


#: (B, N, M): the issue's size, a small cloud (the scan), a large one (the grid)
_NEIGHBOUR_SIZES = [(8, 2048, 512), (2, 100, 30), (2, 20000, 64)]


@pytest.mark.parametrize(("b", "n", "m"), _NEIGHBOUR_SIZES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_knn_and_ball_query(device, monkeypatch, b, n, m, dtype):
    points, queries = _clouds(device, b, n, m)
    points, queries = points.to(dtype), queries.to(dtype)
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        _check("knn", lambda: warpgeo.knn(queries, points, 16), monkeypatch)
        _check("ball_query", lambda: warpgeo.ball_query(queries, points, 0.1, 16), monkeypatch)


@pytest.mark.parametrize(("b", "n", "m"), [(8, 2048, 2048), (2, 100, 70), (2, 20000, 3000)])
def test_chamfer(device, monkeypatch, b, n, m):
    x, y = _clouds(device, b, n, m)
    leaf = x.clone().requires_grad_()
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        _check("chamfer fwd", lambda: warpgeo.chamfer_distance(x, y), monkeypatch)
        call = _fwd_bwd(lambda: warpgeo.chamfer_distance(leaf, y).loss, leaf)
        _check("chamfer fwd+bwd", call, monkeypatch)


def test_sphere_cost(device, monkeypatch):
    corners = [[x, y, z] for x in (-0.5, 0.5) for y in (-0.5, 0.5) for z in (-0.5, 0.5)]
    faces = [[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1]]
    faces += [[2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]]
    world = warpgeo.MeshWorld([(torch.tensor(corners), torch.tensor(faces))], device=device)
    g = torch.Generator().manual_seed(2)
    spheres = torch.rand(8, 16, 4, generator=g) * torch.tensor([2.0, 2.0, 2.0, 0.1])
    spheres[..., :3] -= 1.0
    leaf = spheres.to(device).requires_grad_()
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        call = _fwd_bwd(lambda: warpgeo.sphere_mesh_cost(leaf, world, activation_distance=0.05), leaf)
        _check("sphere cost fwd+bwd", call, monkeypatch)


def test_swept_cost_and_signed_distance(device, monkeypatch):
    world = warpgeo.MeshWorld([warpgeo.Cuboid((1.0, 1.0, 1.0))], device=device)
    g = torch.Generator().manual_seed(3)
    spheres = torch.rand(4, 6, 16, 4, generator=g) * torch.tensor([2.0, 2.0, 2.0, 0.1])
    spheres[..., :3] -= 1.0
    leaf = spheres.to(device).requires_grad_()
    points = (torch.rand(8, 64, 3, generator=g) - 0.5).to(device).requires_grad_()
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        swept = _fwd_bwd(lambda: warpgeo.swept_sphere_mesh_cost(leaf, world, sweep_steps=3), leaf)
        _check("swept cost fwd+bwd", swept, monkeypatch)
        _check(
            "signed distance fwd+bwd",
            _fwd_bwd(lambda: warpgeo.signed_distance(points, world), points),
            monkeypatch,
        )


def test_gather_weighted(device, monkeypatch):
    g = torch.Generator().manual_seed(4)
    features = torch.rand(8, 16, 2048, generator=g).to(device).requires_grad_()
    idx = torch.randint(0, 2048, (8, 512, 16), generator=g).to(device)
    weight = torch.rand(8, 512, 16, generator=g).to(device).requires_grad_()
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        call = _fwd_bwd(lambda: warpgeo.gather_points(features, idx, weight=weight), features)
        _check("gather weighted fwd+bwd", call, monkeypatch)


def test_self_collision(device, monkeypatch):
    g = torch.Generator().manual_seed(5)
    spheres = torch.rand(64, 40, 4, generator=g) * torch.tensor([1.0, 1.0, 1.0, 0.1])
    leaf = spheres.to(device).requires_grad_()
    pairs = warpgeo.collision_pairs([k // 4 for k in range(40)]).to(device)
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        call = _fwd_bwd(lambda: warpgeo.self_collision_cost(leaf, pairs, margin=0.01), leaf)
        _check("self collision fwd+bwd", call, monkeypatch)


def test_raycast(device, monkeypatch):
    """Rays into a world of a mesh and a primitive: the forward (outputs, one launch) and the distance's
    gradient w.r.t. origins and directions (the tangent-plane backward, torch ops)."""
    import trimesh

    ball = trimesh.creation.icosphere(subdivisions=2, radius=0.5)
    world = warpgeo.MeshWorld(
        [ball, warpgeo.Capsule(0.2, 1.0)], poses=[[0, 0, 0, 1, 0, 0, 0], [0, 1, 0, 1, 0, 0, 0]], device=device
    )
    g = torch.Generator().manual_seed(6)
    origins = (torch.rand(8, 256, 3, generator=g) - torch.tensor([2.5, 0.5, 0.5])).to(device)
    directions = (torch.tensor([1.0, 0.0, 0.0]) + 0.2 * torch.randn(8, 256, 3, generator=g)).to(device)
    leaf = origins.clone().requires_grad_()
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        _check("raycast fwd", lambda: warpgeo.raycast(world, origins, directions), monkeypatch)
        call = _fwd_bwd(
            lambda: warpgeo.raycast(world, leaf, directions).distance.nan_to_num(posinf=0.0), leaf
        )
        _check("raycast fwd+bwd", call, monkeypatch)


def test_sphere_collision_and_closest_point(device, monkeypatch):
    world = warpgeo.MeshWorld([warpgeo.Cuboid((1.0, 1.0, 1.0))], device=device)
    g = torch.Generator().manual_seed(6)
    spheres = (torch.rand(8, 16, 4, generator=g) * torch.tensor([2.0, 2.0, 2.0, 0.1]) - 0.5).to(device)
    points = (torch.rand(8, 64, 3, generator=g) - 0.5).to(device).requires_grad_()
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        _check("sphere collision", lambda: warpgeo.sphere_collision(spheres, world), monkeypatch)
        call = _fwd_bwd(lambda: warpgeo.closest_point(points, world).distance, points)
        _check("closest point fwd+bwd", call, monkeypatch)


#: every op -> the test above that counts its work (a backward op: in its forward's fwd+bwd case)
COVERS = {
    "warpgeo::farthest_point_sampling": test_fps,
    "warpgeo::gather_points": test_gather,
    "warpgeo::gather_points_backward": test_gather,
    "warpgeo::gather_points_weighted": test_gather_weighted,
    "warpgeo::gather_points_weighted_backward": test_gather_weighted,
    "warpgeo::knn": test_knn_and_ball_query,
    "warpgeo::ball_query": test_knn_and_ball_query,
    "warpgeo::chamfer_distance": test_chamfer,
    "warpgeo::chamfer_distance_backward": test_chamfer,
    "warpgeo::sphere_mesh_cost": test_sphere_cost,
    "warpgeo::swept_sphere_mesh_cost": test_swept_cost_and_signed_distance,
    "warpgeo::signed_distance": test_swept_cost_and_signed_distance,
    "warpgeo::sphere_collision": test_sphere_collision_and_closest_point,
    "warpgeo::closest_point": test_sphere_collision_and_closest_point,
    "warpgeo::self_collision_cost": test_self_collision,
    "warpgeo::self_collision_cost_backward": test_self_collision,
    "warpgeo::raycast": test_raycast,
}


def test_every_op_is_covered():
    assert_covers_every_op(COVERS, "test_budgets")


def test_robot_spheres(device, monkeypatch):
    """Robot.spheres fwd+bwd: the outputs, one launch, the gradient's row and scratch, one launch back."""
    urdf = (
        '<robot name="r"><link name="a"/><link name="b"/><link name="c"/>'
        '<joint name="j1" type="revolute"><parent link="a"/><child link="b"/><origin xyz="0 0 0.3"/>'
        '<axis xyz="0 0 1"/><limit lower="-3" upper="3" effort="1" velocity="1"/></joint>'
        '<joint name="j2" type="revolute"><parent link="b"/><child link="c"/><origin xyz="0.3 0 0"/>'
        '<axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="1" velocity="1"/></joint></robot>'
    )
    robot = warpgeo.Robot.from_urdf(
        urdf, spheres={"b": [[0.1, 0, 0, 0.05]] * 4, "c": [[0, 0, 0.1, 0.04]] * 4}, device=device
    )
    leaf = torch.rand(8, 16, robot.dof, device=device).requires_grad_()
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        _check("robot spheres fwd+bwd", _fwd_bwd(lambda: robot.spheres(leaf), leaf), monkeypatch)


COVERS.update(
    {
        "warpgeo::forward_kinematics": test_robot_spheres,
        "warpgeo::forward_kinematics_backward": test_robot_spheres,
    }
)


def test_distance_grid(device, monkeypatch):
    """DistanceGrid's query (fwd+bwd), its builders and DepthFusion's two ops, value checks off."""
    g = torch.Generator().manual_seed(6)
    grid = warpgeo.DistanceGrid((torch.rand(16, 12, 10, generator=g) - 0.5).to(device), 0.05)
    points = (torch.rand(8, 64, 3, generator=g) * 0.6).to(device).requires_grad_()
    occupied = (torch.rand(24, 20, 16, generator=g) > 0.8).to(device)
    cloud = torch.rand(500, 3, generator=g).to(device)
    fusion = warpgeo.DepthFusion(((-0.5, -0.5, 0.0), (0.5, 0.5, 0.8)), 0.05, device=device)
    k = torch.tensor([[40.0, 0.0, 31.5], [0.0, 40.0, 23.5], [0.0, 0.0, 1.0]], device=device)
    depth = (0.9 + 0.1 * torch.rand(48, 64, generator=g)).to(device)
    pose = torch.tensor([0.0, 0.0, -0.4, 1.0, 0.0, 0.0, 0.0], device=device)
    with _cuda_algorithms(device), warpgeo.value_checks(False):
        _check("grid query fwd+bwd", _fwd_bwd(lambda: grid.query(points).distance, points), monkeypatch)
        _check(
            "grid from occupancy", lambda: warpgeo.DistanceGrid.from_occupancy(occupied, 0.05), monkeypatch
        )
        _check(
            "grid from points",
            lambda: warpgeo.DistanceGrid.from_points(cloud, 0.05, bounds=((0, 0, 0), (1, 1, 1))),
            monkeypatch,
        )
        _check("depth fusion integrate", lambda: fusion.integrate(depth, k, pose), monkeypatch)
        _check("depth fusion distance", fusion.distance_grid, monkeypatch)


COVERS.update(
    {
        "warpgeo::distance_grid_query": test_distance_grid,
        "warpgeo::distance_grid_from_occupancy": test_distance_grid,
        "warpgeo::distance_grid_from_points": test_distance_grid,
        "warpgeo::depth_fusion_integrate": test_distance_grid,
        "warpgeo::depth_fusion_distance": test_distance_grid,
    }
)
