"""warpgeo.compat's knn_cuda, chamfer, pytorch3d and torch_cluster adapters: the originals' documented
semantics and published known answers, brute-force references, and client code written against the
originals (a Point-MAE-style ``Group`` and chamfer loss; PyTorch Geometric) run unchanged after install()."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest
import torch
from reference import fps_reference

import warpgeo
from warpgeo.compat import chamfer, install, knn_cuda, pytorch3d, torch_cluster

NEW_NAMES = ("knn_cuda", "chamfer", "torch_cluster")


def brute_knn(q, p, k):
    """(dist, idx) (B, M, k): Euclidean, nearest first, ties to the lowest index (stable sort)."""
    d = torch.cdist(q.double(), p.double(), compute_mode="donot_use_mm_for_euclid_dist")
    order = torch.sort(d, dim=-1, stable=True).indices[..., :k]
    return torch.gather(d, 2, order), order


def to_set(edge_index):
    return {(i, j) for i, j in edge_index.t().tolist()}


@pytest.fixture
def installed(monkeypatch):
    for name in NEW_NAMES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    registered = install()
    yield registered
    for name in registered:
        sys.modules.pop(name, None)


# --------------------------------------------------------------------------------------------------------
# knn_cuda
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [3, 2, 5])
def test_knn_cuda_transpose_mode(device, dim):
    ref = torch.rand(2, 300, dim, device=device, dtype=torch.float64)
    query = torch.rand(2, 40, dim, device=device, dtype=torch.float64)
    dist, idx = knn_cuda.KNN(k=8, transpose_mode=True)(ref, query)
    assert dist.shape == idx.shape == (2, 40, 8)
    assert dist.dtype == torch.float32 and idx.dtype == torch.int64  # the extension casts with .float()
    ref_d, ref_i = brute_knn(query.float(), ref.float(), 8)
    assert idx.cpu().tolist() == ref_i.cpu().tolist()
    torch.testing.assert_close(dist.cpu().double(), ref_d.cpu(), rtol=1e-5, atol=1e-6)


def test_knn_cuda_channels_first(device):
    ref = torch.rand(3, 3, 200, device=device)  # (B, D, N)
    query = torch.rand(3, 3, 25, device=device)
    dist, idx = knn_cuda.KNN(k=4, transpose_mode=False)(ref, query)
    assert dist.shape == idx.shape == (3, 4, 25)  # (B, k, M)
    ref_d, ref_i = brute_knn(query.transpose(1, 2), ref.transpose(1, 2), 4)
    assert idx.transpose(1, 2).cpu().tolist() == ref_i.cpu().tolist()
    torch.testing.assert_close(dist.transpose(1, 2).cpu().double(), ref_d.cpu(), rtol=1e-5, atol=1e-6)
    d1, i1 = knn_cuda.knn(ref[1], query[1], 4)  # the module-level, one-cloud function: (D, n) -> (k, M)
    assert i1.tolist() == idx[1].tolist()
    torch.testing.assert_close(d1, dist[1])


def test_knn_cuda_no_grad_and_errors():
    ref = torch.rand(1, 10, 3, requires_grad=True)
    dist, _ = knn_cuda.KNN(3, transpose_mode=True)(ref, ref)
    assert not dist.requires_grad
    assert (dist[..., 0] == 0).all()  # a point is its own nearest, at distance 0
    with pytest.raises(ValueError, match="larger than the reference cloud"):
        knn_cuda.KNN(11, transpose_mode=True)(ref, ref)
    with pytest.raises(ValueError, match=r"ref must be a tensor of shape \(B, n, D\)"):
        knn_cuda.KNN(3, transpose_mode=True)(ref[0], ref)


# --------------------------------------------------------------------------------------------------------
# the chamfer extension
# --------------------------------------------------------------------------------------------------------


def brute_chamfer(xyz1, xyz2):
    d = torch.cdist(xyz1, xyz2, compute_mode="donot_use_mm_for_euclid_dist").square()
    return d.min(2).values, d.min(1).values, d.argmin(2), d.argmin(1)


def test_chamfer_forward(device):
    xyz1 = torch.rand(2, 100, 3, device=device)
    xyz2 = torch.rand(2, 70, 3, device=device)
    dist1, dist2, idx1, idx2 = chamfer.forward(xyz1, xyz2)
    r1, r2, ri1, ri2 = brute_chamfer(xyz1, xyz2)
    assert idx1.dtype == idx2.dtype == torch.int32 and dist1.dtype == torch.float32
    assert dist1.shape == (2, 100) and dist2.shape == (2, 70)
    assert idx1.long().tolist() == ri1.tolist() and idx2.long().tolist() == ri2.tolist()
    torch.testing.assert_close(dist1, r1, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dist2, r2, rtol=1e-5, atol=1e-6)
    assert not chamfer.forward(xyz1.requires_grad_(), xyz2)[0].requires_grad


def test_chamfer_backward_is_the_gradient_at_the_indices(device):
    xyz1 = torch.rand(2, 50, 3, device=device, dtype=torch.float64, requires_grad=True)
    xyz2 = torch.rand(2, 40, 3, device=device, dtype=torch.float64, requires_grad=True)
    _, _, idx1, idx2 = chamfer.forward(xyz1, xyz2)
    g1, g2 = (
        torch.randn(2, 50, device=device, dtype=torch.float64),
        torch.randn(2, 40, device=device, dtype=torch.float64),
    )
    grad1, grad2 = chamfer.backward(xyz1, xyz2, idx1, idx2, g1, g2)
    d1, d2, _, _ = brute_chamfer(xyz1, xyz2)
    ref1, ref2 = torch.autograd.grad((d1, d2), (xyz1, xyz2), (g1, g2))
    torch.testing.assert_close(grad1, ref1)
    torch.testing.assert_close(grad2, ref2)


# --------------------------------------------------------------------------------------------------------
# pytorch3d
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", [2, 1])
@pytest.mark.parametrize("k", [1, 5])
def test_knn_points(device, norm, k):
    p1 = torch.rand(3, 60, 3, device=device, dtype=torch.float64, requires_grad=True)
    p2 = torch.rand(3, 50, 3, device=device, dtype=torch.float64, requires_grad=True)
    lengths1 = torch.tensor([60, 20, 0], device=device)
    lengths2 = torch.tensor([50, 3, 10], device=device)
    out = pytorch3d.knn_points(p1, p2, lengths1, lengths2, norm=norm, K=k, return_nn=True)
    assert type(out).__name__ == "KNN" and out._fields == ("dists", "idx", "knn")
    assert out.dists.shape == out.idx.shape == (3, 60, k) and out.knn.shape == (3, 60, k, 3)
    for b in range(3):
        n1, n2 = int(lengths1[b]), int(lengths2[b])
        d = torch.cdist(p1[b, :n1], p2[b, :n2], p=float(norm), compute_mode="donot_use_mm_for_euclid_dist")
        kk = min(k, n2)
        order = torch.sort(d, dim=-1, stable=True).indices[:, :kk]
        expected = torch.gather(d, 1, order)
        if norm == 2:
            expected = expected.square()
        assert out.idx[b, :n1, :kk].tolist() == order.tolist()
        torch.testing.assert_close(out.dists[b, :n1, :kk], expected)
        # pytorch3d pads both with zeros: fewer than K points in p2, padded points of p1
        assert (out.idx[b, :n1, kk:] == 0).all() and (out.dists[b, :n1, kk:] == 0).all()
        assert (out.idx[b, n1:] == 0).all() and (out.dists[b, n1:] == 0).all()
        torch.testing.assert_close(out.knn[b, :n1, :kk], p2[b][order])
        assert (out.knn[b, :n1, kk:] == 0).all()
    out.dists.sum().backward()
    assert torch.isfinite(p1.grad).all() and p1.grad.abs().sum() > 0 and p2.grad.abs().sum() > 0


def test_knn_points_gradcheck():
    p1 = torch.rand(2, 8, 3, dtype=torch.float64, requires_grad=True)
    p2 = torch.rand(2, 6, 3, dtype=torch.float64, requires_grad=True)
    for norm in (1, 2):
        assert torch.autograd.gradcheck(
            lambda a, b, norm=norm: pytorch3d.knn_points(a, b, norm=norm, K=2).dists, (p1, p2)
        )


def test_knn_points_any_dimension():
    p1, p2 = torch.rand(2, 20, 6), torch.rand(2, 30, 6)
    out = pytorch3d.knn_points(p1, p2, K=3)
    d, i = brute_knn(p1, p2, 3)
    assert out.idx.tolist() == i.tolist()
    torch.testing.assert_close(out.dists.double(), d.square(), rtol=1e-5, atol=1e-6)
    out2 = pytorch3d.knn_points(p1[..., :2], p2[..., :2], K=3)  # 2-D: padded to 3
    assert out2.idx.tolist() == brute_knn(p1[..., :2], p2[..., :2], 3)[1].tolist()


def test_knn_gather_masks_beyond_lengths():
    x = torch.rand(2, 5, 4)
    idx = torch.tensor([[[4, 0, 1]], [[1, 0, 0]]])
    out = pytorch3d.knn_gather(x, idx, lengths=torch.tensor([5, 2]))
    assert out.shape == (2, 1, 3, 4)
    torch.testing.assert_close(out[0, 0], x[0, [4, 0, 1]])
    torch.testing.assert_close(out[1, 0, :2], x[1, [1, 0]])
    assert (out[1, 0, 2] == 0).all()  # slot k >= lengths[1]


def test_ball_query(device):
    p1 = torch.rand(2, 30, 3, device=device, dtype=torch.float64, requires_grad=True)
    p2 = torch.rand(2, 80, 3, device=device, dtype=torch.float64, requires_grad=True)
    p2_exact = p2.detach().clone()
    p2_exact[0, 5] = p1[0, 0].detach() + torch.tensor([0.25, 0.0, 0.0], device=device, dtype=torch.float64)
    p2_exact.requires_grad_(True)
    out = pytorch3d.ball_query(p1, p2_exact, K=6, radius=0.25, lengths2=torch.tensor([80, 40], device=device))
    assert out.idx.dtype == torch.int64 and out.dists.shape == (2, 30, 6) and out.knn.shape == (2, 30, 6, 3)
    for b, n2 in ((0, 80), (1, 40)):
        d2 = ((p1[b, :, None].detach() - p2_exact[b, None, :n2].detach()) ** 2).sum(-1)
        for i in range(30):
            hits = [j for j in range(n2) if float(d2[i, j]) < 0.25**2][:6]  # strict, first K in index order
            assert out.idx[b, i].tolist() == hits + [-1] * (6 - len(hits))
            torch.testing.assert_close(out.dists[b, i, : len(hits)], d2[i, hits])
            assert (out.dists[b, i, len(hits) :] == 0).all() and (out.knn[b, i, len(hits) :] == 0).all()
    assert 5 not in out.idx[0, 0].tolist()  # exactly at the radius: outside
    out.dists.sum().backward()
    assert torch.isfinite(p1.grad).all() and p2_exact.grad.abs().sum() > 0


def test_sample_farthest_points(device):
    # the torch_cluster known answer, as one (N, P, D) cloud of 2-D points
    points = torch.tensor(
        [[-1, -1], [-1, 1], [1, 1], [1, -1], [-2, -2], [-2, 2], [2, 2], [2, -2]],
        dtype=torch.float32,
        device=device,
    )[None]
    sampled, idx = pytorch3d.sample_farthest_points(points, K=4)
    assert idx.tolist() == [[0, 6, 5, 7]]  # 5 and 7 tie at step 3: the lower index first
    torch.testing.assert_close(sampled, points[:, [0, 6, 5, 7]])
    # ragged, K per cloud, more than a cloud holds: -1 and zero points
    clouds = torch.rand(2, 10, 3, device=device)
    sampled, idx = pytorch3d.sample_farthest_points(
        clouds, lengths=torch.tensor([10, 3], device=device), K=[4, 5]
    )
    assert (
        idx.shape == (2, 5)
        and idx[0, 4] == -1
        and (idx[1, 3:] == -1).all()
        and idx[1, :3].sort().values.tolist() == [0, 1, 2]
    )
    assert (sampled[1, 3:] == 0).all()
    expected = warpgeo.farthest_point_sampling(clouds[:1], 4)
    assert idx[0, :4].tolist() == expected[0].tolist()


def _p3d_reference(x, y, x_len, y_len, weights, point_reduction, batch_reduction, norm):
    """pytorch3d's documented chamfer in plain torch: per direction and cloud, the directions summed ("max":
    the larger taken, the Hausdorff distance), then the batch reduction."""

    def direction(a, b, la, lb):
        per = []
        for i in range(a.shape[0]):
            d = torch.cdist(
                a[i, : la[i]], b[i, : lb[i]], p=float(norm), compute_mode="donot_use_mm_for_euclid_dist"
            )
            m = d.min(1).values
            per.append(torch.cat([m.square() if norm == 2 else m, a.new_zeros(a.shape[1] - int(la[i]))]))
        per = torch.stack(per)
        if weights is not None:
            per = per * weights[:, None]
        if point_reduction == "sum":
            cloud = per.sum(1)
        elif point_reduction == "max":
            cloud = per.amax(1)
        else:
            cloud = per.sum(1) / la.clamp(min=1)
        return cloud

    xy, yx = direction(x, y, x_len, y_len), direction(y, x, y_len, x_len)
    cloud = torch.maximum(xy, yx) if point_reduction == "max" else xy + yx
    if batch_reduction is None:
        return cloud
    total = cloud.sum()
    return (
        total / (weights.sum() if weights is not None else x.shape[0]) if batch_reduction == "mean" else total
    )


@pytest.mark.parametrize("point_reduction", ["mean", "sum", "max"])
@pytest.mark.parametrize("batch_reduction", ["mean", "sum", None])
@pytest.mark.parametrize("norm", [2, 1])
def test_pytorch3d_chamfer_distance(point_reduction, batch_reduction, norm):
    x, y = torch.rand(3, 40, 3, dtype=torch.float64), torch.rand(3, 30, 3, dtype=torch.float64)
    x_len, y_len = torch.tensor([40, 12, 5]), torch.tensor([30, 30, 9])
    weights = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
    loss, loss_normals = pytorch3d.chamfer_distance(
        x,
        y,
        x_len,
        y_len,
        weights=weights,
        point_reduction=point_reduction,
        batch_reduction=batch_reduction,
        norm=norm,
    )
    assert loss_normals is None
    ref = _p3d_reference(x, y, x_len, y_len, weights, point_reduction, batch_reduction, norm)
    torch.testing.assert_close(loss, ref)


def test_pytorch3d_chamfer_max_is_the_larger_direction():
    """point_reduction="max" is the Hausdorff distance: the larger of the two directions' maxima."""
    a = torch.tensor([[[0.0, 0.0, 0.0]]])
    b = torch.tensor([[[1.0, 0.0, 0.0], [3.0, 0.0, 0.0]]])
    # a -> b: 1 (squared 1); b -> a: the point at 3 (squared 9)
    assert float(pytorch3d.chamfer_distance(a, b, point_reduction="max")[0]) == 9.0
    assert float(pytorch3d.chamfer_distance(a, b, point_reduction="max", norm=1)[0]) == 3.0
    assert float(pytorch3d.chamfer_distance(a, b, point_reduction="max", single_directional=True)[0]) == 1.0
    loss, _ = pytorch3d.chamfer_distance(
        a, b, weights=torch.tensor([2.0]), point_reduction="max", batch_reduction=None
    )
    assert loss.tolist() == [18.0]


