"""knn / ball_query: against brute force, ties, ragged clouds, gradients, custom-op contract, errors, memory."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from reference import ball_query_reference, knn_reference

import warpgeo
from warpgeo import neighbors
from warpgeo.neighbors import KNN, ball_query, knn

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
# (B, M, N, k): tiny (brute scan), grid-sized, k > N, single points
SIZES = [(2, 17, 40, 5), (1, 64, 700, 16), (3, 50, 2000, 8), (2, 9, 3, 6), (1, 1, 1, 1), (2, 40, 600, 1)]
METHODS = ["brute", "counting", "sort"]


def _cloud(b, m, n, *, dtype=torch.float32, device="cpu", scale=1.0, offset=0.0):
    gen = torch.Generator().manual_seed(b * 1000 + m * 10 + n)
    points = (torch.rand(b, n, 3, generator=gen, dtype=torch.float64) * scale + offset).to(dtype)
    queries = (torch.rand(b, m, 3, generator=gen, dtype=torch.float64) * scale + offset).to(dtype)
    return queries.to(device), points.to(device)


def _check_knn(result, queries, points, k, q_len=None, p_len=None, *, rtol=1e-6):
    dists, idx = result
    assert idx.dtype == torch.int64 and dists.dtype == points.dtype
    assert idx.shape == dists.shape == (queries.shape[0], queries.shape[1], k)
    for b in range(queries.shape[0]):
        m = queries.shape[1] if q_len is None else int(q_len[b])
        n = points.shape[1] if p_len is None else int(p_len[b])
        ref_d, ref_i = knn_reference(queries[b, :m].double().cpu(), points[b, :n].double().cpu(), k)
        np.testing.assert_array_equal(idx[b, :m].cpu().numpy(), ref_i)
        np.testing.assert_allclose(dists[b, :m].double().cpu().numpy(), ref_d, rtol=rtol, atol=0)
        assert (idx[b, m:] == -1).all() and torch.isinf(dists[b, m:]).all()


# --------------------------------------------------------------------------------------------------------
# values
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_knn_matches_brute_force(device, size, dtype):
    b, m, n, k = size
    queries, points = _cloud(b, m, n, dtype=dtype, device=device)
    result = knn(queries, points, k)
    assert isinstance(result, KNN)
    rtol = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-6}.get(dtype, 1e-12)
    _check_knn(result, queries, points, k, rtol=rtol)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_ball_query_matches_brute_force(device, size, dtype):
    b, m, n, k = size
    radius = 0.3 if n < 100 else 0.08
    queries, points = _cloud(b, m, n, dtype=dtype, device=device)
    idx = ball_query(queries, points, radius, k)
    assert idx.dtype == torch.int64 and idx.shape == (b, m, k)
    for i in range(b):
        ref = ball_query_reference(queries[i].double().cpu(), points[i].double().cpu(), radius, k)
        np.testing.assert_array_equal(idx[i].cpu().numpy(), ref)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [1, 7, 40])
def test_every_kernel_path_agrees_with_brute_force(method, k):
    """brute scan, CPU counting-sort grid and the CUDA path's torch.sort grid, all on the CPU."""
    queries, points = _cloud(3, 80, 1500)
    dists, idx = neighbors._knn(queries, points, None, None, k, method)
    _check_knn((dists, idx), queries, points, k)
    for inclusive in (True, False):
        got = neighbors._ball_query(queries, points, None, None, 0.12, k, inclusive, method)
        for b in range(3):
            ref = ball_query_reference(queries[b], points[b], 0.12, k, inclusive=inclusive)
            np.testing.assert_array_equal(got[b].numpy(), ref)


@pytest.mark.parametrize("method", METHODS)
def test_each_search_is_one_warp_module_per_precision(monkeypatch, method):
    """A Warp module is what a first call compiles (cold start): every launch of one knn or ball_query call
    is of one module, its own (not the other search's, not the other precision's), and the file's own Warp
    module holds no kernel (nothing compiles every neighbour kernel at once)."""
    import warp as wp

    from warpgeo import _launch

    launched: list[str] = []
    real_run = _launch.run  # where every launch ends

    def watch(kernel, dims, device, block_dim, args):
        launched.append(kernel.module.name)
        return real_run(kernel, dims, device, block_dim, args)

    monkeypatch.setattr(_launch, "run", watch)
    seen = {}
    for dtype in (torch.float16, torch.float32, torch.float64):
        queries, points = _cloud(2, 30, 700, dtype=dtype)
        for search in ("knn", "ball"):
            launched.clear()
            if search == "knn":
                neighbors._knn(queries, points, None, None, 4, method)
            else:
                neighbors._ball_query(queries, points, None, None, 0.1, 4, True, method)
            assert len(launched) >= 1 and len(set(launched)) == 1, (search, dtype, launched)
            seen[search, dtype] = launched[0]
    for search in ("knn", "ball"):  # half runs in float32
        assert seen[search, torch.float16] == seen[search, torch.float32]
    assert len({seen[key] for key in seen if key[1] != torch.float16}) == 4, seen
    assert not wp.get_module("warpgeo._kernels.neighbors").kernels


