"""Analytic primitives as world entries (``warpgeo.Cuboid``, ``Sphere``, ``Capsule``, ``Cylinder``): exact
closed-form signed distances and gradients against independent NumPy float64 references, their meshed twins,
mixed worlds against single-entry worlds, the all-closed-forms kernel variant, and bad arguments."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
import torch
import trimesh

import warpgeo
from warpgeo import (
    Capsule,
    Cuboid,
    Cylinder,
    MeshWorld,
    Sphere,
    _launch,
    signed_distance,
    sphere_mesh_cost,
    swept_sphere_mesh_cost,
)

# sizes exact in float32 (primitives are stored in float32, as mesh vertices are)
SPHERE = Sphere(0.375)
CAPSULE = Capsule(0.25, 0.75)
CYLINDER = Cylinder(0.3125, 0.875)
CUBOID = Cuboid([0.5, 0.75, 0.375])
PRIMS = {"sphere": SPHERE, "capsule": CAPSULE, "cylinder": CYLINDER, "cuboid": CUBOID}

# a nontrivial rotation (unit quaternion w, x, y, z) and a translation
_Q = np.array([0.8, 0.3, -0.4, 0.3])
_Q /= np.linalg.norm(_Q)
POSE = [0.2, -0.1, 0.3, *_Q.tolist()]


def rotation(pose) -> np.ndarray:
    w, x, y, z = pose[3:]
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


# ---- independent references (float64, local frame): (distance, unit gradient, distance to a kink) --------


def _unit(v):
    with np.errstate(invalid="ignore", divide="ignore"):  # zero vectors (singular points): NaN, unused
        return v / np.linalg.norm(v, axis=-1, keepdims=True)


def sphere_ref(p, r):
    length = np.linalg.norm(p, axis=-1)
    return length - r, _unit(p), length


def capsule_ref(p, r, length):
    # the closest point of the segment by projection onto its line, clamped to its ends
    a = np.array([0.0, 0.0, -length / 2])
    b = np.array([0.0, 0.0, length / 2])
    t = np.clip(((p - a) @ (b - a)) / ((b - a) @ (b - a)), 0.0, 1.0)
    w = p - (a + t[:, None] * (b - a))
    dist = np.linalg.norm(w, axis=-1)
    return dist - r, _unit(w), dist


def cylinder_ref(p, r, height):
    # outside: from the solid's closest point (clamp radially, then axially); inside: the nearer of side / caps
    h = height / 2
    rho = np.hypot(p[:, 0], p[:, 1])
    scale = np.minimum(1.0, r / np.maximum(rho, 1e-300))
    closest = np.stack([p[:, 0] * scale, p[:, 1] * scale, np.clip(p[:, 2], -h, h)], axis=1)
    out = p - closest
    out_d = np.linalg.norm(out, axis=-1)
    side, cap = r - rho, h - np.abs(p[:, 2])
    inside = (side > 0) & (cap > 0)
    radial = np.stack([p[:, 0], p[:, 1], np.zeros(len(p))], axis=1)
    axial = np.stack([np.zeros(len(p)), np.zeros(len(p)), np.sign(p[:, 2])], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        in_grad = np.where((side < cap)[:, None], _unit(radial), axial)
        grad = np.where(inside[:, None], in_grad, out / out_d[:, None])
    d = np.where(inside, -np.minimum(side, cap), out_d)
    # kinks: the axis, the mid-plane, the cone where side == cap inside, the rim's wedge boundaries outside
    margin = np.minimum(rho, np.abs(p[:, 2]))
    margin = np.minimum(margin, np.where(inside, np.abs(side - cap), np.minimum(np.abs(side), np.abs(cap))))
    return d, grad, margin


def cuboid_ref(p, dims):
    half = np.asarray(dims) / 2
    q = np.abs(p) - half
    outside = np.linalg.norm(np.maximum(q, 0), axis=-1)
    inside = q.max(axis=-1) < 0
    k = q.argmax(axis=-1)
    face = np.zeros_like(p)
    face[np.arange(len(p)), k] = np.sign(p[np.arange(len(p)), k])
    with np.errstate(invalid="ignore", divide="ignore"):
        out_grad = np.sign(p) * np.maximum(q, 0) / outside[:, None]
    grad = np.where(inside[:, None], face, out_grad)
    d = np.where(inside, q.max(axis=-1), outside)
    top2 = np.sort(q, axis=-1)
    margin = np.where(inside, top2[:, 2] - top2[:, 1], np.abs(q).min(axis=-1))
    return d, grad, np.minimum(margin, np.abs(p).min(axis=-1))


def reference(prim, p_local):
    if isinstance(prim, Sphere):
        return sphere_ref(p_local, prim.radius)
    if isinstance(prim, Capsule):
        return capsule_ref(p_local, prim.radius, prim.length)
    if isinstance(prim, Cylinder):
        return cylinder_ref(p_local, prim.radius, prim.height)
    return cuboid_ref(p_local, prim.dims)


def posed_reference(prim, points, pose):
    rot, t = rotation(pose), np.asarray(pose[:3])
    local = (points - t) @ rot  # R^T (p - t)
    d, g, margin = reference(prim, local)
    return d, g @ rot.T, margin


def special_points(prim) -> np.ndarray:
    """Points on and near the features of ``prim`` (local frame): surface, edges, rims, caps, the axis."""
    hx, hy, hz = (np.asarray(prim.dims) / 2) if isinstance(prim, Cuboid) else (0, 0, 0)
    if isinstance(prim, Sphere):
        r = prim.radius
        return np.array([[r, 0, 0], [0, -r * 1.001, 0], [0.1, 0.2, -0.05], [0, 0, 2 * r], [0.6, -0.7, 0.4]])
    if isinstance(prim, Capsule):
        r, a = prim.radius, prim.length / 2
        return np.array(
            [
                [r, 0, 0],
                [0, r * 1.2, a],
                [0, 0, a + r],
                [0.05, 0, a + 0.1],
                [0.1, -0.1, -a - 0.2],
                [0.3, 0.3, 0],
            ]
        )
    if isinstance(prim, Cylinder):
        r, h = prim.radius, prim.height / 2
        return np.array(
            [
                [r, 0, 0.1],
                [0.1, 0, h],
                [r * 1.1, 0, h * 1.1],
                [0.05, 0.02, -h - 0.3],
                [0.2, 0.1, 0.15],
                [0.6, 0, 0.2],
            ]
        )
    return np.array(
        [[hx, 0.05, 0.02], [hx * 1.2, hy * 1.3, 0.01], [hx + 0.1, hy + 0.2, hz + 0.3], [0.1, 0.2, 0.05]]
    )


def sample_points(prim, n=400, seed=0):
    gen = np.random.default_rng(seed)
    reach = np.asarray(prim.half_extents()) + 0.25
    return np.concatenate([gen.uniform(-reach, reach, (n, 3)), special_points(prim)])


def distance_and_grad(points, world, dtype):
    p = points.clone().to(dtype).requires_grad_(True)
    d = signed_distance(p, world)
    (g,) = torch.autograd.grad(d.sum(), p)
    return d.detach().double().cpu().numpy(), g.double().cpu().numpy()


TOL = {torch.float32: (3e-6, 1e-4), torch.float64: (1e-12, 1e-9)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(PRIMS))
def test_primitive_matches_the_analytic_reference(name, dtype, device):
    prim = PRIMS[name]
    world = MeshWorld([prim], poses=[POSE], device=device)
    local = sample_points(prim)
    rot = rotation(POSE)
    points = torch.as_tensor(local @ rot.T + np.asarray(POSE[:3]))
    d, g = distance_and_grad(points.to(device), world, dtype)
    expected, expected_g, margin = posed_reference(prim, points.numpy(), POSE)
    d_tol, g_tol = TOL[dtype]
    np.testing.assert_allclose(d, expected, atol=d_tol, rtol=0)
    assert (d < 0).sum() > 20 and (d > 0).sum() > 20  # inside and outside both covered
    np.testing.assert_allclose(np.linalg.norm(g, axis=-1), 1.0, atol=g_tol)
    smooth = margin > 1e-3
    assert smooth.sum() > 300
    np.testing.assert_allclose(g[smooth], expected_g[smooth], atol=g_tol, rtol=0)


@pytest.mark.parametrize("name", list(PRIMS))
def test_singular_points_give_a_unit_gradient(name):
    """The centre, the axis, a rim, an edge: any unit direction is valid there, never NaN or zero."""
    prim = PRIMS[name]
    hx, hy, hz = prim.half_extents()
    points = np.array([[0, 0, 0], [0, 0, 0.01], [0, 0, -0.02], [hx, 0, hz], [hx, hy, hz], [hx, hy, 0]])
    world = MeshWorld([prim], poses=[POSE])
    rot = rotation(POSE)
    world_points = torch.as_tensor(points @ rot.T + np.asarray(POSE[:3]))
    d, g = distance_and_grad(world_points, world, torch.float64)
    assert np.isfinite(g).all()
    np.testing.assert_allclose(np.linalg.norm(g, axis=-1), 1.0, atol=1e-12)
    expected, _, _ = posed_reference(prim, world_points.numpy(), POSE)
    np.testing.assert_allclose(d, expected, atol=1e-12)


def test_non_dyadic_sizes_are_their_float32_roundings():
    """Sizes are stored in float32: the distance is that of the float32-rounded primitive."""
    prim = Capsule(0.1, 0.3)
    r32 = float(np.float32(0.1))
    top32 = float(np.float32(0.15 + 0.1))
    points = sample_points(prim, 200, seed=4)
    d, _ = distance_and_grad(torch.as_tensor(points), MeshWorld([prim]), torch.float64)
    expected, _, _ = capsule_ref(points, r32, 2 * (top32 - r32))
    np.testing.assert_allclose(d, expected, atol=1e-13)
    assert np.abs(d - capsule_ref(points, 0.1, 0.3)[0]).max() < 1e-7


@pytest.mark.parametrize("name", list(PRIMS))
def test_gradcheck_signed_distance_and_cost(name):
    prim = PRIMS[name]
    world = MeshWorld([prim], poses=[POSE])
    points = sample_points(prim, 200, seed=1)
    _, _, margin = posed_reference(prim, points, POSE)
    chosen = torch.as_tensor(points[margin > 0.02][:12])
    assert len(chosen) == 12
    p = chosen.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: signed_distance(x, world), (p,), eps=1e-6, atol=1e-6)
    radii = torch.full((len(chosen), 1), 0.01, dtype=torch.float64)
    spheres = torch.cat([chosen, radii], 1).requires_grad_(True)
    cost = sphere_mesh_cost(spheres.detach(), world, activation_distance=0.05)
    assert (cost > 0).any() and (cost == 0).any()  # colliding and free spheres both checked
    assert torch.autograd.gradcheck(
        lambda s: sphere_mesh_cost(s, world, activation_distance=0.05), (spheres,), eps=1e-6, atol=1e-6
    )


def _twin(prim) -> trimesh.Trimesh:
    if isinstance(prim, Sphere):
        return trimesh.creation.icosphere(subdivisions=5, radius=prim.radius)
    if isinstance(prim, Capsule):
        return trimesh.creation.capsule(height=prim.length, radius=prim.radius, count=[96, 96])
    if isinstance(prim, Cylinder):
        return trimesh.creation.cylinder(radius=prim.radius, height=prim.height, sections=256)
    return trimesh.creation.box(prim.dims)


def _meshing_error(prim, mesh: trimesh.Trimesh) -> float:
    """How far the twin's surface strays from the primitive's (the vertices lie on it; the faces dip inside):
    the deepest of many points sampled on each face, by the reference."""
    gen = np.random.default_rng(2)
    bary = gen.dirichlet(np.ones(3), 16)
    bary = np.concatenate([bary, np.full((1, 3), 1 / 3), [[0.5, 0.5, 0], [0, 0.5, 0.5], [0.5, 0, 0.5]]])
    on_faces = np.einsum("kc,fcx->fkx", bary, mesh.triangles).reshape(-1, 3)
    return float(np.abs(reference(prim, on_faces)[0]).max())


@pytest.mark.parametrize("name", list(PRIMS))
def test_primitive_agrees_with_its_meshed_twin(name):
    prim = PRIMS[name]
    twin = _twin(prim)
    error = _meshing_error(prim, twin)
    assert error < 2e-3
    points = torch.as_tensor(sample_points(prim, 500, seed=5))
    exact, _ = distance_and_grad(points, MeshWorld([prim], poses=[POSE]), torch.float64)
    meshed, _ = distance_and_grad(points, MeshWorld([twin], poses=[POSE]), torch.float64)
    np.testing.assert_allclose(exact, meshed, atol=1.6 * error + 1e-6, rtol=0)
    # and the cost of spheres against the twin (1-Lipschitz in the distance)
    gen = torch.Generator().manual_seed(6)
    spheres = torch.cat([points, torch.rand(len(points), 1, generator=gen, dtype=torch.float64) * 0.1], 1)
    a = sphere_mesh_cost(spheres, MeshWorld([prim], poses=[POSE]), activation_distance=0.05)
    b = sphere_mesh_cost(spheres, MeshWorld([twin], poses=[POSE]), activation_distance=0.05)
    torch.testing.assert_close(a, b, atol=1.6 * error + 1e-6, rtol=0)
    assert (a > 0).sum() > 50


def test_sign_method_does_not_apply_to_primitives():
    """Primitives are always signed (negative inside), whatever the world's sign method; a box mesh with
    "unsigned" is not."""
    origin = torch.zeros(1, 3, dtype=torch.float64)
    for prim in PRIMS.values():
        for method in ("unsigned", "winding", "normal"):
            d = signed_distance(origin, MeshWorld([prim], sign_method=method))
            assert d.item() == -min(prim.half_extents()), (prim, method)
    unsigned_box = MeshWorld([trimesh.creation.box(CUBOID.dims)], sign_method="unsigned")
    assert signed_distance(origin, unsigned_box).item() == min(CUBOID.half_extents())


def _single_worlds(env, poses):
    return [MeshWorld([entry], poses=[pose]) for entry, pose in zip(env, poses, strict=True)]


TORUS = trimesh.creation.torus(0.4, 0.1)
ICO = trimesh.creation.icosphere(2, radius=0.3)
BOX = trimesh.creation.box((0.3, 0.2, 0.4))


def _poses(count: int, seed: int) -> list[list[float]]:
    gen = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        q = gen.normal(size=4)
        out.append([*gen.uniform(-0.5, 0.5, 3).tolist(), *(q / np.linalg.norm(q)).tolist()])
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mixed_ragged_envs_equal_single_entry_worlds(dtype, device):
    envs = [[SPHERE, BOX, CYLINDER], [CAPSULE], [CUBOID, TORUS, ICO, Sphere(0.125)]]
    poses = [_poses(len(env), seed=e) for e, env in enumerate(envs)]
    world = MeshWorld.from_envs(envs, poses=poses, device=device)
    assert not world.kernel_args().all_cuboids
    gen = torch.Generator().manual_seed(7)
    points = (torch.rand(len(envs), 300, 3, generator=gen, dtype=torch.float64) * 2.4 - 1.2).to(dtype)
    spheres = torch.cat([points, torch.rand(len(envs), 300, 1, generator=gen).to(dtype) * 0.1], -1)
    env_index = torch.arange(len(envs))
    dist = signed_distance(points.to(device), world, env_index=env_index.to(device)).cpu()
    cost = sphere_mesh_cost(
        spheres.to(device), world, activation_distance=0.05, env_index=env_index.to(device)
    )
    cost = cost.cpu()
    for e, env in enumerate(envs):
        singles = _single_worlds(env, poses[e])
        expected_d = torch.stack([signed_distance(points[e], w) for w in singles]).amin(0)
        expected_c = torch.stack([sphere_mesh_cost(spheres[e], w, activation_distance=0.05) for w in singles])
        torch.testing.assert_close(
            dist[e], expected_d, atol=1e-6 if dtype == torch.float32 else 1e-12, rtol=0
        )
        torch.testing.assert_close(
            cost[e], expected_c.sum(0), atol=1e-5 if dtype == torch.float32 else 1e-12, rtol=0
        )
        assert (cost[e] > 0).any() and (dist[e] < 0).any()


def test_mixed_world_set_poses_and_set_enabled():
    world = MeshWorld([SPHERE, TORUS, CAPSULE])
    moved = _poses(3, seed=11)
    world.set_poses(moved)
    world.set_enabled([True, False, True])
    points = torch.rand(400, 3, dtype=torch.float64) * 2 - 1
    got, _ = distance_and_grad(points, world, torch.float64)
    expected = np.minimum(
        posed_reference(SPHERE, points.numpy(), moved[0])[0],
        posed_reference(CAPSULE, points.numpy(), moved[2])[0],
    )
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_swept_cost_of_primitives_agrees_with_meshed_twins():
    prims = [SPHERE, CAPSULE, CYLINDER]
    poses = _poses(3, seed=3)
    twins = [_twin(p) for p in prims]
    error = max(_meshing_error(p, t) for p, t in zip(prims, twins, strict=True))
    exact = MeshWorld(prims, poses=poses)
    meshed = MeshWorld(twins, poses=poses)
    gen = torch.Generator().manual_seed(9)
    start = torch.rand(4, 1, 16, 3, generator=gen, dtype=torch.float64) * 2 - 1
    end = torch.rand(4, 1, 16, 3, generator=gen, dtype=torch.float64) * 2 - 1
    t = torch.linspace(0, 1, 6, dtype=torch.float64)[None, :, None, None]
    centres = start + (end - start) * t
    spheres = torch.cat([centres, torch.full((*centres.shape[:3], 1), 0.05, dtype=torch.float64)], -1)
    a = swept_sphere_mesh_cost(spheres, exact, sweep_steps=3, activation_distance=0.05)
    b = swept_sphere_mesh_cost(spheres, meshed, sweep_steps=3, activation_distance=0.05)
    torch.testing.assert_close(a, b, atol=1.6 * error * len(prims) + 1e-6, rtol=0)
    assert (a > 0).sum() > 20


def test_swept_cost_gradient_of_a_primitive_world():
    world = MeshWorld([CYLINDER, CAPSULE], poses=_poses(2, seed=5))
    gen = torch.Generator().manual_seed(4)
    spheres = torch.cat(
        [
            torch.rand(1, 3, 4, 3, generator=gen, dtype=torch.float64) * 1.4 - 0.7,
            torch.full((1, 3, 4, 1), 0.04, dtype=torch.float64),
        ],
        -1,
    ).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda s: swept_sphere_mesh_cost(s, world, sweep_steps=2, activation_distance=0.05),
        (spheres,),
        eps=1e-6,
        atol=1e-5,
    )


def test_world_of_primitives_takes_the_closed_form_kernels(monkeypatch):
    launched = []
    run = _launch.run

    def watch(kernel, *args):
        launched.append(kernel.module.name)  # warpgeo._kernels.sdf.<kernel>_<precision>_<meshes|cuboids>
        return run(kernel, *args)

    monkeypatch.setattr(_launch, "run", watch)
    only = MeshWorld.from_envs([[SPHERE, CAPSULE], [CYLINDER, CUBOID, trimesh.creation.box((1, 2, 3))]])
    assert only.kernel_args().all_cuboids
    points = torch.rand(2, 50, 3, dtype=torch.float64)
    signed_distance(points, only)
    sphere_mesh_cost(torch.cat([points, torch.full((2, 50, 1), 0.1, dtype=torch.float64)], -1), only)
    # building the world launched nothing (no tables to build); its queries ran the closed-form kernels
    assert len(launched) == 2 and all(name.endswith("_cuboids") for name in launched), launched
    mixed = MeshWorld([SPHERE, ICO])
    assert not mixed.kernel_args().all_cuboids
    launched.clear()  # (building the icosphere's tables launched the build kernels, warpgeo._kernels.build_*)
    signed_distance(points[0], mixed)
    assert len(launched) == 1 and launched[0].endswith("_meshes"), launched


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_closed_form_kernels_equal_the_general_kernels(dtype):
    """The all-closed-forms variant and the general kernels (whose closed-form branch is the same code) agree
    bit for bit on a world of primitives."""
    world = MeshWorld([SPHERE, CAPSULE, CYLINDER, CUBOID], poses=_poses(4, seed=8))
    args, closed = world.kernel_args(dtype)
    assert closed
    points = (torch.rand(1, 500, 3, dtype=torch.float64) * 2 - 1).to(dtype)
    fast = torch.ops.warpgeo.signed_distance(points, None, args, True, True)
    slow = torch.ops.warpgeo.signed_distance(points, None, args, False, True)
    for a, b in zip(fast, slow, strict=True):
        assert torch.equal(a, b)


# ---- arguments ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "exc", "word"),
    [
        (lambda: Sphere(-1.0), ValueError, "radius"),
        (lambda: Sphere(0), ValueError, "radius"),
        (lambda: Sphere(float("nan")), ValueError, "radius"),
        (lambda: Sphere(float("inf")), ValueError, "radius"),
        (lambda: Sphere(1e-300), ValueError, "radius"),
        (lambda: Sphere(1e30), ValueError, "radius"),
        (lambda: Sphere("1"), TypeError, "radius"),
        (lambda: Sphere(True), TypeError, "radius"),
        (lambda: Sphere(1 + 0j), TypeError, "radius"),
        (lambda: Sphere(torch.tensor([0.1, 0.2])), TypeError, "radius"),
        (lambda: Sphere(torch.tensor(True)), TypeError, "radius"),
        (lambda: Capsule(0.1, -1), ValueError, "length"),
        (lambda: Capsule(None, 1), TypeError, "radius"),
        (lambda: Cylinder(1, 0), ValueError, "height"),
        (lambda: Cylinder(np.float32("nan"), 1), ValueError, "radius"),
        (lambda: Cuboid([1, 2]), ValueError, "dims"),
        (lambda: Cuboid([1, 2, -3]), ValueError, r"dims\[2\]"),
        (lambda: Cuboid(5), TypeError, "dims"),
        (lambda: Cuboid("abc"), TypeError, "dims"),
        (lambda: Cuboid(["a", 1, 1]), TypeError, r"dims\[0\]"),
        (lambda: Cuboid(np.ones(3, dtype=complex)), TypeError, "dims"),
        (lambda: Cuboid(np.ones((3, 1))), TypeError, r"dims\[0\]"),
        # integers and fractions beyond float's range: a ValueError like any size out of range
        (lambda: Sphere(10**400), ValueError, "radius"),
        (lambda: Sphere(-(10**400)), ValueError, "radius"),
        (lambda: Sphere(Fraction(10**400, 3)), ValueError, "radius"),
        (lambda: Capsule(0.1, 10**400), ValueError, "length"),
        (lambda: Cylinder(10**400, 1), ValueError, "radius"),
        (lambda: Cuboid([1, 10**400, 1]), ValueError, r"dims\[1\]"),
    ],
)
def test_bad_arguments_raise(make, exc, word):
    with pytest.raises(exc, match=word):
        make()


def test_arguments_are_normalised_and_frozen():
    assert Cuboid(np.array([1, 2, 3])) == Cuboid((1.0, 2.0, 3.0)) == Cuboid(torch.tensor([1.0, 2.0, 3.0]))
    assert Sphere(np.float32(0.5)).radius == 0.5 and type(Sphere(torch.tensor(0.5)).radius) is float
    assert Capsule(1, 2).half_extents() == (1.0, 1.0, 2.0)
    assert Cylinder(1, 2).half_extents() == (1.0, 1.0, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        SPHERE.radius = 2.0
    assert warpgeo.Sphere is Sphere and "Cylinder" in warpgeo.__all__
    with pytest.raises(TypeError, match="meshes\\[1\\]"):
        MeshWorld([SPHERE, warpgeo.primitives.Primitive()])


# ---- storage: fields of their own, no mesh -----------------------------------------------------------------


def test_primitives_have_fields_of_their_own_and_no_mesh():
    """A primitive's slot holds its kind and half-extents (float32) and no Warp mesh (NO_MESH); the kernels tell
    it from an empty slot by its kind. Forged kinds or sizes never make a kernel read a mesh: a primitive slot
    forged to KIND_MESH is empty (NO_MESH), an unknown kind is read as the box of its half-extents."""
    from warpgeo import _constants
    from warpgeo.world import WORLD_FIELDS

    ball = trimesh.creation.icosphere(2, radius=0.5)
    world = MeshWorld([ball, SPHERE, CAPSULE, CYLINDER, CUBOID], poses=_poses(5, seed=3))
    t = world._tables
    kinds = [_constants.KIND_MESH, _constants.KIND_SPHERE, _constants.KIND_CAPSULE]
    assert t["slot_kind"].tolist() == [[*kinds, _constants.KIND_CYLINDER, _constants.KIND_CUBOID]]
    expected = [[0, 0, 0], [0.375] * 3, [0.25, 0.25, 0.625], [0.3125, 0.3125, 0.4375], [0.25, 0.375, 0.1875]]
    assert t["prim_size"].tolist() == [expected]
    assert t["mesh_ids"][0, 0].item() != _constants.NO_MESH
    assert (t["mesh_ids"][0, 1:] == _constants.NO_MESH).all() and world._wp_meshes[0][1:] == [None] * 4
    assert (t["grid_flags"][0, 1:] == 0).all()

    points = torch.rand(1, 300, 3, dtype=torch.float64) * 3 - 1.5
    args = list(world.kernel_args(torch.float64).world)
    kind = list(WORLD_FIELDS).index("slot_kind")

    def forged(**fields):
        out = list(args)
        for name, value in fields.items():
            out[list(WORLD_FIELDS).index(name)] = value
        return torch.ops.warpgeo.signed_distance(points, None, out, False, True)[0]

    # every primitive slot forged to a mesh: only the mesh is left
    alone = MeshWorld([ball], poses=_poses(5, seed=3)[:1])
    torch.testing.assert_close(forged(slot_kind=torch.zeros_like(args[kind])), signed_distance(points, alone))
    # an unknown kind: the box of the slot's half-extents
    sphere_as_box = MeshWorld([ball, Cuboid([0.75] * 3)], poses=_poses(5, seed=3)[:2])
    got = forged(
        slot_kind=torch.tensor([[0, 77, 0, 0, 0]], dtype=torch.int32),
        enabled=torch.tensor([[1, 1, 0, 0, 0]], dtype=torch.int32),
    )
    torch.testing.assert_close(got, signed_distance(points, sphere_as_box))
    # hostile sizes: answers, no crash
    bad = torch.full_like(args[list(WORLD_FIELDS).index("prim_size")], float("nan"))
    assert forged(prim_size=bad).shape == (1, 300)
