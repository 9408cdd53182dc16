"""Building a MeshWorld: what a query needs now, the meshes' tables on a background thread.

A CPU world builds each mesh's BVH at once and leaves the tables of the kernels' exact shortcuts (closed-mesh
pseudo-normals, distance grid, plane tree) of its meshes (of ``BACKGROUND_FACES`` faces or more: every mesh)
to a background thread; an op call takes them in once they are done, ``wait_tables`` waits for them. The
suite's worlds build them at once (tests/conftest.py); these tests set the threshold themselves (or keep
the default: ``background_tables``), compare with tables built at once, and hold the background build where
they need to.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
import warnings

import numpy as np
import pytest
import torch
import trimesh

import warpgeo
from warpgeo import MeshWorld, _constants, _launch, _threads, signed_distance
from warpgeo._world import builder as _builder
from warpgeo._world import meshes as _meshes
from warpgeo._world import prepare as _prepare
from warpgeo._world import tables as _tables
from warpgeo.world import WORLD_FIELDS

_CPU = torch.device("cpu")


def _sphere() -> trimesh.Trimesh:
    return trimesh.creation.icosphere(subdivisions=2, radius=0.5)  # closed and convex: every table


def _points(n: int = 400, seed: int = 0) -> torch.Tensor:
    gen = np.random.default_rng(seed)
    return torch.from_numpy(gen.uniform(-0.6, 0.6, (n, 3)))


def _sphere_distance(points: torch.Tensor) -> torch.Tensor:
    """The icosphere's signed distance by brute force (trimesh's closest point, sign by containment)."""
    mesh = _sphere()
    p = points.numpy()
    _, dist, _ = trimesh.proximity.closest_point(mesh, p)
    inside = mesh.contains(p)
    return torch.from_numpy(np.where(inside, -dist, dist))


@pytest.fixture
def background(monkeypatch):
    """Every mesh's tables on the background thread; ``hold.set()`` lets the build run."""
    monkeypatch.setattr(_prepare, "BACKGROUND_FACES", 1)
    hold = threading.Event()
    built = _tables.build_tables

    def held(specs, device, *, alive=None):
        if alive is not None:
            assert hold.wait(60), "the test never released the background build"
        return built(specs, device, alive=alive)

    monkeypatch.setattr(_tables, "build_tables", held)
    yield hold
    hold.set()


def test_queries_before_the_tables_are_exact_and_equal_after(background, monkeypatch):
    points = _points().requires_grad_(True)
    world = MeshWorld([_sphere()])
    assert world.wait_tables(timeout=0) is False
    assert world._tables["grid_flags"].item() == _constants.FLAG_PENDING  # no shortcut yet
    assert (world._tables["cone_offsets"] == -1).all()
    before = signed_distance(points, world)
    (grad_before,) = torch.autograd.grad(before.sum(), points)
    background.set()
    assert world.wait_tables(timeout=60) is True
    assert world._tables["grid_flags"].item() == 1  # closed
    assert (world._tables["cone_offsets"][..., 3] > 0).all()  # convex: its plane tree
    assert world._tables["grid_dims"][0, 0, 0] > 0  # and its grid
    after = signed_distance(points, world)
    (grad_after,) = torch.autograd.grad(after.sum(), points)
    reference = _sphere_distance(points.detach())
    torch.testing.assert_close(before.detach(), reference, atol=1e-6, rtol=0)
    assert torch.equal(before, after)  # the same closest face either way
    torch.testing.assert_close(grad_before, grad_after, atol=1e-9, rtol=0)
    # and the tables are those of building the mesh at once
    monkeypatch.setattr(_prepare, "BACKGROUND_FACES", 1 << 30)
    inline = MeshWorld([_sphere()])
    assert inline._later is None
    for name in (*_builder.SLOT_FIELDS, *_builder.FLAT_FIELDS):
        assert torch.equal(world._tables[name], inline._tables[name]), name


def test_tables_go_in_at_the_next_op_call_as_new_tensors(background):
    world = MeshWorld.from_envs([[_sphere(), warpgeo.Cuboid([0.2, 0.2, 0.2])], [_sphere()]])
    args = world.kernel_args(torch.float64).world
    fields = list(WORLD_FIELDS)
    old = {name: args[fields.index(name)].clone() for name in (*_builder.SLOT_FIELDS, *_builder.FLAT_FIELDS)}
    held = {name: args[fields.index(name)] for name in old}
    background.set()
    world._later.future.result(60)
    signed_distance(_points(10), world, env_index=torch.tensor([0] * 10))  # takes them in
    assert world._later is None
    after = world.kernel_args(torch.float64).world
    for name, tensor in held.items():
        # a new tensor; the one an op on another thread may hold (in the list it was handed) is left as it was
        assert after[fields.index(name)] is not tensor and torch.equal(tensor, old[name]), name
        assert args[fields.index(name)] is tensor, name
    assert world._tables["grid_flags"].tolist() == [[1, 0], [1, 0]]  # a primitive: no mesh tables
    constants = _constants
    assert world._tables["slot_kind"].tolist() == [[constants.KIND_MESH, constants.KIND_CUBOID], [0, 0]]
    assert world._tables["prim_size"][0, 1].tolist() == pytest.approx([0.1, 0.1, 0.1])
    assert world._tables["mesh_ids"][0, 1].item() == constants.NO_MESH and world._wp_meshes[0][1] is None
    # both slots of the recurring sphere got rows of their own, equal (built once, copied)
    first, second = world._tables["topo_offsets"][:, 0, 0].tolist()
    neighbors = world._tables["face_neighbors"]
    assert first != second and torch.equal(neighbors[first : first + 320], neighbors[second : second + 320])


