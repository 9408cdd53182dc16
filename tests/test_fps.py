"""Farthest point sampling against a float64 reference, its invariants, and its error paths."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import fps_reference

import warpgeo
from warpgeo import FarthestPointSampling, farthest_point_sampling

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _cloud(batch, n, dtype=torch.float32, device="cpu", scale=1.0):
    return (torch.rand(batch, n, 3, dtype=torch.float64) * scale).to(dtype).to(device)


def _reference_rows(points, num_samples, starts=None, lengths=None):
    rows, dists = [], []
    for b in range(points.shape[0]):
        n = points.shape[1] if lengths is None else int(lengths[b])
        k = num_samples if isinstance(num_samples, int) else int(num_samples[b])
        start = 0 if starts is None else int(starts[b])
        idx, dist = fps_reference(points[b, :n].double().cpu().numpy(), k, start)
        rows.append(idx)
        dists.append(dist)
    width = max(len(r) for r in rows)
    rows = [r + [-1] * (width - len(r)) for r in rows]
    dists = [d + [math.nan] * (width - len(d)) for d in dists]
    return torch.tensor(rows), torch.tensor(dists, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------------------
# exact agreement with the reference
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 7, 512, 513, 4097])
@pytest.mark.parametrize("batch", [1, 3])
def test_matches_reference(device, batch, n, dtype):
    points = _cloud(batch, n, dtype, device)
    for k in sorted({1, max(1, n // 2), n}):
        got = farthest_point_sampling(points, k)
        expected, _ = _reference_rows(points, k)
        assert got.dtype == torch.int64 and got.shape == (batch, k)
        assert torch.equal(got.cpu(), expected), f"batch={batch} n={n} k={k} dtype={dtype}"


def test_unbatched_input_gives_unbatched_output(device):
    points = _cloud(1, 300, device=device)
    got = farthest_point_sampling(points[0], 20)
    assert got.shape == (20,)
    assert torch.equal(got, farthest_point_sampling(points, 20)[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_distances_match_reference(device, dtype):
    points = _cloud(2, 200, dtype, device)
    idx, dist = farthest_point_sampling(points, 50, return_distances=True)
    expected_idx, expected_dist = _reference_rows(points, 50)
    assert torch.equal(idx.cpu(), expected_idx)
    assert dist.dtype == dtype
    assert torch.isinf(dist[:, 0]).all()
    tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6)
    torch.testing.assert_close(dist[:, 1:].double().cpu(), expected_dist[:, 1:], rtol=tol, atol=0)
    # the coverage radius never grows
    assert (dist[:, 2:] <= dist[:, 1:-1]).all()


@pytest.fixture
def tree_always(monkeypatch):
    """Every CPU call takes the tree kernel (normally only N * K >= 2**22 does), so small clouds test it."""
    import warpgeo.fps

    monkeypatch.setattr(warpgeo.fps, "_MIN_TREE_WORK", 0)


def _shaped_cloud(shape, n, generator):
    """Clouds on which pruning fails or ties abound: every point on a sphere, on a line, on a coarse grid."""
    if shape == "sphere":
        p = torch.randn(n, 3, generator=generator, dtype=torch.float64)
        return p / p.norm(dim=1, keepdim=True)
    if shape == "line":
        p = torch.zeros(n, 3, dtype=torch.float64)
        p[:, 0] = torch.rand(n, generator=generator, dtype=torch.float64)
        return p
    if shape == "grid":  # duplicates and exact distance ties everywhere
        return torch.randint(-3, 4, (n, 3), generator=generator).double()
    if shape == "clusters":  # two tight clusters far apart
        p = torch.rand(n, 3, generator=generator, dtype=torch.float64) * 1e-3
        p[n // 2 :] += 100.0
        return p
    return torch.rand(n, 3, generator=generator, dtype=torch.float64)


@pytest.mark.parametrize("shape", ["uniform", "sphere", "line", "grid", "clusters"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tree_kernel_matches_reference(tree_always, shape, dtype):
    gen = torch.Generator().manual_seed(hash(shape) % 1000)
    n = 700
    points = torch.stack([_shaped_cloud(shape, n, gen) for _ in range(3)]).to(dtype)
    lengths = torch.tensor([700, 333, 17])
    num_samples = torch.tensor([700, 200, 40])  # every point of cloud 0; cloud 2 asks for more than it has
    starts = torch.tensor([5, 332, 0])
    got, dist = farthest_point_sampling(
        points, num_samples, lengths=lengths, start_index=starts, return_distances=True
    )
    expected, expected_dist = _reference_rows(points, num_samples, starts=starts, lengths=lengths)
    assert torch.equal(got, expected)
    assert got[2, 17:].eq(-1).all()
    torch.testing.assert_close(dist.double(), expected_dist.to(dist.dtype).double(), equal_nan=True)


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 33, 1000])
def test_tree_kernel_sizes_around_the_leaf(tree_always, n):
    points = _cloud(2, n, torch.float64)
    for k in sorted({1, max(1, n // 3), n, n + 5}):
        expected, _ = _reference_rows(points, k)
        assert torch.equal(farthest_point_sampling(points, k), expected), f"n={n} k={k}"


@settings(max_examples=40, deadline=None)
@given(
    cloud=st.lists(
        st.tuples(st.integers(-2, 2), st.integers(-2, 2), st.integers(-2, 2)), min_size=1, max_size=60
    ),
    k=st.integers(min_value=1, max_value=70),
)
def test_tree_kernel_on_tiny_grids(cloud, k):
    import warpgeo.fps

    points = torch.tensor(cloud, dtype=torch.float64)
    previous = warpgeo.fps._MIN_TREE_WORK
    warpgeo.fps._MIN_TREE_WORK = 0  # hypothesis and function-scoped fixtures do not mix
    try:
        got = farthest_point_sampling(points, k)
    finally:
        warpgeo.fps._MIN_TREE_WORK = previous
    expected, _ = fps_reference(points.numpy(), k)
    assert got.tolist() == expected


# ---------------------------------------------------------------------------------------------------------
# any finite float64 scale (squared distances would overflow past ~1e154 and underflow for subnormal clouds)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["serial", "tree"])
def test_float64_beyond_the_square_root_of_its_range(device, path, monkeypatch):
    import warpgeo.fps

    monkeypatch.setattr(warpgeo.fps, "_MIN_TREE_WORK", 0 if path == "tree" else 1 << 62)
    points = torch.tensor([[0.0, 0, 0], [1.1e154, 0, 0], [1.3e154, 0, 0]], dtype=torch.float64, device=device)
    idx, dist = farthest_point_sampling(points, 3, return_distances=True)
    assert idx.tolist() == [0, 2, 1]
    assert dist[1].item() == 1.3e154 and dist[2].item() == pytest.approx(0.2e154, rel=1e-12)


@pytest.mark.parametrize("exponent", [-1070, -1040, -600, 0, 500, 1000])
@pytest.mark.parametrize("path", ["serial", "tree"])
def test_float64_order_is_the_same_at_every_scale(device, path, exponent, monkeypatch):
    import warpgeo.fps

    monkeypatch.setattr(warpgeo.fps, "_MIN_TREE_WORK", 0 if path == "tree" else 1 << 62)
    # small integers: exact at every scale, even as subnormals (2**-1070 * 15 is a subnormal float64)
    unit = torch.randint(0, 16, (2, 300, 3), generator=torch.Generator().manual_seed(3)).double()
    scale = 2.0 ** (exponent // 2) * 2.0 ** (exponent - exponent // 2)
    scaled = (unit * scale).to(device)
    assert torch.equal(scaled.cpu() / scale, unit), "the test cloud itself must be exact"
    idx, dist = farthest_point_sampling(scaled, 150, return_distances=True)
    expected, expected_dist = _reference_rows(unit, 150)
    assert torch.equal(idx.cpu(), expected)
    # distances come back in the caller's units (where they are representable)
    if exponent >= -1000:
        torch.testing.assert_close(dist.cpu() / scale, expected_dist, rtol=1e-12, atol=0)


def _exact_fps(points, k):
    """Greedy FPS of one cloud (N, 3) from point 0 by exact squared distances (fractions), ties to the
    lowest index: the indices."""
    from fractions import Fraction

    p = [[Fraction(c) for c in row] for row in points.tolist()]
    chosen = [0]
    mind = [sum((a - b) ** 2 for a, b in zip(row, p[0], strict=True)) for row in p]
    while len(chosen) < k:
        best = max(range(len(p)), key=lambda i: (mind[i], -i))
        chosen.append(best)
        mind = [
            min(m, sum((a - b) ** 2 for a, b in zip(row, p[best], strict=True)))
            for m, row in zip(mind, p, strict=True)
        ]
    return chosen


@pytest.mark.parametrize("small, large", [(1e30, 1e300), (2.0**-400, 2.0**500), (1e-300, 1e-30)])
@pytest.mark.parametrize("path", ["serial", "tree"])
def test_float64_mixed_extremes_within_the_span_are_exact(device, path, small, large, monkeypatch):
    """One float64 cloud of points at two far-apart magnitudes (issue 50, item 14; within
    ``_scale.MAX_SPAN``): the exact greedy order (fractions)."""
    import warpgeo.fps

    monkeypatch.setattr(warpgeo.fps, "_MIN_TREE_WORK", 0 if path == "tree" else 1 << 62)
    gen = torch.Generator().manual_seed(5)
    unit = (0.1 + 0.9 * torch.rand(80, 3, generator=gen, dtype=torch.float64)) * (
        torch.randint(0, 2, (80, 3), generator=gen) * 2 - 1
    )
    # the start (point 0) is small: a small point's least distance is then a small one (a small point's
    # distances to the large ones differ beyond float64's resolution: no rounding could order them)
    magnitude = torch.tensor([large if i % 3 == 1 else small for i in range(80)], dtype=torch.float64)
    points = unit * magnitude[:, None]
    got = farthest_point_sampling(points.to(device), 40)
    assert got.cpu().tolist() == _exact_fps(points, 40)


def test_float64_mixed_extremes_beyond_the_span_are_refused(device):
    """Points at 1e-300 and at 1e300 together: refused with checks on, naming the span (no scale keeps
    every squared distance exact); with checks off, no crash."""
    points = torch.tensor(
        [[0, 0, 0], [1e-300, 0, 0], [2e-300, 1e-300, 0], [1e300, 0, 0]], dtype=torch.float64
    )
    with pytest.raises(ValueError, match=r"points of cloud 0 span 2\*\*\d+ in float64"):
        farthest_point_sampling(points.to(device), 4)
    with warpgeo.value_checks(False):
        assert farthest_point_sampling(points.to(device), 4).shape == (4,)


def test_float32_extremes(device):
    big = torch.tensor([[-3.0e38, 0, 0], [0, 0, 0], [3.0e38, 0, 0], [1.0e38, 0, 0]], device=device)
    assert farthest_point_sampling(big, 4).tolist() == [0, 2, 1, 3]
    tiny = torch.tensor([[0.0, 0, 0], [3e-45, 0, 0], [1e-45, 0, 0]], device=device)  # float32 subnormals
    assert farthest_point_sampling(tiny, 3).tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------------
# invariants, for any cloud (hypothesis)
# ---------------------------------------------------------------------------------------------------------

_coords = st.integers(min_value=-3, max_value=3)  # small integer grid: many exact ties and duplicates


@settings(max_examples=60, deadline=None)
@given(
    cloud=st.lists(st.tuples(_coords, _coords, _coords), min_size=1, max_size=40),
    k=st.integers(min_value=1, max_value=50),
    start=st.integers(min_value=0, max_value=39),
)
def test_greedy_invariants(cloud, k, start):
    points = torch.tensor(cloud, dtype=torch.float64)
    n = len(cloud)
    start = start % n
    idx = farthest_point_sampling(points, k, start_index=start)
    assert idx.shape == (k,)
    valid = idx[idx >= 0].tolist()
    # padding only at the end, and only once every point was taken
    assert idx[: len(valid)].tolist() == valid
    assert len(valid) == min(k, n)
    assert len(set(valid)) == len(valid), "an index repeats"
    assert valid[0] == start
    for step in range(1, len(valid)):
        chosen = points[valid[:step]]
        nearest = torch.cdist(points, chosen).min(dim=1).values
        nearest[valid[:step]] = -1.0
        best = nearest.max()
        assert nearest[valid[step]] == best, f"step {step}: not a farthest point"
        # ties go to the lowest index
        assert valid[step] == int(torch.nonzero(nearest == best)[0])


# ---------------------------------------------------------------------------------------------------------
# known answers
# ---------------------------------------------------------------------------------------------------------


def test_bucketed_cpu_kernel_on_a_grid_full_of_ties(device):
    # large enough for the CPU's bucket-pruned kernel (N * K >= 2^22); 11^3 grid cells for 3000 points, so
    # exact distance ties and duplicated points everywhere: the order must still be the reference's
    points = torch.randint(-5, 6, (2, 3000, 3), dtype=torch.float64).to(device)
    lengths = torch.tensor([3000, 2500], device=device)
    got = farthest_point_sampling(
        points, 3000, lengths=lengths, start_index=torch.tensor([17, 2499], device=device)
    )
    expected, _ = _reference_rows(points, 3000, starts=[17, 2499], lengths=lengths)
    assert torch.equal(got.cpu(), expected)


def test_collinear_points(device):
    points = torch.zeros(11, 3, device=device)
    points[:, 0] = torch.arange(11.0)
    # 0, then the far end 10, then the middle 5; then 2, 3, 7, 8 are all 2 away: the lowest index wins
    assert farthest_point_sampling(points, 4).tolist() == [0, 10, 5, 2]


def test_duplicated_points_never_repeat_an_index(device):
    distinct = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]], device=device)
    points = distinct.repeat(3, 1)  # indices i, i+3, i+6 coincide
    idx = farthest_point_sampling(points, 9).tolist()
    assert sorted(idx[:3]) == [0, 1, 2], "the distinct points come first"
    assert sorted(idx) == list(range(9))
    assert idx[3:] == [3, 4, 5, 6, 7, 8], "then the duplicates, lowest index first"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_coordinates_sample_like_the_scaled_cloud(device, dtype):
    unit = _cloud(2, 2000, torch.float64, device)
    # a power of two scales exactly, so the two clouds are the same shape bit for bit
    big = (unit * 2.0**13 + 1.0e4).to(dtype)
    small = ((big.double() - 1.0e4) / 2.0**13).to(dtype)
    assert big.abs().max() > 1.0e4
    assert torch.equal(farthest_point_sampling(big, 500), farthest_point_sampling(small, 500))
    assert torch.equal(farthest_point_sampling(unit * 1.0e4, 500), farthest_point_sampling(unit, 500))


def test_fp16_with_coordinates_of_a_thousand(device):
    # squared distances up to ~1.2e7 overflow float16 (max 65504): the op must not compute in float16
    points = (torch.rand(2, 3000, 3, dtype=torch.float64) * 2000 - 1000).half().to(device)
    got = farthest_point_sampling(points, 300)
    assert torch.equal(got, farthest_point_sampling(points.float(), 300))
    assert len(set(got[0].tolist())) == 300


# ---------------------------------------------------------------------------------------------------------
# ragged batches, per-cloud K, start points
# ---------------------------------------------------------------------------------------------------------


def test_lengths_and_per_cloud_k(device):
    points = _cloud(4, 100, device=device)
    points[1, 60:] = float("nan")  # padding may hold anything: it is never read
    lengths = torch.tensor([100, 60, 5, 0], device=device)
    num_samples = torch.tensor([10, 30, 8, 3], device=device)  # cloud 2 asks for more than it has
    got = farthest_point_sampling(points, num_samples, lengths=lengths)
    expected, _ = _reference_rows(points, num_samples, lengths=lengths)
    assert got.shape == (4, 30)
    assert torch.equal(got.cpu(), expected)
    assert got[2, 5:].eq(-1).all() and sorted(got[2, :5].tolist()) == list(range(5))
    assert got[3].eq(-1).all()


def test_distances_are_nan_on_padding(device):
    points = _cloud(1, 4, device=device)
    idx, dist = farthest_point_sampling(points, 6, return_distances=True)
    assert idx[0, 4:].eq(-1).all()
    assert torch.isnan(dist[0, 4:]).all() and torch.isfinite(dist[0, 1:4]).all()


def test_start_index(device):
    points = _cloud(3, 50, device=device)
    starts = torch.tensor([0, 7, 49], device=device)
    got = farthest_point_sampling(points, 12, start_index=starts)
    expected, _ = _reference_rows(points, 12, starts=starts)
    assert torch.equal(got.cpu(), expected)
    assert farthest_point_sampling(points, 5, start_index=3)[:, 0].eq(3).all()


def test_random_start_is_reproducible_and_valid(device):
    points = _cloud(8, 64, device=device)
    lengths = torch.tensor([64, 1, 2, 3, 10, 20, 40, 64], device=device)

    def run(seed):
        gen = torch.Generator().manual_seed(seed)
        return farthest_point_sampling(points, 4, lengths=lengths, random_start=True, generator=gen)

    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert (a[:, 0] < lengths).all() and (a[:, 0] >= 0).all()
    expected, _ = _reference_rows(points, 4, starts=a[:, 0], lengths=lengths)
    assert torch.equal(a.cpu(), expected)
    # the draw is uniform over the valid points: every start of a 3-point cloud shows up
    gen = torch.Generator().manual_seed(0)
    seen = {
        int(farthest_point_sampling(points[3, :3], 1, random_start=True, generator=gen)[0]) for _ in range(60)
    }
    assert seen == {0, 1, 2}


# ---------------------------------------------------------------------------------------------------------
# autograd
# ---------------------------------------------------------------------------------------------------------


def test_indices_are_not_differentiable_but_gathered_features_are(device):
    points = _cloud(2, 128, device=device).requires_grad_()
    features = torch.randn(2, 128, 5, device=device, requires_grad=True)
    idx, dist = farthest_point_sampling(points, 16, return_distances=True)
    assert not idx.requires_grad and not dist.requires_grad
    picked = torch.gather(features, 1, idx[..., None].expand(-1, -1, 5))
    upstream = torch.randn_like(picked)
    (picked * upstream).sum().backward()
    expected = torch.zeros_like(features)
    for b in range(2):
        expected[b, idx[b]] = upstream[b]
    assert torch.equal(features.grad, expected)
    assert points.grad is None


@pytest.mark.parametrize("block_dim", [1, 8])
def test_cuda_block_kernel_agrees_on_the_cpu(block_dim):
    """The one-block-per-cloud kernel CUDA runs, run here with Warp's CPU blocks (real lanes when
    ``enable_cpu_blocks`` is on), on a cloud full of exact ties: the cross-lane arg-max must pick the same
    (lowest) index as the serial CPU kernel."""
    from warpgeo import _launch, _warp
    from warpgeo._kernels import fps_cuda as kernels

    wp = _warp.warp()
    points = torch.randint(0, 4, (3, 300, 3)).float()
    batch, n, k = 3, 300, 300
    lengths = torch.tensor([300, 123, 7], dtype=torch.int32)
    indices = torch.empty(batch, k, dtype=torch.int64)
    distances = torch.empty(batch, k, dtype=torch.float32)  # the kernel writes the points' precision
    args = {
        "points": points,
        "lengths": lengths.long(),
        "num_samples": torch.full((batch,), k, dtype=torch.int64),
        "start": torch.tensor([0, 5, 6]),
        "mindist": torch.empty(batch, n, dtype=torch.float64),
        "out_index": indices,
        "out_dist": distances,
    }
    previous = wp.config.enable_cpu_blocks
    wp.config.enable_cpu_blocks = block_dim > 1
    try:
        assert kernels.FPS_BLOCK.cuda_only and kernels.FPS_BLOCK.block_dim >= 32  # a CPU warmup skips it
        kernel = kernels.FPS_BLOCK["float32"].fps_block
        _launch.launch(kernel, [batch], device=torch.device("cpu"), tiled=True, block_dim=block_dim, **args)
    finally:
        wp.config.enable_cpu_blocks = previous
    expected, expected_dist = farthest_point_sampling(
        points, k, lengths=lengths.long(), start_index=torch.tensor([0, 5, 6]), return_distances=True
    )
    assert torch.equal(indices, expected)
    assert torch.equal(distances.nan_to_num(-1.0), expected_dist.nan_to_num(-1.0))


def _grid_args(points, k, groups, *, lengths=None, starts=None):
    """The arguments of a grid kernel (``fps_cuda.FPS_GRID``) for ``points`` (B, N, 3), K = ``k``."""
    from warpgeo import fps

    batch, n, _ = points.shape
    partials, sync, mindist = fps._grid_workspace(batch, n, groups, points.device, zeroed=True)
    none = torch.empty(0, dtype=torch.int64, device=points.device)
    args = {
        "points": points,
        "lengths": none if lengths is None else lengths,
        "num_samples": none,
        "start": none if starts is None else starts,
        "mindist": mindist,
        "partials": partials,
        "out_index": torch.empty(batch, k, dtype=torch.int64, device=points.device),
        "out_dist": torch.empty(batch, k, dtype=points.dtype, device=points.device),
    }
    return args, sync


@pytest.mark.parametrize(("groups", "block_dim"), [(1, 8), (3, 8), (7, 1), (7, 4)])
def test_grid_kernels_on_cpu_blocks(groups, block_dim):
    """The grid designs' kernels launched directly, with CPU blocks of ``block_dim`` lanes and ``groups``
    blocks a cloud (more than a block's lanes: a lane reduces several candidates), on exact ties:

    * ``fps_steps``, a launch per step: the reference's order and distances;
    * ``fps_persistent``: a group of one block runs the whole loop through its barrier (never failed; it
      arrived once per step), a group of several fails its first barrier (CPU blocks run one after another)
      and its last block to leave samples the cloud alone: the same order again.
    """
    from warpgeo import _launch, _warp
    from warpgeo._kernels import fps_cuda as kernels

    wp = _warp.warp()
    cpu = torch.device("cpu")
    points = torch.randint(0, 4, (3, 200, 3), generator=torch.Generator().manual_seed(6)).float()
    lengths = torch.tensor([200, 57, 3])
    starts = torch.tensor([0, 56, 2])
    k = 60
    expected, expected_dist = _reference_rows(points, [60, 57, 3], starts=starts, lengths=lengths)
    table = kernels.FPS_GRID["float32"]
    assert kernels.FPS_GRID.cuda_only  # a CPU warmup skips it
    previous = wp.config.enable_cpu_blocks
    wp.config.enable_cpu_blocks = block_dim > 1
    try:
        args, _ = _grid_args(points, k, groups, lengths=lengths, starts=starts)
        for step in range(k):
            _launch.launch(
                table.fps_steps, 3 * groups, device=cpu, tiled=True, block_dim=block_dim, step=step, **args
            )
        got = (args["out_index"].clone(), args["out_dist"].clone())
        args, sync = _grid_args(points, k, groups, lengths=lengths, starts=starts)
        _launch.launch(
            table.fps_persistent,
            3 * groups,
            device=cpu,
            tiled=True,
            block_dim=block_dim,
            sync=sync,
            timeout=1 << 40,
            **args,
        )
    finally:
        wp.config.enable_cpu_blocks = previous
    for indices, distances in (got, (args["out_index"], args["out_dist"])):
        assert torch.equal(indices, expected)
        torch.testing.assert_close(distances.double(), expected_dist, equal_nan=True, rtol=1e-6, atol=0)
    failed = sync[:, kernels.SYNC_FAILED].tolist()
    assert sync[:, kernels.SYNC_LEFT].tolist() == [groups] * 3
    if groups == 1:
        assert failed == [0, 0, 0] and sync[:, kernels.SYNC_ARRIVED].tolist() == [59, 56, 2]
    else:
        assert failed == [1, 1, 1]


def test_grid_designs_on_cuda(monkeypatch):
    """On a GPU (``conftest.CUDA_ONLY``): every CUDA design against the CPU path, bit for bit, on large ragged
    clouds (B=1 and B=8: a group of blocks a cloud); the persistent kernel's barrier met at every step (no
    fallback), and its fallback (a barrier that times out at once) exact too; the per-step launches inside
    a CUDA graph, replayed on new points."""
    from warpgeo import fps
    from warpgeo._kernels import fps_cuda as kernels

    cuda = torch.device("cuda")
    g = torch.Generator().manual_seed(7)
    for batch, n, k in ((1, 100_000, 600), (8, 30_000, 300)):
        points = torch.rand(batch, n, 3, generator=g)
        lengths = torch.randint(n // 2, n + 1, (batch,), generator=g)
        lengths[0] = n
        expected = farthest_point_sampling(points, k, lengths=lengths, return_distances=True)
        for design in ("persistent", "steps", "block", None):
            monkeypatch.setattr(fps, "_FORCED_DESIGN", design)
            idx, dist = farthest_point_sampling(
                points.to(cuda), k, lengths=lengths.to(cuda), return_distances=True
            )
            assert torch.equal(idx.cpu(), expected[0]), (batch, design)
            assert torch.equal(dist.cpu(), expected[1]), (batch, design)
        monkeypatch.setattr(fps, "_FORCED_DESIGN", None)
        design, groups = fps._cuda_design(cuda, batch, n)
        assert design == "persistent" and groups >= 2
        for timeout, failed in ((None, 0), (0, 1)):
            args, _ = _grid_args(points.to(cuda), k, groups, lengths=lengths.to(cuda))
            del args["partials"], args["mindist"]  # the launcher makes its own workspace
            sync = fps._launch_persistent(args, "float32", batch, n, k, groups, cuda, timeout=timeout)
            assert sync[:, kernels.SYNC_FAILED].eq(failed).all().item(), (batch, timeout, sync.tolist())
            assert torch.equal(args["out_index"].cpu(), expected[0])
            assert torch.equal(args["out_dist"].cpu(), expected[1])
    # per-step launches captured in a CUDA graph
    monkeypatch.setattr(fps, "_FORCED_DESIGN", "steps")
    points = torch.rand(2, 20_000, 3, generator=g)
    static = points.to(cuda)
    with warpgeo.value_checks(False):
        farthest_point_sampling(static, 200)  # compiled and warmed up outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = farthest_point_sampling(static, 200)
    fresh = torch.rand(2, 20_000, 3, generator=g)
    static.copy_(fresh.to(cuda))
    graph.replay()
    assert torch.equal(out.cpu(), farthest_point_sampling(fresh, 200))


def test_strip_design_on_cuda(monkeypatch):
    """On a GPU (``conftest.CUDA_ONLY``): many small clouds (issue 49's B=32 N=8192 K=512, ragged, per-cloud
    K, one cloud of duplicates) take the strip design (a cloud's distances in one block's registers: the launch must
    fit an SM's registers), bit for bit the CPU path's; the block design the same."""
    from warpgeo import fps

    cuda = torch.device("cuda")
    g = torch.Generator().manual_seed(9)
    points = torch.rand(32, 8192, 3, generator=g)
    points[3, 4096:] = points[3, :4096]
    lengths = torch.randint(4000, 8193, (32,), generator=g)
    lengths[0] = 8192
    ks = torch.randint(0, 513, (32,), generator=g)
    ks[0] = 512
    assert fps._cuda_design(cuda, 32, 8192)[0] == "strip"
    for dtype in (torch.float32, torch.float64):
        cloud = points.to(dtype)
        expected = farthest_point_sampling(cloud, ks, lengths=lengths, return_distances=True)
        for design in (None, "strip", "strip_held", "block"):
            monkeypatch.setattr(fps, "_FORCED_DESIGN", design)
            idx, dist = farthest_point_sampling(
                cloud.to(cuda), ks.to(cuda), lengths=lengths.to(cuda), return_distances=True
            )
            assert torch.equal(idx.cpu(), expected[0]), (dtype, design)
            assert torch.equal(dist.cpu().nan_to_num(-1.0), expected[1].nan_to_num(-1.0)), (dtype, design)


def test_function_backward_returns_none(device):
    class Ctx:  # backward needs nothing from ctx: it must not touch it
        pass

    assert FarthestPointSampling.backward(Ctx(), None, None) == (None, None, None, None, None)


def test_function_marks_outputs_non_differentiable():
    points = _cloud(2, 50).requires_grad_()
    indices, distances = FarthestPointSampling.apply(points, None, None, None, 5)
    assert not indices.requires_grad and not distances.requires_grad
    assert torch.equal(indices, farthest_point_sampling(points, 5))


@pytest.mark.parametrize("grad", [False, True])
def test_shape_checks_run_once_per_call(monkeypatch, grad):
    """The op's check runs exactly once per call, from every entry point: the public function (every form
    of num_samples / start_index, with and without a gradient), the public Function, the registered op.
    Counted where the op's check ends, the device check."""
    from warpgeo import checks

    calls = []
    real = checks.check_device

    def counted(reference, **tensors):
        calls.append(reference)
        return real(reference, **tensors)

    points = _cloud(2, 60).requires_grad_(grad)
    lengths = torch.tensor([60, 30])
    monkeypatch.setattr(checks, "check_device", counted)
    for run in (
        lambda: farthest_point_sampling(points, 8),
        lambda: farthest_point_sampling(points[0], 8),
        lambda: farthest_point_sampling(points, [3, 8], lengths=lengths, start_index=2),
        lambda: farthest_point_sampling(points, torch.tensor([3, 8]), lengths=lengths, random_start=True),
        lambda: FarthestPointSampling.apply(points, lengths, None, torch.tensor([1, 2]), 8),
        lambda: torch.ops.warpgeo.farthest_point_sampling(points, None, None, None, 8),
    ):
        calls.clear()
        run()
        assert calls == ["points"], calls


