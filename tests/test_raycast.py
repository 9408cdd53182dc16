"""Ray casting (warpgeo.raycast): against a brute-force float64 ray/triangle intersection over every
triangle (Möller–Trumbore, ties to the lowest entry) and against sphere tracing of the primitives' analytic
distances; environments, poses, enable flags, inside starts, misses, max_distance; bad and hostile input;
gradients by finite differences; opcheck and torch.compile; the sensors (camera, depth, lidar, grid)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import trimesh

import warpgeo
from warpgeo import raycasting as raycast_module
from warpgeo.primitives import Capsule, Cuboid, Cylinder, Sphere
from warpgeo.raycasting import camera_rays, grid_rays, lidar_rays, raycast, render_depth
from warpgeo.world import MeshWorld

# --------------------------------------------------------------------------------------------------------
# references
# --------------------------------------------------------------------------------------------------------


def _quat_matrix(q):
    w, x, y, z = np.asarray(q, dtype=np.float64) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _posed_triangles(mesh: trimesh.Trimesh, pose) -> np.ndarray:
    """(F, 3, 3) world-frame triangles of ``mesh`` (float32 vertices, as a Warp mesh stores them)."""
    v = np.asarray(mesh.vertices, dtype=np.float32).astype(np.float64)
    rot = _quat_matrix(pose[3:])
    v = v @ rot.T + np.asarray(pose[:3], dtype=np.float64)
    return v[np.asarray(mesh.faces)]


def brute_force(entries, origins, directions, eps=1e-6):
    """First hit of each ray over ``entries`` (a list of (F, 3, 3) triangle arrays or None: disabled), by
    Möller–Trumbore over every triangle in float64. Returns (t (inf: miss), entry (-1), normal facing the
    origin, fragile): ``fragile`` marks rays passing within ``eps`` (barycentric) of an edge of a triangle they
    meet at t >= 0 (hit or miss there is a matter of rounding)."""
    o = np.asarray(origins, dtype=np.float64)
    d = np.asarray(directions, dtype=np.float64)
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    n_rays = len(o)
    best = np.full(n_rays, np.inf)
    entry = np.full(n_rays, -1)
    normal = np.zeros((n_rays, 3))
    fragile = np.zeros(n_rays, dtype=bool)
    for m, tris in enumerate(entries):
        if tris is None:
            continue
        a, b, c = tris[:, 0], tris[:, 1], tris[:, 2]
        e1, e2 = b - a, c - a
        p = np.cross(d[:, None, :], e2[None])  # (R, F, 3)
        det = np.einsum("rfk,fk->rf", p, e1)
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = 1.0 / det
            s = o[:, None, :] - a[None]
            u = np.einsum("rfk,rfk->rf", s, p) * inv
            q = np.cross(s, e1[None])
            v = np.einsum("rfk,rk->rf", q, d) * inv
            t = np.einsum("rfk,fk->rf", q, e2) * inv
        margin = np.minimum(np.minimum(u, v), 1 - u - v)
        valid = np.isfinite(t) & (np.abs(det) > 1e-14) & (t >= 0)
        hit = valid & (margin >= 0)
        fragile |= (valid & (np.abs(margin) < eps)).any(axis=1)
        t = np.where(hit, t, np.inf)
        f = np.argmin(t, axis=1)
        tm = t[np.arange(n_rays), f]
        better = tm < best
        best[better] = tm[better]
        entry[better] = m
        fn = np.cross(e1[f], e2[f])
        fn /= np.linalg.norm(fn, axis=1, keepdims=True)
        fn *= -np.sign(np.einsum("rk,rk->r", fn, d))[:, None]
        normal[better] = fn[better]
    return best, entry, normal, fragile


def _sdf_primitive(kind, p):
    """Analytic signed distance of a primitive at the origin (p: (N, 3) in its frame)."""
    name, size = kind
    if name == "sphere":
        return np.linalg.norm(p, axis=1) - size[0]
    if name == "box":
        q = np.abs(p) - np.asarray(size)
        return np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(axis=1), 0)
    if name == "capsule":
        r, h = size
        z = np.clip(p[:, 2], -h, h)
        return np.linalg.norm(p - np.stack([0 * z, 0 * z, z], 1), axis=1) - r
    r, h = size  # cylinder
    dr = np.linalg.norm(p[:, :2], axis=1) - r
    dz = np.abs(p[:, 2]) - h
    return np.minimum(np.maximum(dr, dz), 0) + np.hypot(np.maximum(dr, 0), np.maximum(dz, 0))


def sphere_trace(kinds, poses, origins, directions, far=50.0):
    """First hit over posed primitives by sphere tracing their analytic distances in float64 (steps of the
    union's |distance|, which never cross a surface; from inside, the exit), and the normal (the distance's
    central-difference gradient, turned to face the origin)."""
    o = np.asarray(origins, dtype=np.float64)
    d = np.asarray(directions, dtype=np.float64)
    d = d / np.linalg.norm(d, axis=1, keepdims=True)
    frames = [(_quat_matrix(p[3:]), np.asarray(p[:3], dtype=np.float64)) for p in poses]

    def dists(x):
        return np.stack([_sdf_primitive(k, (x - t) @ r) for k, (r, t) in zip(kinds, frames, strict=True)], 1)

    t = np.zeros(len(o))
    done = np.zeros(len(o), dtype=bool)
    for _ in range(20000):
        step = np.abs(dists(o + t[:, None] * d)).min(axis=1)
        done |= step < 1e-12
        if done.all():
            break
        t = np.where(done, t, t + step)
        t = np.where(t > far, np.inf, t)
        done |= ~np.isfinite(t)
    hit = np.isfinite(t) & done
    t = np.where(hit, t, np.inf)
    x = o + np.where(hit, t, 0)[:, None] * d
    all_d = np.abs(dists(x))
    entry = np.where(hit, all_d.argmin(axis=1), -1)
    h = 1e-7
    grad = np.zeros_like(x)
    rows = np.arange(len(x))
    for k in range(3):
        dx = np.zeros(3)
        dx[k] = h
        grad[:, k] = (dists(x + dx) - dists(x - dx))[rows, np.maximum(entry, 0)] / (2 * h)
    grad /= np.maximum(np.linalg.norm(grad, axis=1, keepdims=True), 1e-300)
    grad *= -np.sign(np.einsum("rk,rk->r", grad, d))[:, None]
    return t, entry, np.where(hit[:, None], grad, 0)


def _rays_towards(points, rng, count, spread=0.3, distance=3.0):
    """Rays from random points ``distance`` away aimed near random ``points`` (rows of an array)."""
    aims = points[rng.integers(0, len(points), count)] + rng.normal(0, spread, (count, 3))
    dirs = rng.normal(size=(count, 3))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    origins = aims - distance * dirs
    return origins, dirs * rng.uniform(0.2, 5.0, (count, 1))  # directions need not be unit


_POSE_A = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
_POSE_B = [1.3, 0.4, -0.2, *(np.array([0.9, 0.2, -0.3, 0.25]) / np.linalg.norm([0.9, 0.2, -0.3, 0.25]))]
_POSE_C = [-1.2, -0.5, 0.6, *(np.array([0.5, -0.5, 0.5, 0.5]))]


# --------------------------------------------------------------------------------------------------------
# meshes against brute force
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_meshes_against_brute_force(device, dtype):
    meshes = [
        trimesh.creation.icosphere(subdivisions=2, radius=0.6),
        trimesh.creation.box((0.8, 0.5, 0.3)),  # a cuboid mesh: its closed form
        trimesh.creation.torus(major_radius=0.5, minor_radius=0.15, major_sections=24, minor_sections=12),
    ]
    poses = [_POSE_A, _POSE_B, _POSE_C]
    world = MeshWorld(meshes, poses=poses, device=device)
    rng = np.random.default_rng(1)
    centres = np.array([p[:3] for p in poses])
    origins, dirs = _rays_towards(centres, rng, 3000, spread=0.5)
    # rays from inside the icosphere and the torus's tube, and from its hole
    inside = np.concatenate(
        [rng.normal(0, 0.2, (100, 3)), np.array(_POSE_C[:3]) + rng.normal(0, 0.02, (50, 3))]
    )
    origins = np.concatenate([origins, inside])
    dirs = np.concatenate([dirs, rng.normal(size=(len(inside), 3))])
    tris = [_posed_triangles(m, p) for m, p in zip(meshes, poses, strict=True)]
    t_ref, e_ref, n_ref, fragile = brute_force(tris, origins, dirs)
    hits = raycast(
        world,
        torch.tensor(origins, dtype=dtype, device=device),
        torch.tensor(dirs, dtype=dtype, device=device),
    )
    t = hits.distance.double().cpu().numpy()
    e = hits.entry.cpu().numpy()
    robust = ~fragile
    assert robust.mean() > 0.9 and (e_ref[robust] >= 0).sum() > 1000 and (e_ref[robust] < 0).sum() > 500
    np.testing.assert_array_equal(np.isfinite(t[robust]), np.isfinite(t_ref[robust]))
    both = robust & np.isfinite(t_ref)
    tol = 2e-4 if dtype == torch.float32 else 1e-9
    np.testing.assert_allclose(t[both], t_ref[both], rtol=0, atol=tol)
    # entries: the same where no other entry is as near (coincident surfaces do not occur here)
    np.testing.assert_array_equal(e[robust], e_ref[robust])
    n = hits.normal.double().cpu().numpy()
    np.testing.assert_allclose(n[both], n_ref[both], atol=1e-3 if dtype == torch.float32 else 1e-7)
    point = hits.point.double().cpu().numpy()
    unit = dirs / np.linalg.norm(dirs, axis=1, keepdims=True)
    np.testing.assert_allclose(point[both], origins[both] + t_ref[both, None] * unit[both], atol=10 * tol)
    miss = ~np.isfinite(t)
    assert (e[miss] == -1).all() and (point[miss] == 0).all() and (n[miss] == 0).all()


def test_environments_poses_and_enable_flags(device):
    ico = trimesh.creation.icosphere(subdivisions=2, radius=0.5)
    torus = trimesh.creation.torus(major_radius=0.6, minor_radius=0.2, major_sections=20, minor_sections=10)
    envs = [[ico, torus], [torus], [ico, ico, Sphere(0.3)]]
    poses = [[_POSE_A, _POSE_B], [_POSE_C], [_POSE_B, _POSE_C, _POSE_A]]
    world = MeshWorld.from_envs(envs, poses=poses, device=device)
    world.set_enabled(torch.tensor([[True, False, False], [True, False, False], [True, False, True]]))
    rng = np.random.default_rng(2)
    per = 400
    origins, dirs = _rays_towards(np.array([_POSE_A[:3], _POSE_B[:3], _POSE_C[:3]]), rng, 3 * per, spread=0.4)
    o = torch.tensor(origins.reshape(3, per, 3), device=device, dtype=torch.float64)
    d = torch.tensor(dirs.reshape(3, per, 3), device=device, dtype=torch.float64)
    env_index = torch.tensor([2, 0, 1], device=device)
    hits = raycast(world, o, d, env_index=env_index)
    # env 0: ico at A (torus disabled); env 1: torus at C; env 2: ico at B, (ico at C disabled), sphere at A
    sphere_tris = None  # the primitive: traced below, as a closed form
    scenes = {0: [_posed_triangles(ico, _POSE_A), None], 1: [_posed_triangles(torus, _POSE_C)]}
    for b, e in enumerate(env_index.tolist()):
        t = hits.distance[b].cpu().numpy()
        ent = hits.entry[b].cpu().numpy()
        ob, db = origins[b * per : (b + 1) * per], dirs[b * per : (b + 1) * per]
        if e in scenes:
            t_ref, e_ref, _, fragile = brute_force(scenes[e], ob, db)
        else:
            t_mesh, e_mesh, _, fragile = brute_force([_posed_triangles(ico, _POSE_B), sphere_tris], ob, db)
            t_sph, _, _ = sphere_trace([("sphere", (0.3,))], [_POSE_A], ob, db)
            t_ref = np.minimum(t_mesh, t_sph)
            e_ref = np.where(t_sph < t_mesh, 2, e_mesh)
        ok = ~fragile
        np.testing.assert_allclose(t[ok], t_ref[ok], atol=1e-8)
        np.testing.assert_array_equal(ent[ok], e_ref[ok])
    # default environment 0 for every batch entry
    default = raycast(world, o, d)
    same = raycast(world, o, d, env_index=torch.zeros(3, dtype=torch.int64, device=device))
    torch.testing.assert_close(default.distance, same.distance)
    # moving an entry moves its hits: the sphere of env 2 shifted by +0.25 along x, rays along -x
    world.set_enabled(torch.tensor([[True, False, False], [True, False, False], [False, False, True]]))
    ray_o = torch.tensor([[[3.0, 0.0, 0.0]]], dtype=torch.float64, device=device)
    ray_d = torch.tensor([[[-1.0, 0.0, 0.0]]], dtype=torch.float64, device=device)
    env2 = torch.tensor([2], device=device)
    assert raycast(world, ray_o, ray_d, env_index=env2).distance.item() == pytest.approx(
        2.7, abs=1e-7
    )  # sizes are float32 in a world
    new = world.poses.clone()
    new[2, 2, 0] = 0.25
    world.set_poses(new)
    assert raycast(world, ray_o, ray_d, env_index=env2).distance.item() == pytest.approx(2.45, abs=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_incoherent_rays_are_cast_in_another_order_and_answered_in_theirs(monkeypatch, dtype):
    """On the CPU, many rays in no coherent order are cast sorted by where they enter the world
    (``_ray_order``, from ``_SORT_MIN_RAYS`` rays: lowered here): each answer still lands at its own ray, in its
    own environment (brute force per batch entry; an environment out of range, checks off, misses), bit for
    bit as when cast as they come, for broadcast origins too; NaN and zero rays (checks off) miss without a
    warning; a camera's rays (coherent) are cast as they come."""
    from warpgeo import _ray_order

    monkeypatch.setattr(_ray_order, "_SORT_MIN_RAYS", 64)
    reordered = []
    in_order = raycast_module._cast_in_order

    def spy(order, *args):
        reordered.append(order)
        return in_order(order, *args)

    monkeypatch.setattr(raycast_module, "_cast_in_order", spy)
    ico = trimesh.creation.icosphere(subdivisions=2, radius=0.5)
    torus = trimesh.creation.torus(major_radius=0.6, minor_radius=0.2, major_sections=20, minor_sections=10)
    world = MeshWorld.from_envs([[ico, torus], [torus]], poses=[[_POSE_A, _POSE_B], [_POSE_C]])
    rng = np.random.default_rng(12)
    per = 300
    origins, dirs = _rays_towards(np.array([_POSE_A[:3], _POSE_B[:3], _POSE_C[:3]]), rng, 4 * per, spread=0.4)
    o = torch.tensor(origins.reshape(4, per, 3), dtype=dtype)
    d = torch.tensor(dirs.reshape(4, per, 3), dtype=dtype)
    env_index = torch.tensor([1, 0, 7, 1])
    with warpgeo.checks.value_checks(False):
        hits = raycast(world, o, d, env_index=env_index)
    assert len(reordered) == 1 and sorted(reordered[0].tolist()) == list(range(4 * per))
    scenes = {
        0: [_posed_triangles(ico, _POSE_A), _posed_triangles(torus, _POSE_B)],
        1: [_posed_triangles(torus, _POSE_C)],
    }
    tol = 2e-4 if dtype == torch.float32 else 1e-8
    for b, e in enumerate(env_index.tolist()):
        t = hits.distance[b].double().numpy()
        if e not in scenes:
            assert np.isinf(t).all() and (hits.entry[b] == -1).all()
            continue
        ob, db = origins[b * per : (b + 1) * per], dirs[b * per : (b + 1) * per]
        t_ref, e_ref, n_ref, fragile = brute_force(scenes[e], ob, db)
        ok = ~fragile
        assert np.isfinite(t_ref[ok]).sum() > 50 and np.isinf(t_ref[ok]).sum() > 20
        np.testing.assert_array_equal(np.isfinite(t[ok]), np.isfinite(t_ref[ok]))
        both = ok & np.isfinite(t_ref)
        np.testing.assert_allclose(t[both], t_ref[both], rtol=0, atol=tol)
        np.testing.assert_array_equal(hits.entry[b].numpy()[ok], e_ref[ok])
        np.testing.assert_allclose(hits.normal[b].double().numpy()[both], n_ref[both], atol=1e-3)
    # bit for bit the answers of the same rays cast as they come
    monkeypatch.setattr(_ray_order, "_SORT_MIN_RAYS", 1 << 62)
    with warpgeo.checks.value_checks(False):
        as_given = raycast(world, o, d, env_index=env_index)
    monkeypatch.setattr(_ray_order, "_SORT_MIN_RAYS", 64)
    assert len(reordered) == 1
    for a, b in zip(hits, as_given, strict=True):
        assert torch.equal(a, b)
    # one origin per batch entry, broadcast along its rays (a strided view): the same answers
    one = torch.tensor(origins[::per][:, None, :], dtype=dtype)
    broadcast = raycast(world, one, d, env_index=torch.tensor([1, 0, 0, 1]))
    assert len(reordered) == 2
    first_ref, _, _, fragile = brute_force(scenes[1], np.repeat(origins[:1], per, 0), dirs[:per])
    ok = ~fragile & np.isfinite(first_ref)
    np.testing.assert_allclose(broadcast.distance[0].double().numpy()[ok], first_ref[ok], rtol=0, atol=tol)
    # checks off, rays with NaN origins or zero directions among them: misses, no warning from the sample
    bad_o, bad_d = o.clone(), d.clone()
    bad_o[0] = math.nan
    bad_d[2, ::2] = 0.0
    with warnings.catch_warnings(), warpgeo.checks.value_checks(False):
        warnings.simplefilter("error")
        bad = raycast(world, bad_o, bad_d, env_index=torch.tensor([1, 0, 0, 1]))
        none = raycast(world, torch.full_like(o, math.nan), d, env_index=torch.tensor([1, 0, 0, 1]))
    assert (bad.entry[0] == -1).all() and (bad.entry[2, ::2] == -1).all() and (bad.entry[3] >= 0).any()
    assert (none.entry == -1).all()
    assert len(reordered) == 3  # the first of them (its sample has usable pairs), not the NaN rays
    # a camera per environment: coherent rays, cast as they come
    k = torch.tensor([20.0, 20.0, 15.5, 15.5])
    cam_o, cam_d = camera_rays(
        k, 32, 32, torch.tensor([[0.0, -3.0, 0.0, 0.70710678, -0.70710678, 0.0, 0.0]] * 2)
    )
    raycast(world, cam_o.to(dtype), cam_d.to(dtype), env_index=torch.tensor([0, 1]))
    assert len(reordered) == 3


