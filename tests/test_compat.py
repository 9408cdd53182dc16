"""warpgeo.compat: the pointnet2_ops / pointops names give the originals' shapes, dtypes and semantics,
equal warpgeo's own ops, and run PointNet++ code written against pointnet2_ops unchanged."""

from __future__ import annotations

import sys

import numpy as np
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
    for name in (
        "pointnet2_ops",
        "pointnet2_ops.pointnet2_utils",
        "pointnet2_ops.pointnet2_modules",
        "pointops",
        "knn_cuda",
        "chamfer",
        "torch_cluster",
    ):
        monkeypatch.delitem(sys.modules, name, raising=False)
    registered = install()
    yield registered
    for name in registered:
        sys.modules.pop(name, None)


def test_install_registers_the_original_names(installed):
    assert set(installed) == {
        "pointnet2_ops",
        "pointnet2_ops.pointnet2_utils",
        "pointnet2_ops.pointnet2_modules",
        "pointops",
        "knn_cuda",
        "chamfer",
        "torch_cluster",
    }
    import pointops as po
    from pointnet2_ops import pointnet2_utils
    from pointnet2_ops.pointnet2_modules import PointnetFPModule, PointnetSAModule, PointnetSAModuleMSG

    assert PointnetSAModule.__module__ == "warpgeo.compat.pointnet2_ops.pointnet2_modules"
    assert PointnetSAModuleMSG and PointnetFPModule

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


# --------------------------------------------------------------------------------------------------------
# three_nn / three_interpolate / the .apply classes
# --------------------------------------------------------------------------------------------------------


