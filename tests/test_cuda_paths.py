"""CUDA's algorithms, run on CPU tensors: every choice an op makes by device, taken here the CUDA way
(``warpgeo._warp.PATHS.cuda_on_cpu``: block and element kernels, torch sorts, one launch of one row per
thread) and compared with the CPU path, bit for bit where the contract says so.

What cannot run without a GPU (streams, ``cuda:N``, graph capture, sync-debug mode, pinned-memory
transfers) is in ``tests/test_cuda_graphs.py``, ``tests/test_sync_free.py`` and the ``needs_cuda`` tests of
each file, skipped here with the reason.
"""

from __future__ import annotations

import pytest
import torch
import trimesh

import warpgeo
from warpgeo import _launch, _warp


def _both(fn):
    """``fn()`` on the CPU's algorithms, then on CUDA's (the tile kernels with real lanes: Warp's CPU blocks)."""
    wp = _warp.warp()
    expected = fn()
    previous = wp.config.enable_cpu_blocks
    _warp.PATHS.cuda_on_cpu = True
    wp.config.enable_cpu_blocks = True
    try:
        got = fn()
    finally:
        _warp.PATHS.cuda_on_cpu = False
        wp.config.enable_cpu_blocks = previous
    return expected, got


def _ties(b, n, *, dtype=torch.float32):
    """Points on a small integer lattice: many exact ties in every distance."""
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 4, (b, n, 3), generator=g).to(dtype)


def test_the_switch_reaches_the_kernels(monkeypatch):
    """With the switch on, CPU tensors run CUDA's kernels (the comparisons below compare two paths)."""
    launched = []
    real_run = _launch.run
    monkeypatch.setattr(_launch, "run", lambda *a: (launched.append(a[0].key), real_run(*a)))

    def run():
        launched.clear()
        warpgeo.farthest_point_sampling(torch.rand(2, 50, 3), 5)
        f = torch.rand(1, 3, 10, requires_grad=True)
        warpgeo.gather_points(f, torch.zeros(1, 4, dtype=torch.long), deterministic=True).sum().backward()
        return list(launched)

    cpu_kernels, cuda_kernels = _both(run)
    assert any("fps_serial" in k for k in cpu_kernels) and not any(
        "fps_strip" in k or "fps_block" in k for k in cpu_kernels
    )
    assert any("fps_strip" in k for k in cuda_kernels)  # a small cloud: held in one block's registers
    assert any("gather_elements" in k for k in cuda_kernels) and any("segments" in k for k in cuda_kernels)
    assert not any("elements" in k or "segments" in k for k in cpu_kernels)


def test_the_switch_reaches_the_choices():
    cpu = torch.device("cpu")
    assert not _warp.cuda_algorithms(cpu)
    _warp.PATHS.cuda_on_cpu = True
    try:
        assert _warp.cuda_algorithms(cpu)
        from warpgeo import _grid, gather

        assert gather._scatter_method(cpu, True) == "segments"
        assert _grid.method(torch.zeros(1, 1000, 3), None) in ("sort", "brute")
    finally:
        _warp.PATHS.cuda_on_cpu = False


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fps_block_kernel_equals_the_cpu_kernels_on_ragged_ties(dtype):
    points = _ties(3, 300, dtype=dtype)
    lengths = torch.tensor([300, 123, 7])

    def run():
        return warpgeo.farthest_point_sampling(
            points, [40, 300, 9], lengths=lengths, start_index=torch.tensor([0, 5, 6]), return_distances=True
        )

    (idx_cpu, d_cpu), (idx_cuda, d_cuda) = _both(run)
    assert torch.equal(idx_cpu, idx_cuda)
    assert torch.equal(torch.nan_to_num(d_cpu, nan=-1.0), torch.nan_to_num(d_cuda, nan=-1.0))


