"""warpgeo.Robot: forward kinematics (link poses, spheres) against pytorch_kinematics and an independent
NumPy reference (4x4 matrices from the URDF's XML, read here with ElementTree), gradients, the op
template's promises (opcheck, torch.compile, threads), hostile inputs and URDF errors."""

from __future__ import annotations

import math
import os
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import torch

import warpgeo
from warpgeo import robot as robot_module
from warpgeo.robot import Robot

HERE = os.path.dirname(__file__)
ROBOTS = os.path.join(HERE, "data", "robots")
ARM7 = os.path.join(HERE, "..", "examples", "data", "arm7.urdf")
URDFS = {name: os.path.join(ROBOTS, f"{name}.urdf") for name in ("serial3", "branched", "prismatic", "mimic")}
URDFS["arm7"] = ARM7


# --------------------------------------------------------------------------------------------------------
# the reference: the URDF's XML read with ElementTree, 4x4 matrices, joint by joint
# --------------------------------------------------------------------------------------------------------


def rpy_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """URDF's fixed-axis roll, pitch, yaw: R = Rz(yaw) Ry(pitch) Rx(roll)."""
    cr, sr, cp, sp, cy, sy = (math.cos(roll), math.sin(roll), math.cos(pitch), math.sin(pitch),
                              math.cos(yaw), math.sin(yaw))  # fmt: skip
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


def axis_angle_matrix(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rodrigues' formula."""
    k = axis / np.linalg.norm(axis)
    cross = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(angle) * cross + (1 - math.cos(angle)) * cross @ cross


def reference_fk(path: str, values: dict[str, float]) -> dict[str, np.ndarray]:
    """Every link's 4x4 pose in the root's frame; ``values`` by joint name (mimic joints computed here)."""
    root = ET.parse(path).getroot()
    joints = {}
    for j in root.findall("joint"):
        origin = j.find("origin")
        xyz = [0.0, 0.0, 0.0] if origin is None else [float(v) for v in origin.get("xyz", "0 0 0").split()]
        rpy = [0.0, 0.0, 0.0] if origin is None else [float(v) for v in origin.get("rpy", "0 0 0").split()]
        axis = j.find("axis")
        mimic = j.find("mimic")
        joints[j.get("name")] = {
            "type": j.get("type"),
            "parent": j.find("parent").get("link"),
            "child": j.find("child").get("link"),
            "xyz": np.array(xyz),
            "rpy": rpy,
            "axis": np.array([1.0, 0, 0] if axis is None else [float(v) for v in axis.get("xyz").split()]),
            "mimic": None
            if mimic is None
            else (mimic.get("joint"), float(mimic.get("multiplier", 1)), float(mimic.get("offset", 0))),
        }
    children = {j["child"] for j in joints.values()}
    base = next(link.get("name") for link in root.findall("link") if link.get("name") not in children)
    poses = {base: np.eye(4)}
    pending = list(joints.items())
    while pending:
        name, j = pending.pop(0)
        if j["parent"] not in poses:
            pending.append((name, j))
            continue
        origin = np.eye(4)
        origin[:3, :3] = rpy_matrix(*j["rpy"])
        origin[:3, 3] = j["xyz"]
        motion = np.eye(4)
        if j["type"] != "fixed":
            value = values.get(name, 0.0)
            if j["mimic"] is not None:
                target, mult, offset = j["mimic"]
                value = mult * values.get(target, 0.0) + offset
            if j["type"] in ("revolute", "continuous"):
                motion[:3, :3] = axis_angle_matrix(j["axis"], value)
            else:
                motion[:3, 3] = j["axis"] / np.linalg.norm(j["axis"]) * value
        poses[j["child"]] = poses[j["parent"]] @ origin @ motion
    return poses


def quat_matrix(q: np.ndarray) -> np.ndarray:
    """[qw, qx, qy, qz] (unit) -> 3x3."""
    w, x, y, z = q / np.linalg.norm(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])  # fmt: skip


def pose_matrix(pose: np.ndarray) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3] = quat_matrix(pose[3:])
    m[:3, 3] = pose[:3]
    return m


def random_q(robot: Robot, batch: int, dtype=torch.float64, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(batch, robot.dof, generator=g, dtype=torch.float64) * 4 - 2).to(dtype)


def some_spheres(robot: Robot, per_link: int = 2, seed: int = 1) -> dict[str, list[list[float]]]:
    rng = np.random.default_rng(seed)
    return {
        link: np.concatenate(
            [rng.uniform(-0.2, 0.2, (per_link, 3)), rng.uniform(0.02, 0.08, (per_link, 1))], 1
        ).tolist()
        for link in robot.link_names
    }


def load(name: str, **kwargs) -> Robot:
    bare = Robot.from_urdf(URDFS[name])
    return Robot.from_urdf(URDFS[name], spheres=some_spheres(bare), **kwargs)


