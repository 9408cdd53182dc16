"""The kernels a :class:`~warpgeo.world.MeshWorld` runs once per mesh when it is built (see ``sdf.py``).

Apart from the query kernels: building a world compiles only this small module (``grid_centres`` and
``face_intersections``, the closed-mesh check and the coarse distance grid), never the query kernels, and a
query compiles only its own kernel. ``winding_probe`` (run once per process and device, for worlds with
winding-number meshes) is a Warp module of its own: most worlds never compile it.
"""

import functools

import warp as wp

from warpgeo._kernels.sdf import UNBOUNDED

# warpgeo writes every backward itself: no adjoints (they would double the build time)
wp.set_module_options({"enable_backward": False})


@wp.kernel
def grid_centres(
    mesh: wp.uint64,
    lower: wp.vec3,
    size: wp.vec3,
    ny: int,
    nz: int,
    with_sign: int,
    out: wp.array(dtype=float),
):
    """Distance of the centre of grid cell ``tid`` (row-major ``(nx, ny, nz)`` cells of ``size`` from
    ``lower``), for a MeshWorld's grid. ``with_sign``: negative inside, and NaN (a cell of unknown side) where
    the pseudo-normal and the ray vote disagree."""
    i = wp.tid()
    ix = i // (ny * nz)
    iy = (i // nz) % ny
    iz = i % nz
    p = lower + wp.cw_mul(size, wp.vec3(float(ix) + 0.5, float(iy) + 0.5, float(iz) + 0.5))
    q = wp.mesh_query_point_sign_normal(mesh, p, UNBOUNDED)
    d = float(0.0)
    if q.result:
        d = wp.length(p - wp.mesh_eval_position(mesh, q.face, q.u, q.v))
        if with_sign != 0:
            ray = wp.mesh_query_point(mesh, p, UNBOUNDED)
            if (not ray.result) or ray.sign != q.sign:
                d = wp.nan
            elif q.sign < 0.0:
                d = -d
    out[i] = d


@wp.func
def is_corner(j: wp.int32, i0: wp.int32, i1: wp.int32, i2: wp.int32):
    if j == i0:
        return True
    if j == i1:
        return True
    return j == i2


@wp.kernel
def face_intersections(mesh: wp.uint64, num_faces: int, found: wp.array(dtype=wp.int32)):
    """Count the pairs of faces (``tid`` and a later one) that share no vertex and intersect."""
    f = wp.tid()
    m = wp.mesh_get(mesh)
    if (f + 1) * 3 > m.indices.shape[0] or num_faces * 3 > m.indices.shape[0]:
        return
    i0 = m.indices[f * 3 + 0]
    i1 = m.indices[f * 3 + 1]
    i2 = m.indices[f * 3 + 2]
    a = m.points[i0]
    b = m.points[i1]
    c = m.points[i2]
    query = wp.mesh_query_aabb(mesh, wp.min(wp.min(a, b), c), wp.max(wp.max(a, b), c))
    g = int(0)
    while wp.mesh_query_aabb_next(query, g):
        if g > f and g < num_faces:
            j0 = m.indices[g * 3 + 0]
            j1 = m.indices[g * 3 + 1]
            j2 = m.indices[g * 3 + 2]
            shared = is_corner(j0, i0, i1, i2) or is_corner(j1, i0, i1, i2) or is_corner(j2, i0, i1, i2)
            if not shared:
                hit = wp.intersect_tri_tri(
                    wp.vec3d(a),
                    wp.vec3d(b),
                    wp.vec3d(c),
                    wp.vec3d(m.points[j0]),
                    wp.vec3d(m.points[j1]),
                    wp.vec3d(m.points[j2]),
                )
                if hit != 0:
                    wp.atomic_add(found, 0, 1)


def _winding_probe(mesh: wp.uint64, p: wp.vec3, out_sign: wp.array(dtype=float)):
    """The winding-number sign of ``p``; used once to check that winding support really took."""
    q = wp.mesh_query_point_sign_winding_number(mesh, p, UNBOUNDED)
    out_sign[0] = q.sign


@functools.cache
def winding_probe():
    """The kernel ``winding_probe``, created on first use in a Warp module of its own: only worlds with
    winding-number meshes compile it."""
    return wp.kernel(
        _winding_probe, name="winding_probe", module="unique", module_options={"enable_backward": False}
    )


winding_probe.lazy_kernel = True  # tests/test_codegen.py builds it with the other modules
