"""Worlds edited in place (``MeshWorld(capacity=...)``, ``add``, ``remove``) and worlds of several cuRobo
configurations (``compat.curobo.load_world([...])``): an added entry costs what it costs in a world built with
it, a removal restores the answers before, the tensors the ops hold see every edit (captured-graph-like reuse
on the CPU), and the capacity, names and hostile inputs are refused with errors naming them."""

from __future__ import annotations

import concurrent.futures
import gc
import weakref

import numpy as np
import pytest
import torch
import trimesh

import warpgeo
from warpgeo import Capsule, Cuboid, Cylinder, MeshWorld, Sphere, _threads, signed_distance, sphere_mesh_cost
from warpgeo._world import prepare as _prepare
from warpgeo.compat.curobo import load_world

IDENTITY = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]


def _turned(x, y, z, angle):
    """A pose at (x, y, z) turned by ``angle`` about the axis (1, 2, 3)."""
    axis = np.array([1.0, 2.0, 3.0]) / np.sqrt(14.0)
    return [x, y, z, np.cos(angle / 2), *(np.sin(angle / 2) * axis)]


def _spheres(seed=0, batch=2, n=400, spread=2.0):
    g = torch.Generator().manual_seed(seed)
    centres = (torch.rand(batch, n, 3, generator=g) * 2 - 1) * spread
    radii = torch.rand(batch, n, 1, generator=g) * 0.2
    return torch.cat([centres, radii], dim=-1)


def _answers(world, spheres, env_index=None):
    """The cost (eta 0.1) and the signed distance of the centres, per batch entry's environment."""
    cost = sphere_mesh_cost(spheres, world, activation_distance=0.1, env_index=env_index)
    distance = signed_distance(spheres[..., :3], world, env_index=env_index)
    return cost, distance


def _ball():
    return trimesh.creation.icosphere(subdivisions=2, radius=0.4)


def _box_mesh():
    return trimesh.creation.box((0.3, 0.5, 0.2))


def _sphere_sdf(points: torch.Tensor, centre, radius) -> torch.Tensor:
    return (points.double() - torch.tensor(centre, dtype=torch.float64)).norm(dim=-1) - radius


# --------------------------------------------------------------------------------------------------------
# add / remove: the answers of a world built with the entries
# --------------------------------------------------------------------------------------------------------


