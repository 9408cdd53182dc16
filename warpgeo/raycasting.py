"""Ray casting against a :class:`MeshWorld`, and the sensors built on it (depth cameras, lidar, height scans).

One custom op, ``warpgeo::raycast`` (one Warp launch per call: ``warpgeo._kernels.raycasting``), declared with
:class:`~warpgeo._op.Op`; it takes the world as its declared inputs like the SDF ops (``world``: the list of
the world's tensors from ``MeshWorld.kernel_args``, ``all_cuboids``). Its backward differentiates the hit
distance (and point) w.r.t. the rays through the hit surface's tangent plane, in torch ops. The sensors
(:func:`camera_rays`, :func:`render_depth`, :func:`lidar_rays`, :func:`grid_rays`) are torch code around it:
rays written from the sensor's pose with torch ops, so autograd carries a depth image back to the pose.

The file reads: public functions, checks, the op (check, impl, fake, setup / backward), sensor helpers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from . import _ray_order, _warp, checks
from ._kernels import raycasting as kernels
from ._op import Op
from ._world_query import check_query, launch_query, prepare_launch, world_args
from .world import MeshWorld

__all__ = ["RayHits", "camera_rays", "grid_rays", "lidar_rays", "raycast", "render_depth"]

#: Cost of casting one ray against one slot in launch_rows' work units (a BVH ray query costs about what a
#: closest-point query does; see ``warpgeo._world_query.QUERY_WORK``).
_RAY_WORK = 256


class RayHits(NamedTuple):
    """What :func:`raycast` returns, each with the rays' leading shape ``(...)``.

    Attributes:
        distance: ``(...)`` distance along the unit direction to the first hit; ``inf`` on a miss. Dtype of
            the rays. Differentiable w.r.t. origins and directions.
        point: ``(..., 3)`` ``origin + distance * unit direction``; zeros on a miss. Differentiable.
        normal: ``(..., 3)`` unit surface normal at the hit, facing the ray's origin side
            (``normal . direction <= 0``); zeros on a miss. Not differentiated.
        entry: ``(...)`` int64, the slot hit in the ray's environment (``world.names[e][entry]`` names it);
            -1 on a miss.
    """

    distance: torch.Tensor
    point: torch.Tensor
    normal: torch.Tensor
    entry: torch.Tensor


# --------------------------------------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------------------------------------


def raycast(
    world: MeshWorld,
    origins: torch.Tensor,
    directions: torch.Tensor,
    *,
    max_distance: float = math.inf,
    env_index: torch.Tensor | None = None,
) -> RayHits:
    """The first hit of each ray over the enabled entries (meshes and primitives) of its environment.

    A ray is ``origin + t * direction / |direction|``, ``t >= 0``: ``distance`` is along the *unit* direction
    (directions need not be unit). The first surface crossing counts, front or back face alike: a ray that
    starts inside an entry (a closed mesh, a primitive) hits where it leaves it (its exit), the same for
    meshes and primitives; a ray starting on a surface hits it at distance 0. Ties (equal distance) go to the
    lowest entry. Meshes are queried with Warp's BVH ray query (float32) started where the ray enters the
    mesh's box, and the distance is recomputed in the rays' precision (float64 for float64 rays) on the plane
    of the face found; cuboid meshes and primitives (:mod:`warpgeo.primitives`) are closed forms in float64.
    A ray that grazes an edge or a vertex may hit either face there, or pass (float32 rounding), and the
    normal of a box hit exactly on an edge is that of the lowest axis's face.

    Gradients: ``distance`` and ``point`` are differentiable w.r.t. ``origins`` and ``directions``, through the
    hit surface's tangent plane ``n . (x - o) = t (n . u)``: ``d t / d o = -n / (n . u)`` and
    ``d t / d d = -t (n - (n . u) u) / ((n . u) |d|)`` with ``u = d / |d|``. A miss has gradient 0, and so
    does a hit along its surface (``n . u = 0``). ``normal`` and ``entry`` are not differentiated.

    Args:
        world: the :class:`MeshWorld`; poses and enable flags as every world op reads them.
        origins: ``(..., 3)`` ray origins in the world frame; float16, bfloat16, float32 or float64, on
            ``world.device``.
        directions: ``(..., 3)`` ray directions, same dtype; broadcast against ``origins`` (e.g. one origin
            ``(B, 1, 3)`` for ``(B, N, 3)`` directions). Nonzero and finite.
        max_distance: hits farther than this are misses; a float >= 0, ``inf`` (default): no bound.
        env_index: optional integer ``(B,)``: the environment of each entry of the leading dimension of the
            (broadcast) rays; environment 0 by default. 1-D rays ``(3,)`` are one batch entry.

    Returns:
        :class:`RayHits` ``(distance, point, normal, entry)``. No hit within ``max_distance``: distance
        ``inf``, point and normal zeros, entry -1.

    Raises:
        TypeError: non-float rays, rays of two dtypes, a non-integer ``env_index``, ``world`` not a
            MeshWorld, ``max_distance`` not a number.
        ValueError: shapes that are not ``(..., 3)`` or do not broadcast, a wrong device, NaN / inf in the
            rays or a zero direction (value checks on; with checks off such a ray is a miss), a negative or
            NaN ``max_distance``.
        IndexError: ``env_index`` outside ``[0, world.num_envs)`` (value checks on; with checks off the ray
            has no environment: a miss).

    Example:
        >>> world = MeshWorld([warpgeo.Sphere(1.0)])
        >>> hits = raycast(world, torch.tensor([-3.0, 0.0, 0.0]), torch.tensor([2.0, 0.0, 0.0]))
        >>> hits.distance, hits.normal, hits.entry
        (tensor(2.), tensor([-1., 0., 0.]), tensor(0))
    """
    if not isinstance(world, MeshWorld):
        raise TypeError(f"world must be a warpgeo.MeshWorld; got {type(world).__name__}")
    checks.check_float(origins, "origins")
    checks.check_float(directions, "directions")
    if directions.dtype != origins.dtype:
        raise TypeError(
            f"directions must have the dtype of origins ({origins.dtype}); got {directions.dtype}"
        )
    if origins.dim() == 0 or origins.shape[-1] != 3:
        raise ValueError(f"origins must have shape (..., 3); got {tuple(origins.shape)}")
    if directions.dim() == 0 or directions.shape[-1] != 3:
        raise ValueError(f"directions must have shape (..., 3); got {tuple(directions.shape)}")
    try:
        shape = torch.broadcast_shapes(origins.shape, directions.shape)
    except RuntimeError:
        raise ValueError(
            f"origins {tuple(origins.shape)} and directions {tuple(directions.shape)} do not broadcast"
        ) from None
    limit = _check_max_distance(max_distance)
    o = _rows(origins, shape)
    d = _rows(directions, shape)
    args = world_args(world, o.dtype)
    distance, point, normal, entry = _raycast.call(
        origins=o,
        directions=d,
        env_index=env_index,
        world=args.world,
        all_cuboids=args.all_cuboids,
        max_distance=limit,
    )
    lead = shape[:-1]
    return RayHits(distance.view(lead), point.view(shape), normal.view(shape), entry.view(lead))


# --------------------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------------------


def _check_max_distance(max_distance: Any) -> float:
    """``max_distance`` as a float >= 0 (inf: no bound); TypeError / ValueError naming it."""
    if isinstance(max_distance, bool) or not isinstance(max_distance, (int, float)):
        raise TypeError(f"max_distance must be a float; got {type(max_distance).__name__}")
    try:
        value = float(max_distance)
    except OverflowError:
        value = math.inf  # an int beyond float64: no bound
    if not value >= 0.0:
        raise ValueError(f"max_distance must be >= 0 (inf: no bound); got {value}")
    return value


def _check_raycast(origins, directions, env_index, world, all_cuboids, max_distance) -> None:
    """Shapes, dtypes and devices of the rays, ``env_index`` and the world; reads no tensor values."""
    check_query(origins, "origins", 3, 3, env_index, world, all_cuboids)
    checks.check_float(directions, "directions")
    if directions.dtype != origins.dtype:
        raise TypeError(
            f"directions must have the dtype of origins ({origins.dtype}); got {directions.dtype}"
        )
    if directions.shape != origins.shape:
        raise ValueError(
            f"directions must have the shape of origins {tuple(origins.shape)}; got {tuple(directions.shape)}"
        )
    if directions.device != origins.device:
        raise ValueError(
            f"directions must be on the device of origins ({origins.device}); got {directions.device}"
        )
    _check_max_distance(max_distance)


def _direction_checks(directions: torch.Tensor) -> list:
    """The rays' own value checks (``extra`` of ``_world_query.check_values``, read with the origins', the
    environments' and the mesh ids' in one device-to-host transfer): finite directions, none zero."""

    def finite(total: float) -> None:
        if not math.isfinite(total) and not bool(torch.isfinite(directions).all()):
            raise ValueError("directions must be finite: found NaN or inf")

    def nonzero(any_zero: float) -> None:
        if any_zero:
            raise ValueError("directions must be nonzero: found a zero direction")

    checks_ = [(_warp.sum64(directions), finite)]
    if directions.numel() > 0:
        checks_.append((_any_zero_row(directions), nonzero))
    return checks_


def _any_zero_row(directions: torch.Tensor) -> torch.Tensor:
    """Whether a direction is (0, 0, 0), as a 0-d tensor. On the CPU numpy answers on the calling thread:
    torch's elementwise ops on a large tensor leave OpenMP workers spinning, which take cores from the
    launch threads right after (CONTRIBUTING, "Launching")."""
    if _warp._on_the_host(directions):
        rows = directions.detach().numpy().reshape(-1, 3)
        # column by column: 1.5 ms for 1M rays where ``(rows == 0).all(axis=1)`` took 11.6
        return torch.tensor(bool(((rows[:, 0] == 0) & (rows[:, 1] == 0) & (rows[:, 2] == 0)).any()))
    return (directions == 0).all(-1).any()


# --------------------------------------------------------------------------------------------------------
# warpgeo::raycast
# --------------------------------------------------------------------------------------------------------


def _raycast_impl(
    origins: torch.Tensor,
    directions: torch.Tensor,
    env_index: torch.Tensor | None,
    world: list[torch.Tensor],
    all_cuboids: bool,
    max_distance: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """origins, directions (B, S, 3), env_index (B,) or None, the world's tensors -> distance (B, S), point
    (B, S, 3), normal (B, S, 3) in the rays' dtype, entry (B, S) int64. On the CPU, many rays in no coherent
    order are cast in another (:func:`warpgeo._ray_order.ray_order`); no answer depends on it."""
    device = origins.device
    o = _dense(
        prepare_launch(origins, "origins", env_index, world, None, lambda: _direction_checks(directions))
    )
    d = _dense(_warp.to_compute(directions))
    lead = o.shape[:-1]
    distance = torch.empty(lead, dtype=o.dtype, device=device)
    point = torch.empty_like(o, memory_format=torch.contiguous_format)
    normal = torch.empty_like(point)
    entry = torch.empty(lead, dtype=torch.int64, device=device)
    outputs = {"distance": distance, "point": point, "normal": normal, "entry": entry}
    order = _ray_order.ray_order(o, d, env_index, world, all_cuboids)
    if order is None:
        _cast(o, d, env_index, world, all_cuboids, outputs, max_distance)
    else:
        _cast_in_order(order, o, d, env_index, world, all_cuboids, outputs, max_distance)
    dtype = origins.dtype
    return distance.to(dtype), point.to(dtype), normal.to(dtype), entry


def _cast(o, d, env_index, world, all_cuboids, outputs: dict[str, torch.Tensor], max_distance: float) -> None:
    """The one launch of the ray-cast kernel: rays ``o``, ``d`` (B, S, 3) -> ``outputs`` (by name)."""
    launch_query(
        kernels.RAYCAST,
        o,
        env_index,
        world,
        all_cuboids,
        {"origins": o, "directions": d, **outputs},
        work_per_row=_RAY_WORK,
        max_distance=max_distance,
    )


def _cast_in_order(order, o, d, env_index, world, all_cuboids, outputs, max_distance: float) -> None:
    """:func:`_cast` of the rays taken in ``order`` (a permutation of the flattened ``(B, S)`` rays, NumPy,
    CPU tensors): copies of the rays in that order as ``(R, 1, 3)`` with each ray's environment as its
    ``env_index``, their answers written back to the rays' own places."""
    count = order.shape[0]
    o_rows = np.take(_ray_order.host_rows(o), order, axis=0)  # np.take: 2 ms for 1M rows, indexing 16
    d_rows = np.take(_ray_order.host_rows(d), order, axis=0)
    env_rows = None
    if env_index is not None:
        env_rows = torch.from_numpy(_ray_order.environment_rows(env_index, o.shape[1])[order])
    cast = {
        name: torch.empty((count, 1, *t.shape[2:]), dtype=t.dtype, device=t.device)
        for name, t in outputs.items()
    }
    o_sorted = torch.from_numpy(o_rows).view(count, 1, 3)
    _cast(
        o_sorted, torch.from_numpy(d_rows).view(count, 1, 3), env_rows, world, all_cuboids, cast, max_distance
    )
    for name, t in outputs.items():
        _ray_order.rows_as_items(t, count)[order] = _ray_order.rows_as_items(cast[name], count)


