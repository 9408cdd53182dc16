"""gather_points / GatherPoints: values, gradients, padding, determinism, autograd contract, compile."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from reference import gather_backward_reference, gather_reference

import warpgeo
from warpgeo import _launch
from warpgeo import gather as gather_module
from warpgeo.gather import GatherPoints, gather_points

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
# (B, C, N, M) including the degenerate sizes
SHAPES = [(2, 5, 17, 9), (1, 1, 8, 3), (3, 4, 1, 6), (2, 3, 10, 1), (1, 2, 300, 1000)]


def _inputs(b, c, n, m, k=None, *, dtype=torch.float32, idx_dtype=torch.int64, device="cpu", pad=0.0):
    features = torch.randn(b, c, n, dtype=torch.float64).to(device=device, dtype=dtype)
    shape = (b, m) if k is None else (b, m, k)
    idx = torch.randint(0, n, shape)
    if pad:
        idx[torch.rand(shape) < pad] = -1
    return features, idx.to(device=device, dtype=idx_dtype)


def _key(dtype):
    """The kernel tables' key of a features dtype (its forward's bits and backward's accumulator)."""
    return {torch.float16: "half", torch.bfloat16: "half", torch.float32: "single", torch.float64: "double"}[
        dtype
    ]


def _torch_gather(features, idx):
    """The same op with torch.gather on the same layout (-1 read as index 0, then zeroed)."""
    b, c = features.shape[:2]
    flat = idx.reshape(b, 1, -1).to(torch.int64)
    out = torch.gather(features, 2, flat.clamp_min(0).expand(b, c, -1))
    out = out * (flat >= 0).to(features.dtype)
    return out.reshape(b, c, *idx.shape[1:])


# --------------------------------------------------------------------------------------------------------
# values and gradients
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_forward_matches_torch_gather(device, shape, dtype, idx_dtype):
    features, idx = _inputs(*shape, dtype=dtype, idx_dtype=idx_dtype, device=device)
    out = gather_points(features, idx)
    assert out.dtype == dtype and out.device == features.device
    assert out.shape == (shape[0], shape[1], shape[3])
    # a gather copies values: bit-exact in every dtype
    assert torch.equal(out, _torch_gather(features, idx))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_backward_matches_torch_gather(device, shape, dtype):
    features, idx = _inputs(*shape, dtype=dtype, device=device)
    grad = torch.randn(shape[0], shape[1], shape[3], device=device, dtype=dtype)
    mine = features.clone().requires_grad_()
    gather_points(mine, idx).backward(grad)
    theirs = features.double().requires_grad_()
    _torch_gather(theirs, idx).backward(grad.double())
    assert mine.grad.dtype == dtype
    tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6)
    torch.testing.assert_close(mine.grad.double(), theirs.grad, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    ("b", "c", "n", "m", "k"), [(2, 3, 11, 5, 4), (1, 1, 1, 1, 1), (2, 2, 7, 1, 9), (3, 1, 5, 6, 1)]
)
@pytest.mark.parametrize("deterministic", [False, True])
def test_grouped_matches_loop_reference(device, b, c, n, m, k, deterministic):
    features, idx = _inputs(b, c, n, m, k, dtype=torch.float64, device=device, pad=0.2)
    features.requires_grad_()
    out = gather_points(features, idx, deterministic=deterministic)
    assert out.shape == (b, c, m, k)
    np.testing.assert_array_equal(
        out.detach().cpu().numpy(), gather_reference(features.detach().cpu(), idx.cpu())
    )
    grad = torch.randn(out.shape, dtype=torch.float64, device=device)
    out.backward(grad)
    expected = gather_backward_reference(grad.cpu(), idx.cpu(), n)
    np.testing.assert_allclose(features.grad.cpu().numpy(), expected, rtol=1e-12, atol=1e-12)