ADDED = [
    ("ball", Sphere(0.3), [1.0, 0.5, 0.0, 1.0, 0.0, 0.0, 0.0]),
    ("crate", Cuboid([0.4, 0.2, 0.6]), _turned(-1.0, 0.2, 0.3, 0.7)),
    ("pole", Capsule(0.1, 0.8), _turned(0.2, -1.0, 0.1, 1.1)),
    ("can", Cylinder(0.2, 0.5), _turned(0.5, 1.2, -0.4, -0.4)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_added_primitives_cost_exactly_as_in_a_world_built_with_them(dtype):
    """Two environments; primitives added to environment 1 answer, bit for bit, as a world built with them in
    the same slots does (the same float sums), and environment 0 is untouched."""
    base = [[Cuboid([1.0, 1.0, 0.1])], [Cuboid([1.0, 1.0, 0.1]), Sphere(0.2)]]
    world = MeshWorld.from_envs(base, capacity={"sphere": 2, "cuboid": 1, "capsule": 1, "cylinder": 1})
    assert world.max_meshes == 2 + 5
    spheres = _spheres(1).to(dtype)
    env_index = torch.tensor([0, 1])
    before = _answers(world, spheres, env_index)
    for name, entry, pose in ADDED:
        world.add(entry, name=name, pose=pose, env=1)
    assert world.names == [[None], [None, None, "ball", "crate", "pole", "can"]]
    reference = MeshWorld.from_envs(
        [base[0], base[1] + [entry for _, entry, _ in ADDED]],
        poses=[[IDENTITY], [IDENTITY, IDENTITY] + [pose for _, _, pose in ADDED]],
    )
    got, expected = _answers(world, spheres, env_index), _answers(reference, spheres, env_index)
    for g, x, b in zip(got, expected, before, strict=True):
        assert torch.equal(g, x)
        assert torch.equal(g[0], b[0])  # environment 0: as before
        assert not torch.equal(g[1], b[1])  # the additions are seen
    # and against the closed form of the added sphere alone
    world.set_enabled([[False] * 7, [False, False, True, False, False, False, False]])
    distance = signed_distance(spheres[1:, :, :3], world, env_index=torch.tensor([1]))
    torch.testing.assert_close(
        distance[0].double(), _sphere_sdf(spheres[1, :, :3], [1.0, 0.5, 0.0], 0.3), atol=2e-6, rtol=0
    )


def test_remove_restores_the_answers_before():
    world = MeshWorld(
        {"table": Cuboid([1.0, 1.0, 0.1]), "bowl": _ball()}, capacity={"sphere": 2, "cuboid": 2, "mesh": 1}
    )
    spheres = _spheres(2)
    before = _answers(world, spheres)
    for name, entry, pose in ADDED[:2]:
        world.add(entry, name=name, pose=pose)
    world.add(_box_mesh(), name="box", pose=_turned(0.3, -0.8, 0.2, 0.5))
    changed = _answers(world, spheres)
    assert not torch.equal(changed[0], before[0])
    for name in ("crate", "box", "ball"):
        world.remove(name)
    assert world.names == [["table", "bowl"]] and world.num_meshes == (2,)
    for g, b in zip(_answers(world, spheres), before, strict=True):
        assert torch.equal(g, b)
    # removing an entry the world was built with: as a world built without it
    world.remove("table")
    assert world.names == [[None, "bowl"]] and world.num_meshes == (2,)
    alone = MeshWorld({"bowl": _ball()})
    for g, x in zip(_answers(world, spheres), _answers(alone, spheres), strict=True):
        torch.testing.assert_close(g, x, atol=1e-6, rtol=0)
    # its slot is the first free one, taken by the next addition
    assert world.add(Sphere(0.1), name="table") == 0 and world.names == [["table", "bowl"]]


def test_added_mesh_costs_as_in_a_world_built_with_it():
    """A mesh added later has its BVH and no shortcut tables (their flags say 'pending'): the same distances as
    a world built with it (which has them), to float32 rounding; a cuboid mesh is a closed form either way."""
    base = {"table": Cuboid([2.0, 2.0, 0.1])}
    world = MeshWorld(base, capacity={"mesh": 3})
    ball_pose, box_pose = _turned(0.8, 0.1, 0.3, 0.9), _turned(-0.6, -0.5, 0.2, -1.3)
    assert world.add(_ball(), name="ball", pose=ball_pose) == 1
    assert world.add(_box_mesh(), name="box", pose=box_pose, sign_method="normal") == 2
    reference = MeshWorld(
        {**base, "ball": _ball(), "box": _box_mesh()},
        poses={"ball": ball_pose, "box": box_pose},
        sign_method=["ray", "ray", "normal"],
    )
    assert reference._tables["grid_flags"][0, 1].item() != world._tables["grid_flags"][0, 1].item()
    spheres = _spheres(3, spread=1.2)
    for g, x in zip(_answers(world, spheres), _answers(reference, spheres), strict=True):
        torch.testing.assert_close(g, x, atol=2e-6, rtol=1e-6)
    # the gradient too
    leaf = spheres.clone().requires_grad_(True)
    sphere_mesh_cost(leaf, world, activation_distance=0.1).sum().backward()
    ref_leaf = spheres.clone().requires_grad_(True)
    sphere_mesh_cost(ref_leaf, reference, activation_distance=0.1).sum().backward()
    torch.testing.assert_close(leaf.grad, ref_leaf.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("way", ["no core to spare", "helper never starts"])
def test_an_added_mesh_is_the_same_with_or_without_its_helper(monkeypatch, way):
    """``add`` runs a mesh's per-face checks and slot rows on a helper thread beside its BVH build where a
    core is likely free; else on the calling thread, and there too where the helper has not started by the
    time the BVH is built: the same slot, bit for bit, either way, and the same answers as a world built
    with the mesh."""
    base = {"table": Cuboid([2.0, 2.0, 0.1])}
    pose = _turned(0.3, -0.2, 0.4, 0.8)
    helped = MeshWorld(base, capacity={"mesh": 1})
    alone = MeshWorld(base, capacity={"mesh": 1})
    submitted = []
    real_pool = _threads.pool

    def pool(*args, **kwargs):
        submitted.append(args[0])
        return real_pool(*args, **kwargs)

    monkeypatch.setattr(_threads, "core_to_spare", lambda: True)
    monkeypatch.setattr(_threads, "pool", pool)
    helped.add(_ball(), name="ball", pose=pose)
    assert submitted == ["warpgeo-add"]  # the helper ran
    monkeypatch.undo()

    class Never(concurrent.futures.Future):  # a job that never starts: waiting for it fails, not hangs
        def result(self, timeout=None):
            raise AssertionError("add waited for a helper that never started")

    class Idle:  # a pool whose jobs never start
        def submit(self, fn, *args, **kwargs):
            submitted.append(fn)
            return Never()

    if way == "no core to spare":
        monkeypatch.setattr(_threads, "core_to_spare", lambda: False)
        monkeypatch.setattr(_threads, "pool", lambda *args, **kwargs: Idle())  # never asked for
    else:
        monkeypatch.setattr(_threads, "core_to_spare", lambda: True)
        monkeypatch.setattr(_threads, "pool", lambda *args, **kwargs: Idle())
    alone.add(_ball(), name="ball", pose=pose)
    monkeypatch.undo()
    assert len(submitted) == (1 if way == "no core to spare" else 2)
    ids = helped._tables["mesh_ids"]
    for a, b in zip(helped.kernel_args().world, alone.kernel_args().world, strict=True):
        if a is not ids:  # the mesh ids differ (two BVHs), every other row is the same
            assert torch.equal(a, b)
    reference = MeshWorld({**base, "ball": _ball()}, poses={"ball": pose})
    spheres = _spheres(4, spread=1.0)
    for world in (helped, alone):
        for g, x in zip(_answers(world, spheres), _answers(reference, spheres), strict=True):
            torch.testing.assert_close(g, x, atol=2e-6, rtol=1e-6)


def test_removed_mesh_is_let_go_and_its_slot_reused():
    world = MeshWorld([Cuboid([1.0, 1.0, 1.0])], capacity={"mesh": 1, "sphere": 1})
    m = world.add(_ball(), pose=[2.0, 0, 0, 1, 0, 0, 0])
    ref = weakref.ref(world._wp_meshes[0][m])
    world.remove(m)
    gc.collect()
    assert ref() is None  # the BVH went with the slot
    assert world._tables["mesh_ids"][0, m].item() == warpgeo._constants.NO_MESH
    assert world.add(Sphere(0.5), pose=[2.0, 0, 0, 1, 0, 0, 0]) == m
    d = signed_distance(torch.tensor([[[2.0, 0.0, 0.0]]]), world)
    assert d.item() == pytest.approx(-0.5, abs=1e-6)


# --------------------------------------------------------------------------------------------------------
# in place: the tensors the ops hold see the edits
# --------------------------------------------------------------------------------------------------------


def test_the_held_tensors_see_every_edit():
    """``kernel_args`` held before the edits (as a captured CUDA graph holds its tensors' addresses): the same
    tensors, over the same memory, answer for the edited world when handed to the op again."""
    world = MeshWorld([Cuboid([1.0, 1.0, 0.1])], capacity={"sphere": 1, "cuboid": 1, "mesh": 1})
    held = {dtype: world.kernel_args(dtype) for dtype in (torch.float32, torch.float64)}
    ptrs = {dtype: [t.data_ptr() for t in args.world] for dtype, args in held.items()}
    spheres = _spheres(4)
    op = torch.ops.warpgeo.signed_distance
    world.add(Sphere(0.3), name="ball", pose=[1.0, 0.5, 0.0, 1, 0, 0, 0])
    world.add(Cuboid([0.3, 0.3, 0.3]), name="crate", pose=_turned(-1.0, 0.0, 0.3, 0.4))
    world.add(_ball(), name="bowl", pose=[0.0, -1.0, 0.3, 1, 0, 0, 0])
    world.remove("crate")
    for dtype, args in held.items():
        assert world.kernel_args(dtype).world is args.world
        assert [t.data_ptr() for t in args.world] == ptrs[dtype]
        points = spheres[..., :3].to(dtype)
        got, _ = op(points, None, args.world, args.all_cuboids, False)
        torch.testing.assert_close(got, signed_distance(points, world), atol=0, rtol=0)
    reference = MeshWorld(
        [Cuboid([1.0, 1.0, 0.1]), Sphere(0.3), Cuboid([0.01] * 3), _ball()],
        poses=[IDENTITY, [1.0, 0.5, 0.0, 1, 0, 0, 0], IDENTITY, [0.0, -1.0, 0.3, 1, 0, 0, 0]],
    )
    reference.set_enabled([True, True, False, True])
    got, _ = op(spheres[..., :3], None, held[torch.float32].world, False, False)
    torch.testing.assert_close(got, signed_distance(spheres[..., :3], reference), atol=2e-6, rtol=1e-6)


def test_all_cuboids_is_fixed_by_the_capacity():
    closed = MeshWorld([Cuboid([1.0, 1.0, 1.0])], capacity={"sphere": 2})
    assert closed.kernel_args().all_cuboids
    closed.add(Sphere(0.2), pose=[1.0, 0, 0, 1, 0, 0, 0])
    assert closed.kernel_args().all_cuboids  # primitives keep the closed-form kernels
    open_world = MeshWorld([Cuboid([1.0, 1.0, 1.0])], capacity={"mesh": 1})
    assert not open_world.kernel_args().all_cuboids  # room for a mesh: the general kernels from the start


def test_set_poses_and_enabled_by_name_reach_added_entries():
    world = MeshWorld({"table": Cuboid([1.0, 1.0, 0.1])}, capacity={"sphere": 2})
    world.add(Sphere(0.25), name="ball")
    world.set_poses({"ball": [0.0, 0.0, 2.0, 1, 0, 0, 0]})
    point = torch.tensor([[[0.0, 0.0, 2.0]]])
    assert signed_distance(point, world).item() == pytest.approx(-0.25, abs=1e-6)
    world.set_enabled({"ball": False})
    assert signed_distance(point, world).item() == pytest.approx(2.0 - 0.05, abs=1e-6)
    world.set_enabled({"ball": True})
    assert world.poses[0, 1].tolist() == [0.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0]
    world.remove("ball")
    with pytest.raises(ValueError, match="no entry named 'ball'"):
        world.set_poses({"ball": IDENTITY})
    with pytest.raises(ValueError, match="no entry named 'ball'"):
        world.remove("ball")
    assert world.add(Sphere(0.1), name="ball") == 1  # the name is free again


def test_a_world_may_start_empty_with_a_capacity():
    world = MeshWorld([], capacity={"sphere": 1})
    assert world.num_meshes == (0,) and world.max_meshes == 1
    spheres = _spheres(5)
    assert torch.equal(sphere_mesh_cost(spheres, world), torch.zeros(spheres.shape[:-1]))
    world.add(Sphere(0.5), pose=[0.2, 0.0, 0.0, 1, 0, 0, 0])
    torch.testing.assert_close(
        signed_distance(spheres[..., :3], world).double(),
        _sphere_sdf(spheres[..., :3], [0.2, 0.0, 0.0], 0.5),
        atol=2e-6,
        rtol=0,
    )
    with pytest.raises(ValueError, match="at least one mesh"):
        MeshWorld([], capacity={"sphere": 0})


def test_pending_tables_do_not_overwrite_an_edited_slot(monkeypatch):
    """A CPU world whose meshes' tables are still being built in the background: removing such a mesh and
    adding a primitive in its slot, then taking the tables in, leaves the primitive there (and the other
    mesh's tables come in)."""
    monkeypatch.setattr(_prepare, "BACKGROUND_FACES", 100)
    world = MeshWorld(
        {"a": _ball(), "b": _ball()}, poses={"b": [1.5, 0, 0, 1, 0, 0, 0]}, capacity={"sphere": 1}
    )
    assert world._later is not None
    world.remove("a")
    world.add(Sphere(0.2), name="s", pose=[-1.0, 0, 0, 1, 0, 0, 0])
    assert world.wait_tables(120)
    assert world._tables["slot_kind"][0, 0].item() == warpgeo._constants.KIND_SPHERE
    assert world._tables["grid_flags"][0, 0].item() == 0
    assert world._tables["grid_flags"][0, 1].item() & warpgeo._constants.FLAG_CLOSED
    reference = MeshWorld([Sphere(0.2), _ball()], poses=[[-1.0, 0, 0, 1, 0, 0, 0], [1.5, 0, 0, 1, 0, 0, 0]])
    spheres = _spheres(6)
    for g, x in zip(_answers(world, spheres), _answers(reference, spheres), strict=True):
        torch.testing.assert_close(g, x, atol=2e-6, rtol=1e-6)


# --------------------------------------------------------------------------------------------------------
# capacity and hostile inputs
# --------------------------------------------------------------------------------------------------------


def test_beyond_capacity_names_the_kind_and_the_capacity():
    world = MeshWorld.from_envs([[Cuboid([1, 1, 1])], [Sphere(0.1)]], capacity={"cuboid": 1, "sphere": 1})
    world.add(Cuboid([0.1, 0.1, 0.1]), env=1)
    with pytest.raises(ValueError, match=r"cuboid.*capacity\['cuboid'\]=1"):
        world.add(Cuboid([0.1, 0.1, 0.1]), env=1)
    with pytest.raises(ValueError, match=r"capsule.*capacity\['capsule'\]=0"):
        world.add(Capsule(0.1, 0.2), env=0)
    with pytest.raises(ValueError, match=r"mesh.*capacity\['mesh'\]=0"):
        world.add(_ball(), env=0)
    world.remove(0, env=0)  # an entry the world was built with frees room of its kind
    world.add(Cuboid([0.1, 0.1, 0.1]), env=0)
    world.add(Cuboid([0.1, 0.1, 0.1]), env=0)
    with pytest.raises(ValueError, match="cuboid"):
        world.add(Cuboid([0.1, 0.1, 0.1]), env=0)
    bare = MeshWorld([Cuboid([1, 1, 1])])
    with pytest.raises(ValueError, match=r"without capacity.*capacity="):
        bare.add(Sphere(0.1))


@pytest.mark.parametrize(
    "capacity, error, match",
    [
        ({"box": 1}, ValueError, "unknown kind 'box'"),
        ({"sphere": -1}, ValueError, r"capacity\['sphere'\] must be >= 0"),
        ({"sphere": 1.5}, TypeError, r"capacity\['sphere'\] must be an int"),
        ({"sphere": True}, TypeError, r"capacity\['sphere'\] must be an int"),
        ([("sphere", 1)], TypeError, "capacity must be a dict"),
    ],
)
def test_bad_capacity(capacity, error, match):
    with pytest.raises(error, match=match):
        MeshWorld([Sphere(0.1)], capacity=capacity)


def test_hostile_add_and_remove():
    world = MeshWorld.from_envs([{"a": Sphere(0.1)}, {"a": Sphere(0.1)}], capacity={"sphere": 2, "mesh": 1})
    snapshot = [t.clone() for t in world.kernel_args().world]
    cases = [
        (dict(entry=Sphere(0.1), env=2), IndexError, r"env must lie in \[0, num_envs=2\)"),
        (dict(entry=Sphere(0.1), env=-1), IndexError, "env must lie"),
        (dict(entry=Sphere(0.1), env=True), TypeError, "env must be an int"),
        (dict(entry=Sphere(0.1), env=0.0), TypeError, "env must be an int"),
        (dict(entry=Sphere(0.1), name="a"), ValueError, "name 'a' names an entry"),
        (dict(entry=Sphere(0.1), name=""), ValueError, "name must be a non-empty"),
        (dict(entry=Sphere(0.1), name=3), TypeError, "name must be a string"),
        (dict(entry=Sphere(0.1), pose=[0, 0, 0, 1, 0, 0]), ValueError, r"pose.*shape \(7,\)"),
        (dict(entry=Sphere(0.1), pose=[np.nan, 0, 0, 1, 0, 0, 0]), ValueError, "pose must be finite"),
        (dict(entry=Sphere(0.1), pose=[0, 0, 0, 2, 0, 0, 0]), ValueError, "pose must hold a unit quaternion"),
        (dict(entry=Sphere(0.1), pose="up"), TypeError, "pose"),
        (dict(entry=Sphere(0.1), pose=torch.zeros(7, device="meta")), ValueError, "meta"),
        (dict(entry=Sphere(0.1), pose=torch.zeros(7, dtype=torch.complex64)), TypeError, "real"),
        (dict(entry=42), TypeError, "int"),
        (dict(entry="no/such/file.stl"), ValueError, "file"),
        (dict(entry=(np.zeros((3, 3)), np.array([[0, 1, 5]]))), IndexError, "face"),
        (dict(entry=(np.eye(3) * [1, 1, np.nan], np.array([[0, 1, 2]]))), ValueError, "finite"),
        (dict(entry=(np.eye(3) * 2.0**62, np.array([[0, 1, 2]]))), ValueError, "2\\*\\*60"),
        # found by the per-face checks beside the BVH build (on a helper thread), raised here
        (dict(entry=(np.zeros((3, 3)), np.array([[0, 1, 2], [2, 1, 0]]))), ValueError, "zero area"),
        (dict(entry=_ball(), sign_method="sideways"), ValueError, "sign_method must be one of"),
        (dict(entry=trimesh.Scene([_ball(), _box_mesh()])), ValueError, "scene"),
    ]
    for kwargs, error, match in cases:
        entry = kwargs.pop("entry")
        with pytest.raises(error, match=match):
            world.add(entry, **kwargs)
    with pytest.raises(ValueError, match="dims"):
        Cuboid([np.nan, 1.0, 1.0])  # a primitive refuses NaN sizes before any world sees it
    for key, env, error, match in [
        ("b", 0, ValueError, "no entry named 'b' in environment 0"),
        (5, 0, IndexError, "no entry in slot 5"),
        (99, 0, IndexError, "no entry in slot 99"),
        (-1, 0, IndexError, "no entry in slot -1"),
        (True, 0, TypeError, "name_or_index must be"),
        (0.0, 0, TypeError, "name_or_index must be"),
        ("a", 3, IndexError, "env must lie"),
    ]:
        with pytest.raises(error, match=match):
            world.remove(key, env=env)
    # nothing was written by a refused call
    for before, after in zip(snapshot, world.kernel_args().world, strict=True):
        assert torch.equal(before, after)
    assert world.names == [["a"], ["a"]]


# --------------------------------------------------------------------------------------------------------
# cuRobo: a list of configurations is a world of one environment each
# --------------------------------------------------------------------------------------------------------


def _configs():
    table = {"dims": [1.0, 1.0, 0.1], "pose": [0.0, 0.0, -0.05, 1, 0, 0, 0]}
    return [
        {"cuboid": {"table": table}, "sphere": {"ball": {"radius": 0.2, "position": [0.3, 0.0, 0.3]}}},
        {"cuboid": {"table": table, "wall": {"dims": [0.1, 1.0, 1.0], "pose": _turned(0.6, 0, 0.5, 0.3)}}},
        {
            "capsule": {
                "pole": {
                    "radius": 0.05,
                    "base": [0, 0, 0],
                    "tip": [0, 0, 0.8],
                    "pose": _turned(-0.3, 0.2, 0, 0.2),
                }
            }
        },
    ]


def _plain(value):
    """``value`` with NumPy numbers as Python floats (for YAML)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return float(value) if isinstance(value, (float, np.floating)) else value


def test_curobo_list_of_configs_is_one_environment_each(tmp_path):
    configs = _configs()
    world = load_world(configs)
    assert world.num_envs == 3
    assert world.names == [["table", "ball"], ["table", "wall"], ["pole"]]
    spheres = _spheres(7, batch=3, spread=1.0)
    env_index = torch.tensor([0, 1, 2])
    got = _answers(world, spheres, env_index)
    for e, config in enumerate(configs):
        alone = load_world(config)
        expected = _answers(alone, spheres[e : e + 1])
        for g, x in zip(got, expected, strict=True):
            assert torch.equal(g[e : e + 1], x)
    # a YAML path in the list, and a one-item list: one environment, as the configuration alone
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "second.yml"
    path.write_text(yaml.safe_dump(_plain(configs[1])))
    mixed = load_world([configs[0], str(path)])
    assert mixed.names == [["table", "ball"], ["table", "wall"]]
    one = load_world([configs[2]])
    assert one.num_envs == 1 and one.names == [["pole"]]
    # with room for more, per environment
    room = load_world(configs, capacity={"sphere": 1})
    room.add(Sphere(0.1), name="ball", env=2)
    assert room.names[2] == ["pole", "ball"]


def test_curobo_bad_lists():
    with pytest.raises(ValueError, match="empty list"):
        load_world([])
    with pytest.raises(TypeError, match=r"config\[1\] must be a dict or a YAML file path"):
        load_world([_configs()[0], 42])
    with pytest.raises(ValueError, match=r"config\[1\]: cuboid.table: unknown field 'size'"):
        load_world([_configs()[0], {"cuboid": {"table": {"dims": [1, 1, 1], "size": 2}}}])
    with pytest.raises(ValueError, match=r"config\[0\]: unknown obstacle type"):
        load_world([{"cube": {}}])


def test_poses_given_at_construction_land_in_their_slots():
    """With room kept (wider tensors), the poses given with the entries (an array, ragged lists, a dict) are
    those of a world built without room; the kept slots are identity and disabled."""
    entries = [Sphere(0.2), Cuboid([0.2, 0.3, 0.4])]
    poses = [[1.0, 0, 0, 1, 0, 0, 0], _turned(0, 1, 0, 0.3)]
    plain = MeshWorld(entries, poses=poses)
    roomy = MeshWorld(entries, poses=np.array(poses), capacity={"sphere": 3})
    assert roomy.max_meshes == 5
    torch.testing.assert_close(roomy.poses[:, :2], plain.poses, atol=0, rtol=0)
    assert roomy.poses[0, 2:].tolist() == [IDENTITY] * 3 and roomy.enabled.tolist() == [
        [True, True] + [False] * 3
    ]
    envs = MeshWorld.from_envs([entries, entries[:1]], poses=[poses, poses[:1]], capacity={"cuboid": 1})
    assert envs.max_meshes == 3 and envs.num_meshes == (2, 1)
    torch.testing.assert_close(envs.poses[1, 0], plain.poses[0, 0], atol=0, rtol=0)


def test_an_added_open_mesh_warns_as_at_construction():
    opened = trimesh.creation.box((1.0, 1.0, 1.0))
    opened.update_faces(np.arange(len(opened.faces)) >= 2)  # one side gone: open
    world = MeshWorld([Sphere(0.1)], capacity={"mesh": 2})
    with pytest.warns(UserWarning, match="open mesh"):
        world.add(opened, name="bin")
    world.add(opened, name="shell", sign_method="unsigned")  # no warning: read as a shell


def test_the_broad_phase_box_of_an_added_entry_holds_it():
    """``world_bounds`` of an added cuboid holds its eight corners posed (NumPy), also for a quaternion
    renormalised on the way in (norm 1.0009), and is within a few float32 steps of them."""
    world = MeshWorld([Sphere(0.1)], capacity={"cuboid": 1})
    dims = np.array([0.4, 1.2, 0.7])
    pose = np.array(_turned(3.0, -2.0, 0.5, 2.2))
    pose[3:] *= 1.0009
    m = world.add(Cuboid(dims), pose=pose)
    q = pose[3:] / np.linalg.norm(pose[3:])
    rotation = trimesh.transformations.quaternion_matrix(q)[:3, :3]
    corners = (np.array(np.meshgrid(*[[-0.5, 0.5]] * 3)).reshape(3, -1).T * dims) @ rotation.T + pose[:3]
    lower, upper = world._tables["world_bounds"][0, m].double().numpy()
    assert (lower <= corners.min(axis=0)).all() and (upper >= corners.max(axis=0)).all()
    assert (
        np.abs(lower - corners.min(axis=0)).max() < 1e-5 and np.abs(upper - corners.max(axis=0)).max() < 1e-5
    )


def test_remove_works_without_capacity():
    """A world built without room may still take entries out (its slot stays a disabled hole)."""
    world = MeshWorld(
        {"box": Cuboid([1.0, 1.0, 1.0]), "ball": Sphere(0.3)}, poses={"ball": [1.0, 0, 0, 1, 0, 0, 0]}
    )
    world.remove("box")
    assert world.names == [[None, "ball"]]
    spheres = _spheres(8)
    torch.testing.assert_close(
        signed_distance(spheres[..., :3], world).double(),
        _sphere_sdf(spheres[..., :3], [1.0, 0.0, 0.0], 0.3),
        atol=2e-6,
        rtol=0,
    )
    with pytest.raises(ValueError, match="without capacity"):
        world.add(Cuboid([1.0, 1.0, 1.0]))


def test_a_compiled_call_sees_the_edits():
    """``torch.compile(fullgraph=True)`` of a cost over the world: traced once, it reads the world's tensors
    at each call, so an added entry costs and a removed one no longer does, without a retrace."""
    world = MeshWorld({"a": Cuboid([1.0, 1.0, 1.0])}, capacity={"sphere": 1})
    spheres = torch.tensor([[[2.0, 0.0, 0.0, 0.1], [0.0, 0.0, 0.0, 0.1]]])
    compiled = torch.compile(lambda x: sphere_mesh_cost(x, world), fullgraph=True)
    before = compiled(spheres)
    world.add(Sphere(0.5), name="s", pose=[2.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    added = compiled(spheres)
    torch.testing.assert_close(added, sphere_mesh_cost(spheres, world), atol=0, rtol=0)
    assert added[0, 0].item() == pytest.approx(0.6, abs=1e-6)  # radius 0.1 + 0.5 of penetration at the centre
    world.remove("s")
    assert torch.equal(compiled(spheres), before)