def test_pytorch3d_chamfer_normals_and_weights_as_pytorch3d():
    x = torch.rand(2, 6, 3, requires_grad=True)
    y = torch.rand(2, 4, 3, requires_grad=True)
    nx, ny = torch.rand(2, 6, 3), torch.rand(2, 4, 3)
    for normals in ({"x_normals": nx, "y_normals": ny}, {"x_normals": nx}, {"y_normals": ny}):
        with pytest.raises(ValueError, match='Normals must be None if point_reduction is "max"'):
            pytorch3d.chamfer_distance(x, y, point_reduction="max", **normals)
    # one cloud's normals alone: no normals term, the same loss
    loss, loss_normals = pytorch3d.chamfer_distance(x, y, x_normals=nx)
    assert loss_normals is None and torch.equal(loss, pytorch3d.chamfer_distance(x, y)[0])
    for bad in (nx[None], nx[:, :5], torch.rand(2, 6)):
        with pytest.raises(ValueError, match="Expected normals to be of shape"):
            pytorch3d.chamfer_distance(x, y, x_normals=bad, y_normals=ny)
    with pytest.raises(ValueError, match="Expected normals to be of shape"):
        pytorch3d.chamfer_distance(x, y, x_normals=nx, y_normals=nx)
    with pytest.raises(ValueError, match="Expected points to be of shape"):
        pytorch3d.chamfer_distance(x[None], y)
    with pytest.raises(ValueError, match="Expected lengths to be of shape"):
        pytorch3d.chamfer_distance(x, y, x_lengths=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match=r"Pointclouds objects or torch\.Tensor"):
        pytorch3d.chamfer_distance([1, 1, 1], [1, 1, 1])
    for weights in (torch.tensor([1.0, -1.0]), torch.tensor([1.0, float("nan")])):
        with pytest.raises(ValueError, match="weights cannot be negative"):
            pytorch3d.chamfer_distance(x, y, weights=weights)
    with pytest.raises(ValueError, match=r"weights must be of shape \(N,\)"):
        pytorch3d.chamfer_distance(x, y, weights=torch.ones(3))
    # all-zero weights: zeros that keep the graph, and a normals term of zeros (pytorch3d's tests pin these,
    # the (N, N) per-cloud shape included)
    zero = torch.zeros(2)
    loss, loss_normals = pytorch3d.chamfer_distance(x, y, weights=zero)
    assert loss.shape == () and float(loss.detach()) == 0.0 and loss.requires_grad
    assert loss_normals is not None and loss_normals.shape == () and float(loss_normals.detach()) == 0.0
    loss, loss_normals = pytorch3d.chamfer_distance(x, y, weights=zero, batch_reduction=None)
    assert loss.shape == loss_normals.shape == (2, 2) and not loss.any() and not loss_normals.any()
    loss.sum().backward()
    assert (x.grad == 0).all() and (y.grad == 0).all()