@pytest.mark.parametrize("method", METHODS)
def test_ties_go_to_the_lowest_index(device, method):
    # an integer lattice with duplicates: many exactly equal distances
    grid = torch.stack(torch.meshgrid(*[torch.arange(4.0)] * 3, indexing="ij"), dim=-1).reshape(-1, 3)
    points = torch.cat([grid, grid.flip(0), grid[:10]])[None].to(device)  # every lattice point 2-3 times
    queries = torch.cat([grid[:20], grid[:20] + 0.5])[None].to(device)  # on points and at cell centres
    dists, idx = neighbors._knn(queries, points, None, None, 12, method if device.type == "cpu" else None)
    _check_knn((dists, idx), queries, points, 12)
    got = neighbors._ball_query(
        queries, points, None, None, 1.0, 9, True, method if device.type == "cpu" else None
    )
    np.testing.assert_array_equal(
        got[0].cpu().numpy(), ball_query_reference(queries[0].cpu(), points[0].cpu(), 1.0, 9)
    )


def test_ball_query_radius_is_inclusive(device):
    points = torch.tensor([[[0.0, 0, 0], [1, 0, 0], [0, 2, 0], [0, 0, 1], [0.5, 0, 0]]], device=device)
    queries = torch.zeros(1, 1, 3, device=device)
    assert ball_query(queries, points, 1.0, 8)[0, 0].tolist() == [0, 1, 3, 4, -1, -1, -1, -1]
    assert ball_query(queries, points, 1.0, 2)[0, 0].tolist() == [0, 1]
    # inclusive=False: pointnet2's strict d < radius (what warpgeo.compat's pointnet2 ball_query asks for)
    assert ball_query(queries, points, 1.0, 8, inclusive=False)[0, 0].tolist() == [
        0,
        4,
        -1,
        -1,
        -1,
        -1,
        -1,
        -1,
    ]


@pytest.mark.parametrize("method", [None, *METHODS])
def test_ball_query_exclusive_matches_brute_force(device, method):
    """``inclusive=False`` on a lattice (many points exactly at the radius), every kernel path."""
    grid = torch.stack(torch.meshgrid(*[torch.arange(5.0)] * 3, indexing="ij"), dim=-1).reshape(-1, 3)
    points = torch.cat([grid, grid.flip(0)])[None].to(device)
    queries = grid[::7][None].to(device)
    if method is None:
        got = ball_query(queries, points, 1.0, 10, inclusive=False)
    elif device.type != "cpu":
        pytest.skip("the methods are forced on the CPU")
    else:
        got = neighbors._ball_query(queries, points, None, None, 1.0, 10, False, method)
    want = ball_query_reference(queries[0].cpu(), points[0].cpu(), 1.0, 10, inclusive=False)
    np.testing.assert_array_equal(got[0].cpu().numpy(), want)
    assert not torch.equal(got, ball_query(queries, points, 1.0, 10))  # the radius is reached: they differ


@pytest.mark.parametrize("grad", [False, True])
def test_shape_checks_run_once_per_call(monkeypatch, grad):
    """Each op's check runs exactly once per call, from the public function (eager, with and without a
    gradient) and from the registered op: counted where every check of these ops ends, the device check."""
    from warpgeo import checks

    calls = []
    real = checks.check_device

    def counted(reference, **tensors):
        calls.append(reference)
        return real(reference, **tensors)

    queries, points = _cloud(2, 12, 300)
    queries.requires_grad_(grad)
    monkeypatch.setattr(checks, "check_device", counted)
    for run in (
        lambda: knn(queries, points, 3).dists.sum().backward() if grad else knn(queries, points, 3),
        lambda: torch.ops.warpgeo.knn(queries, points, None, None, 3),
        lambda: ball_query(queries, points, 0.2, 4, inclusive=False),
        lambda: torch.ops.warpgeo.ball_query(queries, points, None, None, 0.2, 4, True),
    ):
        calls.clear()
        run()
        assert calls == ["queries"], calls