def test_three_nn_and_interpolate(device):
    from reference import knn_reference, three_interpolate_reference

    unknown, known = torch.rand(2, 40, 3, device=device), torch.rand(2, 25, 3, device=device)
    dist, idx = pointnet2_ops.three_nn(unknown, known)
    assert idx.dtype == torch.int32 and dist.shape == idx.shape == (2, 40, 3)
    for b in range(2):
        ref_d, ref_i = knn_reference(unknown[b].cpu(), known[b].cpu(), 3)
        assert idx[b].tolist() == ref_i.tolist()
        torch.testing.assert_close(dist[b].cpu().double(), torch.from_numpy(ref_d), rtol=1e-6, atol=0)
    feats = torch.randn(2, 5, 25, device=device, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(2, 40, 3, device=device, dtype=torch.float64)
    out = pointnet2_ops.ThreeInterpolate.apply(feats, idx, weight)
    ref = three_interpolate_reference(feats.detach().cpu(), idx.cpu(), weight.cpu())
    torch.testing.assert_close(out.detach().cpu(), torch.from_numpy(ref))
    assert torch.autograd.gradcheck(lambda f: pointnet2_ops.three_interpolate(f, idx, weight), (feats,))


def test_three_nn_with_fewer_than_three_known():
    dist, idx = pointnet2_ops.three_nn(torch.rand(1, 4, 3), torch.rand(1, 2, 3))
    assert (idx[..., 2] == idx[..., 0]).all() and torch.isinf(dist[..., 2]).all()


def test_apply_classes_are_the_functions():
    xyz = torch.rand(2, 64, 3)
    assert torch.equal(
        pointnet2_ops.FurthestPointSampling.apply(xyz, 8), pointnet2_ops.furthest_point_sample(xyz, 8)
    )
    idx = pointnet2_ops.BallQuery.apply(0.3, 6, xyz, xyz[:, :8])
    assert torch.equal(idx, pointnet2_ops.ball_query(0.3, 6, xyz, xyz[:, :8]))
    feats = torch.randn(2, 4, 64)
    assert torch.equal(pointnet2_ops.GroupingOperation.apply(feats, idx), torch_gather(feats, idx))
    assert torch.equal(
        pointnet2_ops.GatherOperation.apply(feats, idx[..., 0]), torch_gather(feats, idx[..., 0])
    )
    _, i = pointnet2_ops.ThreeNN.apply(xyz, xyz[:, :10])
    assert torch.equal(i, pointnet2_ops.three_nn(xyz, xyz[:, :10])[1])


# --------------------------------------------------------------------------------------------------------
# PointNet++ models built from compat pointnet2_modules, against the same models on plain-torch ops
# --------------------------------------------------------------------------------------------------------


class _TorchUtils:
    """pointnet2_utils written with brute-force torch (the reference the compat modules must match)."""

    furthest_point_sample = staticmethod(pointnet2_ops.furthest_point_sample)  # tested against fps_reference
    gather_operation = staticmethod(torch_gather)
    grouping_operation = staticmethod(torch_gather)

    @staticmethod
    def ball_query(radius, nsample, xyz, new_xyz):
        d2 = (new_xyz[:, :, None] - xyz[:, None]).square().sum(-1)
        n = xyz.shape[1]
        key = torch.where(d2 < radius * radius, torch.arange(n), n).sort(dim=-1).values[..., :nsample]
        first = torch.where(key[..., :1] < n, key[..., :1], 0)
        return torch.where(key < n, key, first)

    @staticmethod
    def three_nn(unknown, known):
        d = torch.cdist(unknown.double(), known.double(), compute_mode="donot_use_mm_for_euclid_dist")
        dist, idx = torch.sort(d, dim=-1, stable=True)
        # the extension's ThreeNN is not differentiable: the weights are constants to autograd
        return dist[..., :3].to(unknown.dtype).detach(), idx[..., :3]

    @staticmethod
    def three_interpolate(features, idx, weight):
        return (torch_gather(features, idx) * weight[:, None]).sum(-1)


def _utils_namespace(utils):
    import types

    from warpgeo.compat.pointnet2_ops import pointnet2_utils

    ns = types.SimpleNamespace(**{name: getattr(pointnet2_utils, name) for name in pointnet2_utils.__all__})
    for name in ("furthest_point_sample", "gather_operation", "grouping_operation", "ball_query", "three_nn"):
        setattr(ns, name, getattr(utils, name))
    ns.three_interpolate = utils.three_interpolate

    class QueryAndGroup(pointnet2_utils.QueryAndGroup):
        def forward(self, xyz, new_xyz, features=None):
            idx = utils.ball_query(self.radius, self.nsample, xyz, new_xyz)
            grouped_xyz = (
                utils.grouping_operation(xyz.transpose(1, 2), idx) - new_xyz.transpose(1, 2)[..., None]
            )
            if features is None:
                return grouped_xyz
            grouped = utils.grouping_operation(features, idx)
            return torch.cat([grouped_xyz, grouped], dim=1) if self.use_xyz else grouped

    ns.QueryAndGroup = QueryAndGroup
    return ns


def _pointnet2(kind: str):
    """PointNet++ SSG / MSG, classification / segmentation, as Pointnet2_PyTorch builds them (smaller)."""
    from warpgeo.compat.pointnet2_ops.pointnet2_modules import (
        PointnetFPModule,
        PointnetSAModule,
        PointnetSAModuleMSG,
    )

    if kind.startswith("ssg"):
        sa = [
            PointnetSAModule(npoint=64, radius=0.2, nsample=16, mlp=[3, 16, 32]),
            PointnetSAModule(npoint=16, radius=0.4, nsample=8, mlp=[32, 32, 64]),
        ]
    else:
        sa = [
            PointnetSAModuleMSG(npoint=64, radii=[0.1, 0.3], nsamples=[8, 16], mlps=[[3, 16], [3, 16, 16]]),
            PointnetSAModuleMSG(npoint=16, radii=[0.3, 0.5], nsamples=[8, 8], mlps=[[32, 32], [32, 32]]),
        ]
    sa.append(PointnetSAModule(mlp=[64, 64]))  # group all
    fp = [PointnetFPModule(mlp=[64 + 32, 32]), PointnetFPModule(mlp=[32 + 3, 16])]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.sa, self.fp = nn.ModuleList(sa), nn.ModuleList(fp)

        def forward(self, pointcloud):
            xyz, features = pointcloud[..., :3].contiguous(), pointcloud[..., 3:].transpose(1, 2).contiguous()
            l_xyz, l_feats = [xyz], [features]
            for module in self.sa:
                new_xyz, new_feats = module(l_xyz[-1], l_feats[-1])
                l_xyz.append(new_xyz)
                l_feats.append(new_feats)
            if kind.endswith("cls"):
                return l_feats[-1].squeeze(-1)
            feats = self.fp[0](l_xyz[1], l_xyz[2], l_feats[1], l_feats[2])
            return self.fp[1](l_xyz[0], l_xyz[1], l_feats[0], feats)

    return Net()


@pytest.mark.parametrize("kind", ["ssg_cls", "ssg_seg", "msg_cls", "msg_seg"])
def test_pointnet2_models_match_torch_reference(kind, monkeypatch):
    from warpgeo.compat.pointnet2_ops import pointnet2_modules

    torch.manual_seed(0)
    net = _pointnet2(kind).double()
    cloud = torch.rand(2, 256, 6, dtype=torch.float64)
    results = []
    for utils in (None, _TorchUtils):
        if utils is not None:
            monkeypatch.setattr(pointnet2_modules, "pointnet2_utils", _utils_namespace(utils))
        points = cloud.clone().requires_grad_()
        net.zero_grad()
        out = net(points)
        out.square().mean().backward()
        results.append(
            (
                out.detach(),
                points.grad,
                [None if p.grad is None else p.grad.clone() for p in net.parameters()],
            )
        )
    (out, grad, params), (ref_out, ref_grad, ref_params) = results
    assert out.shape == ((2, 64) if kind.endswith("cls") else (2, 16, 256))
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(grad, ref_grad)
    assert grad.abs().sum() > 0
    for a, b in zip(params, ref_params, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b)


def test_sa_module_arguments_are_the_originals():
    from warpgeo.compat.pointnet2_ops.pointnet2_modules import PointnetSAModule, PointnetSAModuleMSG

    mlp = [3, 8]
    sa = PointnetSAModule(mlp, npoint=4, radius=0.2, nsample=4, bn=False, use_xyz=True)
    assert mlp == [3, 8]  # copied, not edited in place
    conv = sa.mlps[0][0]
    assert conv.in_channels == 6 and conv.bias is not None
    assert isinstance(PointnetSAModuleMSG(None, [None], [None], [[3, 4]]).groupers[0], pointnet2_ops.GroupAll)
    with pytest.raises(ValueError, match="same length"):
        PointnetSAModuleMSG(4, [0.1, 0.2], [4], [[3, 4]])
    _, f = PointnetSAModule([0, 8], npoint=4, radius=0.3, nsample=4)(torch.rand(1, 32, 3), None)
    assert f.shape == (1, 8, 4)


# --------------------------------------------------------------------------------------------------------
# pointops neighbours, grouping, interpolation, and a Point-Transformer-style block
# --------------------------------------------------------------------------------------------------------


def _packed_clouds(sizes, device="cpu", dtype=torch.float32):
    xyz = torch.rand(sum(sizes), 3, device=device, dtype=dtype)
    return xyz, torch.tensor(sizes, device=device).cumsum(0).to(torch.int32)


def test_knnquery_packed_matches_reference(device):
    from reference import knn_reference

    sizes, new_sizes = [60, 3, 90], [10, 4, 20]
    xyz, offset = _packed_clouds(sizes, device)
    new_xyz, new_offset = _packed_clouds(new_sizes, device)
    idx, _ = pointops.knnquery(5, xyz, new_xyz, offset, new_offset)
    idx_pc, dist_pc = pointops.knn_query(5, xyz, offset, new_xyz, new_offset)
    assert idx.dtype == idx_pc.dtype == torch.int32 and idx.shape == (34, 5)
    start, new_start = 0, 0
    for n, m in zip(sizes, new_sizes, strict=True):
        ref_d, ref_i = knn_reference(
            new_xyz[new_start : new_start + m].cpu(), xyz[start : start + n].cpu(), 5
        )
        glob = np.where(ref_i >= 0, ref_i + start, -1)
        assert idx_pc[new_start : new_start + m].tolist() == glob.tolist()
        assert idx[new_start : new_start + m].tolist() == np.where(glob >= 0, glob, start).tolist()
        torch.testing.assert_close(dist_pc[new_start : new_start + m].cpu().double(), torch.from_numpy(ref_d))
        start, new_start = start + n, new_start + m


def test_pointcept_ball_query_and_grouping(device):
    xyz, offset = _packed_clouds([80, 50], device)
    feat = torch.randn(130, 4, device=device, requires_grad=True)
    idx, _ = pointops.ball_query(6, 0.3, 0.05, xyz, offset)
    assert idx.dtype == torch.int32 and idx.shape == (130, 6)
    for row in range(0, 130, 13):
        lo = 0 if row < 80 else 80
        d = (xyz[lo : lo + (80 if lo == 0 else 50)] - xyz[row]).norm(dim=-1)
        ok = ((d >= 0.05) & (d < 0.3)).nonzero()[:, 0]
        expected = ok[torch.sort(d[ok], stable=True).indices][:6] + lo
        assert idx[row, : len(expected)].tolist() == expected.tolist()
        assert (idx[row, len(expected) :] == -1).all()
    grouped, gidx = pointops.ball_query_and_group(
        feat, xyz, offset, max_radio=0.3, min_radio=0.05, nsample=6, with_xyz=True
    )
    assert torch.equal(gidx, idx) and grouped.shape == (130, 6, 7)
    pad = idx < 0
    assert (grouped[pad] == 0).all()
    valid = ~pad
    torch.testing.assert_close(grouped[..., 3:][valid], feat[idx.long()][valid])
    torch.testing.assert_close(grouped[..., :3][valid], (xyz[idx.long()] - xyz[:, None])[valid])


def test_queryandgroup_and_interpolation_match_torch(device):
    xyz, offset = _packed_clouds([70, 40], device, torch.float64)
    new_offset = torch.tensor([20, 30], dtype=torch.int32, device=device)
    sub = pointops.furthestsampling(xyz, offset, new_offset)
    new_xyz = xyz[sub.long()]
    feat = torch.randn(110, 5, device=device, dtype=torch.float64, requires_grad=True)
    grouped = pointops.queryandgroup(8, xyz, new_xyz, feat, None, offset, new_offset, use_xyz=True)
    idx, _ = pointops.knnquery(8, xyz, new_xyz, offset, new_offset)
    ref = torch.cat([xyz[idx.long()] - new_xyz[:, None], feat[idx.long()]], dim=-1)
    torch.testing.assert_close(grouped, ref)
    assert torch.equal(pointops.grouping(feat, idx), feat[idx.long()])
    # interpolation back to every point: inverse-distance weights over 3 neighbours
    up = pointops.interpolation(new_xyz, xyz, feat[sub.long()], new_offset, offset)
    i3, d3 = pointops.knnquery(3, new_xyz, xyz, new_offset, offset)
    w = 1.0 / (d3 + 1e-8)
    w = w / w.sum(1, keepdim=True)
    ref_up = (feat[sub.long()][i3.long()] * w[..., None]).sum(1)
    torch.testing.assert_close(up, ref_up)
    assert torch.autograd.gradcheck(
        lambda f: pointops.interpolation(new_xyz, xyz, f, new_offset, offset),
        (feat[:30].detach().requires_grad_(),),
    )


class _PointTransformerLayer(nn.Module):
    """Point Transformer's vector-attention layer, as the POSTECH code writes it against pointops."""

    def __init__(self, planes, nsample=8):
        super().__init__()
        self.nsample = nsample
        self.linear_q, self.linear_k, self.linear_v = (nn.Linear(planes, planes) for _ in range(3))
        self.linear_p = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True), nn.Linear(3, planes))
        self.linear_w = nn.Sequential(
            nn.Linear(planes, planes), nn.ReLU(inplace=True), nn.Linear(planes, planes)
        )
        self.softmax = nn.Softmax(dim=1)

    def forward(self, pxo):
        p, x, o = pxo
        x_q, x_k, x_v = self.linear_q(x), self.linear_k(x), self.linear_v(x)
        x_k = pointops.queryandgroup(self.nsample, p, p, x_k, None, o, o, use_xyz=True)
        x_v = pointops.queryandgroup(self.nsample, p, p, x_v, None, o, o, use_xyz=False)
        p_r, x_k = x_k[:, :, 0:3], x_k[:, :, 3:]
        p_r = self.linear_p(p_r)
        w = x_k - x_q.unsqueeze(1) + p_r
        w = self.softmax(self.linear_w(w))
        return ((x_v + p_r) * w).sum(1)


