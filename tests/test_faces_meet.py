"""The closed-mesh check (``_meshes.faces_meet``): do two faces of a mesh that share no vertex meet?

Two ways give one answer per mesh: every face's box against its mesh's BVH (``split_fans=False``, the old
way), and, for a mesh with a fan (a vertex of many faces), groups of faces around hubs and the boxes of their
pieces (``build_meet.fan_intersections_rows``). Both are compared with an exact reference of this file (every
pair of faces whose boxes meet, orientation signs in rational arithmetic) on small meshes, with the
thresholds lowered so that small fans take the new way; and with each other on meshes of 2,000 sections.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import trimesh

from warpgeo import _warp
from warpgeo._world import meshes as _meshes

_CPU = torch.device("cpu")


def _spec(vertices, faces) -> SimpleNamespace:
    """What ``faces_meet`` reads of a mesh: its Warp mesh and its arrays (float32 points, as a world's)."""
    wp = _warp.warp()
    v = np.ascontiguousarray(vertices, dtype=np.float32)
    f = np.ascontiguousarray(faces, dtype=np.int32)
    mesh = wp.Mesh(points=wp.array(v, dtype=wp.vec3), indices=wp.array(f.reshape(-1), dtype=wp.int32))
    return SimpleNamespace(mesh=mesh, vertices=v, faces=f)


def _sign(x: Fraction) -> int:
    return (x > 0) - (x < 0)


def _orient(a, b, c, d) -> int:
    """The exact sign of ``(a - d) . ((b - d) x (c - d))``."""
    ax, ay, az = (a[i] - d[i] for i in range(3))
    bx, by, bz = (b[i] - d[i] for i in range(3))
    cx, cy, cz = (c[i] - d[i] for i in range(3))
    return _sign(ax * (by * cz - bz * cy) + ay * (bz * cx - bx * cz) + az * (bx * cy - by * cx))


def _orient2(a, b, c) -> int:
    return _sign((b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]))


def _segment_meets_triangle_2d(p, q, t) -> bool:
    """Exactly: does segment ``pq`` meet the closed triangle ``t`` (2D points; ``t`` not degenerate)?"""
    side = _orient2(*t)
    if side == 0:
        return True  # not reached by the meshes here
    inside = [_orient2(t[i], t[(i + 1) % 3], x) * side >= 0 for x in (p, q) for i in range(3)]
    if all(inside[:3]) or all(inside[3:]):
        return True  # an end inside
    for i in range(3):  # else the segment crosses an edge
        a, b = t[i], t[(i + 1) % 3]
        s1, s2 = _orient2(p, q, a), _orient2(p, q, b)
        s3, s4 = _orient2(a, b, p), _orient2(a, b, q)
        if s1 * s2 <= 0 and s3 * s4 <= 0:
            if s1 == s2 == 0:  # collinear: do the ranges overlap?
                axis = 0 if p[0] != q[0] or a[0] != b[0] else 1
                if max(min(p[axis], q[axis]), min(a[axis], b[axis])) <= min(
                    max(p[axis], q[axis]), max(a[axis], b[axis])
                ):
                    return True
            else:
                return True
    return False


def _exact_triangles_meet(t0, t1) -> bool:
    """Exactly (rational arithmetic): do the closed triangles meet? Written apart from the kernel's test:
    they meet iff an edge of one meets the other; an edge crossing the plane meets the triangle iff its
    crossing point is inside (three orientations of the same sign), one lying in the plane is tested in a 2D
    projection."""
    for s, t in ((t0, t1), (t1, t0)):
        for i in range(3):
            p, q = s[i], s[(i + 1) % 3]
            sp, sq = _orient(*t, p), _orient(*t, q)
            if sp * sq > 0:
                continue
            if sp == 0 and sq == 0:
                normal = [
                    (t[1][1] - t[0][1]) * (t[2][2] - t[0][2]) - (t[1][2] - t[0][2]) * (t[2][1] - t[0][1]),
                    (t[1][2] - t[0][2]) * (t[2][0] - t[0][0]) - (t[1][0] - t[0][0]) * (t[2][2] - t[0][2]),
                    (t[1][0] - t[0][0]) * (t[2][1] - t[0][1]) - (t[1][1] - t[0][1]) * (t[2][0] - t[0][0]),
                ]
                drop = max(range(3), key=lambda k: abs(normal[k]))
                keep = [k for k in range(3) if k != drop]
                flat = [tuple(x[k] for k in keep) for x in (p, q, *t)]
                if _segment_meets_triangle_2d(flat[0], flat[1], flat[2:]):
                    return True
                continue
            signs = [_orient(p, q, t[j], t[(j + 1) % 3]) for j in range(3)]
            if not (any(x > 0 for x in signs) and any(x < 0 for x in signs)):
                return True
    return False


