"""warpgeo: differentiable geometry ops for PyTorch, written as NVIDIA Warp kernels.

Importing the package does no work: each op's module (and Warp itself) is imported on first access, and
Warp compiles a kernel module the first time it runs (then loads it from its cache). The custom ops
(``torch.ops.warpgeo.*``) are registered with their op module: by the first use of a public name, or all at
once by :func:`load_ops` (before ``torch.export.load`` of a program that calls them, say).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

__all__ = [
    "KNN",
    "Capsule",
    "ChamferResult",
    "ClosestPoint",
    "Cuboid",
    "Cylinder",
    "DepthFusion",
    "DistanceGrid",
    "FarthestPointSampling",
    "GatherPoints",
    "GridQuery",
    "MeshWorld",
    "RayHits",
    "Robot",
    "SdfMesh",
    "Sphere",
    "SweptSdfMesh",
    "ball_query",
    "camera_rays",
    "chamfer_distance",
    "closest_point",
    "collision_pairs",
    "farthest_point_sampling",
    "gather_points",
    "grid_rays",
    "knn",
    "lidar_rays",
    "load_ops",
    "raycast",
    "render_depth",
    "self_collision_cost",
    "set_value_checks",
    "signed_distance",
    "sphere_collision",
    "sphere_mesh_cost",
    "swept_sphere_mesh_cost",
    "value_checks",
]

# A public name is declared here: one line ``"name": "module"`` (the module that defines it). ``__all__`` above
# (literal, for static tools) and the ``TYPE_CHECKING`` imports below (for type checkers) must agree with it:
# tests/test_packaging.py::test_public_names_are_declared_once names what is missing where.
_HOME = {
    "FarthestPointSampling": "fps",
    "farthest_point_sampling": "fps",
    "GatherPoints": "gather",
    "gather_points": "gather",
    "KNN": "neighbors",
    "knn": "neighbors",
    "ball_query": "neighbors",
    "ChamferResult": "chamfer",
    "chamfer_distance": "chamfer",
    "MeshWorld": "world",
    "Cuboid": "primitives",
    "Sphere": "primitives",
    "Capsule": "primitives",
    "Cylinder": "primitives",
    "SdfMesh": "sdf",
    "SweptSdfMesh": "sdf",
    "signed_distance": "sdf",
    "sphere_mesh_cost": "sdf",
    "swept_sphere_mesh_cost": "sdf",
    "RayHits": "raycasting",
    "raycast": "raycasting",
    "camera_rays": "raycasting",
    "render_depth": "raycasting",
    "lidar_rays": "raycasting",
    "grid_rays": "raycasting",
    "Robot": "robot",
    "collision_pairs": "self_collision",
    "self_collision_cost": "self_collision",
    "ClosestPoint": "queries",
    "closest_point": "queries",
    "sphere_collision": "queries",
    "value_checks": "checks",
    "set_value_checks": "checks",
    "DistanceGrid": "distance_grid",
    "DepthFusion": "distance_grid",
    "GridQuery": "distance_grid",
}

if TYPE_CHECKING:
    from .chamfer import ChamferResult, chamfer_distance
    from .checks import set_value_checks, value_checks
    from .distance_grid import DepthFusion, DistanceGrid, GridQuery
    from .fps import FarthestPointSampling, farthest_point_sampling
    from .gather import GatherPoints, gather_points
    from .neighbors import KNN, ball_query, knn
    from .primitives import Capsule, Cuboid, Cylinder, Sphere
    from .queries import ClosestPoint, closest_point, sphere_collision
    from .raycasting import RayHits, camera_rays, grid_rays, lidar_rays, raycast, render_depth
    from .robot import Robot
    from .sdf import SdfMesh, SweptSdfMesh, signed_distance, sphere_mesh_cost, swept_sphere_mesh_cost
    from .self_collision import collision_pairs, self_collision_cost
    from .world import MeshWorld


def __getattr__(name: str):
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'warpgeo' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the module's dunders: not the helpers this file imports (``importlib``, ...)."""
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})


def load_ops() -> None:
    """Register every ``torch.ops.warpgeo.*`` custom op now (e.g. before ``torch.export.load`` of a program
    that calls them). Imports warpgeo's op modules and their kernel modules (Warp is imported, not
    initialised; nothing is compiled; about 0.4 s).

    A public function registers its own op on first use; code that reaches ``torch.ops.warpgeo.<op>``
    first (a ``torch.export`` program loaded in a fresh process, a direct ``torch.ops`` call) calls this
    after ``import warpgeo``.

    Example:
        >>> warpgeo.load_ops()
        >>> torch.ops.warpgeo.knn(torch.rand(1, 5, 3), torch.rand(1, 9, 3), None, None, 2)[1].shape
        torch.Size([1, 5, 2])
    """
    for home in sorted(set(_HOME.values()) - {"checks"}):
        importlib.import_module(f".{home}", __name__)