def test_any_mix_of_old_and_new_tables_is_exact(monkeypatch):
    """An op on another thread may hold some fields from before the tables went in and some from after: every
    mix gives the same distances (the kernels bound each row by the tables they got)."""
    monkeypatch.setattr(_prepare, "BACKGROUND_FACES", 200)
    small = trimesh.creation.icosphere(subdivisions=1, radius=0.3)  # 80 faces: its tables at once
    poses = [[0.6, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]]
    world = MeshWorld([small, _sphere()], poses=poses)  # the 320-face sphere's tables come later
    fields = list(WORLD_FIELDS)
    names = [*_builder.SLOT_FIELDS, *_builder.FLAT_FIELDS]
    before = {name: world._tables[name] for name in names}
    assert before["grid_cells"].numel() > 0  # the small mesh's grid is there already
    assert world.wait_tables(timeout=60)
    after = {name: world._tables[name] for name in names}
    live = world.kernel_args(torch.float64).world
    points = _points(300, seed=5) * 1.5
    expected = signed_distance(points, world)
    gen = np.random.default_rng(0)
    for _ in range(24):
        mix = gen.random(len(names)) < 0.5
        for name, new in zip(names, mix, strict=True):
            live[fields.index(name)] = after[name] if new else before[name]
        assert torch.equal(signed_distance(points, world), expected), mix
    for name in names:
        live[fields.index(name)] = after[name]


def test_world_gone_stops_its_background_build(background, monkeypatch):
    steps = []
    faces_meet = _meshes.faces_meet
    monkeypatch.setattr(_meshes, "faces_meet", lambda *a: steps.append(1) or faces_meet(*a))
    world = MeshWorld([_sphere()])
    future = world._later.future
    del world
    gc.collect()
    background.set()
    with pytest.raises(_tables._Cancelled):
        future.result(60)
    assert not steps  # stopped before its first step
    # the background thread is free for the next world
    fresh = MeshWorld([_sphere()])
    assert fresh.wait_tables(timeout=60) and fresh._tables["grid_flags"].item() == 1


def test_failed_background_build_warns_and_stays_exact(monkeypatch):
    monkeypatch.setattr(_prepare, "BACKGROUND_FACES", 1)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(_tables, "_plane_trees", broken)
    world = MeshWorld([_sphere()])
    world._later.future.exception(60)
    points = _points(50)
    with pytest.warns(RuntimeWarning, match="boom"):
        got = signed_distance(points, world)
    torch.testing.assert_close(got, _sphere_distance(points), atol=1e-6, rtol=0)
    # no tables, and the side stays that of the rays of no symmetry (as before the failure)
    assert world._later is None and world._tables["grid_flags"].item() == _constants.FLAG_PENDING
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert world.wait_tables() is True  # nothing left: no second warning


def test_compiled_query_before_and_after_the_tables(background):
    world = MeshWorld([_sphere()])
    points = _points(64)

    @torch.compile(fullgraph=True, backend="eager")
    def query(p):
        return signed_distance(p, world) * 2.0

    before = query(points)
    background.set()
    assert world.wait_tables(timeout=60)
    after = query(points)
    assert torch.equal(before, after)
    torch.testing.assert_close(after, 2.0 * _sphere_distance(points), atol=2e-6, rtol=0)


@pytest.mark.background_tables
def test_meshes_build_where_documented():
    """On the CPU every mesh's tables come later, small or large; a cuboid has none to build (a closed form)."""
    assert _prepare.BACKGROUND_FACES == 0
    boxes = MeshWorld([trimesh.creation.box((0.2, 0.3, 0.4)), warpgeo.Cuboid([0.1, 0.1, 0.1])])
    assert boxes._later is None and boxes._tables["grid_flags"].tolist() == [
        [_constants.FLAG_CLOSED | _constants.FLAG_BOX, 0]
    ]
    small = MeshWorld([_sphere()])  # 320 faces
    assert small._later is not None and small.wait_tables(timeout=60)
    assert small._tables["grid_flags"].item() == 1
    big = trimesh.creation.icosphere(subdivisions=6, radius=0.5)  # 81,920 faces
    world = MeshWorld([big])
    assert world._later is not None
    points = _points(200)
    got = signed_distance(points, world)
    assert world.wait_tables(timeout=120)
    assert world._tables["grid_flags"].item() == 1 and (world._tables["cone_offsets"][..., 3] > 0).all()
    assert torch.equal(signed_distance(points, world), got)
    # the analytic sphere of the same radius, to the meshing error (an 81,920-face icosphere: < 1e-4)
    exact = points.norm(dim=1) - 0.5
    torch.testing.assert_close(got, exact, atol=2e-4, rtol=0)


def _numpy_slivers(vertices: np.ndarray, faces: np.ndarray) -> int:
    """Warp's sliver test in float32 NumPy: |e0 x e1| / (|e0|^2 + |e1|^2 + |e2|^2) not >= 1e-6."""
    tri = vertices.astype(np.float32)[faces]
    e0, e1, e2 = tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0], tri[:, 2] - tri[:, 1]
    area2 = np.linalg.norm(np.cross(e0, e1), axis=1)
    scale = (e0 * e0).sum(1) + (e1 * e1).sum(1) + (e2 * e2).sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return int((~(area2 / scale >= 1.0e-6)).sum())


