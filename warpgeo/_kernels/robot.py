"""Forward kinematics of a robot (``warpgeo/robot.py``): joint values to link poses and sphere centres.

A thread owns one configuration ``b`` (row ``b`` of ``q``, ``(B, dof)``) and walks the links in their order,
a parent always before its children (``parents[k] < k``): link ``k``'s pose is its parent's pose, then the
joint's fixed ``origins[k]``, then the joint's motion (a rotation about ``axes[k]`` for a revolute joint, a
translation along it for a prismatic one) by the joint value ``mimic[k][0] * q[b, joint_index[k]] +
mimic[k][1]`` (a plain joint: multiplier 1, offset 0; a locked joint: no index, its value the offset). Then
each sphere: its link's pose applied to its local centre, the radius copied.

Poses are ``[x, y, z, qw, qx, qy, qz]`` (warpgeo's convention) in the rows of ``poses`` ``(B, L, 7)``; inside
the kernels quaternions are Warp's ``(x, y, z, w)``.

The backward kernel runs the same thread per configuration: it adds up, leaves to root, the force ``F``
(the sum of the output gradients on positions) and moment ``M`` (``sum x × g``, plus the rotational terms
of the pose gradients) of each link's subtree, then a revolute joint's gradient is ``w · (M - o × F)`` and a
prismatic joint's ``w · F`` (``w`` the joint's axis in the base frame, ``o`` its origin), times the mimic
multiplier, added to the joint's column. No atomics: each thread writes its own rows.

Trust nothing: a parent index outside ``[0, k)`` means "no parent" (the base frame), a joint index outside
``[0, dof)`` means "no joint value", a sphere link outside ``[0, L)`` means the base frame; every array's
length is checked before it is read. Pure Warp: no torch here.
"""

from typing import Any

import warp as wp

from warpgeo._kernels._table import KernelTable

#: Joint kinds (the torch side reads these numbers from here); any other number acts as FIXED.
JOINT_FIXED = wp.constant(0)
JOINT_REVOLUTE = wp.constant(1)
JOINT_PRISMATIC = wp.constant(2)
#: The width of a pose row: x, y, z, qw, qx, qy, qz.
POSE_WIDTH = wp.constant(7)

OPTIONS = {"enable_backward": False}


@wp.func
def moving(kind: wp.int32):
    """A revolute or prismatic joint (the kinds after FIXED)."""
    return kind >= JOINT_REVOLUTE and kind <= JOINT_PRISMATIC


@wp.func
def read_pose(rows: wp.array2d(dtype=Any), k: int):
    """Row ``k`` of an ``(L, 7)`` array of poses ``[x, y, z, qw, qx, qy, qz]`` as (position, Warp quaternion)."""
    p = wp.vector(rows[k, 0], rows[k, 1], rows[k, 2])
    r = wp.quaternion(rows[k, 4], rows[k, 5], rows[k, 6], rows[k, 3])
    return p, r


@wp.func
def read_link(poses: wp.array3d(dtype=Any), b: int, k: int):
    """Link ``k``'s pose in configuration ``b`` as (position, Warp quaternion)."""
    p = wp.vector(poses[b, k, 0], poses[b, k, 1], poses[b, k, 2])
    r = wp.quaternion(poses[b, k, 4], poses[b, k, 5], poses[b, k, 6], poses[b, k, 3])
    return p, r


@wp.func
def joint_value(q: wp.array2d(dtype=Any), b: int, index: int, scale_offset: Any):
    """The value of a joint: ``multiplier * q[b, index] + offset``, the offset alone without a valid index."""
    value = scale_offset[1]
    if index >= 0 and index < q.shape[1]:
        value = value + scale_offset[0] * q[b, index]
    return value


@wp.func
def link_count(
    parents: wp.array(dtype=wp.int32),
    joint_types: wp.array(dtype=wp.int32),
    joint_index: wp.array(dtype=wp.int32),
    axes: wp.array(dtype=Any),
    origins: wp.array2d(dtype=Any),
    mimic: wp.array(dtype=Any),
    poses: wp.array3d(dtype=Any),
):
    """How many links every array holds (0 when a pose row is narrower than 7)."""
    n = wp.min(wp.min(parents.shape[0], joint_types.shape[0]), wp.min(joint_index.shape[0], axes.shape[0]))
    n = wp.min(wp.min(n, origins.shape[0]), wp.min(mimic.shape[0], poses.shape[1]))
    if origins.shape[1] < POSE_WIDTH or poses.shape[2] < POSE_WIDTH:
        n = 0
    return n