@pytest.mark.parametrize("method", ["brute", "counting", "sort"])
def test_ragged_lengths(device, method):
    queries, points = _cloud(3, 30, 700, device=device)
    q_len = torch.tensor([30, 0, 11], device=device)
    p_len = torch.tensor([700, 5, 3], device=device)
    m = method if device.type == "cpu" else None
    result = neighbors._knn(queries, points, q_len, p_len, 4, m)
    _check_knn(result, queries, points, 4, q_len, p_len)
    # the public function agrees, and the points beyond the lengths never appear
    _, idx = knn(queries, points, 4, query_lengths=q_len, point_lengths=p_len)
    assert torch.equal(idx, result[1])
    assert (idx[2] < 3).all()
    got = ball_query(queries, points, 0.4, 6, query_lengths=q_len, point_lengths=p_len)
    for b in range(3):
        ref = ball_query_reference(queries[b, : q_len[b]].cpu(), points[b, : p_len[b]].cpu(), 0.4, 6)
        np.testing.assert_array_equal(got[b, : q_len[b]].cpu().numpy(), ref)
        assert (got[b, q_len[b] :] == -1).all()


def test_fewer_points_than_k_and_empty_clouds(device):
    queries, points = _cloud(2, 5, 3, device=device)
    dists, idx = knn(queries, points, 5)
    assert (idx[..., 3:] == -1).all() and torch.isinf(dists[..., 3:]).all()
    assert sorted(idx[0, 0, :3].tolist()) == [0, 1, 2]
    empty = points[:, :0]
    dists, idx = knn(queries, empty, 2)
    assert (idx == -1).all() and torch.isinf(dists).all()
    assert (ball_query(queries, empty, 0.5, 3) == -1).all()
    assert knn(queries[:, :0], points, 2).idx.shape == (2, 0, 2)


@pytest.mark.parametrize(
    "kind", ["far_from_origin", "flat", "line", "one_outlier", "all_equal", "tiny_scale", "huge_scale"]
)
def test_awkward_clouds(kind):
    """Geometry that stresses the grid: a brute-force reference decides."""
    gen = torch.Generator().manual_seed(1)
    p = torch.rand(1, 900, 3, generator=gen, dtype=torch.float64)
    q = torch.rand(1, 60, 3, generator=gen, dtype=torch.float64)
    radius = 0.1
    if kind == "far_from_origin":
        p, q = p + 1e6, q + 1e6
    elif kind == "flat":
        p[..., 2] = 0.25
    elif kind == "line":
        p[..., 1:] = 0.5
    elif kind == "one_outlier":
        p[0, 17] = torch.tensor([1e5, -3e4, 2e5])
    elif kind == "all_equal":
        p[:] = 0.3
    elif kind == "tiny_scale":
        p, q, radius = p * 1e-30, q * 1e-30, 1e-31
    elif kind == "huge_scale":
        p, q, radius = p * 1e30, q * 1e30, 1e29
    for method in METHODS:
        _check_knn(neighbors._knn(q, p, None, None, 10, method), q, p, 10)
        got = neighbors._ball_query(q, p, None, None, radius, 10, True, method)
        np.testing.assert_array_equal(got[0].numpy(), ball_query_reference(q[0], p[0], radius, 10))


# --------------------------------------------------------------------------------------------------------
# gradients and the custom-op contract
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [6, 300])  # brute scan and grid
def test_knn_gradcheck(device, n):
    queries, points = _cloud(2, 4, n, dtype=torch.float64, device=device)
    queries.requires_grad_()
    points.requires_grad_()
    lengths = torch.tensor([n, n - 2], device=device)

    def dists(q, p):
        d = knn(q, p, 5, point_lengths=lengths).dists
        return torch.where(torch.isinf(d), 0.0, d)

    # fast mode (random directions) keeps the grid case to seconds: 1800 point coordinates. On CUDA the
    # backward adds into a point's gradient with atomics (order varies: last-bit differences between runs)
    tol = 1e-12 if torch.device(device).type == "cuda" else 0.0
    assert torch.autograd.gradcheck(dists, (queries, points), fast_mode=n > 100, nondet_tol=tol)
    assert torch.autograd.gradgradcheck(dists, (queries, points), fast_mode=n > 100, nondet_tol=tol)


def test_knn_backward_matches_torch(device):
    queries, points = _cloud(2, 30, 500, device=device)
    queries.requires_grad_()
    points.requires_grad_()
    grad = torch.randn(2, 30, 6, device=device)
    dists, idx = knn(queries, points, 6)
    dists.backward(grad)
    q2, p2 = queries.detach().clone().requires_grad_(), points.detach().clone().requires_grad_()
    chosen = torch.gather(p2, 1, idx.reshape(2, -1, 1).expand(-1, -1, 3)).reshape(2, 30, 6, 3)
    (q2[:, :, None] - chosen).norm(dim=-1).backward(grad)
    torch.testing.assert_close(queries.grad, q2.grad)
    torch.testing.assert_close(points.grad, p2.grad)


