"""sphere_collision and closest_point (``warpgeo.queries``) and the swept cost's speed metric.

References: the closed forms of the primitives and trimesh's brute-force closest points (rtree) on the
posed meshes, written here in float64 NumPy; ``sphere_collision`` also against ``sphere_mesh_cost`` with
``activation_distance=0`` (the same ``d``: the two must agree bit for bit, near-surface spheres included);
the speed metric against its formula computed here in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import trimesh
from trimesh.transformations import quaternion_matrix

import warpgeo
from warpgeo import queries as queries_module
from warpgeo import sdf as sdf_module
from warpgeo import sphere_collision, sphere_mesh_cost, swept_sphere_mesh_cost

# ------------------------------------------------------------------------------------------------------
# the scene: two environments of meshes and primitives, posed, one entry disabled
# ------------------------------------------------------------------------------------------------------


def _pose(rng, spread=1.2):
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    return [*(rng.uniform(-spread, spread, 3)), *q]


def _entries():
    """Per environment: (kind, object). Sizes and poses are stored in float32: references agree to ~1e-7."""
    annulus = trimesh.creation.annulus(r_min=0.2, r_max=0.5, height=0.3)  # non-convex, closed
    env0 = [
        ("mesh", trimesh.creation.icosphere(subdivisions=2, radius=0.4)),
        ("box", warpgeo.Cuboid((0.6, 0.4, 0.3))),
        ("mesh", annulus),
        ("capsule", warpgeo.Capsule(0.15, 0.7)),
    ]
    env1 = [
        ("cylinder", warpgeo.Cylinder(0.25, 0.5)),
        ("mesh", trimesh.creation.box((0.5, 0.3, 0.7))),
        ("sphere", warpgeo.Sphere(0.3)),
    ]
    return [env0, env1]


def _scene(device, dtype=torch.float64, seed=0, disable=((0, 3),)):
    rng = np.random.default_rng(seed)
    envs = _entries()
    poses = [[_pose(rng) for _ in env] for env in envs]
    world = warpgeo.MeshWorld.from_envs([[obj for _, obj in env] for env in envs], poses=poses, device=device)
    mask = torch.ones(2, 4, dtype=torch.bool)
    for e, m in disable:
        mask[e, m] = False
    world.set_enabled(mask)
    return world, envs, poses, mask


def _local(points, pose):
    """World points (P, 3) into the entry's frame (pose = world-from-entry)."""
    mat = quaternion_matrix(pose[3:])[:3, :3]
    return (points - np.asarray(pose[:3])) @ mat


def _to_world_dir(v, pose):
    return v @ quaternion_matrix(pose[3:])[:3, :3].T


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _primitive_reference(kind, obj, p):
    """(closest point, signed distance, outward normal) of points ``p`` (P, 3) in the primitive's frame."""
    if kind == "sphere":
        r = obj.radius
        n = _unit(p)
        d = np.linalg.norm(p, axis=-1) - r
        return n * r, d, n
    if kind == "capsule":
        r, a = obj.radius, obj.length / 2
        seg = np.stack([0 * p[:, 0], 0 * p[:, 0], np.clip(p[:, 2], -a, a)], -1)
        n = _unit(p - seg)
        return seg + r * n, np.linalg.norm(p - seg, axis=-1) - r, n
    if kind == "box":
        h = np.asarray(obj.dims, dtype=np.float64) / 2
        q = np.clip(p, -h, h)
        out = np.linalg.norm(p - q, axis=-1)
        gap = h - np.abs(p)  # inside: distance to each pair of sides
        k = gap.argmin(-1)
        rows = np.arange(len(p))
        s = np.sign(p[rows, k])
        q_in = p.copy()
        q_in[rows, k] = s * h[k]
        n_in = np.zeros_like(p)
        n_in[rows, k] = s
        inside = out == 0
        n_out = _unit(np.where(inside[:, None], 1.0, p - q))
        return (
            np.where(inside[:, None], q_in, q),
            np.where(inside, -gap.min(-1), out),
            np.where(inside[:, None], n_in, n_out),
        )
    assert kind == "cylinder"
    r, h = obj.radius, obj.height / 2
    rho = np.linalg.norm(p[:, :2], axis=-1)
    radial = np.concatenate([p[:, :2] / rho[:, None], 0 * p[:, :1]], -1)
    axial = np.stack([0 * p[:, 0], 0 * p[:, 0], np.sign(p[:, 2])], -1)
    qx, qz = rho - r, np.abs(p[:, 2]) - h
    outside = (qx > 0) | (qz > 0)
    q_out = np.concatenate([radial[:, :2] * np.minimum(rho, r)[:, None], np.clip(p[:, 2:], -h, h)], -1)
    side = qx > qz  # inside, nearer the side
    q_side = np.concatenate([radial[:, :2] * r, p[:, 2:]], -1)
    q_cap = np.concatenate([p[:, :2], axial[:, 2:] * h], -1)
    q = np.where(outside[:, None], q_out, np.where(side[:, None], q_side, q_cap))
    d = np.where(outside, np.linalg.norm(p - q_out, axis=-1), np.maximum(qx, qz))
    n = np.where(outside[:, None], _unit(np.where(outside[:, None], p - q_out, 1.0)), 0.0)
    n = np.where(outside[:, None], n, np.where(side[:, None], radial, axial))
    return q, d, n