def _reference(vertices, faces) -> bool:
    """Whether two faces that share no vertex meet, exactly: every pair whose boxes meet (faces that meet
    have boxes that meet), each tested in rational arithmetic on the float32 points."""
    v32 = np.asarray(vertices, dtype=np.float32)
    exact = [tuple(Fraction(float(x)) for x in row) for row in v32]
    tri = v32[faces]
    lo, hi = tri.min(axis=1), tri.max(axis=1)
    faces = np.asarray(faces)
    for f in range(len(faces)):
        overlap = np.flatnonzero(((lo[f + 1 :] <= hi[f]) & (hi[f + 1 :] >= lo[f])).all(axis=1)) + f + 1
        for g in overlap:
            if set(faces[f].tolist()) & set(faces[g].tolist()):
                continue
            if _exact_triangles_meet([exact[i] for i in faces[f]], [exact[i] for i in faces[g]]):
                return True
    return False


def _answers(vertices, faces) -> tuple[bool, bool]:
    """(old way, new way) of ``faces_meet`` for one mesh."""
    spec = _spec(vertices, faces)
    old = _meshes.faces_meet([spec], _CPU, split_fans=False)[0]
    new = _meshes.faces_meet([spec], _CPU)[0]
    return old, new


@pytest.fixture
def small_fans(monkeypatch):
    """Vertices of 4+ faces are hubs and any mesh with one takes the fan way (a box's corners are hubs: up
    to 8 groups, their pairs through the pieces)."""
    monkeypatch.setattr(_meshes, "_HUB_DEGREE", 4)
    monkeypatch.setattr(_meshes, "_FAN_SPLIT_DEGREE", 4)


def _concat(*meshes) -> tuple[np.ndarray, np.ndarray]:
    vertices, faces, base = [], [], 0
    for m in meshes:
        vertices.append(np.asarray(m.vertices))
        faces.append(np.asarray(m.faces) + base)
        base += len(m.vertices)
    return np.concatenate(vertices), np.concatenate(faces)


def _cone(sections: int, radius=0.5, height=1.0) -> trimesh.Trimesh:
    return trimesh.creation.cone(radius, height, sections=sections)


def _centre(mesh: trimesh.Trimesh, z: float) -> int:
    """The index of the vertex on the axis at height ``z`` (a fan's hub)."""
    v = np.asarray(mesh.vertices)
    return int(np.flatnonzero((np.abs(v[:, :2]).max(axis=1) < 1e-12) & (np.abs(v[:, 2] - z) < 1e-9))[0])


def _corpus() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}

    def add(name, mesh_or_pair):
        if isinstance(mesh_or_pair, tuple):
            out[name] = mesh_or_pair
        else:
            out[name] = (np.asarray(mesh_or_pair.vertices), np.asarray(mesh_or_pair.faces))

    add("icosphere", trimesh.creation.icosphere(subdivisions=1))
    add("box", trimesh.creation.box(extents=(1.0, 2.0, 0.5)))
    for n in (8, 24, 40):
        add(f"cone{n}", _cone(n))
        add(f"flat cone{n}", _cone(n, height=0.05))
        add(f"cylinder{n}", trimesh.creation.cylinder(0.5, 1.0, sections=n))
        add(f"annulus{n}", trimesh.creation.annulus(0.25, 0.5, 0.3, sections=n))
    add("capsule", trimesh.creation.capsule(height=1.0, radius=0.3, count=[12, 12]))
    add("torus", trimesh.creation.torus(1.0, 0.3, major_sections=16, minor_sections=8))
    # deliberate self-intersections
    a = trimesh.creation.box(extents=(0.6, 0.6, 0.6))
    b = trimesh.creation.box(extents=(0.4, 0.4, 0.4)).apply_translation((0.4, 0.1, 0.0))
    add("two overlapping boxes", _concat(a, b))
    cone = _cone(32)
    v = np.asarray(cone.vertices).copy()
    v[_centre(cone, 0.0)] = (0.4, 0.0, 0.5)  # the base centre out beside the side (radius 0.25 at z = 0.5)
    add("cone, base centre pushed through", (v, np.asarray(cone.faces)))
    v = np.asarray(cone.vertices).copy()
    rim = int(np.flatnonzero(np.abs(v[:, 2]) < 1e-12)[0])
    if np.abs(v[rim, :2]).max() < 1e-12:
        rim = int(np.flatnonzero(np.abs(v[:, 2]) < 1e-12)[1])
    v[rim] = (-0.2 * v[rim, 0], -0.2 * v[rim, 1], -0.3)  # one rim vertex bent across and through the base
    add("cone, one fan triangle bent through the base", (v, np.asarray(cone.faces)))
    # near touching: a small box 1e-7 below a cone's base (apart), and touching it
    for gap, name in ((1e-7, "apart by 1e-7"), (0.0, "touching")):
        small = trimesh.creation.box(extents=(0.2, 0.2, 0.2)).apply_translation((0.1, 0.05, -0.1 - gap))
        add(f"box under a cone's base, {name}", _concat(_cone(24), small))
    # a sliver: one face of a box split at a point 1e-6 off its edge's midpoint
    box = trimesh.creation.box(extents=(1.0, 1.0, 1.0))
    v, f = np.asarray(box.vertices), np.asarray(box.faces)
    i, j, k = f[0]
    mid = 0.5 * (v[i] + v[j]) + 1e-6 * (v[k] - 0.5 * (v[i] + v[j]))
    v = np.concatenate([v, mid[None]])
    add("box with a sliver", (v, np.concatenate([f[1:], [[i, len(v) - 1, k], [len(v) - 1, j, k]]])))
    return out


