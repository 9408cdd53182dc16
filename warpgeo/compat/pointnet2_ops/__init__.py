"""``pointnet2_ops`` (the PointNet++ CUDA extension's package), backed by warpgeo's Warp kernels.

``pointnet2_utils`` holds the ops (every public name of the original), ``pointnet2_modules`` the layers
built on them (``PointnetSAModule``, ``PointnetSAModuleMSG``, ``PointnetFPModule``): import them as the
original is imported, ``from warpgeo.compat.pointnet2_ops import pointnet2_utils``. The ops are also
names of this package itself (``pointnet2_ops.furthest_point_sample``).
After :func:`warpgeo.compat.install`, ``import pointnet2_ops`` and
``from pointnet2_ops.pointnet2_modules import PointnetSAModule`` resolve here.
"""

from __future__ import annotations

from . import pointnet2_modules, pointnet2_utils
from .pointnet2_utils import (
    BallQuery,
    FurthestPointSampling,
    GatherOperation,
    GroupAll,
    GroupingOperation,
    QueryAndGroup,
    ThreeInterpolate,
    ThreeNN,
    ball_query,
    furthest_point_sample,
    gather_operation,
    grouping_operation,
    three_interpolate,
    three_nn,
)

__all__ = [
    "BallQuery",
    "FurthestPointSampling",
    "GatherOperation",
    "GroupAll",
    "GroupingOperation",
    "QueryAndGroup",
    "ThreeInterpolate",
    "ThreeNN",
    "ball_query",
    "furthest_point_sample",
    "gather_operation",
    "grouping_operation",
    "pointnet2_modules",
    "pointnet2_utils",
    "three_interpolate",
    "three_nn",
]


def __dir__() -> list[str]:
    """The public names (``__all__``) and the module's dunders: not ``annotations`` / ``torch`` / helpers."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