def _mesh_reference(mesh, pose, points):
    """(closest point, signed distance, outward normal) in the world frame, by trimesh (brute force)."""
    posed = mesh.copy()
    mat = quaternion_matrix(pose[3:])
    mat[:3, 3] = pose[:3]
    posed.apply_transform(mat)
    q, dist, _ = trimesh.proximity.closest_point(posed, points)
    inside = posed.contains(points)
    d = np.where(inside, -dist, dist)
    n = (points - q) / d[:, None]
    return q, d, n


def _reference(envs, poses, mask, points, env_of_point):
    """Per point: (entry, point, signed distance, normal, second smallest |d|) over the enabled entries."""
    count = len(points)
    best = np.full(count, np.inf)
    second = np.full(count, np.inf)
    out = [np.full(count, -1), np.zeros((count, 3)), np.full(count, np.inf), np.zeros((count, 3))]
    for e, env in enumerate(envs):
        rows = np.nonzero(env_of_point == e)[0]
        for m, (kind, obj) in enumerate(env):
            if not mask[e, m] or len(rows) == 0:
                continue
            p = points[rows]
            if kind == "mesh":
                q, d, n = _mesh_reference(obj, poses[e][m], p)
            else:
                ql, d, nl = _primitive_reference(kind, obj, _local(p, poses[e][m]))
                q = _to_world_dir(ql, poses[e][m]) + np.asarray(poses[e][m][:3])
                n = _to_world_dir(nl, poses[e][m])
            a = np.abs(d)
            better = a < best[rows]
            second[rows] = np.where(better, best[rows], np.minimum(second[rows], a))
            best[rows] = np.where(better, a, best[rows])
            for k, v in enumerate((m, q, d, n)):
                cur = out[k][rows]
                out[k][rows] = np.where(better[:, None] if cur.ndim == 2 else better, v, cur)
    return (*out, second)


def _points(n, seed, device, dtype):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(2, n, 3, generator=gen, dtype=torch.float64) * 4.0 - 2.0).to(device, dtype)


