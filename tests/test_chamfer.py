"""warpgeo.chamfer_distance against a brute-force ``torch.cdist`` reference: values, indices, reductions,
ragged clouds, L1 / L2, squared or not, gradients (gradcheck in float64), errors and the op's registration."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_sync_free import _assert_sync_free

import warpgeo
from warpgeo.chamfer import _chamfer_op


def nearest_reference(q, p, q_len=None, p_len=None, norm=2):
    """Brute force in float64: each valid query's nearest valid point (first of equal distances), -1 for
    padding and empty clouds; distances unsquared (L2) or L1."""
    b, m, n = q.shape[0], q.shape[1], p.shape[1]
    q_len = torch.full((b,), m) if q_len is None else q_len.cpu()
    p_len = torch.full((b,), n) if p_len is None else p_len.cpu()
    dist = torch.zeros(b, m, dtype=torch.float64)
    idx = torch.full((b, m), -1, dtype=torch.int64)
    for i in range(b):
        lm, ln = int(q_len[i]), int(p_len[i])
        if lm == 0 or ln == 0:
            continue
        d = torch.cdist(
            q[i, :lm].double().cpu(),
            p[i, :ln].double().cpu(),
            p=float(norm),
            compute_mode="donot_use_mm_for_euclid_dist",
        )
        best = d.min(dim=1)
        dist[i, :lm], idx[i, :lm] = best.values, best.indices
    return dist, idx


def loss_reference(d_xy, d_yx, x_len, y_len, reduction):
    def reduce(d, lengths):
        if reduction == "sum":
            return d.sum()
        counts = torch.full((d.shape[0],), d.shape[1]) if lengths is None else lengths.cpu()
        per_cloud = d.sum(1) / counts.clamp(min=1)
        return per_cloud if reduction is None else per_cloud.mean()

    out = reduce(d_xy, x_len)
    return out if d_yx is None else out + reduce(d_yx, y_len)


def reference(x, y, x_len=None, y_len=None, *, norm=2, squared=None, reduction="mean", single=False):
    if squared is None:  # the documented default: squared L2, plain L1
        squared = norm == 2
    d_xy, i_xy = nearest_reference(x, y, x_len, y_len, norm)
    d_yx, i_yx = (None, None) if single else nearest_reference(y, x, y_len, x_len, norm)
    if squared:
        d_xy = d_xy.square()
        d_yx = None if single else d_yx.square()
    return loss_reference(d_xy, d_yx, x_len, y_len, reduction), d_xy, d_yx, i_xy, i_yx


def clouds(b, n, m, device, dtype=torch.float32):
    return torch.rand(b, n, 3, device=device).to(dtype), torch.rand(b, m, 3, device=device).to(dtype)


# --------------------------------------------------------------------------------------------------------
# forward
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("squared", [True, False])
@pytest.mark.parametrize("reduction", ["mean", "sum", None])
def test_matches_brute_force(device, norm, squared, reduction):
    x, y = clouds(3, 70, 45, device, torch.float64)
    got = warpgeo.chamfer_distance(x, y, norm=norm, squared=squared, reduction=reduction)
    loss, d_xy, d_yx, i_xy, i_yx = reference(x, y, norm=norm, squared=squared, reduction=reduction)
    assert isinstance(got, warpgeo.ChamferResult)
    assert got.idx_xy.tolist() == i_xy.tolist() and got.idx_yx.tolist() == i_yx.tolist()
    assert got.idx_xy.dtype == torch.int64 and got.dist_xy.dtype == torch.float64
    torch.testing.assert_close(got.dist_xy.cpu(), d_xy)
    torch.testing.assert_close(got.dist_yx.cpu(), d_yx)
    torch.testing.assert_close(got.loss.cpu(), loss)
    assert got.loss.shape == (() if reduction is not None else (3,))


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("shape", [(2, 600, 900), (1, 3000, 257), (4, 1, 300)])
def test_grid_sizes_float32(device, norm, shape):
    """Clouds beyond the kNN's direct-scan size (its grid search) and float32 input."""
    b, n, m = shape
    x, y = clouds(b, n, m, device)
    x = x * torch.tensor([10.0, 1.0, 0.1], device=device)  # anisotropic: cells of unequal fill
    got = warpgeo.chamfer_distance(x, y, norm=norm)
    _, d_xy, d_yx, i_xy, i_yx = reference(x, y, norm=norm)
    assert (got.idx_xy.cpu() == i_xy).float().mean() > 0.999  # float32 ties may break either way
    assert (got.idx_yx.cpu() == i_yx).float().mean() > 0.999
    torch.testing.assert_close(got.dist_xy.cpu().double(), d_xy, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got.dist_yx.cpu().double(), d_yx, rtol=1e-5, atol=1e-6)


