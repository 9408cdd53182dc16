"""A closed mesh's edge pairs (``warpgeo._world.meshes.edge_pairs``), on the host's cores for every world
device: each vertex's list of faces (``incident_faces_rows``, one launch: Warp's CPU atomics are plain
read-modify-writes), then each directed edge's reversed partner (``edge_partners_rows``). One module
(:data:`EDGE_PAIRS`), loaded when a world has a mesh that is not a cuboid."""

import warp as wp

from warpgeo._kernels._table import KernelTable

# warpgeo writes every backward itself: no adjoints (they would double the build time)
wp.set_module_options({"enable_backward": False})
#: Options of this file's modules.
OPTIONS = {"enable_backward": False}


def incident_faces_rows(
    faces: wp.array(dtype=wp.vec3i),
    first: wp.array(dtype=wp.int32),
    cursor: wp.array(dtype=wp.int32),
    incident: wp.array(dtype=wp.int32),
    row_start: int,
):
    """Face ``f = row_start + tid`` entered in the list of faces of each of its corners: vertex ``v``'s list is
    ``incident[first[v]:first[v + 1]]`` (``first``: the prefix sums of the vertices' face counts), filled
    through ``cursor`` (zeros; an atomic counter a vertex: the lists' order is any). A corner outside the
    vertices, or a list already full, is skipped. On the CPU one launch only, never split over threads (Warp's
    CPU atomics are plain read-modify-writes)."""
    f = wp.tid() + row_start
    if f >= faces.shape[0]:
        return
    i = faces[f]
    for k in range(3):
        v = i[k]
        if v >= 0 and v + 1 < first.shape[0] and v < cursor.shape[0]:
            slot = first[v] + wp.atomic_add(cursor, v, 1)
            if slot < first[v + 1] and slot >= 0 and slot < incident.shape[0]:
                incident[slot] = f


def edge_partners_rows(
    faces: wp.array(dtype=wp.vec3i),
    first: wp.array(dtype=wp.int32),
    incident: wp.array(dtype=wp.int32),
    partner: wp.array(dtype=wp.int32),
    row_start: int,
):
    """For each directed edge ``a -> b`` of face ``f = row_start + tid`` (its edges ab, bc, ca: edge ``3 f + k``),
    the directed edge ``3 g + j`` that runs ``b -> a`` where exactly one does and ``a -> b`` is only ``f``'s, found
    in the face list (``incident_faces_rows``) of whichever of ``a`` and ``b`` has fewer faces; -1 otherwise
    (a boundary edge, an edge of three faces or more, two faces wound alike, ``a == b``). Launched by rows."""
    f = wp.tid() + row_start
    if f >= faces.shape[0] or wp.int64(3) * wp.int64(f) + wp.int64(2) >= wp.int64(partner.shape[0]):
        return
    count = faces.shape[0]
    vertices = first.shape[0] - 1
    i = faces[f]
    for k in range(3):
        a = i[k]
        b = i[(k + 1) % 3]
        found = int(-1)
        if a != b and a >= 0 and b >= 0 and a < vertices and b < vertices:
            v = a
            if first[b + 1] - first[b] < first[a + 1] - first[a]:
                v = b
            forward = int(0)
            reverse = int(0)
            lo = wp.max(first[v], 0)
            hi = wp.min(first[v + 1], incident.shape[0])
            for s in range(lo, hi):
                g = incident[s]
                if g >= 0 and g < count:
                    other = faces[g]
                    for j in range(3):
                        if other[j] == a and other[(j + 1) % 3] == b:
                            forward += 1
                        if other[j] == b and other[(j + 1) % 3] == a:
                            reverse += 1
                            found = 3 * g + j
            if forward != 1 or reverse != 1:
                found = -1
        partner[3 * f + k] = found


#: ``EDGE_PAIRS["float32"].incident_faces_rows`` / ``.edge_partners_rows``.
EDGE_PAIRS = KernelTable(
    f"{__name__}.edge_pairs",
    (incident_faces_rows, edge_partners_rows),
    {"float32": {}},
    options=OPTIONS,
    host_too=True,  # a CUDA world finds its edge pairs on the host (warpgeo._world.meshes.edge_pairs)
)