def test_sliver_count_matches_warps_test():
    gen = np.random.default_rng(3)
    vertices = gen.uniform(-1.0, 1.0, (200, 3)).astype(np.float32)
    faces = gen.integers(0, 200, (500, 3)).astype(np.int32)
    faces[:40, 2] = faces[:40, 1]  # two corners at one vertex: zero area
    faces[40:50] = faces[40:50, :1]  # all three at one vertex: a NaN ratio, counted
    vertices[199] = vertices[198] + np.float32(1e-7) * (vertices[197] - vertices[198])  # near-collinear
    faces[50:60] = [197, 198, 199]
    expected = _numpy_slivers(vertices, faces)
    assert expected >= 60
    sphere = trimesh.creation.icosphere(subdivisions=1)
    clean = (np.asarray(sphere.vertices, np.float32), np.asarray(sphere.faces, np.int32))
    # several meshes in one launch: each its own count
    slivers, _ = _meshes.face_checks([clean, (vertices, faces), clean, (vertices, faces[:45])], _CPU)
    assert slivers.tolist() == [0, expected, 0, _numpy_slivers(vertices, faces[:45])]


def _edges_pair_up(faces: np.ndarray) -> bool:
    """Reference: every directed edge a -> b of the faces has a reverse b -> a (as multisets)."""
    directed = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    forward = sorted(map(tuple, directed.tolist()))
    backward = sorted(map(tuple, directed[:, ::-1].tolist()))
    return forward == backward


def test_edge_pairing_hash_tells_open_meshes():
    sphere = trimesh.creation.icosphere(subdivisions=3)
    vertices = np.asarray(sphere.vertices, dtype=np.float32)
    closed = np.asarray(sphere.faces, dtype=np.int32)
    flipped = closed.copy()
    flipped[7] = flipped[7, ::-1]  # one face wound the other way: its edges no longer pair up
    doubled = np.concatenate([closed, closed[:1, ::-1]])  # a face and its reverse: still pairs up
    cases = {"closed": closed, "open": closed[1:], "flipped": flipped, "doubled": doubled}
    torus = trimesh.creation.torus(1.0, 0.3)
    meshes = [(vertices, faces) for faces in cases.values()]
    meshes.append((np.asarray(torus.vertices, np.float32), np.asarray(torus.faces, np.int32)))
    expected = [_edges_pair_up(faces) for _, faces in meshes]
    assert expected[0] and expected[-1] and not expected[1] and not expected[2]
    _, got = _meshes.face_checks(meshes, _CPU)  # all in one launch
    assert got.tolist() == expected
    for mesh, pairs_up in zip(meshes, expected, strict=True):  # and each alone
        assert _meshes.face_checks([mesh], _CPU)[1].tolist() == [pairs_up]


def test_forked_child_builds_the_tables_itself(monkeypatch):
    """A DataLoader worker forked while the tables were being built has the world but not the thread."""
    monkeypatch.setattr(_prepare, "BACKGROUND_FACES", 1)
    parent = os.getpid()
    hold = threading.Event()
    built = _tables.build_tables

    def held(specs, device, *, alive=None):
        if alive is not None and os.getpid() == parent:
            assert hold.wait(60)
        return built(specs, device, alive=alive)

    monkeypatch.setattr(_tables, "build_tables", held)
    world = MeshWorld([_sphere()])
    context = multiprocessing.get_context("fork")
    results = context.Queue()

    def child() -> None:
        ready = world.wait_tables(timeout=60)
        results.put((ready, world._tables["grid_flags"].item(), signed_distance(_points(20), world).tolist()))

    process = context.Process(target=child)
    process.start()
    try:
        ready, flags, distances = results.get(timeout=120)
    finally:
        hold.set()
        process.join(60)
    assert ready and flags == 1
    torch.testing.assert_close(
        torch.tensor(distances, dtype=torch.float64), _sphere_distance(_points(20)), atol=1e-6, rtol=0
    )
    assert world.wait_tables(timeout=60) and world._tables["grid_flags"].item() == 1


def _winding_numbers(mesh: trimesh.Trimesh, points: np.ndarray) -> np.ndarray:
    """Generalised winding number of each point by brute force: the solid angles of every face
    (Van Oosterom and Strackee), summed, over 4 pi."""
    tri = mesh.vertices[mesh.faces]  # (F, 3, 3)
    out = np.empty(len(points))
    for start in range(0, len(points), 256):
        p = points[start : start + 256, None, None, :]
        a, b, c = (tri[None, :, k, :] - p[:, :, 0, :] for k in range(3))
        la, lb, lc = (np.linalg.norm(x, axis=-1) for x in (a, b, c))
        det = np.einsum("...i,...i", a, np.cross(b, c))
        dots = la * lb * lc + np.einsum("...i,...i", a, b) * lc
        dots += np.einsum("...i,...i", a, c) * lb + np.einsum("...i,...i", b, c) * la
        out[start : start + 256] = 2.0 * np.arctan2(det, dots).sum(axis=1) / (4.0 * np.pi)
    return out


@pytest.mark.parametrize("sign_method", ["ray", "normal"])
def test_signs_before_the_tables_on_a_symmetric_mesh(monkeypatch, sign_method):
    """Before its tables, a mesh whose edges pair up takes its side from rays of no symmetry: Warp's axis rays
    graze the vertices of an icosphere from points such as (-0.5, -0.5, 0) and call them inside."""
    monkeypatch.setattr(_prepare, "BACKGROUND_FACES", 1)
    monkeypatch.setattr(_builder.Later, "start", lambda self: None)  # never built: the path before
    mesh = trimesh.creation.icosphere(subdivisions=3, radius=0.5)
    world = MeshWorld([mesh], sign_method=sign_method)
    assert world._tables["grid_flags"].item() == _constants.FLAG_PENDING
    axis = np.linspace(-0.6, 0.6, 25)
    points = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
    got = signed_distance(torch.from_numpy(points), world).numpy()
    inside = _winding_numbers(mesh, points) > 0.5
    _, unsigned, _ = trimesh.proximity.closest_point(mesh, points)
    clear = unsigned > 1e-9  # off the surface, where a side exists
    assert (np.sign(got[clear]) == np.where(inside[clear], -1.0, 1.0)).all()
    np.testing.assert_allclose(np.abs(got), unsigned, atol=1e-6, rtol=0)