def test_duplicates_accumulate_and_padding_contributes_nothing(device):
    features = torch.arange(6.0, device=device).reshape(1, 2, 3).requires_grad_()
    idx = torch.tensor([[2, -1, 2, 0, 2, -1]], device=device)
    out = gather_points(features, idx)
    expected = torch.tensor([[[2.0, 0, 2, 0, 2, 0], [5.0, 0, 5, 3, 5, 0]]], device=device)
    assert torch.equal(out, expected)
    grad = torch.tensor([[[1.0, 100, 2, 4, 8, 100], [16.0, 100, 32, 64, 128, 100]]], device=device)
    out.backward(grad)
    assert torch.equal(features.grad, torch.tensor([[[4.0, 0, 11], [64.0, 0, 176]]], device=device))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_heavy_duplicates_accumulate_in_float32(device, dtype):
    # 20000 contributions to one of 3 points: a half-precision running sum would stall far below the total
    features = torch.zeros(2, 2, 3, device=device, dtype=dtype, requires_grad=True)
    idx = torch.randint(0, 3, (2, 20000), device=device)
    grad = torch.rand(2, 2, 20000, device=device).to(dtype)
    gather_points(features, idx).backward(grad)
    expected = torch.zeros(2, 2, 3, dtype=torch.float64, device=device)
    expected.scatter_add_(2, idx[:, None].expand(2, 2, -1), grad.double())
    torch.testing.assert_close(
        features.grad.double(), expected, rtol=4e-3 if dtype != torch.float32 else 1e-5, atol=0
    )


def test_all_padding_and_empty_shapes(device):
    features = torch.randn(2, 3, 4, device=device, requires_grad=True)
    out = gather_points(features, torch.full((2, 5), -1, device=device))
    assert torch.equal(out, torch.zeros(2, 3, 5, device=device))
    out.backward(torch.ones_like(out))
    assert torch.equal(features.grad, torch.zeros_like(features))
    empty = torch.empty(2, 3, 0, device=device)  # N = 0: only -1 is a valid index
    assert torch.equal(
        gather_points(empty, torch.full((2, 4), -1, device=device)), torch.zeros(2, 3, 4, device=device)
    )
    assert gather_points(features, torch.empty(2, 0, dtype=torch.int64, device=device)).shape == (2, 3, 0)


def test_non_contiguous_features(device):
    base = torch.randn(2, 40, 6, device=device)
    features = base.transpose(1, 2)  # (2, 6, 40), not contiguous
    idx = torch.randint(-1, 40, (2, 25), device=device)
    assert torch.equal(gather_points(features, idx), _torch_gather(features, idx))


@pytest.mark.parametrize("grouped", [False, True])
def test_gradcheck_and_gradgradcheck(device, grouped):
    features, idx = _inputs(2, 3, 6, 5, 3 if grouped else None, dtype=torch.float64, device=device, pad=0.2)
    features.requires_grad_()
    for deterministic in (False, True):

        def fn(f, deterministic=deterministic):
            return gather_points(f, idx, deterministic=deterministic)

        assert torch.autograd.gradcheck(fn, (features,))
        # the backward is itself differentiable (its adjoint is the gather), so double backward works
        assert torch.autograd.gradgradcheck(fn, (features,))


# --------------------------------------------------------------------------------------------------------
# determinism and the three backward kernels
# --------------------------------------------------------------------------------------------------------