@wp.func
def joint_frame(
    poses: wp.array3d(dtype=Any),
    origins: wp.array2d(dtype=Any),
    parents: wp.array(dtype=wp.int32),
    b: int,
    k: int,
):
    """The frame of link ``k``'s joint before its motion: the parent's pose then the joint's origin (the base
    frame stands for a parent outside ``[0, k)``)."""
    p0, r0 = read_pose(origins, k)
    par = int(parents[k])
    if par >= 0 and par < k:
        pp, rp = read_link(poses, b, par)
        return pp + wp.quat_rotate(rp, p0), rp * r0
    return p0, r0


def forward_kinematics(
    q: wp.array2d(dtype=Any),
    parents: wp.array(dtype=wp.int32),
    joint_types: wp.array(dtype=wp.int32),
    joint_index: wp.array(dtype=wp.int32),
    axes: wp.array(dtype=Any),
    origins: wp.array2d(dtype=Any),
    mimic: wp.array(dtype=Any),
    sphere_links: wp.array(dtype=wp.int32),
    local_spheres: wp.array(dtype=Any),
    poses: wp.array3d(dtype=Any),
    spheres: wp.array2d(dtype=Any),
    row_start: int,
):
    """``poses[b]`` ``(L, 7)`` and ``spheres[b]`` ``(S,)`` x, y, z, radius of configuration ``b``."""
    b = wp.tid() + row_start
    if b >= q.shape[0] or b >= poses.shape[0]:
        return
    links = link_count(parents, joint_types, joint_index, axes, origins, mimic, poses)
    for k in range(links):
        p, r = joint_frame(poses, origins, parents, b, k)
        kind = joint_types[k]
        if moving(kind):
            value = joint_value(q, b, int(joint_index[k]), mimic[k])
            axis = axes[k]
            if kind == JOINT_REVOLUTE:
                r = r * wp.quat_from_axis_angle(axis, value)
            else:
                p = p + wp.quat_rotate(r, axis * value)
        poses[b, k, 0] = p[0]
        poses[b, k, 1] = p[1]
        poses[b, k, 2] = p[2]
        poses[b, k, 3] = r[3]
        poses[b, k, 4] = r[0]
        poses[b, k, 5] = r[1]
        poses[b, k, 6] = r[2]
    if b >= spheres.shape[0]:
        return
    count = wp.min(wp.min(sphere_links.shape[0], local_spheres.shape[0]), spheres.shape[1])
    for s in range(count):
        local = local_spheres[s]
        c = wp.vector(local[0], local[1], local[2])
        link = int(sphere_links[s])
        if link >= 0 and link < links:
            p, r = read_link(poses, b, link)
            c = p + wp.quat_rotate(r, c)
        spheres[b, s] = type(local)(c[0], c[1], c[2], local[3])