def test_point_transformer_block_runs(device):
    """A PT layer, a transition down (FPS + kNN grouping + max) and up (interpolation), forward + backward."""
    torch.manual_seed(0)
    sizes = [120, 80]
    p, o = _packed_clouds(sizes, device)
    p.requires_grad_()
    x = torch.randn(200, 8, device=device, requires_grad=True)
    layer, down = _PointTransformerLayer(8).to(device), nn.Linear(3 + 8, 8).to(device)
    h = layer((p, x, o))
    n_o = torch.tensor([30, 50], dtype=torch.int32, device=device)
    idx = pointops.furthestsampling(p, o, n_o)
    n_p = p[idx.long()]
    pooled = down(pointops.queryandgroup(8, p, n_p, h, None, o, n_o, use_xyz=True)).amax(dim=1)  # (50, 8)
    up = pointops.interpolation(n_p, p, pooled, n_o, o)  # (200, 8)
    pc_grouped, _ = pointops.knn_query_and_group(up, p, o, nsample=4, with_xyz=True)
    loss = (h + up).square().mean() + pc_grouped.square().mean()
    loss.backward()
    assert h.shape == (200, 8) and pooled.shape == (50, 8)
    for t in (p.grad, x.grad, layer.linear_q.weight.grad):
        assert t is not None and torch.isfinite(t).all() and t.abs().sum() > 0