def test_deterministic_bit_identical_over_runs(device):
    features, idx = _inputs(2, 8, 5, 3000, dtype=torch.float32, device=device, pad=0.1)  # ~600 hits a point
    grad = torch.randn(2, 8, 3000, device=device)
    grads = []
    for _ in range(5):
        f = features.clone().requires_grad_()
        gather_points(f, idx, deterministic=True).backward(grad)
        grads.append(f.grad)
    for g in grads[1:]:
        assert torch.equal(g.view(torch.int32), grads[0].view(torch.int32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_backward_kernel_matches_reference(dtype):
    # the CUDA kernels ("atomic", "segments") run on the CPU too: check them here, where every task can
    grad = torch.randn(2, 3, 500, dtype=dtype)
    idx = torch.randint(-1, 7, (2, 500))
    expected = torch.from_numpy(gather_backward_reference(grad, idx, 7)).to(dtype)
    flat = gather_module._flat_index(idx)
    results = {
        m: gather_module._scatter_add(grad, flat, 7, m, _key(dtype)) for m in ("rows", "atomic", "segments")
    }
    for result in results.values():
        torch.testing.assert_close(result, expected)
    # both ordered kernels sum each point's contributions in index order from 0: bit-identical
    assert torch.equal(results["rows"], results["segments"])


def test_every_forward_kernel_matches_torch_gather():
    for dtype in FLOATS:
        features, idx = _inputs(3, 4, 9, 13, dtype=dtype, pad=0.3)
        flat = gather_module._flat_index(idx)
        for method in ("rows", "elements"):
            out = torch.empty(3, 4, flat.shape[1], dtype=dtype)
            gather_module._gather(features, flat, out, method)
            assert torch.equal(out.view(3, 4, *idx.shape[1:]), _torch_gather(features, idx))


def _loop_gather(features, flat):
    """Naive loops: ``out[b, c, l] = features[b, c, flat[b, l]]``, 0 where the index is outside [0, N)."""
    b_, c_, n = features.shape
    out = torch.zeros(b_, c_, flat.shape[1], dtype=features.dtype)
    for b in range(b_):
        for l, i in enumerate(flat[b].tolist()):
            if 0 <= i < n:
                out[b, :, l] = features[b, :, i]
    return out


def _loop_scatter(grad, flat, n):
    """Naive loops in float64: ``out[b, c, i] = sum of grad[b, c, l] over flat[b, l] == i`` for i in [0, n)."""
    out = torch.zeros(grad.shape[0], grad.shape[1], n, dtype=torch.float64)
    for b in range(grad.shape[0]):
        for l, i in enumerate(flat[b].tolist()):
            if 0 <= i < n:
                out[b, :, i] += grad[b, :, l].double()
    return out


# indices no check lets through with value checks off: beyond int32 (2**32 + 3 must not read point 3)
HOSTILE = [2**32 + 3, -(2**32) + 3, 2**31, 2**31 - 1, -(2**31), -5, 2**63 - 1, -(2**63), 10, -1, 0, 9, 4]


@pytest.mark.parametrize("method", ["rows", "elements"])
def test_every_forward_kernel_reads_hostile_int64_indices_as_padding(method):
    features = torch.randn(2, 5, 10)
    flat = torch.tensor([HOSTILE, HOSTILE[::-1]])
    out = torch.full((2, 5, len(HOSTILE)), 7.0)
    gather_module._gather(features, flat, out, method)
    assert torch.equal(out, _loop_gather(features, flat))
    assert out.count_nonzero() == 2 * 5 * 3  # 0, 9 and 4 only


@pytest.mark.parametrize("method", ["rows", "atomic", "segments"])
def test_every_backward_kernel_skips_hostile_int64_indices(method):
    grad = torch.randn(2, 5, len(HOSTILE), dtype=torch.float64)
    flat = torch.tensor([HOSTILE, HOSTILE[::-1]])
    result = gather_module._scatter_add(grad, flat, 10, method, "double")
    torch.testing.assert_close(result, _loop_scatter(grad, flat, 10), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 5, 7, 8, 9])
@pytest.mark.parametrize(("n", "length"), [(1, 6), (50, 3), (50, 200), (3000, 40), (3000, 500)])
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_row_kernels_every_channel_block_and_cache_path(channels, n, length, idx_dtype):
    # blocks of 4 channels and the remainder; rows streamed into the cache first (many reads per point) or
    # not (few); int32 and int64 indices read as they are
    gen = torch.Generator().manual_seed(channels * 1000 + n + length)
    features = torch.randn(3, channels, n, generator=gen)
    flat = torch.randint(-1, n + 1, (3, length), generator=gen).to(idx_dtype)  # -1 and n read as 0
    for dtype in FLOATS:
        f = features.to(dtype)
        out = torch.empty(3, channels, length, dtype=dtype)
        gather_module._gather(f, flat, out, "rows")
        assert torch.equal(out, _loop_gather(f, flat))
    grad = torch.randn(3, channels, length, dtype=torch.float64, generator=gen)
    result = gather_module._scatter_add(grad, flat, n, "rows", "double")
    torch.testing.assert_close(result, _loop_scatter(grad, flat, n), rtol=1e-12, atol=1e-12)


def _weighted_loops(features, idx, weight):
    """Naive loops in float64: ``out[b, c, m] = sum_k weight[b, m, k] * features[b, c, idx[b, m, k]]`` over the
    indices in [0, N), and the adjoint of that map for a ``grad`` (B, C, M): (d/d features, d/d weight)."""
    b_, c_, n = features.shape
    out = torch.zeros(b_, c_, idx.shape[1], dtype=torch.float64)
    for b in range(b_):
        for m in range(idx.shape[1]):
            for k in range(idx.shape[2]):
                i = int(idx[b, m, k])
                if 0 <= i < n:
                    out[b, :, m] += weight[b, m, k].double() * features[b, :, i].double()
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_every_weighted_kernel_matches_loops(dtype):
    # the CUDA kernels (elements, atomic, segments) run on the CPU too
    gen = torch.Generator().manual_seed(5)
    features = torch.randn(2, 3, 11, dtype=dtype, generator=gen)
    idx = torch.randint(-1, 12, (2, 7, 4), generator=gen).to(torch.int32)  # -1 and 11 contribute nothing
    weight = torch.rand(2, 7, 4, dtype=dtype, generator=gen)
    expected = _weighted_loops(features, idx, weight)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    for method in ("rows", "elements"):
        out = torch.full((2, 3, 7), 5.0, dtype=dtype)
        gather_module._weighted_gather(features, idx, weight, out, method)
        torch.testing.assert_close(out.double(), expected, **tol)
    grad = torch.randn(2, 3, 7, dtype=dtype, generator=gen)
    f = features.double().requires_grad_()
    _weighted_loops(f, idx, weight).backward(grad.double())
    results = {
        m: gather_module._weighted_scatter(grad, idx, weight, 11, m) for m in ("rows", "atomic", "segments")
    }
    for result in results.values():
        torch.testing.assert_close(result.double(), f.grad, **tol)
    assert torch.equal(results["rows"], results["segments"])  # both sum in (m, k) order


@pytest.mark.parametrize("max_rows", [4, 7, 30])
def test_every_kernel_split_into_blocks_equals_one_launch(monkeypatch, max_rows):
    """``_launch.launch_blocks`` cuts a launch of more than ``MAX_LAUNCH_ROWS`` rows (lowered here) into ranges
    of B, or one b at a time in chunks of the grid's last dimension; every gather kernel, row kernels and
    element grids alike, gives what one launch gives."""
    gen = torch.Generator().manual_seed(max_rows)
    features = torch.randn(3, 5, 9, dtype=torch.float64, generator=gen)
    flat = torch.randint(-1, 9, (3, 6), generator=gen)
    grad = torch.randn(3, 5, 6, dtype=torch.float64, generator=gen)
    idx3 = torch.randint(-1, 9, (3, 4, 2), generator=gen).to(torch.int32)
    weight = torch.rand(3, 4, 2, dtype=torch.float64, generator=gen)
    wgrad = torch.randn(3, 5, 4, dtype=torch.float64, generator=gen)

    def run_all():
        results = []
        for method in ("rows", "elements"):
            out = torch.empty(3, 5, 6, dtype=torch.float64)
            gather_module._gather(features, flat, out, method)
            out_w = torch.empty(3, 5, 4, dtype=torch.float64)
            gather_module._weighted_gather(features, idx3, weight, out_w, method)
            results += [out, out_w]
        for method in ("rows", "atomic", "segments"):
            results.append(gather_module._scatter_add(grad, flat, 9, method, "double"))
            results.append(gather_module._weighted_scatter(wgrad, idx3, weight, 9, method))
        f = features.clone().requires_grad_()
        w = weight.clone().requires_grad_()
        results += torch.autograd.grad(gather_points(f, idx3, weight=w).square().sum(), (f, w))
        return results

    expected = run_all()
    launches = []
    real_run = _launch.run
    monkeypatch.setattr(_launch, "run", lambda *args: (launches.append(args[1]), real_run(*args)))
    monkeypatch.setattr(_launch, "MAX_LAUNCH_ROWS", max_rows)
    for want, got in zip(expected, run_all(), strict=True):
        assert torch.equal(want, got)
    # a launch has at most max_rows rows, or one (b, :, l) column of an element grid: C = 5 is never split
    assert all(math.prod(dims) <= max(max_rows, 5) for dims in launches), launches
    assert len(launches) > 2 * 13  # 13 launches unsplit


def test_row_kernels_take_arrays_with_strided_last_dimension():
    features = torch.randn(2, 30, 5).transpose(1, 2)  # (2, 5, 30), element stride 5
    flat = torch.randint(-1, 30, (2, 40, 2))[..., 0]  # (2, 40), element stride 2
    out = torch.empty(2, 40, 5).transpose(1, 2)  # written through its strides
    gather_module._gather(features, flat, out, "rows")
    assert torch.equal(out, _loop_gather(features, flat))
    grad = torch.randn(2, 40, 5, dtype=torch.float64).transpose(1, 2)
    result = gather_module._scatter_add(grad, flat, 30, "rows", "double")
    torch.testing.assert_close(result, _loop_scatter(grad, flat, 30), rtol=1e-12, atol=1e-12)


def test_large_fresh_outputs_ask_for_huge_pages_inside_their_own_memory(monkeypatch):
    calls = []
    monkeypatch.setattr(gather_module, "_madvise_hugepage", lambda: lambda *args: calls.append(args))
    features = torch.randn(1, 64, 300)
    idx = torch.randint(-1, 300, (1, 2**17 + 3))  # a (1, 64, 131075) float32 output: just over 32 MiB
    out = gather_points(features, idx)
    assert torch.equal(out, _torch_gather(features, idx))
    assert len(calls) == 1
    start, length, advice = calls[0]
    assert advice == 14 and start % 2**21 == 0 and length % 2**21 == 0 and length > 0
    assert out.data_ptr() <= start and start + length <= out.data_ptr() + out.numel() * 4
    gather_points(features, idx[:, :1000])  # a small output: no advice
    assert len(calls) == 1


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("weighted", [False, True])
def test_forward_and_backward_run_kernels_of_one_warp_module(monkeypatch, dtype, weighted):
    """A first gather + backward compiles one Warp module (per index dtype and precision), not every kernel."""
    modules = set()
    real_run = _launch.run
    monkeypatch.setattr(_launch, "run", lambda *args: (modules.add(args[0].module.name), real_run(*args))[1])
    features = torch.randn(2, 6, 50, dtype=dtype, requires_grad=True)
    idx = torch.randint(-1, 50, (2, 30, 3))
    weight = torch.rand(2, 30, 3, requires_grad=True) if weighted else None
    gather_points(features, idx, weight=weight).sum().backward()
    precision = "double" if dtype == torch.float64 else "single" if weighted else _key(dtype)
    expected = f"weighted_rows_{precision}" if weighted else f"rows_int64_{precision}"
    assert modules == {f"warpgeo._kernels.gather.{expected}"}


def test_cpu_rows_are_split_among_threads_consistently(monkeypatch):
    features, idx = _inputs(3, 5, 50, 40, dtype=torch.float32, pad=0.1)
    grad = torch.randn(3, 5, 40)
    serial = []
    for threshold in (1 << 60, 1):  # one launch, then one launch per torch thread
        monkeypatch.setattr(_launch, "_MIN_SPLIT_WORK", threshold)
        f = features.clone().requires_grad_()
        out = gather_points(f, idx)
        out.backward(grad)
        serial.append((out, f.grad))
    assert torch.equal(serial[0][0], serial[1][0]) and torch.equal(serial[0][1], serial[1][1])


# --------------------------------------------------------------------------------------------------------
# autograd contract
# --------------------------------------------------------------------------------------------------------


@pytest.fixture
def backward_calls(monkeypatch):
    """Records each run of the scatter kernels: once per backward, through the op or the eager path."""
    calls = []
    original = gather_module._scatter_add

    def counting(*args):
        calls.append(args)
        return original(*args)

    monkeypatch.setattr(gather_module, "_scatter_add", counting)
    return calls


def test_no_backward_work_without_features_grad(backward_calls):
    features, idx = _inputs(2, 3, 8, 4)
    weight = torch.randn(2, 3, 4, requires_grad=True)
    loss = (gather_points(features, idx) * weight).sum()
    loss.backward()
    assert weight.grad is not None
    assert backward_calls == []


def test_backward_returns_none_when_not_needed(backward_calls):
    class Ctx:
        needs_input_grad = (False, False, False)
        saved_tensors = (torch.zeros(1, 1, dtype=torch.int64),)
        num_points = 1
        deterministic = False

    assert GatherPoints.backward(Ctx(), torch.ones(1, 1, 1)) == (None, None, None)
    Ctx.needs_input_grad = (True, False, False)
    assert GatherPoints.backward(Ctx(), None) == (None, None, None)  # set_materialize_grads(False)
    assert backward_calls == []
    grads = GatherPoints.backward(Ctx(), torch.ones(1, 1, 1))
    assert torch.equal(grads[0], torch.ones(1, 1, 1)) and grads[1:] == (None, None)
    assert len(backward_calls) == 1


def test_saves_only_idx_and_idx_gets_no_grad(backward_calls):
    features, idx = _inputs(2, 3, 8, 4)
    features.requires_grad_()
    out = GatherPoints.apply(features, idx, False)
    saved = out.grad_fn.saved_tensors
    assert len(saved) == 1 and torch.equal(saved[0], idx)
    (out.sum() * 0).backward()
    assert len(backward_calls) == 1 and torch.equal(features.grad, torch.zeros_like(features))


def test_end_to_end_fps_gather_reaches_feature_extractor():
    torch.manual_seed(1)
    points = torch.rand(2, 200, 3)
    extractor = torch.nn.Sequential(torch.nn.Conv1d(3, 16, 1), torch.nn.ReLU(), torch.nn.Conv1d(16, 8, 1))
    head = torch.nn.Linear(8, 1)
    idx = warpgeo.farthest_point_sampling(points, 32)  # (2, 32) int64, no -1 here
    assert idx.dtype == torch.int64 and not idx.requires_grad

    def loss_with(gather):
        features = extractor(points.transpose(1, 2))  # (2, 8, 200)
        sampled = gather(features, idx)  # (2, 8, 32)
        return head(sampled.transpose(1, 2)).square().mean()

    extractor.zero_grad()
    loss_with(gather_points).backward()
    mine = [p.grad.clone() for p in extractor.parameters()]
    assert all(g.abs().sum() > 0 for g in mine)
    extractor.zero_grad()
    loss_with(_torch_gather).backward()
    for g, expected in zip(mine, (p.grad for p in extractor.parameters()), strict=True):
        torch.testing.assert_close(g, expected)


# --------------------------------------------------------------------------------------------------------
# torch.compile and torch.library
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grouped", [False, True])
def test_compile_fullgraph_matches_eager(device, grouped):
    torch._dynamo.reset()
    features, idx = _inputs(2, 4, 12, 6, 3 if grouped else None, dtype=torch.float64, device=device, pad=0.2)
    idx = idx.to(torch.int32)
    weight = torch.randn(4, device=device, dtype=torch.float64)

    def fn(f, deterministic):
        g = gather_points(f * 2.0, idx, deterministic=deterministic)
        return (g.sin() * weight.reshape(1, 4, *([1] * (g.dim() - 2)))).sum()

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    for deterministic in (False, True):
        a = features.clone().requires_grad_()
        b = features.clone().requires_grad_()
        loss_c = compiled(a, deterministic)
        loss_c.backward()
        loss_e = fn(b, deterministic)
        loss_e.backward()
        torch.testing.assert_close(loss_c, loss_e)
        torch.testing.assert_close(a.grad, b.grad)


def test_compile_inductor_once():
    torch._dynamo.reset()
    features, idx = _inputs(2, 3, 10, 7, dtype=torch.float32, pad=0.2)

    def fn(f):
        return gather_points(f.relu(), idx).square().sum()

    a = features.clone().requires_grad_()
    b = features.clone().requires_grad_()
    torch.compile(fn, fullgraph=True)(a).backward()
    fn(b).backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_index_check_inside_compiled_graph_raises():
    torch._dynamo.reset()
    features = torch.randn(1, 2, 5)
    compiled = torch.compile(lambda f, i: gather_points(f, i), fullgraph=True, backend="aot_eager")
    assert compiled(features, torch.tensor([[4, -1]])).shape == (1, 2, 2)
    with pytest.raises(IndexError, match="found 5"):
        compiled(features, torch.tensor([[5, 0]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("grouped", [False, True])
def test_opcheck(dtype, grouped):
    features, idx = _inputs(2, 3, 7, 5, 2 if grouped else None, dtype=dtype, idx_dtype=torch.int32, pad=0.2)
    features.requires_grad_()
    grad_out = torch.randn(2, 3, *idx.shape[1:], dtype=dtype, requires_grad=True)
    for deterministic in (False, True):
        torch.library.opcheck(torch.ops.warpgeo.gather_points, (features, idx, deterministic))
        torch.library.opcheck(torch.ops.warpgeo.gather_points_backward, (grad_out, idx, 7, deterministic))


# --------------------------------------------------------------------------------------------------------
# input checks (public function)
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [5, 100, -2, -7])
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_out_of_range_index_raises_index_error(device, bad, idx_dtype):
    features = torch.randn(2, 3, 5, device=device)
    idx = torch.tensor([[0, 1, 4], [2, bad, -1]], dtype=idx_dtype, device=device)
    with pytest.raises(IndexError, match=rf"\[-1, N=5\).*found {bad}"):
        gather_points(features, idx)


def test_points_in_the_features_place_get_a_layout_hint():
    """gather_points(xyz (B, N, 3), idx): the index error says features are (B, C, N) and how to fix it."""
    xyz = torch.rand(2, 50, 3)
    idx = torch.randint(0, 50, (2, 8))
    idx[0, 0] = 40
    with pytest.raises(IndexError, match=r"N=3\).*features must be \(B, C, N\).*transpose\(1, 2\)"):
        gather_points(xyz, idx)
    with pytest.raises(IndexError, match=r"features must be \(B, C, N\)"):
        gather_points(xyz, idx[..., None].expand(-1, -1, 3).contiguous(), weight=torch.rand(2, 8, 3))
    with pytest.raises(IndexError) as info:  # an index beyond C too: no hint (nothing suggests a swap)
        gather_points(xyz, torch.full((2, 8), 60))
    assert "features must be" not in str(info.value)


def test_type_errors():
    features = torch.randn(2, 3, 5)
    idx = torch.zeros(2, 4, dtype=torch.int64)
    with pytest.raises(TypeError, match=r"idx must have dtype int32, int64; got torch\.float32"):
        gather_points(features, idx.float())
    with pytest.raises(TypeError, match=r"idx must be a torch\.Tensor; got list"):
        gather_points(features, [[0, 1]])
    with pytest.raises(TypeError, match=r"features must have dtype .*; got torch\.int64"):
        gather_points(features.long(), idx)
    with pytest.raises(TypeError, match=r"features must be a torch\.Tensor; got ndarray"):
        gather_points(features.numpy(), idx)
    with pytest.raises(TypeError, match="deterministic must be a bool; got int"):
        gather_points(features, idx, deterministic=1)
    with pytest.raises(TypeError):
        gather_points(features, idx, True)  # keyword-only


def test_value_errors():
    features = torch.randn(2, 3, 5)
    idx = torch.zeros(2, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"features must have shape \(B, C, N\); got \(2, 15\)"):
        gather_points(features.reshape(2, 15), idx)
    with pytest.raises(ValueError, match=r"idx must have shape \(B, M\) or \(B, M, K\); got \(8,\)"):
        gather_points(features, idx.reshape(8))
    with pytest.raises(ValueError, match=r"idx must have shape .*got \(2, 1, 2, 2\)"):
        gather_points(features, idx.reshape(2, 1, 2, 2))
    with pytest.raises(ValueError, match=r"batch size of features \(2\); got idx of shape \(1, 8\)"):
        gather_points(features, idx.reshape(1, 8))
    with pytest.raises(ValueError, match="idx must be on the same device as features"):
        gather_points(features, idx.to("meta"))


# --------------------------------------------------------------------------------------------------------
# weighted gather (three_interpolate for any K)
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("b", "c", "n", "m", "k"), [(2, 3, 11, 5, 3), (1, 1, 1, 1, 1), (2, 4, 30, 7, 9)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_weighted_matches_reference(device, b, c, n, m, k, dtype):
    from reference import three_interpolate_reference

    features, idx = _inputs(b, c, n, m, k, dtype=dtype, device=device, pad=0.2)
    weight = torch.rand(b, m, k, dtype=torch.float64, device=device)
    out = gather_points(features, idx, weight=weight)
    assert out.shape == (b, c, m) and out.dtype == dtype
    ref = three_interpolate_reference(features.double().cpu(), idx.cpu(), weight.to(dtype).double().cpu())
    tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6)
    np.testing.assert_allclose(out.double().cpu().numpy(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("deterministic", [False, True])
def test_weighted_gradcheck(device, deterministic):
    features, idx = _inputs(2, 3, 12, 5, 4, dtype=torch.float64, device=device, pad=0.2)
    features.requires_grad_()
    weight = torch.rand(2, 5, 4, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda f, w: gather_points(f, idx, weight=w, deterministic=deterministic), (features, weight)
    )


def test_weighted_backward_matches_unfused_torch(device):
    features, idx = _inputs(2, 6, 50, 20, 3, device=device)
    features.requires_grad_()
    weight = torch.rand(2, 20, 3, device=device, requires_grad=True)
    grad = torch.randn(2, 6, 20, device=device)
    gather_points(features, idx, weight=weight).backward(grad)
    f2, w2 = features.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    (_torch_gather(f2, idx) * w2[:, None]).sum(-1).backward(grad)
    torch.testing.assert_close(features.grad, f2.grad)
    torch.testing.assert_close(weight.grad, w2.grad)


def test_weighted_only_what_is_needed():
    features, idx = _inputs(1, 2, 10, 4, 3)
    weight = torch.rand(1, 4, 3, requires_grad=True)
    gather_points(features, idx, weight=weight).sum().backward()
    assert features.grad is None and weight.grad is not None
    features.requires_grad_()
    gather_points(features, idx, weight=weight.detach()).sum().backward()
    assert features.grad is not None


def test_weighted_opcheck():
    features, idx = _inputs(2, 3, 9, 4, 3, dtype=torch.float64, pad=0.2)
    weight = torch.rand(2, 4, 3, dtype=torch.float64)
    grad = torch.randn(2, 3, 4, dtype=torch.float64)
    for det in (False, True):
        torch.library.opcheck(
            torch.ops.warpgeo.gather_points_weighted,
            (features.requires_grad_(), idx, weight.requires_grad_(), det),
        )
        torch.library.opcheck(
            torch.ops.warpgeo.gather_points_weighted_backward,
            (grad, features.detach(), idx, weight.detach(), True, True, det),
        )


def test_weighted_errors():
    features, idx = _inputs(2, 3, 9, 4, 3)
    with pytest.raises(TypeError, match="weight must be a floating-point tensor"):
        gather_points(features, idx, weight=torch.ones(2, 4, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"weight must have the shape of idx \(2, 4, 3\)"):
        gather_points(features, idx, weight=torch.ones(2, 4, 2))
    with pytest.raises(ValueError, match=r"with weight, idx must have shape \(B, M, K\)"):
        gather_points(features, idx[..., 0], weight=torch.ones(2, 4))
    with pytest.raises(IndexError):
        gather_points(features, torch.full((2, 4, 3), 9), weight=torch.ones(2, 4, 3))
    with pytest.raises(ValueError, match="weight must have the shape"):
        torch.ops.warpgeo.gather_points_weighted(features, idx, torch.ones(2, 4, 2), False)


def test_weighted_hostile_indices_with_checks_off():
    features, _ = _inputs(1, 2, 10, 4, 3)
    idx = torch.tensor([[[2**31 - 1, -(2**31), 10], [-2, 3, 9], [0, 0, 0], [11, -1, 5]]])
    with warpgeo.value_checks(False):
        out = gather_points(features, idx, weight=torch.ones(1, 4, 3))
    torch.testing.assert_close(out[0, :, 1], features[0, :, 3] + features[0, :, 9])


def test_weighted_int64_indices_beyond_int32_contribute_nothing_with_checks_off():
    features = torch.randn(2, 3, 10, dtype=torch.float64, requires_grad=True)
    idx = torch.tensor([[[2**32 + 3, 4, 2**31]], [[-(2**32) + 3, 9, 2**63 - 1]]])  # (2, 1, 3)
    weight = torch.rand(2, 1, 3, dtype=torch.float64, requires_grad=True)
    with warpgeo.value_checks(False):
        out = gather_points(features, idx, weight=weight)
    expected = torch.stack([features[0, :, 4] * weight[0, 0, 1], features[1, :, 9] * weight[1, 0, 1]])
    torch.testing.assert_close(out[:, :, 0], expected)
    out.sum().backward()
    grad = torch.zeros(2, 3, 10, dtype=torch.float64)
    grad[0, :, 4], grad[1, :, 9] = weight[0, 0, 1].item(), weight[1, 0, 1].item()
    torch.testing.assert_close(features.grad, grad)
    assert torch.equal(weight.grad[:, 0, ::2], torch.zeros(2, 2, dtype=torch.float64))


def test_output_is_fresh_for_in_place_edits_with_grad():
    """QueryAndGroup's ``grouped_xyz -= centres`` on the output while the points require grad."""
    xyz = torch.rand(2, 30, 3, requires_grad=True)
    idx = torch.randint(0, 30, (2, 5, 4))
    grouped = gather_points(xyz.transpose(1, 2), idx)
    grouped -= xyz[:, :5].transpose(1, 2).unsqueeze(-1)
    grouped.sum().backward()
    expected = torch.zeros(2, 30).scatter_add_(1, idx.reshape(2, -1), torch.ones(2, 20))
    expected[:, :5] -= 4
    torch.testing.assert_close(xyz.grad, expected[..., None].expand(-1, -1, 3))