def test_knn_zero_distance_gradient_is_zero_and_no_grad_needed():
    points = torch.rand(1, 20, 3, requires_grad=True)
    dists, _ = knn(points.detach()[:, :4], points, 1)
    dists.sum().backward()
    assert torch.equal(points.grad, torch.zeros_like(points))
    with torch.no_grad():
        assert not knn(points, points, 2).dists.requires_grad
    # an integer output never asks for a gradient; ball query is not differentiable
    assert not ball_query(points, points, 0.2, 3).requires_grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opcheck(dtype):
    queries, points = _cloud(2, 9, 300, dtype=dtype)
    lengths = torch.tensor([300, 120])
    for q_len, p_len in [(None, None), (torch.tensor([9, 4]), lengths)]:
        torch.library.opcheck(torch.ops.warpgeo.knn, (queries.requires_grad_(), points, q_len, p_len, 4))
        torch.library.opcheck(
            torch.ops.warpgeo.ball_query, (queries.detach(), points, q_len, p_len, 0.2, 5, True)
        )


def test_compile_fullgraph_matches_eager(device):
    queries, points = _cloud(2, 20, 300, device=device)
    lengths = torch.tensor([300, 200], device=device)

    def fn(q, p):
        d, i = knn(q, p, 4, point_lengths=lengths)
        ball = ball_query(q, p, 0.2, 6, point_lengths=lengths)
        grouped = warpgeo.gather_points(p.transpose(1, 2), ball)
        w = 1.0 / (d + 1e-8)
        up = warpgeo.gather_points(p.transpose(1, 2), i, weight=w / w.sum(-1, keepdim=True))
        return d.sum() + grouped.square().sum() + up.sum()

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    results = []
    for f in (fn, compiled):
        q, p = queries.clone().requires_grad_(), points.clone().requires_grad_()
        loss = f(q, p)
        loss.backward()
        results.append((loss.detach(), q.grad, p.grad))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b)


# --------------------------------------------------------------------------------------------------------
# errors and value checks
# --------------------------------------------------------------------------------------------------------


def _public_and_op_calls(queries, points, k=3, q_len=None, p_len=None, radius=0.2):
    return [
        lambda: knn(queries, points, k, query_lengths=q_len, point_lengths=p_len),
        lambda: ball_query(queries, points, radius, k, query_lengths=q_len, point_lengths=p_len),
        lambda: torch.ops.warpgeo.knn(queries, points, q_len, p_len, k),
        lambda: torch.ops.warpgeo.ball_query(queries, points, q_len, p_len, radius, k, True),
    ]


@pytest.mark.parametrize(
    ("case", "error", "match"),
    [
        ("queries_2d", ValueError, r"queries must have shape \(B, M, 3\)"),
        ("points_4", ValueError, r"points must have shape \(B, N, 3\)"),
        ("batch", ValueError, "batch size of queries"),
        ("dtype_mix", TypeError, "points must have the dtype of queries"),
        ("int_points", TypeError, "queries must have dtype"),
        ("k_zero", ValueError, "k must be >= 1"),
        ("k_float", TypeError, "k must be an int"),
        ("lengths_shape", ValueError, r"point_lengths must have shape \(2,\)"),
        ("lengths_float", TypeError, "query_lengths must have dtype"),
        ("lengths_range", ValueError, r"point_lengths must lie in \[0, N=30\]"),
        ("nan_point", ValueError, "points must be finite"),
        ("inf_query", ValueError, "queries must be finite"),
    ],
)
def test_errors_from_public_functions_and_ops(case, error, match):
    queries, points = _cloud(2, 5, 30)
    q_len = p_len = None
    k = 3
    if case == "queries_2d":
        queries = queries[0]
    elif case == "points_4":
        points = torch.rand(2, 30, 4)
    elif case == "batch":
        points = points[:1]
    elif case == "dtype_mix":
        points = points.double()
    elif case == "int_points":
        queries, points = queries.long(), points.long()
    elif case == "k_zero":
        k = 0
    elif case == "k_float":
        k = 2.0
    elif case == "lengths_shape":
        p_len = torch.tensor([1, 2, 3])
    elif case == "lengths_float":
        q_len = torch.tensor([1.0, 2.0])
    elif case == "lengths_range":
        p_len = torch.tensor([31, 2])
    elif case == "nan_point":
        points[1, 7, 2] = float("nan")
    elif case == "inf_query":
        queries[0, 2, 0] = float("inf")
    public, public_ball, op, op_ball = _public_and_op_calls(queries, points, k, q_len, p_len)
    for call in (public, public_ball):
        with pytest.raises(error, match=match):
            call()
    for call in (op, op_ball):
        if case == "k_float":  # the op's schema (SymInt k) refuses a float before the op runs
            with pytest.raises(RuntimeError, match="Expected a value of type 'int' for argument 'k'"):
                call()
            continue
        with pytest.raises(error, match=match):
            call()