def test_open_mesh_answers_do_not_change_when_its_tables_come(background):
    """An open mesh is not pending (its edges do not pair up): its own sign method before and after."""
    sphere = _sphere()
    opened = trimesh.Trimesh(sphere.vertices, sphere.faces[10:], process=False)  # a hole
    world = MeshWorld([opened])
    assert world._tables["grid_flags"].item() == 0
    points = _points(400, seed=2)
    before = signed_distance(points, world)
    background.set()
    assert world.wait_tables(timeout=60)
    assert world._tables["grid_flags"].item() == 0  # not closed
    assert torch.equal(signed_distance(points, world), before)


def test_background_launches_cover_every_row_and_stop_between_chunks(monkeypatch):
    from warpgeo import _launch
    from warpgeo._kernels import build_checks

    mesh = trimesh.creation.icosphere(subdivisions=2)
    vertices = torch.from_numpy(np.asarray(mesh.vertices, dtype=np.float32))
    indices = torch.from_numpy(np.asarray(mesh.faces, dtype=np.int32).reshape(-1))
    kernel = build_checks.FACE_CHECKS["float32"].face_checks_rows
    cpu = torch.device("cpu")

    def run(check):
        slivers = torch.zeros(len(mesh.faces), dtype=torch.int32)
        hashes = torch.zeros(len(mesh.faces), dtype=torch.int64)
        _launch.launch_rows(
            kernel, len(mesh.faces), device=cpu, between=check, points=vertices, indices=indices,
            vertex_first=torch.tensor([0, len(vertices)]), face_first=torch.tensor([0, len(mesh.faces)]),
            slivers=slivers, edge_hash=hashes,
        )  # fmt: skip
        return hashes

    monkeypatch.setattr(_launch, "BETWEEN_ROWS", 64)
    starts = []
    launch = _launch.launch
    monkeypatch.setattr(
        _launch, "launch", lambda *a, **kw: starts.append(kw["row_start"]) or launch(*a, **kw)
    )
    whole = run(None)  # the caller's launch_rows, at once
    assert (whole != 0).all()
    assert torch.equal(run(lambda: None), whole)  # in chunks (on two threads): every row, the same values
    assert sorted(starts) == [0, 64, 128, 192, 256]
    checks = []

    def stop_after_two():
        checks.append(1)
        if len(checks) > 2:
            raise _tables._Cancelled

    starts.clear()
    with pytest.raises(_tables._Cancelled):
        run(stop_after_two)
    assert len(starts) == 2  # no chunk after the check that stopped it (on either thread)


@pytest.mark.parametrize("later", [False, True], ids=["tables at once", "tables later"])
def test_writing_into_the_callers_arrays_after_the_build_changes_nothing(background, later):
    """float32 / int32 arrays are the kind a mesh could keep as views: the world keeps copies of its own (its
    BVH and the background tables read them after the build returns)."""
    sphere = _sphere()
    vertices = np.asarray(sphere.vertices, dtype=np.float32).copy()
    faces = np.asarray(sphere.faces, dtype=np.int32).copy()
    if not later:
        background.set()
    world = MeshWorld([(vertices, torch.from_numpy(faces))])
    if not later:
        assert world.wait_tables(timeout=60)
    vertices *= 3.0  # the caller reuses its buffers
    faces[:, [1, 2]] = faces[:, [2, 1]]
    background.set()
    assert (
        world.wait_tables(timeout=60) and world._tables["grid_flags"].item() == 1
    )  # built from the mesh as given
    points = _points(200, seed=4)
    torch.testing.assert_close(signed_distance(points, world), _sphere_distance(points), atol=1e-6, rtol=0)


def test_plane_trees_built_together_or_by_heapsort_are_each_built_alone(monkeypatch):
    """Several meshes' plane trees in one build (their nodes side by side in each launch) are each the tree of
    its mesh alone, bit for bit, and so are trees whose splits heap-sort every node instead of selecting
    (the split is defined by the order, not by the algorithm); each node's cone holds the normals of the
    faces below it (checked against the faces)."""
    sphere = trimesh.creation.icosphere(subdivisions=4, radius=0.7)  # 5,120 faces
    vertices, faces = np.asarray(sphere.vertices, np.float32), np.asarray(sphere.faces, np.int32)
    others = [trimesh.creation.icosphere(2, radius=0.3), trimesh.creation.cylinder(0.2, 0.4, sections=48)]
    meshes = [(vertices, faces)] + [
        (np.asarray(m.vertices, np.float32), np.asarray(m.faces, np.int32)) for m in others
    ]
    pairs = _meshes.edge_pairs([(f, len(v)) for v, f in meshes])
    parts = [_tables._Faces([(v, f, p)], None).part(0) for (v, f), p in zip(meshes, pairs, strict=True)]
    alone = [_tables._plane_tree(part) for part in parts]
    together = _tables._plane_trees(parts[::-1])[::-1]
    monkeypatch.setattr(_tables, "_SPLIT_ROUNDS", 0)
    sorted_splits = _tables._plane_trees(parts)
    for tree, *built in zip(alone, together, sorted_splits, strict=True):
        for tables in built:
            for mine, theirs in zip(tables, tree, strict=True):
                assert mine.dtype == theirs.dtype and mine.tobytes() == theirs.tobytes()
    nodes, links, _, order = alone[0]
    assert sorted(order.tolist()) == list(range(len(faces)))  # every face in one leaf
    normals = np.cross(*(vertices[faces][:, k] - vertices[faces][:, 0] for k in (1, 2))).astype(np.float64)
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    # each node's cone holds the normals of the faces of its subtree (leaves: rows [first, first + count))
    for k, after in enumerate(links[:, 0].tolist()):
        leaves = [j for j in range(k, after) if links[j, 2] > 0]
        below = np.concatenate([order[links[j, 1] : links[j, 1] + links[j, 2]] for j in leaves])
        axis, cos = nodes[1 + 2 * k, :3].astype(np.float64), float(nodes[2 + 2 * k, 0])
        assert (normals[below] @ axis >= cos - 1e-6).all(), k