def test_l1_finds_the_l1_nearest_not_the_l2_nearest(device):
    # from the origin, a = (0.5, 0.5, 0) is L2-nearer (0.71 < 0.8) but L1-farther (1.0 > 0.8) than b
    x = torch.zeros(1, 1, 3, device=device)
    y = torch.tensor([[[0.5, 0.5, 0.0], [0.8, 0.0, 0.0]]], device=device)
    assert warpgeo.chamfer_distance(x, y, norm=2).idx_xy.tolist() == [[0]]
    got = warpgeo.chamfer_distance(x, y, norm=1, squared=False)
    assert got.idx_xy.tolist() == [[1]]
    torch.testing.assert_close(got.dist_xy, torch.tensor([[0.8]], device=device))


def test_squared_follows_the_norm_by_default(device):
    """L2 squared (pytorch3d / the chamfer extensions), L1 plain (pytorch3d's norm=1): no squared L1 unless
    asked for."""
    x = torch.zeros(1, 1, 3, device=device)
    y = torch.tensor([[[1.0, 2.0, 0.0]]], device=device)
    assert warpgeo.chamfer_distance(x, y).dist_xy.tolist() == [[5.0]]  # 1 + 4
    l1 = warpgeo.chamfer_distance(x, y, norm=1)
    assert l1.dist_xy.tolist() == [[3.0]] and l1.dist_yx.tolist() == [[3.0]]  # |1| + |2|
    assert float(l1.loss) == 6.0
    assert warpgeo.chamfer_distance(x, y, norm=1, squared=True).dist_xy.tolist() == [[9.0]]
    l2 = warpgeo.chamfer_distance(x, y, norm=2, squared=False).dist_xy
    torch.testing.assert_close(l2, torch.tensor([[5.0**0.5]], device=device))


def test_ties_go_to_the_lowest_index(device):
    x = torch.zeros(1, 1, 3, device=device)
    y = torch.tensor([[[1.0, 0, 0], [0, 1.0, 0], [-1.0, 0, 0], [1.0, 0, 0]]], device=device)
    for norm in (1, 2):
        assert warpgeo.chamfer_distance(x, y, norm=norm).idx_xy.tolist() == [[0]]


@pytest.mark.parametrize("norm", [1, 2])
def test_ragged_clouds(device, norm):
    x, y = clouds(4, 50, 40, device, torch.float64)
    x_len = torch.tensor([50, 13, 0, 1], device=device)
    y_len = torch.tensor([7, 40, 5, 0], device=device)
    for reduction in ("mean", "sum", None):
        got = warpgeo.chamfer_distance(x, y, x_lengths=x_len, y_lengths=y_len, norm=norm, reduction=reduction)
        loss, d_xy, d_yx, i_xy, i_yx = reference(x, y, x_len, y_len, norm=norm, reduction=reduction)
        assert got.idx_xy.tolist() == i_xy.tolist() and got.idx_yx.tolist() == i_yx.tolist()
        torch.testing.assert_close(got.dist_xy.cpu(), d_xy)
        torch.testing.assert_close(got.dist_yx.cpu(), d_yx)
        torch.testing.assert_close(got.loss.cpu(), loss)
    # padding: distance 0 and index -1; a valid point facing an empty cloud too
    assert (got.dist_xy[1, 13:] == 0).all() and (got.idx_xy[1, 13:] == -1).all()
    assert (got.idx_xy[3] == -1).all() and (got.dist_xy[3] == 0).all()