@pytest.mark.parametrize("radius", [0.0, -1.0, float("inf"), float("nan"), "0.2", True])
def test_bad_radius(radius):
    queries, points = _cloud(1, 4, 20)
    error = TypeError if isinstance(radius, (str, bool)) else ValueError
    with pytest.raises(error, match="radius"):
        ball_query(queries, points, radius, 3)
    if isinstance(radius, bool):  # the op's schema (float radius) reads True as 1.0
        return
    if error is TypeError:  # the op's schema (float radius) refuses a string before the op runs
        error = (TypeError, RuntimeError)
    with pytest.raises(error, match=r"radius|float"):
        torch.ops.warpgeo.ball_query(queries, points, None, None, radius, 3, True)


@pytest.mark.parametrize("inclusive", [1, "yes", None])
def test_bad_inclusive(inclusive):
    queries, points = _cloud(1, 4, 20)
    with pytest.raises(TypeError, match="inclusive must be a bool"):
        ball_query(queries, points, 0.2, 3, inclusive=inclusive)


def test_invalid_points_beyond_lengths_are_not_checked():
    queries, points = _cloud(1, 4, 20)
    points[0, 10:] = float("nan")
    lengths = torch.tensor([10])
    _check_knn(knn(queries, points, 3, point_lengths=lengths), queries, points, 3, p_len=lengths)


@pytest.mark.parametrize("method", METHODS)
def test_hostile_values_with_checks_off_never_crash(method):
    queries, points = _cloud(2, 30, 500)
    points[0, :50] = float("nan")
    points[0, 50:60] = float("inf")
    points[1, :5] = -float("inf")
    points[1, 5:10] = 3e38
    queries[0, :3] = float("nan")
    queries[1, :3] = -float("inf")
    queries[1, 3:6] = 1e38
    bad_lengths = [
        (None, None),
        (torch.tensor([-5, 10**9]), torch.tensor([10**12, -3])),
        (torch.tensor([2**40, 30]), torch.tensor([0, 2**62])),
    ]
    with warpgeo.value_checks(False):
        for q_len, p_len in bad_lengths:
            _, idx = neighbors._knn(queries, points, q_len, p_len, 6, method)
            assert ((idx >= -1) & (idx < 500)).all()
            got = neighbors._ball_query(queries, points, q_len, p_len, 0.2, 6, True, method)
            assert ((got >= -1) & (got < 500)).all()
        # the public path too
        knn(queries, points, 4, query_lengths=bad_lengths[1][0], point_lengths=bad_lengths[1][1])
        ball_query(queries, points, 1e-30, 4)


# --------------------------------------------------------------------------------------------------------
# issue 27: far scales in float64, one unbatched cloud, huge ints, pointnet2's argument order
# --------------------------------------------------------------------------------------------------------


def _exact_knn(queries, points, k):
    """kNN of one float64 cloud by exact squared distances (fractions: no overflow, no underflow, exact
    ties to the lowest index); distances by ``math.hypot`` (no overflow). Lists of (M, k)."""
    import math
    from fractions import Fraction

    q, p = queries.tolist(), points.tolist()
    dists, idx = [], []
    for qm in q:
        d2 = [sum((Fraction(a) - Fraction(b)) ** 2 for a, b in zip(pn, qm, strict=True)) for pn in p]
        order = sorted(range(len(p)), key=lambda i: (d2[i], i))[:k]
        idx.append(order + [-1] * (k - len(order)))
        dists.append([math.hypot(*(a - b for a, b in zip(p[i], qm, strict=True))) for i in order])
        dists[-1] += [math.inf] * (k - len(order))
    return dists, idx


def _exact_ball_query(queries, points, radius, k):
    from fractions import Fraction

    r2 = Fraction(radius) ** 2
    out = []
    for qm in queries.tolist():
        hits = [
            n
            for n, pn in enumerate(points.tolist())
            if sum((Fraction(a) - Fraction(b)) ** 2 for a, b in zip(pn, qm, strict=True)) <= r2
        ][:k]
        out.append(hits + [-1] * (k - len(hits)))
    return out