def test_compat_calls_public_functions_only():
    """compat is a thin layer over the public API: no private name of warpgeo (``warpgeo._interop``,
    ``neighbors._run_ball_query``, ``warpgeo.fps._x``, ...) is imported or reached from warpgeo/compat/, only
    its own helpers (``warpgeo.compat._common``)."""
    import ast
    from pathlib import Path

    import warpgeo.compat

    root = Path(warpgeo.compat.__file__).parent
    public = set(warpgeo.__all__)
    found = []
    files = sorted(root.rglob("*.py"))
    assert len(files) >= 5, files
    for path in files:
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases = {"warpgeo"}  # names bound to the warpgeo package itself
        package = ".".join(["warpgeo", *path.relative_to(root.parent).parent.parts])  # warpgeo.compat[.sub]
        for node in ast.walk(tree):
            module = _absolute(node, package) if isinstance(node, ast.ImportFrom) else ""
            if module == "warpgeo" or module.startswith("warpgeo."):
                if module == "warpgeo.compat" or module.startswith("warpgeo.compat."):
                    continue
                for alias in node.names:
                    if module != "warpgeo" or alias.name not in public:
                        found.append(f"{path.name}:{node.lineno} from {module} import {alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("warpgeo") and not alias.name.startswith("warpgeo.compat"):
                        if alias.name != "warpgeo":
                            found.append(f"{path.name}:{node.lineno} import {alias.name}")
                        aliases.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            reaches = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if reaches and node.value.id in aliases and node.attr not in public | {"compat"}:
                found.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
    assert not found, f"compat reaches past the public API: {found}"


def _absolute(node, package: str) -> str:
    """The absolute module of a ``from ... import`` in a module of ``package`` (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def test_compat_guard_sees_relative_imports():
    """The guard resolves ``from ..world import x`` in warpgeo/compat/curobo.py to ``warpgeo.world``."""
    import ast

    (rel,) = ast.parse("from ..world import compose_poses").body
    (up,) = ast.parse("from ... import knn").body
    (own,) = ast.parse("from . import pointnet2_utils").body
    assert _absolute(rel, "warpgeo.compat") == "warpgeo.world"
    assert _absolute(up, "warpgeo.compat.pointnet2_ops") == "warpgeo"
    assert _absolute(own, "warpgeo.compat.pointnet2_ops") == "warpgeo.compat.pointnet2_ops"


def test_curobo_composes_poses_as_matrices_do():
    """cuRobo's obstacle frames: compat.curobo's own pose composition equals the product of the poses' 4x4
    matrices (scipy's quaternions, scalar last)."""
    from scipy.spatial.transform import Rotation

    from warpgeo.compat import curobo

    def matrix(pose):
        m = np.eye(4)
        m[:3, :3] = Rotation.from_quat([*pose[4:], pose[3]]).as_matrix()
        m[:3, 3] = pose[:3]
        return m

    rng = np.random.default_rng(0)
    for _ in range(20):
        a, b = (np.concatenate([rng.normal(size=3), q / np.linalg.norm(q)]) for q in rng.normal(size=(2, 4)))
        got = curobo._compose(a, b)
        np.testing.assert_allclose(matrix(got), matrix(a) @ matrix(b), atol=1e-12)
