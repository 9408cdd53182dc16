"""warpgeo.compat: the pointnet2_ops / pointops names give the originals' shapes, dtypes and semantics,
equal warpgeo's own ops, and run PointNet++ code written against pointnet2_ops unchanged."""

from __future__ import annotations

import sys

import pytest
import torch
from reference import fps_reference
from torch import nn

import warpgeo
from warpgeo.compat import install, pointnet2_ops, pointops


def torch_gather(features: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """features (B, C, N), idx (B, ...) -> (B, C, ...) with plain torch.gather."""
    b, c, _ = features.shape
    flat = idx.reshape(b, 1, -1).long().expand(-1, c, -1)
    return torch.gather(features, 2, flat).reshape(b, c, *idx.shape[1:])


# --------------------------------------------------------------------------------------------------------
# pointnet2_ops
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_furthest_point_sample_equals_warpgeo(device, dtype):
    xyz = torch.rand(3, 200, 3, device=device).to(dtype)
    idx = pointnet2_ops.furthest_point_sample(xyz, 40)
    assert idx.dtype == torch.int32 and idx.shape == (3, 40) and idx.device == xyz.device
    torch.testing.assert_close(idx.long(), warpgeo.farthest_point_sampling(xyz, 40))
    for b in range(3):
        expected, _ = fps_reference(xyz[b].double().cpu().numpy(), 40)
        assert idx[b].tolist() == expected


def test_furthest_point_sample_more_than_n_repeats_first(device):
    xyz = torch.rand(2, 5, 3, device=device)
    idx = pointnet2_ops.furthest_point_sample(xyz, 8)
    assert idx.shape == (2, 8)
    for row in idx.tolist():
        assert sorted(row[:5]) == [0, 1, 2, 3, 4]
        assert row[5:] == [row[0]] * 3  # valid indices only, so gather_operation never sees -1


def test_furthest_point_sample_not_differentiable(device):
    xyz = torch.rand(1, 50, 3, device=device, requires_grad=True)
    assert not pointnet2_ops.furthest_point_sample(xyz, 10).requires_grad


def test_gather_operation_forward_backward(device):
    features = torch.randn(2, 6, 30, dtype=torch.float64, device=device, requires_grad=True)
    idx = torch.randint(0, 30, (2, 12), device=device, dtype=torch.int32)
    out = pointnet2_ops.gather_operation(features, idx)
    assert out.shape == (2, 6, 12) and out.dtype == features.dtype
    torch.testing.assert_close(out, torch_gather(features, idx))
    torch.testing.assert_close(out, warpgeo.gather_points(features, idx))
    grad = torch.randn_like(out)
    (ours,) = torch.autograd.grad(out, features, grad)
    (ref,) = torch.autograd.grad(torch_gather(features, idx), features, grad)
    torch.testing.assert_close(ours, ref)
    assert torch.autograd.gradcheck(lambda f: pointnet2_ops.gather_operation(f, idx), (features,))


def test_grouping_operation(device):
    features = torch.randn(2, 4, 25, device=device, requires_grad=True)
    idx = torch.randint(0, 25, (2, 7, 5), device=device, dtype=torch.int32)
    out = pointnet2_ops.grouping_operation(features, idx)
    assert out.shape == (2, 4, 7, 5)
    torch.testing.assert_close(out, torch_gather(features, idx))
    out.sum().backward()
    counts = torch.zeros(2, 25, device=device).scatter_add_(
        1, idx.long().reshape(2, -1), torch.ones(2, 35, device=device)
    )
    torch.testing.assert_close(features.grad, counts[:, None].expand(-1, 4, -1))


def _ball_query_naive(radius, nsample, xyz, new_xyz):
    out = torch.zeros(new_xyz.shape[0], new_xyz.shape[1], nsample, dtype=torch.int32)
    for b in range(xyz.shape[0]):
        for m in range(new_xyz.shape[1]):
            hits = [
                n for n in range(xyz.shape[1]) if float(((xyz[b, n] - new_xyz[b, m]) ** 2).sum()) < radius**2
            ]
            hits = hits[:nsample]
            if hits:
                out[b, m] = torch.tensor(hits + [hits[0]] * (nsample - len(hits)))
    return out


def test_ball_query_matches_the_extension_conventions(device):
    xyz = torch.rand(2, 60, 3, device=device)
    new_xyz = torch.cat([xyz[:, :6], torch.full((2, 1, 3), 5.0, device=device)], dim=1)  # last: no hits
    idx = pointnet2_ops.ball_query(0.3, 8, xyz, new_xyz)
    assert idx.dtype == torch.int32 and idx.shape == (2, 7, 8)
    assert idx.cpu().tolist() == _ball_query_naive(0.3, 8, xyz.cpu(), new_xyz.cpu()).tolist()
    assert (idx[:, -1] == 0).all()


def test_pointnet2_utils_alias():
    from warpgeo.compat.pointnet2_ops import pointnet2_utils

    assert pointnet2_utils.furthest_point_sample is pointnet2_ops.furthest_point_sample


def test_pointnet2_errors():
    with pytest.raises(ValueError, match=r"xyz must have shape \(B, N, 3\)"):
        pointnet2_ops.furthest_point_sample(torch.rand(10, 3), 4)
    with pytest.raises(TypeError, match="npoint must be an int"):
        pointnet2_ops.furthest_point_sample(torch.rand(1, 10, 3), 4.0)
    with pytest.raises(ValueError, match="npoint must be positive"):
        pointnet2_ops.furthest_point_sample(torch.rand(1, 10, 3), 0)
    with pytest.raises(ValueError, match=r"idx must have shape \(B, npoint\)"):
        pointnet2_ops.gather_operation(torch.rand(1, 2, 10), torch.zeros(1, 2, 3, dtype=torch.int32))
    with pytest.raises(IndexError):
        pointnet2_ops.gather_operation(torch.rand(1, 2, 10), torch.tensor([[3, 10]], dtype=torch.int32))


# --------------------------------------------------------------------------------------------------------
# pointops
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_furthestsampling_packed(device, index_dtype):
    sizes, picks = [100, 37, 64], [20, 37, 1]
    clouds = [torch.rand(n, 3, device=device) for n in sizes]
    xyz = torch.cat(clouds)
    offset = torch.tensor(sizes, device=device).cumsum(0).to(index_dtype)
    new_offset = torch.tensor(picks, device=device).cumsum(0).to(index_dtype)
    idx = pointops.furthestsampling(xyz, offset, new_offset)
    assert idx.dtype == torch.int32 and idx.shape == (sum(picks),) and idx.device == xyz.device
    start, new_start = 0, 0
    for cloud, n, k in zip(clouds, sizes, picks, strict=True):
        expected = warpgeo.farthest_point_sampling(cloud, k) + start  # global indices
        assert idx[new_start : new_start + k].tolist() == expected.tolist()
        start, new_start = start + n, new_start + k
    torch.testing.assert_close(
        xyz[idx.long()][:20], clouds[0][warpgeo.farthest_point_sampling(clouds[0], 20)]
    )


def test_furthestsampling_zero_samples_and_empty_cloud(device):
    xyz = torch.rand(30, 3, device=device)
    offset = torch.tensor([10, 10, 30], dtype=torch.int32, device=device)  # the middle cloud is empty
    new_offset = torch.tensor([0, 0, 5], dtype=torch.int32, device=device)
    idx = pointops.furthestsampling(xyz, offset, new_offset)
    assert idx.tolist() == (warpgeo.farthest_point_sampling(xyz[10:], 5) + 10).tolist()


def test_furthestsampling_batched_form(device):
    xyz = torch.rand(2, 50, 3, device=device)
    idx = pointops.furthestsampling(xyz, 12)
    assert idx.dtype == torch.int32 and idx.shape == (2, 12)
    torch.testing.assert_close(idx.long(), warpgeo.farthest_point_sampling(xyz, 12))


def test_furthestsampling_errors():
    xyz = torch.rand(30, 3)
    offset = torch.tensor([10, 30], dtype=torch.int32)
    with pytest.raises(ValueError, match="asks cloud 0 for 11 samples"):
        pointops.furthestsampling(xyz, offset, torch.tensor([11, 12], dtype=torch.int32))
    with pytest.raises(ValueError, match="end at N=30"):
        pointops.furthestsampling(xyz, torch.tensor([10, 20], dtype=torch.int32), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="non-decreasing"):
        pointops.furthestsampling(xyz, torch.tensor([20, 10, 30]), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="same length"):
        pointops.furthestsampling(xyz, offset, torch.tensor([1], dtype=torch.int32))
    with pytest.raises(TypeError, match="offset must be an int32 or int64"):
        pointops.furthestsampling(xyz, torch.tensor([30.0]), torch.tensor([3]))
    with pytest.raises(ValueError, match="new_offset is required"):
        pointops.furthestsampling(xyz, offset)
    with pytest.raises(ValueError, match=r"m must lie in \[1, N=50\]"):
        pointops.furthestsampling(torch.rand(1, 50, 3), 51)


def test_gathering(device):
    features = torch.randn(2, 3, 40, dtype=torch.float64, device=device, requires_grad=True)
    idx = torch.randint(0, 40, (2, 9), dtype=torch.int32, device=device)
    out = pointops.gathering(features, idx)
    torch.testing.assert_close(out, torch_gather(features, idx))
    assert torch.autograd.gradcheck(lambda f: pointops.gathering(f, idx), (features,))


# --------------------------------------------------------------------------------------------------------
# install() and a PointNet++ snippet written against pointnet2_ops, unchanged
# --------------------------------------------------------------------------------------------------------

# The set-abstraction module as PointNet++ code bases write it against the CUDA extension (QueryAndGroup +
# an SA layer), verbatim in style: only `pointnet2_utils` names, contiguous() calls and in-place ops included.
POINTNET2_SNIPPET = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from pointnet2_ops import pointnet2_utils


class QueryAndGroup(nn.Module):
    def __init__(self, radius, nsample):
        super().__init__()
        self.radius, self.nsample = radius, nsample

    def forward(self, xyz, new_xyz, features=None):
        idx = pointnet2_utils.ball_query(self.radius, self.nsample, xyz, new_xyz)
        xyz_trans = xyz.transpose(1, 2).contiguous()
        grouped_xyz = pointnet2_utils.grouping_operation(xyz_trans, idx)  # (B, 3, npoint, nsample)
        grouped_xyz -= new_xyz.transpose(1, 2).unsqueeze(-1)
        if features is not None:
            grouped_features = pointnet2_utils.grouping_operation(features, idx)
            return torch.cat([grouped_xyz, grouped_features], dim=1)
        return grouped_xyz


class PointnetSAModule(nn.Module):
    def __init__(self, npoint, radius, nsample, mlp):
        super().__init__()
        self.npoint = npoint
        self.grouper = QueryAndGroup(radius, nsample)
        layers = []
        for i in range(len(mlp) - 1):
            layers += [nn.Conv2d(mlp[i], mlp[i + 1], kernel_size=1, bias=False), nn.GroupNorm(2, mlp[i + 1]),
                       nn.ReLU(True)]
        self.mlp = nn.Sequential(*layers)

    def forward(self, xyz, features):
        xyz_flipped = xyz.transpose(1, 2).contiguous()
        new_xyz = (
            pointnet2_utils.gather_operation(xyz_flipped, pointnet2_utils.furthest_point_sample(xyz, self.npoint))
            .transpose(1, 2)
            .contiguous()
        )
        new_features = self.mlp(self.grouper(xyz, new_xyz, features))  # (B, mlp[-1], npoint, nsample)
        new_features = F.max_pool2d(new_features, kernel_size=[1, new_features.size(3)])
        return new_xyz, new_features.squeeze(-1)
"""


@pytest.fixture
def installed(monkeypatch):
    for name in ("pointnet2_ops", "pointnet2_ops.pointnet2_utils", "pointops"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    registered = install()
    yield registered
    for name in registered:
        sys.modules.pop(name, None)


def test_install_registers_the_original_names(installed):
    assert set(installed) == {"pointnet2_ops", "pointnet2_ops.pointnet2_utils", "pointops"}
    import pointops as po
    from pointnet2_ops import pointnet2_utils

    assert pointnet2_utils.gather_operation is pointnet2_ops.gather_operation
    assert po.furthestsampling is pointops.furthestsampling


def test_install_leaves_an_imported_original_alone(installed):
    sentinel = object()
    sys.modules["pointops"] = sentinel
    assert "pointops" not in install()
    assert sys.modules["pointops"] is sentinel


def _torch_sa(module, xyz, features):
    """The same SA layer with plain torch indexing (the reference the snippet must match)."""
    idx = warpgeo.farthest_point_sampling(xyz, module.npoint)
    new_xyz = torch.gather(xyz, 1, idx[..., None].expand(-1, -1, 3))
    group = pointnet2_ops.ball_query(module.grouper.radius, module.grouper.nsample, xyz, new_xyz)
    grouped_xyz = torch_gather(xyz.transpose(1, 2), group) - new_xyz.transpose(1, 2)[..., None]
    grouped = torch.cat([grouped_xyz, torch_gather(features, group)], dim=1)
    return new_xyz, module.mlp(grouped).amax(dim=-1)


def test_pointnet2_snippet_runs_unchanged(installed, device):
    namespace: dict = {}
    exec(compile(POINTNET2_SNIPPET, "pointnet2_snippet.py", "exec"), namespace)
    torch.manual_seed(0)
    sa1 = namespace["PointnetSAModule"](npoint=32, radius=0.3, nsample=8, mlp=[3 + 4, 16, 32]).to(device)
    sa2 = namespace["PointnetSAModule"](npoint=8, radius=0.6, nsample=8, mlp=[3 + 32, 32, 64]).to(device)
    xyz = torch.rand(2, 128, 3, device=device)
    features = torch.randn(2, 4, 128, device=device, requires_grad=True)

    new_xyz, f1 = sa1(xyz, features)
    _, f2 = sa2(new_xyz, f1)
    assert new_xyz.shape == (2, 32, 3) and f1.shape == (2, 32, 32) and f2.shape == (2, 64, 8)
    f2.square().mean().backward()
    grad = features.grad.clone()
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0

    # the same network with torch.gather in place of the compat ops: same outputs, same gradient
    features.grad = None
    ref_xyz, r1 = _torch_sa(sa1, xyz, features)
    _, r2 = _torch_sa(sa2, ref_xyz, r1)
    torch.testing.assert_close(new_xyz, ref_xyz)
    torch.testing.assert_close(f2, r2)
    r2.square().mean().backward()
    torch.testing.assert_close(grad, features.grad)


def test_pointnet2_snippet_backward_into_an_mlp(installed):
    """The grads reach the layers before the SA module: features come from a learnable Conv1d."""
    namespace: dict = {}
    exec(compile(POINTNET2_SNIPPET, "pointnet2_snippet.py", "exec"), namespace)
    embed = nn.Conv1d(3, 4, 1)
    sa = namespace["PointnetSAModule"](npoint=16, radius=0.4, nsample=8, mlp=[3 + 4, 8, 8])
    xyz = torch.rand(2, 64, 3)
    _, out = sa(xyz, embed(xyz.transpose(1, 2)))
    out.sum().backward()
    assert embed.weight.grad is not None and embed.weight.grad.abs().sum() > 0