def test_single_directional(device):
    x, y = clouds(2, 30, 20, device, torch.float64)
    got = warpgeo.chamfer_distance(x, y, single_directional=True, reduction="sum")
    loss, _, _, i_xy, _ = reference(x, y, reduction="sum", single=True)
    assert got.dist_yx is None and got.idx_yx is None
    assert got.idx_xy.tolist() == i_xy.tolist()
    torch.testing.assert_close(got.loss.cpu(), loss)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_keep_their_dtype(device, dtype):
    x, y = clouds(2, 40, 30, device, dtype)
    got = warpgeo.chamfer_distance(x, y)
    assert got.loss.dtype == dtype and got.dist_xy.dtype == dtype and got.dist_yx.dtype == dtype
    loss, *_ = reference(x, y)
    torch.testing.assert_close(got.loss.double().cpu(), loss, rtol=1e-2, atol=1e-3)


def test_empty_clouds(device):
    x = torch.rand(2, 0, 3, device=device)
    y = torch.rand(2, 5, 3, device=device)
    got = warpgeo.chamfer_distance(x, y)
    assert got.dist_xy.shape == (2, 0) and got.idx_yx.tolist() == [[-1] * 5] * 2
    assert float(got.loss) == 0.0
    got = warpgeo.chamfer_distance(torch.rand(0, 4, 3, device=device), torch.rand(0, 2, 3, device=device))
    assert got.dist_xy.shape == (0, 4) and float(got.loss) == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_cloud_with_zero_strides(device, dtype):
    """An empty NumPy cloud becomes a tensor with strides (0, 0, 0) (issue 50, item 11): the same answer
    as a fresh empty tensor (knn takes it too), forward and backward."""
    x = torch.rand(2, 5, 3, dtype=dtype, device=device)
    y = torch.tensor(np.zeros((2, 0, 3)), dtype=dtype, device=device)
    assert y.stride() == (0, 0, 0) or device.type != "cpu"
    for first, second in ((x, y), (y, x), (y, y)):
        for norm in (1, 2):
            a = first.clone().requires_grad_()
            got = warpgeo.chamfer_distance(a, second, norm=norm)
            want = reference(first, second, norm=norm)
            assert float(got.loss.detach()) == float(want[0]) == 0.0
            assert got.idx_xy.cpu().tolist() == want[3].tolist()
            assert got.idx_yx.cpu().tolist() == want[4].tolist()
            got.loss.backward()
            assert a.grad.shape == first.shape and not a.grad.any()
    assert warpgeo.knn(x, y, 1).idx.shape == (2, 5, 1)


@pytest.mark.parametrize("reduction", ["mean", "sum", None])
@pytest.mark.parametrize("n", [7, 300])  # the scan and the grid
def test_one_unbatched_cloud_each(device, reduction, n):
    """(N, 3) and (M, 3), as knn / ball_query / fps take them: the batch of one, unbatched."""
    x, y = clouds(1, n, 40, device, torch.float64)
    got = warpgeo.chamfer_distance(x[0], y[0], reduction=reduction)
    want = reference(x, y, reduction=reduction)
    assert got.loss.shape == ()
    torch.testing.assert_close(got.loss.cpu(), want[0].reshape(()), rtol=1e-12, atol=0)
    assert got.dist_xy.shape == (n,) and got.idx_xy.shape == (n,)
    assert got.dist_yx.shape == (40,) and got.idx_yx.shape == (40,)
    torch.testing.assert_close(got.dist_xy.cpu(), want[1][0], rtol=1e-12, atol=0)
    assert torch.equal(got.idx_xy.cpu(), want[3][0]) and torch.equal(got.idx_yx.cpu(), want[4][0])
    single = warpgeo.chamfer_distance(x[0], y[0], single_directional=True)
    assert single.dist_yx is None and single.idx_xy.shape == (n,)
    a = x[0].clone().requires_grad_()
    warpgeo.chamfer_distance(a, y[0], reduction=reduction).loss.sum().backward()
    b = x.clone().requires_grad_()
    warpgeo.chamfer_distance(b, y, reduction=reduction).loss.sum().backward()
    assert torch.equal(a.grad, b.grad[0])
    with pytest.raises(ValueError, match=r"y must have shape \(B, M, 3\)"):
        warpgeo.chamfer_distance(x, y[0])