# ---------------------------------------------------------------------------------------------------------
# torch.compile and the custom op
# ---------------------------------------------------------------------------------------------------------


def test_torch_compile_fullgraph_matches_eager(device):
    torch._dynamo.reset()

    def sample_and_gather(points, features):
        idx = warpgeo.farthest_point_sampling(points, 32)
        return torch.gather(features, 2, idx[:, None, :].expand(-1, features.shape[1], -1))

    points = _cloud(2, 300, device=device)
    features = torch.randn(2, 4, 300, device=device, requires_grad=True)
    compiled = torch.compile(sample_and_gather, fullgraph=True, backend="aot_eager")
    out = compiled(points, features)
    upstream = torch.randn_like(out)
    (grad_compiled,) = torch.autograd.grad(out, features, upstream)
    eager = sample_and_gather(points, features)
    (grad_eager,) = torch.autograd.grad(eager, features, upstream)
    assert torch.equal(out, eager) and torch.equal(grad_compiled, grad_eager)


def test_opcheck(device):
    # no padding here: NaN padding distances would compare unequal to themselves inside opcheck
    points = _cloud(2, 100, device=device)
    full = torch.full((2,), 100, device=device)
    args = (
        points,
        full,
        torch.tensor([10, 10], device=device),
        torch.zeros(2, dtype=torch.int64, device=device),
        10,
    )
    torch.library.opcheck(torch.ops.warpgeo.farthest_point_sampling.default, args)