def _slot_tables(world: MeshWorld, e: int, m: int) -> dict[str, np.ndarray]:
    """One slot's tables, read out of the world's flat tables at its offsets."""
    t = {name: world._tables[name].numpy() for name in world._tables}
    nx, ny, nz, first = t["grid_dims"][e, m].tolist()
    out = {
        "flags": t["grid_flags"][e, m],
        "dims": (nx, ny, nz),
        "grid": t["grid_cells"][first : first + nx * ny * nz],
    }
    faces = len(world._wp_meshes[e][m].indices) // 3
    vertices = len(world._wp_meshes[e][m].points)
    face_row, vertex_row = t["topo_offsets"][e, m].tolist()
    if face_row >= 0:
        out["neighbors"] = t["face_neighbors"][face_row : face_row + faces]
        out["normals"] = t["vertex_normals"][vertex_row : vertex_row + vertices]
    node_row, link_row, plane_row, count = t["cone_offsets"][e, m].tolist()
    if count >= 0:
        out["nodes"] = t["cone_nodes"][node_row : node_row + 1 + 2 * count]
        out["links"] = t["cone_links"][link_row : link_row + count]
        out["planes"] = t["cone_planes"][plane_row : plane_row + faces]
        out["cone_faces"] = t["cone_faces"][plane_row : plane_row + faces]
    return out


def test_a_batch_of_meshes_gets_the_tables_of_each_mesh_alone():
    """Every step of a batch (edge pairs in one sort, one launch of the closed-mesh check, of the grids) gives
    each mesh the tables of a world of that mesh alone, whatever sits beside it: open meshes and cuboids (no
    grid) between gridded ones, unsigned and signed grids, convex and not."""
    box = trimesh.creation.box((0.3, 0.2, 0.4))
    entries = [
        (trimesh.Trimesh(box.vertices, box.faces[:-2], process=False), "ray"),  # open: no grid
        (trimesh.creation.icosphere(2, radius=0.3), "ray"),  # convex: a plane tree
        (box, "ray"),  # a cuboid: a closed form
        (trimesh.creation.torus(0.4, 0.1, major_sections=24, minor_sections=12), "normal"),
        (trimesh.creation.annulus(0.1, 0.2, 0.1), "unsigned"),  # an unsigned grid
        (trimesh.creation.cylinder(0.1, 0.3, sections=40), "winding"),
        (trimesh.Trimesh(box.vertices, box.faces[:-2], process=False), "unsigned"),  # open, unsigned grid
    ]
    world = MeshWorld([m for m, _ in entries], sign_method=[s for _, s in entries])
    assert world._later is None  # small: every table at once
    kinds = set()
    for m, (mesh, method) in enumerate(entries):
        alone = _slot_tables(MeshWorld([mesh], sign_method=method), 0, 0)
        mine = _slot_tables(world, 0, m)
        assert mine.keys() == alone.keys(), m
        for name in alone:
            assert np.asarray(mine[name]).tobytes() == np.asarray(alone[name]).tobytes(), (m, name)
        kinds.add((int(mine["flags"]), mine["dims"][0] > 0, "nodes" in mine))
    assert {
        (0, False, False),
        (1, True, True),
        (3, False, False),
        (1, True, False),
        (0, True, False),
    } <= kinds


def test_tables_built_in_chunks_on_threads_are_those_of_one_batch(monkeypatch):
    """The NumPy steps (edge pairs, pseudo-normals, convexity, plane trees) split into runs of meshes on
    threads: every slot's tables byte for byte those of one batch, the runs really run apart."""
    entries = [
        trimesh.creation.icosphere(2, radius=0.3),
        trimesh.creation.torus(0.4, 0.1, major_sections=24, minor_sections=12),
        trimesh.creation.cylinder(0.1, 0.3, sections=40),
        trimesh.creation.box((0.3, 0.2, 0.4)),
        trimesh.creation.capsule(0.2, 0.1),
        trimesh.creation.icosphere(3, radius=0.2),
        trimesh.creation.cone(0.2, 0.3, sections=64),
    ]
    one = MeshWorld(entries)
    runs = []
    closed_tables = _tables._closed_tables

    def recorded(jobs, check):
        runs.append((len(jobs), threading.current_thread().name))
        return closed_tables(jobs, check)

    monkeypatch.setattr(_tables, "_closed_tables", recorded)
    monkeypatch.setattr(_threads, "_chunk_count", lambda weights: min(3, len(weights)))
    chunked = MeshWorld(entries)
    assert len(runs) >= 2 and all(name.startswith("warpgeo-tables-chunk") for _, name in runs), runs
    assert sum(n for n, _ in runs) == 6  # every closed mesh but the cuboid
    for m in range(len(entries)):
        mine, whole = _slot_tables(chunked, 0, m), _slot_tables(one, 0, m)
        assert mine.keys() == whole.keys(), m
        for name in whole:
            assert np.asarray(mine[name]).tobytes() == np.asarray(whole[name]).tobytes(), (m, name)