@pytest.mark.parametrize("scale", [1e200, 1e-200, 1e300, 2.0**-1060])
@pytest.mark.parametrize("method", METHODS)
def test_float64_at_any_scale_matches_exact_brute_force(method, scale):
    """Squared distances of float64 coordinates near 1e200 overflow (near 1e-200 underflow): the op scales
    each cloud by a power of two first, so order, ball membership and distances are right at any scale."""
    queries, points = _cloud(2, 17, 300, dtype=torch.float64, offset=-0.5)
    queries, points = queries * scale, points * scale
    k, radius = 5, 0.15 * scale
    dists, idx = neighbors._knn(queries, points, None, None, k, method)
    got = neighbors._ball_query(queries, points, None, None, radius, k, True, method)
    for b in range(2):
        ref_d, ref_i = _exact_knn(queries[b], points[b], k)
        assert idx[b].tolist() == ref_i
        # atol: two steps of a subnormal result (2**-1074 each)
        np.testing.assert_allclose(dists[b].numpy(), np.array(ref_d), rtol=1e-15, atol=1e-323)
        assert got[b].tolist() == _exact_ball_query(queries[b], points[b], radius, k)
    # the public functions, and the gradient of a distance (finite: its norm does not overflow either)
    q = queries.clone().requires_grad_()
    public = knn(q, points, k)
    assert torch.equal(public.idx, idx) and torch.equal(public.dists, dists)
    public.dists[..., 1].sum().backward()
    assert torch.isfinite(q.grad).all()
    if scale > 1e-300:  # unit vectors (subnormal differences hold too few bits for 1e-12)
        assert (q.grad.norm(dim=-1) - 1).abs().max() < 1e-12
    assert torch.equal(ball_query(queries, points, radius, k), got)


def _mixed_cloud(b, n, small, large, seed):
    """float64 points of magnitude ``small`` (even rows) and ``large`` (odd rows): coordinates of |x| in
    [0.1, 1) times the row's magnitude, random signs."""
    gen = torch.Generator().manual_seed(seed)
    unit = (0.1 + 0.9 * torch.rand(b, n, 3, generator=gen, dtype=torch.float64)) * (
        torch.randint(0, 2, (b, n, 3), generator=gen) * 2 - 1
    )
    magnitude = torch.tensor([small if i % 2 == 0 else large for i in range(n)], dtype=torch.float64)
    return unit * magnitude[None, :, None]


@pytest.mark.parametrize("small, large", [(1e30, 1e300), (2.0**-400, 2.0**500), (1e-300, 1e-30)])
@pytest.mark.parametrize("method", METHODS)
def test_float64_mixed_extremes_within_the_span_are_exact(method, small, large):
    """One cloud holding points of very different magnitudes (within ``_scale.MAX_SPAN``): squared distances
    of the large ones overflow unscaled, of the small ones underflow; the order and the distances are the
    exact ones (issue 50, item 14), against fractions."""
    points = _mixed_cloud(1, 300, small, large, 1)
    queries = _mixed_cloud(1, 12, small, large, 2)
    dists, idx = neighbors._knn(queries, points, None, None, 4, method)
    ref_d, ref_i = _exact_knn(queries[0], points[0], 4)
    assert idx[0].tolist() == ref_i
    np.testing.assert_allclose(dists[0].numpy(), np.array(ref_d), rtol=1e-15, atol=0)
    assert torch.equal(knn(queries, points, 4).idx, idx)  # the checks accept it


def test_float64_mixed_extremes_beyond_the_span_are_refused():
    """Points at 1e-300 and 1e300 in one float64 cloud (issue 50, item 14): no scale keeps every squared
    distance exact, so with checks on every neighbour op refuses the cloud naming its span; with checks off
    none crashes."""
    points = _mixed_cloud(2, 300, 1e-300, 1e300, 3)
    points[0] = _mixed_cloud(1, 300, 1.0, 2.0, 4)[0]  # cloud 0 is ordinary: cloud 1 is named
    queries = points[:, :10]
    span = r"of cloud 1 span 2\*\*\d+ in float64.*beyond the 2\*\*967"
    with pytest.raises(ValueError, match="queries and points " + span):
        knn(queries, points, 3)
    with pytest.raises(ValueError, match="queries and points " + span):
        ball_query(queries, points, 1.0, 3)
    with pytest.raises(ValueError, match="x and y " + span):
        warpgeo.chamfer_distance(queries, points)
    with pytest.raises(ValueError, match="points " + span):
        warpgeo.farthest_point_sampling(points, 5)
    # beyond the lengths the magnitudes do not count
    lengths = torch.tensor([300, 0])
    knn(queries, points, 3, query_lengths=torch.tensor([10, 0]), point_lengths=lengths)
    warpgeo.farthest_point_sampling(points, 5, lengths=lengths)
    # a tiny radius widens the span of an ordinary cloud (its square would underflow)
    with pytest.raises(ValueError, match="queries and points of cloud 0 span"):
        ball_query(points[:1, :10], points[:1], 1e-300, 3)
    with warpgeo.value_checks(False):
        assert knn(queries, points, 3).idx.shape == (2, 10, 3)
        assert warpgeo.farthest_point_sampling(points, 5).shape == (2, 5)
    # float32 clouds cannot span too much: their squares always fit float64
    knn(queries.float().clamp(-3e38, 3e38), points.float().clamp(-3e38, 3e38), 3)