# --------------------------------------------------------------------------------------------------------
# accuracy
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(URDFS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_link_poses_match_numpy_reference(name, dtype, device):
    robot = load(name, device=device)
    q = random_q(robot, 6, dtype)
    poses = robot.link_poses(q.to(device)).double().cpu().numpy()
    spheres = robot.spheres(q.to(device)).double().cpu().numpy()
    tol = 1e-9 if dtype == torch.float64 else 2e-5
    for b in range(q.shape[0]):
        ref = reference_fk(URDFS[name], dict(zip(robot.joint_names, q[b].double().tolist(), strict=True)))
        for k, link in enumerate(robot.link_names):
            np.testing.assert_allclose(pose_matrix(poses[b, k]), ref[link], atol=tol, err_msg=link)
        for s in range(robot.sphere_links.shape[0]):
            frame = ref[robot.link_names[int(robot.sphere_links[s])]]
            local = robot._floats[torch.float64]["local_spheres"][s].cpu().numpy()
            centre = frame[:3, :3] @ local[:3] + frame[:3, 3]
            np.testing.assert_allclose(spheres[b, s, :3], centre, atol=tol)
            assert spheres[b, s, 3] == pytest.approx(local[3], abs=1e-6)


@pytest.mark.parametrize("name", ["serial3", "branched", "prismatic", "mimic", "arm7"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_link_poses_match_pytorch_kinematics(name, dtype, monkeypatch):
    pk = pytest.importorskip("pytorch_kinematics")
    robot = load(name)
    with open(URDFS[name], "rb") as f:
        data = f.read()
    chain = _pk_chain(pk, data, monkeypatch).to(dtype=dtype)
    q = random_q(robot, 8, dtype, seed=3)
    # pytorch_kinematics treats mimic joints as joints of their own: give them their mimic values
    values = {n: q[:, i] for i, n in enumerate(robot.joint_names)}
    root = ET.parse(URDFS[name]).getroot()
    for j in root.findall("joint"):
        m = j.find("mimic")
        if m is not None:
            values[j.get("name")] = float(m.get("multiplier", 1)) * values[m.get("joint")] + float(
                m.get("offset", 0)
            )
    th = torch.stack([values[n] for n in chain.get_joint_parameter_names()], dim=1)
    frames = chain.forward_kinematics(th)
    poses = robot.link_poses(q)
    tol = 1e-9 if dtype == torch.float64 else 1e-5
    for k, link in enumerate(robot.link_names):
        expected = frames[link].get_matrix()
        got = torch.stack([torch.from_numpy(pose_matrix(p)) for p in poses[:, k].double().numpy()])
        torch.testing.assert_close(got, expected.double(), atol=tol, rtol=0, msg=link)


def _pk_chain(pk, data: bytes, monkeypatch):
    """pytorch_kinematics' chain with its joints parsed in float64: its URDF reader makes the roll, pitch, yaw
    a float32 tensor, its joints normalise their axes in float32 and its Chain is float32 (float64 poses off
    by ~1e-8 otherwise)."""
    import pytorch_kinematics.transforms as tf
    import pytorch_kinematics.urdf as pk_urdf

    def convert(origin):
        if origin is None:
            return tf.Transform3d(dtype=torch.float64)
        rpy = torch.tensor(origin.rpy, dtype=torch.float64)
        pos = torch.tensor(origin.xyz, dtype=torch.float64)
        return tf.Transform3d(rot=tf.quaternion_from_euler(rpy, "sxyz"), pos=pos, dtype=torch.float64)

    base = pk_urdf.chain.Chain

    class Chain64(base):
        def __init__(self, root_frame, dtype=torch.float64, device="cpu"):
            super().__init__(root_frame, dtype=dtype, device=device)

    joint_init = pk_urdf.frame.Joint.__init__

    def joint64(self, *args, **kwargs):  # its axis is normalised in the joint's dtype
        kwargs["dtype"] = torch.float64
        joint_init(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(pk_urdf.frame.Joint, "__init__", joint64)
        patch.setattr(pk_urdf, "_convert_transform", convert)
        patch.setattr(pk_urdf.chain, "Chain", Chain64)
        return pk.build_chain_from_urdf(data)


def test_locked_joints_equal_the_full_robot_at_their_values():
    full = load("arm7")
    locked = load("arm7", lock_joints={"arm_joint3": 0.4, "arm_finger_joint1": 0.02})
    assert locked.joint_names == [f"arm_joint{i}" for i in (1, 2, 4, 5, 6, 7)]
    q = random_q(locked, 5)
    q_full = torch.zeros(5, full.dof, dtype=torch.float64)
    for i, n in enumerate(locked.joint_names):
        q_full[:, full.joint_names.index(n)] = q[:, i]
    q_full[:, full.joint_names.index("arm_joint3")] = 0.4
    q_full[:, full.joint_names.index("arm_finger_joint1")] = 0.02
    torch.testing.assert_close(locked.spheres(q), full.spheres(q_full), atol=1e-12, rtol=0)


def test_joint_names_order_and_base_link():
    robot = Robot.from_urdf(URDFS["serial3"], joint_names=["j3", "j1", "j2"])
    default = Robot.from_urdf(URDFS["serial3"])
    q = random_q(default, 4)
    torch.testing.assert_close(robot.link_poses(q[:, [2, 0, 1]]), default.link_poses(q))
    sub = Robot.from_urdf(URDFS["serial3"], base_link="link2")
    assert sub.link_names == ["link2", "link3", "tool"] and sub.joint_names == ["j3"]
    ref = reference_fk(URDFS["serial3"], {"j3": 0.7})
    base = np.linalg.inv(ref["link2"])
    got = sub.link_poses(torch.tensor([0.7], dtype=torch.float64)).numpy()
    np.testing.assert_allclose(pose_matrix(got[2]), base @ ref["tool"], atol=1e-12)


def test_batch_shapes_dtypes_and_empty():
    robot = load("branched")
    q = random_q(robot, 6).reshape(2, 3, robot.dof)
    assert robot.spheres(q).shape == (2, 3, robot.sphere_links.shape[0], 4)
    assert robot.link_poses(q[0, 0]).shape == (len(robot.link_names), 7)
    assert robot.spheres(q[:0]).shape == (0, 3, robot.sphere_links.shape[0], 4)
    half = robot.spheres(q.to(torch.float16))
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.float(), robot.spheres(q.to(torch.float16).float()), atol=2e-3, rtol=0)
    # an all-locked robot has no q columns
    still = Robot.from_urdf(URDFS["serial3"], lock_joints={"j1": 0.1, "j2": 0.2, "j3": 0.3})
    assert still.dof == 0 and still.link_poses(torch.zeros(4, 0)).shape == (4, 5, 7)


# --------------------------------------------------------------------------------------------------------
# gradients, opcheck, compile, threads
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["serial3", "branched", "prismatic", "mimic"])
def test_gradcheck(name, device):
    robot = load(name, device=device)
    q = random_q(robot, 3).to(device).requires_grad_(True)
    assert torch.autograd.gradcheck(robot.spheres, (q,))
    assert torch.autograd.gradcheck(robot.link_poses, (q,))
    both = lambda x: robot.spheres(x).sum() + robot.link_poses(x)[..., 2:5].pow(2).sum()  # noqa: E731
    assert torch.autograd.gradcheck(both, (q,))


def test_gradient_of_local_spheres():
    robot = load("mimic")
    q = random_q(robot, 3)
    local = robot._floats[torch.float64]["local_spheres"].clone().requires_grad_(True)
    tables = {**robot._index, **robot._floats[torch.float64], "local_spheres": local}

    def spheres(local_spheres):
        return robot_module._fk_op.call(q=q, **{**tables, "local_spheres": local_spheres})[1]

    assert torch.autograd.gradcheck(spheres, (local,))
    # the public way: robot.local_spheres.requires_grad_() (a float32 tensor), for any dtype of q
    robot.local_spheres.requires_grad_(True)
    for dtype in (torch.float32, torch.float64):
        robot.local_spheres.grad = None
        robot.spheres(q.to(dtype))[..., 3].sum().backward()
        expected = torch.zeros(robot.local_spheres.shape)
        expected[:, 3] = q.shape[0]  # each radius is copied into every configuration
        torch.testing.assert_close(robot.local_spheres.grad, expected)


def test_opcheck():
    robot = load("mimic")
    q = random_q(robot, 4).requires_grad_(True)
    args = (q, *robot._index.values(), *robot._floats[torch.float64].values())
    names = list(robot_module._fk_op.inputs)
    ordered = [
        dict(zip(["q", *robot._index, *robot._floats[torch.float64]], args, strict=True))[n] for n in names
    ]
    torch.library.opcheck(robot_module._fk_op.custom, tuple(ordered))
    poses, spheres = robot_module._fk_op.custom(*ordered)
    tables = ordered[1:]
    grad_args = (
        torch.randn_like(poses),
        torch.randn_like(spheres),
        q.detach(),
        poses.detach(),
        spheres.detach(),
    )
    torch.library.opcheck(robot_module._grad_op.custom, (*grad_args, *tables))
    torch.library.opcheck(robot_module._grad_op.custom, (None, grad_args[1], *grad_args[2:], *tables))


def test_compile_fullgraph_matches_eager():
    robot = load("arm7")
    q = random_q(robot, 5, torch.float32)

    def loss(x):
        s = robot.spheres(x)
        return warpgeo.self_collision_cost(s, robot.pairs, reduction="sum").sum() + s[..., :3].pow(2).sum()

    eager_q = q.clone().requires_grad_(True)
    eager = loss(eager_q)
    eager.backward()
    compiled_q = q.clone().requires_grad_(True)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")(compiled_q)
    compiled.backward()
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(compiled_q.grad, eager_q.grad)


def test_threads_agree():
    robot = load("arm7")
    qs = [random_q(robot, 64, seed=s) for s in range(4)]
    expected = [robot.spheres(q) for q in qs]
    got: list = [None] * 4

    def work(i):
        for _ in range(5):
            got[i] = robot.spheres(qs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=0, rtol=0)


# --------------------------------------------------------------------------------------------------------
# hostile inputs
# --------------------------------------------------------------------------------------------------------


def test_bad_q(device):
    robot = load("serial3", device=device)
    with pytest.raises(ValueError, match="q must be finite"):
        robot.spheres(torch.tensor([[0.0, math.nan, 0.0]], device=device))
    with pytest.raises(ValueError, match=r"q must have shape \(\.\.\., dof=3\)"):
        robot.spheres(torch.zeros(2, 4, device=device))
    with pytest.raises(TypeError, match="q must have dtype"):
        robot.spheres(torch.zeros(2, 3, dtype=torch.int64, device=device))
    with pytest.raises(TypeError, match=r"q must be a torch\.Tensor"):
        robot.spheres([[0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="device"):
        robot.spheres(torch.zeros(2, 3, device="meta"))
    with pytest.raises(ValueError, match=r"q may hold fewer than 2\*\*31"):
        robot.spheres(torch.zeros(1, 3, device=device).expand(2**31, 3))  # a view: nothing allocated
    with warpgeo.value_checks(False):
        out = robot.spheres(torch.tensor([[0.0, math.inf, math.nan]], device=device))
    assert out.shape == (1, robot.sphere_links.shape[0], 4)


def _op_args(robot: Robot, q: torch.Tensor, **changes) -> list:
    args = {"q": q, **robot._index, **robot._floats[torch.float64], **changes}
    return [args[n] for n in robot_module._fk_op.inputs]


@pytest.mark.parametrize(
    "change",
    [
        {"parents": torch.tensor([7, 100, -5, 2**30, 4], dtype=torch.int32)},
        {"joint_index": torch.tensor([-9, 2**30, 3, 1, 5], dtype=torch.int32)},
        {"sphere_links": None},
        {"joint_types": torch.tensor([9, -3, 1, 2, 2**30], dtype=torch.int32)},
    ],
)
def test_hostile_tables_through_torch_ops(change):
    robot = load("serial3")
    q = random_q(robot, 3)
    if "sphere_links" in change:
        links = torch.full_like(robot._index["sphere_links"], 2**30)
        links[0] = -7
        change = {"sphere_links": links}
    args = _op_args(robot, q, **change)
    if "joint_types" not in change:
        with pytest.raises(IndexError):
            torch.ops.warpgeo.forward_kinematics(*args)
    with warpgeo.value_checks(False):
        poses, spheres = torch.ops.warpgeo.forward_kinematics(*args)
        grad = torch.ops.warpgeo.forward_kinematics_backward(
            torch.ones_like(poses), torch.ones_like(spheres), q, poses, spheres, *args[1:]
        )
    assert poses.shape == (3, 5, 7) and grad.shape == (3, 3)


def test_bad_shapes_through_torch_ops():
    robot = load("serial3")
    q = random_q(robot, 2)
    with pytest.raises(ValueError, match="origins must have shape"):
        torch.ops.warpgeo.forward_kinematics(
            *_op_args(robot, q, origins=torch.zeros(5, 6, dtype=torch.float64))
        )
    with pytest.raises(ValueError, match="local_spheres must have shape"):
        torch.ops.warpgeo.forward_kinematics(*_op_args(robot, q, local_spheres=torch.zeros(1, 4).double()))
    with pytest.raises(TypeError, match="parents must be an int32"):
        torch.ops.warpgeo.forward_kinematics(*_op_args(robot, q, parents=torch.zeros(5, dtype=torch.int64)))
    with pytest.raises(TypeError, match="axes must have q's compute dtype"):
        torch.ops.warpgeo.forward_kinematics(*_op_args(robot, q, axes=torch.zeros(5, 3)))
    with pytest.raises(ValueError, match="q must have shape"):
        torch.ops.warpgeo.forward_kinematics(*_op_args(robot, q[0]))


# --------------------------------------------------------------------------------------------------------
# URDF errors and attach
# --------------------------------------------------------------------------------------------------------

_TWO_LINKS = """<robot name="r"><link name="a"/><link name="b"/>{joints}</robot>"""


def _joint(name="j", kind="revolute", parent="a", child="b", extra='<axis xyz="0 0 1"/>'):
    return (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>{extra}'
        '<limit lower="-1" upper="1" effort="1" velocity="1"/></joint>'
    )


@pytest.mark.parametrize(
    ("joints", "match"),
    [
        (_joint(kind="hinge"), "type 'hinge'"),
        (_joint(kind="floating"), "type 'floating'"),
        (_joint(child="c"), "child link 'c'"),
        (_joint(parent="nowhere"), "parent link 'nowhere'"),
        (_joint() + _joint(name="k", parent="b", child="a"), "cycle|one root"),
        (_joint(extra='<axis xyz="0 0 0"/>'), "zero axis"),
        (_joint(extra='<mimic joint="ghost"/>'), "mimics 'ghost'"),
        (_joint(extra='<axis xyz="0 0 1"/><mimic joint="j"/>'), "mimic joints form a cycle"),
        (_joint(extra='<axis xyz="0 0 1e39"/>'), "axis"),
    ],
)
def test_urdf_errors(joints, match):
    with pytest.raises(ValueError, match=match):
        Robot.from_urdf(_TWO_LINKS.format(joints=joints))


def test_urdf_more_errors(tmp_path):
    three = '<robot name="r"><link name="a"/><link name="b"/><link name="c"/>{}</robot>'
    with pytest.raises(ValueError, match="child of two joints"):
        Robot.from_urdf(three.format(_joint(child="c") + _joint(name="k", parent="b", child="c")))
    cycle = three.format(
        _joint(child="b") + _joint(name="k", parent="b", child="c") + _joint(name="m", parent="c", child="b")
    )
    with pytest.raises(ValueError, match=r"two joints|cycle"):
        Robot.from_urdf(cycle)
    loop = (
        '<robot name="r"><link name="a"/><link name="b"/><link name="c"/><link name="d"/>{}</robot>'.format(
            _joint(child="b")
            + _joint(name="k", parent="c", child="d")
            + _joint(name="m", parent="d", child="c")
        )
    )
    with pytest.raises(ValueError, match="cycle through link 'c'"):
        Robot.from_urdf(loop)
    with pytest.raises(ValueError, match="no such file"):
        Robot.from_urdf(str(tmp_path / "missing.urdf"))
    with pytest.raises(ValueError, match="could not be read"):
        Robot.from_urdf("<robot")
    with pytest.raises(ValueError, match="float32"):
        Robot.from_urdf(URDFS["serial3"], lock_joints={"j1": 1e300})
    with pytest.raises(ValueError, match="lock_joints names 'nope'"):
        Robot.from_urdf(URDFS["serial3"], lock_joints={"nope": 0.0})
    with pytest.raises(ValueError, match="spheres names link 'nope'"):
        Robot.from_urdf(URDFS["serial3"], spheres={"nope": [[0, 0, 0, 0.1]]})
    with pytest.raises(ValueError, match="base_link 'nope'"):
        Robot.from_urdf(URDFS["serial3"], base_link="nope")
    with pytest.raises(ValueError, match="joint_names misses"):
        Robot.from_urdf(URDFS["serial3"], joint_names=["j1", "j2"])
    with pytest.raises(ValueError, match="no links"):
        Robot.from_urdf('<robot name="empty"></robot>')
    with pytest.raises(TypeError, match="urdf must be"):
        Robot.from_urdf(42)


def test_missing_parser_is_an_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "yourdfpy", None)
    with pytest.raises(ImportError, match=r'pip install "warpgeo\[robot\]"'):
        Robot.from_urdf(URDFS["serial3"])


def test_xml_text_and_package_paths_need_no_meshes():
    text = _TWO_LINKS.replace(
        '<link name="b"/>',
        '<link name="b"><visual><geometry><mesh filename="package://nowhere/b.stl"/></geometry></visual></link>',
    ).format(joints=_joint())
    robot = Robot.from_urdf(text)
    assert robot.joint_names == ["j"] and robot.link_names == ["a", "b"]


def test_attach_and_detach():
    from warpgeo import _robot_tree

    tree = _robot_tree.build(
        *_robot_tree.read_urdf(URDFS["serial3"]),
        spheres={"link2": [[0.1, 0, 0, 0.05]]},
        slots={"tool": 3},
    )
    robot = Robot(tree)
    q = random_q(robot, 2)
    assert (robot.spheres(q)[:, 1:, 3] < 0).all()
    robot.attach("tool", [[0.0, 0.0, 0.1, 0.04], [0.0, 0.0, 0.2, 0.03]])
    spheres = robot.spheres(q)
    assert spheres[:, 1:3, 3].tolist() == [[0.04, 0.03]] * 2 and (spheres[:, 3, 3] < 0).all()
    ref = reference_fk(URDFS["serial3"], dict(zip(robot.joint_names, q[0].tolist(), strict=True)))["tool"]
    np.testing.assert_allclose(spheres[0, 2, :3].numpy(), ref[:3, :3] @ [0, 0, 0.2] + ref[:3, 3], atol=1e-12)
    with pytest.raises(ValueError, match="3 slots; got 4"):
        robot.attach("tool", np.zeros((4, 4)))
    with pytest.raises(ValueError, match="no attached-object slots"):
        robot.attach("link2", np.zeros((1, 4)))
    robot.detach("tool")
    assert (robot.spheres(q)[:, 1:, 3] < 0).all()


# --------------------------------------------------------------------------------------------------------
# Robot.from_urdf's options: extra links, sphere slots, self margins, ee_link, keep_links, unknown links
# --------------------------------------------------------------------------------------------------------


def _transform(rotation: np.ndarray, xyz) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3], m[:3, 3] = rotation, xyz
    return m


def test_from_urdf_extra_links_fixed_moving_and_reparenting():
    """A fixed extra link's pose = parent pose @ its fixed transform (4x4s; the rotation by axis-angle, not
    from the quaternion); a prismatic one joins q; a revolute one with ``child`` carries the URDF's link1."""
    axis = np.array([1.0, 2.0, 2.0]) / 3.0
    quat = [math.cos(0.4), *(math.sin(0.4) * axis)]  # 0.8 rad about axis
    extra = [
        {"link": "camera", "parent": "link2", "pose": [0.1, -0.2, 0.3, *quat]},
        {"link": "slider", "parent": "tool", "type": "prismatic", "axis": [0, 2, 0], "limits": [-0.1, 0.2],
         "joint": "slide"},
        {"link": "turn", "parent": "base", "type": "revolute", "axis": [0, 0, 1], "joint": "spin",
         "pose": [0, 0, 0.05, 1, 0, 0, 0], "child": "link1"},
    ]  # fmt: skip
    robot = Robot.from_urdf(URDFS["serial3"], extra_links=extra)
    assert robot.joint_names == ["spin", "j1", "j2", "j3", "slide"]
    assert robot.joint_limits[4].tolist() == [-0.1, 0.2] and math.isinf(robot.joint_limits[0, 0])
    q = random_q(robot, 3)
    poses = robot.link_poses(q).numpy()
    for b in range(3):
        v = dict(zip(robot.joint_names, q[b].tolist(), strict=True))
        spin = _transform(np.eye(3), [0, 0, 0.05]) @ _transform(
            axis_angle_matrix(np.array([0, 0, 1.0]), v["spin"]), 0
        )
        ref = {k: spin @ m for k, m in reference_fk(URDFS["serial3"], v).items() if k != "base"}
        ref["camera"] = ref["link2"] @ _transform(axis_angle_matrix(axis, 0.8), [0.1, -0.2, 0.3])
        ref["slider"] = ref["tool"] @ _transform(np.eye(3), [0, v["slide"], 0])
        for link in ("link1", "link3", "camera", "slider"):
            k = robot.link_names.index(link)
            np.testing.assert_allclose(pose_matrix(poses[b, k]), ref[link], atol=1e-9)
    # a floating base: the URDF's root re-parented under an extra link of a disconnected "world" link
    text = (
        Path(URDFS["serial3"])
        .read_text()
        .replace('<link name="base"/>', '<link name="world"/><link name="base"/>')
    )
    lift = {"link": "lift", "parent": "world", "type": "prismatic", "axis": [0, 0, 1], "child": "base"}
    floating = Robot.from_urdf(text, base_link="world", extra_links=[lift])
    assert floating.joint_names == ["lift_joint", "j1", "j2", "j3"]
    q = random_q(floating, 1)[0]
    v = dict(zip(floating.joint_names, q.tolist(), strict=True))
    tool = floating.link_poses(q)[floating.link_names.index("tool")].numpy()
    expected = _transform(np.eye(3), [0, 0, v["lift_joint"]]) @ reference_fk(URDFS["serial3"], v)["tool"]
    np.testing.assert_allclose(pose_matrix(tool), expected, atol=1e-9)


def test_from_urdf_slots_margins_ee_link_and_unknown_links():
    robot = Robot.from_urdf(
        URDFS["serial3"],
        spheres={"link2": [[0.1, 0, 0, 0.05]], "link1": [[0, 0, 0.1, 0.04]]},
        sphere_slots={"tool": 2, "link1": 1},
        self_margin={"link2": 0.02, "tool": 0.01, "base": 0.5},
        self_collision_ignore={"link1": ["link2"]},
        ee_link="tool",
    )
    names = [robot.link_names[int(k)] for k in robot.sphere_links]
    assert names == ["link2", "link1", "link1", "tool", "tool"] and robot.ee_link == "tool"
    assert robot.local_spheres[:, 3].tolist() == pytest.approx([0.05, 0.04, -10, -10, -10])
    assert robot.self_margin.tolist() == pytest.approx([0.02, 0, 0, 0.01, 0.01])
    assert [0, 1] not in robot.pairs.tolist() and [0, 3] in robot.pairs.tolist()
    robot.attach("tool", [[0, 0, 0.1, 0.03]])  # the slots are attach()'s
    assert robot.local_spheres[3:, 3].tolist() == pytest.approx([0.03, -10])
    with pytest.raises(ValueError, match="'ghost'"):
        Robot.from_urdf(URDFS["serial3"], self_collision_ignore={"ghost": ["tool"]})
    with pytest.raises(ValueError, match="self_margin names link 'ghost'"):
        Robot.from_urdf(URDFS["serial3"], self_margin={"ghost": 0.1})
    kept = Robot.from_urdf(URDFS["serial3"], self_collision_ignore={"ghost": ["tool"]},
                           self_margin={"ghost": 0.1}, ignore_unknown_links=True)  # fmt: skip
    assert kept.link_names == Robot.from_urdf(URDFS["serial3"]).link_names


def test_from_urdf_keep_links_prunes():
    full = Robot.from_urdf(URDFS["serial3"])
    robot = Robot.from_urdf(URDFS["serial3"], keep_links=["link2"], joint_names=["j1", "j2", "j3"])
    assert full.link_names == ["base", "link1", "link2", "link3", "tool"]
    assert robot.link_names == ["base", "link1", "link2"] and robot.joint_names == ["j1", "j2"]
    q = random_q(robot, 2)
    ref = np.stack([reference_fk(URDFS["serial3"], {"j1": a, "j2": b})["link2"] for a, b in q.tolist()])
    np.testing.assert_allclose(
        np.stack([pose_matrix(p) for p in robot.link_poses(q)[:, 2].numpy()]), ref, atol=1e-9
    )
    with pytest.raises(ValueError, match="spheres names link 'tool'"):
        Robot.from_urdf(URDFS["serial3"], keep_links=["link2"], spheres={"tool": [[0, 0, 0, 0.1]]})
    with pytest.raises(ValueError, match="ee_link 'tool'"):
        Robot.from_urdf(URDFS["serial3"], keep_links=["link2"], ee_link="tool")


_FIXED = {"link": "cam", "parent": "link2"}


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"extra_links": {"cam": _FIXED}}, TypeError, "extra_links must be a list"),
        ({"extra_links": [3]}, TypeError, r"extra_links\[0\] must be a mapping"),
        ({"extra_links": [{**_FIXED, "colour": 1}]}, ValueError, r"extra_links\[0\]: unknown key 'colour'"),
        ({"extra_links": [{**_FIXED, "link": 7}]}, TypeError, r"extra_links\[0\]\['link'\]"),
        (
            {"extra_links": [{**_FIXED, "link": "tool"}]},
            ValueError,
            "link 'tool' is a link of the robot already",
        ),
        ({"extra_links": [{**_FIXED, "parent": "nowhere"}]}, ValueError, "parent 'nowhere'"),
        ({"extra_links": [{**_FIXED, "type": "screw"}]}, ValueError, r"\['type'\] must be one of"),
        ({"extra_links": [{**_FIXED, "type": "revolute"}]}, ValueError, "needs an 'axis'"),
        ({"extra_links": [{**_FIXED, "type": "revolute", "axis": [0, 0, 0]}]}, ValueError, "zero axis"),
        ({"extra_links": [{**_FIXED, "pose": [0, 0, 0, 2, 0, 0, 0]}]}, ValueError, "quaternion must be unit"),
        ({"extra_links": [{**_FIXED, "pose": [0, 0, float("nan"), 1, 0, 0, 0]}]}, ValueError, r"\['pose'\]"),
        ({"extra_links": [{**_FIXED, "limits": [0, "a"]}]}, TypeError, r"\['limits'\] must hold numbers"),
        ({"extra_links": [{**_FIXED, "joint": "j1"}]}, ValueError, "joint 'j1' is declared twice"),
        ({"extra_links": [{**_FIXED, "child": "ghost"}]}, ValueError, r"\['child'\] 'ghost'"),
        ({"sphere_slots": {"tool": -1}}, ValueError, r"sphere_slots\['tool'\] must lie in \[0, 65536\]"),
        ({"sphere_slots": {"tool": 2.0}}, TypeError, r"sphere_slots\['tool'\] must be an int"),
        ({"sphere_slots": {"ghost": 2}}, ValueError, "sphere_slots names link 'ghost'"),
        ({"sphere_slots": [("tool", 2)]}, TypeError, "sphere_slots must map"),
        ({"self_margin": {"tool": "wide"}}, TypeError, r"self_margin\['tool'\] must be a number"),
        ({"self_margin": {"tool": math.inf}}, ValueError, r"self_margin\['tool'\] must be 1 finite"),
        ({"ee_link": 3}, TypeError, "ee_link must be a link name"),
        ({"ee_link": "ghost"}, ValueError, "ee_link 'ghost'"),
        ({"keep_links": "tool"}, TypeError, "keep_links must be a list"),
        ({"keep_links": ["ghost"]}, ValueError, "keep_links names link 'ghost'"),
        ({"ignore_unknown_links": 1}, TypeError, "ignore_unknown_links must be a bool"),
    ],
)
def test_from_urdf_option_errors(options, error, match):
    with pytest.raises(error, match=match):
        Robot.from_urdf(URDFS["serial3"], **options)


