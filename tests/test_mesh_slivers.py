"""Meshes with thin faces: slivers Warp's closest-point queries skip (issue 50 item 16) are still measured, and
a fine cone's sign near its base (item 17). References: the analytic distance of a capped cylinder (a
polygonal prism of ``n`` sides is within ``r (1 - cos(pi / n))`` of it) and the analytic inside test of a
cone."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import trimesh

import warpgeo


def _rod(radius: float, length: float, sections: int) -> tuple[np.ndarray, np.ndarray]:
    """A closed, outward-wound prism of ``sections`` sides along z from 0 to ``length``, its caps fans about
    their centres: ``(vertices (2n + 2, 3) float32, faces (4n, 3) int32)``."""
    n = sections
    t = np.arange(n) * (2 * np.pi / n)
    ring = np.stack([radius * np.cos(t), radius * np.sin(t)], axis=1)
    vertices = np.concatenate(
        [np.c_[ring, np.zeros(n)], np.c_[ring, np.full(n, length)], [[0.0, 0.0, 0.0], [0.0, 0.0, length]]]
    )
    faces = []
    for i in range(n):
        j = (i + 1) % n
        faces += [[i, j, n + j], [i, n + j, n + i], [2 * n, j, i], [2 * n + 1, n + i, n + j]]
    return vertices.astype(np.float32), np.array(faces, dtype=np.int32)


def _warp_skips(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Per face, whether Warp's sliver test (float32) skips it: ``|e0 x e1| / sum |e|^2 < 1e-6``."""
    p, q, r = (vertices[faces[:, k]] for k in range(3))
    e0, e1, e2 = q - p, r - p, r - q
    area = np.linalg.norm(np.cross(e0, e1), axis=1)
    return area / ((e0 * e0).sum(1) + (e1 * e1).sum(1) + (e2 * e2).sum(1)) < 1e-6


def _probes(radius: float, length: float, heights=(0.3, 0.5, 0.77), seed: int = 0) -> np.ndarray:
    """Points far from the caps at radial offsets from the axis to 20 radii, at ``heights`` (fractions of the
    length) and random angles."""
    rng = np.random.default_rng(seed)
    rows = []
    for z in np.asarray(heights) * length:
        for rho in (0.0, 0.3 * radius, 0.9 * radius, 1.1 * radius, 2.0 * radius, 20.0 * radius):
            a = rng.uniform(0, 2 * np.pi)
            rows.append([rho * np.cos(a), rho * np.sin(a), z])
    return np.array(rows)


def _cylinder_distance(points: np.ndarray, radius: float) -> np.ndarray:
    """Signed distance of points far from the caps to the infinite cylinder of ``radius`` about z."""
    return np.hypot(points[:, 0], points[:, 1]) - radius


#: The cable of issue 50 item 16 (its side faces, aspect ~8e5, are slivers Warp's queries skip) at heights
#: 0.3, 0.5 and 0.77 of its length; moderate rods (aspect ~1,000 and ~51,000: no sliver) at the middle.
_RODS = [
    (0.0005, 10.0, 256, True, (0.3, 0.5, 0.77)),
    (0.01, 2.0, 32, False, (0.5,)),
    (0.002, 5.0, 128, False, (0.5,)),
]


@pytest.mark.parametrize("radius, length, sections, slivers, heights", _RODS)
@pytest.mark.parametrize("method", ["ray", "normal", "unsigned"])
def test_rod_distance_matches_the_cylinder(radius, length, sections, slivers, heights, method):
    _check_rod(radius, length, sections, slivers, heights, method)


@pytest.mark.xfail(
    strict=True,
    reason="known, not fixed: on faces of aspect ~1,000 and more that are no slivers, Warp's float32 "
    "closest-point query can pick a face that is not the closest (its float32 Voronoi-region tests cancel): "
    "2.4e-4 off on this 1 cm rod at 0.77 of its length",
)
def test_moderate_rod_off_centre_matches_the_cylinder():
    _check_rod(0.01, 2.0, 32, False, (0.77,), "ray")


