"""Drop-in names for code written against the CUDA extensions ``pointnet2_ops``, ``pointops``, ``knn_cuda``,
the ``chamfer`` extension of PoinTr / Point-MAE, ``torch_cluster``, and pytorch3d's point-cloud ops.

All are thin wrappers over warpgeo's own ops (:func:`warpgeo.farthest_point_sampling`,
:func:`warpgeo.gather_points`, :func:`warpgeo.knn`, :func:`warpgeo.ball_query`,
:func:`warpgeo.chamfer_distance`) with the originals' shapes, dtypes and semantics, so nothing has to be built
and the same code runs on the CPU and on CUDA::

    from warpgeo.compat.pointnet2_ops import pointnet2_utils       # was: from pointnet2_ops import pointnet2_utils
    from warpgeo.compat.pointnet2_ops.pointnet2_modules import PointnetSAModule   # was: from pointnet2_ops...
    from warpgeo.compat import pointops                            # was: from lib.pointops.functions import pointops
    from warpgeo.compat.knn_cuda import KNN                        # was: from knn_cuda import KNN
    from warpgeo.compat import chamfer                             # was: import chamfer (extensions/chamfer_dist)
    from warpgeo.compat import torch_cluster                       # was: import torch_cluster
    from warpgeo.compat.pytorch3d import knn_points                # was: from pytorch3d.ops import knn_points
    from warpgeo.compat.curobo import load_world                   # a cuRobo world configuration as a MeshWorld

Code that imports the original module names and cannot be edited can call :func:`install` once, first::

    import warpgeo.compat
    warpgeo.compat.install()            # `import pointnet2_ops.pointnet2_utils` now finds warpgeo's
"""

from __future__ import annotations

import importlib.util
import sys

from . import chamfer, curobo, knn_cuda, pointnet2_ops, pointops, pytorch3d, torch_cluster

__all__ = [
    "chamfer",
    "curobo",
    "install",
    "knn_cuda",
    "pointnet2_ops",
    "pointops",
    "pytorch3d",
    "torch_cluster",
]


def install(*, force: bool = False) -> list[str]:
    """Register warpgeo's modules under the original names in ``sys.modules``.

    After ``install()``, ``import pointnet2_ops``, ``from pointnet2_ops import pointnet2_utils``,
    ``from pointnet2_ops.pointnet2_modules import PointnetSAModule``, ``import pointops``,
    ``from knn_cuda import KNN``, ``import chamfer`` and ``import torch_cluster`` resolve to
    :mod:`warpgeo.compat.pointnet2_ops` (and its submodules), :mod:`warpgeo.compat.pointops`,
    :mod:`warpgeo.compat.knn_cuda`, :mod:`warpgeo.compat.chamfer` and :mod:`warpgeo.compat.torch_cluster`.
    A name is left alone where it is already imported or where a real module of that name is importable
    (an installed extension keeps working). ``pytorch3d`` is never registered: code importing it expects
    far more (structures, renderers, IO) than the few ops :mod:`warpgeo.compat.pytorch3d` offers, and would
    fail later and less clearly; import those by name.

    Call it before the code that imports those names (PyTorch Geometric < 2.8 looks ``torch_cluster`` up
    once, when it is first imported).

    Args:
        force: register every name, replacing an imported or importable original.

    Returns:
        The module names that were registered.
    """
    aliases = {
        "pointnet2_ops": pointnet2_ops,
        "pointnet2_ops.pointnet2_utils": pointnet2_ops.pointnet2_utils,
        "pointnet2_ops.pointnet2_modules": pointnet2_ops.pointnet2_modules,
        "pointops": pointops,
        "knn_cuda": knn_cuda,
        "chamfer": chamfer,
        "torch_cluster": torch_cluster,
    }
    # decided before registering anything: a package registered here must not look "importable" to the
    # names under it
    real = {name.partition(".")[0] for name in aliases if not force and _importable(name.partition(".")[0])}
    registered = []
    for name, module in aliases.items():
        if force or (name not in sys.modules and name.partition(".")[0] not in real):
            sys.modules[name] = module
            registered.append(name)
    return registered


def _importable(name: str) -> bool:
    """Whether a real top-level module ``name`` can be imported (without importing it)."""
    if name in sys.modules:
        return False  # imported already: the caller leaves it alone by its presence
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