def test_float64_scale_is_exact():
    """The power-of-two scale is exact: a cloud scaled by 2**e gets the distances times 2**e, bit for bit,
    and the same indices (so a cloud at ordinary scale gets the bits it got before the scaling existed)."""
    queries, points = _cloud(2, 40, 600, dtype=torch.float64)
    dists, idx = knn(queries, points, 8)
    for e in (-900, -300, -1, 1, 7, 300, 900):
        f = 2.0**e
        scaled = knn(queries * f, points * f, 8)
        assert torch.equal(scaled.idx, idx) and torch.equal(scaled.dists, dists * f), e
        assert torch.equal(
            ball_query(queries * f, points * f, 0.1 * f, 8), ball_query(queries, points, 0.1, 8)
        )


def test_unbatched_clouds_as_fps_takes_them(device):
    queries, points = _cloud(1, 9, 50, device=device)
    dists, idx = knn(queries[0], points[0], 4)
    assert idx.shape == dists.shape == (9, 4)
    batched = knn(queries, points, 4)
    assert torch.equal(idx, batched.idx[0]) and torch.equal(dists, batched.dists[0])
    got = ball_query(queries[0], points[0], 0.3, 5)
    assert torch.equal(got, ball_query(queries, points, 0.3, 5)[0])


def test_pointnet2_argument_order_is_named():
    xyz = torch.rand(1, 50, 3)
    with pytest.raises(TypeError, match=r"pointnet2.*ball_query\(new_xyz, xyz, radius, nsample\)"):
        ball_query(0.2, 16, xyz, xyz[:, :8])


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda q, p: ball_query(q, p, 10**400, 3), ValueError, "radius"),
        (lambda q, p: ball_query(q, p, -(10**400), 3), ValueError, "radius"),
        (lambda q, p: knn(q[:, :0], p, 10**30), ValueError, "k"),
        (lambda q, p: knn(q, p, 10**30), ValueError, "k"),
        (lambda q, p: ball_query(q[:, :0], p, 0.2, 2**28), ValueError, "k"),
    ],
)
def test_huge_python_ints_are_refused_naming_the_argument(call, error, name):
    queries, points = _cloud(1, 4, 20)
    with pytest.raises(error, match=rf"^{name} "):
        call(queries, points)


_EXPORT_SAVE = textwrap.dedent(
    """
    import sys, torch, warpgeo

    class Group(torch.nn.Module):
        def forward(self, queries, points):
            dists, idx = warpgeo.knn(queries, points, 4)
            return dists, idx, warpgeo.ball_query(queries, points, 0.3, 4)

    args = (torch.rand(2, 16, 3), torch.rand(2, 50, 3))
    torch.export.save(torch.export.export(Group(), args), sys.argv[1])
    torch.save(args, sys.argv[2])
    """
)
_EXPORT_LOAD = textwrap.dedent(
    """
    import sys
    {imports}
    assert "warp" not in sys.modules and "warpgeo.neighbors" not in sys.modules
    warpgeo.load_ops()                           # registers torch.ops.warpgeo.*, compiles nothing
    assert "warpgeo.neighbors" in sys.modules
    program = torch.export.load(sys.argv[1])
    queries, points = torch.load(sys.argv[2])
    dists, idx, ball = program.module()(queries, points)
    ref = warpgeo.knn(queries, points, 4)
    assert torch.equal(idx, ref.idx) and torch.equal(dists, ref.dists)
    assert torch.equal(ball, warpgeo.ball_query(queries, points, 0.3, 4))
    print("ok")
    """
)