# ---------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"points": torch.rand(4, 2, 5, 3)}, ValueError, "points"),
        ({"points": torch.rand(10)}, ValueError, "points"),
        ({"points": torch.rand(2, 10, 2)}, ValueError, "points"),
        ({"points": torch.randint(0, 5, (2, 10, 3))}, TypeError, "points"),
        ({"points": torch.rand(2, 10, 3, dtype=torch.complex64)}, TypeError, "points"),
        ({"points": torch.rand(2, 0, 3)}, ValueError, "points"),
        ({"num_samples": 0}, ValueError, "num_samples"),
        ({"num_samples": -3}, ValueError, "num_samples"),
        ({"num_samples": 2.5}, TypeError, "num_samples"),
        ({"num_samples": torch.tensor([3, 4, 5])}, ValueError, "num_samples"),
        ({"num_samples": torch.tensor([3, -1])}, ValueError, "num_samples"),
        ({"num_samples": torch.tensor([3.0, 4.0])}, TypeError, "num_samples"),
        ({"lengths": torch.tensor([11, 5])}, ValueError, "lengths"),
        ({"lengths": torch.tensor([-1, 5])}, ValueError, "lengths"),
        ({"lengths": torch.tensor([5])}, ValueError, "lengths"),
        ({"lengths": torch.tensor([5.0, 5.0])}, TypeError, "lengths"),
        ({"start_index": 10}, IndexError, "start_index"),
        ({"start_index": -1}, IndexError, "start_index"),
        ({"start_index": torch.tensor([0, 6]), "lengths": torch.tensor([10, 6])}, IndexError, "start_index"),
        ({"start_index": 1, "random_start": True}, ValueError, "start_index"),
        ({"start_index": 10**30}, IndexError, "^start_index"),  # beyond int64: no OverflowError
        ({"num_samples": [10**30, 1]}, ValueError, "^num_samples may be at most"),
        ({"num_samples": [2**62, 1]}, ValueError, "^num_samples may be at most"),
        ({"lengths": torch.tensor([10, 10], device="meta")}, ValueError, "device"),
        ({"num_samples": torch.tensor([3, 3], device="meta")}, ValueError, "device"),
    ],
)
def test_bad_input_raises(kwargs, error, match):
    args = {"points": torch.rand(2, 10, 3), "num_samples": 4}
    args.update(kwargs)
    points, k = args.pop("points"), args.pop("num_samples")
    with pytest.raises(error, match=match):
        farthest_point_sampling(points, k, **args)


