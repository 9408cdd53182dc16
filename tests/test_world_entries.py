"""MeshWorld entries: names (dict entries, set_poses / set_enabled by name), trimesh scenes (in memory and from
files, their node transforms folded into poses) and cuRobo world configurations (warpgeo.compat.curobo)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import trimesh

import warpgeo
from warpgeo import MeshWorld, signed_distance, sphere_mesh_cost
from warpgeo.compat.curobo import load_world

# --------------------------------------------------------------------------------------------------------
# references: poses and distances in NumPy, independent of warpgeo's own pose code
# --------------------------------------------------------------------------------------------------------


def _matrix(pose) -> np.ndarray:
    """4x4 world-from-object of a pose [x, y, z, qw, qx, qy, qz] (trimesh's quaternion convention: w first)."""
    m = trimesh.transformations.quaternion_matrix(np.asarray(pose[3:], dtype=np.float64))
    m[:3, 3] = pose[:3]
    return m


def _pose_of(matrix: np.ndarray) -> list[float]:
    """The pose of a rigid 4x4 transform, by trimesh."""
    q = trimesh.transformations.quaternion_from_matrix(matrix)
    return [*matrix[:3, 3], *q]


def _local(points: np.ndarray, pose) -> np.ndarray:
    """``points`` (N, 3) in the object's frame."""
    inverse = np.linalg.inv(_matrix(pose))
    return points @ inverse[:3, :3].T + inverse[:3, 3]


def _box_sdf(points: np.ndarray, dims, pose) -> np.ndarray:
    q = np.abs(_local(points, pose)) - np.asarray(dims) / 2
    return np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(axis=1), 0)


def _segment_sdf(points: np.ndarray, a, b, radius: float, pose) -> np.ndarray:
    """Distance to the capsule of ``radius`` around segment a-b (object frame), posed by ``pose``."""
    p = _local(points, pose)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ab = b - a
    t = np.clip(((p - a) @ ab) / (ab @ ab), 0, 1) if ab @ ab > 0 else np.zeros(len(p))
    return np.linalg.norm(p - (a + t[:, None] * ab), axis=1) - radius


def _cylinder_sdf(points: np.ndarray, radius: float, height: float, pose) -> np.ndarray:
    p = _local(points, pose)
    d = np.stack([np.linalg.norm(p[:, :2], axis=1) - radius, np.abs(p[:, 2]) - height / 2], axis=1)
    return np.linalg.norm(np.maximum(d, 0), axis=1) + np.minimum(d.max(axis=1), 0)


def _sd(world, points: np.ndarray) -> np.ndarray:
    return signed_distance(torch.as_tensor(points, dtype=torch.float64), world).numpy()


def _random_pose(rng: np.random.Generator, spread: float = 1.0) -> list[float]:
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    return [float(v) for v in (*rng.uniform(-spread, spread, 3), *q)]


def _points(rng: np.random.Generator, n: int = 400, spread: float = 2.5) -> np.ndarray:
    return rng.uniform(-spread, spread, (n, 3))


def _box(dims) -> trimesh.Trimesh:
    return trimesh.creation.box(extents=dims)


# --------------------------------------------------------------------------------------------------------
# names
# --------------------------------------------------------------------------------------------------------


def test_names_of_lists_dicts_and_envs():
    box, ball = _box((1, 1, 1)), trimesh.creation.icosphere(radius=0.3)
    assert MeshWorld([box, ball]).names == [[None, None]]
    world = MeshWorld({"table": box, "ball": ball})
    assert world.names == [["table", "ball"]] and world.num_meshes == (2,)
    world.names[0][0] = "changed"  # a copy
    assert world.names == [["table", "ball"]]
    envs = MeshWorld.from_envs([{"table": box, "ball": ball}, [box], {"ball": ball}])
    assert envs.names == [["table", "ball"], [None], ["ball"]]
    assert envs.num_meshes == (2, 1, 1)


def test_bad_names():
    box = _box((1, 1, 1))
    with pytest.raises(TypeError, match="names must be strings; got 3"):
        MeshWorld({3: box})
    with pytest.raises(ValueError, match="non-empty"):
        MeshWorld({"": box})
    with pytest.raises(TypeError, match=r"envs\[1\]: entry names must be strings"):
        MeshWorld.from_envs([{"a": box}, {("a",): box}])
    # a duplicate: a scene's node name against an entry's name
    scene = trimesh.Scene()
    scene.add_geometry(box, node_name="b", geom_name="g")
    scene.add_geometry(box, node_name="c", geom_name="g2")
    with pytest.raises(ValueError, match="'a/b' names two entries"):
        MeshWorld({"a/b": box, "a": scene})
    with pytest.raises(ValueError, match=r"'b' names two entries.*give the scenes names"):
        MeshWorld([scene, scene])
    assert MeshWorld({"x": scene, "y": scene}).names == [["x/b", "x/c", "y/b", "y/c"]]