def _raycast_fake(origins, directions, env_index, world, all_cuboids, max_distance):
    lead = origins.shape[:-1]
    return (
        origins.new_empty(lead),
        origins.new_empty(origins.shape),
        origins.new_empty(origins.shape),
        origins.new_empty(lead, dtype=torch.int64),
    )


def _setup_raycast(ctx, inputs, output) -> None:
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(output[2], output[3])
    ctx.save_for_backward(inputs[1], output[0], output[2])


def _backward_raycast(ctx, grad_distance, grad_point, _grad_normal, _grad_entry):
    """Through the hit's tangent plane: with ``u = d / |d|``, ``c = n . u``, ``s = g_t + g_p . u``:
    ``g_o = g_p - s n / c``, ``g_d = t (g_p - (g_p . u) u - s (n - c u) / c) / |d|``; 0 on a miss."""
    needs_o, needs_d = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if (grad_distance is None and grad_point is None) or not (needs_o or needs_d):
        return _raycast.grads(ctx)
    directions, distance, normal = ctx.saved_tensors
    compute = _warp.compute_dtype(directions.dtype)
    d = directions.to(compute)
    t = distance.to(compute)
    n = normal.to(compute)
    hit = torch.isfinite(t)
    length = torch.linalg.vector_norm(d, dim=-1, keepdim=True)
    u = d / torch.where(length > 0, length, 1)
    c = (n * u).sum(-1, keepdim=True)
    usable = (hit[..., None] & (c != 0)).to(compute)
    inv_c = usable / torch.where(c != 0, c, 1)
    t = torch.where(hit, t, 0)[..., None]
    gp = torch.zeros_like(d) if grad_point is None else grad_point.to(compute) * hit[..., None]
    s = (gp * u).sum(-1, keepdim=True)
    if grad_distance is not None:
        s = s + torch.where(hit, grad_distance.to(compute), 0)[..., None]
    go = gd = None
    if needs_o:
        go = (gp - s * n * inv_c).to(directions.dtype)
    if needs_d:
        tangent = gp - (gp * u).sum(-1, keepdim=True) * u - s * (n - c * u) * inv_c
        gd = (t * tangent / torch.where(length > 0, length, 1)).to(directions.dtype)
    return _raycast.grads(ctx, origins=go, directions=gd)