def test_steps_side_by_side_give_the_tables_of_one_thread(monkeypatch):
    """Edge pairs beside the BVH builds, the closed meshes' tables beside the closed-mesh check and the grids
    (what a large mesh's build does, here forced on small ones, a mesh that intersects itself among them):
    every slot's tables byte for byte those of one thread, the steps really on their threads."""
    crossed = trimesh.util.concatenate(
        [
            trimesh.creation.icosphere(2, radius=0.3),
            trimesh.creation.icosphere(2, radius=0.3).apply_translation([0.2, 0, 0]),
        ]
    )
    entries = [
        trimesh.creation.icosphere(3, radius=0.3),
        trimesh.creation.torus(0.4, 0.1, major_sections=24, minor_sections=12),
        crossed,  # closed and paired, but its two spheres cut each other: no closed tables
        trimesh.creation.box((0.3, 0.2, 0.4)),
        trimesh.creation.cone(0.2, 0.3, sections=64),
    ]
    one = MeshWorld(entries)
    threads = {}
    for name in ("edge_pairs", "_closed_tables", "faces_meet"):
        home = {"edge_pairs": _meshes, "faces_meet": _meshes, "_closed_tables": _tables}[name]
        step = getattr(home, name)

        def recorded(*args, step=step, name=name):
            threads.setdefault(name, set()).add(threading.current_thread().name)
            return step(*args)

        monkeypatch.setattr(home, name, recorded)
    monkeypatch.setattr(_threads, "_CHUNK_FACES", 1)
    monkeypatch.setattr(_threads, "_chunk_count", lambda weights: 1)
    monkeypatch.setattr(_threads, "_thread_count", lambda: 2)
    beside = MeshWorld(entries)
    assert threads["edge_pairs"] == {"warpgeo-bvh_0"}, threads
    assert threads["_closed_tables"] == {"warpgeo-tables-closed_0"}, threads
    assert threads["faces_meet"] == {threading.current_thread().name}, threads
    assert not beside._tables["grid_flags"][0, 2] & 1 and one._tables["grid_flags"][0, 2].item() == 0
    for m in range(len(entries)):
        mine, whole = _slot_tables(beside, 0, m), _slot_tables(one, 0, m)
        assert mine.keys() == whole.keys(), m
        for name in whole:
            assert np.asarray(mine[name]).tobytes() == np.asarray(whole[name]).tobytes(), (m, name)


def test_grids_are_sized_to_the_mesh():
    """About one cell a face, from 512 (a 500-face cylinder) to 8,192 cells."""
    cylinder = trimesh.creation.cylinder(0.2, 0.5, sections=125)  # 500 faces
    sphere = trimesh.creation.icosphere(4)  # 5,120 faces
    world = MeshWorld([cylinder, sphere])
    cells = world._tables["grid_dims"][0, :, :3].prod(dim=1).tolist()
    assert 256 <= cells[0] <= 1024 and 2560 <= cells[1] <= 10240, cells
    box = trimesh.creation.box((1.0, 1.0, 1.0)).subdivide()  # 48 faces: 512 cells (8 x 8 x 8)
    assert MeshWorld([box])._tables["grid_dims"][0, 0, :3].tolist() == [8, 8, 8]


def _reference_pairs(faces: np.ndarray) -> set | None:
    """Closed and consistently wound: every undirected edge in exactly two faces, once each way; then its
    pairs of directed edges (edge i = face i % F's edge i // F: ab, bc, ca), as a set of frozensets."""
    num_faces = len(faces)
    by_edge: dict = {}
    for f in range(num_faces):
        for k in range(3):
            a, b = int(faces[f, k]), int(faces[f, (k + 1) % 3])
            by_edge.setdefault((min(a, b), max(a, b)), []).append((k * num_faces + f, a < b))
    pairs = set()
    for members in by_edge.values():
        if len(members) != 2 or members[0][1] == members[1][1]:
            return None
        pairs.add(frozenset((members[0][0], members[1][0])))
    return pairs


def test_edge_pairs_of_many_meshes_in_one_sort():
    sphere = trimesh.creation.icosphere(2)
    closed = np.asarray(sphere.faces)
    flipped = closed.copy()
    flipped[5] = flipped[5, ::-1]
    tripled = np.concatenate([closed, closed[:1], closed[:1, ::-1]])  # an edge in four faces
    torus = trimesh.creation.torus(1.0, 0.3, major_sections=16, minor_sections=8)
    cone = trimesh.creation.cone(0.5, 1.0, sections=700)  # two hubs of 700 faces each
    meshes = [
        (np.asarray(cone.faces), len(cone.vertices)),
        (closed, len(sphere.vertices)),
        (closed[1:], len(sphere.vertices)),  # open (and an odd number of faces: 3F / 2 is no integer)
        (flipped, len(sphere.vertices)),
        (np.asarray(torus.faces), len(torus.vertices)),
        (tripled, len(sphere.vertices)),
        (closed[2:], len(sphere.vertices)),  # open, an even number of faces
        (closed, len(sphere.vertices)),
    ]
    got = _meshes.edge_pairs(meshes)
    for k, ((faces, _), pairs) in enumerate(zip(meshes, got, strict=True)):
        expected = _reference_pairs(faces)
        assert (pairs is None) == (expected is None), k
        if expected is not None:
            assert {frozenset(p) for p in pairs.tolist()} == expected, k
    assert [p is None for p in got] == [False, False, True, True, False, True, True, False]
    # a mesh large enough for the launches to split over the cores, several times: the same pairs each time
    big = trimesh.creation.icosphere(6)
    expected = _reference_pairs(np.asarray(big.faces))
    for _ in range(3):
        (pairs,) = _meshes.edge_pairs([(np.asarray(big.faces), len(big.vertices))])
        assert pairs is not None and {frozenset(p) for p in pairs.tolist()} == expected