def test_pytorch3d_messages_and_edges():
    p1, p2 = torch.rand(1, 5, 3), torch.rand(1, 7, 3)
    for norm in (0, 3):
        with pytest.raises(ValueError, match=r"Support for 1 or 2 norm\."):
            pytorch3d.knn_points(p1, p2, norm=norm)
        with pytest.raises(ValueError, match=r"Support for 1 or 2 norm\."):
            pytorch3d.chamfer_distance(p1, p2, norm=norm)
    # radius 0: nothing lies strictly within, as pytorch3d (d^2 < 0 never holds)
    out = pytorch3d.ball_query(p1, torch.cat([p1, p2], 1), K=4, radius=0.0)
    assert out.idx.shape == (1, 5, 4) and (out.idx == -1).all()
    assert not out.dists.any() and out.knn.shape == (1, 5, 4, 3) and not out.knn.any()
    for radius in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="radius"):
            pytorch3d.ball_query(p1, p2, radius=radius)


def test_pytorch3d_chamfer_takes_a_pointclouds_like_object():
    """Anything with pytorch3d's Pointclouds accessors (points_padded, num_points_per_cloud,
    normals_padded) is read as its padded points, lengths and normals."""

    class Clouds:
        def __init__(self, points, normals=None):
            self.points, self.normals = points, normals

        def points_padded(self):
            return torch.nn.utils.rnn.pad_sequence(self.points, batch_first=True)

        def num_points_per_cloud(self):
            return torch.tensor([len(p) for p in self.points])

        def normals_padded(self):
            return None if self.normals is None else torch.nn.utils.rnn.pad_sequence(self.normals, True)

    xs = [torch.rand(5, 3, dtype=torch.float64), torch.rand(2, 3, dtype=torch.float64)]
    ys = [torch.rand(4, 3, dtype=torch.float64), torch.rand(6, 3, dtype=torch.float64)]
    nx = [torch.rand(5, 3, dtype=torch.float64), torch.rand(2, 3, dtype=torch.float64)]
    ny = [torch.rand(4, 3, dtype=torch.float64), torch.rand(6, 3, dtype=torch.float64)]
    got = pytorch3d.chamfer_distance(Clouds(xs, nx), Clouds(ys, ny))
    expected = pytorch3d.chamfer_distance(
        Clouds(xs).points_padded(),
        Clouds(ys).points_padded(),
        x_lengths=torch.tensor([5, 2]),
        y_lengths=torch.tensor([4, 6]),
        x_normals=Clouds(nx).points_padded(),
        y_normals=Clouds(ny).points_padded(),
    )
    torch.testing.assert_close(got, expected)
    # the loss over the valid points only, by hand for the second pair (2 points of x, 6 of y)
    d = torch.cdist(xs[1], ys[1]).square()
    per_cloud_1 = d.min(1).values.mean() + d.min(0).values.mean()
    d = torch.cdist(xs[0], ys[0]).square()
    per_cloud_0 = d.min(1).values.mean() + d.min(0).values.mean()
    torch.testing.assert_close(got[0], (per_cloud_0 + per_cloud_1) / 2)


