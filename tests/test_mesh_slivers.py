"""Meshes with thin faces: slivers Warp's closest-point queries skip (issue 50 item 16) are still measured, and
a fine cone's sign near its base (item 17). References: the analytic distance of a capped cylinder (a
polygonal prism of ``n`` sides is within ``r (1 - cos(pi / n))`` of it) and the analytic inside test of a
cone."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

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


def _probes(radius: float, length: float, seed: int = 0) -> np.ndarray:
    """Points far from the caps at radial offsets from the axis to 20 radii, at several heights and angles."""
    rng = np.random.default_rng(seed)
    rows = []
    for z in (0.3 * length, 0.5 * length, 0.77 * length):
        for rho in (0.0, 0.3 * radius, 0.9 * radius, 1.1 * radius, 2.0 * radius, 20.0 * radius):
            a = rng.uniform(0, 2 * np.pi)
            rows.append([rho * np.cos(a), rho * np.sin(a), z])
    return np.array(rows)


def _cylinder_distance(points: np.ndarray, radius: float) -> np.ndarray:
    """Signed distance of points far from the caps to the infinite cylinder of ``radius`` about z."""
    return np.hypot(points[:, 0], points[:, 1]) - radius


@pytest.mark.parametrize(
    "radius, length, sections, slivers",
    [
        (0.0005, 10.0, 256, True),  # the cable: its side faces (aspect ~8e5) are skipped by Warp's queries
        (0.01, 2.0, 32, False),  # aspect ~1,000
        (0.002, 5.0, 128, False),  # aspect ~51,000
    ],
)
@pytest.mark.parametrize("method", ["ray", "normal", "unsigned"])
def test_rod_distance_matches_the_cylinder(radius, length, sections, slivers, method):
    vertices, faces = _rod(radius, length, sections)
    skipped = _warp_skips(vertices, faces)
    assert skipped.any() == slivers and not skipped.all()  # the case is what it says
    world = warpgeo.MeshWorld([(vertices, faces)], sign_method=method)
    assert world.wait_tables(timeout=60)
    points = _probes(radius, length)
    got = warpgeo.signed_distance(torch.tensor(points), world).numpy()
    want = _cylinder_distance(points, radius)
    if method == "unsigned":
        want = np.abs(want)
    # the prism is inscribed in the cylinder: within r (1 - cos(pi / n)) of it, plus float32 vertex rounding
    tol = radius * (1 - math.cos(math.pi / sections)) + 4e-7 * length
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


def test_a_sphere_overlapping_the_cable_costs():
    radius, length = 0.0005, 10.0
    world = warpgeo.MeshWorld([_rod(radius, length, 256)])
    assert world.wait_tables(timeout=60)
    # a 3 mm sphere 1 mm from the axis at the middle: it overlaps the cable by 3 - (1 - 0.5) = 2.5 mm
    spheres = torch.tensor([[0.001, 0.0, 5.0, 0.003], [0.0, 0.02, 5.0, 0.003]], dtype=torch.float64)
    cost = warpgeo.sphere_mesh_cost(spheres, world).numpy()
    np.testing.assert_allclose(cost, [0.0025, 0.0], rtol=0, atol=1e-7)
