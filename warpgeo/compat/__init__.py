"""Drop-in names for code written against the CUDA extensions ``pointnet2_ops`` and ``pointops``.

Both are thin wrappers over warpgeo's own ops (:func:`warpgeo.farthest_point_sampling`,
:func:`warpgeo.gather_points`, :func:`warpgeo.knn`, :func:`warpgeo.ball_query`) with the originals' shapes, dtypes and semantics, so nothing has to be built
and the same code runs on the CPU and on CUDA::

    from warpgeo.compat.pointnet2_ops import pointnet2_utils       # was: from pointnet2_ops import pointnet2_utils
    from warpgeo.compat.pointnet2_ops.pointnet2_modules import PointnetSAModule   # was: from pointnet2_ops...
    from warpgeo.compat import pointops                            # was: from lib.pointops.functions import pointops

Code that imports the original module names and cannot be edited can call :func:`install` once, first::

    import warpgeo.compat
    warpgeo.compat.install()            # `import pointnet2_ops.pointnet2_utils` now finds warpgeo's
"""

from __future__ import annotations

import sys

from . import pointnet2_ops, pointops

__all__ = ["install", "pointnet2_ops", "pointops"]


def install(*, force: bool = False) -> list[str]:
    """Register warpgeo's modules under the original names in ``sys.modules``.

    After ``install()``, ``import pointnet2_ops``, ``from pointnet2_ops import pointnet2_utils``,
    ``from pointnet2_ops.pointnet2_modules import PointnetSAModule`` and ``import pointops`` resolve to
    :mod:`warpgeo.compat.pointnet2_ops` (and its submodules) / :mod:`warpgeo.compat.pointops`.

    Args:
        force: replace a name that is already imported (by default an imported original is left alone).

    Returns:
        The module names that were registered.
    """
    aliases = {
        "pointnet2_ops": pointnet2_ops,
        "pointnet2_ops.pointnet2_utils": pointnet2_ops.pointnet2_utils,
        "pointnet2_ops.pointnet2_modules": pointnet2_ops.pointnet2_modules,
        "pointops": pointops,
    }
    registered = []
    for name, module in aliases.items():
        if force or name not in sys.modules:
            sys.modules[name] = module
            registered.append(name)
    return registered
