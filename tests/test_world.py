"""MeshWorld: mesh inputs, environments, poses, enable flags, sign methods and input errors."""

from __future__ import annotations

import gc
import math
import subprocess
import sys
import weakref

import numpy as np
import pytest
import torch
import trimesh

import warpgeo
import warpgeo.world
from warpgeo import MeshWorld, signed_distance


def _cube(size: float = 1.0) -> trimesh.Trimesh:
    return trimesh.creation.box(extents=(size, size, size))


def _distance(world, point, **kw) -> float:
    return signed_distance(
        torch.tensor([point], dtype=torch.float64, device=world.device), world, **kw
    ).item()


@pytest.mark.parametrize("ext", ["obj", "stl", "ply", "off", "glb"])
def test_load_from_file(tmp_path, ext):
    path = tmp_path / f"cube.{ext}"
    _cube().export(path)
    world = MeshWorld([str(path), path])  # str and PathLike
    assert world.num_meshes == (2,)
    assert _distance(world, [0.0, 0.0, 0.0]) == pytest.approx(-0.5, abs=1e-6)
    assert _distance(world, [0.0, 0.0, 1.0]) == pytest.approx(0.5, abs=1e-6)


def test_vertices_faces_pairs(device):
    cube = _cube()
    as_numpy = (cube.vertices, cube.faces)
    as_torch = (torch.from_numpy(cube.vertices), torch.from_numpy(cube.faces).int())
    world = MeshWorld(
        [as_numpy, as_torch], poses=[[0, 0, 0, 1, 0, 0, 0], [3, 0, 0, 1, 0, 0, 0]], device=device
    )
    assert _distance(world, [0.0, 0.0, 0.0]) == pytest.approx(-0.5, abs=1e-6)
    assert _distance(world, [3.0, 0.2, 0.0]) == pytest.approx(-0.3, abs=1e-6)
    assert world.device == torch.device(device) or world.device.type == "cuda"


def test_set_poses_moves_meshes_without_rebuild(device):
    world = MeshWorld([_cube()], device=device)
    ids = world._tables["mesh_ids"].clone()
    meshes = [m for row in world._wp_meshes for m in row]
    # 90 degrees about z, then a shift: the cube's corner (0.5, 0.5, 0.5) goes to (x - 0.5, y + 0.5, ...)
    c, s = math.cos(math.pi / 4), math.sin(math.pi / 4)
    world.set_poses(torch.tensor([[2.0, 0.0, 0.0, c, 0.0, 0.0, s]]))
    assert (
        torch.equal(world._tables["mesh_ids"], ids) and [m for row in world._wp_meshes for m in row] == meshes
    )
    assert _distance(world, [2.0, 0.0, 0.0]) == pytest.approx(-0.5, abs=1e-6)
    assert _distance(world, [0.0, 0.0, 0.0]) == pytest.approx(1.5, abs=1e-6)
    # a stretched box, rotated: its long axis (x in the mesh frame) becomes y in the world
    long_box = trimesh.creation.box(extents=(2.0, 0.2, 0.2))
    world = MeshWorld([long_box], poses=[[0, 0, 0, c, 0, 0, s]], device=device)
    assert _distance(world, [0.0, 0.9, 0.0]) < 0 < _distance(world, [0.9, 0.0, 0.0])
    np.testing.assert_allclose(world.poses.cpu().numpy(), [[[0, 0, 0, c, 0, 0, s]]], atol=1e-12)


