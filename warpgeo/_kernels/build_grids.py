"""The coarse distance grids of closed (signed) and ``"unsigned"`` meshes: each cell centre's distance from
a closest-point query and a vote of rays, every new mesh's cells in one launch (``grid_cells_rows``,
:data:`GRIDS`). :data:`GRID_ONE`: the same per-cell code for one mesh (``grid_centres``, a reference)."""

import warp as wp

from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.build_checks import segment_of
from warpgeo._kernels.mesh_distance import ray_vote_inside
from warpgeo._kernels.world import UNBOUNDED

# warpgeo writes every backward itself: no adjoints (they would double the build time)
wp.set_module_options({"enable_backward": False})
#: Options of this file's modules.
OPTIONS = {"enable_backward": False}


@wp.func
def grid_centre(mesh: wp.uint64, lower: wp.vec3, size: wp.vec3, ny: int, nz: int, with_sign: int, i: int):
    """Distance of the centre of grid cell ``i`` (row-major ``(nx, ny, nz)`` cells of ``size`` from ``lower``),
    for a MeshWorld's grid. ``with_sign``: negative inside, and NaN (a cell of unknown side) where Warp's
    pseudo-normal and a vote of three rays (``sdf.ray_vote_inside``: no second closest-point search)
    disagree."""
    ix = i // (ny * nz)
    iy = (i // nz) % ny
    iz = i % nz
    p = lower + wp.cw_mul(size, wp.vec3(float(ix) + 0.5, float(iy) + 0.5, float(iz) + 0.5))
    q = wp.mesh_query_point_sign_normal(mesh, p, UNBOUNDED)
    d = float(0.0)
    if q.result:
        d = wp.length(p - wp.mesh_eval_position(mesh, q.face, q.u, q.v))
        if with_sign != 0:
            if ray_vote_inside(mesh, p) != (q.sign < 0.0):
                d = wp.nan
            elif q.sign < 0.0:
                d = -d
    return d


def grid_centres(
    mesh: wp.uint64,
    lower: wp.vec3,
    size: wp.vec3,
    ny: int,
    nz: int,
    with_sign: int,
    out: wp.array(dtype=float),
    row_start: int,
):
    """``grid_centre`` of cell ``row_start + tid`` of one mesh's grid, into ``out`` (its cells). Launched by
    rows (``_launch.launch_rows``)."""
    i = wp.tid() + row_start
    if i >= out.shape[0] or ny <= 0 or nz <= 0:
        return
    out[i] = grid_centre(mesh, lower, size, ny, nz, with_sign, i)


def grid_cells_rows(
    mesh_ids: wp.array(dtype=wp.int64),
    lowers: wp.array(dtype=wp.vec3),
    sizes: wp.array(dtype=wp.vec3),
    dims: wp.array(dtype=wp.vec4i),
    first: wp.array(dtype=wp.int64),
    out: wp.array(dtype=float),
    row_start: int,
):
    """The grids of many meshes in one launch: row ``r = row_start + tid`` is cell ``r - first[k]`` of mesh
    ``k`` (``first``: each mesh's first row, then the total), whose grid is ``dims[k] = (nx, ny, nz,
    with_sign)`` cells of ``sizes[k]`` from ``lowers[k]``; ``out[r]`` its ``grid_centre``. Launched by rows."""
    r = wp.int64(wp.tid() + row_start)
    if r >= wp.int64(out.shape[0]):
        return
    k = segment_of(first, r)
    if k < 0 or k >= mesh_ids.shape[0] or k >= lowers.shape[0] or k >= sizes.shape[0] or k >= dims.shape[0]:
        return
    n = dims[k]
    i = r - first[k]
    if n[0] <= 0 or n[1] <= 0 or n[2] <= 0 or i >= wp.int64(n[0]) * wp.int64(n[1]) * wp.int64(n[2]):
        return
    out[int(r)] = grid_centre(wp.uint64(mesh_ids[k]), lowers[k], sizes[k], n[1], n[2], n[3], int(i))


#: ``GRIDS["float32"].grid_cells_rows``: every new mesh's grid cells, a row a cell.
GRIDS = KernelTable(f"{__name__}.grids", (grid_cells_rows,), {"float32": {}}, options=OPTIONS)
#: ``GRID_ONE["float32"].grid_centres``: one mesh's grid (a reference).
GRID_ONE = KernelTable(f"{__name__}.grid_one", (grid_centres,), {"float32": {}}, options=OPTIONS)