# --------------------------------------------------------------------------------------------------------
# compat.curobo.load_robot: a cuRobo-style configuration of the project's own 7-DoF arm
# --------------------------------------------------------------------------------------------------------


def _arm_config(**changes) -> dict:
    spheres = {
        f"arm_link{i}": [
            {"center": [0.0, 0.0, 0.01 * i], "radius": 0.06},
            {"center": [0.05, 0, 0], "radius": 0.05},
        ]
        for i in range(8)
    }
    spheres["arm_hand"] = [{"center": [0.0, 0.0, 0.03], "radius": 0.04}]
    spheres["arm_finger_left"] = [{"center": [0.0, 0.01, 0.02], "radius": 0.01}]
    spheres["arm_finger_right"] = [{"center": [0.0, -0.01, 0.02], "radius": -1.0}]  # disabled
    kinematics = {
        "urdf_path": "arm7.urdf",
        "base_link": "arm_link0",
        "ee_link": "arm_hand",
        "collision_link_names": [*spheres, "attached_object"],
        "collision_spheres": spheres,
        "collision_sphere_buffer": 0.005,
        "extra_collision_spheres": {"attached_object": 3},
        "extra_links": {
            "attached_object": {
                "parent_link_name": "arm_hand",
                "link_name": "attached_object",
                "fixed_transform": [0.0, 0.0, 0.1, 0.7071067811865476, 0.0, 0.7071067811865476, 0.0],
                "joint_type": "FIXED",
                "joint_name": "attach_joint",
            }
        },
        "lock_joints": {"arm_finger_joint1": 0.03},
        "self_collision_ignore": {"arm_link0": ["arm_link1"], "arm_hand": ["arm_finger_left", "ghost_link"]},
        "self_collision_buffer": {"arm_link0": 0.1, "arm_hand": 0.02},
        "cspace": {"joint_names": [*(f"arm_joint{i}" for i in (7, 1, 2, 3, 4, 5, 6)), "arm_finger_joint1"]},
    }
    kinematics.update(changes)
    return {"robot_cfg": {"kinematics": kinematics}}