# --------------------------------------------------------------------------------------------------------
# primitives against sphere tracing
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_mesh", [False, True], ids=["closed_forms_only", "with_a_mesh"])
def test_primitives_against_sphere_tracing(device, with_mesh):
    entries = [Cuboid([0.6, 0.4, 0.3]), Sphere(0.35), Capsule(0.2, 0.6), Cylinder(0.25, 0.5)]
    kinds = [
        ("box", (0.3, 0.2, 0.15)),
        ("sphere", (0.35,)),
        ("capsule", (0.2, 0.3)),
        ("cylinder", (0.25, 0.25)),
    ]
    poses = [
        _POSE_B,
        [0.0, 1.2, 0.0, 1, 0, 0, 0],
        _POSE_C,
        [0.3, -1.0, 0.2, *(np.array([0.7, 0.7, 0.1, 0.0]) / 0.995)],
    ]
    far_away = [50.0, 50.0, 50.0, 1, 0, 0, 0]
    if with_mesh:  # a mesh far from the rays: the kernels of a world of meshes
        entries.append(trimesh.creation.icosphere(subdivisions=1, radius=0.1))
        poses.append(far_away)
    world = MeshWorld(entries, poses=poses, device=device)
    assert world.kernel_args(torch.float64).all_cuboids is not with_mesh
    rng = np.random.default_rng(3)
    centres = np.array([p[:3] for p in poses[:4]])
    origins, dirs = _rays_towards(centres, rng, 1200, spread=0.3)
    inside = centres[rng.integers(0, 4, 100)] + rng.normal(0, 0.03, (100, 3))
    origins = np.concatenate([origins, inside])
    dirs = np.concatenate([dirs, rng.normal(size=(100, 3))])
    t_ref, e_ref, n_ref = sphere_trace(kinds, poses[:4], origins, dirs)
    hits = raycast(world, torch.tensor(origins, device=device), torch.tensor(dirs, device=device))
    t = hits.distance.cpu().numpy()
    hit_ref = np.isfinite(t_ref)
    assert hit_ref.sum() > 400 and (~hit_ref).sum() > 200
    # tracing cannot tell a ray grazing a surface within its tolerance: those may differ in hit / miss
    agree = np.isfinite(t) == hit_ref
    assert agree.mean() > 0.995
    both = np.isfinite(t) & hit_ref
    # (tracing converges slowly where a ray meets a surface at a grazing angle: its own error is ~1e-8 there)
    np.testing.assert_allclose(t[both], t_ref[both], atol=1e-7)
    np.testing.assert_array_equal(hits.entry.cpu().numpy()[both], e_ref[both])
    normals = hits.normal.cpu().numpy()
    # away from a box's edges and a cylinder's rims (the gradient is a corner's there)
    cos = np.abs(np.einsum("rk,rk->r", normals[both], n_ref[both]))
    assert np.quantile(cos, 0.02) > 1 - 1e-6
    np.testing.assert_allclose(np.linalg.norm(normals[both], axis=1), 1.0, atol=1e-12)
    unit = dirs / np.linalg.norm(dirs, axis=1, keepdims=True)
    assert (np.einsum("rk,rk->r", normals[both], unit[both]) <= 0).all()


