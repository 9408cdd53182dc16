"""``pointnet2_ops.pointnet2_modules``: PointNet++'s set-abstraction and feature-propagation layers.

Written from the documented behaviour of the original (Pointnet2_PyTorch), on :mod:`.pointnet2_utils`:

* ``PointnetSAModuleMSG(npoint, radii, nsamples, mlps, bn=True, use_xyz=True)``: FPS picks ``npoint``
  centres (``None``: one group of all points, ``GroupAll``); for each scale ``i`` a ball query of radius
  ``radii[i]`` groups ``nsamples[i]`` neighbours (coordinates relative to the centre, then the features),
  a shared MLP of 1x1 ``Conv2d`` (+ ``BatchNorm2d`` with ``bn``, no conv bias then) + ``ReLU`` maps
  ``mlps[i]`` (its first entry + 3 with ``use_xyz``), and a max over the neighbours; the scales' features
  are concatenated. ``forward(xyz (B, N, 3), features (B, C, N) | None)`` ->
  ``(new_xyz (B, npoint, 3) | None, new_features (B, sum_i mlps[i][-1], npoint))``.
* ``PointnetSAModule(mlp, npoint=None, radius=None, nsample=None, bn=True, use_xyz=True)``: one scale.
* ``PointnetFPModule(mlp, bn=True)``: ``forward(unknown (B, n, 3), known (B, m, 3) | None, unknow_feats
  (B, C1, n) | None, known_feats (B, C2, m))`` -> ``(B, mlp[-1], n)``: inverse-distance interpolation of
  ``known_feats`` from the three nearest known points (weights ``1 / (d + 1e-8)``, normalised; with
  ``known=None`` the single known feature is broadcast), concatenated with ``unknow_feats``, through a
  shared MLP.

One difference: the constructors copy ``mlps`` instead of adding 3 to the caller's lists in place.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import pointnet2_utils

__all__ = ["PointnetFPModule", "PointnetSAModule", "PointnetSAModuleMSG", "build_shared_mlp"]


def build_shared_mlp(mlp_spec: list[int], bn: bool = True) -> nn.Sequential:
    """1x1 ``Conv2d`` layers ``mlp_spec[i - 1] -> mlp_spec[i]``, each with ``BatchNorm2d`` (``bn``) and ``ReLU``."""
    layers: list[nn.Module] = []
    for i in range(1, len(mlp_spec)):
        layers.append(nn.Conv2d(mlp_spec[i - 1], mlp_spec[i], kernel_size=1, bias=not bn))
        if bn:
            layers.append(nn.BatchNorm2d(mlp_spec[i]))
        layers.append(nn.ReLU(True))
    return nn.Sequential(*layers)


class _PointnetSAModuleBase(nn.Module):
    def __init__(self):
        super().__init__()
        self.npoint = None
        self.groupers = None
        self.mlps = None

    def forward(self, xyz: torch.Tensor, features: torch.Tensor | None = None):
        """``xyz (B, N, 3)``, ``features (B, C, N)`` or None -> ``(new_xyz (B, npoint, 3), (B, C', npoint))``."""
        new_xyz = None
        if self.npoint is not None:
            idx = pointnet2_utils.furthest_point_sample(xyz, self.npoint)
            new_xyz = pointnet2_utils.gather_operation(xyz.transpose(1, 2), idx).transpose(1, 2).contiguous()
        outs = []
        for grouper, mlp in zip(self.groupers, self.mlps, strict=True):
            grouped = mlp(grouper(xyz, new_xyz, features))  # (B, C', npoint, nsample)
            outs.append(F.max_pool2d(grouped, kernel_size=[1, grouped.size(3)]).squeeze(-1))
        return new_xyz, torch.cat(outs, dim=1)


class PointnetSAModuleMSG(_PointnetSAModuleBase):
    """Multi-scale set abstraction (see the module docstring)."""

    def __init__(self, npoint, radii, nsamples, mlps, bn=True, use_xyz=True):
        super().__init__()
        if not len(radii) == len(nsamples) == len(mlps):
            raise ValueError(
                f"radii, nsamples and mlps must have the same length; got {len(radii)}, {len(nsamples)}, "
                f"{len(mlps)}"
            )
        self.npoint = npoint
        self.groupers = nn.ModuleList()
        self.mlps = nn.ModuleList()
        for radius, nsample, spec in zip(radii, nsamples, mlps, strict=True):
            self.groupers.append(
                pointnet2_utils.QueryAndGroup(radius, nsample, use_xyz=use_xyz)
                if npoint is not None
                else pointnet2_utils.GroupAll(use_xyz)
            )
            spec = list(spec)
            if use_xyz:
                spec[0] += 3
            self.mlps.append(build_shared_mlp(spec, bn))


class PointnetSAModule(PointnetSAModuleMSG):
    """Single-scale set abstraction (see the module docstring)."""

    def __init__(self, mlp, npoint=None, radius=None, nsample=None, bn=True, use_xyz=True):
        super().__init__(
            mlps=[mlp], npoint=npoint, radii=[radius], nsamples=[nsample], bn=bn, use_xyz=use_xyz
        )


class PointnetFPModule(nn.Module):
    """Feature propagation (see the module docstring)."""

    def __init__(self, mlp, bn=True):
        super().__init__()
        self.mlp = build_shared_mlp(mlp, bn=bn)

    def forward(self, unknown, known, unknow_feats, known_feats):
        if known is not None:
            dist, idx = pointnet2_utils.three_nn(unknown, known)
            dist_recip = 1.0 / (dist + 1e-8)
            weight = dist_recip / torch.sum(dist_recip, dim=2, keepdim=True)
            interpolated = pointnet2_utils.three_interpolate(known_feats, idx, weight)
        else:
            interpolated = known_feats.expand(*known_feats.size()[0:2], unknown.size(1))
        if unknow_feats is not None:
            new_features = torch.cat([interpolated, unknow_feats], dim=1)
        else:
            new_features = interpolated
        return self.mlp(new_features.unsqueeze(-1)).squeeze(-1)


def __dir__() -> list[str]:
    """The public names (``__all__``) and the module's dunders: not ``annotations`` / ``torch`` / helpers."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