# ------------------------------------------------------------------------------------------------------
# closest_point
# ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_closest_point_matches_brute_force(dtype, device):
    world, envs, poses, mask = _scene(device, dtype)
    points = _points(300, 1, device, dtype)
    env_index = torch.tensor([1, 0], device=device)
    got = warpgeo.closest_point(points, world, env_index=env_index)
    assert (
        got.point.shape == (2, 300, 3) and got.distance.shape == (2, 300) and got.entry.dtype == torch.int64
    )
    assert got.point.dtype == dtype and got.normal.dtype == dtype
    flat = points.reshape(-1, 3).double().cpu().numpy()
    env_of_point = np.repeat(env_index.cpu().numpy(), 300)
    entry, q, d, n, second = _reference(envs, poses, mask.numpy(), flat, env_of_point)
    clear = second - np.abs(d) > 1e-3  # no near tie between two entries
    assert clear.mean() > 0.9
    tol = 2e-5 if dtype == torch.float64 else 2e-4
    g_entry = got.entry.reshape(-1).cpu().numpy()
    g_d = got.distance.reshape(-1).double().cpu().numpy()
    g_q = got.point.reshape(-1, 3).double().cpu().numpy()
    g_n = got.normal.reshape(-1, 3).double().cpu().numpy()
    np.testing.assert_array_equal(g_entry[clear], entry[clear])
    np.testing.assert_allclose(g_d, d, atol=tol)
    # the foot lies |d| from p along the normal; the normal is a unit vector
    np.testing.assert_allclose(np.linalg.norm(flat - g_q, axis=-1), np.abs(d), atol=tol)
    np.testing.assert_allclose(np.linalg.norm(g_n, axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(g_q + g_d[:, None] * g_n, flat, atol=tol)
    # the closest point itself where it is unique (away from the medial set of an entry: |d| > 0.01 and a
    # clear second entry), and the normal there
    away = clear & (np.abs(d) > 1e-2)
    assert away.mean() > 0.8
    close = np.linalg.norm(g_q - q, axis=-1) < 1e-3
    assert close[away].mean() > 0.97, close[away].mean()  # a mesh point near its medial set may differ
    np.testing.assert_allclose(g_n[away & close], n[away & close], atol=1e-3)


def test_closest_point_of_each_primitive_is_exact():
    for kind, obj in [
        ("box", warpgeo.Cuboid((0.6, 0.4, 0.3))),
        ("sphere", warpgeo.Sphere(0.3)),
        ("capsule", warpgeo.Capsule(0.15, 0.7)),
        ("cylinder", warpgeo.Cylinder(0.25, 0.5)),
    ]:
        rng = np.random.default_rng(3)
        pose = _pose(rng, 0.3)
        world = warpgeo.MeshWorld([obj], poses=[pose])
        p = torch.rand(400, 3, dtype=torch.float64) * 1.6 - 0.8
        p[:200] = p[:200] * 0.3  # many inside
        got = warpgeo.closest_point(p, world)
        ql, d, nl = _primitive_reference(kind, obj, _local(p.numpy(), pose))
        q = _to_world_dir(ql, pose) + np.asarray(pose[:3])
        np.testing.assert_allclose(got.distance.numpy(), d, atol=1e-6, err_msg=kind)
        np.testing.assert_allclose(got.point.numpy(), q, atol=1e-6, err_msg=kind)
        np.testing.assert_allclose(got.normal.numpy(), _to_world_dir(nl, pose), atol=1e-6, err_msg=kind)
        assert (got.entry == 0).all()


def test_closest_point_of_far_points_is_where_it_lies():
    """``p - d * n`` loses every digit of the foot for a point far away: the foot is computed on the entry
    (closed forms, the closest face, the nearest vertex beyond the far path's reach)."""
    mesh = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
    world = warpgeo.MeshWorld(
        [
            warpgeo.Cuboid((1.0, 1.0, 1.0)),
            warpgeo.Sphere(0.5),
            warpgeo.Capsule(0.2, 1.0),
            warpgeo.Cylinder(0.3, 0.4),
            mesh,
        ]
    )
    p = torch.tensor(
        [[1e300, 0.1, 0.2], [0.0, 1e200, 0.0], [1e30, 3e30, 0.7], [1e25, 1e25, 1e25]], dtype=torch.float64
    )
    want = [
        [0.5, 0.1, 0.2],
        [0.0, 0.5, 0.0],
        [0.0632455532, 0.1897366596, 0.5],
        [0.2121320344, 0.2121320344, 0.2],
    ]
    for m, (x, q) in enumerate(zip(p, want, strict=True)):
        mask = torch.zeros(5, dtype=torch.bool)
        mask[m] = True
        world.set_enabled(mask)
        got = warpgeo.closest_point(x[None], world)
        assert got.entry.item() == m
        torch.testing.assert_close(got.point[0], torch.tensor(q, dtype=torch.float64), atol=1e-7, rtol=0)
    mask = torch.zeros(5, dtype=torch.bool)
    mask[4] = True
    world.set_enabled(mask)
    far = torch.tensor([[40.0, 7.0, -3.0], [3e4, 1e4, 2e4], [1e12, -3e11, 5e11]], dtype=torch.float64)
    got = warpgeo.closest_point(far, world)
    q, _, _ = trimesh.proximity.closest_point(mesh, far.numpy()[:1])
    np.testing.assert_allclose(got.point[0].numpy(), q[0], atol=1e-6)  # the closest face's point
    vertex = mesh.vertices[np.linalg.norm(mesh.vertices[None] - far.numpy()[1:, None], axis=-1).argmin(-1)]
    np.testing.assert_allclose(got.point[1:].numpy(), vertex, atol=1e-6)  # beyond the far path's reach


def test_closest_point_with_no_entry():
    world, *_ = _scene("cpu", disable=[(1, 0), (1, 1), (1, 2)])
    p = torch.rand(2, 5, 3, dtype=torch.float64, requires_grad=True)
    got = warpgeo.closest_point(p, world, env_index=torch.tensor([0, 1]))
    assert (got.entry[0] >= 0).all() and (got.entry[1] == -1).all()
    assert torch.isinf(got.distance[1]).all() and (got.distance[1] > 0).all()
    assert (got.point[1] == 0).all() and (got.normal[1] == 0).all()
    got.point.sum().backward()
    assert (p.grad[1] == 0).all() and p.grad[0].abs().sum() > 0


def test_closest_point_shapes_and_half(device):
    world = warpgeo.MeshWorld([warpgeo.Sphere(1.0)], device=device)
    got = warpgeo.closest_point(torch.tensor([3.0, 0.0, 0.0], device=device), world)
    assert got.point.shape == (3,) and got.distance.shape == () and got.entry.shape == ()
    torch.testing.assert_close(got.point, torch.tensor([1.0, 0, 0], device=device))
    assert got.distance.item() == 2.0 and got.entry.item() == 0
    half = warpgeo.closest_point(torch.zeros(4, 2, 3, dtype=torch.float16, device=device) + 0.5, world)
    assert half.point.dtype == torch.float16 and half.distance.shape == (4, 2)
    assert warpgeo.closest_point(torch.zeros(0, 3, device=device), world).point.shape == (0, 3)


def test_closest_point_gradient():
    world, *_ = _scene("cpu")
    gen = torch.Generator().manual_seed(5)
    p = (torch.rand(2, 6, 3, generator=gen, dtype=torch.float64) * 3 - 1.5).requires_grad_(True)
    env = torch.tensor([0, 1])

    def f(x):
        return warpgeo.closest_point(x, world, env_index=env).distance

    torch.autograd.gradcheck(f, (p,), eps=1e-7, atol=1e-5)
    # point's gradient is the tangent plane's projection: exact on a flat face (a cuboid's, away from its
    # edges); on a curved surface it omits the curvature (a sphere of radius R: R / (R + d) times it)
    box = warpgeo.MeshWorld([warpgeo.Cuboid((1.0, 1.0, 1.0))], poses=[[0.1, 0.2, 0.3, 0.8, 0.6, 0.0, 0.0]])
    x = torch.tensor([[0.15, 0.25, 1.0], [0.0, 0.1, 0.35]], dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda y: warpgeo.closest_point(y, box).point, (x,), eps=1e-7, atol=1e-7)
    ball = warpgeo.MeshWorld([warpgeo.Sphere(0.5)])
    y = torch.tensor([[1.5, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(warpgeo.closest_point(y, ball).point[0, 1], y)
    torch.testing.assert_close(g, torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64))  # true: 0.5 / 1.5
    # distance's gradient is signed_distance's where the nearest surface is outside every entry
    got = warpgeo.closest_point(p, world, env_index=env)
    (g,) = torch.autograd.grad(got.distance.sum(), p)
    torch.testing.assert_close(g, got.normal)


def test_closest_point_ops_compile_and_opcheck():
    world, *_ = _scene("cpu")
    args = world.kernel_args(torch.float64)._asdict()
    p = (torch.rand(2, 5, 3, dtype=torch.float64) * 2 - 1).requires_grad_(True)
    spheres = torch.cat([p.detach(), torch.rand(2, 5, 1, dtype=torch.float64) * 0.3], -1)
    env = torch.tensor([1, 0])
    torch.library.opcheck(queries_module._closest.custom, (p, env), args)
    torch.library.opcheck(queries_module._collision.custom, (spheres, env), args)

    def both(x, s):
        c = warpgeo.closest_point(x, world, env_index=env)
        hit = sphere_collision(s, world, env_index=env)
        return c.distance.sum() + c.point.square().sum() + hit.sum()

    explanation = torch._dynamo.explain(both)(p, spheres)
    assert explanation.graph_break_count == 0
    out = torch.compile(both, backend="aot_eager", fullgraph=True)(p, spheres)
    (g,) = torch.autograd.grad(out, p)
    ref = both(p, spheres)
    (g_ref,) = torch.autograd.grad(ref, p)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g, g_ref)


# ------------------------------------------------------------------------------------------------------
# sphere_collision
# ------------------------------------------------------------------------------------------------------


def _near_surface_spheres(world, n, seed, device, dtype, env):
    """Centres anywhere; radii at, just above and just below the centre's distance (and some disabled)."""
    points = _points(n, seed, device, dtype)
    d = warpgeo.signed_distance(points, world, env_index=env).clamp(min=0.0)
    gen = torch.Generator().manual_seed(seed + 1)
    pick = torch.randint(0, 6, d.shape, generator=gen).to(device)
    eps = torch.finfo(dtype).eps
    radius = torch.stack(
        [d, d * (1 + 4 * eps), d * (1 - 4 * eps), d + 1e-3, (d - 1e-3).abs(), torch.full_like(d, -0.1)], -1
    )
    r = radius.gather(-1, pick[..., None])[..., 0]
    r = torch.where(pick == 0, d.nextafter(torch.full_like(d, 1.0)), r)  # one ulp above d: collides
    spheres = torch.cat([points, r[..., None]], -1)
    spheres[:, : n // 4, 3] = torch.rand(2, n // 4, generator=gen).to(device, dtype) * 0.5  # plain random
    return spheres


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sphere_collision_is_where_the_cost_is_positive(dtype, device):
    world, *_ = _scene(device, dtype)
    for seed, env in ((2, torch.tensor([0, 1], device=device)), (3, torch.tensor([1, 1], device=device))):
        spheres = _near_surface_spheres(world, 400, seed, device, dtype, env)
        got = sphere_collision(spheres, world, env_index=env)
        cost = sphere_mesh_cost(spheres, world, env_index=env)
        assert got.dtype == torch.bool and got.shape == (2, 400)
        assert torch.equal(got, cost > 0)
        assert 0.2 < got.float().mean() < 0.8
        assert not got[spheres[..., 3] < 0].any()


def test_sphere_collision_matches_the_reference():
    world, envs, poses, mask = _scene("cpu")
    spheres = _points(300, 7, "cpu", torch.float64)
    spheres = torch.cat([spheres, torch.rand(2, 300, 1, dtype=torch.float64) * 0.8], -1)
    spheres[0, :20, 3] = -1.0
    env = torch.tensor([1, 0])
    got = sphere_collision(spheres, world, env_index=env).reshape(-1).numpy()
    flat = spheres.reshape(-1, 4).numpy()
    # the union's signed distance is the smallest signed distance: min over entries
    d = np.full(len(flat), np.inf)
    env_of_point = np.repeat(env.numpy(), 300)
    for e, env_entries in enumerate(envs):
        rows = np.nonzero(env_of_point == e)[0]
        for m in range(len(env_entries)):
            if mask[e, m]:
                (dm,) = _single(env_entries[m], poses[e][m], flat[rows, :3])
                d[rows] = np.minimum(d[rows], dm)
    r = flat[:, 3]
    want = (r >= 0) & (r - d > 0)
    clear = np.abs(r - d) > 1e-4
    np.testing.assert_array_equal(got[clear], want[clear])
    assert want.mean() > 0.1


def _single(entry, pose, points):
    kind, obj = entry
    if kind == "mesh":
        _, d, _ = _mesh_reference(obj, pose, points)
        return (d,)
    _, d, _ = _primitive_reference(kind, obj, _local(points, pose))
    return (d,)


def test_sphere_collision_stops_at_the_first_entry():
    """Deep inside the first of two overlapping entries: True, whatever the second (here a mesh that the
    search never reaches: its face checks would see the same)."""
    world = warpgeo.MeshWorld([warpgeo.Cuboid((2.0, 2.0, 2.0)), trimesh.creation.icosphere(radius=0.5)])
    spheres = torch.tensor([[0.0, 0.0, 0.0, 0.01], [0.9, 0.9, 0.9, 0.01], [3.0, 0.0, 0.0, 0.5]])
    assert sphere_collision(spheres, world).tolist() == [True, True, False]
    world.set_enabled([False, True])
    assert sphere_collision(spheres, world).tolist() == [True, False, False]


def test_sphere_collision_shapes(device):
    world = warpgeo.MeshWorld([warpgeo.Cuboid((1.0, 1.0, 1.0))], device=device)
    assert sphere_collision(torch.tensor([0.55, 0.0, 0.0, 0.1], device=device), world).item() is True
    assert sphere_collision(torch.zeros(2, 0, 3, 4, device=device), world).shape == (2, 0, 3)
    s = torch.tensor([[0.5, 0.0, 0.0, 0.0], [0.6, 0.0, 0.0, 0.1]], dtype=torch.bfloat16, device=device)
    assert sphere_collision(s, world).tolist() == [False, False]  # touching is not penetrating


def test_sphere_collision_errors():
    world = warpgeo.MeshWorld([warpgeo.Cuboid((1.0, 1.0, 1.0))])
    with pytest.raises(ValueError, match="spheres"):
        sphere_collision(torch.zeros(3, 3), world)
    with pytest.raises(TypeError, match="spheres"):
        sphere_collision(torch.zeros(3, 4, dtype=torch.int32), world)
    with pytest.raises(ValueError, match="finite"):
        sphere_collision(torch.tensor([[float("nan"), 0, 0, 0.1]]), world)
    with pytest.raises(IndexError, match="env_index"):
        sphere_collision(torch.zeros(2, 3, 4), world, env_index=torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="world"):
        sphere_collision(torch.zeros(2, 3, 4), None)
    args = world.kernel_args(torch.float32)
    with pytest.raises(ValueError, match="spheres"):
        torch.ops.warpgeo.sphere_collision(torch.zeros(1, 2, 3), None, args.world, args.all_cuboids)
    with pytest.raises(ValueError, match="points"):
        torch.ops.warpgeo.closest_point(torch.zeros(1, 2, 4), None, args.world, args.all_cuboids)
    with pytest.raises(ValueError, match="points"):
        warpgeo.closest_point(torch.zeros(2, 4), world)


# ------------------------------------------------------------------------------------------------------
# the speed metric of the swept cost
# ------------------------------------------------------------------------------------------------------


def _trajectories(dtype=torch.float64, seed=0, h=6):
    gen = torch.Generator().manual_seed(seed)
    start = torch.rand(2, 1, 5, 3, generator=gen, dtype=torch.float64) * 1.2 - 0.6
    steps = torch.randn(2, h, 5, 3, generator=gen, dtype=torch.float64) * 0.1
    centres = start + steps.cumsum(1)
    radii = torch.rand(2, h, 5, 1, generator=gen, dtype=torch.float64) * 0.2 + 0.05
    return torch.cat([centres, radii], -1).to(dtype)


def _speed_reference(spheres, dt):
    """The speed factor (B, H, N) of the docstring, written out step by step in float64."""
    s = spheres.detach().double().numpy()
    b, h, n, _ = s.shape
    factor = np.ones((b, h, n))
    for i in range(b):
        for t in range(1, h - 1):
            for k in range(n):
                prev_on, next_on = s[i, t - 1, k, 3] >= 0, s[i, t + 1, k, 3] >= 0
                c = s[i, :, k, :3]
                if prev_on and next_on:
                    v = (c[t + 1] - c[t - 1]) / (2 * dt)
                elif next_on:
                    v = (c[t + 1] - c[t]) / dt
                elif prev_on:
                    v = (c[t] - c[t - 1]) / dt
                else:
                    continue
                factor[i, t, k] = np.sqrt((v**2).sum())
    return factor


def _speed_world():
    return warpgeo.MeshWorld(
        [warpgeo.Cuboid((0.8, 0.5, 0.4)), trimesh.creation.icosphere(subdivisions=2, radius=0.3)],
        poses=[[0.1, 0, 0, 1, 0, 0, 0], [-0.3, 0.2, 0.1, 1, 0, 0, 0]],
    )


@pytest.mark.parametrize("dt", [1.0, 0.05])
def test_speed_metric_matches_the_formula(dt):
    world = _speed_world()
    traj = _trajectories()
    traj[0, 2, 1, 3] = -1.0  # disabled: its neighbours' factors are one-sided
    traj[1, 3, 2, 3] = -1.0
    traj[1, 5, 2, 3] = -1.0  # step 4 of sphere 2 has both neighbours disabled: unscaled
    plain = swept_sphere_mesh_cost(traj, world, activation_distance=0.05, sweep_steps=3)
    assert (plain > 0).float().mean() > 0.3
    got = swept_sphere_mesh_cost(
        traj, world, activation_distance=0.05, sweep_steps=3, speed_metric=True, dt=dt
    )
    want = plain.numpy() * _speed_reference(traj, dt)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=0)
    # the first and last steps are unscaled; a tensor dt gives the same
    assert torch.equal(got[:, 0], plain[:, 0]) and torch.equal(got[:, -1], plain[:, -1])
    as_tensor = swept_sphere_mesh_cost(
        traj,
        world,
        activation_distance=0.05,
        sweep_steps=3,
        speed_metric=True,
        dt=torch.tensor(dt, dtype=torch.float64),
    )
    torch.testing.assert_close(as_tensor, got, rtol=1e-15, atol=0)


def test_speed_metric_off_is_the_plain_cost():
    world = _speed_world()
    traj = _trajectories(torch.float32)
    plain = swept_sphere_mesh_cost(traj, world, activation_distance=0.05)
    off = swept_sphere_mesh_cost(traj, world, activation_distance=0.05, speed_metric=False, dt=0.1)
    assert torch.equal(plain, off)
    args = world.kernel_args(torch.float32)
    params = torch.tensor([0.05, 1.0])
    op, _ = sdf_module.SweptSdfMesh.apply(traj, None, args.world, args.all_cuboids, params, 4, False)
    assert torch.equal(plain, op)
    # two steps have no interior step: nothing scaled
    short = traj[:, :2].contiguous()
    assert torch.equal(
        swept_sphere_mesh_cost(short, world, speed_metric=True, dt=0.5), swept_sphere_mesh_cost(short, world)
    )


def test_speed_metric_motionless_interior_costs_zero():
    world = _speed_world()
    traj = torch.tensor([0.1, 0.0, 0.0, 0.1], dtype=torch.float64).expand(1, 4, 1, 4).contiguous()
    got = swept_sphere_mesh_cost(traj, world, speed_metric=True)
    plain = swept_sphere_mesh_cost(traj, world)
    assert (plain > 0).all()
    assert got[0, 1:3].eq(0).all() and torch.equal(got[0, [0, 3]], plain[0, [0, 3]])


def test_speed_metric_gradcheck():
    world = _speed_world()
    traj = _trajectories(seed=4, h=5)
    traj[1, 1, 3, 3] = -1.0
    traj.requires_grad_(True)
    dt = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)

    def f(x, step):
        return swept_sphere_mesh_cost(
            x, world, activation_distance=0.1, sweep_steps=2, speed_metric=True, dt=step
        )

    assert f(traj, dt).abs().sum() > 0
    torch.autograd.gradcheck(f, (traj, dt), eps=1e-7, atol=1e-5)


def test_speed_metric_compiles_fullgraph():
    world = _speed_world()
    traj = _trajectories(seed=6).requires_grad_(True)
    dt = torch.tensor(0.2, dtype=torch.float64)

    def loss(x, step):
        return swept_sphere_mesh_cost(x, world, activation_distance=0.05, speed_metric=True, dt=step).sum()

    explanation = torch._dynamo.explain(loss)(traj, dt)
    assert explanation.graph_break_count == 0
    out = torch.compile(loss, backend="aot_eager", fullgraph=True)(traj, dt)
    (g,) = torch.autograd.grad(out, traj)
    ref = loss(traj, dt)
    (g_ref,) = torch.autograd.grad(ref, traj)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(g, g_ref)
    assert g_ref.abs().sum() > 0


def test_speed_metric_errors():
    world = _speed_world()
    traj = _trajectories()
    for dt in (0.0, -1.0, float("nan"), float("inf"), 1e-320, torch.tensor(0.0), torch.tensor(-2.0)):
        with pytest.raises(ValueError, match="dt"):
            swept_sphere_mesh_cost(traj, world, speed_metric=True, dt=dt)
    for dt in ("1", True, None, torch.tensor(1)):
        with pytest.raises(TypeError, match="dt"):
            swept_sphere_mesh_cost(traj, world, speed_metric=True, dt=dt)
    with pytest.raises(ValueError, match="dt"):
        swept_sphere_mesh_cost(traj, world, speed_metric=True, dt=torch.ones(2))
    with pytest.raises(TypeError, match="speed_metric"):
        swept_sphere_mesh_cost(traj, world, speed_metric=1)
    with pytest.raises(ValueError, match="dt"):  # 0 in float32
        swept_sphere_mesh_cost(traj.float(), world, speed_metric=True, dt=1e-50)
    # a huge step over a tiny dt: the speed is capped at the precision's largest, no NaN (0 * inf)
    big = traj.float().clone()
    big[:, 2, :, :3] = 1e30
    cost = swept_sphere_mesh_cost(big, world, speed_metric=True, dt=1e-30)
    assert not cost.isnan().any()
    with warpgeo.value_checks(False):  # a tensor's value is not read: no sync
        swept_sphere_mesh_cost(traj, world, speed_metric=True, dt=torch.tensor(-1.0))


@pytest.mark.background_tables
def test_queries_before_and_after_the_background_tables(monkeypatch):
    """A CPU world's large mesh is queried before its background tables are in (``FLAG_PENDING``: rays for
    the side, no grid, so no grid shortcut) and after: the same answers, and the distances trimesh's."""
    from warpgeo._constants import FLAG_PENDING

    mesh = trimesh.creation.icosphere(subdivisions=5, radius=1.0)  # 20,480 faces: tables in the background
    world = warpgeo.MeshWorld([mesh])
    assert world._later is not None
    monkeypatch.setattr(world._later, "done", lambda: False)  # not taken in by the calls below
    rng = np.random.default_rng(8)
    points = torch.from_numpy(rng.uniform(-1.3, 1.3, (300, 3)))
    spheres = torch.cat([points, torch.from_numpy(rng.uniform(0.01, 0.3, (300, 1)))], -1)
    flags = world.kernel_args(torch.float64).world[list(warpgeo.world.WORLD_FIELDS).index("grid_flags")]
    assert (flags & FLAG_PENDING).any()
    before = warpgeo.closest_point(points, world), sphere_collision(spheres, world)
    assert world.wait_tables()
    flags = world.kernel_args(torch.float64).world[list(warpgeo.world.WORLD_FIELDS).index("grid_flags")]
    assert not (flags & FLAG_PENDING).any()
    after = warpgeo.closest_point(points, world), sphere_collision(spheres, world)
    assert torch.equal(before[1], after[1]) and torch.equal(before[0].entry, after[0].entry)
    torch.testing.assert_close(before[0].distance, after[0].distance, atol=1e-12, rtol=0)
    torch.testing.assert_close(before[0].point, after[0].point, atol=1e-9, rtol=0)
    _, dist, _ = trimesh.proximity.closest_point(mesh, points.numpy())
    sign = np.where(mesh.contains(points.numpy()), -1.0, 1.0)
    np.testing.assert_allclose(after[0].distance.numpy(), sign * dist, atol=1e-6)
    assert torch.equal(after[1], sphere_mesh_cost(spheres, world) > 0)
    assert 0.2 < after[1].float().mean() < 0.9


def test_queries_on_a_distance_grid_entry(device):
    """A DistanceGrid entry (a ball's distance field, posed): closest_point's foot, distance and unit normal
    match the analytic ball to the interpolation's error; sphere_collision agrees with the ball."""
    radius, voxel, half = 0.3, 0.02, 0.5
    centre_local = np.array([0.1, -0.05, 0.02])
    n = round(2 * half / voxel) + 1
    axis = torch.linspace(-half, half, n, dtype=torch.float64)
    x, y, z = torch.meshgrid(axis, axis, axis, indexing="ij")
    c = torch.tensor(centre_local)
    values = torch.sqrt((x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2) - radius
    grid = warpgeo.DistanceGrid(values, voxel, origin=(-half, -half, -half))
    pose = [0.2, 0.1, -0.3, np.cos(0.35), 0.0, np.sin(0.35), 0.0]
    world = warpgeo.MeshWorld([grid], poses=[pose], device=device)
    centre = quaternion_matrix(pose[3:])[:3, :3] @ centre_local + np.array(pose[:3])
    gen = np.random.default_rng(11)
    direction = gen.normal(size=(200, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    depth = gen.uniform(-0.15, 0.15, size=(200, 1))  # inside and outside the ball (not near its centre: there
    # the distance field bends within a voxel and its interpolant's gradient turns), inside the grid's box
    points = centre + (radius + depth) * direction
    got = warpgeo.closest_point(torch.tensor(points, device=device), world)
    np.testing.assert_allclose(got.distance.cpu().numpy(), depth[:, 0], atol=2e-3)
    # the foot is p - d n along the interpolant's unit gradient: first order, its error grows with |d|
    foot_error = np.linalg.norm(got.point.cpu().numpy() - (centre + radius * direction), axis=1)
    assert (foot_error <= 3e-3 + 0.1 * np.abs(depth[:, 0])).all(), foot_error.max()
    np.testing.assert_allclose(np.linalg.norm(got.normal.cpu().numpy(), axis=1), 1.0, atol=1e-9)
    np.testing.assert_allclose(got.normal.cpu().numpy(), direction, atol=0.06)
    assert (got.entry == 0).all()
    r = 0.05
    spheres = torch.tensor(np.concatenate([points, np.full((200, 1), r)], axis=1), device=device)
    collides = warpgeo.sphere_collision(spheres, world).cpu().numpy()
    clear = np.abs(depth[:, 0] - r) > 5e-3  # away from the boundary case by more than the grid's error
    np.testing.assert_array_equal(collides[clear], (depth[:, 0] < r)[clear])