def test_primitive_closed_forms_by_hand(device):
    """Hits worked out by hand: entering, from inside (the exit), a cap, a capsule's ball, parallel rays."""
    world = MeshWorld(
        [Sphere(1.0), Cuboid([2, 2, 2]), Capsule(0.5, 2.0), Cylinder(0.5, 1.0)],
        poses=[[0, 0, 0, 1, 0, 0, 0], [10, 0, 0, 1, 0, 0, 0], [20, 0, 0, 1, 0, 0, 0], [30, 0, 0, 1, 0, 0, 0]],
        device=device,
    )
    o = torch.tensor(
        [
            [-3, 0, 0],
            [0, 0, 0],
            [10, 0, 5],
            [10.5, 0.2, 0],
            [20, 0, 5],
            [20, 2, 0.5],
            [30, 0, 3],
            [30.2, 0, 0],
        ],
        dtype=torch.float64,
        device=device,
    )
    d = torch.tensor(
        [[1, 0, 0], [0, 2, 0], [0, 0, -1], [0, 0, 1], [0, 0, -1], [0, -1, 0], [0, 0, -3], [1, 0, 0]],
        dtype=torch.float64,
        device=device,
    )
    hits = raycast(world, o, d)
    want_t = [2.0, 1.0, 4.0, 1.0, 5.0 - 1.5, 2.0 - 0.5, 3.0 - 0.5, 0.3]
    want_n = [[-1, 0, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1], [0, 0, 1], [0, 1, 0], [0, 0, 1], [-1, 0, 0]]
    want_e = [0, 0, 1, 1, 2, 2, 3, 3]
    torch.testing.assert_close(hits.distance, torch.tensor(want_t, dtype=torch.float64, device=device))
    torch.testing.assert_close(hits.normal, torch.tensor(want_n, dtype=torch.float64, device=device))
    assert hits.entry.tolist() == want_e
    # a ray inside a box's face plane, parallel to it, entering through the x face: robust
    side = raycast(
        world, torch.tensor([8.0, 0.2, 0.5], device=device), torch.tensor([1.0, 0, 0], device=device)
    )
    assert side.distance.item() == pytest.approx(1.0) and side.entry.item() == 1
    # exactly on a face's plane, parallel to it: a hit at the box's edge or a miss; never a crash or NaN
    graze = raycast(
        world, torch.tensor([8.0, 0.0, 1.0], device=device), torch.tensor([1.0, 0, 0], device=device)
    )
    assert graze.entry.item() in (-1, 1) and not torch.isnan(graze.distance)