def test_set_poses_by_name_equals_the_tensor_form():
    rng = np.random.default_rng(1)
    entries = {
        "a": _box((1, 0.5, 0.3)),
        "b": _box((0.2, 0.2, 2)),
        "c": trimesh.creation.icosphere(radius=0.4),
    }
    start = [_random_pose(rng) for _ in range(3)]
    by_name = MeshWorld(entries, poses={"a": start[0], "b": start[1], "c": start[2]})
    by_tensor = MeshWorld(list(entries.values()), poses=start)
    torch.testing.assert_close(by_name.poses, by_tensor.poses)
    new_b = _random_pose(rng)
    by_name.set_poses({"b": new_b})
    full = torch.tensor([start[0], new_b, start[2]], dtype=torch.float64)
    by_tensor.set_poses(full)
    torch.testing.assert_close(by_name.poses, by_tensor.poses)
    # the same world tensors (but the Warp mesh ids, which are each world's own)
    torch.testing.assert_close(
        by_name.kernel_args().world[1:], by_tensor.kernel_args().world[1:], rtol=0, atol=0
    )
    # the pose is the one asked for (normalised), the others untouched
    np.testing.assert_allclose(by_name.poses[0, 1].numpy(), new_b, atol=1e-12)
    np.testing.assert_allclose(by_name.poses[0, [0, 2]].numpy(), np.array(start)[[0, 2]], atol=1e-12)
    points = _points(rng)
    np.testing.assert_array_equal(_sd(by_name, points), _sd(by_tensor, points))
    # tensors and (0, name) keys are accepted too
    by_name.set_poses({(0, "a"): torch.tensor(new_b), "c": np.array(new_b)})
    np.testing.assert_allclose(by_name.poses[0].numpy(), [new_b] * 3, atol=1e-12)
    by_name.set_poses({})  # nothing named: nothing changes
    np.testing.assert_allclose(by_name.poses[0].numpy(), [new_b] * 3, atol=1e-12)


def test_set_poses_and_enabled_by_name_in_several_envs():
    box = _box((1, 1, 1))
    world = MeshWorld.from_envs([{"a": box, "b": box}, {"b": box}])
    world.set_poses({(1, "b"): [0, 0, 3, 1, 0, 0, 0], (0, "a"): [1, 0, 0, 1, 0, 0, 0]})
    expected = torch.tensor([0, 0, 0, 1, 0, 0, 0], dtype=torch.float64).repeat(2, 2, 1)
    expected[1, 0, 2] = 3
    expected[0, 0, 0] = 1
    torch.testing.assert_close(world.poses, expected)
    world.set_enabled({(0, "b"): False})
    assert world.enabled.tolist() == [[True, False], [True, False]]
    world.set_enabled({(0, "b"): torch.tensor(True), (1, "b"): 0})
    assert world.enabled.tolist() == [[True, True], [False, False]]
    with pytest.raises(ValueError, match=r"2 environments, so keys are \(env, name\) pairs"):
        world.set_poses({"a": [0, 0, 0, 1, 0, 0, 0]})
    with pytest.raises(ValueError, match="no entry named 'a' in environment 1; the names are \\['b'\\]"):
        world.set_enabled({(1, "a"): True})
    with pytest.raises(ValueError, match="names environment 2; this world has 2"):
        world.set_enabled({(2, "a"): True})


def test_set_enabled_by_name_equals_the_tensor_form():
    entries = {"a": _box((1, 1, 1)), "b": trimesh.creation.icosphere(radius=0.3)}
    world = MeshWorld(entries, poses={"b": [2, 0, 0, 1, 0, 0, 0]})
    world.set_enabled({"a": False})
    assert world.enabled.tolist() == [[False, True]]
    points = np.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
    reference = MeshWorld(list(entries.values()), poses=[[0, 0, 0, 1, 0, 0, 0], [2, 0, 0, 1, 0, 0, 0]])
    reference.set_enabled([False, True])
    np.testing.assert_array_equal(_sd(world, points), _sd(reference, points))
    world.set_enabled({"a": True, "b": np.bool_(False)})
    assert world.enabled.tolist() == [[True, False]]