@pytest.mark.parametrize("design", ["strip", "strip_held", "block", "steps", "persistent"])
@pytest.mark.parametrize("sms", [3, 9])  # 3 clouds: one block per cloud, or a group of three
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_fps_designs_equal_the_cpu_kernels_on_ragged_ties(design, sms, dtype, monkeypatch):
    """Every CUDA design, forced, against the CPU kernels bit for bit and the float64 reference: ragged
    lengths, per-cloud K (more than a cloud has, and 0), start indices, exact ties everywhere.

    The grid designs share each cloud among ``sms // 3`` blocks (16 points a block at least). ``steps`` runs
    the very step functions of the persistent kernel, a launch per step; the persistent kernel itself
    (CPU blocks run one after another, so a group of several never meets at its barrier) runs its loop
    where a group is one block, and its fallback (the group's last block samples the cloud alone) where
    it is three."""
    from reference import fps_reference

    from warpgeo import fps

    monkeypatch.setattr(fps, "_FORCED_DESIGN", design)
    monkeypatch.setattr(fps, "_CPU_MULTIPROCESSORS", sms)
    monkeypatch.setattr(fps, "_GRID_POINTS_PER_BLOCK", 16)
    points = _ties(3, 300, dtype=dtype)
    lengths = torch.tensor([300, 123, 7])
    ks = [40, 300, 0]
    starts = torch.tensor([0, 5, 6])

    def run():
        return warpgeo.farthest_point_sampling(
            points, ks, lengths=lengths, start_index=starts, return_distances=True
        )

    (idx_cpu, d_cpu), (idx_cuda, d_cuda) = _both(run)
    assert torch.equal(idx_cpu, idx_cuda)
    assert d_cuda.dtype == dtype
    assert torch.equal(torch.nan_to_num(d_cpu, nan=-1.0), torch.nan_to_num(d_cuda, nan=-1.0))
    for b in range(2):
        expected, _ = fps_reference(points[b, : lengths[b]].double().numpy(), ks[b], int(starts[b]))
        assert idx_cuda[b, : ks[b]].tolist() == expected
    assert (idx_cuda[0, 40:] == -1).all() and (idx_cuda[2] == -1).all() and d_cuda[2].isnan().all()


@pytest.mark.parametrize("design", ["strip", "strip_held", "block", "steps", "persistent"])
def test_fps_designs_survive_hostile_values(design, monkeypatch):
    """Value checks off: NaN and inf among the points, lengths and starts out of range never make a grid
    kernel read or write out of bounds (clamped as ``-1`` / defaults are); every index is in ``[-1, N)``."""
    from warpgeo import fps

    monkeypatch.setattr(fps, "_FORCED_DESIGN", design)
    monkeypatch.setattr(fps, "_CPU_MULTIPROCESSORS", 9)
    monkeypatch.setattr(fps, "_GRID_POINTS_PER_BLOCK", 16)
    points = torch.rand(3, 300, 3, generator=torch.Generator().manual_seed(8))
    points[0, ::7] = float("nan")
    points[1, 3] = float("inf")
    points[2] = float("nan")
    lengths = torch.tensor([-5, 10**9, 300])
    starts = torch.tensor([10**9, -3, 299])

    def run():
        with warpgeo.value_checks(False):
            return warpgeo.farthest_point_sampling(points, 50, lengths=lengths, start_index=starts)

    _, got = _both(run)
    assert got.shape == (3, 50) and ((got >= -1) & (got < 300)).all()
    assert (got[0] == -1).all()  # a negative length: an empty cloud


@pytest.mark.parametrize("design", ["strip", "strip_held", "block", "steps"])
def test_fps_designs_at_any_float64_scale(design, monkeypatch):
    """A larger random cloud at a subnormal scale and at 1e300: the grid's per-step launches (eight blocks
    a cloud) give the CPU tree kernel's order and distances, bit for bit."""
    from warpgeo import fps

    monkeypatch.setattr(fps, "_FORCED_DESIGN", design)
    monkeypatch.setattr(fps, "_MIN_TREE_WORK", 0)  # the CPU side: the tree kernel
    g = torch.Generator().manual_seed(4)
    unit = torch.rand(2, 3000, 3, generator=g, dtype=torch.float64)
    for scale in (2.0**-1040, 1e300):
        points = unit * scale

        def run(points=points):
            return warpgeo.farthest_point_sampling(points, 64, return_distances=True)

        (idx_cpu, d_cpu), (idx_cuda, d_cuda) = _both(run)
        assert torch.equal(idx_cpu, idx_cuda) and torch.equal(d_cpu, d_cuda)