def test_pytorch3d_chamfer_per_point_normals_and_grad():
    x = torch.rand(2, 20, 3, dtype=torch.float64, requires_grad=True)
    y = torch.rand(2, 15, 3, dtype=torch.float64, requires_grad=True)
    (cham_x, cham_y), _ = pytorch3d.chamfer_distance(x, y, point_reduction=None, batch_reduction=None)
    assert cham_x.shape == (2, 20) and cham_y.shape == (2, 15)
    torch.testing.assert_close(cham_x, brute_chamfer(x, y)[0])
    nx, ny = (
        torch.nn.functional.normalize(torch.randn(2, 20, 3, dtype=torch.float64), dim=-1),
        torch.nn.functional.normalize(torch.randn(2, 15, 3, dtype=torch.float64), dim=-1),
    )
    _, loss_normals = pytorch3d.chamfer_distance(x, y, x_normals=nx, y_normals=ny, abs_cosine=False)
    _, _, i1, i2 = brute_chamfer(x, y)
    cos1 = (nx * torch.gather(ny, 1, i1[..., None].expand(-1, -1, 3))).sum(-1)
    cos2 = (ny * torch.gather(nx, 1, i2[..., None].expand(-1, -1, 3))).sum(-1)
    torch.testing.assert_close(loss_normals, (1 - cos1).mean() + (1 - cos2).mean())
    single, _ = pytorch3d.chamfer_distance(x, y, single_directional=True)
    torch.testing.assert_close(single, brute_chamfer(x, y)[0].mean())
    assert torch.autograd.gradcheck(lambda a, b: pytorch3d.chamfer_distance(a, b)[0], (x, y))
    with pytest.raises(ValueError, match="Batch reduction must be None"):
        pytorch3d.chamfer_distance(x, y, point_reduction=None)


# --------------------------------------------------------------------------------------------------------
# torch_cluster: its published known answers, then brute force
# --------------------------------------------------------------------------------------------------------

SQUARE = [[-1, -1], [-1, 1], [1, 1], [1, -1]]


def test_torch_cluster_fps_known_answers(device):
    x = torch.tensor(SQUARE + [[2 * a, 2 * b] for a, b in SQUARE], dtype=torch.float32, device=device)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1], device=device)
    assert torch_cluster.fps(x, batch, random_start=False).tolist() == [0, 2, 4, 6]
    assert torch_cluster.fps(x, batch, ratio=0.5, random_start=False).tolist() == [0, 2, 4, 6]
    assert torch_cluster.fps(x, batch, ratio=torch.tensor(0.5), random_start=False).tolist() == [0, 2, 4, 6]
    assert torch_cluster.fps(x, ptr=[0, 4, 8], ratio=0.5, random_start=False).tolist() == [0, 2, 4, 6]
    assert torch_cluster.fps(x, batch, ratio=torch.tensor([0.5, 0.5]), random_start=False).tolist() == [
        0,
        2,
        4,
        6,
    ]
    assert torch_cluster.fps(x, random_start=False).sort()[0].tolist() == [0, 5, 6, 7]
    assert torch_cluster.fps(x, ratio=torch.tensor([0.5]), random_start=False).sort()[0].tolist() == [
        0,
        5,
        6,
        7,
    ]
    # ceil(ratio * N_b) per example, random starts stay inside their example
    pos = torch.randn(2 * 100 + 7, 3, device=device)
    batch = torch.cat([torch.zeros(100), torch.ones(107)]).long().to(device)
    idx = torch_cluster.fps(pos, batch, ratio=0.25)
    assert idx.shape == (25 + 27,) and (idx[:25] < 100).all() and (idx[25:] >= 100).all()
    assert len(set(idx.tolist())) == 52
    # ceil in the points' dtype, as torch_cluster: 100 * float32(0.3) rounds to 30.000002 -> 31
    assert torch_cluster.fps(pos, batch, ratio=0.3).shape == (31 + 33,)
    # more than 3 features: the same greedy order in plain torch
    feats = torch.rand(50, 6, device=device)
    idx = torch_cluster.fps(feats, ratio=0.2, random_start=False)
    d = torch.cdist(feats.double(), feats.double(), compute_mode="donot_use_mm_for_euclid_dist").square()
    chosen, nearest = [0], d[0].clone()
    for _ in range(9):
        chosen.append(int(nearest.argmax()))
        nearest = torch.minimum(nearest, d[chosen[-1]])
    assert idx.tolist() == chosen