def test_unknown_names_and_bad_values():
    world = MeshWorld({"table": _box((1, 1, 1)), "shelf": _box((1, 1, 1))})
    with pytest.raises(ValueError, match=r"no entry named 'tabel'; the names are \['table', 'shelf'\]"):
        world.set_poses({"tabel": [0, 0, 0, 1, 0, 0, 0]})
    with pytest.raises(ValueError, match=r"mask: no entry named 'x'"):
        world.set_enabled({"x": True})
    with pytest.raises(TypeError, match="names are strings"):
        world.set_poses({3: [0, 0, 0, 1, 0, 0, 0]})
    with pytest.raises(ValueError, match=r"poses\['table'\] must be \[x, y, z, qw, qx, qy, qz\]"):
        world.set_poses({"table": [0, 0, 0]})
    with pytest.raises(ValueError, match="unit quaternion"):
        world.set_poses({"table": [0, 0, 0, 2, 0, 0, 0]})
    with pytest.raises(TypeError, match=r"mask\['table'\] must be a bool"):
        world.set_enabled({"table": "yes"})
    with pytest.raises(ValueError, match="name the same entry"):
        world.set_enabled({"table": True, (0, "table"): False})
    with pytest.raises(ValueError, match="no entry named 'tabel'"):
        MeshWorld({"table": _box((1, 1, 1))}, poses={"tabel": [0, 0, 0, 1, 0, 0, 0]})
    # an unnamed world has no names to use
    with pytest.raises(ValueError, match=r"the names are \[\]"):
        MeshWorld([_box((1, 1, 1))]).set_poses({"a": [0, 0, 0, 1, 0, 0, 0]})


@pytest.mark.parametrize(
    "key",
    [(True, "b"), (np.True_, "b"), (np.int64(1), "b"), (1, "b"), (1.0, "b"), (2, "b"), (1, "x"), "b", (1, 2)],
)
def test_constructor_poses_read_like_set_poses(key):
    """The constructors read a dict of poses as set_poses reads one (one parser): the same keys taken (to the
    same slot), the same refused with the same error type (set_poses refuses a bool environment, takes a
    NumPy integer)."""
    box = _box((1, 1, 1))
    pose = [0.0, 0.0, 2.0, 1.0, 0.0, 0.0, 0.0]

    def outcome(call):
        try:
            return call().poses
        except (TypeError, ValueError) as exc:
            return type(exc)

    def by_set_poses():
        world = MeshWorld.from_envs([{"a": box, "b": box}, {"b": box}])
        world.set_poses({key: pose})
        return world

    want = outcome(by_set_poses)
    got = outcome(lambda: MeshWorld.from_envs([{"a": box, "b": box}, {"b": box}], poses={key: pose}))
    if isinstance(want, type):
        assert got is want
    else:
        torch.testing.assert_close(got, want)
    if isinstance(key, tuple) and isinstance(key[0], (bool, np.bool_)):
        assert want is TypeError  # a bool is not an environment
    if isinstance(key, tuple) and isinstance(key[0], np.int64):
        assert want[1, 0, 2].item() == 2.0  # environment 1's "b"


