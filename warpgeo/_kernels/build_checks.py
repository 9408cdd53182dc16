"""What a world checks of every new mesh's faces before anything else, one launch over every face of every new
mesh (a row a face; each row finds its mesh by :func:`segment_of`, a binary search over the meshes' first
rows, which every build kernel shares): ``face_checks_rows`` (slivers Warp's queries skip, the edge-pairing
hash: :data:`FACE_CHECKS`). And ``winding_probe`` (:data:`WINDING_PROBE`, run once per process and device
for worlds with winding-number meshes: most worlds never compile it). Every build table has one key,
``"float32"`` (Warp meshes are float32), and is a Warp module of its own, loaded when its job runs: a world of
cuboids and primitives launches none of them."""

import warp as wp

from warpgeo._kernels._table import KernelTable
from warpgeo._kernels.world import UNBOUNDED

# warpgeo writes every backward itself: no adjoints (they would double the build time)
wp.set_module_options({"enable_backward": False})
#: Options of this file's modules.
OPTIONS = {"enable_backward": False}


@wp.func
def segment_of(first: wp.array(dtype=wp.int64), row: wp.int64):
    """The segment ``k`` whose rows ``[first[k], first[k + 1])`` hold ``row`` (``first`` ascending, from 0);
    -1 where none does."""
    count = first.shape[0] - 1
    if count <= 0 or row < first[0] or row >= first[count]:
        return -1
    lo = int(0)
    hi = count - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if first[mid] <= row:
            lo = mid
        else:
            hi = mid - 1
    return lo


#: Warp's mesh queries skip a face whose ``|e0 x e1| / (|e0|^2 + |e1|^2 + |e2|^2)`` is below this (a sliver).
SLIVER_RATIO = wp.constant(1.0e-6)


@wp.func
def vertex_hash(i: int, seed: wp.uint64):
    """A 64-bit hash of vertex index ``i``: splitmix64's finaliser of ``i * seed + seed``, made odd."""
    x = wp.uint64(i) * seed + seed
    x = (x ^ (x >> wp.uint64(30))) * wp.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> wp.uint64(27))) * wp.uint64(0x94D049BB133111EB)
    return (x ^ (x >> wp.uint64(31))) | wp.uint64(1)


@wp.func
def edge_term(a: int, b: int):
    """The directed edge ``a -> b``'s term of the edge-pairing hash less its reverse's (wrapping uint64)."""
    first = wp.uint64(0x9E3779B97F4A7C15)
    second = wp.uint64(0xD1B54A32D192ED03)
    return vertex_hash(a, first) * vertex_hash(b, second) - vertex_hash(b, first) * vertex_hash(a, second)


def face_checks_rows(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    vertex_first: wp.array(dtype=wp.int64),
    face_first: wp.array(dtype=wp.int64),
    slivers: wp.array(dtype=wp.int32),
    edge_hash: wp.array(dtype=wp.int64),
    row_start: int,
):
    """Per face ``f = row_start + tid`` of many meshes (their points and faces concatenated; mesh ``k``'s faces
    are rows ``[face_first[k], face_first[k + 1])``, each indexing the mesh's own points, which start at row
    ``vertex_first[k]``): ``slivers[f]`` = 1 if Warp's mesh queries skip it as a sliver (their own float32
    test; a NaN ratio, all three corners at one point, counts too), else 0, and ``edge_hash[f]``, the sum over
    its directed edges ``a -> b`` of ``h(a) g(b) - h(b) g(a)`` (wrapping 64-bit integers, as int64). Where
    every directed edge of a mesh has its reverse, the hashes of all its faces sum to 0 (mod 2**64); an open
    mesh's boundary edges almost surely leave a rest (``warpgeo._world.meshes``: whether a mesh may be closed, before the
    exact edge pairing; the host sums each mesh's rows). The face indices were checked on the host
    (``warpgeo._world.loading.load_mesh``); one outside its mesh counts as a sliver. Launched by rows."""
    f = wp.tid() + row_start
    if f >= edge_hash.shape[0] or f >= slivers.shape[0] or 3 * f + 2 >= indices.shape[0]:
        return
    k = segment_of(face_first, wp.int64(f))
    if k < 0 or k + 1 >= vertex_first.shape[0]:
        slivers[f] = 1
        edge_hash[f] = wp.int64(1)
        return
    i = indices[3 * f]
    j = indices[3 * f + 1]
    l = indices[3 * f + 2]
    first = vertex_first[k]
    n = vertex_first[k + 1] - first
    if i < 0 or j < 0 or l < 0 or wp.int64(i) >= n or wp.int64(j) >= n or wp.int64(l) >= n:
        slivers[f] = 1  # cannot happen (checked on the host); counted as unusable
        edge_hash[f] = wp.int64(1)
        return
    if first + n > wp.int64(points.shape[0]):
        slivers[f] = 1
        edge_hash[f] = wp.int64(1)
        return
    edge_hash[f] = wp.int64(edge_term(i, j) + edge_term(j, l) + edge_term(l, i))
    p = points[int(first) + i]
    q = points[int(first) + j]
    r = points[int(first) + l]
    e0 = q - p
    e1 = r - p
    e2 = r - q
    ratio = wp.length(wp.cross(e0, e1)) / (wp.dot(e0, e0) + wp.dot(e1, e1) + wp.dot(e2, e2))
    slivers[f] = 0
    if not (ratio >= SLIVER_RATIO):
        slivers[f] = 1


def winding_probe(mesh: wp.uint64, p: wp.vec3, out_sign: wp.array(dtype=float)):
    """The winding-number sign of ``p``; used once to check that winding support really took."""
    q = wp.mesh_query_point_sign_winding_number(mesh, p, UNBOUNDED)
    out_sign[0] = q.sign


#: ``FACE_CHECKS["float32"].face_checks_rows``: slivers and the edge-pairing hash of every new mesh's faces.
FACE_CHECKS = KernelTable(f"{__name__}.face_checks", (face_checks_rows,), {"float32": {}}, options=OPTIONS)
#: ``WINDING_PROBE["float32"].winding_probe``: compiled only for winding-number worlds.
WINDING_PROBE = KernelTable(f"{__name__}.winding_probe", (winding_probe,), {"float32": {}}, options=OPTIONS)