_raycast = Op(
    "warpgeo::raycast",
    check=_check_raycast,
    impl=_raycast_impl,
    fake=_raycast_fake,
    setup=_setup_raycast,
    backward=_backward_raycast,
)


def _rows(x: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``x`` broadcast to ``shape`` as ``(B, S, 3)`` rays (1-D: one ray; else B the leading dimension)."""
    if x.shape != shape:
        x = x.expand(shape)
    if len(shape) == 1:
        return x.reshape(1, 1, 3)
    return x.reshape(shape[0], math.prod(shape[1:-1]), 3)


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` with no zero stride (an expanded tensor, which a Warp array would read as ... a tensor it is
    not: one row for many) and a dense last dimension."""
    if t.numel() > 1 and 0 in t.stride():
        return t.contiguous()
    return t


# --------------------------------------------------------------------------------------------------------
# sensors
# --------------------------------------------------------------------------------------------------------


def camera_rays(
    intrinsics: Any, width: int, height: int, camera_pose: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """The rays of a pinhole camera's pixels, in the world frame.

    OpenCV's convention: in the camera frame +z looks forward, +x right, +y down; pixel ``(u, v)`` (column,
    row) has its centre at image coordinates ``(u, v)`` (as ``cv2.projectPoints`` reads them: a point
    projecting to ``(u, v)`` lies on that pixel's ray), so its ray's direction is
    ``((u - cx) / fx, (v - cy) / fy, 1)``, normalised. The pose is world-from-camera
    ``[x, y, z, qw, qx, qy, qz]`` (the quaternion is normalised here). Written with torch ops: gradients flow
    to ``camera_pose`` (and to ``intrinsics`` when it is a tensor that requires grad).

    Args:
        intrinsics: ``K`` ``(3, 3)`` or ``(fx, fy, cx, cy)`` ``(4,)``, or a batch of either ``(B, 3, 3)`` /
            ``(B, 4)``; a tensor or array-like.
        width, height: image size in pixels (ints >= 1).
        camera_pose: ``(7,)`` or ``(B, 7)`` world-from-camera poses; a tensor or array-like.

    Returns:
        ``(origins, directions)``, each ``(H, W, 3)`` for one pose and one ``K``, ``(B, H, W, 3)`` for a batch;
        directions unit. Dtype of ``camera_pose`` (float32 for an array-like of Python floats).

    Raises:
        TypeError: ``width`` / ``height`` not ints; a non-float tensor.
        ValueError: bad shapes; with value checks on, non-finite intrinsics or zero focal lengths, a zero or
            non-finite quaternion (with checks off their rays are NaN, which :func:`raycast` then refuses
            or, with its checks off too, misses).

    Example:
        >>> K = torch.tensor([[50.0, 0, 31.5], [0, 50.0, 23.5], [0, 0, 1]])
        >>> origins, dirs = camera_rays(K, 64, 48, torch.tensor([0.0, 0, -2, 1, 0, 0, 0]))
        >>> dirs.shape
        torch.Size([48, 64, 3])
    """
    width = checks.check_int(width, "width", minimum=1)
    height = checks.check_int(height, "height", minimum=1)
    pose = _float_tensor(camera_pose, "camera_pose")
    if pose.dim() not in (1, 2) or pose.shape[-1] != 7:
        raise ValueError(f"camera_pose must have shape (7,) or (B, 7); got {tuple(pose.shape)}")
    fx, fy, cx, cy = _intrinsics(intrinsics, pose)
    batched = pose.dim() == 2 or fx.dim() == 1
    cam = _camera_directions(fx, fy, cx, cy, width, height)  # (B?, H, W, 3)
    poses = pose if pose.dim() == 2 else pose[None]
    if cam.dim() == 3:
        cam = cam[None]
    if cam.shape[0] != poses.shape[0] and 1 not in (cam.shape[0], poses.shape[0]):
        raise ValueError(
            f"intrinsics ({fx.shape[0]} cameras) and camera_pose ({poses.shape[0]}) do not match"
        )
    q = _unit_quaternion(poses[:, 3:])[:, None, None, :]
    directions = _rotate(q, cam)
    origins = poses[:, None, None, :3].expand_as(directions)
    if not batched:
        return origins[0], directions[0]
    return origins, directions


def render_depth(
    world: MeshWorld,
    intrinsics: Any,
    width: int,
    height: int,
    camera_poses: Any,
    *,
    env_index: torch.Tensor | None = None,
    max_distance: float = math.inf,
) -> torch.Tensor:
    """Depth images of pinhole cameras (:func:`camera_rays`) in the world: z-depth, 0 where a pixel's ray
    hits nothing (within ``max_distance``, measured along the ray).

    The z-depth of a pixel is its hit's distance along the ray times the cosine of the ray to the optical
    axis (the hit's z in the camera frame), as a depth camera reports it. Differentiable w.r.t.
    ``camera_poses`` (through the rays; see :func:`raycast` for the gradient of a hit), 0 at misses.

    Args:
        world: the :class:`MeshWorld`.
        intrinsics: as for :func:`camera_rays` (one ``K`` for all cameras, or one per camera).
        width, height: image size in pixels.
        camera_poses: ``(B, 7)`` (or ``(7,)``: one camera) world-from-camera poses, on ``world.device``.
        env_index: optional integer ``(B,)``: each camera's environment (several cameras may share one);
            environment 0 by default.
        max_distance: as for :func:`raycast`.

    Returns:
        ``(B, H, W)`` z-depth (``(H, W)`` for one ``(7,)`` pose), dtype of ``camera_poses``.

    Raises:
        As :func:`camera_rays` and :func:`raycast`.

    Example:
        >>> world = MeshWorld([warpgeo.Cuboid([4, 4, 0.1])])                    # a floor at z = 0
        >>> K = torch.tensor([40.0, 40.0, 15.5, 11.5])                           # fx, fy, cx, cy
        >>> down = torch.tensor([[0.0, 0, 2, 0, 1, 0, 0]])                       # 2 m up, looking down
        >>> render_depth(world, K, 32, 24, down)[0, 12, 16]
        tensor(1.9500)
    """
    pose = _float_tensor(camera_poses, "camera_poses")
    single = pose.dim() == 1
    if single:
        pose = pose[None]
    origins, directions = camera_rays(intrinsics, width, height, pose)
    fx, fy, cx, cy = _intrinsics(intrinsics, pose)
    cosine = _camera_directions(fx, fy, cx, cy, width, height)[..., 2].detach()  # (B?, H, W): z of unit rays
    hits = raycast(world, origins, directions, max_distance=max_distance, env_index=env_index)
    hit = hits.entry >= 0
    depth = torch.where(hit, hits.distance, 0) * cosine
    return depth[0] if single else depth


def lidar_rays(
    channels: int,
    horizontal_samples: int,
    *,
    vertical_fov: tuple[float, float] = (-15.0, 15.0),
    horizontal_fov: tuple[float, float] = (-180.0, 180.0),
    pose: Any = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """A spinning lidar's ray pattern: ``channels`` beams in elevation times ``horizontal_samples`` azimuths.

    Sensor frame (ROS REP 103): +x forward, +y left, +z up; azimuth from +x towards +y, elevation up from
    the xy-plane, in degrees. Channel ``i`` is at elevation ``vertical_fov[0] + i * (vertical_fov[1] -
    vertical_fov[0]) / (channels - 1)`` (the lowest first; one channel: the middle of the field). Azimuths
    span ``horizontal_fov`` end to end, except for a full turn (a span of 360 degrees or more), which is cut
    into ``horizontal_samples`` equal steps from ``horizontal_fov[0]`` (the end, the same beam as the start,
    left out). The direction of beam ``(i, j)`` is ``(cos el cos az, cos el sin az, sin el)``.

    Args:
        channels, horizontal_samples: ints >= 1.
        vertical_fov, horizontal_fov: ``(lowest, highest)`` angles in degrees.
        pose: optional ``(7,)`` or ``(B, 7)`` world-from-sensor pose ``[x, y, z, qw, qx, qy, qz]``: the rays
            are then in the world frame (leading ``B`` for a batch of poses).
        dtype, device: of the rays (a tensor ``pose`` gives its own).

    Returns:
        ``(origins, directions)``, each ``(channels, horizontal_samples, 3)`` (``(B, C, N, 3)`` for a batch
        of poses); unit directions; origins the sensor's position.

    Example:
        >>> world = MeshWorld([warpgeo.Sphere(5.0)])
        >>> origins, dirs = lidar_rays(16, 360)
        >>> raycast(world, origins, dirs).distance.shape      # ranges: from inside the ball, 5 m every way
        torch.Size([16, 360])
    """
    channels = checks.check_int(channels, "channels", minimum=1)
    samples = checks.check_int(horizontal_samples, "horizontal_samples", minimum=1)
    low, high = _angles(vertical_fov, "vertical_fov")
    start, stop = _angles(horizontal_fov, "horizontal_fov")
    if channels == 1:
        elevation = torch.full((1,), (low + high) / 2, dtype=torch.float64)
    else:
        elevation = torch.linspace(low, high, channels, dtype=torch.float64)
    if stop - start >= 360.0:
        azimuth = start + (stop - start) * torch.arange(samples, dtype=torch.float64) / samples
    elif samples == 1:
        azimuth = torch.full((1,), (start + stop) / 2, dtype=torch.float64)
    else:
        azimuth = torch.linspace(start, stop, samples, dtype=torch.float64)
    el = torch.deg2rad(elevation)[:, None]
    az = torch.deg2rad(azimuth)[None, :]
    directions = torch.stack(
        (torch.cos(el) * torch.cos(az), torch.cos(el) * torch.sin(az), torch.sin(el).expand(-1, samples)), -1
    )
    return _posed(torch.zeros_like(directions), directions, pose, dtype, device)


def grid_rays(
    size: tuple[float, float],
    resolution: float,
    *,
    direction: tuple[float, float, float] = (0.0, 0.0, -1.0),
    pose: Any = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """A height scanner's ray pattern: parallel rays from a grid of origins on the sensor's xy-plane.

    The grid is centred on the sensor: ``floor(size / resolution) + 1`` points along x and along y,
    ``resolution`` apart, centred (x varies along the last grid dimension). Every ray has the unit
    ``direction`` (default straight down, -z, in the sensor frame). For a height scan that ignores the
    robot's roll and pitch, pass a pose with only its yaw.

    Args:
        size: ``(length along x, length along y)`` >= 0.
        resolution: spacing > 0.
        direction: the rays' direction in the sensor frame (nonzero).
        pose, dtype, device: as for :func:`lidar_rays`.

    Returns:
        ``(origins, directions)``, each ``(Ny, Nx, 3)`` (``(B, Ny, Nx, 3)`` for a batch of poses).

    Example:
        >>> origins, dirs = grid_rays((1.6, 1.0), 0.1, pose=torch.tensor([0.0, 0, 0.5, 1, 0, 0, 0]))
        >>> origins.shape
        torch.Size([11, 17, 3])
    """
    if not isinstance(size, Sequence) or len(size) != 2:
        raise ValueError(f"size must be (length along x, length along y); got {size!r}")
    lengths = [float(v) for v in size]
    step = float(resolution)
    if not (math.isfinite(step) and step > 0):
        raise ValueError(f"resolution must be finite and > 0; got {resolution}")
    if not all(math.isfinite(v) and v >= 0 for v in lengths):
        raise ValueError(f"size must be finite and >= 0; got {size!r}")
    counts = [math.floor(v / step + 1e-9) + 1 for v in lengths]
    xs, ys = ((torch.arange(n, dtype=torch.float64) - (n - 1) / 2) * step for n in counts)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    origins = torch.stack((gx, gy, torch.zeros_like(gx)), -1)
    aim = torch.as_tensor(direction, dtype=torch.float64)
    if aim.shape != (3,) or not bool(torch.isfinite(aim).all()) or not bool((aim != 0).any()):
        raise ValueError(f"direction must be three finite numbers, not all 0; got {direction!r}")
    directions = (aim / torch.linalg.vector_norm(aim)).expand_as(origins)
    return _posed(origins, directions, pose, dtype, device)


# --------------------------------------------------------------------------------------------------------
# sensor helpers (torch: differentiable w.r.t. the pose)
# --------------------------------------------------------------------------------------------------------


def _float_tensor(x: Any, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        checks.check_float(x, name)
        return x
    try:
        t = torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(
            f"{name} must be a tensor or an array-like of numbers; got {type(x).__name__}"
        ) from error
    if not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)):
        raise TypeError(f"{name} must hold real numbers; got {t.dtype}")
    return t.to(torch.float32 if t.dtype != torch.float64 else torch.float64)


def _intrinsics(intrinsics: Any, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``(fx, fy, cx, cy)``, each 0-d or ``(B,)``, in ``like``'s dtype and device."""
    k = _float_tensor(intrinsics, "intrinsics").to(dtype=like.dtype, device=like.device)
    if k.shape[-2:] == (3, 3) and k.dim() in (2, 3):
        fx, fy, cx, cy = k[..., 0, 0], k[..., 1, 1], k[..., 0, 2], k[..., 1, 2]
    elif k.shape[-1:] == (4,) and k.dim() in (1, 2):
        fx, fy, cx, cy = k.unbind(-1)
    else:
        raise ValueError(
            f"intrinsics must be K (3, 3), (fx, fy, cx, cy) (4,), or a batch (B, 3, 3) / (B, 4); got {tuple(k.shape)}"
        )
    if _checking(k):
        focal = torch.stack((fx, fy)).detach()
        if not bool(torch.isfinite(k).all()) or bool((focal == 0).any()):
            raise ValueError("intrinsics must be finite, with nonzero focal lengths")
    return fx, fy, cx, cy


def _checking(t: torch.Tensor) -> bool:
    """Value checks of the sensors' inputs: as the ops' (switchable), and never in a traced graph."""
    return checks.checking_values(t.device) and not torch.compiler.is_compiling()


def _camera_directions(fx, fy, cx, cy, width: int, height: int) -> torch.Tensor:
    """Unit pixel rays in the camera frame: ``(H, W, 3)``, or ``(B, H, W, 3)`` for batched intrinsics."""
    u = torch.arange(width, dtype=fx.dtype, device=fx.device)
    v = torch.arange(height, dtype=fx.dtype, device=fx.device)
    expand = (lambda t: t[:, None, None]) if fx.dim() == 1 else (lambda t: t)
    x = (u[None, :] - expand(cx)) / expand(fx)
    y = (v[:, None] - expand(cy)) / expand(fy)
    x, y = torch.broadcast_tensors(x, y)
    rays = torch.stack((x, y, torch.ones_like(x)), -1)
    return rays / torch.linalg.vector_norm(rays, dim=-1, keepdim=True)


def _unit_quaternion(q: torch.Tensor) -> torch.Tensor:
    norm = torch.linalg.vector_norm(q, dim=-1, keepdim=True)
    if _checking(q) and not (bool((norm.detach() > 0).all()) and bool(torch.isfinite(q.detach()).all())):
        raise ValueError("pose quaternions must be finite and nonzero ([x, y, z, qw, qx, qy, qz])")
    return q / norm


def _rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``v`` rotated by the unit quaternions ``q`` (w, x, y, z), broadcast: ``v + 2 w (r x v) + 2 r x (r x v)``."""
    w, r = q[..., :1], q[..., 1:]
    r, v = torch.broadcast_tensors(r, v)
    c = torch.linalg.cross(r, v, dim=-1)
    return v + 2 * w * c + 2 * torch.linalg.cross(r, c, dim=-1)


def _angles(pair: Any, name: str) -> tuple[float, float]:
    if not isinstance(pair, Sequence) or len(pair) != 2:
        raise ValueError(f"{name} must be (lowest, highest) in degrees; got {pair!r}")
    low, high = float(pair[0]), float(pair[1])
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f"{name} must be finite with lowest <= highest; got {pair!r}")
    return low, high


def _posed(origins, directions, pose, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Sensor-frame rays ``(..., 3)`` (float64) in the world frame of ``pose`` (None: as they are)."""
    if pose is None:
        return origins.to(dtype=dtype, device=device), directions.to(dtype=dtype, device=device)
    p = pose if isinstance(pose, torch.Tensor) else _float_tensor(pose, "pose").to(dtype=dtype, device=device)
    checks.check_float(p, "pose")
    if p.dim() not in (1, 2) or p.shape[-1] != 7:
        raise ValueError(f"pose must have shape (7,) or (B, 7); got {tuple(p.shape)}")
    origins = origins.to(dtype=p.dtype, device=p.device)
    directions = directions.to(dtype=p.dtype, device=p.device)
    extra = (None,) * (origins.dim() - 1)
    q = _unit_quaternion(p[..., 3:])[(..., *extra, slice(None))]
    t = p[..., :3][(..., *extra, slice(None))]
    return _rotate(q, origins) + t, _rotate(q, directions)