def test_load_robot_reads_curobo_configuration():
    from warpgeo.compat.curobo import load_robot, load_robot_spheres

    config = _arm_config()
    robot = load_robot(config, root=os.path.dirname(ARM7))
    assert robot.joint_names == [f"arm_joint{i}" for i in (7, 1, 2, 3, 4, 5, 6)]
    assert robot.ee_link == "arm_hand" and "attached_object" in robot.link_names
    # the same spheres, order, pairs and margins as load_robot_spheres; the buffer on enabled spheres only
    flat = load_robot_spheres(config)
    expected = flat.local_spheres.clone()
    expected[:, 3] = torch.where(expected[:, 3] >= 0, expected[:, 3] + 0.005, expected[:, 3])
    torch.testing.assert_close(robot.local_spheres, expected)
    names = [robot.link_names[int(k)] for k in robot.sphere_links]
    assert names == [flat.link_names[int(k)] for k in flat.sphere_links]
    torch.testing.assert_close(robot.pairs, flat.pairs)
    torch.testing.assert_close(robot.self_margin, flat.self_margin)
    # the kinematics: the URDF's, with finger_joint1 locked at 0.03 and q's columns in cspace order
    q = random_q(robot, 4)
    values = [dict(zip(robot.joint_names, row.tolist(), strict=True)) for row in q]
    spheres = robot.spheres(q).numpy()
    attach = np.eye(4)
    attach[:3, :3] = quat_matrix(np.array([0.7071067811865476, 0.0, 0.7071067811865476, 0.0]))
    attach[:3, 3] = [0.0, 0.0, 0.1]
    for b in range(4):
        ref = reference_fk(ARM7, {**values[b], "arm_finger_joint1": 0.03})
        ref["attached_object"] = ref["arm_hand"] @ attach
        for s, link in enumerate(names):
            local = robot._floats[torch.float64]["local_spheres"][s].numpy()
            centre = ref[link][:3, :3] @ local[:3] + ref[link][:3, 3]
            np.testing.assert_allclose(spheres[b, s, :3], centre, atol=1e-9)
    # attach fills the slots of attached_object, in its frame
    robot.attach("attached_object", [[0.0, 0.0, 0.05, 0.03]])
    s = len(names) - 3
    moved = robot.spheres(q[:1])[0, s].numpy()
    ref = reference_fk(ARM7, {**values[0], "arm_finger_joint1": 0.03})["arm_hand"] @ attach
    np.testing.assert_allclose(moved[:3], ref[:3, :3] @ [0, 0, 0.05] + ref[:3, 3], atol=1e-9)
    assert moved[3] == pytest.approx(0.03)