def test_torch_cluster_knn_known_answers(device):
    x = torch.tensor(SQUARE + SQUARE, dtype=torch.float32, device=device)
    y = torch.tensor([[1, 0], [-1, 0]], dtype=torch.float32, device=device)
    batch_x = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1], device=device)
    batch_y = torch.tensor([0, 1], device=device)
    assert to_set(torch_cluster.knn(x, y, 2)) == {(0, 2), (0, 3), (1, 0), (1, 1)}
    assert to_set(torch_cluster.knn(x, y, 2, batch_x, batch_y)) == {(0, 2), (0, 3), (1, 4), (1, 5)}
    assert to_set(torch_cluster.knn(x, y, 2, batch_x, batch_y, cosine=True)) == {
        (0, 2),
        (0, 3),
        (1, 4),
        (1, 5),
    }
    # skipping a batch
    batch_x = torch.tensor([0, 0, 0, 0, 2, 2, 2, 2], device=device)
    batch_y = torch.tensor([0, 2], device=device)
    assert to_set(torch_cluster.knn(x, y, 2, batch_x, batch_y)) == {(0, 2), (0, 3), (1, 4), (1, 5)}
    sq = torch.tensor(SQUARE, dtype=torch.float32, device=device)
    t2s = {(0, 1), (0, 3), (1, 0), (1, 2), (2, 1), (2, 3), (3, 0), (3, 2)}
    assert to_set(torch_cluster.knn_graph(sq, k=2, flow="target_to_source")) == t2s
    assert to_set(torch_cluster.knn_graph(sq, k=2, flow="source_to_target")) == {(j, i) for i, j in t2s}


def test_torch_cluster_radius_known_answers(device):
    x = torch.tensor(SQUARE + SQUARE, dtype=torch.float32, device=device)
    y = torch.tensor([[0, 0], [0, 1]], dtype=torch.float32, device=device)
    batch_x = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1], device=device)
    batch_y = torch.tensor([0, 1], device=device)
    assert to_set(torch_cluster.radius(x, y, 2, max_num_neighbors=4)) == {
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 1),
        (1, 2),
        (1, 5),
        (1, 6),
    }
    assert to_set(torch_cluster.radius(x, y, 2, batch_x, batch_y, max_num_neighbors=4)) == {
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 5),
        (1, 6),
    }
    batch_x = torch.tensor([0, 0, 0, 0, 2, 2, 2, 2], device=device)
    batch_y = torch.tensor([0, 2], device=device)
    assert to_set(torch_cluster.radius(x, y, 2, batch_x, batch_y, max_num_neighbors=4)) == {
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 5),
        (1, 6),
    }
    sq = torch.tensor(SQUARE, dtype=torch.float32, device=device)
    t2s = {(0, 1), (0, 3), (1, 0), (1, 2), (2, 1), (2, 3), (3, 0), (3, 2)}
    assert to_set(torch_cluster.radius_graph(sq, r=2.5, flow="target_to_source")) == t2s
    assert to_set(torch_cluster.radius_graph(sq, r=2.5, flow="source_to_target")) == {(j, i) for i, j in t2s}

    def degrees(edge_index):
        return torch.unique(edge_index[1], return_counts=True)[1].tolist()

    assert set(degrees(torch_cluster.radius_graph(sq, r=100, max_num_neighbors=1))) == {1}
    same = torch.full((4, 2), -1.0, device=device)
    assert set(degrees(torch_cluster.radius_graph(same, r=100, max_num_neighbors=1))) == {1}
    edge_index = torch_cluster.radius_graph(x, r=100, batch=batch_x.clamp(max=1), max_num_neighbors=1)
    assert set(degrees(edge_index)) == {1}
    assert [int(i) // 4 for i in edge_index[0]] == [0, 0, 0, 0, 1, 1, 1, 1]
    # strictly inside: a point at exactly r is not a neighbour
    assert torch_cluster.radius(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]]), 1.0).shape == (2, 0)


def test_torch_cluster_large_against_scipy(device):
    scipy_spatial = pytest.importorskip("scipy.spatial")
    x = torch.randn(1000, 3, device=device)
    tree = scipy_spatial.cKDTree(x.cpu().numpy())
    edge_index = torch_cluster.knn_graph(x, k=5, flow="target_to_source", loop=True)
    _, col = tree.query(x.cpu().numpy(), k=5)
    assert to_set(edge_index.cpu()) == {(i, int(j)) for i, ns in enumerate(col) for j in ns}
    edge_index = torch_cluster.radius_graph(
        x, r=0.5, flow="target_to_source", loop=True, max_num_neighbors=2000
    )
    balls = tree.query_ball_point(x.cpu().numpy(), r=0.5)
    assert to_set(edge_index.cpu()) == {(i, j) for i, ns in enumerate(balls) for j in ns}