def test_far_from_the_origin_float64(device):
    """Distances from coordinate differences: exact far from the origin (no |a|^2 + |b|^2 - 2ab)."""
    x, y = clouds(1, 50, 60, device, torch.float64)
    shift = 1e7
    got = warpgeo.chamfer_distance(x + shift, y + shift)
    ref = warpgeo.chamfer_distance(x, y)
    torch.testing.assert_close(got.dist_xy, ref.dist_xy, rtol=1e-6, atol=1e-9)


# --------------------------------------------------------------------------------------------------------
# backward
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("squared", [True, False])
@pytest.mark.parametrize("reduction", ["mean", "sum", None])
def test_gradcheck_float64(device, norm, squared, reduction):
    x = torch.rand(2, 7, 3, dtype=torch.float64, device=device, requires_grad=True)
    y = torch.rand(2, 5, 3, dtype=torch.float64, device=device, requires_grad=True)
    x_len = torch.tensor([7, 4], device=device)

    def fn(x, y):
        r = warpgeo.chamfer_distance(x, y, x_lengths=x_len, norm=norm, squared=squared, reduction=reduction)
        return r.loss, r.dist_xy, r.dist_yx

    # CUDA adds into a point's gradient with atomics (order varies: last-bit differences between runs)
    tol = 1e-12 if torch.device(device).type == "cuda" else 0.0
    assert torch.autograd.gradcheck(fn, (x, y), eps=1e-6, atol=1e-6, nondet_tol=tol)


def _torch_chamfer(x, y, idx_xy, idx_yx, norm, squared, x_len=None, y_len=None):
    """The same loss from plain torch ops at the given nearest indices (its autograd is the reference)."""

    def direction(q, p, idx, lengths):
        near = torch.gather(p, 1, idx.clamp_min(0)[..., None].expand(-1, -1, 3))
        diff = q - near
        d = diff.square().sum(-1) if norm == 2 else diff.abs().sum(-1)
        if norm == 2 and not squared:
            d = d.sqrt()
        if norm == 1 and squared:
            d = d.square()
        d = torch.where(idx >= 0, d, 0.0)
        counts = torch.full((q.shape[0],), q.shape[1], device=q.device) if lengths is None else lengths
        return d, (d.sum(1) / counts.clamp(min=1)).mean()

    d_xy, l_xy = direction(x, y, idx_xy, x_len)
    d_yx, l_yx = direction(y, x, idx_yx, y_len)
    return l_xy + l_yx, d_xy, d_yx


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("squared", [True, False])
def test_backward_matches_torch_with_random_upstream(device, norm, squared):
    x = torch.rand(3, 300, 3, device=device, requires_grad=True)
    y = torch.rand(3, 280, 3, device=device, requires_grad=True)
    x_len = torch.tensor([300, 120, 7], device=device)
    y_len = torch.tensor([280, 3, 200], device=device)
    got = warpgeo.chamfer_distance(x, y, x_lengths=x_len, y_lengths=y_len, norm=norm, squared=squared)
    ref = _torch_chamfer(x, y, got.idx_xy, got.idx_yx, norm, squared, x_len, y_len)
    torch.testing.assert_close(got.loss, ref[0])
    g_loss = torch.rand((), device=device)
    g_xy, g_yx = torch.randn_like(got.dist_xy), torch.randn_like(got.dist_yx)
    ours = torch.autograd.grad((got.loss, got.dist_xy, got.dist_yx), (x, y), (g_loss, g_xy, g_yx))
    theirs = torch.autograd.grad(ref, (x, y), (g_loss, g_xy, g_yx))
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert (ours[0][1, 120:] == 0).all() and (ours[1][1, 3:] == 0).all()  # padding: no gradient


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("squared", [True, False])
def test_coincident_points_give_finite_gradients(device, norm, squared):
    x = torch.rand(2, 20, 3, device=device)
    y = torch.cat([x[:, :10], torch.rand(2, 5, 3, device=device)], dim=1).requires_grad_(True)
    x = x.clone().requires_grad_(True)
    got = warpgeo.chamfer_distance(x, y, norm=norm, squared=squared)
    assert (got.dist_xy[:, :10] == 0).all()
    gx, gy = torch.autograd.grad(got.loss, (x, y))
    assert torch.isfinite(gx).all() and torch.isfinite(gy).all()