def test_start_inside_is_the_exit_for_meshes_and_primitives(device):
    ico = trimesh.creation.icosphere(subdivisions=4, radius=1.0)
    world = MeshWorld.from_envs([[ico], [Sphere(1.0)]], device=device)
    o = torch.zeros(2, 1, 3, dtype=torch.float64, device=device)
    d = torch.tensor([[[0.3, -0.2, 0.9]]], dtype=torch.float64, device=device).expand(2, 1, 3)
    hits = raycast(world, o, d, env_index=torch.tensor([0, 1], device=device))
    assert hits.distance[1].item() == pytest.approx(1.0, abs=1e-12)
    assert hits.distance[0].item() == pytest.approx(1.0, abs=5e-3)  # the icosphere's faces are inside r = 1
    unit = d / d.norm(dim=-1, keepdim=True)
    assert ((hits.normal * unit).sum(-1) < -0.99).all()  # facing the origin: the inward normal
    # a ray starting on a surface hits it at 0
    on = raycast(world, torch.tensor([[1.0, 0, 0]], device=device), torch.tensor([[1.0, 0, 0]], device=device),
                 env_index=torch.tensor([1], device=device))  # fmt: skip
    assert on.distance.item() == 0.0


def test_ties_go_to_the_lowest_entry_and_max_distance(device):
    ico = trimesh.creation.icosphere(subdivisions=2, radius=0.5)
    world = MeshWorld([Sphere(0.5), Sphere(0.5), ico, ico], device=device)
    o = torch.tensor([[-2.0, 0, 0]], device=device)
    d = torch.tensor([[1.0, 0, 0]], device=device)
    assert raycast(world, o, d).entry.item() == 0
    world.set_enabled([False, True, True, True])
    assert raycast(world, o, d).entry.item() == 1
    world.set_enabled([False, False, True, True])
    assert raycast(world, o, d).entry.item() == 2
    world.set_enabled([True, True, True, True])
    assert raycast(world, o, d, max_distance=1.5).distance.item() == pytest.approx(1.5)
    assert raycast(world, o, d, max_distance=1.5 - 1e-3).entry.item() == -1
    assert raycast(world, o, d, max_distance=0.0).entry.item() == -1
    world.set_enabled([False, False, False, False])
    assert raycast(world, o, d).entry.item() == -1


# --------------------------------------------------------------------------------------------------------
# bad and hostile input
# --------------------------------------------------------------------------------------------------------