def forward_kinematics_backward(
    grad_poses: wp.array3d(dtype=Any),
    grad_spheres: wp.array3d(dtype=Any),
    poses: wp.array3d(dtype=Any),
    spheres: wp.array2d(dtype=Any),
    parents: wp.array(dtype=wp.int32),
    joint_types: wp.array(dtype=wp.int32),
    joint_index: wp.array(dtype=wp.int32),
    axes: wp.array(dtype=Any),
    origins: wp.array2d(dtype=Any),
    mimic: wp.array(dtype=Any),
    sphere_links: wp.array(dtype=wp.int32),
    force: wp.array2d(dtype=Any),
    moment: wp.array2d(dtype=Any),
    grad_q: wp.array2d(dtype=Any),
    row_start: int,
):
    """``grad_q[b]``: the gradient of ``sum(grad_poses * poses) + sum(grad_spheres * spheres)`` w.r.t.
    ``q[b]``; ``force`` / ``moment`` ``(B, L)`` are this thread's scratch rows. The gradients are plain
    arrays of any strides (the expanded gradient of a ``.sum()`` is read as it is); empty ones (shape
    ``(0, ...)``) contribute nothing."""
    b = wp.tid() + row_start
    if b >= poses.shape[0] or b >= grad_q.shape[0] or b >= force.shape[0] or b >= moment.shape[0]:
        return
    for j in range(grad_q.shape[1]):
        grad_q[b, j] = grad_q.dtype(0.0)
    links = link_count(parents, joint_types, joint_index, axes, origins, mimic, poses)
    links = wp.min(links, wp.min(force.shape[1], moment.shape[1]))
    zero = force.dtype()
    half = grad_q.dtype(0.5)
    with_poses = (
        b < grad_poses.shape[0] and grad_poses.shape[1] >= links and grad_poses.shape[2] >= POSE_WIDTH
    )
    for k in range(links):
        f = zero
        m = zero
        if with_poses:
            p, r = read_link(poses, b, k)
            gp = wp.vector(grad_poses[b, k, 0], grad_poses[b, k, 1], grad_poses[b, k, 2])
            gw = grad_poses[b, k, 3]
            gv = wp.vector(grad_poses[b, k, 4], grad_poses[b, k, 5], grad_poses[b, k, 6])
            qv = wp.vector(r[0], r[1], r[2])
            # d quat / d angle = 1/2 (0, w) ⊗ quat: its dot with the gradient is w · torque
            torque = half * (r[3] * gv - gw * qv + wp.cross(qv, gv))
            f = gp
            m = wp.cross(p, gp) + torque
        force[b, k] = f
        moment[b, k] = m
    if b < grad_spheres.shape[0] and b < spheres.shape[0] and grad_spheres.shape[2] >= 3:
        count = wp.min(wp.min(sphere_links.shape[0], spheres.shape[1]), grad_spheres.shape[1])
        for s in range(count):
            link = int(sphere_links[s])
            if link >= 0 and link < links:
                x4 = spheres[b, s]
                g = wp.vector(grad_spheres[b, s, 0], grad_spheres[b, s, 1], grad_spheres[b, s, 2])
                x = wp.vector(x4[0], x4[1], x4[2])
                force[b, link] = force[b, link] + g
                moment[b, link] = moment[b, link] + wp.cross(x, g)
    for step in range(links):
        k = links - 1 - step
        f = force[b, k]
        m = moment[b, k]
        kind = joint_types[k]
        index = int(joint_index[k])
        if moving(kind) and index >= 0 and index < grad_q.shape[1]:
            o, r = joint_frame(poses, origins, parents, b, k)
            w = wp.quat_rotate(r, axes[k])
            along = wp.dot(w, f)
            if kind == JOINT_REVOLUTE:
                along = wp.dot(w, m - wp.cross(o, f))
            grad_q[b, index] = grad_q[b, index] + mimic[k][0] * along
        par = int(parents[k])
        if par >= 0 and par < k:
            force[b, par] = force[b, par] + f
            moment[b, par] = moment[b, par] + m


def _types(scalar: Any, vec2: Any, vec3: Any, vec4: Any) -> dict[str, Any]:
    return {
        "q": wp.array2d(dtype=scalar),
        "axes": wp.array(dtype=vec3),
        "origins": wp.array2d(dtype=scalar),
        "mimic": wp.array(dtype=vec2),
        "local_spheres": wp.array(dtype=vec4),
        "poses": wp.array3d(dtype=scalar),
        "spheres": wp.array2d(dtype=vec4),
        "grad_poses": wp.array3d(dtype=scalar),
        "grad_spheres": wp.array3d(dtype=scalar),
        "force": wp.array2d(dtype=vec3),
        "moment": wp.array2d(dtype=vec3),
        "grad_q": wp.array2d(dtype=scalar),
    }


TYPES = {
    "float32": _types(wp.float32, wp.vec2f, wp.vec3f, wp.vec4f),
    "float64": _types(wp.float64, wp.vec2d, wp.vec3d, wp.vec4d),
}
#: ``KINEMATICS[precision]``: the forward kernel and its backward, one module per precision.
KINEMATICS = KernelTable(
    f"{__name__}.kinematics", (forward_kinematics, forward_kinematics_backward), TYPES, options=OPTIONS
)
