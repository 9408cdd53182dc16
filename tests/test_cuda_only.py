"""What only the device itself can show: side streams, a second GPU, pinned transfers, sync-debug mode.

Listed in ``tests/conftest.py`` (``CUDA_ONLY``, ``TWO_GPUS``): skipped without CUDA, with the reason; the CUDA
graph tests are in ``test_cuda_graphs.py``, the host-read harness in ``test_sync_free.py``. Each result is
compared with the same call on the CPU (or on the default stream), which the CPU suite checks against its
references.
"""

from __future__ import annotations

import torch
import trimesh

import warpgeo


def _world(device) -> warpgeo.MeshWorld:
    box = trimesh.creation.box((0.4, 0.4, 0.4))
    ball = trimesh.creation.icosphere(subdivisions=2, radius=0.2)
    return warpgeo.MeshWorld(
        [box, ball], poses=[[0.0, 0, 0, 1, 0, 0, 0], [0.4, 0, 0, 1, 0, 0, 0]], device=device
    )


def _inputs(device, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    points = torch.rand(3, 2000, 3, generator=gen)
    features = torch.randn(3, 8, 2000, generator=gen)
    spheres = torch.cat([torch.rand(2, 50, 3, generator=gen) - 0.5, 0.05 * torch.ones(2, 50, 1)], dim=-1)
    return points.to(device), features.to(device), spheres.to(device)


def _every_op(points, features, spheres, world):
    """FPS, gather forward and backward, knn, ball query, sphere cost and signed distance, with gradients."""
    idx = warpgeo.farthest_point_sampling(points, 64)
    leaf = features.clone().requires_grad_(True)
    grouped = warpgeo.gather_points(leaf, idx)
    (g_features,) = torch.autograd.grad(grouped.square().sum(), leaf)
    near = warpgeo.knn(points[:, :100], points, 8)
    ball = warpgeo.ball_query(points[:, :100], points, 0.1, 16)
    s = spheres.clone().requires_grad_(True)
    cost = warpgeo.sphere_mesh_cost(s, world, activation_distance=0.05)
    (g_spheres,) = torch.autograd.grad(cost.sum(), s)
    dist = warpgeo.signed_distance(spheres[..., :3], world)
    return idx, grouped, g_features, near.idx, near.dists, ball, cost, g_spheres, dist


def _assert_same(got, want):
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.detach().cpu(), b.detach().cpu())


def test_ops_on_a_side_stream_equal_the_default_stream():
    """Every op launched on a side stream (``torch.cuda.stream``) equals the default stream's result: the
    launches follow torch's current stream, inputs made on that stream are ready when they run."""
    world = _world("cuda")
    want = _every_op(*_inputs("cuda"), world)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = _every_op(*_inputs("cuda"), world)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    _assert_same(got, want)


def test_ops_on_cuda_equal_the_cpu():
    """The same calls on the CPU and on CUDA: equal (the CPU suite checks the CPU against references)."""
    _assert_same(_every_op(*_inputs("cuda"), _world("cuda")), _every_op(*_inputs("cpu"), _world("cpu")))


def test_ops_on_a_second_gpu():
    """Everything on cuda:1 while cuda:0 is current: outputs on cuda:1, equal to the CPU's."""
    got = _every_op(*_inputs("cuda:1"), _world("cuda:1"))
    assert all(t.device == torch.device("cuda:1") for t in got)
    _assert_same(got, _every_op(*_inputs("cpu"), _world("cpu")))


def test_fps_per_cloud_counts_from_pinned_memory():
    """A per-cloud ``num_samples`` list reaches the device from pinned memory, asynchronously; the result
    equals the CPU's, and a list changed right after the call does not change it."""
    points, _, _ = _inputs("cuda")
    counts = [5, 64, 0]
    got = warpgeo.farthest_point_sampling(points, counts)
    counts[1] = 1  # the call copied the list: the transfer in flight reads the copy
    want = warpgeo.farthest_point_sampling(points.cpu(), [5, 64, 0])
    torch.testing.assert_close(got.cpu(), want)


def test_a_training_step_makes_no_sync_under_sync_debug_mode():
    """With value checks off, a step of every op, forward and backward, runs under
    ``torch.cuda.set_sync_debug_mode("error")``: any synchronising CUDA call would raise."""
    inputs, world = _inputs("cuda"), _world("cuda")
    with warpgeo.value_checks(False):
        _every_op(*inputs, world)  # first calls load modules (allowed to synchronise)
        torch.cuda.synchronize()
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = _every_op(*inputs, world)
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    torch.cuda.synchronize()
    assert out[6].sum() > 0  # some sphere collides: the step did work