def test_bad_input_raises(device):
    world = MeshWorld([Sphere(1.0)], device=device)
    o = torch.zeros(2, 3, device=device)
    d = torch.ones(2, 3, device=device)
    with pytest.raises(ValueError, match="directions must be nonzero"):
        raycast(world, o, torch.zeros(2, 3, device=device))
    with pytest.raises(ValueError, match="origins must be finite"):
        raycast(world, torch.full((2, 3), math.nan, device=device), d)
    with pytest.raises(ValueError, match="directions must be finite"):
        raycast(world, o, torch.full((2, 3), math.inf, device=device))
    with pytest.raises(IndexError, match="env_index"):
        raycast(world, o, d, env_index=torch.tensor([0, 1], device=device))
    with pytest.raises(ValueError, match="env_index"):
        raycast(world, o, d, env_index=torch.tensor([0, 0, 0], device=device))
    with pytest.raises(TypeError, match="env_index"):
        raycast(world, o, d, env_index=torch.zeros(2, device=device))
    with pytest.raises(ValueError, match="broadcast"):
        raycast(world, o, torch.ones(3, 3, device=device))
    with pytest.raises(ValueError, match=r"origins must have shape \(\.\.\., 3\)"):
        raycast(world, torch.zeros(2, 4, device=device), d)
    with pytest.raises(TypeError, match="dtype of origins"):
        raycast(world, o, d.double())
    with pytest.raises(TypeError, match="origins"):
        raycast(world, o.long(), d)
    with pytest.raises(TypeError, match="MeshWorld"):
        raycast("world", o, d)
    with pytest.raises(ValueError, match="max_distance"):
        raycast(world, o, d, max_distance=-1.0)
    with pytest.raises(ValueError, match="max_distance"):
        raycast(world, o, d, max_distance=math.nan)
    with pytest.raises(TypeError, match="max_distance"):
        raycast(world, o, d, max_distance="far")
    # the registered op checks what its kernel indexes by
    args = world.kernel_args(torch.float32)
    op = torch.ops.warpgeo.raycast
    with pytest.raises(ValueError, match="directions must have the shape"):
        op(o[None], d[None, :1], None, args.world, args.all_cuboids, math.inf)
    with pytest.raises(TypeError, match="world"):
        op(o[None], d[None], None, args.world[:-1], args.all_cuboids, math.inf)
    with pytest.raises(ValueError, match="origins must have shape"):
        op(o, d, None, args.world, args.all_cuboids, math.inf)


def test_hostile_values_with_checks_off_are_misses(device):
    world = MeshWorld.from_envs([[Sphere(1.0)], [trimesh.creation.icosphere(subdivisions=1)]], device=device)
    bad = [math.nan, math.inf, -math.inf, 3.4e38, 1e300, 0.0, 1e-310]
    rng = np.random.default_rng(4)
    values = torch.tensor(rng.choice(bad, (2, 64, 3)), dtype=torch.float64, device=device)
    good_o = torch.tensor([-3.0, 0, 0], dtype=torch.float64, device=device).expand(2, 64, 3)
    good_d = torch.tensor([1.0, 0, 0], dtype=torch.float64, device=device).expand(2, 64, 3)
    with warpgeo.value_checks(False):
        for dtype in (torch.float32, torch.float64):
            for o, d in ((values, good_d), (good_o, values), (values, values)):
                for env in (None, torch.tensor([5, -7], device=device), torch.tensor([0, 1], device=device)):
                    hits = raycast(world, o.to(dtype), d.to(dtype), env_index=env)
                    assert not torch.isnan(hits.distance).any() and not torch.isnan(hits.point).any()
                    assert ((hits.entry == -1) | (hits.entry == 0)).all()
            zero = raycast(world, good_o.to(dtype), torch.zeros_like(good_d, dtype=dtype))
            assert (zero.entry == -1).all() and torch.isinf(zero.distance).all()
            nan_o = raycast(world, torch.full_like(good_o, math.nan, dtype=dtype), good_d.to(dtype))
            assert (nan_o.entry == -1).all()
            out = raycast(
                world, good_o.to(dtype), good_d.to(dtype), env_index=torch.tensor([2, -1], device=device)
            )
            assert (out.entry == -1).all() and (out.point == 0).all()
    # far but finite origins still hit (the BVH query starts at the box)
    far_o, far_d = np.array([[-1e12, 0.01, 0.02]]), np.array([[1.0, 0, 0]])
    far = raycast(
        world,
        torch.tensor(far_o, device=device),
        torch.tensor(far_d, device=device),
        env_index=torch.tensor([1], device=device),
    )
    t_ref, _, _, _ = brute_force(
        [_posed_triangles(trimesh.creation.icosphere(subdivisions=1), _POSE_A)], far_o, far_d
    )
    assert far.entry.item() == 0 and far.distance.item() == pytest.approx(t_ref[0], rel=0, abs=1e-3)


def test_shapes_dtypes_and_broadcasting(device):
    world = MeshWorld([Sphere(1.0)], device=device)
    one = raycast(world, torch.tensor([-3.0, 0, 0], device=device), torch.tensor([1.0, 0, 0], device=device))
    assert one.distance.shape == () and one.point.shape == (3,) and one.entry.dtype == torch.int64
    empty = raycast(world, torch.zeros(0, 3, device=device), torch.ones(0, 3, device=device))
    assert empty.distance.shape == (0,)
    o = torch.tensor([[[-3.0, 0, 0]]], device=device)  # (1, 1, 3) against (1, 5, 3)
    d = torch.tensor([[1.0, 0, 0], [1, 0.1, 0], [1, -0.1, 0], [1, 0, 0.1], [0, 1, 0]], device=device)[None]
    hits = raycast(world, o, d)
    assert hits.distance.shape == (1, 5) and hits.entry[0, :4].eq(0).all() and hits.entry[0, 4] == -1
    strided = raycast(world, o.expand(5, 5, 3).transpose(0, 1)[:, :1], d[0][:, None])  # views, no copies
    torch.testing.assert_close(strided.distance[:, 0], hits.distance[0])
    half = raycast(world, o.half(), d.half())
    assert half.distance.dtype == torch.float16
    torch.testing.assert_close(half.distance.float(), hits.distance, atol=2e-3, rtol=2e-3)
    many = raycast(
        world, torch.tensor([-3.0, 0, 0], device=device).expand(4, 6, 7, 3), d[0, 0].expand(4, 6, 7, 3)
    )
    assert many.distance.shape == (4, 6, 7) and torch.allclose(
        many.distance, torch.tensor(2.0, device=device)
    )


# --------------------------------------------------------------------------------------------------------
# gradients
# --------------------------------------------------------------------------------------------------------


def _gradcheck(world, origins, directions, env_index=None):
    o = origins.clone().requires_grad_(True)
    d = directions.clone().requires_grad_(True)

    def f(o, d):
        hits = raycast(world, o, d, env_index=env_index)
        return hits.distance, hits.point

    assert torch.autograd.gradcheck(f, (o, d), eps=1e-6, atol=1e-5)


