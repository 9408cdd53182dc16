"""A robot's kinematic tree from names to arrays (for :class:`warpgeo.robot.Robot`): reading a URDF,
ordering the links (parents first), folding mimic and locked joints into per-link multipliers and offsets,
and placing the spheres. Plain Python and NumPy; the URDF parser (yourdfpy) is imported on use.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

#: URDF joint types -> the kernels' joint kinds (``warpgeo/_kernels/robot.py``: 0 fixed, 1 revolute,
#: 2 prismatic). ``floating`` and ``planar`` (6 and 3 DoF) are not supported.
JOINT_KINDS = {"fixed": 0, "revolute": 1, "continuous": 1, "prismatic": 2}
#: A disabled sphere (an empty attached-object slot): at the link's origin, radius -10 (cuRobo's).
DISABLED_SPHERE = (0.0, 0.0, 0.0, -10.0)
_IDENTITY = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
#: The robot's tables are kept in float32 too: a value beyond this would be inf there.
FLOAT32_MAX = float(np.finfo(np.float32).max)


class Joint(NamedTuple):
    """One joint as the tree builder takes it (from a URDF or a cuRobo ``extra_links`` entry)."""

    name: str
    type: str
    parent: str
    child: str
    origin: tuple  # [x, y, z, qw, qx, qy, qz]: the child's joint frame in the parent's frame
    axis: tuple
    limits: tuple  # (lower, upper)
    mimic: tuple | None  # (joint, multiplier, offset)


class Tree(NamedTuple):
    """Everything :class:`~warpgeo.robot.Robot` holds, as lists and NumPy arrays."""

    link_names: list
    parents: np.ndarray
    joint_types: np.ndarray
    joint_index: np.ndarray
    axes: np.ndarray
    origins: np.ndarray
    mimic: np.ndarray
    joint_names: list
    joint_limits: np.ndarray
    sphere_links: np.ndarray
    local_spheres: np.ndarray
    pairs: np.ndarray
    self_margin: np.ndarray
    slots: dict
    ee_link: str | None


# --------------------------------------------------------------------------------------------------------
# reading a URDF
# --------------------------------------------------------------------------------------------------------


def read_urdf(urdf: Any) -> tuple[list[str], list[Joint]]:
    """A URDF's links and joints (a path, or the XML text starting with ``<``), with yourdfpy."""
    if not isinstance(urdf, (str, os.PathLike)):
        raise TypeError(f"urdf must be a file path or the URDF's XML text; got {type(urdf).__name__}")
    try:
        import yourdfpy
    except ImportError as exc:
        raise ImportError(
            'Robot.from_urdf reads URDFs with yourdfpy: pip install "warpgeo[robot]" (or yourdfpy)'
        ) from exc
    text = os.fspath(urdf)
    if isinstance(urdf, str) and text.lstrip().startswith("<"):
        source: Any = io.BytesIO(text.encode("utf-8"))
        where = "urdf (XML text)"
    else:
        if not os.path.isfile(text):
            raise ValueError(f"urdf: no such file {text!r}")
        source, where = text, f"urdf {text!r}"
    try:
        model = yourdfpy.URDF.load(
            source,
            build_scene_graph=False,
            build_collision_scene_graph=False,
            load_meshes=False,
            load_collision_meshes=False,
        )
    except Exception as exc:  # lxml and yourdfpy raise many types for a malformed file
        raise ValueError(f"{where} could not be read as a URDF: {type(exc).__name__}: {exc}") from exc
    robot = model.robot
    links = [str(link.name) for link in robot.links]
    joints = []
    for j in robot.joints:
        origin = _pose_of_matrix(np.eye(4) if j.origin is None else np.asarray(j.origin, dtype=np.float64))
        axis = (1.0, 0.0, 0.0) if j.axis is None else tuple(float(a) for a in np.asarray(j.axis).reshape(-1))
        lower = upper = None
        if j.limit is not None:
            lower, upper = j.limit.lower, j.limit.upper
        if j.type == "continuous" or lower is None or upper is None:
            lower, upper = -math.inf, math.inf
        mimic = None
        if j.mimic is not None:
            mult = 1.0 if j.mimic.multiplier is None else float(j.mimic.multiplier)
            offset = 0.0 if j.mimic.offset is None else float(j.mimic.offset)
            mimic = (str(j.mimic.joint), mult, offset)
        joints.append(
            Joint(str(j.name), str(j.type), str(j.parent), str(j.child), origin, axis, (lower, upper), mimic)
        )
    return links, joints