def _strip_case(dtype, seed):
    """Clouds for the strip design: random ones, one with duplicated points (exact ties of distance, and
    duplicates of chosen points), one asked for more samples than its length."""
    g = torch.Generator().manual_seed(seed)
    points = torch.rand(4, 700, 3, generator=g, dtype=torch.float64).to(dtype)
    points[1, 350:] = points[1, :350]  # every point twice
    points[2] = torch.randint(0, 3, (700, 3), generator=g).to(dtype)  # 27 distinct points, many ties
    lengths = torch.tensor([700, 640, 700, 20])
    return points, lengths, [64, 100, 40, 30]  # cloud 3: 30 samples of 20 points (-1 padding)


@pytest.mark.parametrize("design", [None, "strip_held"])  # None: chosen by size (strip)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("start", ["default", "index", "random"])
def test_fps_strip_design_equals_the_cpu_kernel_bit_for_bit(design, dtype, start, monkeypatch):
    """The strip design (a cloud's distances in one block's registers), chosen by size, against the CPU kernel:
    indices and distances bit for bit, on random clouds, duplicates, a lattice of ties, ragged lengths,
    per-cloud K past a cloud's length, start indices and random starts; and against the float64 brute-force
    reference."""
    from reference import fps_reference

    from warpgeo import fps

    monkeypatch.setattr(fps, "_FORCED_DESIGN", design)
    points, lengths, ks = _strip_case(dtype, seed=11)
    kwargs = {}
    if start == "index":
        kwargs["start_index"] = torch.tensor([0, 639, 17, 19])
    launched = []
    real_run = _launch.run
    monkeypatch.setattr(_launch, "run", lambda *a: (launched.append(a[0].key), real_run(*a)))

    def run():
        if start == "random":
            kwargs["generator"] = torch.Generator().manual_seed(5)
            kwargs["random_start"] = True
        return warpgeo.farthest_point_sampling(points, ks, lengths=lengths, return_distances=True, **kwargs)

    (idx_cpu, d_cpu), (idx_cuda, d_cuda) = _both(run)
    assert any(k.endswith(f"fps_{design or 'strip'}") for k in launched), launched
    assert torch.equal(idx_cpu, idx_cuda)
    assert d_cuda.dtype == dtype
    assert torch.equal(d_cpu.nan_to_num(-1.0), d_cuda.nan_to_num(-1.0))
    first = idx_cuda[:, 0]
    for b in range(4):
        n, k = int(lengths[b]), min(ks[b], int(lengths[b]))
        expected, expected_dist = fps_reference(points[b, :n].double().numpy(), k, int(first[b]))
        assert idx_cuda[b, :k].tolist() == expected
        assert (idx_cuda[b, k:] == -1).all() and d_cuda[b, k:].isnan().all()
        assert torch.allclose(
            d_cuda[b, :k].double(), torch.as_tensor(expected_dist, dtype=torch.float64), rtol=1e-6
        )
    assert sorted(idx_cuda[3, :20].tolist()) == list(range(20))  # every valid point once, then -1