def _check_rod(radius, length, sections, slivers, heights, method):
    vertices, faces = _rod(radius, length, sections)
    skipped = _warp_skips(vertices, faces)
    assert skipped.any() == slivers and not skipped.all()  # the case is what it says
    world = warpgeo.MeshWorld([(vertices, faces)], sign_method=method)
    assert world.wait_tables(timeout=60)
    points = _probes(radius, length, heights)
    got = warpgeo.signed_distance(torch.tensor(points), world).numpy()
    want = _cylinder_distance(points, radius)
    if method == "unsigned":
        want = np.abs(want)
    # the prism is inscribed in the cylinder: within r (1 - cos(pi / n)) of it, plus float32 vertex rounding
    tol = radius * (1 - math.cos(math.pi / sections)) + 4e-7 * length
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


@pytest.mark.filterwarnings("ignore:MeshWorld.*open mesh")  # trimesh too finds its cylinder not watertight
@pytest.mark.parametrize("method", ["ray", "normal", "unsigned"])
def test_trimesh_cable_of_slivers_only_matches_the_cylinder(method):
    """trimesh's own cable (its caps triangulated into slivers too: every face is one, which was refused)."""
    radius, length = 0.0005, 10.0
    cable = trimesh.creation.cylinder(radius, length, sections=256).apply_translation((0, 0, length / 2))
    vertices, faces = np.asarray(cable.vertices, dtype=np.float32), np.asarray(cable.faces, dtype=np.int32)
    assert _warp_skips(vertices, faces).all()
    world = warpgeo.MeshWorld([(vertices, faces)], sign_method=method)
    points = _probes(radius, length)
    got = warpgeo.signed_distance(torch.tensor(points), world).numpy()
    want = _cylinder_distance(points, radius)
    if method == "unsigned":
        want = np.abs(want)
    np.testing.assert_allclose(got, want, rtol=0, atol=radius * (1 - math.cos(math.pi / 256)) + 4e-6)
    spheres = torch.tensor([[0.001, 0.0, 5.0, 0.003]], dtype=torch.float64)
    assert warpgeo.sphere_mesh_cost(spheres, world).item() == pytest.approx(0.0025, abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_sphere_overlapping_the_cable_costs(dtype):
    radius, length = 0.0005, 10.0
    world = warpgeo.MeshWorld([_rod(radius, length, 256)])
    assert world.wait_tables(timeout=60)
    # a 3 mm sphere 1 mm from the axis at the middle: it overlaps the cable by 3 - (1 - 0.5) = 2.5 mm
    spheres = torch.tensor([[0.001, 0.0, 5.0, 0.003], [0.0, 0.02, 5.0, 0.003]], dtype=dtype)
    cost = warpgeo.sphere_mesh_cost(spheres, world).double().numpy()
    np.testing.assert_allclose(cost, [0.0025, 0.0], rtol=0, atol=1e-6)


@pytest.mark.filterwarnings("ignore:MeshWorld.*open mesh")  # the zero-area face leaves its edge unpaired
def test_degenerate_faces_of_a_mesh_are_skipped_and_slivers_that_matter_are_not():
    """A zero-area face on an edge of a closed mesh (its longest edge is that edge) costs nothing to skip: no
    FLAG_SLIVERS, the answers of the mesh without it. The cable's slivers matter: FLAG_SLIVERS."""
    from warpgeo import _constants

    sphere = trimesh.creation.icosphere(subdivisions=2)
    v = np.asarray(sphere.vertices, dtype=np.float32)
    f = np.asarray(sphere.faces, dtype=np.int32)
    a, b = f[0, 0], f[0, 1]
    mid = (v[a].astype(np.float64) + v[b]) / 2  # on the edge ab, up to float32 rounding
    v2 = np.concatenate([v, mid[None].astype(np.float32)])
    f2 = np.concatenate([f, [[a, len(v), b]]]).astype(np.int32)
    assert _warp_skips(v2, f2)[-1]
    plain, degenerate, cable = (
        warpgeo.MeshWorld([mesh]) for mesh in ((v, f), (v2, f2), _rod(0.0005, 10.0, 256))
    )
    flags = [int(w._tables["grid_flags"][0, 0]) & _constants.FLAG_SLIVERS for w in (plain, degenerate, cable)]
    assert flags == [0, 0, _constants.FLAG_SLIVERS]
    points = torch.tensor(np.random.default_rng(1).uniform(-1.5, 1.5, (300, 3)))
    np.testing.assert_allclose(
        warpgeo.signed_distance(points, degenerate).numpy(),
        warpgeo.signed_distance(points, plain).numpy(),
        atol=1e-6,
    )


def _inside_cone(points: np.ndarray, radius: float, height: float) -> np.ndarray:
    """Whether points are inside the cone of base ``radius`` on z = 0 and apex at z = ``height``."""
    r = np.hypot(points[:, 0], points[:, 1])
    z = points[:, 2]
    return (z > 0) & (z < height) & (r < radius * (1 - z / height))


def test_normal_sign_of_a_fine_cone_that_is_not_closed():
    """A cone of 60,000 sections with a box through its apex (its edges pair up, but two of its faces meet:
    not closed) signed by "normal": points 4e-4 off its surface below the box get the analytic cone's side.
    Warp's own normal sign (faces within a tie band of the closest count alike) got 39 of 1,386 wrong."""
    radius, height = 0.5, 1.0
    cone = trimesh.creation.cone(radius, height, sections=60000)
    box = trimesh.creation.box(extents=(0.2, 0.2, 0.2)).apply_translation((0.0, 0.0, 0.9))
    vertices = np.concatenate([box.vertices, cone.vertices]).astype(np.float32)
    faces = np.concatenate([box.faces, cone.faces + len(box.vertices)]).astype(np.int32)
    world = warpgeo.MeshWorld([(vertices, faces)], sign_method="normal")
    assert world.wait_tables(timeout=120)
    points, face = trimesh.sample.sample_surface(cone, 1500, seed=0)
    offset = np.random.default_rng(0).choice([-4e-4, 4e-4], size=len(points))
    points = points + cone.face_normals[face] * offset[:, None]
    points = points[points[:, 2] < 0.7]  # away from the box (where the union's inside is not the cone's)
    got = warpgeo.signed_distance(torch.tensor(points), world).numpy()
    inside = _inside_cone(points, radius, height)
    assert ((got < 0) == inside).all(), np.flatnonzero((got < 0) != inside)
    assert (
        np.abs(got) <= 4e-4 + 1e-7
    ).all()  # no farther than the point it was offset from (float32 corners)


def _orient(a, b, c, d) -> int:
    """Exact sign of ``(a - d) . ((b - d) x (c - d))`` (Fractions)."""
    u, v, w = (tuple(x - y for x, y in zip(p, d, strict=True)) for p in (a, b, c))
    det = (
        u[0] * (v[1] * w[2] - v[2] * w[1])
        + u[1] * (v[2] * w[0] - v[0] * w[2])
        + u[2] * (v[0] * w[1] - v[1] * w[0])
    )
    return (det > 0) - (det < 0)


def _orient2(a, b, c) -> int:
    det = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    return (det > 0) - (det < 0)


def _segment_meets(p, q, a, b, c) -> bool:
    """Exact: does segment ``pq`` meet the closed triangle ``abc`` (coplanar ones projected on z: the cone's
    base, the only plane two of these faces share)?"""
    sp, sq = _orient(a, b, c, p), _orient(a, b, c, q)
    if sp * sq > 0:
        return False
    if sp == 0 and sq == 0:
        side = _orient2(a, b, c)
        signs = [_orient2(p, q, x) for x in (a, b, c)]
        if all(x > 0 for x in signs) or all(x < 0 for x in signs):
            return False
        return not any(
            _orient2(u, w, p) * side < 0 and _orient2(u, w, q) * side < 0 for u, w in ((a, b), (b, c), (c, a))
        )
    signs = [_orient(p, q, a, b), _orient(p, q, b, c), _orient(p, q, c, a)]
    return not (any(x > 0 for x in signs) and any(x < 0 for x in signs))


def test_faces_of_a_fine_cone_near_its_rim_do_not_meet():
    """The faces of a 60,000-section cone whose rim corners lie near angle 0 (side and base faces, float32
    corners: the rim is not quite convex there): exact arithmetic says no two of them without a shared vertex
    meet, and so must the closed-mesh check's float64 filter (at a looser bound it could not tell some pairs
    apart, and the cone was taken for self-intersecting)."""
    from fractions import Fraction

    from warpgeo import _launch, _warp
    from warpgeo._kernels import build_meet

    cone = trimesh.creation.cone(0.5, 1.0, sections=60000)
    vertices = np.asarray(cone.vertices, dtype=np.float32)
    faces = np.asarray(cone.faces)
    rim = (vertices[:, 2] == 0) & (np.hypot(vertices[:, 0], vertices[:, 1]) > 0.4)
    near = rim & (vertices[:, 0] > 0) & (np.abs(vertices[:, 1] + 0.002) < 0.0003)
    chosen = faces[np.all(near[faces] | ~rim[faces], axis=1) & near[faces].any(axis=1)]
    assert len(chosen) >= 16
    used = np.unique(chosen)
    small = np.searchsorted(used, chosen).astype(np.int32)
    corners = [[tuple(Fraction(float(x)) for x in vertices[used][i]) for i in face] for face in small]
    exact = sum(
        1
        for f in range(len(small))
        for g in range(f + 1, len(small))
        if not set(small[f]) & set(small[g])
        and any(
            _segment_meets(s[i], s[(i + 1) % 3], *t)
            for s, t in ((corners[f], corners[g]), (corners[g], corners[f]))
            for i in range(3)
        )
    )
    assert exact == 0
    wp = _warp.warp()
    mesh = wp.Mesh(
        points=wp.array(vertices[used], dtype=wp.vec3, device="cpu"),
        indices=wp.array(small.reshape(-1), dtype=wp.int32, device="cpu"),
    )
    found = torch.zeros(1, dtype=torch.int32)
    _launch.launch(
        build_meet.FACES_MEET_ONE["float32"].face_intersections,
        len(small),
        device=torch.device("cpu"),
        mesh=mesh.id,
        num_faces=len(small),
        found=found,
    )
    assert int(found.item()) == 0


def test_a_cable_added_to_a_world_is_measured():
    """``MeshWorld.add`` builds the mesh as the constructor does: the cable's slivers are seen."""
    radius, length = 0.0005, 10.0
    world = warpgeo.MeshWorld([trimesh.creation.box((0.1, 0.1, 0.1))], capacity={"mesh": 1})
    world.add(_rod(radius, length, 256), name="cable", pose=[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    assert world.wait_tables(timeout=60)
    shift = np.array([1.0, 0.0, 0.0])
    points = _probes(radius, length) + shift
    got = warpgeo.signed_distance(torch.tensor(points), world).numpy()
    want = _cylinder_distance(points - shift, radius)
    np.testing.assert_allclose(got, want, rtol=0, atol=radius * (1 - math.cos(math.pi / 256)) + 4e-6)


def test_closest_point_and_collision_of_the_cable():
    """The planner queries read the same distances: the foot of a point near the cable (and of one farther
    than the cable's extent, where the foot is looked up again) lies on its side, and a sphere overlapping it
    collides."""
    radius, length = 0.0005, 10.0
    world = warpgeo.MeshWorld([_rod(radius, length, 256)])
    points = torch.tensor([[0.01, 0.0, 5.0], [0.0, 15.0, 9.9]], dtype=torch.float64)
    closest = warpgeo.closest_point(points, world)
    np.testing.assert_allclose(closest.distance.numpy(), [0.0095, 15.0 - radius], rtol=0, atol=1e-7)
    foot = closest.point.numpy()
    np.testing.assert_allclose(np.hypot(foot[:, 0], foot[:, 1]), radius, rtol=0, atol=1e-7)
    np.testing.assert_allclose(foot[:, 2], [5.0, 9.9], rtol=0, atol=1e-6)  # a cap is within 1.001 d
    spheres = torch.tensor([[0.001, 0.0, 5.0, 0.003], [0.0, 0.02, 5.0, 0.003]], dtype=torch.float64)
    assert warpgeo.sphere_collision(spheres, world).tolist() == [True, False]