def test_gradcheck_mesh(device):
    ico = trimesh.creation.icosphere(subdivisions=2, radius=0.7)
    world = MeshWorld([ico], poses=[_POSE_B], device=device)
    tris = _posed_triangles(ico, _POSE_B)
    rng = np.random.default_rng(5)
    faces = rng.choice(len(tris), 6, replace=False)
    targets = tris[faces].mean(axis=1)  # face centroids: far from every edge
    dirs = rng.normal(size=(6, 3))
    centre = np.array(_POSE_B[:3])
    dirs = np.where(np.einsum("rk,rk->r", dirs, targets - centre)[:, None] > 0, -dirs, dirs)  # from outside
    origins = targets - 2.0 * dirs / np.linalg.norm(dirs, axis=1, keepdims=True)
    o = torch.tensor(origins, device=device)
    d = torch.tensor(dirs * 1.7, device=device)
    assert (raycast(world, o, d).entry == 0).all()
    _gradcheck(world, o, d)
    # from inside: the exit face's plane
    out = targets - centre
    inner = centre + 0.05 * out / np.linalg.norm(
        out, axis=1, keepdims=True
    )  # on the line through the centroid
    _gradcheck(world, torch.tensor(inner, device=device), torch.tensor(out, device=device))


def test_gradcheck_primitives(device):
    world = MeshWorld(
        [Cuboid([1, 1, 1]), Sphere(0.5), Capsule(0.3, 0.8), Cylinder(0.4, 1.0)],
        poses=[_POSE_B, [3, 0, 0, 1, 0, 0, 0], _POSE_C, [0, 3, 0, 0.8, 0.6, 0, 0]],
        device=device,
    )
    o = torch.tensor(
        [[1.3, 0.4, 2.0], [3.1, 0.2, -2.0], [-1.2, -0.5, 3.0], [-3.0, -0.4, 0.7], [0.2, 5.0, 0.1]],
        dtype=torch.float64,
        device=device,
    )
    aims = torch.tensor(
        [[1.35, 0.42, -0.2], [3.05, 0.1, 0.0], [-1.2, -0.5, 0.6], [-1.2, -0.5, 0.6], [0.1, 3.0, 0.05]],
        dtype=torch.float64,
        device=device,
    )
    d = (aims - o) * 0.8
    hits = raycast(world, o, d)
    assert hits.entry.tolist() == [0, 1, 2, 2, 3]
    _gradcheck(world, o, d)


def test_gradient_values_on_a_plane(device):
    """A ray hitting the plane z = 0 (a wide cuboid's top): t = o_z / (-u_z), so dt/do = (0, 0, 1 / -u_z)."""
    world = MeshWorld([Cuboid([100, 100, 1])], poses=[[0, 0, -0.5, 1, 0, 0, 0]], device=device)
    o = torch.tensor([[0.3, 0.2, 2.0]], dtype=torch.float64, device=device, requires_grad=True)
    d = torch.tensor([[0.6, 0.0, -0.8]], dtype=torch.float64, device=device, requires_grad=True)
    hits = raycast(world, o, d)
    assert hits.distance.item() == pytest.approx(2.5)
    (g_o,) = torch.autograd.grad(hits.distance.sum(), o)
    torch.testing.assert_close(g_o, torch.tensor([[0.0, 0.0, 1.25]], dtype=torch.float64, device=device))


# --------------------------------------------------------------------------------------------------------
# opcheck and torch.compile
# --------------------------------------------------------------------------------------------------------


def test_opcheck(device):
    world = MeshWorld([trimesh.creation.icosphere(subdivisions=1), Sphere(0.4)],
                      poses=[_POSE_A, [2, 0, 0, 1, 0, 0, 0]], device=device)  # fmt: skip
    args = world.kernel_args(torch.float64)._asdict()
    gen = torch.Generator().manual_seed(6)
    o = (torch.rand(2, 5, 3, generator=gen, dtype=torch.float64) - 0.5).to(device) + torch.tensor(
        [-3.0, 0, 0], device=device
    )
    d = torch.tensor([1.0, 0.05, 0.02], dtype=torch.float64, device=device).expand(2, 5, 3).contiguous()
    env = torch.zeros(2, dtype=torch.int64, device=device)
    for grad in (True, False):
        torch.library.opcheck(
            raycast_module._raycast.custom,
            (o.clone().requires_grad_(grad), d.clone().requires_grad_(grad), env),
            dict(args, max_distance=math.inf),
        )


def test_compile_fullgraph_matches_eager(device):
    world = MeshWorld([trimesh.creation.icosphere(subdivisions=2), Cylinder(0.3, 1.0)],
                      poses=[_POSE_A, [1.5, 0, 0, 1, 0, 0, 0]], device=device)  # fmt: skip

    def f(o, d):
        hits = raycast(world, o, d, max_distance=10.0)
        return torch.where(hits.entry >= 0, hits.distance, 0).sum() + hits.point.sum()

    gen = torch.Generator().manual_seed(7)
    o = torch.tensor([-4.0, 0, 0]) + 0.3 * torch.randn(3, 8, 3, generator=gen)
    d = torch.tensor([1.0, 0, 0]) + 0.1 * torch.randn(3, 8, 3, generator=gen)
    o, d = o.to(device).requires_grad_(True), d.to(device).requires_grad_(True)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    out = compiled(o, d)
    g = torch.autograd.grad(out, (o, d))
    ref = f(o, d)
    g_ref = torch.autograd.grad(ref, (o, d))
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g, g_ref)
    assert g_ref[0].abs().sum() > 0


# --------------------------------------------------------------------------------------------------------
# sensors
# --------------------------------------------------------------------------------------------------------


def test_camera_rays_project_back_to_their_pixels():
    k = torch.tensor([[60.0, 0, 31.0], [0, 55.0, 22.5], [0, 0, 1]], dtype=torch.float64)
    q = torch.tensor([0.8, 0.2, -0.3, 0.4], dtype=torch.float64)
    pose = torch.cat([torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64), q / q.norm()])
    origins, dirs = camera_rays(k, 64, 48, pose)
    assert dirs.shape == (48, 64, 3) and torch.allclose(origins, pose[:3].expand(48, 64, 3))
    rot = torch.tensor(_quat_matrix(q.numpy()))
    cam = dirs @ rot  # R^T d: the camera-frame direction
    pix = cam @ k.T
    pix = pix[..., :2] / pix[..., 2:]
    v, u = torch.meshgrid(torch.arange(48.0), torch.arange(64.0), indexing="ij")
    torch.testing.assert_close(pix, torch.stack([u, v], -1).double())
    torch.testing.assert_close(dirs.norm(dim=-1), torch.ones(48, 64, dtype=torch.float64))
    # batches of poses, fx fy cx cy form
    batch = camera_rays(torch.tensor([60.0, 55.0, 31.0, 22.5]), 64, 48, pose.float().expand(3, 7))[1]
    assert batch.shape == (3, 48, 64, 3)
    torch.testing.assert_close(batch[2], dirs.float())