@pytest.mark.parametrize("imports", ["import torch, warpgeo", "import warpgeo, torch"])
def test_torch_export_round_trip_after_load_ops(tmp_path, imports):
    """A saved program calling warpgeo's ops loads in a fresh process after ``import warpgeo`` and
    ``warpgeo.load_ops()`` (torch imported before or after warpgeo)."""
    program, args = str(tmp_path / "program.pt2"), str(tmp_path / "args.pt")
    subprocess.run([sys.executable, "-c", _EXPORT_SAVE, program, args], check=True, timeout=300)
    code = _EXPORT_LOAD.format(imports=imports)
    out = subprocess.run(
        [sys.executable, "-c", code, program, args], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


def test_load_ops_registers_every_op_cheaply():
    """load_ops' cost bounded by its work, not by a clock: it registers the ops, imports only warpgeo's op
    and kernel modules (no heavy optional library), does not initialise Warp, and creates no Warp module of
    any kernel table (so nothing can be compiled or loaded)."""
    code = (
        "import sys, torch, warpgeo\n"
        "before = set(sys.modules)\n"
        "warpgeo.load_ops()\n"
        "new = sorted(set(sys.modules) - before)\n"
        "for name in ('farthest_point_sampling', 'gather_points', 'knn', 'ball_query', 'chamfer_distance',\n"
        "             'sphere_mesh_cost', 'swept_sphere_mesh_cost', 'signed_distance'):\n"
        "    assert hasattr(torch.ops.warpgeo, name), name\n"
        "assert warpgeo._warp._WARP is None, 'load_ops initialised Warp'\n"
        "from warpgeo._kernels._table import TABLES\n"
        "built = [t.name for t in TABLES if t._built]\n"
        "assert not built, f'load_ops created kernel modules: {built}'\n"
        "heavy = [m for m in new if m.split('.')[0] in ('trimesh', 'scipy', 'matplotlib', 'yaml', 'numba')]\n"
        "assert not heavy, f'load_ops imported {heavy}'\n"
        "print(len(TABLES))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout) > 0  # the kernel tables were defined (the op modules imported their kernels)


# --------------------------------------------------------------------------------------------------------
# memory: O(output), not O(B * M * N)
# --------------------------------------------------------------------------------------------------------

_MEMORY_SCRIPT = textwrap.dedent(
    """
    import resource, torch, warpgeo
    torch.manual_seed(0)
    b, m, n, k = 2, 2**14, 2**16, 16        # B * M * N = 2**31
    points = torch.rand(b, n, 3)
    queries = points[:, :m].clone()
    warpgeo.ball_query(queries[:, :8], points[:, :300], 0.05, k)   # kernels loaded, allocator warm
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    idx = warpgeo.ball_query(queries, points, 0.05, k)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert idx.shape == (b, m, k) and (idx[:, :, 0] >= 0).all()
    print((after - before) * 1024)
    """
)


def test_ball_query_memory_is_o_output():
    """B * M * N = 2**31: a distance matrix would take 8 GiB (a bool mask 2 GiB); the grid takes a few MiB.

    Run in a fresh process so that its peak resident size measures this call alone.
    """
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True, text=True, timeout=300, check=True
    )
    grown = int(out.stdout.strip().splitlines()[-1])
    assert grown < 64 * 2**20, f"peak memory grew by {grown / 2**20:.0f} MiB"


@pytest.mark.parametrize("dim", [3, 2, 5])  # warpgeo's own kernels (<= 3) and plain torch beyond
def test_pytorch3d_ball_query_with_an_infinite_radius(dim):
    """``warpgeo.compat.pytorch3d.ball_query(radius=inf)`` (issue 50, item 15): every point at a finite
    distance is within, so each valid query gets the first K valid points; warpgeo.ball_query's own radius
    stays a finite float > 0 (DESIGN §4)."""
    from warpgeo.compat import pytorch3d

    gen = torch.Generator().manual_seed(dim)
    p1 = torch.rand(2, 6, dim, generator=gen)
    p2 = torch.rand(2, 9, dim, generator=gen) * 1e3
    lengths1, lengths2 = torch.tensor([6, 4]), torch.tensor([9, 3])
    for k in (2, 5):
        got = pytorch3d.ball_query(p1, p2, lengths1, lengths2, K=k, radius=float("inf"))
        for b in range(2):
            for m in range(6):
                first = list(range(int(lengths2[b])))[:k] if m < lengths1[b] else []
                want = first + [-1] * (k - len(first))
                assert got.idx[b, m].tolist() == want, (b, m)
                for j, i in enumerate(want):
                    expected = float(((p1[b, m] - p2[b, i]) ** 2).sum()) if i >= 0 else 0.0
                    assert got.dists[b, m, j].item() == pytest.approx(expected, rel=1e-6)
                    if i >= 0:
                        assert torch.equal(got.knn[b, m, j], p2[b, i])
    # the same as a finite radius larger than every distance
    big = pytorch3d.ball_query(p1, p2, lengths1, lengths2, K=5, radius=1e6)
    assert torch.equal(big.idx, pytorch3d.ball_query(p1, p2, lengths1, lengths2, K=5, radius=math.inf).idx)
    with pytest.raises(ValueError, match="radius must be a finite float > 0"):
        ball_query(p1[..., :3] if dim >= 3 else torch.rand(2, 6, 3), torch.rand(2, 9, 3), math.inf, 4)