def _pose_of_matrix(m: np.ndarray) -> tuple:
    """A 4x4 rigid transform as ``[x, y, z, qw, qx, qy, qz]`` (Shepperd's method: stable for any angle)."""
    if m.shape != (4, 4) or not np.isfinite(m).all():
        raise ValueError(f"a joint origin must be a finite 4x4 transform; got {m.tolist()}")
    r = m[:3, :3]
    trace = np.trace(r)
    if trace > 0:
        s = 2.0 * math.sqrt(trace + 1.0)
        q = (0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s)
    elif r[0, 0] > r[1, 1] and r[0, 0] > r[2, 2]:
        s = 2.0 * math.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2])
        q = ((r[2, 1] - r[1, 2]) / s, 0.25 * s, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s)
    elif r[1, 1] > r[2, 2]:
        s = 2.0 * math.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2])
        q = ((r[0, 2] - r[2, 0]) / s, (r[0, 1] + r[1, 0]) / s, 0.25 * s, (r[1, 2] + r[2, 1]) / s)
    else:
        s = 2.0 * math.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1])
        q = ((r[1, 0] - r[0, 1]) / s, (r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, 0.25 * s)
    quat = np.asarray(q) / np.linalg.norm(q)
    return (*m[:3, 3].tolist(), *quat.tolist())


# --------------------------------------------------------------------------------------------------------
# Robot.from_urdf's options: extra links, sphere slots, self-collision margins, the links kept
# --------------------------------------------------------------------------------------------------------

#: The keys of an ``extra_links`` entry.
EXTRA_LINK_KEYS = ("link", "parent", "pose", "type", "axis", "limits", "joint", "child")
#: The most disabled spheres ``sphere_slots`` may give one link (cuRobo's configurations use 4-100).
MAX_SLOTS = 2**16
#: How far from 1 the norm of an extra link's quaternion may be (it is then normalised).
UNIT_TOLERANCE = 1e-3


def add_extra_links(links: Sequence[str], joints: Sequence[Joint], extra_links: Any) -> tuple[list, list]:
    """The URDF's links and joints with ``extra_links`` added (``Robot.from_urdf`` documents the entries).

    An entry's ``child`` (a link already placed: the URDF's, or an earlier entry's) moves under the new link:
    its joint keeps its origin and motion but takes the new link as parent; a link with no parent joint (the
    URDF's root) is fixed to the new link at its origin. Returns ``(links, joints)``: the URDF's joints
    (re-parented where asked, root fixings appended), then the entries' joints, in order."""
    links, joints = list(links), list(joints)
    if extra_links is None:
        return links, joints
    if isinstance(extra_links, (str, bytes, Mapping)) or not isinstance(extra_links, Sequence):
        raise TypeError(
            f"extra_links must be a list of mappings {{'link', 'parent', ...}}; got {type(extra_links).__name__}"
        )
    known = set(links)
    for n, entry in enumerate(extra_links):
        if not isinstance(entry, Mapping):
            raise TypeError(
                f"extra_links[{n}] must be a mapping {{'link', 'parent', ...}}; got {type(entry).__name__}"
            )
    every_link = known | {entry.get("link") for entry in extra_links if isinstance(entry.get("link"), str)}
    added: list[Joint] = []
    for n, entry in enumerate(extra_links):
        at = f"extra_links[{n}]"
        unknown = [key for key in entry if key not in EXTRA_LINK_KEYS]
        if unknown:
            raise ValueError(f"{at}: unknown key {unknown[0]!r} (the keys: {', '.join(EXTRA_LINK_KEYS)})")
        link, parent = entry.get("link"), entry.get("parent")
        for key, value in (("link", link), ("parent", parent)):
            if not isinstance(value, str):
                raise TypeError(f"{at}['{key}'] must be a link name; got {value!r:.60}")
        at = f"{at} (link {link!r})"
        if link in known:
            raise ValueError(f"{at}: link {link!r} is a link of the robot already")
        if parent not in every_link:
            raise ValueError(f"{at}: parent {parent!r} is not a link of the URDF nor an extra link")
        kind = entry.get("type", "fixed")
        if kind not in JOINT_KINDS:
            raise ValueError(f"{at}['type'] must be one of {', '.join(JOINT_KINDS)}; got {kind!r:.60}")
        joint = entry.get("joint", f"{link}_joint")
        if not isinstance(joint, str):
            raise TypeError(f"{at}['joint'] must be a joint name; got {joint!r:.60}")
        pose = _finite(entry.get("pose", _IDENTITY), 7, f"{at}['pose'] [x, y, z, qw, qx, qy, qz]")
        norm = float(np.linalg.norm(pose[3:]))
        if abs(norm - 1.0) > UNIT_TOLERANCE:
            raise ValueError(f"{at}['pose']: the quaternion must be unit; got norm {norm:.6g}")
        pose[3:] /= norm
        axis, limits = (0.0, 0.0, 1.0), (-math.inf, math.inf)
        if entry.get("axis") is not None:
            axis = tuple(_finite(entry["axis"], 3, f"{at}['axis']").tolist())
        elif kind != "fixed":
            raise ValueError(f"{at}: a {kind} joint needs an 'axis' [x, y, z]")
        if entry.get("limits") is not None:
            limits = _limits(entry["limits"], f"{at}['limits']")
        added.append(Joint(joint, kind, parent, link, tuple(pose.tolist()), axis, limits, None))
        known.add(link)
        links.append(link)
        child = entry.get("child")
        if child is None:
            continue
        if not isinstance(child, str):
            raise TypeError(f"{at}['child'] must be a link name; got {child!r:.60}")
        if child not in known or child == link:
            raise ValueError(f"{at}['child'] {child!r} is not a link of the URDF nor an earlier extra link")
        above = [k for k, j in enumerate(joints) if j.child == child]
        above_extra = [k for k, j in enumerate(added) if j.child == child]
        if above:  # the child keeps its joint, under the new link
            joints[above[0]] = joints[above[0]]._replace(parent=link)
        elif above_extra:
            added[above_extra[0]] = added[above_extra[0]]._replace(parent=link)
        else:  # a root: fixed to the new link
            joints.append(
                Joint(f"{link}_to_{child}", "fixed", link, child, _IDENTITY, axis, (0.0, 0.0), None)
            )
    return links, [*joints, *added]


def _limits(value: Any, where: str) -> tuple[float, float]:
    """``[lower, upper]``: two numbers, not NaN (``±inf``: unbounded; not enforced, as a URDF's)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence) or len(value) != 2:
        raise ValueError(f"{where} must be [lower, upper]; got {value!r:.60}")
    numbers = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{where} must hold numbers; got {v!r:.60}")
        number = float(v)
        if math.isnan(number):
            raise ValueError(f"{where} must not be NaN")
        numbers.append(number)
    return numbers[0], numbers[1]


def check_slots(sphere_slots: Any) -> dict[str, int]:
    """``sphere_slots`` ``{link: n}`` as a dict of ints in ``[0, MAX_SLOTS]`` (the links are checked by
    :func:`build`)."""
    if sphere_slots is None:
        return {}
    if not isinstance(sphere_slots, Mapping):
        raise TypeError(f"sphere_slots must map link names to counts; got {type(sphere_slots).__name__}")
    slots = {}
    for link, count in sphere_slots.items():
        if not isinstance(link, str):
            raise TypeError(f"sphere_slots: link names must be strings; got {link!r:.60}")
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)):
            raise TypeError(f"sphere_slots[{link!r}] must be an int; got {count!r:.60}")
        if not 0 <= count <= MAX_SLOTS:
            raise ValueError(f"sphere_slots[{link!r}] must lie in [0, {MAX_SLOTS}]; got {count}")
        slots[link] = int(count)
    return slots


def check_margins(self_margin: Any, links: Sequence[str], ignore_unknown: bool) -> dict[str, float]:
    """``self_margin`` ``{link: metres}`` as a dict of finite floats; a name not among ``links`` (the URDF's
    and the extra links) is refused, or skipped with ``ignore_unknown``."""
    if self_margin is None:
        return {}
    if not isinstance(self_margin, Mapping):
        raise TypeError(f"self_margin must map link names to metres; got {type(self_margin).__name__}")
    known = set(links)
    margins = {}
    for link, value in self_margin.items():
        if not isinstance(link, str):
            raise TypeError(f"self_margin: link names must be strings; got {link!r:.60}")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"self_margin[{link!r}] must be a number; got {value!r:.60}")
        if link not in known:
            if ignore_unknown:
                continue
            raise ValueError(f"self_margin names link {link!r}, which is not a link of the robot")
        margins[link] = float(_finite([value], 1, f"self_margin[{link!r}]")[0])
    return margins


def check_names(values: Any, name: str) -> list[str] | None:
    """A list of link names (``keep_links``), or None."""
    if values is None:
        return None
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list of link names; got {type(values).__name__}")
    names = list(values)
    for value in names:
        if not isinstance(value, str):
            raise TypeError(f"{name} must hold link names; got {value!r:.60}")
    return names


# --------------------------------------------------------------------------------------------------------
# the tree
# --------------------------------------------------------------------------------------------------------


def build(
    links: Sequence[str],
    joints: Sequence[Joint],
    *,
    base_link: str | None = None,
    lock_joints: Mapping[str, float] | None = None,
    joint_names: Sequence[str] | None = None,
    spheres: Mapping[str, Any] | None = None,
    slots: Mapping[str, int] | None = None,
    self_margin: Mapping[str, float] | None = None,
    self_collision_ignore: Any = (),
    ignore_unknown: bool = False,
    ee_link: str | None = None,
    keep_links: Iterable[str] | None = None,
) -> Tree:
    """The arrays of a robot: links in tree order from ``base_link``, ``q``'s columns, spheres, pairs.

    ``spheres``' order is the spheres' order; ``slots`` ``{link: n}`` adds n disabled spheres after the
    link's own (links without spheres at the end). ``ignore_unknown``: ignore-list links not in the tree
    are skipped (cuRobo's lists name links of other variants) instead of refused. ``keep_links``: only
    these links and their ancestors are kept (cuRobo's kinematic chain: the tool frames and the collision
    links); default: every link below the base. ``Robot.from_urdf`` documents each option (and checks
    ``slots`` and ``self_margin`` first: :func:`check_slots`, :func:`check_margins`)."""
    from .self_collision import collision_pairs

    known = set(links)
    by_child: dict[str, Joint] = {}
    children: dict[str, list[Joint]] = {name: [] for name in links}
    names = set()
    for j in joints:
        if j.name in names:
            raise ValueError(f"joint {j.name!r} is declared twice")
        names.add(j.name)
        if j.type not in JOINT_KINDS:
            kinds = ", ".join(JOINT_KINDS)
            raise ValueError(f"joint {j.name!r} has type {j.type!r}; supported joint types: {kinds}")
        for role, link in (("parent", j.parent), ("child", j.child)):
            if link not in known:
                raise ValueError(f"joint {j.name!r} names {role} link {link!r}, which is not a link")
        if j.child in by_child:
            raise ValueError(
                f"link {j.child!r} is the child of two joints ({by_child[j.child].name!r}, {j.name!r}): a "
                "kinematic tree has one parent per link (a closed chain or a cycle)"
            )
        by_child[j.child] = j
        children[j.parent].append(j)
    if not links:
        raise ValueError("the URDF has no links")
    for option, named in (("spheres", spheres), ("sphere_slots", slots)):
        for link in named if isinstance(named, Mapping) else ():
            if link not in known:  # before the pruning: the message says the link is nowhere
                raise ValueError(f"{option} names link {link!r}, which is not a link of the robot")
    explicit_base = base_link is not None
    if base_link is None:
        roots = [name for name in links if name not in by_child]
        if len(roots) != 1:
            raise ValueError(
                f"the URDF must have one root link (no parent joint); found {roots or 'none (a cycle)'}"
            )
        base_link = roots[0]
    elif not isinstance(base_link, str) or base_link not in known:
        raise ValueError(f"base_link {base_link!r} is not a link of the URDF")
    # links in depth-first order from the base: a parent before its children
    order: list[str] = []
    link_joint: list[Joint | None] = []
    stack: list[tuple[str, Joint | None]] = [(base_link, None)]
    seen: set[str] = set()
    while stack:
        link, via = stack.pop()
        if link in seen:
            raise ValueError(f"the kinematic tree has a cycle through link {link!r}")
        seen.add(link)
        order.append(link)
        link_joint.append(via)
        stack.extend((j.child, j) for j in reversed(children[link]))
    if len(seen) < len(links) and not explicit_base:
        # one root, and every link has at most one parent: a link the walk missed is on a cycle
        cyclic = next(name for name in links if name not in seen)
        raise ValueError(f"the kinematic tree has a cycle through link {cyclic!r}")
    if keep_links is not None:
        order, link_joint = _prune(order, link_joint, keep_links, by_child, base_link)
    index = {name: k for k, name in enumerate(order)}
    tree_joints = {j.name: j for j in link_joint if j is not None}
    # joints of links left out (``keep_links``) may be locked or listed: they move nothing kept
    pruned = {j.name for j in joints if j.name not in tree_joints} if keep_links is not None else set()
    lock = _lock_values(lock_joints, tree_joints, pruned)
    moving = [
        j.name
        for j in link_joint
        if j is not None and j.type != "fixed" and j.mimic is None and j.name not in lock
    ]
    columns = _columns(joint_names, moving, lock, tree_joints, pruned)
    count = len(order)
    parents = np.full(count, -1, dtype=np.int32)
    kinds = np.zeros(count, dtype=np.int32)
    joint_index = np.full(count, -1, dtype=np.int32)
    axes = np.zeros((count, 3))
    axes[:, 2] = 1.0
    origins = np.tile(np.asarray(_IDENTITY), (count, 1))
    mimic = np.tile(np.array([1.0, 0.0]), (count, 1))
    for k, j in enumerate(link_joint):
        if j is None:
            continue
        parents[k] = index[j.parent]
        origins[k] = _finite(j.origin, 7, f"joint {j.name!r}: origin")
        if j.type == "fixed":
            continue
        kinds[k] = JOINT_KINDS[j.type]
        axis = _finite(j.axis, 3, f"joint {j.name!r}: axis")
        norm = float(np.linalg.norm(axis))
        if norm < 1e-12:
            raise ValueError(f"joint {j.name!r} is a {j.type} joint with a zero axis {axis.tolist()}")
        axes[k] = axis / norm
        column, mult, offset = _resolve(j, tree_joints, columns, lock)
        joint_index[k], mimic[k] = column, (mult, offset)
    limits = np.array([tree_joints[name].limits for name in columns], dtype=np.float64).reshape(-1, 2)
    rows, sphere_links, margins, slot_index = _place_spheres(spheres, slots, self_margin, index)
    ignore = self_collision_ignore
    if ignore_unknown:
        ignore = [(a, b) for a, b in _ignore_pairs(ignore) if a in index and b in index]
    pairs = collision_pairs(sphere_links, ignore=ignore, names=order).numpy()
    if ee_link is not None and ee_link not in index:
        raise ValueError(f"ee_link {ee_link!r} is not a link of the tree")
    return Tree(
        link_names=order,
        parents=parents,
        joint_types=kinds,
        joint_index=joint_index,
        axes=axes,
        origins=origins,
        mimic=mimic,
        joint_names=columns,
        joint_limits=limits,
        sphere_links=np.asarray(sphere_links, dtype=np.int64),
        local_spheres=np.asarray(rows, dtype=np.float64).reshape(-1, 4),
        pairs=pairs,
        self_margin=np.asarray(margins, dtype=np.float64),
        slots=slot_index,
        ee_link=ee_link,
    )


def _prune(order: list, link_joint: list, keep: Iterable[str], by_child: Mapping[str, Joint], base: str):
    """The links of ``order`` that are in ``keep`` or an ancestor of one (in order), and their joints."""
    placed = set(order)
    needed = {base}
    for link in keep:
        if link not in placed:
            where = (
                "below base_link " + repr(base) if link in by_child or link == base else "a link of the robot"
            )
            raise ValueError(f"keep_links names link {link!r}, which is not {where}")
        while link not in needed:
            needed.add(link)
            link = by_child[link].parent
    kept = [(name, j) for name, j in zip(order, link_joint, strict=True) if name in needed]
    return [name for name, _ in kept], [j for _, j in kept]


def _finite(values: Any, size: int, where: str) -> np.ndarray:
    try:
        array = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{where} must be {size} finite numbers; got {values!r:.80}") from None
    if array.shape != (size,) or not np.isfinite(array).all() or np.abs(array).max() > FLOAT32_MAX:
        raise ValueError(f"{where} must be {size} finite numbers within float32's range; got {values!r:.80}")
    return array


def _lock_values(lock_joints: Any, tree_joints: Mapping[str, Joint], pruned: set[str]) -> dict[str, float]:
    if lock_joints is None:
        return {}
    if not isinstance(lock_joints, Mapping):
        raise TypeError(f"lock_joints must map joint names to values; got {type(lock_joints).__name__}")
    lock = {}
    for name, value in lock_joints.items():
        if name in pruned:
            continue
        if name not in tree_joints:
            raise ValueError(f"lock_joints names {name!r}, which is not a joint of the tree")
        if tree_joints[name].type == "fixed":
            raise ValueError(f"lock_joints names {name!r}, a fixed joint")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"lock_joints[{name!r}] must be a number; got {value!r:.60}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number) or abs(number) > FLOAT32_MAX:
            raise ValueError(
                f"lock_joints[{name!r}] must be finite and within float32's range; got {value!r:.60}"
            )
        lock[str(name)] = number
    return lock


def _columns(
    joint_names: Any,
    moving: list[str],
    lock: Mapping[str, float],
    tree_joints: Mapping[str, Joint],
    pruned: set[str],
) -> list[str]:
    """``q``'s columns: ``joint_names`` less locked joints (cuRobo lists them in its c-space), or tree order."""
    if joint_names is None:
        return list(moving)
    if isinstance(joint_names, (str, bytes)) or not isinstance(joint_names, Sequence):
        raise TypeError(f"joint_names must be a list of joint names; got {type(joint_names).__name__}")
    columns = []
    for name in joint_names:
        if not isinstance(name, str):
            raise TypeError(f"joint_names must hold joint names; got {name!r:.60}")
        if name in pruned:
            continue
        if name not in tree_joints:
            raise ValueError(f"joint_names names {name!r}, which is not a joint of the tree")
        if name in lock:
            continue
        if name in columns:
            raise ValueError(f"joint_names names {name!r} twice")
        if name not in moving:
            raise ValueError(
                f"joint_names names {name!r}, which is fixed or a mimic joint (not a value of q)"
            )
        columns.append(name)
    missing = [name for name in moving if name not in columns]
    if missing:
        raise ValueError(f"joint_names misses the moving joints {missing} (lock them or list them)")
    return columns


def _resolve(j: Joint, tree_joints: Mapping[str, Joint], columns: list[str], lock: Mapping[str, float]):
    """``(column of q or -1, multiplier, offset)`` of a moving joint: mimic chains followed, locks applied."""
    mult, offset = 1.0, 0.0
    seen = set()
    while True:
        if j.name in seen:
            raise ValueError(f"joint {j.name!r}: mimic joints form a cycle")
        seen.add(j.name)
        if j.name in lock:
            return -1, 1.0, mult * lock[j.name] + offset
        if j.mimic is None:
            return columns.index(j.name), mult, offset
        target, m, o = j.mimic
        if target not in tree_joints or tree_joints[target].type == "fixed":
            raise ValueError(f"joint {j.name!r} mimics {target!r}, which is not a moving joint of the tree")
        if not (math.isfinite(m) and math.isfinite(o)) or max(abs(m), abs(o)) > FLOAT32_MAX:
            raise ValueError(
                f"joint {j.name!r}: mimic multiplier and offset must be finite, within float32's range; got {m}, {o}"
            )
        mult, offset = mult * m, mult * o + offset
        j = tree_joints[target]


def _place_spheres(
    spheres: Any, slots: Any, self_margin: Any, index: Mapping[str, int]
) -> tuple[list, list, list, dict]:
    """Rows ``[x, y, z, r]``, their link indices, margins and each link's slot indices."""
    spheres = {} if spheres is None else spheres
    slots = {} if slots is None else slots
    margins_by_link = {} if self_margin is None else self_margin
    if not isinstance(spheres, Mapping):
        raise TypeError(f"spheres must map link names to [[x, y, z, r], ...]; got {type(spheres).__name__}")
    rows: list = []
    links: list = []
    margins: list = []
    slot_index: dict[str, list[int]] = {}
    for link in [*spheres, *(name for name in slots if name not in spheres)]:
        if link not in index:
            option = "spheres" if link in spheres else "sphere_slots"
            raise ValueError(
                f"{option} names link {link!r}, which is not a link of the tree (not below base_link, or "
                "not kept by keep_links)"
            )
        own = spheres.get(link)
        own = np.zeros((0, 4)) if own is None or len(own) == 0 else np.asarray(own, dtype=np.float64)
        if own.ndim != 2 or own.shape[1] != 4 or not np.isfinite(own).all():
            raise ValueError(f"spheres[{link!r}] must be finite rows [x, y, z, r]; got shape {own.shape}")
        if own.size and np.abs(own).max() > FLOAT32_MAX:
            raise ValueError(f"spheres[{link!r}] must lie within float32's range (|x| <= 3.4e38)")
        first = len(rows)
        rows.extend(own.tolist())
        count = int(slots.get(link, 0))
        slot_index[link] = list(range(first + len(own), first + len(own) + count)) if count else []
        rows.extend([list(DISABLED_SPHERE)] * count)
        links.extend([index[link]] * (len(rows) - first))
        margins.extend([float(margins_by_link.get(link, 0.0))] * (len(rows) - first))
    slot_index = {link: ids for link, ids in slot_index.items() if ids}
    return rows, links, margins, slot_index


def _ignore_pairs(ignore: Any) -> Iterable[tuple[str, str]]:
    if isinstance(ignore, Mapping):
        return [(a, b) for a, others in ignore.items() if others for b in others]
    return [tuple(pair) for pair in ignore]