def test_render_depth_of_a_floor_and_its_pose_gradient(device):
    """A camera looking straight down at a floor sees one z-depth everywhere (its height above it); tilted,
    the depth is smooth in the pose: gradcheck through the rays."""
    world = MeshWorld.from_envs([[Cuboid([100, 100, 0.1])], [Cuboid([100, 100, 0.1])]],
                                poses=[[[0, 0, -0.05, 1, 0, 0, 0]], [[0, 0, -1.05, 1, 0, 0, 0]]], device=device)  # fmt: skip
    k = torch.tensor([30.0, 30.0, 15.5, 11.5], dtype=torch.float64)
    down = torch.tensor(
        [[0.0, 0, 2.0, 0, 1, 0, 0], [0.5, 0.5, 2.0, 0, 1, 0, 0]], dtype=torch.float64, device=device
    )
    depth = render_depth(world, k, 32, 24, down, env_index=torch.tensor([0, 1], device=device))
    assert depth.shape == (2, 24, 32)
    torch.testing.assert_close(depth[0], torch.full((24, 32), 2.0, dtype=torch.float64, device=device))
    torch.testing.assert_close(depth[1], torch.full((24, 32), 3.0, dtype=torch.float64, device=device))
    up = render_depth(
        world, k, 32, 24, torch.tensor([0.0, 0, 2.0, 1, 0, 0, 0], dtype=torch.float64, device=device)
    )
    assert up.shape == (24, 32) and (up == 0).all()  # looking up: every pixel misses
    tilted = torch.tensor([[0.1, -0.2, 1.5, 0.1, 0.95, 0.2, 0.05]], dtype=torch.float64, device=device)
    assert torch.autograd.gradcheck(
        lambda p: render_depth(world, k, 6, 5, p), (tilted.clone().requires_grad_(True),), eps=1e-6, atol=1e-5
    )
    pose = down[:1].clone().requires_grad_(True)
    (g,) = torch.autograd.grad(render_depth(world, k, 8, 6, pose).sum(), pose)
    assert g[0, 2].item() == pytest.approx(48.0)  # every pixel's depth grows with the height: d/dz = 1 each


def test_lidar_inside_a_sphere_and_a_height_scan():
    world = MeshWorld([Sphere(5.0), Cuboid([40, 40, 1])], poses=[_POSE_A, [0, 0, -10.5, 1, 0, 0, 0]])
    origins, dirs = lidar_rays(8, 90, vertical_fov=(-30.0, 30.0))
    assert dirs.shape == (8, 90, 3)
    torch.testing.assert_close(dirs.norm(dim=-1), torch.ones(8, 90))
    elevation = torch.rad2deg(torch.asin(dirs[:, 0, 2].double()))
    torch.testing.assert_close(elevation, torch.linspace(-30, 30, 8, dtype=torch.float64), atol=1e-4, rtol=0)
    azimuth = torch.rad2deg(torch.atan2(dirs[0, :, 1], dirs[0, :, 0]).double())
    torch.testing.assert_close(azimuth, -180 + 4.0 * torch.arange(90, dtype=torch.float64), atol=1e-4, rtol=0)
    hits = raycast(world, origins, dirs)  # from inside the ball: its exit, 5 m every way
    torch.testing.assert_close(hits.distance, torch.full((8, 90), 5.0))
    world.set_enabled([False, True])
    pose = torch.tensor([[1.0, 2.0, -4.0, 1, 0, 0, 0], [0.0, 0.0, -6.0, 1, 0, 0, 0]])
    g_o, g_d = grid_rays((1.6, 1.0), 0.1, pose=pose)
    assert g_o.shape == (2, 11, 17, 3)
    torch.testing.assert_close(g_o[0, 0, 0], torch.tensor([0.2, 1.5, -4.0]))
    scan = raycast(world, g_o, g_d)
    torch.testing.assert_close(scan.distance[0], torch.full((11, 17), 6.0))
    torch.testing.assert_close(scan.distance[1], torch.full((11, 17), 4.0))
    yaw = torch.tensor([0.0, 0, 0, math.cos(0.3), 0, 0, math.sin(0.3)])
    o2, d2 = lidar_rays(1, 4, horizontal_fov=(0.0, 360.0), pose=yaw)
    assert o2.shape == (1, 4, 3)
    torch.testing.assert_close(d2[0, 0], torch.tensor([math.cos(0.6), math.sin(0.6), 0.0]))


def test_docstring_examples_run():
    import doctest

    globs = {"torch": torch, "trimesh": trimesh, "np": np, "warpgeo": warpgeo, "MeshWorld": MeshWorld}
    globs.update({name: getattr(raycast_module, name) for name in raycast_module.__all__})
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(raycast_module, "warpgeo.raycasting", globs=globs) if t.examples]
    for test in tests:
        runner.run(test, clear_globs=True)
    results = runner.summarize(verbose=False)
    assert results.failed == 0 and results.attempted >= 8