def test_torch_cluster_against_brute_force(device):
    """Batches, max_num_neighbors (the first in index order), loop, flow, nearest, 1-D and 5-D points."""
    for dim in (1, 2, 3, 5):
        x = torch.rand(90, dim, device=device)
        y = torch.rand(40, dim, device=device)
        batch_x = torch.tensor([0] * 50 + [1] * 10 + [3] * 30, device=device)
        batch_y = torch.tensor([0] * 15 + [1] * 5 + [2] * 10 + [3] * 10, device=device)
        d = torch.cdist(y.double(), x.double(), compute_mode="donot_use_mm_for_euclid_dist")
        d = torch.where(batch_y[:, None] == batch_x[None, :], d, math.inf)
        order = torch.sort(d, dim=-1, stable=True).indices[:, :4]
        expected = [(i, int(j)) for i in range(40) for j in order[i] if math.isfinite(float(d[i, j]))]
        xs, ys = (x[:, 0], y[:, 0]) if dim == 1 else (x, y)  # 1-D input is a column of rows
        got = torch_cluster.knn(xs, ys, 4, batch_x, batch_y)
        assert [tuple(e) for e in got.t().tolist()] == expected  # nearest first, y after y
        got = torch_cluster.radius(xs, ys, 0.3, batch_x, batch_y, max_num_neighbors=3)
        expected = []
        for i in range(40):
            expected += [(i, j) for j in range(90) if float(d[i, j]) < 0.3][:3]
        assert [tuple(e) for e in got.t().tolist()] == expected
        near = torch_cluster.nearest(ys, xs, batch_y, batch_x)
        first = torch.sort(d, dim=-1, stable=True).indices[:, 0]
        has = torch.isfinite(d).any(dim=1)  # y's example 2 has no x: -1
        assert near.tolist() == torch.where(has, first, -1).tolist()


# PyG and torch_cluster still script these calls; torch 2.10+ marks torch.jit deprecated
@pytest.mark.filterwarnings("ignore:`torch.jit.[a-z_]*` is deprecated:DeprecationWarning")
def test_torch_cluster_under_torchscript(device, tmp_path):
    """Each function scripts with torch_cluster's signature and gives the same known answers; a scripted
    module is saved and loaded (the functions reach warpgeo through registered ops, not Python calls)."""
    x = torch.tensor(SQUARE + [[2 * a, 2 * b] for a, b in SQUARE], dtype=torch.float32, device=device)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1], device=device)

    # pytorch_cluster's test_fps.py shape: a scripted caller of fps with a ratio tensor, no batch
    @torch.jit.script
    def fps2(x: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
        return torch_cluster.fps(x, None, ratio, False)

    assert fps2(x, torch.tensor([0.5], device=device)).sort()[0].tolist() == [0, 5, 6, 7]
    fps = torch.jit.script(torch_cluster.fps)
    assert fps(x, batch, 0.5, False).tolist() == [0, 2, 4, 6]
    assert fps(x, batch, torch.tensor([0.5, 0.5]), False).tolist() == [0, 2, 4, 6]
    assert fps(x, ptr=[0, 4, 8], ratio=0.5, random_start=False).tolist() == [0, 2, 4, 6]
    assert fps(x, ptr=torch.tensor([0, 4, 8]), random_start=False).tolist() == [0, 2, 4, 6]
    with pytest.raises(RuntimeError, match="ratio"):
        fps(x, batch, float("nan"), False)

    y = torch.tensor([[1, 0], [-1, 0]], dtype=torch.float32, device=device)
    knn = torch.jit.script(torch_cluster.knn)
    assert to_set(knn(x[:4], y, 2)) == {(0, 2), (0, 3), (1, 0), (1, 1)}
    assert to_set(knn(x, y, 2, batch, torch.tensor([0, 1], device=device))) == {
        (0, 2),
        (0, 3),
        (1, 4),
        (1, 5),
    }
    sq = x[:4]
    t2s = {(0, 1), (0, 3), (1, 0), (1, 2), (2, 1), (2, 3), (3, 0), (3, 2)}
    knn_graph = torch.jit.script(torch_cluster.knn_graph)
    assert to_set(knn_graph(sq, k=2, flow="source_to_target")) == {(j, i) for i, j in t2s}
    assert to_set(knn_graph(sq, 2, None, False, "target_to_source")) == t2s
    radius = torch.jit.script(torch_cluster.radius)
    centres = torch.tensor([[0, 0], [0, 1]], dtype=torch.float32, device=device)
    # the corners are sqrt(2) from the centre; (0, 1) reaches the top corners (1, 2) and their copies (5, 6)
    assert to_set(radius(torch.cat([sq, sq]), centres, 2.0, max_num_neighbors=4)) == {
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 1),
        (1, 2),
        (1, 5),
        (1, 6),
    }
    radius_graph = torch.jit.script(torch_cluster.radius_graph)
    assert to_set(radius_graph(sq, r=2.5, flow="target_to_source")) == t2s
    assert to_set(radius_graph(sq, 2.5)) == {(j, i) for i, j in t2s}
    nearest = torch.jit.script(torch_cluster.nearest)
    assert nearest(y, sq).tolist() == [2, 0]  # (1, 0): (1, 1) and (1, -1) tie -> the lower index

    class Model(torch.nn.Module):
        def forward(self, pos: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
            idx = torch_cluster.fps(pos, batch, 0.5, False)
            return torch_cluster.knn(pos, pos[idx], 2, batch, batch[idx])

    torch.jit.save(torch.jit.script(Model()), tmp_path / "model.pt")
    loaded = torch.jit.load(tmp_path / "model.pt", map_location=device)
    assert torch.equal(loaded(x, batch), Model()(x, batch))


def test_torch_cluster_fps_ratio_is_checked():
    x = torch.rand(8, 3)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="ratio"):  # one per example (2) or one for all
        torch_cluster.fps(x, batch, ratio=torch.tensor([0.5, 0.5, 0.5]))
    with pytest.raises(ValueError, match="ratio"):
        torch_cluster.fps(x, batch, ratio=torch.tensor([[0.5, 0.5]]))
    for bad in (float("nan"), torch.tensor(float("nan")), torch.tensor([0.5, float("nan")]), 0.0, 1.5):
        with pytest.raises(ValueError, match="ratio"):
            torch_cluster.fps(x, batch, ratio=bad)


def test_torch_cluster_grid_cluster_and_missing_graph_ops():
    pos = torch.tensor([[0.0, 0.0], [11.0, 9.0], [2.0, 8.0], [2.0, 2.0], [8.0, 3.0]])
    assert torch_cluster.grid_cluster(pos, torch.tensor([5.0, 5.0])).tolist() == [0, 5, 3, 0, 1]
    with pytest.raises(NotImplementedError, match="graclus_cluster"):
        torch_cluster.graclus_cluster(torch.tensor([0, 1]), torch.tensor([1, 0]))