def test_load_robot_yaml_null_spheres_and_per_link_buffer(tmp_path):
    yaml = pytest.importorskip("yaml")
    from warpgeo.compat.curobo import load_robot

    config = _arm_config(collision_spheres=None, collision_link_names=None, extra_collision_spheres=None)
    path = tmp_path / "arm.yml"
    path.write_text(yaml.safe_dump(config))
    robot = load_robot(path, root=os.path.dirname(ARM7))
    assert robot.sphere_links.shape == (0,) and robot.pairs.shape == (0, 2)
    assert warpgeo.self_collision_cost(robot.spheres(random_q(robot, 3)), robot.pairs).tolist() == [0, 0, 0]
    per_link = load_robot(_arm_config(collision_sphere_buffer={"arm_hand": 0.01}), root=os.path.dirname(ARM7))
    hand = [i for i, k in enumerate(per_link.sphere_links) if per_link.link_names[int(k)] == "arm_hand"]
    assert per_link.local_spheres[hand, 3].tolist() == pytest.approx([0.05])
    assert per_link.local_spheres[0, 3].item() == pytest.approx(0.06)


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"urdf_path": "nowhere.urdf"}, ValueError, "urdf_path"),
        ({"urdf_path": 3}, TypeError, "urdf_path"),
        (
            {
                "extra_links": {
                    "tool": {"parent_link_name": "arm_hand", "link_name": "tool", "joint_type": "SCREW"}
                }
            },
            ValueError,
            "joint_type",
        ),
        (
            {"extra_links": {"tool": {"parent_link_name": "nowhere", "link_name": "tool"}}},
            ValueError,
            "nowhere",
        ),
        ({"cspace": {"joint_names": ["arm_joint1"]}}, ValueError, "misses"),
        ({"lock_joints": {"ghost": 0.0}}, ValueError, "ghost"),
        ({"collision_sphere_buffer": "wide"}, TypeError, "collision_sphere_buffer"),
        ({"collision_sphere_buffer": 1e39}, ValueError, "collision_sphere_buffer"),
    ],
)
def test_load_robot_errors(changes, error, match):
    from warpgeo.compat.curobo import load_robot

    with pytest.raises(error, match=match):
        load_robot(_arm_config(**changes), root=os.path.dirname(ARM7))