def test_fps_strip_design_at_its_capacity_and_past_it(monkeypatch):
    """A cloud of exactly ``_STRIP_MAX_POINTS`` points (every lane's every register slot in use) takes the
    strip design, bit for bit the CPU kernel's; one point more takes the block design."""
    from warpgeo import fps

    cap, cpu = fps._STRIP_MAX_POINTS, torch.device("cpu")
    assert fps._cuda_design(cpu, 2, 100)[0] == "block"  # one lane a block (no CPU blocks): 16 points in all
    monkeypatch.setattr(_warp.warp().config, "enable_cpu_blocks", True)
    assert fps._cuda_design(cpu, 2, 100)[0] == "strip"
    assert fps._cuda_design(cpu, 2, cap)[0] == "strip"
    assert fps._cuda_design(cpu, 2, cap + 1)[0] == "block"
    monkeypatch.setattr(fps, "_FORCED_DESIGN", "strip")  # forced past its capacity: the block design
    assert fps._cuda_design(cpu, 2, cap + 1)[0] == "block"
    monkeypatch.setattr(fps, "_FORCED_DESIGN", None)
    monkeypatch.setattr(_warp.warp().config, "enable_cpu_blocks", False)
    g = torch.Generator().manual_seed(12)
    points = torch.rand(2, cap, 3, generator=g)
    points[1, cap // 2 :] = points[1, : cap - cap // 2]  # duplicates across the lanes' slots

    def run():
        return warpgeo.farthest_point_sampling(
            points, 24, lengths=torch.tensor([cap, cap - 3]), return_distances=True
        )

    (idx_cpu, d_cpu), (idx_cuda, d_cuda) = _both(run)
    assert torch.equal(idx_cpu, idx_cuda) and torch.equal(d_cpu, d_cuda)


@pytest.mark.parametrize("grouped", [False, True])
def test_gather_element_kernels_and_segment_backward_equal_the_rows(grouped):
    g = torch.Generator().manual_seed(1)
    features = torch.randn(2, 5, 40, generator=g, dtype=torch.float64)
    shape = (2, 30, 4) if grouped else (2, 30)
    idx = torch.randint(-1, 40, shape, generator=g)
    idx[:, :6] = 3  # repeated indices: the backward accumulates
    upstream = torch.randn(2, 5, *shape[1:], generator=g, dtype=torch.float64)

    def run(deterministic):
        f = features.clone().requires_grad_(True)
        out = warpgeo.gather_points(f, idx, deterministic=deterministic)
        out.backward(upstream)
        return out.detach(), f.grad

    (out_cpu, grad_cpu), (out_cuda, grad_cuda) = _both(lambda: run(True))
    assert torch.equal(out_cpu, out_cuda) and torch.equal(grad_cpu, grad_cuda)  # segments: bit-identical
    (_, grad_cpu), (_, grad_atomic) = _both(lambda: run(False))
    torch.testing.assert_close(grad_atomic, grad_cpu, rtol=1e-12, atol=1e-12)  # atomics: any order


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_gather_element_kernels_read_either_index_dtype_and_refuse_out_of_range(index_dtype):
    """The element kernels read int32 and int64 indices as they come (no int32 copy): with value checks off,
    an index outside ``[0, N)`` (2**32 + 5 included: never point 5) gathers 0 and receives no gradient, as
    on the rows path and as a -1."""
    g = torch.Generator().manual_seed(3)
    features = torch.randn(2, 3, 40, generator=g)
    idx = torch.randint(0, 40, (2, 12), generator=g)
    bad = [-1, 40, -7] + ([2**32 + 5, -(2**40)] if index_dtype == torch.int64 else [2**31 - 1, -(2**31)])
    idx[0, : len(bad)] = torch.tensor(bad)
    idx = idx.to(index_dtype)
    upstream = torch.randn(2, 3, 12, generator=g)

    def run():
        f = features.clone().requires_grad_(True)
        with warpgeo.value_checks(False):
            out = warpgeo.gather_points(f, idx)
            out.backward(upstream)
        return out.detach(), f.grad

    (out_cpu, grad_cpu), (out_cuda, grad_cuda) = _both(run)
    assert torch.equal(out_cpu, out_cuda)
    torch.testing.assert_close(grad_cuda, grad_cpu)
    # independent reference: plain torch with the bad entries as "no point"
    ok = (idx.long() >= 0) & (idx.long() < 40)
    safe = torch.where(ok, idx.long(), 0)
    want = torch.gather(features, 2, safe[:, None].expand(2, 3, 12)) * ok[:, None]
    assert torch.equal(out_cuda, want)
    assert (out_cuda[0, :, : len(bad)] == 0).all()
    want_grad = torch.zeros_like(features).scatter_add_(
        2, safe[:, None].expand(2, 3, 12), upstream * ok[:, None]
    )
    torch.testing.assert_close(grad_cuda, want_grad)


def test_weighted_gather_element_kernels_equal_the_rows():
    g = torch.Generator().manual_seed(2)
    features = torch.randn(2, 4, 25, generator=g, dtype=torch.float64)
    idx = torch.randint(-1, 25, (2, 12, 3), generator=g)
    weight = torch.rand(2, 12, 3, generator=g, dtype=torch.float64)

    def run():
        f = features.clone().requires_grad_(True)
        w = weight.clone().requires_grad_(True)
        out = warpgeo.gather_points(f, idx, weight=w, deterministic=True)
        out.sum().backward()
        return out.detach(), f.grad, w.grad

    expected, got = _both(run)
    for a, b in zip(expected, got, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)


# the scan of small clouds (to 256 points, on CUDA's path as on the CPU's), and the grid
@pytest.mark.parametrize("n", [100, 3000, 6000])
def test_knn_and_ball_query_sort_equal_counting_on_ragged_ties(n):
    points = _ties(2, n)
    queries = _ties(2, 50)
    point_lengths = torch.tensor([n, n // 3])
    query_lengths = torch.tensor([50, 17])

    def run():
        d, i = warpgeo.knn(queries, points, 6, query_lengths=query_lengths, point_lengths=point_lengths)
        ball = warpgeo.ball_query(
            queries, points, 1.0, 8, query_lengths=query_lengths, point_lengths=point_lengths
        )
        return d, i, ball

    expected, got = _both(run)
    for a, b in zip(expected, got, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("n", "norm"), [(90, 2), (5000, 2), (300, 1)])  # scan, both grids (block build), L1
def test_chamfer_one_pass_equals_the_cpu_path(dtype, n, norm):
    """Chamfer on CUDA's algorithms (the block-built grids of both clouds, the loss by a block reduction,
    the backward's atomics) against the CPU's: indices and distances bit for bit, loss and gradients to the
    last bits (summation order)."""
    g = torch.Generator().manual_seed(4)
    x = _ties(2, n, dtype=dtype) + torch.rand(2, n, 3, generator=g, dtype=dtype) * 0.01
    y = torch.rand(2, n // 2 + 3, 3, generator=g, dtype=dtype) * 4
    x_len, y_len = torch.tensor([n, n // 3]), torch.tensor([n // 2 + 3, 5])

    def run():
        leaf = x.clone().requires_grad_(True)
        other = y.clone().requires_grad_(True)
        r = warpgeo.chamfer_distance(leaf, other, x_lengths=x_len, y_lengths=y_len, norm=norm)
        (r.loss + r.dist_xy.sum() * 0.5).backward()
        return r.loss.detach(), r.dist_xy, r.dist_yx, r.idx_xy, r.idx_yx, leaf.grad, other.grad

    expected, got = _both(run)
    for a, b in zip(expected[1:5], got[1:5], strict=True):
        assert torch.equal(a.detach(), b.detach())
    for a, b in (expected[0], got[0]), *zip(expected[5:], got[5:], strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sdf_one_row_per_thread_equals_the_cpu_rows(dtype):
    box = trimesh.creation.box((0.5, 0.4, 0.3))
    sphere = trimesh.creation.icosphere(2, 0.2)
    world = warpgeo.MeshWorld([box, sphere], poses=[[0, 0, 0, 1, 0, 0, 0], [0.5, 0.1, 0, 1, 0, 0, 0]])
    g = torch.Generator().manual_seed(3)
    spheres = torch.cat((torch.rand(2, 5, 70, 3, generator=g) - 0.3, torch.full((2, 5, 70, 1), 0.05)), -1)
    spheres = spheres.to(dtype)

    def run():
        s = spheres.clone().requires_grad_(True)
        cost = warpgeo.sphere_mesh_cost(s, world, activation_distance=0.02)
        swept = warpgeo.swept_sphere_mesh_cost(s, world, sweep_steps=3)
        (cost.sum() + swept.sum()).backward()
        dist = warpgeo.signed_distance(spheres[..., :3], world)
        return cost.detach(), swept.detach(), s.grad, dist

    expected, got = _both(run)
    for a, b in zip(expected, got, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_planner_queries_one_row_per_thread_equal_the_cpu_rows(dtype):
    sphere = trimesh.creation.icosphere(2, 0.2)
    world = warpgeo.MeshWorld(
        [warpgeo.Cuboid((0.5, 0.4, 0.3)), sphere], poses=[[0, 0, 0, 1, 0, 0, 0], [0.5, 0.1, 0, 1, 0, 0, 0]]
    )
    g = torch.Generator().manual_seed(4)
    spheres = torch.cat((torch.rand(2, 70, 3, generator=g) - 0.3, torch.full((2, 70, 1), 0.05)), -1).to(dtype)

    def run():
        p = spheres[..., :3].clone().requires_grad_(True)
        closest = warpgeo.closest_point(p, world)
        (closest.distance.sum() + closest.point.sum()).backward()
        return warpgeo.sphere_collision(spheres, world), *closest, p.grad

    expected, got = _both(run)
    for a, b in zip(expected, got, strict=True):
        assert torch.equal(a.detach(), b.detach())


def test_cuda_only_tests_are_listed_in_one_place():
    """Every test that needs the device itself is in ``conftest.CUDA_ONLY`` / ``TWO_GPUS`` (no file skips
    for CUDA on its own), and every entry there names a test file or test that exists."""
    import re
    from pathlib import Path

    import conftest

    here = Path(__file__).parent
    for path in sorted(here.glob("test_*.py")):
        text = path.read_text()
        own = re.findall(r"skipif\([^)]*(?:cuda|device_count)", text)
        assert not own, f"{path.name} skips for CUDA by itself ({own}): list it in conftest.CUDA_ONLY"
    for entry in [*conftest.CUDA_ONLY, *conftest.TWO_GPUS]:
        name, _, test = entry.partition("::")
        assert (here / name).exists(), entry
        if test:
            assert re.search(rf"^def {test}\(", (here / name).read_text(), re.M), entry


@pytest.mark.parametrize(
    "case", ["1,500,8,float32", "4,9000,100,float64", "8,20000,512,float32"], ids=["small", "f64", "b8"]
)
def test_tile_kernels_without_cpu_blocks_run_one_lane_a_block(case):
    """CUDA's tile kernels on CPU tensors without Warp's CPU blocks (the default): the launcher gives each
    block one lane, and the answers equal the CPU path's. With a block's lanes in one thread the FPS block
    kernel segfaulted (the small case) and FPS / kNN gave wrong indices (the others). In a fresh process: a
    crash is an exit status, not a lost test run."""
    import subprocess
    import sys

    code = (
        "import torch, warpgeo\n"
        "from warpgeo import _warp\n"
        "torch.manual_seed(0)\n"
        f"b, n, k, dtype = {case.split(',')!r}\n"
        "p = torch.rand(int(b), int(n), 3, dtype=getattr(torch, dtype))\n"
        "calls = [lambda: warpgeo.farthest_point_sampling(p, int(k)), lambda: warpgeo.knn(p[:, :64], p, 5).idx,\n"
        "         lambda: warpgeo.chamfer_distance(p, p[:, :300]).idx_xy]\n"
        "_warp.PATHS.cuda_on_cpu = True\n"
        "cuda = [f() for f in calls]\n"
        "_warp.PATHS.cuda_on_cpu = False\n"
        "assert not _warp.warp().config.enable_cpu_blocks\n"
        "assert [torch.equal(a, f()) for a, f in zip(cuda, calls)] == [True] * 3\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-3000:])
