"""``warpgeo.compat.curobo.load_robot``'s reading of a cuRobo robot configuration into a
:class:`warpgeo.Robot` (the public function and its documentation are in ``curobo.py``): cuRobo's keys are
translated into :meth:`warpgeo.Robot.from_urdf`'s arguments, which builds the robot (compat is a layer over
the public API only)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import torch

from . import _curobo_yaml as curobo

#: cuRobo's joint types of an ``extra_links`` entry (its ``JointType``): ``Robot.from_urdf``'s type and axis.
_EXTRA_JOINTS = {
    "FIXED": ("fixed", None),
    "X_PRISM": ("prismatic", (1.0, 0.0, 0.0)),
    "Y_PRISM": ("prismatic", (0.0, 1.0, 0.0)),
    "Z_PRISM": ("prismatic", (0.0, 0.0, 1.0)),
    "X_ROT": ("revolute", (1.0, 0.0, 0.0)),
    "Y_ROT": ("revolute", (0.0, 1.0, 0.0)),
    "Z_ROT": ("revolute", (0.0, 0.0, 1.0)),
    "X_PRISM_NEG": ("prismatic", (-1.0, 0.0, 0.0)),
    "Y_PRISM_NEG": ("prismatic", (0.0, -1.0, 0.0)),
    "Z_PRISM_NEG": ("prismatic", (0.0, 0.0, -1.0)),
}


def load(config: Any, root: Any, device: torch.device | str):
    from .. import Robot

    path_folder = None
    if isinstance(config, (str, os.PathLike)):
        path_folder = os.path.dirname(os.path.abspath(os.fspath(config)))
    config, root_dir = curobo._robot_config(config, root)
    kinematics = _section(config)
    urdf = _urdf_path(kinematics.get("urdf_path"), root_dir, path_folder)
    base_link = kinematics.get("base_link")
    if base_link is not None and not isinstance(base_link, str):
        raise TypeError(f"base_link must be a link name; got {base_link!r:.60}")
    extra = _extra_links(kinematics.get("extra_links"))
    ee_link = _ee_link(kinematics)
    spheres, slots, order, margins = _spheres(kinematics, path_folder or root_dir)
    names = _cspace_names(kinematics.get("cspace"))
    # cuRobo's kinematic chain: the collision links, the tool frames and the extra links (and their ancestors)
    keep = [*order, *([] if ee_link is None else [ee_link]), *(entry["link"] for entry in extra)]
    for key in ("link_names", "tool_frames"):
        listed = kinematics.get(key)
        if isinstance(listed, (list, tuple)):
            keep += [name for name in listed if isinstance(name, str)]
    return Robot.from_urdf(
        urdf,
        spheres=spheres,
        base_link=base_link,
        lock_joints=kinematics.get("lock_joints"),
        joint_names=names,
        self_collision_ignore=curobo._ignored_links(kinematics.get("self_collision_ignore")),
        extra_links=extra,
        sphere_slots=slots,
        self_margin=margins,
        ee_link=ee_link,
        keep_links=keep or None,
        ignore_unknown_links=True,
        device=device,
    )


def _section(config: Mapping) -> Mapping:
    """``robot_cfg: kinematics:`` (or ``kinematics:``, or the configuration itself)."""
    section: Any = config
    for key in ("robot_cfg", "kinematics"):
        if isinstance(section, Mapping) and "urdf_path" not in section and key in section:
            section = section[key]
    if not isinstance(section, Mapping) or "urdf_path" not in section:
        raise ValueError(
            "config has no urdf_path (looked in robot_cfg.kinematics, kinematics and at the top level)"
        )
    return section


def _urdf_path(value: Any, root: str | None, folder: str | None) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"urdf_path must be a path; got {type(value).__name__} {value!r:.60}")
    path = os.fspath(value)
    tried = []
    for start in (root, folder, None):
        candidate = path if start is None or os.path.isabs(path) else os.path.join(start, path)
        if os.path.isfile(candidate):
            return candidate
        tried.append(candidate)
    raise ValueError(f"urdf_path: no such file {path!r} (tried {sorted(set(tried))}; pass root=)")


def _ee_link(kinematics: Mapping) -> str | None:
    ee = kinematics.get("ee_link")
    if ee is None:
        frames = kinematics.get("tool_frames")
        if isinstance(frames, (list, tuple)) and frames:
            ee = frames[0]
    if ee is not None and not isinstance(ee, str):
        raise TypeError(f"ee_link must be a link name; got {ee!r:.60}")
    return ee


def _extra_links(extra: Any) -> list[dict[str, Any]]:
    """cuRobo's ``extra_links`` as ``Robot.from_urdf``'s entries: ``fixed_transform`` [x, y, z, qw, qx, qy, qz]
    to the parent (its ``pose``), then the joint's motion along x, y or z; ``child_link_name`` (its ``child``)
    re-parents that link under the extra one (cuRobo's floating bases: a chain of six extra joints above the
    URDF's root). The links themselves (new, parent, child) are checked by ``from_urdf``."""
    where = "extra_links"
    if extra is None:
        return []
    if not isinstance(extra, Mapping):
        raise TypeError(f"{where} must map link names to link descriptions; got {type(extra).__name__}")
    entries = []
    for name, fields in extra.items():
        at = f"{where}[{name!r}]"
        if not isinstance(fields, Mapping):
            raise TypeError(f"{at} must be a mapping; got {type(fields).__name__}")
        link = fields.get("link_name", name)
        parent = fields.get("parent_link_name")
        if not isinstance(link, str) or not isinstance(parent, str):
            raise TypeError(
                f"{at}: link_name and parent_link_name must be link names; got {link!r}, {parent!r}"
            )
        kind = str(fields.get("joint_type", "FIXED")).upper()
        if kind not in _EXTRA_JOINTS:
            raise ValueError(f"{at}: joint_type {kind!r} is not one of cuRobo's {', '.join(_EXTRA_JOINTS)}")
        joint_type, axis = _EXTRA_JOINTS[kind]
        limits = fields.get("joint_limits")
        if limits is None:
            limits = (-math.inf, math.inf)
        elif not isinstance(limits, (list, tuple)) or len(limits) != 2:
            raise ValueError(f"{at}.joint_limits must be [lower, upper]; got {limits!r:.60}")
        else:
            limits = tuple(curobo._float_value(v, f"{at}.joint_limits") for v in limits)
        transform = fields.get("fixed_transform", [0, 0, 0, 1, 0, 0, 0])
        pose = [curobo._float_value(v, f"{at}.fixed_transform") for v in _list(transform, 7, at)]
        norm = math.sqrt(sum(v * v for v in pose[3:]))
        if abs(norm - 1.0) > 1e-3:
            raise ValueError(f"{at}.fixed_transform: the quaternion must be unit; got norm {norm:.6g}")
        entry = {"link": link, "parent": parent, "pose": pose, "type": joint_type, "limits": limits}
        entry["joint"] = str(fields.get("joint_name", f"{link}_joint"))
        if axis is not None:
            entry["axis"] = axis
        child = fields.get("child_link_name")
        if child is not None:
            entry["child"] = child
        entries.append(entry)
    return entries


def _list(value: Any, size: int, where: str) -> list:
    if not isinstance(value, (list, tuple)) or len(value) != size:
        raise ValueError(
            f"{where}.fixed_transform must be {size} numbers [x, y, z, qw, qx, qy, qz]; got {value!r:.80}"
        )
    return list(value)


def _spheres(kinematics: Mapping, folder: str | None):
    """``(spheres {link: rows}, slots {link: n}, collision link order, margins {link: m})``, with
    ``collision_sphere_buffer`` added to the enabled spheres' radii."""
    table = curobo._sphere_table(kinematics.get("collision_spheres"), folder)
    extra = curobo._extra_spheres(kinematics.get("extra_collision_spheres"))
    order = curobo._collision_links(kinematics.get("collision_link_names"), table, extra)
    margins = curobo._buffers(kinematics.get("self_collision_buffer"))
    buffer = kinematics.get("collision_sphere_buffer")
    spheres = {}
    for link in order:
        rows = [curobo._sphere(entry, link, n) for n, entry in enumerate(table.get(link, ()))]
        pad = _buffer(buffer, link)
        spheres[link] = [[*row[:3], row[3] + pad] if row[3] >= 0 else row for row in rows]
    return spheres, extra, order, margins


def _buffer(buffer: Any, link: str) -> float:
    """``collision_sphere_buffer``: one number for every link, or ``{link: metres}``."""
    if buffer is None:
        return 0.0
    if isinstance(buffer, Mapping):
        value = buffer.get(link)
        return 0.0 if value is None else curobo._float_value(value, f"collision_sphere_buffer[{link!r}]")
    return curobo._float_value(buffer, "collision_sphere_buffer")


def _cspace_names(cspace: Any) -> list[str] | None:
    if cspace is None:
        return None
    if not isinstance(cspace, Mapping):
        raise TypeError(f"cspace must be a mapping; got {type(cspace).__name__}")
    names = cspace.get("joint_names")
    if names is None:
        return None
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"cspace.joint_names must be a list of joint names; got {names!r:.80}")
    return list(names)