# Inputs that crashed the process before (or would, were a check lost) run in a child process: the test
# asserts a clean exit and the documented error, so a crash fails one test instead of the whole run.
_HOSTILE = {
    "num_samples beyond a row (issue 9)": (
        "farthest_point_sampling(torch.rand(2, 5, 3, dtype=torch.float64), 2**28)",
        "ValueError: num_samples may be at most 268435455",
    ),
    "num_samples beyond memory": (
        "farthest_point_sampling(torch.rand(2**20, 5, 3), 2**27)",
        "ValueError: num_samples=134217728 asks for",
    ),
    "a cloud beyond a row": (
        "farthest_point_sampling(torch.zeros(1, 1, 3, dtype=torch.float64).expand(1, 2**27, 3), 2)",
        "ValueError: points may hold at most 89478485 points per cloud",
    ),
    "max_samples below the per-cloud K (issue 9)": (
        "n = torch.full((4,), 1000)\n"
        "with warpgeo.value_checks(False):\n"
        "    idx, _ = FarthestPointSampling.apply(torch.rand(4, 1000, 3), n, n, torch.zeros(4, dtype=torch.long), 1)\n"
        "assert idx.shape == (4, 1) and idx.eq(0).all(), idx\n"
        "FarthestPointSampling.apply(torch.rand(4, 1000, 3), n, n, torch.zeros(4, dtype=torch.long), 1)",
        "ValueError: num_samples must lie in [0, 1]",
    ),
    "per-cloud inputs of shape (1,) for B = 64 (issue 9)": (
        "one = torch.tensor([5])\n"
        "for args in [(one, None, None), (None, one, None), (None, None, one)]:\n"
        "    try:\n"
        "        torch.ops.warpgeo.farthest_point_sampling(torch.rand(64, 100, 3), *args, 3)\n"
        "    except ValueError as e:\n"
        "        assert 'must have shape (64,)' in str(e), e\n"
        "    else:\n"
        "        raise AssertionError(args)\n"
        "FarthestPointSampling.apply(torch.rand(64, 100, 3), one, None, None, 3)",
        "ValueError: lengths must have shape (64,); got (1,)",
    ),
    "values out of range with value checks off, both CPU kernels": (
        "import warpgeo.fps\n"
        "B = 6\n"
        "lengths = torch.tensor([-5, 10**9, 0, 700, 3, 2**40])\n"
        "ks = torch.tensor([-1, 10**9, 5, 2**40, -2**40, 7])\n"
        "starts = torch.tensor([-3, 10**12, 0, 699, 5, -1])\n"
        "points = torch.rand(B, 700, 3, dtype=torch.float64)\n"
        "points[0, 0, 0] = float('nan'); points[3, 1, 1] = float('inf')\n"
        "for work in (0, 1 << 62):\n"
        "    warpgeo.fps._MIN_TREE_WORK = work\n"
        "    with warpgeo.value_checks(False):\n"
        "        idx, dist = torch.ops.warpgeo.farthest_point_sampling(points, lengths, ks, starts, 9)\n"
        "    assert idx.shape == (B, 9) and ((idx >= -1) & (idx < 700)).all(), idx",
        "returned",
    ),
}