def test_torch_cluster_graph_without_loops(device):
    x = torch.rand(60, 3, device=device)
    batch = torch.tensor([0] * 25 + [1] * 35, device=device)
    edge_index = torch_cluster.knn_graph(x, 6, batch)
    assert edge_index.shape == (2, 60 * 6) and (edge_index[0] != edge_index[1]).all()
    src, dst = edge_index  # source_to_target: (neighbour, centre)
    assert (batch[src] == batch[dst]).all()
    ref = brute_knn(x[:25][None], x[:25][None], 7)[1][0, :, 1:]
    assert sorted(src[dst == 3].tolist()) == sorted(ref[3].tolist())
    edge_index = torch_cluster.radius_graph(x, 0.4, batch, max_num_neighbors=5)
    counts = torch.bincount(edge_index[1], minlength=60)
    assert counts.max() <= 5 and (edge_index[0] != edge_index[1]).all()
    d = torch.cdist(x, x)
    for i in (0, 30):
        within = [j for j in range(60) if j != i and batch[j] == batch[i] and float(d[i, j]) < 0.4][:5]
        assert edge_index[0][edge_index[1] == i].tolist() == within


# --------------------------------------------------------------------------------------------------------
# install()
# --------------------------------------------------------------------------------------------------------


def test_install_registers_the_new_names_and_never_pytorch3d(installed):
    assert set(NEW_NAMES) <= set(installed)
    assert "pytorch3d" not in installed and "pytorch3d" not in sys.modules
    import chamfer as chamfer_mod
    import torch_cluster as tc
    from knn_cuda import KNN

    assert KNN is knn_cuda.KNN and chamfer_mod is chamfer and tc is torch_cluster


def test_install_leaves_imported_and_importable_originals(installed, monkeypatch, tmp_path):
    sentinel = object()
    monkeypatch.setitem(sys.modules, "knn_cuda", sentinel)
    assert "knn_cuda" not in install()
    assert sys.modules["knn_cuda"] is sentinel
    forced = install(force=True)
    assert sys.modules["knn_cuda"] is knn_cuda and "knn_cuda" in forced
    for name in set(forced) - set(installed):
        sys.modules.pop(name, None)
    # a real module of that name on the path is left to be imported
    monkeypatch.delitem(sys.modules, "chamfer")
    (tmp_path / "chamfer.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "chamfer" not in install()
    import chamfer as real

    assert getattr(real, "REAL", False)
    sys.modules.pop("chamfer", None)


# --------------------------------------------------------------------------------------------------------
# real clients, unchanged: Point-MAE's Group (FPS + knn_cuda) and its chamfer loss
# --------------------------------------------------------------------------------------------------------

POINT_MAE_CLIENT = '''
import torch
import torch.nn as nn
from knn_cuda import KNN
from pointnet2_ops import pointnet2_utils
import chamfer


def fps(data, number):
    """data B N 3 -> B number 3"""
    fps_idx = pointnet2_utils.furthest_point_sample(data, number)
    fps_data = pointnet2_utils.gather_operation(data.transpose(1, 2).contiguous(), fps_idx).transpose(1, 2).contiguous()
    return fps_data


class Group(nn.Module):
    def __init__(self, num_group, group_size):
        super().__init__()
        self.num_group = num_group
        self.group_size = group_size
        self.knn = KNN(k=self.group_size, transpose_mode=True)

    def forward(self, xyz):
        """xyz B N 3 -> neighborhood B G M 3, center B G 3"""
        batch_size, num_points, _ = xyz.shape
        center = fps(xyz, self.num_group)
        _, idx = self.knn(xyz, center)  # B G M
        assert idx.size(1) == self.num_group
        assert idx.size(2) == self.group_size
        idx_base = torch.arange(0, batch_size, device=xyz.device).view(-1, 1, 1) * num_points
        idx = idx + idx_base
        idx = idx.view(-1)
        neighborhood = xyz.view(batch_size * num_points, -1)[idx, :]
        neighborhood = neighborhood.view(batch_size, self.num_group, self.group_size, 3).contiguous()
        neighborhood = neighborhood - center.unsqueeze(2)
        return neighborhood, center


class ChamferFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, xyz1, xyz2):
        dist1, dist2, idx1, idx2 = chamfer.forward(xyz1, xyz2)
        ctx.save_for_backward(xyz1, xyz2, idx1, idx2)
        return dist1, dist2

    @staticmethod
    def backward(ctx, grad_dist1, grad_dist2):
        xyz1, xyz2, idx1, idx2 = ctx.saved_tensors
        grad_xyz1, grad_xyz2 = chamfer.backward(xyz1, xyz2, idx1, idx2, grad_dist1, grad_dist2)
        return grad_xyz1, grad_xyz2


class ChamferDistanceL2(torch.nn.Module):
    def __init__(self, ignore_zeros=False):
        super().__init__()
        self.ignore_zeros = ignore_zeros

    def forward(self, xyz1, xyz2):
        batch_size = xyz1.size(0)
        if batch_size == 1 and self.ignore_zeros:
            non_zeros1 = torch.sum(xyz1, dim=2).ne(0)
            non_zeros2 = torch.sum(xyz2, dim=2).ne(0)
            xyz1 = xyz1[non_zeros1].unsqueeze(dim=0)
            xyz2 = xyz2[non_zeros2].unsqueeze(dim=0)
        dist1, dist2 = ChamferFunction.apply(xyz1, xyz2)
        return torch.mean(dist1) + torch.mean(dist2)


class ChamferDistanceL1(torch.nn.Module):
    def __init__(self, ignore_zeros=False):
        super().__init__()
        self.ignore_zeros = ignore_zeros

    def forward(self, xyz1, xyz2):
        dist1, dist2 = ChamferFunction.apply(xyz1, xyz2)
        dist1 = torch.sqrt(dist1)
        dist2 = torch.sqrt(dist2)
        return (torch.mean(dist1) + torch.mean(dist2)) / 2


class TinyMAE(nn.Module):
    """Group, embed each group, predict each group's points back (a masked-autoencoder step in miniature)."""

    def __init__(self, num_group=16, group_size=8):
        super().__init__()
        self.group_divider = Group(num_group, group_size)
        self.encoder = nn.Sequential(nn.Linear(3, 32), nn.GELU(), nn.Linear(32, 32))
        self.decoder = nn.Linear(32 + 3, 3 * group_size)
        self.group_size = group_size

    def forward(self, pts):
        neighborhood, center = self.group_divider(pts)
        tokens = self.encoder(neighborhood).amax(dim=2)  # B G C
        rebuilt = self.decoder(torch.cat([tokens, center], dim=-1))
        b, g, _ = rebuilt.shape
        return neighborhood.reshape(b * g, self.group_size, 3), rebuilt.reshape(b * g, self.group_size, 3)
'''


@pytest.fixture
def clients_installed(monkeypatch):
    names = (
        *NEW_NAMES,
        "pointnet2_ops",
        "pointnet2_ops.pointnet2_utils",
        "pointnet2_ops.pointnet2_modules",
        "pointops",
    )
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    registered = install()
    yield registered
    for name in registered:
        sys.modules.pop(name, None)


def _brute_group(pts, num_group, group_size):
    idx = torch.tensor(
        [fps_reference(cloud.detach().cpu().numpy(), num_group)[0] for cloud in pts], device=pts.device
    )
    center = torch.gather(pts, 1, idx[..., None].expand(-1, -1, 3))
    _, nn_idx = brute_knn(center.detach(), pts.detach(), group_size)
    neighborhood = torch.gather(
        pts[:, None].expand(-1, num_group, -1, -1), 2, nn_idx[..., None].expand(-1, -1, -1, 3)
    )
    return neighborhood - center[:, :, None], center


def _brute_chamfer_l2(a, b):
    d = torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist").square()
    return d.min(2).values.mean() + d.min(1).values.mean()


def test_point_mae_group_and_chamfer_step_unchanged(clients_installed, device):
    namespace: dict = {}
    exec(compile(POINT_MAE_CLIENT, "point_mae_client.py", "exec"), namespace)
    torch.manual_seed(0)
    model = namespace["TinyMAE"]().to(device)
    pts = torch.rand(2, 256, 3, device=device, dtype=torch.float64).requires_grad_(True)
    model = model.double()
    gt, rebuilt = model(pts)
    loss_l2 = namespace["ChamferDistanceL2"]()(rebuilt, gt)
    loss_l1 = namespace["ChamferDistanceL1"]()(rebuilt, gt)
    (loss_l2 + loss_l1).backward()
    grads = {"pts": pts.grad.clone(), **{n: p.grad.clone() for n, p in model.named_parameters()}}

    # the same step on brute-force torch ops
    neighborhood, center = model.group_divider(pts.detach())
    ref_nb, ref_center = _brute_group(pts.detach(), 16, 8)
    torch.testing.assert_close(neighborhood, ref_nb)
    torch.testing.assert_close(center, ref_center)
    pts.grad = None
    model.zero_grad()
    ref_nb, ref_center = _brute_group(pts, 16, 8)
    tokens = model.encoder(ref_nb).amax(dim=2)
    ref_rebuilt = model.decoder(torch.cat([tokens, ref_center], dim=-1)).reshape(32, 8, 3)
    ref_gt = ref_nb.reshape(32, 8, 3)
    d = torch.cdist(ref_rebuilt, ref_gt, compute_mode="donot_use_mm_for_euclid_dist")
    ref_l1 = (d.min(2).values.mean() + d.min(1).values.mean()) / 2
    ref_l2 = _brute_chamfer_l2(ref_rebuilt, ref_gt)
    torch.testing.assert_close(loss_l2, ref_l2)
    torch.testing.assert_close(loss_l1, ref_l1)
    (ref_l2 + ref_l1).backward()
    torch.testing.assert_close(grads["pts"], pts.grad)
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, msg=name)