def test_load_robot_moving_extra_links_reparent_a_child():
    """cuRobo's floating bases: extra links with X_PRISM / Z_ROT joints, the last re-parenting a URDF link
    (``child_link_name``); their joints join q (cspace order), the URDF's chain moves with them."""
    from warpgeo.compat.curobo import load_robot

    extra = {
        **_arm_config()["robot_cfg"]["kinematics"]["extra_links"],
        "slide": {"parent_link_name": "arm_link0", "link_name": "slide", "joint_name": "base_x",
                  "joint_type": "X_PRISM", "joint_limits": [-1.0, 1.0]},
        "spin": {"parent_link_name": "slide", "link_name": "spin", "joint_name": "base_rz",
                 "joint_type": "Z_ROT", "child_link_name": "arm_link1",
                 "fixed_transform": [0, 0, 0.05, 1, 0, 0, 0]},
    }  # fmt: skip
    names = ["base_x", "base_rz", *(f"arm_joint{i}" for i in range(1, 8))]
    config = _arm_config(extra_links=extra, cspace={"joint_names": names})
    robot = load_robot(config, root=os.path.dirname(ARM7))
    assert robot.joint_names == names
    assert robot.joint_limits[0].tolist() == [-1.0, 1.0] and math.isinf(robot.joint_limits[1, 1])
    q = random_q(robot, 3)
    poses = robot.link_poses(q).numpy()
    for b in range(3):
        values = dict(zip(names, q[b].tolist(), strict=True))
        base = np.eye(4)
        base[0, 3] = values["base_x"]
        lift = np.eye(4)
        lift[2, 3] = 0.05
        spin = np.eye(4)
        spin[:3, :3] = axis_angle_matrix(np.array([0.0, 0, 1]), values["base_rz"])
        ref = reference_fk(ARM7, {**values, "arm_finger_joint1": 0.03})
        for link in ("arm_link1", "arm_link4", "arm_hand"):
            k = robot.link_names.index(link)
            np.testing.assert_allclose(pose_matrix(poses[b, k]), base @ lift @ spin @ ref[link], atol=1e-9)