def test_near_unit_quaternions_are_normalised_others_refused():
    world = MeshWorld([_cube()])
    world.set_poses([[0, 0, 0, 1.0005, 0, 0, 0]])
    assert world.poses[0, 0, 3].item() == 1.0
    with pytest.raises(ValueError, match=r"poses\[0, 0\] must hold a unit quaternion"):
        world.set_poses([[0, 0, 0, 2.0, 0, 0, 0]])
    with pytest.raises(ValueError, match="unit quaternion"):
        world.set_poses([[0, 0, 0, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match="finite"):
        world.set_poses([[0, float("nan"), 0, 1, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"poses must have shape \(1, 7\) or \(1, 1, 7\)"):
        world.set_poses([[0, 0, 0, 1, 0, 0]])
    with pytest.raises(ValueError, match="unit quaternion"):
        MeshWorld([_cube()], poses=[[0, 0, 0, 0.5, 0, 0, 0]])


def test_ragged_environments(device):
    world = MeshWorld.from_envs(
        [[_cube()], [_cube(), _cube(), _cube()]],
        poses=[
            [[0, 0, 0, 1, 0, 0, 0]],
            [[2, 0, 0, 1, 0, 0, 0], [4, 0, 0, 1, 0, 0, 0], [6, 0, 0, 1, 0, 0, 0]],
        ],
        device=device,
    )
    assert (world.num_envs, world.max_meshes, world.num_meshes) == (2, 3, (1, 3))
    assert world.enabled.cpu().tolist() == [[True, False, False], [True, True, True]]
    env1 = torch.tensor([1], device=device)
    assert _distance(world, [4.0, 0.0, 0.0], env_index=env1) == pytest.approx(-0.5, abs=1e-6)
    assert _distance(world, [4.0, 0.0, 0.0]) == pytest.approx(3.5, abs=1e-6)
    # a padded (E, M, 7) array: padding entries are ignored, even garbage
    poses = torch.zeros(2, 3, 7)
    poses[..., 3] = 1.0
    poses[0, 1:] = float("nan")
    poses[1, :, 0] = torch.tensor([1.0, 2.0, 3.0])
    world.set_poses(poses)
    assert _distance(world, [3.0, 0.0, 0.0], env_index=env1) == pytest.approx(-0.5, abs=1e-6)
    # padding slots stay disabled whatever the mask says
    world.set_enabled(torch.ones(2, 3, dtype=torch.bool))
    assert world.enabled.cpu().tolist() == [[True, False, False], [True, True, True]]
    with pytest.raises(ValueError, match=r"poses must have shape \(2, 3, 7\); got \(2, 1, 7\)"):
        world.set_poses([[[0, 0, 0, 1, 0, 0, 0]], [[0, 0, 0, 1, 0, 0, 0]]])
    with pytest.raises(ValueError, match=r"poses\[1\] must have shape \(3, 7\)"):
        world.set_poses([[[0, 0, 0, 1, 0, 0, 0]], [[0, 0, 0, 1, 0, 0, 0]] * 2])


def test_set_enabled(device):
    world = MeshWorld([_cube(), _cube()], poses=[[0, 0, 0, 1, 0, 0, 0], [3, 0, 0, 1, 0, 0, 0]], device=device)
    assert _distance(world, [2.0, 0.0, 0.0]) == pytest.approx(0.5, abs=1e-6)
    world.set_enabled([False, True])
    assert _distance(world, [0.0, 0.0, 0.0]) == pytest.approx(2.5, abs=1e-6)
    world.set_enabled(np.array([1, 1]))
    assert _distance(world, [0.0, 0.0, 0.0]) == pytest.approx(-0.5, abs=1e-6)
    with pytest.raises(TypeError, match="mask must be bool"):
        world.set_enabled([0.0, 1.0])
    with pytest.raises(ValueError, match=r"mask must have shape \(2,\) or \(1, 2\)"):
        world.set_enabled([True, False, True])


@pytest.mark.parametrize("mask", [[2, 1], np.array([-1, 0]), torch.tensor([0, 2]), torch.tensor([[1, -3]])])
def test_set_enabled_takes_bools_or_0_1_only(device, mask):
    world = MeshWorld([_cube(), _cube()], device=device)
    before = world.enabled
    with pytest.raises(ValueError, match="mask must hold bools or 0/1 integers"):
        world.set_enabled(mask)
    assert torch.equal(world.enabled, before)
    if isinstance(mask, torch.Tensor):  # value checks off: nothing read back, nonzero enables
        with warpgeo.value_checks(False):
            world.set_enabled(mask)
        assert world.enabled.tolist() == [[bool(v) for v in mask.reshape(-1).tolist()]]
    world.set_enabled(torch.tensor([1, 0], device=device))
    assert world.enabled.tolist() == [[True, False]]


def test_huge_ints_and_nested_names_are_value_errors():
    world = MeshWorld([_cube()])
    with pytest.raises(ValueError, match=r"^poses must be real numbers within the float64 range"):
        world.set_poses([[10**400, 0, 0, 1, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"^sign_method\[0\] must be one of"):
        MeshWorld([_cube(), _cube()], sign_method=[["ray"], ["ray"]])
    with pytest.raises(ValueError, match=r"^sign_method\[0\]\[0\] must be one of"):
        MeshWorld.from_envs([[_cube()]], sign_method=[[["ray"]]])


def test_winding_support_is_real(device):
    world = MeshWorld([_cube()], device=device, sign_method="winding")
    assert all(m.support_winding_number for row in world._wp_meshes for m in row)
    assert world.sign_method == "winding"
    # the cup probe of world.py: winding says inside where the ray vote says outside
    cup = _cube()
    cup = trimesh.Trimesh(
        cup.vertices, cup.faces[(cup.face_normals[:, 0] < 0.5) & (cup.face_normals[:, 1] < 0.5)]
    )
    by_winding = MeshWorld([cup], device=device, sign_method="winding")
    by_rays = MeshWorld([cup], device=device, sign_method="ray")
    assert _distance(by_winding, [0.0, 0.0, 0.0]) < 0 < _distance(by_rays, [0.0, 0.0, 0.0])


def test_meshes_live_and_die_with_the_world():
    world = MeshWorld([_cube()])
    ref = weakref.ref(world._wp_meshes[0][0])
    gc.collect()
    assert ref() is not None
    del world
    gc.collect()
    assert ref() is None


def test_errors(tmp_path):
    cube = _cube()
    with pytest.raises(ValueError, match="faces must have shape"):
        MeshWorld([(cube.vertices, np.zeros((0, 3), dtype=np.int64))])
    with pytest.raises(ValueError, match="vertices must have shape"):
        MeshWorld([(np.zeros((0, 3)), cube.faces)])
    bad = cube.vertices.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"meshes\[0\]: vertices must be finite"):
        MeshWorld([(bad, cube.faces)])
    with pytest.raises(IndexError, match=r"face indices must lie in \[0, 8\)"):
        MeshWorld([(cube.vertices, cube.faces + 1)])
    with pytest.raises(IndexError, match=r"envs\[1\]\[0\]"):
        MeshWorld.from_envs([[cube], [(cube.vertices, -cube.faces)]])
    with pytest.raises(TypeError, match="faces must be integers"):
        MeshWorld([(cube.vertices, cube.faces.astype(float))])
    with pytest.raises(TypeError, match=r"meshes\[0\] must be a trimesh.Trimesh"):
        MeshWorld([42])
    with pytest.raises(TypeError, match="wrap a single mesh in a list"):
        MeshWorld(cube)
    with pytest.raises(ValueError, match="no such mesh file"):
        MeshWorld([tmp_path / "missing.obj"])
    (tmp_path / "junk.stl").write_text("not a mesh")
    with pytest.raises(ValueError, match=r"junk\.stl"):
        MeshWorld([tmp_path / "junk.stl"])
    with pytest.raises(ValueError, match="at least one mesh"):
        MeshWorld([])
    with pytest.raises(ValueError, match="sign_method"):
        MeshWorld([cube], sign_method="parity")
    with pytest.raises(ValueError, match="device"):
        MeshWorld([cube], device="meta")
    with pytest.raises(ValueError, match="envs must be a non-empty list"):
        MeshWorld.from_envs([])


def _angle_weighted_normals(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Each vertex's sum over its faces of (the face's angle there) x (its unit normal), face by face."""
    out = np.zeros((len(vertices), 3))
    for face in faces:
        p = vertices[face].astype(np.float64)
        normal = np.cross(p[1] - p[0], p[2] - p[0])
        normal /= np.linalg.norm(normal)
        for k in range(3):
            u, v = p[(k + 1) % 3] - p[k], p[(k + 2) % 3] - p[k]
            cos = np.dot(u, v) / (np.linalg.norm(u) * np.linalg.norm(v))
            out[face[k]] += math.acos(np.clip(cos, -1.0, 1.0)) * normal
    return out


def test_pseudo_normal_tables_of_closed_meshes():
    """A closed mesh gets the face across each edge of each face and angle-weighted vertex normals, at its
    offsets in the world's tables; an open mesh gets none (offsets -1)."""
    sphere = trimesh.creation.icosphere(subdivisions=2)
    cuboid = trimesh.creation.box((1.0, 2.0, 0.5))
    open_mesh = (cuboid.vertices, cuboid.faces[:-2])
    box = cuboid.subdivide()  # closed, and no cuboid (those get no tables: their distance is in closed form)
    world = MeshWorld.from_envs([[sphere, open_mesh], [box]])
    tables = world._tables
    assert tables["topo_offsets"].tolist() == [
        [[0, 0], [-1, -1]],
        [[len(sphere.faces), len(sphere.vertices)], [-1, -1]],
    ]
    neighbors = tables["face_neighbors"].numpy()
    normals = tables["vertex_normals"].numpy()
    assert neighbors.shape == (len(sphere.faces) + len(box.faces), 3)
    for mesh, (face_row, vertex_row) in ((sphere, (0, 0)), (box, (len(sphere.faces), len(sphere.vertices)))):
        faces = np.asarray(mesh.faces)
        mine = neighbors[face_row : face_row + len(faces)]
        for f, face in enumerate(faces):
            for k in range(3):
                a, b = face[k], face[(k + 1) % 3]
                g = mine[f, k]
                assert g != f
                other = list(faces[g])
                # the neighbour holds the same edge, the other way round (consistent winding)
                assert any(other[j] == b and other[(j + 1) % 3] == a for j in range(3)), (f, k, g)
        expected = _angle_weighted_normals(np.asarray(mesh.vertices, dtype=np.float32), faces)
        np.testing.assert_allclose(
            normals[vertex_row : vertex_row + len(mesh.vertices)], expected, atol=1e-12
        )
        # outward on these convex meshes
        centred = np.asarray(mesh.vertices) - np.asarray(mesh.vertices).mean(axis=0)
        assert ((expected * centred).sum(axis=1) > 0).all()


def test_a_world_from_arrays_does_not_import_trimesh():
    """trimesh's import costs most of a second: a world built from (vertices, faces) arrays, and the first
    op on it, must not pay it; and the garbage collector paused around Warp's import is running again."""
    code = (
        "import gc, sys, torch, warpgeo\n"
        "v = torch.tensor([[0., 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])\n"
        "f = torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])\n"
        "w = warpgeo.MeshWorld([(v, f)])\n"
        "d = warpgeo.signed_distance(torch.tensor([[0.1, 0.1, 0.1], [2.0, 0.0, 0.0]]), w)\n"
        "assert d[0] < 0 < d[1], d\n"
        "assert 'trimesh' not in sys.modules, 'trimesh was imported'\n"
        "assert gc.isenabled(), 'the garbage collector was left off'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def _posed_vertices(mesh: trimesh.Trimesh, pose) -> np.ndarray:
    """The mesh's (float32) vertices posed by ``[x, y, z, qw, qx, qy, qz]``, in float64 (a naive reference)."""
    w, x, y, z = (float(v) for v in pose[3:])
    rot = np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )
    return mesh.vertices.astype(np.float32).astype(np.float64) @ rot.T + np.asarray(
        pose[:3], dtype=np.float64
    )


def test_world_bounds_hold_the_posed_meshes(device):
    """The broad phase's posed boxes: each holds its mesh's posed vertices, before and after set_poses, with
    little to spare, and padding slots stay empty boxes at the origin."""
    gen = torch.Generator().manual_seed(21)
    meshes = [
        trimesh.creation.box(extents=(2.0, 0.2, 0.1)),
        trimesh.creation.icosphere(subdivisions=2, radius=0.3),
        trimesh.creation.torus(major_radius=1.0, minor_radius=0.2),
    ]

    def poses(n: int) -> torch.Tensor:
        q = torch.randn(n, 4, generator=gen, dtype=torch.float64)
        return torch.cat(
            [torch.rand(n, 3, generator=gen, dtype=torch.float64) * 20 - 10, q / q.norm(dim=1, keepdim=True)],
            1,
        )

    first = poses(3)
    world = MeshWorld.from_envs([meshes, meshes[:1]], poses=[first, first[:1]], device=device)
    for step in range(3):
        current = world.poses
        boxes = world._tables["world_bounds"].cpu().double().numpy()
        assert boxes.shape == (2, 3, 2, 3)
        for e, count in enumerate(world.num_meshes):
            for m in range(count):
                v = _posed_vertices(meshes[m], current[e, m].cpu().numpy())
                lo, hi = boxes[e, m]
                assert (v >= lo).all() and (v <= hi).all(), (step, e, m)
                # tight: the posed box of the mesh's box, which is at most sqrt(3) times the vertices' extent
                spread = v.max(0) - v.min(0)
                assert (hi - lo <= math.sqrt(3) * spread.max() + 1e-3).all()
        np.testing.assert_array_equal(boxes[1, 1:], 0.0)  # padding: empty box, identity pose
        world.set_poses(torch.stack([poses(3), torch.cat([poses(1), poses(2)])]))


def test_world_bounds_round_outwards_beyond_float32():
    """A float64 pose beyond float32's range gives a box bound of the largest float32 or inf, never one
    that cuts the mesh off; ordinary poses get finite bounds rounded outwards."""
    world = MeshWorld([_cube()], poses=[[1e39, -1e39, 1.0, 1.0, 0.0, 0.0, 0.0]])
    lo, hi = world._tables["world_bounds"][0, 0].double()
    big = float(np.finfo(np.float32).max)
    assert lo.tolist()[:2] == [big, -math.inf] and hi.tolist()[:2] == [math.inf, -big]
    assert lo[2] <= 0.5 and hi[2] >= 1.5
    world.set_poses([[0.1, 0.2, 0.3, 1.0, 0.0, 0.0, 0.0]])
    lo, hi = world._tables["world_bounds"][0, 0].double()
    exact = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    assert (lo <= exact - 0.5).all() and (hi >= exact + 0.5).all()
    assert (lo > exact - 0.5 - 1e-5).all() and (hi < exact + 0.5 + 1e-5).all()


def _box_faces(v: np.ndarray, faces: np.ndarray) -> MeshWorld:
    return MeshWorld([(v, faces)])


def _cuboid(extents, diagonal: int) -> tuple[np.ndarray, np.ndarray]:
    """A box's 8 corners (index 4x + 2y + z) and 12 outward faces, each side split along its first (0) or
    second (1) diagonal; and the overlapping pair (2): the two halves of each side share an edge."""
    corners = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], dtype=np.float64)
    faces = []
    for axis in range(3):
        u, w = [a for a in range(3) if a != axis]
        for side in (0, 1):
            quad = []
            for cu, cw in ((0, 0), (1, 0), (1, 1), (0, 1)):
                c = [0, 0, 0]
                c[axis], c[u], c[w] = side, cu, cw
                quad.append(4 * c[0] + 2 * c[1] + c[2])
            # (q0, q1, q2) has normal e_u x e_w: reverse the quad where that points into the box
            if (np.cross(np.eye(3)[u], np.eye(3)[w])[axis] > 0) != (side == 1):
                quad = quad[::-1]
            q0, q1, q2, q3 = quad
            faces += [
                [(q0, q1, q2), (q0, q2, q3)],
                [(q0, q1, q3), (q1, q2, q3)],
                [(q0, q1, q2), (q0, q1, q3)],
            ][diagonal]
    return corners * np.asarray(extents) - np.asarray(extents) / 2, np.array(faces)


def test_cuboids_are_told_apart():
    """A cuboid (exactly its box's surface, wound outwards) gets the closed and box flags and no grid or
    tables, whichever diagonal its sides are split along and whether its vertices are shared or not; a face
    turned inwards, two halves of a side that overlap instead of tiling it, a missing face, a subdivided box
    (more faces) and a box with a dent are not cuboids (and keep their own paths)."""
    extents = (1.0, 2.0, 0.5)
    for v, f in (_cuboid(extents, 0), _cuboid(extents, 1)):
        assert trimesh.Trimesh(v, f, process=False).is_volume  # the reference says: a closed, outward box
        tables = _box_faces(v, f)._tables
        assert tables["grid_flags"].item() == 3 and tables["grid_dims"][0, 0].tolist()[:3] == [0, 0, 0]
        assert tables["topo_offsets"].tolist() == [[[-1, -1]]]
        unshared = (v[f].reshape(-1, 3), np.arange(36).reshape(12, 3))
        assert _box_faces(*unshared)._tables["grid_flags"].item() == 3
    box = trimesh.creation.box(extents)
    assert MeshWorld([box])._tables["grid_flags"].item() == 3
    v, f = _cuboid(extents, 0)
    inward = f.copy()
    inward[5] = inward[5][::-1]
    dented = v.copy()
    dented[0] = dented[0] * 0.5  # a corner pulled in: no longer on its box's corner
    overlapping = _cuboid(extents, 2)
    for vertices, faces in ((v, inward), overlapping, (v, f[:-1]), (dented, f)):
        assert not _box_faces(vertices, faces)._tables["grid_flags"].item() & 2
    subdivided = box.subdivide()
    flags = _box_faces(np.asarray(subdivided.vertices), np.asarray(subdivided.faces))._tables["grid_flags"]
    assert flags.item() == 1


# --------------------------------------------------------------------------------------------------------
# the closed-mesh check: intersecting faces that share no vertex, against an exact rational reference
# --------------------------------------------------------------------------------------------------------


def _exact_segment_meets_triangle(p, q, a, b, c) -> bool:
    """Whether segment ``pq`` meets the closed triangle ``abc`` (Fractions: exact): the segment's parameter
    and the barycentric coordinates of the crossing by Cramer's rule, or, for a segment in the triangle's
    plane, an end inside the triangle or a crossing with one of its edges."""

    def sub(x, y):
        return [x[i] - y[i] for i in range(3)]

    def cross(x, y):
        return [x[1] * y[2] - x[2] * y[1], x[2] * y[0] - x[0] * y[2], x[0] * y[1] - x[1] * y[0]]

    def dot(x, y):
        return sum(x[i] * y[i] for i in range(3))

    d, e1, e2, s = sub(q, p), sub(b, a), sub(c, a), sub(p, a)
    n = cross(e1, e2)
    det = -dot(d, n)  # p + t d = a + u e1 + v e2
    if det != 0:
        t = dot(s, n) / det
        u = -dot(d, cross(s, e2)) / det
        v = -dot(d, cross(e1, s)) / det
        return 0 <= t <= 1 and u >= 0 and v >= 0 and u + v <= 1
    if dot(s, n) != 0:  # parallel to the plane, off it
        return False

    def inside(x):  # x in the plane: barycentric signs against the normal
        return all(dot(cross(sub(y, x), sub(z, x)), n) >= 0 for y, z in ((a, b), (b, c), (c, a)))

    if inside(p) or inside(q):
        return True
    for y, z in ((a, b), (b, c), (c, a)):  # coplanar segments pq and yz: solve p + t d = y + w (z - y)
        f = sub(z, y)
        m = cross(d, f)
        if dot(m, m) == 0:  # parallel: collinear and overlapping?
            if dot(cross(sub(y, p), d), cross(sub(y, p), d)) == 0:
                ts = [dot(sub(x, p), d) / dot(d, d) for x in (y, z)]
                if min(ts) <= 1 and max(ts) >= 0:
                    return True
            continue
        g = sub(y, p)
        t = dot(cross(g, f), m) / dot(m, m)
        w = dot(cross(g, d), m) / dot(m, m)
        if 0 <= t <= 1 and 0 <= w <= 1:
            return True
    return False


def _exact_intersecting_pairs(vertices: np.ndarray, faces: np.ndarray) -> int:
    """Pairs of faces sharing no vertex whose closed triangles meet, from the float32 vertices the world
    queries: pairs that a plane of one face separates by far more than float64 rounding are disjoint, the
    rest are tested exactly (Fractions)."""
    from fractions import Fraction

    v32 = np.asarray(vertices, dtype=np.float32)
    tri = v32.astype(np.float64)[faces]
    lo, hi = tri.min(axis=1), tri.max(axis=1)
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    scale = np.abs(tri).max() + 1.0
    count = 0
    for f in range(len(faces)):
        g = np.arange(f + 1, len(faces))
        g = g[((lo[g] <= hi[f]) & (hi[g] >= lo[f])).all(axis=1)]
        g = g[~np.isin(faces[g], faces[f]).any(axis=1)]
        for first in (True, False):  # a plane of one face with the other strictly on one side
            x, y = (f, g) if first else (g, f)
            side = np.einsum("...j,...kj->...k", normal[x], tri[y] - tri[x][..., None, 0, :])
            margin = 1e-9 * scale * np.linalg.norm(normal[x], axis=-1)[..., None]
            g = g[~((side > margin).all(axis=1) | (side < -margin).all(axis=1))]
        for h in g:
            t0 = [[Fraction(float(x)) for x in v32[i]] for i in faces[f]]
            t1 = [[Fraction(float(x)) for x in v32[i]] for i in faces[h]]
            if any(
                _exact_segment_meets_triangle(s[i], s[(i + 1) % 3], *t)
                for s, t in ((t0, t1), (t1, t0))
                for i in range(3)
            ):
                count += 1
    return count


def _kernel_intersecting_pairs(vertices: np.ndarray, faces: np.ndarray, device) -> int:
    from warpgeo import _launch, _warp
    from warpgeo._kernels import build_meet

    wp = _warp.warp()
    wdev = _warp.warp_device(torch.device(device))
    mesh = wp.Mesh(
        points=wp.array(np.asarray(vertices, dtype=np.float32), dtype=wp.vec3, device=wdev),
        indices=wp.array(np.asarray(faces, dtype=np.int32).reshape(-1), dtype=wp.int32, device=wdev),
    )
    found = torch.zeros(1, dtype=torch.int32, device=device)
    _launch.launch(
        build_meet.FACES_MEET_ONE["float32"].face_intersections,
        len(faces),
        device=torch.device(device),
        mesh=mesh.id,
        num_faces=len(faces),
        found=found,
    )
    return int(found.item())


def _two_boxes(offset, inner=(0.3, 0.3, 0.3)) -> trimesh.Trimesh:
    """Two boxes in one mesh: half extents 0.3 at the origin and ``inner`` at ``offset``."""
    a = trimesh.creation.box(extents=(0.6, 0.6, 0.6))
    b = trimesh.creation.box(extents=2 * np.asarray(inner)).apply_translation(offset)
    return trimesh.Trimesh(
        np.concatenate([a.vertices, b.vertices]), np.concatenate([a.faces, b.faces + 8]), process=False
    )


def _hull(seed: int, n: int, stretch=(1.0, 1.0, 1.0), on_sphere: bool = False) -> trimesh.Trimesh:
    """The convex hull of ``n`` random points (``on_sphere``: on the unit sphere, all of them on the hull),
    scaled by ``stretch``."""
    points = np.random.default_rng(seed).normal(size=(n, 3))
    if on_sphere:
        points /= np.linalg.norm(points, axis=1, keepdims=True)
    return trimesh.convex.convex_hull(points * np.asarray(stretch))


def _pushed_through(mesh: trimesh.Trimesh, vertex: int, depth: float) -> trimesh.Trimesh:
    """``mesh`` with one vertex pushed ``depth`` times its distance from the centre through it and out of the
    other side: its faces cross faces they share no vertex with."""
    v = mesh.vertices.copy()
    v[vertex] = -depth * v[vertex]
    return trimesh.Trimesh(v, mesh.faces, process=False)


@pytest.mark.parametrize(
    ("name", "mesh", "intersecting"),
    [
        ("icosphere r=0.01", trimesh.creation.icosphere(subdivisions=4, radius=0.01), False),
        ("icosphere r=0.15", trimesh.creation.icosphere(subdivisions=4, radius=0.15), False),
        ("icosphere r=0.3", trimesh.creation.icosphere(subdivisions=4, radius=0.3), False),
        ("icosphere r=40", trimesh.creation.icosphere(subdivisions=4, radius=40.0), False),
        ("hull of 400 points on a sphere r=0.1", _hull(0, 400, (0.1, 0.1, 0.1), on_sphere=True), False),
        ("hull of 400 points on a sphere r=1", _hull(1, 400, on_sphere=True), False),
        ("flat hull of 400 points", _hull(2, 400, (0.1, 0.1, 0.002), on_sphere=True), False),
        ("hull of 400 points", _hull(3, 400), False),
        ("torus", trimesh.creation.torus(major_radius=1.0, minor_radius=0.3), False),
        ("two overlapping boxes", _two_boxes((0.2, 0.1, 0.05)), True),
        ("two boxes, coplanar sides", _two_boxes((0.2, 0.0, 0.0)), True),
        ("two boxes touching along a side", _two_boxes((0.6, 0.1, 0.05)), True),
        ("two boxes apart", _two_boxes((0.61, 0.1, 0.05)), False),
        ("box inside a box", _two_boxes((0.0, 0.0, 0.0), (0.2, 0.15, 0.1)), False),
        (
            "icosphere, a vertex pushed through",
            _pushed_through(trimesh.creation.icosphere(2, 0.3), 5, 1.5),
            True,
        ),
        ("hull, a vertex pushed through", _pushed_through(_hull(2, 60), 3, 1.5), True),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_closed_mesh_check_against_exact_intersections(device, name, mesh, intersecting):
    """The closed-mesh check counts the pairs of faces sharing no vertex that intersect or touch: as many as
    an exact rational test, on fine meshes whose distant faces are nearly coplanar (no false positive, which
    a fixed epsilon gives there) and on genuinely self-intersecting ones; only the latter lose the flag."""
    vertices, faces = np.asarray(mesh.vertices), np.asarray(mesh.faces)
    expected = _exact_intersecting_pairs(vertices, faces)
    assert (expected > 0) == intersecting, name
    assert _kernel_intersecting_pairs(vertices, faces, device) == expected, name
    if trimesh.Trimesh(vertices, faces, process=False).is_watertight and "box" not in name:
        flags = MeshWorld([(vertices, faces)], device=device)._tables["grid_flags"].item()
        assert bool(flags & 1) != intersecting, name


def test_world_fields_are_the_kernels_struct_fields():
    """The world is declared once (``warpgeo._kernels.world.WORLD_FIELDS``): the ops' world list
    (``warpgeo.world.WORLD_FIELDS``, derived) and the kernels' struct name the same fields in the same order,
    and a world's tensors, of the derived dtypes and shapes, fill the struct of each precision."""
    from warpgeo import _launch
    from warpgeo._kernels import world as kernels
    from warpgeo.world import WORLD_FIELDS

    assert tuple(WORLD_FIELDS) == tuple(kernels.WORLD_FIELDS)
    for struct in kernels.WORLD.values():
        assert tuple(struct.vars) == tuple(WORLD_FIELDS)
    world = MeshWorld.from_envs([[_cube(), _cube(2.0)], [_cube()]])
    for dtype, precision in ((torch.float32, "float32"), (torch.float64, "float64")):
        tensors = world.kernel_args(dtype).world
        for (name, (field_dtype, shape)), t in zip(WORLD_FIELDS.items(), tensors, strict=True):
            assert t.dtype == (field_dtype or dtype), name
            sizes = {"E": 2, "M": 2}
            assert len(t.shape) == len(shape), name
            assert all(r is None or t.shape[i] == sizes.get(r, r) for i, r in enumerate(shape)), name
        for kind in ("meshes", "cuboids"):
            _launch.struct(kernels.WORLD[precision, kind], **dict(zip(WORLD_FIELDS, tensors, strict=True)))


def test_kernel_args_are_the_live_state():
    """set_poses / set_enabled write into the very tensors the ops are handed (so captured CUDA graphs and
    compiled graphs see the new state), for both precisions."""
    world = MeshWorld([_cube(), _cube()])
    lists = {dtype: world.kernel_args(dtype).world for dtype in (torch.float32, torch.float64)}
    ptrs = {dtype: [t.data_ptr() for t in lst] for dtype, lst in lists.items()}
    world.set_poses(torch.tensor([[1.0, 0, 0, 1, 0, 0, 0], [0, 2.0, 0, 0, 1, 0, 0]]))
    world.set_enabled([True, False])
    for dtype, lst in lists.items():
        assert world.kernel_args(dtype).world is lst
        assert [t.data_ptr() for t in lst] == ptrs[dtype]
        fields = dict(zip(warpgeo.world.WORLD_FIELDS, lst, strict=True))
        assert fields["inv_poses"].dtype == dtype
        assert fields["enabled"].tolist() == [[1, 0]]
        assert fields["inv_poses"][0, 0, 0].item() == -1.0  # mesh-from-world of a shift by +1 along x
        assert fields["world_bounds"][0, 0, 0, 0].item() < 0.5 < fields["world_bounds"][0, 0, 1, 0].item()
    assert world.kernel_args(torch.float16).world is lists[torch.float32]


@pytest.mark.parametrize("checks", [True, False])
@pytest.mark.parametrize("how", ["data", "numpy", "in place"])
def test_mesh_ids_written_behind_torchs_back_are_refused(checks, how):
    """A world's own mesh_ids tensor written in place, through .data or through a NumPy view (no version
    bump) is refused before any launch, value checks on or off (on the CPU its bytes are compared on every
    call); a clone with the same values is accepted (vetted by value)."""
    world = MeshWorld([_cube()])
    args = world.kernel_args()
    points = torch.zeros(1, 2, 3)
    op = torch.ops.warpgeo.signed_distance
    expected, _ = op(points, None, [args.world[0].clone(), *args.world[1:]], args.all_cuboids, False)
    ids = args.world[0]
    if how == "data":
        ids.data.add_(64)
    elif how == "numpy":
        ids.numpy()[...] += 64
    else:
        ids.add_(64)
    with warpgeo.value_checks(checks), pytest.raises(ValueError, match="mesh_ids"):
        op(points, None, args.world, args.all_cuboids, False)
    ids.sub_(64)  # the same values again: accepted (by value: the version moved on)
    with warpgeo.value_checks(checks):
        got, _ = op(points, None, args.world, args.all_cuboids, False)
    assert torch.equal(got, expected)


# --------------------------------------------------------------------------------------------------------
# the build's tables against a node-by-node reference: bit for bit where no float rounding differs
# --------------------------------------------------------------------------------------------------------


def _reference_topology(vertices: np.ndarray, faces: np.ndarray):
    """``(face_neighbors, vertex_normals)`` of a watertight, consistently wound mesh (None otherwise), by the
    lexicographic unique of the edges and a bincount per corner and axis."""
    edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    _, index, count = np.unique(np.sort(edges, axis=1), axis=0, return_inverse=True, return_counts=True)
    index = index.reshape(-1)
    forward = edges[:, 0] < edges[:, 1]
    if not (count == 2).all() or not (np.bincount(index, weights=forward, minlength=len(count)) == 1).all():
        return None
    num_faces = len(faces)
    pairs = np.argsort(index, kind="stable").reshape(-1, 2)
    neighbors = np.full((3, num_faces), -1, dtype=np.int64)
    first, second = pairs[:, 0], pairs[:, 1]
    neighbors[first // num_faces, first % num_faces] = second % num_faces
    neighbors[second // num_faces, second % num_faces] = first % num_faces
    tri = vertices.astype(np.float64)[faces]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    vertex_normals = np.zeros((len(vertices), 3))
    for k in range(3):
        u = tri[:, (k + 1) % 3] - tri[:, k]
        v = tri[:, (k + 2) % 3] - tri[:, k]
        angle = np.arctan2(np.linalg.norm(np.cross(u, v), axis=1), (u * v).sum(axis=1))
        for axis in range(3):
            vertex_normals[:, axis] += np.bincount(
                faces[:, k], weights=angle * normal[:, axis], minlength=len(vertices)
            )
    return np.ascontiguousarray(neighbors.T, dtype=np.int32), vertex_normals


def _reference_is_convex(vertices: np.ndarray, faces: np.ndarray, neighbors: np.ndarray) -> bool:
    """Convex at every edge (the far corner of each neighbour on the inner side, up to 1e-6 of the extent),
    and connected (labels spread one neighbour at a time until they settle)."""
    tri = vertices.astype(np.float64)[faces]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    tol = 1.0e-6 * float(np.linalg.norm(vertices.max(axis=0) - vertices.min(axis=0)))
    for k in range(3):
        other = neighbors[:, k]
        if (other < 0).any():
            return False
        theirs = faces[other]
        far = np.zeros(len(faces), dtype=np.int64)
        for j in range(3):
            free = (theirs[:, j, None] != faces).all(axis=1)
            far = np.where(free, theirs[:, j], far)
        if ((vertices.astype(np.float64)[far] - tri[:, 0]) * normal).sum(axis=1).max() > tol:
            return False
    label = np.arange(len(faces))
    while True:
        spread = np.minimum(label, label[neighbors].min(axis=1))
        if (spread == label).all():
            return bool((label == 0).all())
        label = spread


def _reference_plane_tree(vertices: np.ndarray, faces: np.ndarray, neighbors: np.ndarray):
    """The plane tree, node by node in depth-first order (a stack of face lists): each node's cone axis (the
    normalised sum of its normals), least plane offset and half-angle (+1e-3 rad), split at the median along
    the axis of widest normal spread (sorted by that component, then by face index), down to 8 faces a leaf,
    whose faces are in index order. Also the nodes whose normals (nearly) cancel, with their faces: their
    axis is the direction of a sum of rounding errors, which any order of the sum may turn."""
    leaf, pad = 8, 1.0e-3
    if len(faces) < 2 * leaf or not _reference_is_convex(vertices, faces, neighbors):
        return None
    points = vertices.astype(np.float64)
    tri = points[faces]
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    origin = ((points.min(axis=0) + points.max(axis=0)) / 2).astype(np.float32).astype(np.float64)
    offset = (normal * (tri[:, 0] - origin)).sum(axis=1)
    nodes, links, order, placed, cancelled = [], [], [], 0, {}
    pending = [np.arange(len(faces))]
    while pending:
        members = pending.pop()
        k = len(nodes)
        axis = normal[members].sum(axis=0)
        length = np.linalg.norm(axis)
        if length < 1e-9 * len(members):
            cancelled[k] = members
        axis = axis / length if length > 1e-12 else np.array([1.0, 0.0, 0.0])
        angle = min(math.pi, float(np.arccos(np.clip(normal[members] @ axis, -1.0, 1.0)).max()) + pad)
        nodes.append((*axis, offset[members].min(), math.cos(angle), math.sin(angle)))
        if len(members) <= leaf:
            links.append([k + 1, placed, len(members)])
            order.append(np.sort(members))
            placed += len(members)
        else:
            spread = normal[members].max(axis=0) - normal[members].min(axis=0)
            ranked = members[np.lexsort((members, normal[members, int(np.argmax(spread))]))]
            links.append([-1, 0, 0])
            pending.append(ranked[len(ranked) // 2 :])
            pending.append(ranked[: len(ranked) // 2])
    size = [1] * len(nodes)
    for k in range(len(nodes) - 1, -1, -1):
        if links[k][2] == 0:
            size[k] = 1 + size[k + 1] + size[k + 1 + size[k + 1]]
        links[k][0] = k + size[k]
    ordered = np.concatenate(order)
    scale = float(np.abs(points).max() + np.linalg.norm(points.max(axis=0) - points.min(axis=0)))
    table = np.zeros((1 + 2 * len(nodes), 4), dtype=np.float32)
    table[0] = (*origin, 1.0e-5 * scale)
    table[1::2] = [n[:4] for n in nodes]
    table[2::2, :2] = [n[4:] for n in nodes]
    planes = np.concatenate([normal[ordered], offset[ordered, None]], axis=1).astype(np.float32)
    return (table, np.asarray(links, dtype=np.int32), planes, ordered.astype(np.int32)), (normal, cancelled)


def _same_bits(a, b) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _build_cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    box = trimesh.creation.box((1.0, 2.0, 0.5))
    flipped = np.asarray(box.subdivide().faces).copy()
    flipped[3] = flipped[3][::-1]
    meshes = {
        "icosphere 2": trimesh.creation.icosphere(2),
        "icosphere 3 r=0.3": trimesh.creation.icosphere(3, radius=0.3),
        "icosphere 5 r=40": trimesh.creation.icosphere(5, radius=40.0),
        "hull of 400 points": _hull(3, 400),
        "flat hull": _hull(2, 400, (0.1, 0.1, 0.002), on_sphere=True),
        "hull of 3000 points on a sphere": _hull(5, 3000, on_sphere=True),
        "subdivided box (tied normals)": box.subdivide().subdivide(),
        "cylinder (coplanar caps)": trimesh.creation.cylinder(0.3, 1.0, sections=64),
        "capsule": trimesh.creation.capsule(1.0, 0.2),
        "cone": trimesh.creation.cone(0.5, 1.0, sections=40),
        "torus": trimesh.creation.torus(1.0, 0.3),
        "annulus": trimesh.creation.annulus(0.3, 0.5, 0.2),
        "two spheres": trimesh.util.concatenate(
            [trimesh.creation.icosphere(2), trimesh.creation.icosphere(2).apply_translation([3, 0, 0])]
        ),
    }
    cases = {name: (np.asarray(m.vertices), np.asarray(m.faces)) for name, m in meshes.items()}
    cases["open box"] = (np.asarray(box.vertices), np.asarray(box.faces)[:-2])
    cases["a face turned over"] = (np.asarray(box.subdivide().vertices), flipped)
    return cases


def test_build_tables_bit_for_bit_against_the_node_by_node_build():
    """Every mesh's pseudo-normal tables and plane tree in a world (several environments, meshes that recur
    as the same object and as equal copies) are those of the node-by-node reference build (bit for bit but
    for float rounding: see below), at the offsets of each slot; its grid is that of one launch of the grid
    kernel; and meshes that are not closed, or not convex, get none."""
    from warpgeo import _launch, _warp
    from warpgeo._kernels import build_grids

    cases = _build_cases()
    names = list(cases)
    items = list(cases.values())
    copies = [(v.copy(), f.copy()) for v, f in items[:4]]
    envs = [items, items[::-1] + copies, [items[0], items[0]]]
    world = MeshWorld.from_envs(envs)
    assert world.wait_tables()  # the 20,480-face icosphere's tables are built in the background
    tables = {name: t.numpy() for name, t in world._tables.items()}
    by_item = {id(item): name for name, item in cases.items()}
    by_item.update({id(c): names[i] for i, c in enumerate(copies)})
    references: dict[str, tuple] = {}  # by mesh: (topology, plane tree)
    for e, env in enumerate(envs):
        for m, item in enumerate(env):
            name = by_item[id(item)]
            vertices, faces = np.asarray(item[0], np.float32), np.asarray(item[1], np.int32)
            if name not in references:
                topology = _reference_topology(vertices, faces)
                tree = None if topology is None else _reference_plane_tree(vertices, faces, topology[0])
                references[name] = (topology, tree)
            expected, built = references[name]
            tree, (normal, cancelled) = built or (None, (None, {}))
            face_row, vertex_row = tables["topo_offsets"][e, m]
            closed = bool(tables["grid_flags"][e, m] & 1)
            assert closed == (expected is not None), name
            if expected is None:
                assert (face_row, vertex_row) == (-1, -1) and tables["cone_offsets"][e, m, 3] == -1, name
                continue
            assert _same_bits(tables["face_neighbors"][face_row : face_row + len(faces)], expected[0]), name
            # each face's terms are computed in a kernel (its own atan2, fused multiply-adds): float64 rounding
            mine = tables["vertex_normals"][vertex_row : vertex_row + len(vertices)]
            scale = float(np.abs(expected[1]).max())
            np.testing.assert_allclose(mine, expected[1], rtol=1e-12, atol=1e-13 * scale, err_msg=name)
            # the grid: one launch of the grid kernel over every cell
            nx, ny, nz, first = tables["grid_dims"][e, m]
            lower, upper = tables["bounds"][e, m]
            size = ((upper - lower).astype(np.float64) / np.array([nx, ny, nz])).astype(np.float32)
            wp = _warp.warp()
            mesh = world._wp_meshes[e][m]
            values = torch.empty(nx * ny * nz, dtype=torch.float32)
            _launch.launch(
                build_grids.GRID_ONE["float32"].grid_centres,
                values.shape[0],
                device=torch.device("cpu"),
                mesh=mesh.id,
                lower=wp.vec3(*lower.tolist()),
                size=wp.vec3(*size.tolist()),
                ny=int(ny),
                nz=int(nz),
                with_sign=1,
                out=values,
                row_start=0,
            )
            assert _same_bits(tables["grid_cells"][first : first + len(values)], values.numpy()), name
            node_row, link_row, plane_row, count = tables["cone_offsets"][e, m]
            if tree is None:
                assert count == -1, name
                continue
            assert count == len(tree[1]), name
            got = (
                tables["cone_nodes"][node_row : node_row + len(tree[0])],
                tables["cone_links"][link_row : link_row + len(tree[1])],
                tables["cone_planes"][plane_row : plane_row + len(tree[2])],
                tables["cone_faces"][plane_row : plane_row + len(tree[3])],
            )
            # the links and faces bit for bit; the planes, least offsets and the cones' axes, cosines and sines
            # to float32's rounding (the kernels compute the normals, and sum a node's in their own order)
            assert _same_bits(got[1], tree[1]) and _same_bits(got[3], tree[3]), name
            assert _same_bits(got[0][0], tree[0][0]), name
            np.testing.assert_allclose(got[2], tree[2], rtol=2e-7, atol=2e-7, err_msg=name)
            np.testing.assert_allclose(got[0][1::2, 3], tree[0][1::2, 3], rtol=2e-7, atol=2e-7, err_msg=name)
            rows = np.ones(len(tree[0]), dtype=bool)
            for k, members in cancelled.items():  # a cone of another axis, which must hold its normals
                rows[[1 + 2 * k, 2 + 2 * k]] = False
                axis, (cos, sin) = got[0][1 + 2 * k, :3].astype(np.float64), got[0][2 + 2 * k, :2]
                widest = np.arccos(np.clip(normal[members] @ (axis / np.linalg.norm(axis)), -1, 1)).max()
                assert math.atan2(sin, cos) >= widest, (name, k)
            np.testing.assert_allclose(got[0][rows], tree[0][rows], rtol=0, atol=3e-7, err_msg=name)
    convex = {by_item[id(item)] for m, item in enumerate(envs[0]) if tables["cone_offsets"][0, m, 3] > 0}
    assert {
        "icosphere 5 r=40",
        "flat hull",
        "subdivided box (tied normals)",
        "cylinder (coplanar caps)",
    } <= convex
    assert not {"torus", "two spheres", "annulus", "open box", "a face turned over"} & convex


def test_a_recurring_mesh_is_built_once():
    """A mesh that recurs in a world (the same object, or equal vertices and faces) shares one Warp mesh; its
    slots get the same tables as a world of that mesh alone, and the same distances as distinct meshes."""
    sphere = trimesh.creation.icosphere(3, radius=0.4)
    copy = (np.array(sphere.vertices), np.array(sphere.faces))
    other = trimesh.creation.icosphere(3, radius=0.41)
    poses = [[[0, 0, 0, 1, 0, 0, 0], [1, 0, 0, 1, 0, 0, 0], [0, 1, 0, 1, 0, 0, 0]]] * 2
    world = MeshWorld.from_envs([[sphere, copy, other], [sphere, sphere, other]], poses=poses)
    meshes = world._wp_meshes
    assert meshes[0][0] is meshes[0][1] is meshes[1][0] is meshes[1][1]
    assert meshes[0][2] is meshes[1][2] and meshes[0][2] is not meshes[0][0]
    alone = MeshWorld([sphere])._tables
    tables = world._tables
    rows = len(alone["grid_cells"])
    assert tables["grid_dims"][:, :2, 3].tolist() == [[0, rows], [3 * rows, 4 * rows]]
    for slot in range(4):
        assert torch.equal(tables["grid_cells"][[0, 1, 3, 4][slot] * rows :][:rows], alone["grid_cells"])
    faces = len(sphere.faces)
    assert tables["topo_offsets"][0, 1, 0].item() == faces
    assert torch.equal(tables["face_neighbors"][faces : 2 * faces], alone["face_neighbors"])
    assert torch.equal(tables["cone_planes"][faces : 2 * faces], alone["cone_planes"])
    separate = MeshWorld.from_envs(
        [[trimesh.creation.icosphere(3, radius=0.4) for _ in range(2)] + [other]] * 2, poses=poses
    )
    points = torch.rand(200, 3, dtype=torch.float64) * 2 - 0.5
    for env in (0, 1):
        index = torch.full((200,), env)
        assert torch.equal(
            signed_distance(points, world, env_index=index),
            signed_distance(points, separate, env_index=index),
        )
    for name in world._tables:
        if name not in ("mesh_ids",):
            assert torch.equal(world._tables[name], separate._tables[name]), name


# --------------------------------------------------------------------------------------------------------
# threads: tables taken in under a running op (issue 33)
# --------------------------------------------------------------------------------------------------------


def _icosphere_reference(points: np.ndarray) -> tuple[trimesh.Trimesh, np.ndarray]:
    """A 20,480-face icosphere (its tables are built on the background thread) and the signed distances of
    ``points`` to it by brute force: the nearest of all faces, negative where the point is behind every face's
    plane (the mesh is convex)."""
    from reference import triangle_distance_reference

    mesh = trimesh.creation.icosphere(subdivisions=5)
    vertices, faces = np.asarray(mesh.vertices), np.asarray(mesh.faces)
    unsigned = np.concatenate(
        [triangle_distance_reference(points[i : i + 8], vertices, faces) for i in range(0, len(points), 8)]
    )
    tri = vertices[faces]
    normals = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    inside = (np.einsum("pfk,fk->pf", points[:, None, :] - tri[None, :, 0], normals) < 0).all(axis=1)
    return mesh, np.where(inside, -unsigned, unsigned)


_TAKE_IN_POINTS = np.random.default_rng(5).uniform(-1.1, 1.1, (48, 3))


@pytest.mark.background_tables
def test_tables_taken_in_under_a_running_op_stay_alive(monkeypatch):
    """Another thread's take-in of a world's background tables at the worst moment: after an op has built its
    world struct, before its kernel runs (done here on the op's own thread, inside the launch). Every tensor
    the op was handed must still be alive when its kernel runs, and the answers equal brute force. (The
    take-in once swapped the tensors of the very list the op held, and the old tables were freed under its
    kernel: wrong answers from freed memory.)"""
    from warpgeo import _launch

    mesh, want = _icosphere_reference(_TAKE_IN_POINTS)
    world = MeshWorld([mesh])
    assert world._later is not None and world._later.wait(120)  # built, not taken in yet
    monkeypatch.setattr(world._later, "done", lambda: False)  # the op's own call does not take them in
    handed = [weakref.ref(t) for t in world._op_world[torch.float64]]  # what the op will be handed
    original, alive = _launch.run, []

    def run(kernel, dims, device, block_dim, args):
        if not alive:
            assert world.wait_tables()  # what another thread's op call would do now
            gc.collect()
            alive.append([ref() is not None for ref in handed])
        original(kernel, dims, device, block_dim, args)

    monkeypatch.setattr(_launch, "run", run)
    got = signed_distance(torch.from_numpy(_TAKE_IN_POINTS), world).numpy()
    fields = list(warpgeo.world.WORLD_FIELDS)
    assert alive and [f for f, a in zip(fields, alive[0], strict=True) if not a] == []
    grid_flags = fields.index("grid_flags")
    assert world._op_world[torch.float64][grid_flags] is not handed[grid_flags]()  # the new tables are in
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    again = signed_distance(torch.from_numpy(_TAKE_IN_POINTS), world).numpy()  # on the new tables
    np.testing.assert_allclose(again, want, atol=1e-5, rtol=0)


@pytest.mark.background_tables
@pytest.mark.parametrize("rounds", [2, pytest.param(12, marks=pytest.mark.slow)])
def test_queries_from_four_threads_through_a_take_in(rounds):
    """4 threads query a fresh world of a 20,480-face icosphere over and over while its background tables
    come in (each thread may be the one to take them in): every answer equals brute force, every round."""
    import threading

    mesh, want = _icosphere_reference(_TAKE_IN_POINTS)
    points = torch.from_numpy(_TAKE_IN_POINTS)
    wrong: list[float] = []
    for _ in range(rounds):
        world = MeshWorld([mesh])
        errors: list[BaseException] = []

        def query(world=world, errors=errors):
            try:
                calls = 0
                while calls < 30 or not world.wait_tables(timeout=0):
                    error = np.abs(signed_distance(points, world).numpy() - want).max()
                    if not error <= 1e-5:
                        wrong.append(float(error))
                    calls += 1
            except BaseException as exc:  # handed to the main thread
                errors.append(exc)

        threads = [threading.Thread(target=query) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
    assert wrong == []


@pytest.mark.background_tables
def test_wait_tables_timeouts():
    """``wait_tables(inf)`` and timeouts beyond threading's limit wait without limit (no OverflowError);
    NaN, negative and non-numeric timeouts are refused naming ``timeout``, with or without tables to wait
    for."""
    big = MeshWorld([trimesh.creation.icosphere(subdivisions=5)])  # tables on the background thread
    assert big.wait_tables(float("inf")) is True
    for world in (MeshWorld([trimesh.creation.icosphere(subdivisions=5)]), MeshWorld([_cube()])):
        assert world.wait_tables(1e300) is True
        assert world.wait_tables(10**400) is True
        assert world.wait_tables(0) is True
        for bad in (float("nan"), -1.0):
            with pytest.raises(ValueError, match="timeout"):
                world.wait_tables(bad)
        with pytest.raises(TypeError, match="timeout"):
            world.wait_tables("1")