def test_public_names_and_the_example(tmp_path):
    """``warpgeo.raycast`` is the function whatever was imported first; the example writes its picture."""
    import subprocess
    import sys
    from pathlib import Path

    assert warpgeo.raycast is raycast and warpgeo.RayHits is raycast_module.RayHits
    script = Path(__file__).resolve().parents[1] / "examples" / "depth_camera.py"
    png = tmp_path / "depth.png"
    done = subprocess.run(
        [sys.executable, str(script), "--quick", "--device", "cpu", "--out", str(png)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert png.stat().st_size > 10_000 and done.stdout.count("lidar returns") == 3


def test_gpu_row_layout_on_cpu_tensors(monkeypatch):
    """CUDA's launch layout (one ray per thread, one launch) on CPU tensors gives the CPU layout's answers
    (several rays per thread, split among threads)."""
    from warpgeo import _warp

    world = MeshWorld([trimesh.creation.icosphere(subdivisions=2), Capsule(0.2, 0.5)],
                      poses=[_POSE_A, _POSE_C])  # fmt: skip
    rng = np.random.default_rng(8)
    origins, dirs = _rays_towards(np.array([_POSE_A[:3], _POSE_C[:3]]), rng, 3000)
    o, d = torch.tensor(origins).reshape(30, 100, 3), torch.tensor(dirs).reshape(30, 100, 3)
    cpu = raycast(world, o, d)
    monkeypatch.setattr(_warp, "cuda_algorithms", lambda device: True)
    cuda = raycast(world, o, d)
    for a, b in zip(cpu, cuda, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


_THREADS = """
import threading, torch, trimesh, warpgeo
world = warpgeo.MeshWorld([trimesh.creation.icosphere(subdivisions=2), warpgeo.Cylinder(0.2, 0.6)],
                          poses=[[0, 0, 0, 1, 0, 0, 0], [1, 0, 0, 1, 0, 0, 0]])
o = torch.tensor([-3.0, 0.0, 0.0]) + 0.3 * torch.randn(4, 200, 3, generator=torch.Generator().manual_seed(0))
d = torch.tensor([1.0, 0.0, 0.0]).expand(4, 200, 3)
out, errors = [None] * 6, []
def call(i):
    try:
        out[i] = warpgeo.raycast(world, o, d).distance
    except Exception as error:
        errors.append(repr(error))
threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
[t.start() for t in threads]
[t.join() for t in threads]
assert not errors, errors
assert all(torch.equal(x, out[0]) for x in out) and torch.isfinite(out[0]).any()
print("ok")
"""


def test_first_calls_from_several_threads_at_once():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_one_launch_per_call(monkeypatch):
    """Every entry kind of every environment in one kernel launch (few rays: no CPU split)."""
    from warpgeo import _launch

    world = MeshWorld.from_envs(
        [
            [trimesh.creation.icosphere(subdivisions=1), Sphere(0.3), Cuboid([2.5, 2.5, 2.5])],
            [Capsule(0.1, 0.2)],
        ]
    )
    o = torch.tensor([[[-3.0, 0, 0]], [[-3.0, 0, 0]]])
    d = torch.tensor([[[1.0, 0, 0]], [[1.0, 0, 0]]])
    raycast(world, o, d)  # compiled and loaded
    launches = []
    real_run = _launch.run

    def counted(kernel, *args, **kwargs):
        launches.append(kernel.key)
        return real_run(kernel, *args, **kwargs)

    monkeypatch.setattr(_launch, "run", counted)
    hits = raycast(world, o, d, env_index=torch.tensor([0, 1]))
    assert len(launches) == 1 and "raycast" in launches[0]
    assert hits.entry.flatten().tolist() == [2, 0]  # the cube (x = -1.25) before the unit icosphere


def test_render_depth_compiles_fullgraph():
    world = MeshWorld(
        [Cuboid([10, 10, 0.1]), Sphere(0.3)], poses=[[0, 0, -0.05, 1, 0, 0, 0], [0.2, 0, 0.3, 1, 0, 0, 0]]
    )
    k = torch.tensor([20.0, 20.0, 7.5, 5.5])
    pose = torch.tensor([[0.0, 0, 2.0, 0.05, 1, 0, 0]], requires_grad=True)

    def f(p):
        return render_depth(world, k, 16, 12, p).square().sum()

    out = torch.compile(f, backend="aot_eager", fullgraph=True)(pose)
    (g,) = torch.autograd.grad(out, pose)
    ref = f(pose)
    (g_ref,) = torch.autograd.grad(ref, pose)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g, g_ref)


def _ball_grid(radius: float, centre, voxel: float, half: float) -> warpgeo.DistanceGrid:
    """A DistanceGrid of a ball's exact signed distance sampled at the voxel centres of [-half, half]^3."""
    n = round(2 * half / voxel) + 1
    axis = torch.linspace(-half, half, n, dtype=torch.float64)
    x, y, z = torch.meshgrid(axis, axis, axis, indexing="ij")
    c = torch.tensor(centre, dtype=torch.float64)
    values = torch.sqrt((x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2) - radius
    return warpgeo.DistanceGrid(values, voxel, origin=(-half, -half, -half))


def _ray_ball(origins: np.ndarray, directions: np.ndarray, centre: np.ndarray, radius: float):
    """Analytic first hits of rays (unit directions) with a ball (float64): the entry, or the exit from inside."""
    oc = origins - centre
    b = np.einsum("ij,ij->i", oc, directions)
    c = np.einsum("ij,ij->i", oc, oc) - radius**2
    disc = b * b - c
    root = np.sqrt(np.where(disc >= 0, disc, np.nan))
    near, far = -b - root, -b + root
    t = np.where(near >= 0, near, np.where(far >= 0, far, np.inf))
    return np.where(disc >= 0, t, np.inf)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_distance_grid_entries_by_sphere_tracing(device, dtype):
    """A DistanceGrid entry (a ball's distance field, posed) is hit where the analytic ball is, to the
    trilinear interpolation's error (~h^2 / R); from inside, the exit; outside the ball but inside the grid's
    box, a miss; a cuboid in front of it wins; its normals are radial."""
    radius, voxel = 0.3, 0.02
    centre_local = np.array([0.1, -0.05, 0.02])
    grid = _ball_grid(radius, centre_local, voxel, 0.5)
    angle = 0.7
    pose = [0.2, 0.1, -0.3, math.cos(angle / 2), 0.0, math.sin(angle / 2), 0.0]
    world = MeshWorld([grid], poses=[pose], device=device)
    rot = trimesh.transformations.quaternion_matrix(pose[3:])[:3, :3]
    centre = rot @ centre_local + np.array(pose[:3])
    gen = np.random.default_rng(4)
    # from outside towards points near the ball's centre, from inside it, and past it (misses in the box)
    far = centre + gen.normal(size=(64, 3)) / 0.6
    aims = centre + 0.5 * radius * gen.uniform(-1, 1, size=(64, 3))
    inside = centre + 0.3 * radius * gen.uniform(-1, 1, size=(32, 3))
    origins = np.concatenate([far, inside, centre + np.array([[0.45, 0.0, 0.0]])])
    directions = np.concatenate([aims - far, gen.normal(size=(32, 3)), np.array([[0.0, 0.0, 1.0]])])
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    expected = _ray_ball(origins, directions, centre, radius)
    hits = raycast(
        world,
        torch.tensor(origins, dtype=dtype, device=device),
        torch.tensor(directions, dtype=dtype, device=device),
    )
    got = hits.distance.cpu().double().numpy()
    assert np.isinf(expected[-1]) and np.isinf(got[-1]) and int(hits.entry[-1]) == -1  # passes the ball
    finite = np.isfinite(expected)
    assert finite[:-1].all()
    np.testing.assert_allclose(got[finite], expected[finite], atol=2e-3)  # 0.1 voxel
    assert (hits.entry[:-1] == 0).all()
    points = origins[finite] + got[finite, None] * directions[finite]
    radial = (points - centre) / np.linalg.norm(points - centre, axis=1, keepdims=True)
    normal = hits.normal.cpu().double().numpy()[finite]
    facing = np.where(np.einsum("ij,ij->i", radial, directions[finite]) > 0, -1.0, 1.0)[:, None]
    np.testing.assert_allclose(normal, facing * radial, atol=0.05)
    # a cuboid in front of the ball takes the rays first
    mixed = MeshWorld(
        [grid, Cuboid((0.05, 2.0, 2.0))],
        poses=[pose, [float(centre[0]) - 0.6, 0, 0, 1, 0, 0, 0]],
        device=device,
    )
    o = torch.tensor(
        [[float(centre[0]) - 1.5, float(centre[1]), float(centre[2])]], dtype=dtype, device=device
    )
    d = torch.tensor([[1.0, 0.0, 0.0]], dtype=dtype, device=device)
    first = raycast(mixed, o, d)
    assert int(first.entry[0]) == 1 and abs(float(first.distance[0]) - (0.9 - 0.025)) < 1e-5
    mixed.set_enabled([True, False])
    second = raycast(mixed, o, d)
    assert int(second.entry[0]) == 0 and abs(float(second.distance[0]) - (1.5 - radius)) < 2e-3
