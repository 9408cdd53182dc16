"""What a planner asks of a :class:`MeshWorld` besides a cost: true/false collision checks of spheres and the
closest surface point of points.

Two custom ops, one Warp kernel each (``warpgeo._kernels.queries``), declared with :class:`~warpgeo._op.Op`
over the world's tensors as ``warpgeo.sdf``'s are: ``warpgeo::sphere_collision`` (no gradient: a bool) and
``warpgeo::closest_point`` (differentiable w.r.t. the points). What every world op shares (the world's
checks, the launch) is ``warpgeo._world_query``'s.

The file reads: public functions, checks, declarations (check, impl, fake), backward, the ops.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import _warp
from ._kernels import queries as kernels
from ._op import Op
from ._world_query import QUERY_WORK, check_query, launch_query, prepare_launch, prepare_query, world_args
from .world import MeshWorld

__all__ = ["ClosestPoint", "closest_point", "sphere_collision"]


#: The distance :func:`closest_point` gives a point with no enabled entry in its environment.
_NO_ENTRY_DISTANCE = float("inf")


class ClosestPoint(NamedTuple):
    """What :func:`closest_point` returns, each of the points' leading shape ``(...)``.

    Attributes:
        point: ``(..., 3)`` the nearest surface point (zeros where there is no entry).
        distance: ``(...)`` the signed distance to it, negative inside (``inf`` where there is no entry).
        normal: ``(..., 3)`` the outward unit normal there (zeros where there is no entry).
        entry: ``(...)`` int64, the entry's slot in its environment (``world.names``), -1 for none.
    """

    point: torch.Tensor
    distance: torch.Tensor
    normal: torch.Tensor
    entry: torch.Tensor


def sphere_collision(
    spheres: torch.Tensor, world: MeshWorld, *, env_index: torch.Tensor | None = None
) -> torch.Tensor:
    """Whether each sphere penetrates an enabled entry of its environment (cuRobo's true/false check).

    With ``d`` the signed distance of a sphere's centre to an entry (negative inside) and ``r`` its radius,
    the sphere penetrates the entry iff ``r - d > 0`` (touching, ``d = r``, is no collision): exactly where
    :func:`~warpgeo.sphere_mesh_cost` with ``activation_distance=0`` is positive, without computing the cost.
    The entries are tried in slot order and the first one penetrated ends the search; a mesh is searched
    within ``r`` only (a mesh whose box is farther is skipped), and its distance grid decides without a BVH
    query where a cell proves a penetration. A sphere with a negative radius is disabled (False).

    Args:
        spheres: ``(..., 4)`` = x, y, z, radius in the world frame, e.g. cuRobo's ``(B, H, N, 4)``; float16,
            bfloat16, float32 or float64, on ``world.device``.
        world: the :class:`MeshWorld`.
        env_index: optional integer ``(B,)``: the environment of each entry of the leading dimension.

    Returns:
        ``spheres.shape[:-1]`` bools. Not differentiable.

    Raises:
        TypeError: non-float ``spheres``, non-integer ``env_index``.
        ValueError: bad shapes, wrong device, NaN/inf in ``spheres``.
        IndexError: ``env_index`` outside ``[0, world.num_envs)``.

    Example:
        >>> world = MeshWorld([warpgeo.Cuboid((1.0, 1.0, 1.0))])
        >>> sphere_collision(torch.tensor([[0.55, 0.0, 0.0, 0.1], [0.7, 0.0, 0.0, 0.1]]), world)
        tensor([ True, False])
    """
    flat, _ = prepare_query(spheres, world, 4, "spheres")
    args = world_args(world, flat.dtype)
    collides = _collision.call(
        spheres=flat, env_index=env_index, world=args.world, all_cuboids=args.all_cuboids
    )
    return collides.view(spheres.shape[:-1])


def closest_point(
    points: torch.Tensor, world: MeshWorld, *, env_index: torch.Tensor | None = None
) -> ClosestPoint:
    """The nearest surface point of the enabled entries (meshes and primitives) of each point's environment.

    The nearest surface is the one at the smallest unsigned distance ``|d|`` (the first slot on a tie), and
    ``distance`` its signed distance ``d`` (negative inside). ``normal`` is the unit gradient of ``d`` there,
    the outward normal of the surface at the closest point, outward for a point inside too (on the surface,
    the face normal; for a mesh of ``sign_method="unsigned"``, which has no inside, it points from the
    surface towards the point). ``point = p - d * normal``, the foot of ``p`` on that surface (computed on the
    surface, so that a far point's foot keeps its digits). A :class:`~warpgeo.DistanceGrid` entry: ``d`` its
    trilinear distance, ``normal`` that interpolant's gradient made unit, and ``point = p - d * normal``, a first
    order foot (exact where the interpolant is exact; its error grows with ``|d|`` times the gradient's turn);
    its ``distance``'s gradient below is that unit normal, not the interpolant's own (non-unit) gradient that
    :func:`~warpgeo.signed_distance` gives. A point whose environment has no enabled entry gets
    ``distance = inf``, zeros and ``entry = -1``.

    Differentiable w.r.t. ``points``: ``distance``'s gradient is ``normal`` (as for
    :func:`~warpgeo.signed_distance`), ``point``'s is the projection ``I - normal normal^T`` onto the tangent
    plane (``point = p - d * normal`` with ``normal`` held fixed): exact on a flat face, it leaves out the
    surface's curvature (on a sphere of radius ``R`` the true derivative is ``R / (R + d)`` times it; at a
    mesh's edge or vertex, smaller still). ``normal`` and ``entry`` are not differentiable.

    Args:
        points: ``(..., 3)`` in the world frame; float16, bfloat16, float32 or float64, on ``world.device``.
        world: the :class:`MeshWorld`.
        env_index: optional integer ``(B,)``: the environment of each entry of the leading dimension.

    Returns:
        :class:`ClosestPoint` ``(point (..., 3), distance (...), normal (..., 3), entry (...) int64)``, in
        the dtype of ``points``.

    Raises:
        TypeError: non-float ``points``, non-integer ``env_index``.
        ValueError: bad shapes, wrong device, NaN/inf in ``points``.
        IndexError: ``env_index`` outside ``[0, world.num_envs)``.

    Example:
        >>> world = MeshWorld([warpgeo.Sphere(1.0)])
        >>> closest = closest_point(torch.tensor([[3.0, 0.0, 0.0]]), world)
        >>> closest.point, closest.distance, closest.normal, closest.entry
        (tensor([[1., 0., 0.]]), tensor([2.]), tensor([[1., 0., 0.]]), tensor([0]))
    """
    flat, _ = prepare_query(points, world, 3, "points")
    args = world_args(world, flat.dtype)
    point, distance, normal, entry = _closest.call(
        points=flat, env_index=env_index, world=args.world, all_cuboids=args.all_cuboids
    )
    lead = points.shape[:-1]
    return ClosestPoint(point.view(*lead, 3), distance.view(lead), normal.view(*lead, 3), entry.view(lead))


def _check_collision(spheres, env_index, world, all_cuboids) -> None:
    check_query(spheres, "spheres", 4, 3, env_index, world, all_cuboids)


def _check_closest(points, env_index, world, all_cuboids) -> None:
    check_query(points, "points", 3, 3, env_index, world, all_cuboids)


def _collision_impl(
    spheres: torch.Tensor, env_index: torch.Tensor | None, world: list[torch.Tensor], all_cuboids: bool
) -> torch.Tensor:
    """spheres (B, S, 4), env_index (B,) or None, the world's tensors -> (B, S) bool."""
    work = prepare_launch(spheres, "spheres", env_index, world, None)
    collides = torch.empty(work.shape[:-1], dtype=torch.bool, device=work.device)
    launch_query(
        kernels.SPHERE_COLLISION,
        work,
        env_index,
        world,
        all_cuboids,
        {"spheres": work, "collides": collides},
        work_per_row=QUERY_WORK,
    )
    return collides


def _collision_fake(spheres, env_index, world, all_cuboids):
    return spheres.new_empty(spheres.shape[:-1], dtype=torch.bool)


def _closest_impl(
    points: torch.Tensor, env_index: torch.Tensor | None, world: list[torch.Tensor], all_cuboids: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """points (B, S, 3), env_index (B,) or None, the world's tensors -> point (B, S, 3), distance (B, S),
    normal (B, S, 3) in points' dtype, entry (B, S) int64."""
    work = prepare_launch(points, "points", env_index, world, None)
    point = torch.empty_like(work)
    normal = torch.empty_like(work)
    distance = torch.empty(work.shape[:-1], dtype=work.dtype, device=work.device)
    entry = torch.empty(work.shape[:-1], dtype=torch.int64, device=work.device)
    launch_query(
        kernels.CLOSEST_POINT,
        work,
        env_index,
        world,
        all_cuboids,
        {"points": work, "point": point, "dist": distance, "normal": normal, "entry": entry},
        work_per_row=QUERY_WORK,
        far=_NO_ENTRY_DISTANCE,
    )
    dtype = points.dtype
    if dtype != work.dtype:
        return point.to(dtype), distance.to(dtype), normal.to(dtype), entry
    return point, distance, normal, entry


def _closest_fake(points, env_index, world, all_cuboids):
    lead = points.shape[:-1]
    return (
        points.new_empty(*lead, 3),
        points.new_empty(lead),
        points.new_empty(*lead, 3),
        points.new_empty(lead, dtype=torch.int64),
    )


def _setup_closest(ctx, inputs, output) -> None:
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(output[2], output[3])
    ctx.save_for_backward(output[2], output[3])


def _backward_closest(ctx, grad_point, grad_distance, _grad_normal, _grad_entry):
    """``d distance / d p = n``; ``d point / d p = I - n n^T`` (``point = p - d n``, ``n`` held fixed); no
    gradient where there is no entry."""
    if (grad_point is None and grad_distance is None) or not ctx.needs_input_grad[0]:
        return _closest.grads(ctx)
    normal, entry = ctx.saved_tensors
    n = normal.to(_warp.compute_dtype(normal.dtype))
    grad = None
    if grad_distance is not None:
        grad = _warp.scale_rows(grad_distance.to(n.dtype), n)  # zero where there is no entry (n = 0)
    if grad_point is not None:
        g = grad_point.to(n.dtype)
        g = torch.where((entry >= 0)[..., None], g - n * (g * n).sum(-1, keepdim=True), 0.0)
        grad = g if grad is None else grad + g
    return _closest.grads(ctx, points=grad.to(normal.dtype))


_collision = Op(
    "warpgeo::sphere_collision",
    check=_check_collision,
    impl=_collision_impl,
    fake=_collision_fake,
)


_closest = Op(
    "warpgeo::closest_point",
    check=_check_closest,
    impl=_closest_impl,
    fake=_closest_fake,
    setup=_setup_closest,
    backward=_backward_closest,
)