_CORPUS = _corpus()


@pytest.mark.parametrize("name", sorted(_CORPUS))
def test_small_meshes_match_exact_reference(name, small_fans):
    vertices, faces = _CORPUS[name]
    expected = _reference(vertices, faces)
    old, new = _answers(vertices, faces)
    assert new == expected
    assert old == expected


def test_corpus_has_both_answers():
    """The corpus holds meshes whose faces meet and meshes whose faces do not (the reference's answers)."""
    answers = {name: _reference(*_CORPUS[name]) for name in _CORPUS}
    assert answers["two overlapping boxes"] and answers["cone, base centre pushed through"]
    assert answers["cone, one fan triangle bent through the base"]
    assert answers["box under a cone's base, touching"]
    assert not answers["box under a cone's base, apart by 1e-7"]
    assert not answers["cone40"] and not answers["flat cone40"] and not answers["cylinder40"]


def _big() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for name, mesh in (
        ("cone", _cone(2000)),
        ("flat cone", _cone(2000, height=0.02)),
        ("cylinder", trimesh.creation.cylinder(0.5, 1.0, sections=2000)),
        ("annulus", trimesh.creation.annulus(0.25, 0.5, 0.3, sections=600)),
    ):
        out[name] = (np.asarray(mesh.vertices), np.asarray(mesh.faces))
    cone = _cone(2000)
    v = np.asarray(cone.vertices).copy()
    v[_centre(cone, 0.0)] = (0.4, 0.0, 0.5)
    out["cone, base centre pushed through"] = (v, np.asarray(cone.faces))
    v = np.asarray(cone.vertices).copy()
    rim = np.flatnonzero((np.abs(v[:, 2]) < 1e-12) & (np.abs(v[:, :2]).max(axis=1) > 1e-12))
    v[rim[700]] = (-0.1 * v[rim[700], 0], -0.1 * v[rim[700], 1], -0.01)  # one side face through the base
    out["cone, one fan triangle bent through the base"] = (v, np.asarray(cone.faces))
    small = trimesh.creation.box(extents=(0.2, 0.2, 0.2))
    for gap, name in ((1e-7, "apart by 1e-7"), (0.0, "touching")):
        out[f"box under the base, {name}"] = _concat(
            cone, small.copy().apply_translation((0.3, 0.0, -0.1 - gap))
        )
    return out


@pytest.mark.parametrize(
    "name, expected",
    [
        ("cone", False),
        ("flat cone", False),
        ("cylinder", False),
        ("annulus", False),
        ("cone, base centre pushed through", True),
        ("cone, one fan triangle bent through the base", True),
        ("box under the base, apart by 1e-7", False),
        ("box under the base, touching", True),
    ],
)
def test_fans_of_2000_sections_old_and_new_agree(name, expected):
    """Cones and cylinders of 2,000 sections take the fan way (annuli have no hub: the old way); both ways
    give the expected answer (by construction: convex meshes and apart components meet nowhere, the pushed
    and bent fans cross the cone, the touching box touches its base)."""
    vertices, faces = _BIG[name]
    old, new = _answers(vertices, faces)
    assert (old, new) == (expected, expected)


_BIG = _big()


def test_many_meshes_in_one_launch(small_fans):
    """Meshes of both ways in one call: each gets its own answer (a batch of the corpus, in two orders)."""
    names = sorted(_CORPUS)
    specs = [_spec(*_CORPUS[n]) for n in names]
    expected = [_reference(*_CORPUS[n]) for n in names]
    assert _meshes.faces_meet(specs, _CPU) == expected
    assert _meshes.faces_meet(specs[::-1], _CPU) == expected[::-1]
    assert _meshes.faces_meet(specs, _CPU, split_fans=False) == expected


def test_groups_of_the_plan():
    """Each face of a group holds its hub, so no pair within a group needs a test; groups are numbered
    mesh by mesh."""
    meshes = [
        _cone(300),
        trimesh.creation.icosphere(subdivisions=1),
        trimesh.creation.cylinder(0.5, 1, sections=300),
    ]
    specs = [_spec(m.vertices, m.faces) for m in meshes]
    face_group, group_first, stored = _meshes._fan_plan(specs)
    assert group_first.tolist() == [0, 2, 2, 4]
    rows = np.concatenate([[0], np.cumsum([len(m.faces) for m in meshes])])
    for k, m in enumerate(meshes):
        groups = face_group[rows[k] : rows[k + 1]]
        faces = np.asarray(m.faces)
        for g in range(group_first[k], group_first[k + 1]):
            members = faces[groups == g]
            hub = set.intersection(*(set(row.tolist()) for row in members))
            assert len(members) >= 300 and len(hub) == 1
    assert (face_group[rows[1] : rows[2]] == -1).all()  # the icosphere has no hub
    assert sorted(stored.tolist()) == np.flatnonzero(face_group >= 0).tolist()
    assert list(itertools.islice(face_group[rows[2] : rows[3]], 0)) == []