@pytest.mark.background_tables
def test_many_small_meshes_build_their_tables_in_the_background(monkeypatch):
    """A CPU world of many small meshes defers their tables: queries before are exact (signs against
    brute-force winding numbers), equal after, and the tables those of building at once."""
    spheres = [trimesh.creation.icosphere(2, radius=0.2 + 0.05 * k) for k in range(3)]  # 320 faces each
    torus = trimesh.creation.torus(0.3, 0.1, major_sections=16, minor_sections=8)
    envs = [[spheres[0], torus], [spheres[1]], [spheres[2], spheres[0]]]
    poses = np.zeros((3, 2, 7))
    poses[..., 3] = 1.0
    poses[0, 1, :3] = (0.5, 0.0, 0.0)
    gen = np.random.default_rng(7)
    points = torch.from_numpy(gen.uniform(-0.6, 0.9, (3, 300, 3)))
    env_index = torch.arange(3)
    world = MeshWorld.from_envs(envs, poses=poses)
    assert world._later is not None
    before = signed_distance(points, world, env_index=env_index)
    assert world.wait_tables(timeout=120)
    assert (world._tables["grid_flags"][[0, 0, 1, 2, 2], [0, 1, 0, 0, 1]] == 1).all()
    after = signed_distance(points, world, env_index=env_index)
    assert torch.equal(before, after)
    for e, env in enumerate(envs):  # the union's distance: the least of its meshes' (signs by winding number)
        local = []
        for m, mesh in enumerate(env):
            p = points[e].numpy() - poses[e, m, :3]
            _, unsigned, _ = trimesh.proximity.closest_point(mesh, p)
            local.append(np.where(_winding_numbers(mesh, p) > 0.5, -unsigned, unsigned))
        np.testing.assert_allclose(before[e].numpy(), np.min(local, axis=0), atol=1e-6, rtol=0)
    monkeypatch.setattr(_prepare, "BACKGROUND_FACES", 1 << 30)
    inline = MeshWorld.from_envs(envs, poses=poses)
    assert inline._later is None
    for e, env in enumerate(envs):
        for m in range(len(env)):
            mine, theirs = _slot_tables(world, e, m), _slot_tables(inline, e, m)
            for name in theirs:
                assert np.asarray(mine[name]).tobytes() == np.asarray(theirs[name]).tobytes(), (e, m, name)


def test_tables_through_the_cuda_algorithms_on_cpu_tensors(monkeypatch):
    """The build's kernels as a CUDA world launches them (one launch each, no split across threads), on CPU
    tensors: the same tables."""
    from warpgeo import _warp

    meshes = [
        trimesh.creation.icosphere(2, radius=0.3),
        trimesh.creation.torus(0.4, 0.1, major_sections=24, minor_sections=12),
        trimesh.creation.annulus(0.1, 0.2, 0.1),
    ]
    methods = ["ray", "normal", "unsigned"]
    cpu = MeshWorld(meshes, sign_method=methods)
    monkeypatch.setattr(_warp.PATHS, "cuda_on_cpu", True)
    cuda_like = MeshWorld(meshes, sign_method=methods)
    for m in range(len(meshes)):
        mine, theirs = _slot_tables(cuda_like, 0, m), _slot_tables(cpu, 0, m)
        assert mine.keys() == theirs.keys()
        for name in theirs:
            assert np.asarray(mine[name]).tobytes() == np.asarray(theirs[name]).tobytes(), (m, name)
    points = _points(300, seed=9)
    assert torch.equal(signed_distance(points, cuda_like), signed_distance(points, cpu))


def test_batches_too_large_for_one_launch_go_in_parts(monkeypatch):
    """More faces or grid cells than one launch takes: the meshes go in parts, with the same tables."""
    meshes = [
        trimesh.creation.icosphere(2, radius=0.3),
        trimesh.creation.torus(0.4, 0.1, major_sections=24, minor_sections=12),
        trimesh.creation.cylinder(0.1, 0.3, sections=40),
    ]
    whole = MeshWorld(meshes)
    launches = []
    run = _launch.launch_rows
    monkeypatch.setattr(_launch, "launch_rows", lambda *a, **kw: launches.append(a[1]) or run(*a, **kw))
    monkeypatch.setattr(_meshes, "_MAX_BATCH_ROWS", 400)
    parts = MeshWorld(meshes)
    assert len(launches) >= 6 and max(launches) <= 2 * 576  # each mesh alone (the torus: 576 faces)
    for m in range(len(meshes)):
        mine, theirs = _slot_tables(parts, 0, m), _slot_tables(whole, 0, m)
        assert mine.keys() == theirs.keys()
        for name in theirs:
            assert np.asarray(mine[name]).tobytes() == np.asarray(theirs[name]).tobytes(), (m, name)