def test_one_environment_constructor_takes_env_name_keys():
    """``MeshWorld({"a": s}, poses={(0, "a"): p})`` is taken, as set_poses takes ``(0, name)``."""
    ball = warpgeo.Sphere(0.25)
    pose = [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    world = MeshWorld({"a": ball, "b": ball}, poses={(0, "a"): pose, "b": pose})
    expected = torch.tensor([pose, pose], dtype=torch.float64)
    torch.testing.assert_close(world.poses[0], expected)
    with pytest.raises(ValueError, match="name the same entry"):
        MeshWorld({"a": ball}, poses={(0, "a"): pose, "a": pose})
    with pytest.raises(TypeError, match="must be an int"):
        MeshWorld({"a": ball}, poses={(False, "a"): pose})


# --------------------------------------------------------------------------------------------------------
# scenes
# --------------------------------------------------------------------------------------------------------


def _two_box_scene(rng) -> tuple[trimesh.Scene, dict]:
    """A scene of two boxes with rigid transforms, and the same as hand-posed meshes {node: (mesh, pose)}."""
    scene = trimesh.Scene()
    placed = {}
    for node, dims in (("left", (1.0, 0.4, 0.6)), ("right", (0.3, 0.8, 0.5))):
        mesh = _box(dims)
        matrix = _matrix(_random_pose(rng))
        scene.add_geometry(mesh, node_name=node, geom_name=f"{node}_box", transform=matrix)
        placed[node] = (mesh, _pose_of(matrix), dims)
    return scene, placed


def test_scene_in_memory_equals_the_meshes_posed_by_hand():
    rng = np.random.default_rng(2)
    scene, placed = _two_box_scene(rng)
    world = MeshWorld([scene])
    assert world.num_meshes == (2,) and world.names == [["left", "right"]]
    by_hand = MeshWorld([m for m, _, _ in placed.values()], poses=[p for _, p, _ in placed.values()])
    points = _points(rng)
    np.testing.assert_allclose(_sd(world, points), _sd(by_hand, points), atol=1e-6)
    analytic = np.minimum(*(_box_sdf(points, dims, pose) for _, pose, dims in placed.values()))
    np.testing.assert_allclose(_sd(world, points), analytic, atol=1e-5)
    # the poses are the nodes' (quaternion up to sign)
    for m, (_, pose, _) in enumerate(placed.values()):
        got = world.poses[0, m].numpy()
        np.testing.assert_allclose(got[:3], pose[:3], atol=1e-9)
        assert abs(abs(got[3:] @ np.asarray(pose[3:])) - 1) < 1e-9


def test_scene_poses_compose_with_the_node_transforms():
    rng = np.random.default_rng(3)
    scene, placed = _two_box_scene(rng)
    outer = _random_pose(rng)
    ball = trimesh.creation.icosphere(radius=0.2)
    world = MeshWorld({"ball": ball, "kit": scene}, poses=[[0, 0, 2, 1, 0, 0, 0], outer])
    assert world.names == [["ball", "kit/left", "kit/right"]]
    hand_poses = [[0, 0, 2, 1, 0, 0, 0]]
    hand_poses += [_pose_of(_matrix(outer) @ _matrix(p)) for _, p, _ in placed.values()]
    by_hand = MeshWorld([ball, *(m for m, _, _ in placed.values())], poses=hand_poses)
    points = _points(rng)
    np.testing.assert_allclose(_sd(world, points), _sd(by_hand, points), atol=1e-6)
    # the same by name at construction
    named = MeshWorld({"ball": ball, "kit": scene}, poses={"kit": outer, "ball": [0, 0, 2, 1, 0, 0, 0]})
    torch.testing.assert_close(named.poses, world.poses)
    # after construction the slots are the geometries: move one by name
    world.set_poses({"kit/left": [0, 0, -3, 1, 0, 0, 0]})
    assert _sd(world, np.array([[0.0, 0.0, -3.0]]))[0] < 0
    # from_envs: (E, entries as given, 7) and {(env, name): pose}
    envs = MeshWorld.from_envs([[scene], {"s": scene}], poses={(1, "s"): outer})
    assert envs.names == [["left", "right"], ["s/left", "s/right"]]
    torch.testing.assert_close(envs.poses[1], named.poses[0, 1:])
    with pytest.raises(ValueError, match=r"poses must have shape \(2, 7\) \(one per entry as given"):
        MeshWorld({"ball": ball, "kit": scene}, poses=hand_poses)


def test_scene_scale_is_baked_into_the_vertices():
    rng = np.random.default_rng(4)
    mesh = _box((1.0, 0.5, 0.25))
    rotation = _matrix(_random_pose(rng))
    scaled = rotation @ np.diag([2.0, 1.0, 3.0, 1.0])
    mirrored = _matrix(_random_pose(rng)) @ np.diag([-1.5, 1.0, 1.0, 1.0])
    scene = trimesh.Scene()
    scene.add_geometry(mesh, node_name="scaled", geom_name="g", transform=scaled)
    scene.graph.update(frame_to="mirrored", frame_from=scene.graph.base_frame, geometry="g", matrix=mirrored)
    world = MeshWorld([scene])
    reference = MeshWorld([mesh.copy().apply_transform(scaled), mesh.copy().apply_transform(mirrored)])
    points = _points(rng, spread=3.0)
    np.testing.assert_allclose(_sd(world, points), _sd(reference, points), atol=2e-6)
    # the pose keeps the rigid part: the rotation's translation and the nearest rotation
    np.testing.assert_allclose(world.poses[0, 0, :3].numpy(), scaled[:3, 3], atol=1e-12)
    # and the mirrored box is solid (inside negative), not inside-out
    centre = mirrored[:3, 3]
    assert _sd(world, centre[None])[0] < -0.1


def test_scene_instanced_geometry_gives_one_slot_per_node():
    mesh = _box((1, 1, 1))
    scene = trimesh.Scene()
    scene.add_geometry(mesh, node_name="first", geom_name="cube", transform=_matrix([2, 0, 0, 1, 0, 0, 0]))
    scene.graph.update(
        frame_to="second",
        frame_from=scene.graph.base_frame,
        geometry="cube",
        matrix=_matrix([-2, 0, 0, 1, 0, 0, 0]),
    )
    assert len(scene.geometry) == 1
    world = MeshWorld([scene])
    assert world.names == [["first", "second"]]
    ids = world.kernel_args().world[0]
    assert ids[0, 0] == ids[0, 1]  # one BVH for both
    sd = _sd(world, np.array([[2.0, 0, 0], [-2.0, 0, 0], [0.0, 0, 0]]))
    np.testing.assert_allclose(sd, [-0.5, -0.5, 1.5], atol=1e-6)


def test_scene_file_gives_separate_entries(tmp_path):
    rng = np.random.default_rng(5)
    scene, placed = _two_box_scene(rng)
    path = tmp_path / "two_boxes.glb"
    scene.export(path)
    world = MeshWorld([path])
    assert world.num_meshes == (2,)  # not one concatenated mesh
    assert sorted(world.names[0]) == ["left", "right"]
    in_memory = MeshWorld([scene])
    points = _points(rng)
    np.testing.assert_allclose(_sd(world, points), _sd(in_memory, points), atol=1e-5)
    # each can be switched off alone
    world.set_enabled({"left": False})
    left_only = np.minimum.reduce([_box_sdf(points, placed["right"][2], placed["right"][1])])
    np.testing.assert_allclose(_sd(world, points), left_only, atol=1e-5)
    # named: "<name>/<node>"; a one-geometry scene file is one entry, named as given
    single = tmp_path / "one.glb"
    _box((1, 1, 1)).export(single)
    named = MeshWorld({"boxes": str(path), "one": single})
    assert sorted(named.names[0]) == ["boxes/left", "boxes/right", "one"]
    assert MeshWorld([single, single]).names == [[None, None]]


def test_obj_with_material_groups_stays_one_mesh(tmp_path):
    # trimesh loads this closed tetrahedron as a scene of two open halves; as a world entry it is one mesh
    (tmp_path / "two.mtl").write_text("newmtl red\nKd 1 0 0\nnewmtl blue\nKd 0 0 1\n")
    (tmp_path / "tet.obj").write_text(
        "mtllib two.mtl\nv 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nusemtl red\nf 1 3 2\nf 1 2 4\n"
        "usemtl blue\nf 1 4 3\nf 2 3 4\n"
    )
    world = MeshWorld([tmp_path / "tet.obj"])
    assert world.num_meshes == (1,)
    assert _sd(world, np.array([[0.1, 0.1, 0.1]]))[0] == pytest.approx(-0.1, abs=1e-6)


def test_scene_sign_methods_and_errors():
    scene, _ = _two_box_scene(np.random.default_rng(6))
    world = MeshWorld([scene, _box((1, 1, 1))], sign_method=["normal", "winding"])
    assert world.sign_method == ["normal", "winding"]  # as given
    assert world.kernel_args().world[list(warpgeo.world.WORLD_FIELDS).index("sign")].tolist() == [
        [
            warpgeo._world.prepare.SIGN_METHODS["normal"],
            warpgeo._world.prepare.SIGN_METHODS["normal"],
            warpgeo._world.prepare.SIGN_METHODS["winding"],
        ]
    ]
    with pytest.raises(ValueError, match="the scene holds no geometry"):
        MeshWorld({"empty": trimesh.Scene()})
    cloud = trimesh.Scene()
    cloud.add_geometry(trimesh.PointCloud(np.random.default_rng(0).random((10, 3))), node_name="pts")
    with pytest.raises(ValueError, match=r"meshes\[0\]: scene node 'pts' holds a PointCloud"):
        MeshWorld([cloud])
    # a bad geometry's message names its slot and where the slot came from
    bad = trimesh.Scene()
    bad.add_geometry(_box((1, 1, 1)), node_name="ok")
    bad.add_geometry(trimesh.Trimesh(np.array([[0, 0, 0], [1, 0, 0], [np.nan, 1, 0]]), [[0, 1, 2]], process=False),
                     node_name="nan")  # fmt: skip
    with pytest.raises(ValueError, match=r"finite.*meshes\[1\] = node 'nan' of meshes\[0\]"):
        MeshWorld([bad])


# --------------------------------------------------------------------------------------------------------
# cuRobo world configurations
# --------------------------------------------------------------------------------------------------------


def _config(rng) -> dict:
    return {
        "cuboid": {
            "table": {"dims": [1.2, 0.8, 0.1], "pose": _random_pose(rng), "color": [0.5, 0.5, 0.5, 1.0]},
            "wall": {"dims": [0.1, 2.0, 1.0], "pose": _random_pose(rng)},
        },
        "sphere": {
            "ball": {"radius": 0.2, "position": [0.5, -0.5, 0.3]},
            "ball2": {"radius": 0.15, "pose": [-0.5, 0.5, 0.1, 1, 0, 0, 0], "material": {"metallic": 0.0}},
        },
        "capsule": {
            "pole": {
                "radius": 0.1,
                "base": [0.1, -0.2, 0.0],
                "tip": [0.3, 0.4, 0.9],
                "pose": _random_pose(rng),
            },
            "down": {"radius": 0.05, "base": [0, 0, 0.5], "tip": [0, 0, -0.5], "pose": _random_pose(rng)},
            "dot": {"radius": 0.1, "base": [0.2, 0.2, 0.2], "tip": [0.2, 0.2, 0.2]},
        },
        "cylinder": {"can": {"radius": 0.15, "height": 0.6, "pose": _random_pose(rng), "tensor_args": None}},
    }


def _config_sdf(config: dict, points: np.ndarray) -> np.ndarray:
    """The union's distance, each obstacle by its own closed form in NumPy."""
    parts = []
    for item in config["cuboid"].values():
        parts.append(_box_sdf(points, item["dims"], item["pose"]))
    for item in config["sphere"].values():
        centre = item["position"] if "position" in item else item["pose"][:3]
        parts.append(np.linalg.norm(points - np.asarray(centre), axis=1) - item["radius"])
    for item in config["capsule"].values():
        pose = item.get("pose", [0, 0, 0, 1, 0, 0, 0])
        parts.append(_segment_sdf(points, item["base"], item["tip"], item["radius"], pose))
    for item in config["cylinder"].values():
        parts.append(_cylinder_sdf(points, item["radius"], item["height"], item["pose"]))
    return np.minimum.reduce(parts)


def test_curobo_dict_every_primitive_against_closed_forms():
    rng = np.random.default_rng(7)
    config = _config(rng)
    world = load_world(config)
    assert world.names == [["table", "wall", "ball", "ball2", "pole", "down", "dot", "can"]]
    points = _points(rng, n=2000, spread=1.5)
    np.testing.assert_allclose(_sd(world, points), _config_sdf(config, points), atol=1e-5)
    # the capsules alone, each against its segment (base/tip conversion, -z axis, a degenerate one)
    for name in ("pole", "down", "dot"):
        world.set_enabled({n: n == name for n in world.names[0]})
        item = config["capsule"][name]
        pose = item.get("pose", [0, 0, 0, 1, 0, 0, 0])
        expected = _segment_sdf(points, item["base"], item["tip"], item["radius"], pose)
        np.testing.assert_allclose(_sd(world, points), expected, atol=1e-5)


def test_curobo_yaml_file_equals_the_dict(tmp_path):
    yaml = pytest.importorskip("yaml")
    rng = np.random.default_rng(8)
    config = _config(rng)
    path = tmp_path / "world.yml"
    path.write_text(
        yaml.safe_dump({k: {n: dict(v) for n, v in d.items()} for k, d in config.items()}, sort_keys=False)
    )
    from_file = load_world(str(path))
    from_dict = load_world(config)
    assert from_file.names == from_dict.names
    torch.testing.assert_close(from_file.poses, from_dict.poses)
    points = _points(rng)
    np.testing.assert_array_equal(_sd(from_file, points), _sd(from_dict, points))


def test_curobo_mesh_with_scale_and_mesh_root(tmp_path):
    yaml = pytest.importorskip("yaml")
    rng = np.random.default_rng(9)
    assets = tmp_path / "assets"
    assets.mkdir()
    _box((1, 1, 1)).export(assets / "cube.stl")
    pose = _random_pose(rng)
    config = {
        "mesh": {"crate": {"file_path": "cube.stl", "pose": pose, "scale": [0.5, 1.0, 2.0], "urdf_path": "x"}}
    }
    world = load_world(config, mesh_root=assets)
    points = _points(rng)
    expected = _box_sdf(points, [0.5, 1.0, 2.0], pose)
    np.testing.assert_allclose(_sd(world, points), expected, atol=1e-5)
    by_hand = MeshWorld([_box((0.5, 1.0, 2.0))], poses=[pose])
    np.testing.assert_allclose(_sd(world, points), _sd(by_hand, points), atol=1e-6)
    # a YAML file's folder is the default mesh_root; one scale factor for all axes; inline vertices
    config["mesh"]["crate"]["scale"] = 0.5
    (assets / "world.yaml").write_text(yaml.safe_dump(config))
    np.testing.assert_allclose(
        _sd(load_world(assets / "world.yaml"), points), _box_sdf(points, [0.5] * 3, pose), atol=1e-5
    )
    cube = _box((1, 1, 1))
    inline = {
        "mesh": {
            "m": {
                "vertices": cube.vertices.tolist(),
                "faces": cube.faces.reshape(-1).tolist(),
                "scale": [2, 2, 2],
            }
        }
    }
    np.testing.assert_allclose(
        _sd(load_world(inline), points), _box_sdf(points, [2, 2, 2], [0, 0, 0, 1, 0, 0, 0]), atol=1e-5
    )
    with pytest.raises(ValueError, match=r"crate.file_path: no such mesh file .*missing.stl"):
        load_world({"mesh": {"crate": {"file_path": "missing.stl"}}}, mesh_root=assets)


def test_curobo_mesh_root_is_where_paths_start_not_a_boundary(tmp_path):
    """As cuRobo joins its asset path: a relative file_path starts at mesh_root, `../` climbs out of it and
    an absolute path ignores it; the docstring says so."""
    _box((1, 1, 1)).export(tmp_path / "cube.stl")
    inner = tmp_path / "assets" / "inner"
    inner.mkdir(parents=True)
    for file_path in ("../../cube.stl", str(tmp_path / "cube.stl")):
        world = load_world({"mesh": {"crate": {"file_path": file_path}}}, mesh_root=inner)
        assert world.names == [["crate"]]
    doc = " ".join(load_world.__doc__.split())
    assert "mesh_root: the folder that a relative" in doc
    assert "``../`` and absolute paths" in doc and "not a boundary" in doc


def test_curobo_costs_equal_a_world_built_by_hand(tmp_path):
    rng = np.random.default_rng(10)
    _box((1, 1, 1)).export(tmp_path / "cube.obj")
    poses = [_random_pose(rng) for _ in range(3)]
    config = {
        "cuboid": {
            "a": {"dims": [1.0, 0.5, 0.2], "pose": poses[0]},
            "b": {"dims": [0.3, 0.3, 1.5], "pose": poses[1]},
        },
        "mesh": {"c": {"file_path": str(tmp_path / "cube.obj"), "pose": poses[2], "scale": [0.4, 0.4, 0.4]}},
    }
    world = load_world(config)
    by_hand = MeshWorld([_box((1.0, 0.5, 0.2)), _box((0.3, 0.3, 1.5)), _box((0.4, 0.4, 0.4))], poses=poses)
    spheres = torch.cat(
        [
            torch.rand(2, 4, 64, 3, dtype=torch.float64) * 3 - 1.5,
            torch.full((2, 4, 64, 1), 0.1, dtype=torch.float64),
        ],
        -1,
    )
    cost = sphere_mesh_cost(spheres, world, activation_distance=0.05)
    reference = sphere_mesh_cost(spheres, by_hand, activation_distance=0.05)
    assert (reference > 0).any() and (reference == 0).any()
    torch.testing.assert_close(cost, reference, atol=1e-6, rtol=1e-6)
    # by name, as by index
    new_pose = _random_pose(rng)
    world.set_poses({"b": new_pose})
    by_hand.set_poses([poses[0], new_pose, poses[2]])
    torch.testing.assert_close(
        sphere_mesh_cost(spheres, world, activation_distance=0.05),
        sphere_mesh_cost(spheres, by_hand, activation_distance=0.05),
        atol=1e-6,
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    ("config", "error", "match"),
    [
        ({"cubiod": {"t": {"dims": [1, 1, 1]}}}, ValueError, "unknown obstacle type 'cubiod'"),
        ({"cuboid": {"t": {"dims": [1, 1, 1], "dimz": 3}}}, ValueError, r"cuboid.t: unknown field 'dimz'"),
        ({"mesh": {"m": {"file_path": "a.obj", "colour": 1}}}, ValueError, "unknown field 'colour'"),
        ({"blox": {"map": {"map_path": "x.nvblx"}}}, ValueError, "blox maps .* not supported"),
        (
            {"voxel": {"v": {"dims": [0.2, 0.2, 0.2], "voxel_size": 0.1, "feature_tensor": [0.0] * 7}}},
            ValueError,
            r"voxel.v.feature_tensor must hold 8 values",
        ),
        ({"cuboid": {"t": {"pose": [0, 0, 0, 1, 0, 0, 0]}}}, ValueError, "a cuboid needs 'dims'"),
        ({"cuboid": {"t": {"dims": [1, 1]}}}, ValueError, r"cuboid.t.dims must hold 3 numbers"),
        (
            {"cuboid": {"t": {"dims": [1, 1, 1], "pose": [0, 0, 0, 2, 0, 0, 0]}}},
            ValueError,
            r"cuboid.t.pose .*unit",
        ),
        (
            {"cuboid": {"t": {"dims": [1, 1, 1], "scale": [2, 2, 2]}}},
            ValueError,
            "cuRobo ignores scale on a cuboid",
        ),
        ({"cuboid": {"t": {"dims": [1, 1, 1], "name": "u"}}}, ValueError, "field 'name' is 'u'"),
        ({"cuboid": {"t": {"dims": [1, -1, 1]}}}, ValueError, r"dims\[1\] must be finite and > 0"),
        ({"sphere": {"s": {"radius": "big"}}}, TypeError, "sphere.s.radius must be a number"),
        (
            {"sphere": {"s": {"radius": 1, "position": [0, 0, 0], "pose": [1, 0, 0, 1, 0, 0, 0]}}},
            ValueError,
            "disagree",
        ),
        ({"mesh": {"m": {"pose": [0, 0, 0, 1, 0, 0, 0]}}}, ValueError, "needs 'file_path' or 'vertices'"),
        ({"mesh": {"m": {"file_string": "..."}}}, ValueError, "'file_string' is not supported"),
        ({"cuboid": [{"dims": [1, 1, 1]}]}, TypeError, "must map names to obstacles"),
        (
            {"cuboid": {"t": {"dims": [1, 1, 1]}}, "sphere": {"t": {"radius": 1}}},
            ValueError,
            "'t' is given twice",
        ),
    ],
)
def test_curobo_bad_configs(config, error, match):
    with pytest.raises(error, match=match):
        load_world(config)


def test_curobo_accepts_cosmetic_fields_and_empty_types(tmp_path):
    config = {
        "cuboid": {
            "t": {
                "dims": [1, 1, 1],
                "name": "t",
                "color": [1, 0, 0, 1],
                "texture": "wood",
                "texture_id": "x",
                "scale": [1, 1, 1],
                "material": {"metallic": 0.1, "roughness": 0.4},
                "tensor_args": {"device": "cuda:0"},
            }
        },
        "sphere": None,
        "mesh": {},
    }
    world = load_world(config)
    assert world.names == [["t"]]
    assert _sd(world, np.zeros((1, 3)))[0] == pytest.approx(-0.5, abs=1e-6)
    with pytest.raises(TypeError, match="config must be a dict or a YAML file path"):
        load_world(42)
    with pytest.raises(ValueError, match="no such file"):
        load_world(tmp_path / "missing.yml")
    (tmp_path / "list.yml").write_text("- a\n- b\n")
    pytest.importorskip("yaml")
    with pytest.raises(ValueError, match="must hold a mapping of obstacle types"):
        load_world(tmp_path / "list.yml")


def test_curobo_rotation_conventions_match_trimesh():
    # a capsule along x (base/tip) turned 90 degrees about z by its pose: along y in the world
    c, s = math.cos(math.pi / 4), math.sin(math.pi / 4)
    world = load_world(
        {
            "capsule": {
                "c": {"radius": 0.1, "base": [-0.5, 0, 0], "tip": [0.5, 0, 0], "pose": [1, 2, 3, c, 0, 0, s]}
            }
        }
    )
    sd = _sd(world, np.array([[1.0, 2.5, 3.0], [1.0, 2.7, 3.0], [1.5, 2.0, 3.0]]))
    np.testing.assert_allclose(sd, [-0.1, 0.1, 0.4], atol=1e-6)


def _open_top_box() -> trimesh.Trimesh:
    """A unit box without its two +z faces: an open bin (ten faces)."""
    box = trimesh.creation.box((1, 1, 1))
    return trimesh.Trimesh(box.vertices, box.faces[box.face_normals[:, 2] < 0.5], process=False)


def test_an_open_mesh_signed_by_ray_warns_once_per_world():
    """An open bin signed by "ray" reads points in its opening as inside; the world says so once, at
    construction, naming the mesh, the method and the alternatives; closed meshes, "winding" and "unsigned"
    are silent, and so are queries."""
    import warnings

    bin_mesh = _open_top_box()
    assert len(bin_mesh.faces) == 10 and not bin_mesh.is_watertight  # independent of warpgeo: open
    with pytest.warns(UserWarning) as caught:
        world = MeshWorld({"box": _box((1, 1, 1)), "bin": bin_mesh})
    messages = [str(w.message) for w in caught if "open mesh" in str(w.message)]
    assert len(messages) == 1, messages
    assert "meshes[1] ('bin')" in messages[0] and "meshes[0]" not in messages[0]
    assert "'ray'" in messages[0] and "'winding'" in messages[0] and "'unsigned'" in messages[0]
    assert caught[0].filename == __file__  # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        signed_distance(torch.zeros(4, 3), world)  # not per query
        MeshWorld([_box((1, 1, 1)), _box((2, 1, 1))])  # closed
        ball = trimesh.creation.icosphere(subdivisions=2)
        soup = ball.vertices[ball.faces].reshape(-1, 3), np.arange(3 * len(ball.faces)).reshape(-1, 3)
        MeshWorld([soup])  # closed, as unwelded triangles (its edges pair up by position)
        MeshWorld([bin_mesh], sign_method="winding")
        MeshWorld([bin_mesh], sign_method="unsigned")
        MeshWorld([bin_mesh, warpgeo.Sphere(0.5)], sign_method=["unsigned", "ray"])
    # several environments: one warning for the world, each slot named, the method as asked
    with pytest.warns(UserWarning, match="open mesh") as caught:
        MeshWorld.from_envs([[bin_mesh], [_box((1, 1, 1)), bin_mesh]], sign_method="normal")
    messages = [str(w.message) for w in caught if "open mesh" in str(w.message)]
    assert len(messages) == 1
    assert "envs[0][0], envs[1][1]" in messages[0] and "'normal'" in messages[0]


def test_the_open_mesh_warning_blames_each_slot_by_its_own_sign_method():
    """One open mesh in two slots, signed "ray" in one and "unsigned" in the other (their slots share its data):
    only the "ray" slot is named, and only "ray" as the method used (not "unsigned", which the warning
    recommends)."""
    bin_mesh = _open_top_box()
    with pytest.warns(UserWarning, match="open mesh") as caught:
        MeshWorld([bin_mesh, bin_mesh], sign_method=["ray", "unsigned"])
    messages = [str(w.message) for w in caught if "open mesh" in str(w.message)]
    assert len(messages) == 1, messages
    assert "meshes[0] is an open mesh" in messages[0] and "meshes[1]" not in messages[0], messages[0]
    assert "sign_method='ray'," in messages[0] and "sign_method='ray' / 'unsigned'" not in messages[0]
    with pytest.warns(UserWarning, match="open mesh") as caught:  # the other way round, and as copies
        MeshWorld([bin_mesh.copy(), bin_mesh.copy()], sign_method=["unsigned", "normal"])
    messages = [str(w.message) for w in caught if "open mesh" in str(w.message)]
    assert (
        len(messages) == 1 and "meshes[1] is an open mesh" in messages[0] and "meshes[0]" not in messages[0]
    )
    assert "sign_method='normal'," in messages[0]
