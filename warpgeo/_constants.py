"""Constants shared by the torch glue and the Warp kernels (plain Python: importing it does no work).

Kernel files wrap them as ``wp.constant(...)`` of the type they need; op modules read them as they are. A
number that both sides must agree on lives here, once.
"""

#: "No index": padding of index outputs, and what an out-of-range index is treated as in a kernel.
SENTINEL_INDEX = -1
#: Warp arrays hold int32 shapes and int32 *byte* strides: no dimension and no byte stride may reach this.
INT32_LIMIT = 2**31
#: Points (of one cloud / feature row) the kernels can index: point indices are int32.
MAX_POINTS = INT32_LIMIT - 1
#: Rows (threads) of one launch when a launch too large for Warp is split into several.
MAX_LAUNCH_ROWS = 2**30

# ---- farthest point sampling, knn, ball query (fps.py, neighbors.py and their kernels)
#: A squared distance above any a finite cloud has: FPS's start distance to the (empty) chosen set, and the
#: distance knn writes beside a -1 index.
FAR = float("inf")
#: FPS: the distance to the chosen set of a point already chosen (below every real squared distance).
FPS_CHOSEN = -1.0
#: FPS: above every point index, so it loses every "lowest index" tie-break.
NO_POINT = MAX_POINTS
#: FPS on CUDA: threads of the one block per cloud (each owns N / 512 points, scanned four at a time; one
#: arg-max per sample). 512 rather than 256: a step is bound by memory latency, more lanes keep more loads in
#: flight (bench_fps.py --device cuda, H200: see benchmarks/results).
FPS_BLOCK_DIM = 512
#: Neighbour grids (``grid_setup``): cells at least a ball's radius wide, or about a few points per cell.
MODE_BALL = 0
MODE_KNN = 1

# ---- SDF ops and MeshWorld (warpgeo/sdf.py, world.py, _world/, _kernels/world.py, _kernels/sdf.py) ----
#: Registers per CUDA thread of the query kernels, by precision. Uncapped, the float32 cost kernel took 230
#: registers (12.5% occupancy, ncu, H200) and 3.58 ms fwd+bwd for 1M spheres x 4 meshes; capped at 128: 2.45
#: ms, at 64: 2.45 ms (signed distance 10.1 -> 6.4 -> 4.7 ms, swept H=32 17.5 -> 18.0 -> 16.5 ms).
#: float64 is capped at 128, not measured lower (more of its values would spill).
SDF_MAX_REGISTERS = {"float32": 64, "float64": 128}
#: Sign methods, as stored in a world's ``sign[e, m]``.
SIGN_RAY = 0
SIGN_WINDING = 1
SIGN_NORMAL = 2
SIGN_UNSIGNED = 3
#: Mesh id of an empty (padding) slot of a world.
NO_MESH = 0
#: ``grid_flags`` bit: the mesh is closed (every edge in two faces with opposite orientations, no sliver, no
#: self-intersection); its distance grid is signed.
FLAG_CLOSED = 1
#: ``grid_flags`` bit: the mesh is exactly the surface of its box (a cuboid), wound outwards: its distance is
#: the box's, in closed form.
FLAG_BOX = 2
#: What a world slot holds, ``slot_kind[e, m]``: a mesh (its Warp mesh id in ``mesh_ids``; ``NO_MESH``: an
#: empty slot), or an analytic primitive (``warpgeo.primitives``; mesh id ``NO_MESH``: it has no mesh), centred
#: at its origin, of half-extents ``prim_size[e, m]``: a cuboid; a sphere (radius: the x half-extent); a
#: capsule along z (radius: the x half-extent; its segment's half-length: the z half-extent less the radius);
#: a cylinder along z (radius: the x half-extent; half-height: the z half-extent). Each is a closed form.
KIND_MESH = 0
KIND_CUBOID = 1
KIND_SPHERE = 2
KIND_CAPSULE = 3
KIND_CYLINDER = 4
#: ``slot_kind`` of a distance grid (``warpgeo.DistanceGrid``; mesh id ``NO_MESH``): its ``(X, Y, Z)`` float32
#: values are rows of the world's flat ``voxel_values`` (first row and sizes in ``voxel_dims[e, m]``), its
#: origin and voxel size in ``voxel_frame[e, m]``; read by trilinear interpolation (a closed form too).
KIND_GRID = 5
#: ``grid_flags`` bit: the mesh's tables are being built (``warpgeo._world.builder.Later``) and its edges pair up
#: (it is probably closed): until they are in, a ray or normal mesh takes its side from three rays in
#: directions of no symmetry a mesh is likely to share (exact on closed meshes; Warp's axis rays are not, where
#: they graze a vertex or an edge, as on a symmetric mesh), so its answers do not change when the tables come.
FLAG_PENDING = 32
#: ``grid_flags`` bit: faces of the mesh (some, or all with an area) are slivers Warp's closest-point queries skip
#: (``warpgeo._kernels.build_checks.SLIVER_RATIO``): never closed, no grid; its closest face is found among
#: every face whose box is nearer than Warp's pick (``warpgeo._kernels.mesh_distance.nearest_in_box``).
FLAG_SLIVERS = 64

# ---- gather (warpgeo/gather.py, _kernels/gather.py)
#: Rows ``(b, c)`` one CPU gather thread copies together (the host launches ``ceil(B * C / this)`` threads):
#: the index row is read once for all of them. 4 rows of 16384 float32 points (256 KiB) fit a 512 KiB L2.
GATHER_CHANNELS_PER_ROW = 4
