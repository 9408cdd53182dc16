"""A robot model: joint values to link poses and collision spheres (DESIGN §8).

:class:`Robot` holds a kinematic tree (revolute, continuous, prismatic, fixed and mimic joints; locked
joints folded in) and spheres on its links; :meth:`Robot.link_poses` and :meth:`Robot.spheres` run forward
kinematics for any batch of configurations in one Warp launch (``warpgeo/_kernels/robot.py``: a thread per
configuration walks the links, parents first, then the spheres), and one launch computes the gradient
w.r.t. the joint values. :meth:`Robot.from_urdf` reads a URDF with yourdfpy (the ``robot`` extra);
``warpgeo.compat.curobo.load_robot`` reads a cuRobo robot configuration. The tree's construction (names to
arrays) lives in ``warpgeo/_robot_tree.py``.

The file reads: the public class, then the op ``warpgeo::forward_kinematics`` (check, impl, fake), its
gradient op ``warpgeo::forward_kinematics_backward`` and the autograd pair that runs it.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from . import _launch, _robot_tree, _warp, checks
from ._constants import INT32_LIMIT
from ._kernels import robot as kernels
from ._op import Op

__all__ = ["Robot"]

#: The float dtypes a robot keeps its tables in (a copy each: float64 for float64 ``q``, float32 otherwise).
_PRECISIONS = (torch.float32, torch.float64)


class Robot:
    """A kinematic tree with collision spheres on its links; forward kinematics as Warp kernels.

    Build one with :meth:`from_urdf` or ``warpgeo.compat.curobo.load_robot`` (the constructor takes their
    internal description of the tree). Links are numbered in tree order (a parent before its children; link
    0 the base); ``q``'s columns are :attr:`joint_names`.

    Attributes:
        joint_names: the names of ``q``'s columns (the moving joints less mimic and locked ones).
        joint_limits: ``(dof, 2)`` float64 lower, upper (``±inf`` for a continuous joint or one without limits;
            not enforced: that is the planner's job), on :attr:`device`.
        link_names: the links, ``link_names[k]`` of row ``k`` of :meth:`link_poses`.
        sphere_links: ``(S,)`` int64, the link of each sphere.
        local_spheres: ``(S, 4)`` float32, each sphere's centre in its link's frame and its radius (negative:
            a disabled slot, see :meth:`attach`).
        pairs: ``(P, 2)`` int64 sphere pairs for :func:`warpgeo.self_collision_cost`.
        self_margin: ``(S,)`` float32 self-collision margin per sphere.
        ee_link: the end-effector link :meth:`from_urdf`'s ``ee_link`` or a cuRobo configuration names
            (``ee_link`` / ``tool_frames[0]``), else None.
        device: where the tables live and the ops run.
    """

    def __init__(self, tree: _robot_tree.Tree, *, device: torch.device | str = "cpu") -> None:
        self._tree = tree
        self.device = torch.device(device)
        checks.check_device("tables", tables=torch.empty(0, device=self.device))
        self.joint_names: list[str] = list(tree.joint_names)
        self.link_names: list[str] = list(tree.link_names)
        self.ee_link: str | None = tree.ee_link
        dev = self.device
        self.joint_limits = torch.as_tensor(tree.joint_limits, dtype=torch.float64, device=dev).reshape(-1, 2)
        self._index = {
            "parents": torch.as_tensor(tree.parents, dtype=torch.int32, device=dev),
            "joint_types": torch.as_tensor(tree.joint_types, dtype=torch.int32, device=dev),
            "joint_index": torch.as_tensor(tree.joint_index, dtype=torch.int32, device=dev),
            "sphere_links": torch.as_tensor(tree.sphere_links, dtype=torch.int32, device=dev),
        }
        self._floats = {
            dtype: {
                "axes": torch.as_tensor(tree.axes, dtype=dtype, device=dev).reshape(-1, 3),
                "origins": torch.as_tensor(tree.origins, dtype=dtype, device=dev).reshape(-1, 7),
                "mimic": torch.as_tensor(tree.mimic, dtype=dtype, device=dev).reshape(-1, 2),
                "local_spheres": torch.as_tensor(tree.local_spheres, dtype=dtype, device=dev).reshape(-1, 4),
            }
            for dtype in _PRECISIONS
        }
        self.sphere_links = self._index["sphere_links"].to(torch.int64)
        self.pairs = torch.as_tensor(tree.pairs, dtype=torch.int64, device=dev).reshape(-1, 2)
        self.self_margin = torch.as_tensor(tree.self_margin, dtype=torch.float32, device=dev)
        self._slots = dict(tree.slots)

    # ----------------------------------------------------------------------------------------------------
    # construction
    # ----------------------------------------------------------------------------------------------------

    @classmethod
    def from_urdf(
        cls,
        urdf: str | os.PathLike,
        *,
        spheres: Mapping[str, Sequence[Sequence[float]]] | None = None,
        base_link: str | None = None,
        lock_joints: Mapping[str, float] | None = None,
        joint_names: Sequence[str] | None = None,
        self_collision_ignore: Mapping[str, Iterable[str]] | Iterable[Sequence[str]] = (),
        extra_links: Sequence[Mapping[str, Any]] | None = None,
        sphere_slots: Mapping[str, int] | None = None,
        self_margin: Mapping[str, float] | None = None,
        ee_link: str | None = None,
        keep_links: Iterable[str] | None = None,
        ignore_unknown_links: bool = False,
        device: torch.device | str = "cpu",
    ) -> Robot:
        """A robot from a URDF (a file path or the XML text) and spheres per link.

        The URDF is read with yourdfpy (``pip install "warpgeo[robot]"``) for its kinematics only: meshes
        are not loaded, so ``package://`` paths need not resolve. Joint types: ``revolute``, ``continuous``,
        ``prismatic``, ``fixed``, and ``<mimic joint= multiplier= offset=>`` on a moving joint.

        Args:
            urdf: the path of a URDF file, or its XML text (a string starting with ``<``).
            spheres: ``{link: [[x, y, z, r], ...]}``, each sphere in its link's frame (a negative radius:
                disabled). Default: no spheres. Their order is the spheres' order (:attr:`sphere_links`).
            base_link: the root of the tree (its frame is the base frame); default: the URDF's root link.
                Links not below it are left out.
            lock_joints: ``{joint: value}``: joints held at a value, removed from ``q``.
            joint_names: the order of ``q``'s columns (every moving joint not locked nor mimic, once);
                default: tree order. Locked joints listed are left out.
            self_collision_ignore: link pairs never checked for self-collision (``{a: [b, ...]}`` or
                ``[(a, b), ...]`` by link name), as :func:`warpgeo.collision_pairs` takes them.
            extra_links: links added to the URDF's tree, in order, each a mapping: ``"link"`` (its name, new),
                ``"parent"`` (a link of the URDF or another extra link), ``"pose"`` (``[x, y, z, qw, qx, qy,
                qz]``: its joint frame in the parent's frame, a unit quaternion; default: identity),
                ``"type"`` (``"fixed"``, the default, ``"revolute"``, ``"continuous"`` or ``"prismatic"``),
                ``"axis"`` (``[x, y, z]`` in the joint frame; needed by a moving joint), ``"limits"``
                (``[lower, upper]``, default unbounded), ``"joint"`` (the joint's name, default
                ``"<link>_joint"``; a moving one is a column of ``q``) and ``"child"`` (optional: a link of
                the URDF or an earlier extra link moved under this one; its joint keeps its origin and
                motion, a root link is fixed at this link's origin: a floating base). E.g. a tool frame or
                a fixed ``attached_object`` link.
            sphere_slots: ``{link: n}``: ``n`` disabled spheres (radius -10 at the link's origin) after the
                link's own, the slots :meth:`attach` fills (``n`` in ``[0, 65536]``).
            self_margin: ``{link: metres}``: the self-collision margin of the link's spheres
                (:attr:`self_margin`, for :func:`warpgeo.self_collision_cost`); default 0.
            ee_link: the end-effector link, kept as :attr:`ee_link` (a link of the tree).
            keep_links: prune the tree to these links and their ancestors (a gripper past the last link
                with spheres and its joints dropped, say); default: every link below ``base_link``. The
                links of ``spheres``, ``sphere_slots`` and ``ee_link`` must be kept.
            ignore_unknown_links: names in ``self_collision_ignore`` that are not links of the tree, and in
                ``self_margin`` that are not links of the URDF nor extra links, are skipped instead of
                refused (lists written for several variants of a robot, as cuRobo's).
            device: where the robot's tables live.

        Returns:
            The :class:`Robot`.

        Raises:
            ImportError: yourdfpy is not installed.
            TypeError: arguments of the wrong type (the message names the option and, for ``extra_links``,
                the entry and key).
            ValueError: a missing or unreadable file, invalid XML; an unknown or unsupported joint type, a
                joint naming a missing link, a link with two parents or a cycle, a moving joint with a zero
                axis, a mimic of an unknown joint; an unknown link in ``spheres``, ``sphere_slots``,
                ``self_margin``, ``keep_links`` or ``ee_link``, an unknown joint in ``lock_joints`` /
                ``joint_names`` (each named); an ``extra_links`` entry with an unknown key, an existing link
                name, an unknown parent or child, a quaternion that is not unit, a moving joint without an
                axis; a slot count out of range; non-finite values.

        Example:
            >>> urdf = '''<robot name="arm"><link name="base"/><link name="link1"/>
            ...   <joint name="j1" type="revolute"><parent link="base"/><child link="link1"/>
            ...     <origin xyz="0 0 0.3"/><axis xyz="0 0 1"/>
            ...     <limit lower="-3" upper="3" effort="1" velocity="1"/></joint></robot>'''
            >>> robot = Robot.from_urdf(urdf, spheres={"link1": [[0.1, 0, 0, 0.05]]})
            >>> robot.spheres(torch.full((16, robot.dof), torch.pi / 2)).shape
            torch.Size([16, 1, 4])
            >>> robot.spheres(torch.tensor([torch.pi / 2], dtype=torch.float64))[0, 1:].tolist()  # x onto y
            [0.1, 0.3, 0.05]
            >>> tool = {"link": "tool", "parent": "link1", "pose": [0.2, 0, 0, 1, 0, 0, 0]}
            >>> robot = Robot.from_urdf(urdf, extra_links=[tool], sphere_slots={"tool": 2}, ee_link="tool")
            >>> robot.link_names, robot.local_spheres[:, 3].tolist()     # two empty slots for attach()
            (['base', 'link1', 'tool'], [-10.0, -10.0])
        """
        if not isinstance(ignore_unknown_links, bool):
            raise TypeError(f"ignore_unknown_links must be a bool; got {ignore_unknown_links!r:.60}")
        if ee_link is not None and not isinstance(ee_link, str):
            raise TypeError(f"ee_link must be a link name; got {ee_link!r:.60}")
        links, joints = _robot_tree.read_urdf(urdf)
        links, joints = _robot_tree.add_extra_links(links, joints, extra_links)
        tree = _robot_tree.build(
            links,
            joints,
            base_link=base_link,
            lock_joints=lock_joints,
            joint_names=joint_names,
            spheres=spheres,
            slots=_robot_tree.check_slots(sphere_slots),
            self_margin=_robot_tree.check_margins(self_margin, links, ignore_unknown_links),
            self_collision_ignore=self_collision_ignore,
            ignore_unknown=ignore_unknown_links,
            ee_link=ee_link,
            keep_links=_robot_tree.check_names(keep_links, "keep_links"),
        )
        return cls(tree, device=device)

    def to(self, device: torch.device | str) -> Robot:
        """This robot's copy on ``device`` (attached spheres included); ``self`` when it is there already."""
        device = torch.device(device)
        if device == self.device:
            return self
        tree = self._tree._replace(local_spheres=self._floats[torch.float64]["local_spheres"].cpu().numpy())
        return Robot(tree, device=device)

    # ----------------------------------------------------------------------------------------------------
    # queries
    # ----------------------------------------------------------------------------------------------------

    @property
    def dof(self) -> int:
        """The number of joint values in ``q``."""
        return len(self.joint_names)

    @property
    def local_spheres(self) -> torch.Tensor:
        """``(S, 4)`` float32: the spheres in their links' frames (x, y, z, radius)."""
        return self._floats[torch.float32]["local_spheres"]

    def link_poses(self, q: torch.Tensor) -> torch.Tensor:
        """Every link's pose in the base frame.

        Args:
            q: ``(..., dof)`` joint values (radians, metres) in :attr:`joint_names` order; float16, bfloat16
                (computed in float32), float32 or float64, on :attr:`device`.

        Returns:
            ``(..., L, 7)`` ``[x, y, z, qw, qx, qy, qz]`` per link, in the dtype of ``q``. Differentiable
            w.r.t. ``q`` (one backward launch). A quaternion's sign is whatever the composition gives.

        Raises:
            TypeError: ``q`` not a floating tensor.
            ValueError: ``q``'s last dimension is not ``dof``, ``q`` on another device, NaN or inf in ``q``
                (with value checks on).
        """
        return self._run(q)[0]

    def spheres(self, q: torch.Tensor) -> torch.Tensor:
        """The collision spheres in the base frame, for ``sphere_mesh_cost`` / ``self_collision_cost``.

        Args:
            q: ``(..., dof)`` joint values, as for :meth:`link_poses`.

        Returns:
            ``(..., S, 4)`` x, y, z, radius (a disabled sphere keeps its negative radius), in the dtype of
            ``q``. Differentiable w.r.t. ``q``, and w.r.t. the local spheres (centres and radii) after
            ``robot.local_spheres.requires_grad_()``; not twice differentiable.

        Raises:
            TypeError, ValueError: as :meth:`link_poses`.

        Example:
            >>> robot = Robot.from_urdf("examples/data/arm7.urdf", spheres={       # doctest: +SKIP
            ...     "arm_link3": [[0, 0, 0, 0.08]], "arm_hand": [[0, 0, 0.05, 0.05]]})
            >>> q = torch.zeros(32, 32, robot.dof, requires_grad=True)      # doctest: +SKIP
            >>> cost = warpgeo.self_collision_cost(robot.spheres(q), robot.pairs, margin=robot.self_margin)  # doctest: +SKIP
            >>> cost.sum().backward()                                          # doctest: +SKIP
        """
        return self._run(q)[1]

    def _run(self, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        checks.check_float(q, "q")
        if q.dim() < 1 or q.shape[-1] != self.dof:
            raise ValueError(f"q must have shape (..., dof={self.dof}); got {tuple(q.shape)}")
        if q.device != self.device:
            raise ValueError(f"q must be on the robot's device ({self.device}); got {q.device}")
        lead = q.shape[:-1]
        floats = self._floats[_warp.compute_dtype(q.dtype)]
        local = self.local_spheres
        if (
            local.requires_grad and floats["local_spheres"] is not local
        ):  # float64 q: a gradient to the float32
            floats = {**floats, "local_spheres": local.to(floats["local_spheres"].dtype)}
        poses, spheres = _fk_op.call(q=q.reshape(math.prod(lead), self.dof), **self._index, **floats)
        return poses.view(*lead, *poses.shape[1:]), spheres.view(*lead, *spheres.shape[1:])

    # ----------------------------------------------------------------------------------------------------
    # attached objects
    # ----------------------------------------------------------------------------------------------------

    def attach(self, link: str, spheres: Any) -> None:
        """Put spheres (an attached object's, in ``link``'s frame) into ``link``'s disabled slots, in place.

        The slots are the ones :meth:`from_urdf`'s ``sphere_slots`` (cuRobo's ``extra_collision_spheres``:
        its attached-object slots) made; spheres
        beyond the given ones stay disabled. Captured CUDA graphs see the new spheres (written in place).

        Args:
            link: a link with slots.
            spheres: ``(n, 4)`` x, y, z, radius (array-like), ``n`` at most the link's slot count.

        Raises:
            ValueError: a link with no slots, more spheres than slots, a bad shape, non-finite values.
        """
        slots = self._slot_range(link)
        values = np.asarray(spheres, dtype=np.float64)
        if values.size == 0:
            values = values.reshape(0, 4)
        if values.ndim != 2 or values.shape[1] != 4:
            raise ValueError(f"spheres must have shape (n, 4); got {values.shape}")
        if not np.isfinite(values).all():
            raise ValueError("spheres must be finite")
        if values.shape[0] > len(slots):
            raise ValueError(f"link {link!r} has {len(slots)} slots; got {values.shape[0]} spheres")
        self.detach(link)
        with torch.no_grad():  # the tables may require grad (robot.local_spheres.requires_grad_())
            for dtype in _PRECISIONS:
                target = self._floats[dtype]["local_spheres"]
                target[slots[: values.shape[0]]] = torch.as_tensor(values, dtype=dtype, device=self.device)

    def detach(self, link: str) -> None:
        """Disable every slot of ``link`` again (radius -10 at the link's origin), in place."""
        slots = self._slot_range(link)
        with torch.no_grad():
            for dtype in _PRECISIONS:
                target = self._floats[dtype]["local_spheres"]
                target[slots] = torch.tensor(_robot_tree.DISABLED_SPHERE, dtype=dtype, device=self.device)

    def _slot_range(self, link: str) -> list[int]:
        if not isinstance(link, str):
            raise TypeError(f"link must be a link name; got {type(link).__name__}")
        if link not in self._slots:
            has = sorted(self._slots) or "none"
            raise ValueError(f"link {link!r} has no attached-object slots (links with slots: {has})")
        return list(self._slots[link])

    def __repr__(self) -> str:
        return (
            f"Robot(dof={self.dof}, links={len(self.link_names)}, spheres={self.sphere_links.shape[0]}, "
            f"pairs={self.pairs.shape[0]}, device={self.device})"
        )


# --------------------------------------------------------------------------------------------------------
# warpgeo::forward_kinematics: check, impl, fake
# --------------------------------------------------------------------------------------------------------

#: The tree's integer tables, as the op takes them.
_INDEX_INPUTS = ("parents", "joint_types", "joint_index", "sphere_links")


def _check_fk(
    q, parents, joint_types, joint_index, axes, origins, mimic, sphere_links, local_spheres
) -> None:
    """Shapes, dtypes and devices of every input; reads no values."""
    checks.check_float(q, "q")
    if q.dim() != 2:
        raise ValueError(f"q must have shape (B, dof); got {tuple(q.shape)}")
    compute = _warp.compute_dtype(q.dtype)
    for name, t in zip(_INDEX_INPUTS, (parents, joint_types, joint_index, sphere_links), strict=True):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int32:
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be an int32 tensor; got {got}")
    for name, t in (("axes", axes), ("origins", origins), ("mimic", mimic), ("local_spheres", local_spheres)):
        checks.check_float(t, name)
        if t.dtype != compute:
            raise TypeError(f"{name} must have q's compute dtype {compute}; got {t.dtype}")
    if parents.dim() != 1:
        raise ValueError(f"parents must have shape (L,); got {tuple(parents.shape)}")
    links = parents.shape[0]
    checks.check_shape(joint_types, "joint_types", (links,))
    checks.check_shape(joint_index, "joint_index", (links,))
    checks.check_shape(axes, "axes", (links, 3))
    checks.check_shape(origins, "origins", (links, 7))
    checks.check_shape(mimic, "mimic", (links, 2))
    if sphere_links.dim() != 1:
        raise ValueError(f"sphere_links must have shape (S,); got {tuple(sphere_links.shape)}")
    checks.check_shape(local_spheres, "local_spheres", (sphere_links.shape[0], 4))
    if q.shape[0] >= INT32_LIMIT:
        raise ValueError(f"q may hold fewer than 2**31 configurations (a thread each); got {q.shape[0]}")
    width = max(links * 7, sphere_links.shape[0] * 4, q.shape[1]) * 8
    if width >= INT32_LIMIT:
        raise ValueError(
            f"a robot of {links} links and {sphere_links.shape[0]} spheres is beyond int32 strides"
        )
    checks.check_device(
        "q", q=q, parents=parents, joint_types=joint_types, joint_index=joint_index, axes=axes,
        origins=origins, mimic=mimic, sphere_links=sphere_links, local_spheres=local_spheres,
    )  # fmt: skip


def _fk_impl(
    q: torch.Tensor,
    parents: torch.Tensor,
    joint_types: torch.Tensor,
    joint_index: torch.Tensor,
    axes: torch.Tensor,
    origins: torch.Tensor,
    mimic: torch.Tensor,
    sphere_links: torch.Tensor,
    local_spheres: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, dof) -> (poses (B, L, 7), spheres (B, S, 4)) in the dtype of q."""
    if checks.checking_values(q.device):
        _check_values(q, parents, joint_index, sphere_links)
    work = _warp.to_compute(q).contiguous()
    batch, links, count = q.shape[0], parents.shape[0], sphere_links.shape[0]
    poses = torch.empty(batch, links, 7, dtype=work.dtype, device=q.device)
    spheres = torch.empty(batch, count, 4, dtype=work.dtype, device=q.device)
    kernel = kernels.KINEMATICS[_warp.KEY[work.dtype]].forward_kinematics
    _launch.launch_rows(
        kernel,
        batch,
        device=q.device,
        work_per_row=links + count,
        q=work,
        parents=parents,
        joint_types=joint_types,
        joint_index=joint_index,
        axes=_dense(axes),
        origins=origins.contiguous(),
        mimic=_dense(mimic),
        sphere_links=sphere_links,
        local_spheres=_dense(local_spheres),
        poses=poses,
        spheres=spheres,
    )
    return poses.to(q.dtype), spheres.to(q.dtype)


def _fk_fake(q, parents, joint_types, joint_index, axes, origins, mimic, sphere_links, local_spheres):
    batch = q.shape[0]
    return q.new_empty(batch, parents.shape[0], 7), q.new_empty(batch, sphere_links.shape[0], 4)


def _dense(t: torch.Tensor) -> torch.Tensor:
    """Rows of a vector array need a dense last dimension."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _check_values(q, parents, joint_index, sphere_links) -> None:
    """One device-to-host read: q finite; parents in ``[-1, k)``, joint indices in ``[-1, dof)``, sphere
    links in ``[0, L)``."""
    links, dof = parents.shape[0], q.shape[1]
    parts = [_warp.sum64(q).to(torch.float64)]
    order = torch.arange(links, device=parents.device, dtype=torch.int32)
    bad_parent = ((parents < -1) | (parents >= order)).any() if links else torch.zeros((), dtype=torch.bool)
    bad_joint = (
        ((joint_index < -1) | (joint_index >= dof)).any() if links else torch.zeros((), dtype=torch.bool)
    )
    bad_link = (
        ((sphere_links < 0) | (sphere_links >= links)).any()
        if sphere_links.numel()
        else torch.zeros((), dtype=torch.bool)
    )
    parts += [t.to(device=q.device, dtype=torch.float64) for t in (bad_parent, bad_joint, bad_link)]
    values = torch.stack(parts).tolist()
    if not math.isfinite(values[0]) and not bool(torch.isfinite(q).all()):
        raise ValueError("q must be finite: found NaN or inf")
    if values[1]:
        raise IndexError("parents must hold each link's parent index in [-1, k) (-1: the base)")
    if values[2]:
        raise IndexError(f"joint_index must lie in [-1, dof={dof}) (-1: no joint value)")
    if values[3]:
        raise IndexError(f"sphere_links must lie in [0, L={links})")


# --------------------------------------------------------------------------------------------------------
# warpgeo::forward_kinematics_backward: the gradient w.r.t. q, an op of its own (torch.compile traces it)
# --------------------------------------------------------------------------------------------------------


def _check_grad(grad_poses, grad_spheres, q, poses, spheres, parents, joint_types, joint_index, axes,
                origins, mimic, sphere_links, local_spheres) -> None:  # fmt: skip
    _check_fk(q, parents, joint_types, joint_index, axes, origins, mimic, sphere_links, local_spheres)
    batch, links, count = q.shape[0], parents.shape[0], sphere_links.shape[0]
    for name, t, shape in (
        ("poses", poses, (batch, links, 7)),
        ("spheres", spheres, (batch, count, 4)),
        ("grad_poses", grad_poses, (batch, links, 7)),
        ("grad_spheres", grad_spheres, (batch, count, 4)),
    ):
        if t is None and name.startswith("grad"):
            continue
        checks.check_float(t, name)
        checks.check_shape(t, name, shape)
    checks.check_device(
        "q", q=q, poses=poses, spheres=spheres, grad_poses=grad_poses, grad_spheres=grad_spheres
    )


def _grad_impl(
    grad_poses: torch.Tensor | None,
    grad_spheres: torch.Tensor | None,
    q: torch.Tensor,
    poses: torch.Tensor,
    spheres: torch.Tensor,
    parents: torch.Tensor,
    joint_types: torch.Tensor,
    joint_index: torch.Tensor,
    axes: torch.Tensor,
    origins: torch.Tensor,
    mimic: torch.Tensor,
    sphere_links: torch.Tensor,
    local_spheres: torch.Tensor,
) -> torch.Tensor:
    """d (sum grad_poses * poses + sum grad_spheres * spheres) / d q: (B, dof) in q's compute dtype."""
    compute = _warp.compute_dtype(q.dtype)
    device = q.device
    batch, links = q.shape[0], parents.shape[0]
    grad_q = torch.empty(batch, q.shape[1], dtype=compute, device=device)  # the kernel zeroes its rows
    scratch = torch.empty(2, batch, links, 3, dtype=compute, device=device)
    kernel = kernels.KINEMATICS[_warp.KEY[compute]].forward_kinematics_backward
    _launch.launch_rows(
        kernel,
        batch,
        device=device,
        work_per_row=links + sphere_links.shape[0],
        # the gradients are read with their strides (a .sum()'s is expanded: nothing to copy)
        grad_poses=_empty_grad(compute, device, 7) if grad_poses is None else grad_poses.to(compute),
        grad_spheres=_empty_grad(compute, device, 4) if grad_spheres is None else grad_spheres.to(compute),
        poses=poses.to(compute).contiguous(),
        spheres=_dense(spheres.to(compute)),
        parents=parents,
        joint_types=joint_types,
        joint_index=joint_index,
        axes=_dense(axes),
        origins=origins.contiguous(),
        mimic=_dense(mimic),
        sphere_links=sphere_links,
        force=scratch[0],
        moment=scratch[1],
        grad_q=grad_q,
    )
    return grad_q


def _grad_fake(grad_poses, grad_spheres, q, poses, spheres, *tables):
    return q.new_empty(q.shape, dtype=_warp.compute_dtype(q.dtype))


@functools.cache
def _empty_grad(dtype: torch.dtype, device: torch.device, width: int) -> torch.Tensor:
    """A gradient not given: ``(0, 0, width)`` (the kernel reads nothing of it), a launcher constant, one per
    dtype, device and width for the process."""
    return _launch.constant(torch.empty(0, 0, width, dtype=dtype, device=device))


_grad_op = Op("warpgeo::forward_kinematics_backward", check=_check_grad, impl=_grad_impl, fake=_grad_fake)


# --------------------------------------------------------------------------------------------------------
# autograd: one setup / backward pair, registered on the op
# --------------------------------------------------------------------------------------------------------


def _setup_fk(ctx, inputs, output) -> None:
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(*inputs[:1], *output, *inputs[1:])


def _backward_fk(ctx, grad_poses, grad_spheres):
    need_q, need_local = ctx.needs_input_grad[0], ctx.needs_input_grad[8]
    if (grad_poses is None and grad_spheres is None) or not (need_q or need_local):
        return _fk_op.grads()
    q, poses, spheres, *tables = ctx.saved_tensors
    grad_q = grad_local = None
    if need_q:
        run = _grad_op.in_backward(grad_poses, grad_spheres, q, poses, spheres, *tables)
        grad_q = run(grad_poses, grad_spheres, q, poses, spheres, *tables).to(q.dtype)
    if need_local and grad_spheres is not None:
        grad_local = _local_gradient(grad_spheres, poses, tables[6], tables[7])
    return _fk_op.grads(q=grad_q, local_spheres=grad_local)


def _local_gradient(grad_spheres, poses, sphere_links, local_spheres) -> torch.Tensor:
    """d / d local_spheres: each sphere's centre gradient rotated back into its link's frame, the radius's
    passed through, summed over the batch (torch ops: only when local spheres require grad)."""
    links = sphere_links.to(torch.int64).clamp(0, max(poses.shape[1] - 1, 0))
    if poses.shape[1] == 0:
        return torch.zeros_like(local_spheres)
    quat = poses[:, links, 3:].to(local_spheres.dtype)
    g = grad_spheres.to(local_spheres.dtype)
    w, v = quat[..., :1], quat[..., 1:]
    gv = g[..., :3]
    # R^T g for the unit quaternion (w, v): g - 2w (v x g) + 2 v x (v x g)
    t = torch.linalg.cross(v, gv)
    local = gv - 2 * w * t + 2 * torch.linalg.cross(v, t)
    return torch.cat([local, g[..., 3:]], dim=-1).sum(0)


_fk_op = Op(
    "warpgeo::forward_kinematics",
    check=_check_fk,
    impl=_fk_impl,
    fake=_fk_fake,
    setup=_setup_fk,
    backward=_backward_fk,
)