def _closed(vertices: np.ndarray, faces: np.ndarray) -> bool:
    world = MeshWorld([(np.asarray(vertices, np.float32), np.asarray(faces, np.int32))])
    assert world.wait_tables()
    return bool(world._tables["grid_flags"][0, 0].item() & 1)


@pytest.mark.parametrize("sections", [64, 2000])
def test_closed_mesh_check_on_fans(sections):
    """Cones and cylinders of many sections (fans: every face of a cap, and of a cone's side, shares one
    vertex, and every box of a fan holds it) are closed: faces of a convex polyhedron meet only where they
    share a vertex. Pushed through themselves (a cone's base centre out beside its side, a cylinder's cap
    centre beyond the other cap) they are not: the pushed fan crosses faces it shares no vertex with."""
    cone = trimesh.creation.cone(0.5, 1.0, sections=sections)
    cylinder = trimesh.creation.cylinder(0.5, 1.0, sections=sections)
    for mesh in (cone, cylinder):
        assert _closed(mesh.vertices, mesh.faces)
    vertices = np.asarray(cone.vertices).copy()
    centre = np.flatnonzero((vertices == 0).all(axis=1))
    assert len(centre) == 1
    # the base's centre out beside the side (whose radius at z = 0.5 is 0.25): the base fan's far faces pass
    # through the cone and out through the side faces of the near side
    vertices[centre] = (0.6, 0.0, 0.5)
    assert not _closed(vertices, cone.faces)
    vertices = np.asarray(cylinder.vertices).copy()
    centre = np.flatnonzero(np.isclose(vertices[:, :2], 0).all(axis=1) & (vertices[:, 2] > 0))
    assert len(centre) == 1
    vertices[centre, 2] = -1.0  # the top cap's centre beyond the bottom cap: its fan crosses the bottom one
    assert not _closed(vertices, cylinder.faces)


def _open_by_position(vertices: np.ndarray, faces: np.ndarray) -> bool:
    """Reference: weld vertices by position (a dict of coordinate tuples: -0.0 == 0.0), then the mesh is closed
    iff every directed edge's reverse comes as often as it does."""
    ids: dict[tuple, int] = {}
    welded = [[ids.setdefault(tuple(map(float, vertices[i])), len(ids)) for i in face] for face in faces]
    edges: dict[tuple, int] = {}
    for face in welded:
        for k in range(3):
            a, b = face[k], face[(k + 1) % 3]
            edges[(a, b)] = edges.get((a, b), 0) + 1
    return any(edges.get((b, a), 0) != count for (a, b), count in edges.items())


def test_open_when_welded_against_welding_by_position(monkeypatch):
    """Open or closed once welded, as welding by position says: triangle soups of closed meshes (also with
    -0.0 beside 0.0) are closed, a soup less a face and a height field are open; an open mesh is told by its
    position hash alone (no sort of the vertices)."""
    ball = trimesh.creation.icosphere(subdivisions=2)
    soup = (np.asarray(ball.vertices, np.float32)[ball.faces].reshape(-1, 3), np.arange(3 * len(ball.faces)))
    soup = (soup[0], soup[1].reshape(-1, 3))
    signed = soup[0].copy()
    signed[signed == 0.0] = -0.0  # some zeros negative, some not: one position
    signed[::2][soup[0][::2] == 0.0] = 0.0
    grid = np.stack(np.meshgrid(np.arange(6.0), np.arange(5.0), indexing="ij"), axis=-1).reshape(-1, 2)
    field = np.concatenate([grid, np.sin(grid[:, :1])], axis=1).astype(np.float32)
    cells = np.array([[i * 5 + j, (i + 1) * 5 + j, i * 5 + j + 1] for i in range(5) for j in range(4)])
    cases = {
        "soup": soup,
        "soup with -0.0": (signed, soup[1]),
        "soup less a face": (soup[0], soup[1][1:]),
        "height field": (field, cells),
        "box": (
            np.asarray(trimesh.creation.box().vertices, np.float32),
            np.asarray(trimesh.creation.box().faces),
        ),
    }
    expected = {
        "soup": False,
        "soup with -0.0": False,
        "soup less a face": True,
        "height field": True,
        "box": False,
    }
    for name, (vertices, faces) in cases.items():
        assert _open_by_position(vertices, faces) == expected[name], name  # the reference itself
        assert _meshes.open_when_welded(vertices, faces) == expected[name], name
    sorted_vertices = []
    unique = np.unique
    monkeypatch.setattr(np, "unique", lambda *a, **k: sorted_vertices.append(1) or unique(*a, **k))
    assert _meshes.open_when_welded(*cases["height field"]) and not sorted_vertices
    assert not _meshes.open_when_welded(*cases["soup"]) and sorted_vertices  # closed: the exact check


def test_pairs_found_on_a_thread_are_waited_for_by_the_table_build(monkeypatch):
    """A mesh's edge pairs found beside its BVH build reach its tables through a _Pairing: its batch's result
    (the constructor does not wait for it), or, in a forked child whose copy of the batch never finishes,
    found again there; the same pairs either way."""
    from concurrent.futures import Future

    sphere = trimesh.creation.icosphere(3)
    faces, count = np.asarray(sphere.faces, np.int32), len(sphere.vertices)
    expected = _meshes.edge_pairs([(faces, count)])[0]
    done = Future()
    done.set_result([None, expected])
    assert _meshes._Pairing(done, 1).get(faces, count) is expected
    never = Future()  # a batch whose thread is not in this process
    pairing = _meshes._Pairing(never, 0)
    monkeypatch.setattr(_meshes.os, "getpid", lambda: pairing.pid + 1)
    np.testing.assert_array_equal(pairing.get(faces, count), expected)