@pytest.fixture(scope="module")
def hostile_run():
    """Every ``_HOSTILE`` case, in order, in one child process (one interpreter start, not six): each prints
    a line ``<case>: <outcome>``; a crash ends the child and fails the case it was in and every later one."""
    code = ["import torch, warpgeo", "from warpgeo import FarthestPointSampling, farthest_point_sampling"]
    for case, (body, _) in _HOSTILE.items():
        code += [
            "try:",
            textwrap.indent(body, "    "),
            "    outcome = 'returned'",
            "except (ValueError, TypeError, IndexError) as e:",
            "    outcome = f'{type(e).__name__}: {e}'",
            f"print({case!r} + ': ' + outcome.replace(chr(10), ' '), flush=True)",
        ]
    run = subprocess.run([sys.executable, "-c", "\n".join(code)], capture_output=True, text=True, timeout=600)
    lines = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    return run, lines


@pytest.mark.parametrize("case", list(_HOSTILE))
def test_hostile_input_exits_cleanly(hostile_run, case):
    run, lines = hostile_run
    _, expected = _HOSTILE[case]
    assert case in lines, (
        f"the child died before or in this case (exit {run.returncode}): {run.stderr[-2000:]}"
    )
    assert lines[case].startswith(expected), lines[case]
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_points_raise(device, bad):
    points = _cloud(2, 10, device=device)
    points[1, 3, 2] = bad
    with pytest.raises(ValueError, match="finite"):
        farthest_point_sampling(points, 4)


def test_reference_agrees_with_brute_force():
    # guard the guard: the reference against an exhaustive check on a tiny cloud
    rng = np.random.default_rng(1)
    points = rng.random((9, 3))
    idx, _ = fps_reference(points, 9)
    for step in range(1, 9):
        d = np.array([min(np.linalg.norm(points[i] - points[j]) for j in idx[:step]) for i in range(9)])
        d[idx[:step]] = -1
        assert idx[step] == int(np.argmax(d))