# --------------------------------------------------------------------------------------------------------
# PyTorch Geometric (< 2.8 calls torch_cluster) after install(), in a fresh interpreter
# --------------------------------------------------------------------------------------------------------

PYG_CLIENT = textwrap.dedent(
    """
    import math, torch, warpgeo.compat
    warpgeo.compat.install()
    import torch_geometric
    import torch_geometric.typing
    if not getattr(torch_geometric.typing, "WITH_TORCH_CLUSTER", False):
        print("SKIP torch_geometric", torch_geometric.__version__, "does not call torch_cluster")
        raise SystemExit(0)
    from torch_geometric.nn import fps, knn, knn_graph, radius, radius_graph

    torch.manual_seed(0)
    x = torch.rand(120, 3)
    batch = torch.tensor([0] * 70 + [1] * 50)
    idx = fps(x, batch, ratio=0.25, random_start=False)
    far = torch.cdist(x[:70], x[:1], compute_mode="donot_use_mm_for_euclid_dist").argmax()
    assert idx.tolist()[:2] == [0, int(far)], idx
    assert idx.shape == (18 + 13,) and (idx[:18] < 70).all() and (idx[18:] >= 70).all()

    d = torch.cdist(x.double(), x.double(), compute_mode="donot_use_mm_for_euclid_dist")
    d = torch.where(batch[:, None] == batch[None, :], d, math.inf)
    edge = knn(x, x[:10], 3, batch, batch[:10])
    order = torch.sort(d[:10], dim=-1, stable=True).indices[:, :3]
    assert edge[1].view(10, 3).tolist() == order.tolist(), edge
    edge = knn_graph(x, 4, batch, loop=False)  # source_to_target: (neighbour, centre)
    assert edge.shape == (2, 480) and (edge[0] != edge[1]).all()
    centre0 = sorted(edge[0][edge[1] == 0].tolist())
    assert centre0 == sorted(torch.sort(d[0], stable=True).indices[1:5].tolist()), centre0
    edge = radius(x, x[:5], 0.2, batch, batch[:5], max_num_neighbors=64)
    for i in range(5):
        assert edge[1][edge[0] == i].tolist() == [j for j in range(120) if float(d[i, j]) < 0.2]
    edge = radius_graph(x, 0.2, batch, loop=False, max_num_neighbors=64)
    expected = {(j, i) for i in range(120) for j in range(120) if i != j and float(d[i, j]) < 0.2}
    assert {tuple(e) for e in edge.t().tolist()} == expected
    print("OK torch_geometric", torch_geometric.__version__)
    """
)


def test_pytorch_geometric_after_install():
    pytest.importorskip("torch_geometric")
    result = subprocess.run([sys.executable, "-c", PYG_CLIENT], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    if result.stdout.startswith("SKIP"):
        pytest.skip(result.stdout.strip())
    assert "OK torch_geometric" in result.stdout