def test_grad_only_where_asked(device):
    x = torch.rand(1, 10, 3, device=device, requires_grad=True)
    y = torch.rand(1, 8, 3, device=device)
    got = warpgeo.chamfer_distance(x, y)
    got.loss.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and y.grad is None
    assert not got.idx_xy.requires_grad


# --------------------------------------------------------------------------------------------------------
# the registered op, torch.compile, errors
# --------------------------------------------------------------------------------------------------------


def test_opcheck(device):
    x = torch.rand(2, 9, 3, device=device, dtype=torch.float64, requires_grad=True)
    y = torch.rand(2, 6, 3, device=device, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([9, 5], device=device)
    for args in (
        (x, y, None, None, 2, True, "mean", False),
        (x, y, lengths, None, 1, False, None, False),
        (x, y, None, lengths.clamp(max=6), 2, False, "sum", True),
    ):
        torch.library.opcheck(_chamfer_op.custom, args)


def test_torch_compile_matches_eager(device):
    x = torch.rand(2, 40, 3, device=device, requires_grad=True)
    y = torch.rand(2, 30, 3, device=device, requires_grad=True)

    def loss_fn(x, y):
        return warpgeo.chamfer_distance(x, y).loss * 2.0

    compiled = torch.compile(loss_fn, fullgraph=True, backend="aot_eager")
    got = compiled(x, y)
    ref = loss_fn(x, y)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(torch.autograd.grad(got, x), torch.autograd.grad(ref, x))


def test_errors():
    x, y = torch.rand(2, 5, 3), torch.rand(2, 4, 3)
    with pytest.raises(ValueError, match=r"x must have shape \(B, N, 3\)"):
        warpgeo.chamfer_distance(torch.rand(5, 3), y)
    with pytest.raises(ValueError, match=r"y must have shape \(B, M, 3\)"):
        warpgeo.chamfer_distance(x, torch.rand(2, 4, 2))
    with pytest.raises(ValueError, match="batch size of x"):
        warpgeo.chamfer_distance(x, torch.rand(3, 4, 3))
    with pytest.raises(TypeError, match="dtype of x"):
        warpgeo.chamfer_distance(x, y.double())
    with pytest.raises(TypeError, match="x must have dtype"):
        warpgeo.chamfer_distance(x.int(), y)
    with pytest.raises(ValueError, match="norm must be 1"):
        warpgeo.chamfer_distance(x, y, norm=3)
    with pytest.raises(ValueError, match="reduction must be"):
        warpgeo.chamfer_distance(x, y, reduction="max")
    with pytest.raises(TypeError, match="squared must be a bool"):
        warpgeo.chamfer_distance(x, y, squared=1)
    with pytest.raises(TypeError, match="x_lengths must have dtype"):
        warpgeo.chamfer_distance(x, y, x_lengths=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"y_lengths must have shape \(2,\)"):
        warpgeo.chamfer_distance(x, y, y_lengths=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"x_lengths must lie in \[0, N=5\]"):
        warpgeo.chamfer_distance(x, y, x_lengths=torch.tensor([6, 1]))
    bad = y.clone()
    bad[1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match="y must be finite"):
        warpgeo.chamfer_distance(x, bad)
    # NaN beyond the lengths is padding: not an error
    warpgeo.chamfer_distance(x, bad, y_lengths=torch.tensor([4, 2]))
    # the registered op checks too
    with pytest.raises(ValueError, match="norm must be 1"):
        torch.ops.warpgeo.chamfer_distance(x, y, None, None, 0, True, "mean", False)
    with pytest.raises(ValueError, match=r"x must have shape"):
        torch.ops.warpgeo.chamfer_distance(torch.rand(2, 5, 4), y, None, None, 2, True, "mean", False)


@pytest.mark.parametrize("norm", [1, 2])
def test_sync_free_with_checks_off(device, norm):
    x = torch.rand(2, 400, 3, device=device, requires_grad=True)
    y = torch.rand(2, 300, 3, device=device, requires_grad=True)
    lengths = torch.tensor([400, 17], device=device)
    _assert_sync_free(
        lambda: warpgeo.chamfer_distance(x, y, x_lengths=lengths, norm=norm).loss, leaves=[x, y]
    )
    _assert_sync_free(
        lambda: warpgeo.chamfer_distance(x, y, norm=norm, squared=False, reduction=None)[:3], leaves=[x, y]
    )


def test_hostile_values_with_checks_off_never_crash():
    x = torch.rand(2, 300, 3)
    y = torch.rand(2, 40, 3)
    x[0, :5] = float("nan")
    y[1, 3] = float("inf")
    with warpgeo.value_checks(False):
        for norm in (1, 2):
            got = warpgeo.chamfer_distance(
                x, y, x_lengths=torch.tensor([500, -3]), y_lengths=torch.tensor([7, 99]), norm=norm
            )
            assert got.idx_xy.min() >= -1 and got.idx_xy.max() < 40
            assert got.idx_yx.min() >= -1 and got.idx_yx.max() < 300


@pytest.mark.parametrize(
    ("dtype", "scale"),
    [(torch.float64, 1e200), (torch.float64, 1e-200), (torch.float32, 1e20), (torch.float32, 1e-25)],
)
@pytest.mark.parametrize("n", [40, 600])  # the scan of small clouds, and the grid
def test_unsquared_distances_are_right_at_extreme_scales(dtype, scale, n):
    """Issue 39 item 8: ``squared=False`` distances of clouds scaled far from 1 are their true distances
    (the same as knn's), not inf or 0 (squared distances overflow or underflow there); the gradient is
    finite."""
    g = torch.Generator().manual_seed(5)
    x = ((torch.rand(2, n, 3, generator=g, dtype=torch.float64) - 0.5) * scale).to(dtype)
    y = ((torch.rand(2, n + 7, 3, generator=g, dtype=torch.float64) - 0.5) * scale).to(dtype)
    got = warpgeo.chamfer_distance(x, y, squared=False, reduction="sum")
    for d, q, p in ((got.dist_xy, x, y), (got.dist_yx, y, x)):
        assert torch.isfinite(d).all() and (d > 0).all()
        assert torch.equal(d, warpgeo.knn(q, p, 1).dists[..., 0])
    # against float64 cdist of the clouds brought to unit scale (a division by a power of ten: fine at 1e-6;
    # cdist of the clouds themselves overflows or underflows as the old chamfer did)
    ref_d, ref_i = nearest_reference(x.double() / scale, y.double() / scale)
    torch.testing.assert_close(got.dist_xy.double(), ref_d * scale, rtol=1e-6, atol=0)
    assert torch.equal(got.idx_xy, ref_i)
    leaf = x.clone().requires_grad_()
    warpgeo.chamfer_distance(leaf, y, squared=False).loss.backward()
    assert torch.isfinite(leaf.grad).all() and (leaf.grad != 0).any()
