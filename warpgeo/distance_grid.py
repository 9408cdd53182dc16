"""Distance grids (DESIGN §7): signed distances on a regular grid, their builders, depth-frame fusion.

:class:`DistanceGrid` holds ``(X, Y, Z)`` signed distances (negative inside) with voxel ``(i, j, k)`` centred at
``origin + voxel_size * (i, j, k)``; :meth:`DistanceGrid.query` reads it (trilinear value and gradient). Its
builders -- :meth:`~DistanceGrid.from_occupancy` (the exact signed Euclidean distance transform),
:meth:`~DistanceGrid.from_points`, :meth:`~DistanceGrid.from_mesh` -- and :class:`DepthFusion` (TSDF
integration of depth frames, then a signed grid) run as Warp kernels (``warpgeo/_kernels/distance_grid.py``)
on the grid's device, each a ``torch.ops.warpgeo.*`` custom op.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch

from . import _launch, _warp, checks
from ._grid_args import (
    GRID_DTYPES,
    as_float32,
    check_dims,
    check_dtype,
    check_grid_args,
    check_values_tensor,
    grid_dims,
    mesh_vertices,
    non_negative,
    parse_bounds,
    point3,
    positive,
    zeros_u8,
)
from ._kernels import distance_grid as kernels
from ._op import Op
from .sdf import signed_distance
from .world import MeshWorld

__all__ = ["DepthFusion", "DistanceGrid", "GridQuery"]

#: A quaternion whose norm is within this of 1 is renormalised; farther off, it is refused (as MeshWorld's).
QUAT_NORM_TOL = 1.0e-3
#: The default truncation of a :class:`DepthFusion`, in voxels.
TRUNCATION_VOXELS = 4.0
#: The default padding of :meth:`DistanceGrid.from_mesh`, in voxels.
MESH_PADDING_VOXELS = 2.0
#: Voxel centres per :func:`warpgeo.signed_distance` call of :meth:`DistanceGrid.from_mesh`.
_MESH_CHUNK = 1 << 21


class GridQuery(NamedTuple):
    """:meth:`DistanceGrid.query`'s result: ``distance`` ``(...)`` and its ``gradient`` ``(..., 3)``."""

    distance: torch.Tensor
    gradient: torch.Tensor


class DistanceGrid:
    """Signed distances on a regular grid (negative inside), read by trilinear interpolation.

    Args:
        values: ``(X, Y, Z)`` float32 or float64 signed distances in metres at the voxel centres (every size
            at least 1, all finite). Kept as given (made contiguous).
        voxel_size: the spacing of the voxel centres in metres (> 0, finite).
        origin: the centre of voxel ``(0, 0, 0)`` (3 finite numbers): voxel ``(i, j, k)`` is centred at
            ``origin + voxel_size * (i, j, k)``.

    Attributes:
        values, voxel_size, origin (a tuple of 3 floats), shape ``(X, Y, Z)``, device, dtype.

    A grid is also a world entry: ``MeshWorld([mesh, warpgeo.Cuboid(...), grid])`` (posed, enabled, named,
    per environment like a primitive; its values copied into the world in float32, read as :meth:`query`
    reads them, in the frame of the entry's pose); ``MeshWorld.set_grid`` writes new values in place.

    Raises:
        TypeError: ``values`` not a float32 / float64 tensor; a non-number ``voxel_size`` or ``origin``.
        ValueError: ``values`` not 3-D, empty, too large or not finite; ``voxel_size`` not positive and
            finite; ``origin`` not 3 finite numbers.

    Example:
        >>> grid = DistanceGrid(torch.zeros(4, 4, 4), 0.1, origin=(-0.15, -0.15, -0.15))
        >>> grid.query(torch.tensor([[0.0, 0.0, 0.0]])).distance
        tensor([0.])
    """

    #: how a MeshWorld recognises a grid entry (its builder reads values, voxel_size and origin)
    WORLD_ENTRY = "distance_grid"

    def __init__(self, values: torch.Tensor, voxel_size: float, *, origin: Any = (0.0, 0.0, 0.0)) -> None:
        if not isinstance(values, torch.Tensor) or values.dtype not in GRID_DTYPES:
            got = values.dtype if isinstance(values, torch.Tensor) else type(values).__name__
            raise TypeError(f"values must be a float32 or float64 tensor; got {got}")
        if values.dim() != 3:
            raise ValueError(f"values must have shape (X, Y, Z); got {tuple(values.shape)}")
        check_dims(tuple(values.shape), "values")
        checks.check_device("values", values=values)
        self.voxel_size = positive(voxel_size, "voxel_size")
        self.origin = point3(origin, "origin")
        if checks.checking_values(values.device) and not bool(torch.isfinite(values).all()):
            raise ValueError("values must be finite (signed distances in metres); found NaN or inf")
        self.values = values.contiguous()

    @classmethod
    def _made(cls, values: torch.Tensor, voxel_size: float, origin: Any) -> DistanceGrid:
        """A grid of values a builder just made (finite by construction): no value check (no device read,
        nothing for ``torch.compile`` to break on)."""
        grid = cls.__new__(cls)
        grid.values = values
        grid.voxel_size = voxel_size
        grid.origin = tuple(float(o) for o in origin)
        return grid

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.values.shape)  # type: ignore[return-value]

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    def __repr__(self) -> str:
        return (
            f"DistanceGrid(shape={self.shape}, voxel_size={self.voxel_size}, origin={self.origin}, "
            f"dtype={self.dtype}, device={self.device})"
        )

    def query(self, points: torch.Tensor) -> GridQuery:
        """Signed distance of the grid at ``points`` and its gradient (one Warp launch).

        Inside the box of the voxel centres (``origin .. origin + voxel_size * (shape - 1)``): the trilinear
        interpolation of the 8 voxels around each point, and the exact gradient of that interpolant (on a
        cell face, the cell with the lower index; an axis of one voxel has gradient 0 along it). Outside
        the box: the distance to the box, with the unit direction away from it as gradient -- a lower bound
        of the distance to anything the grid holds (it says nothing about space beyond it). A point less than
        1e-4 voxels outside a face (a voxel centre on it, rounded off by a pose) reads as on the face.

        For values sampled from a 1-Lipschitz function (a true signed distance), the interpolated value is
        within ``sqrt(3) / 2 * voxel_size`` of it inside the box (see :meth:`from_mesh`).

        Args:
            points: ``(..., 3)`` float16 / bfloat16 / float32 / float64, on the grid's device; computed in
                float32 (half inputs) or their own precision (the grid's values converted if they differ).

        Returns:
            :class:`GridQuery` ``(distance (...), gradient (..., 3))`` in ``points``' dtype. Differentiable
            w.r.t. ``points`` (``distance``; ``gradient`` is not differentiable).

        Raises:
            TypeError: non-float ``points``. ValueError: bad shape, another device, NaN / inf in ``points``.
        """
        checks.check_float(points, "points")
        if points.dim() < 1 or points.shape[-1] != 3:
            raise ValueError(f"points must have shape (..., 3); got {tuple(points.shape)}")
        flat = points.reshape(-1, 3)
        dist, grad = _query_op.call(
            points=flat, values=self.values, voxel_size=self.voxel_size, origin=list(self.origin)
        )
        return GridQuery(dist.reshape(points.shape[:-1]), grad.reshape(points.shape))

    # ----------------------------------------------------------------------------------------------------
    # builders
    # ----------------------------------------------------------------------------------------------------

    @classmethod
    def from_occupancy(
        cls,
        occupied: torch.Tensor,
        voxel_size: float,
        *,
        origin: Any = (0.0, 0.0, 0.0),
        dtype: torch.dtype = torch.float32,
    ) -> DistanceGrid:
        """The exact signed Euclidean distance transform of an occupancy grid, as Warp kernels on its device.

        A free voxel gets ``+voxel_size * sqrt(d2)`` with ``d2`` the squared distance, in voxel units (an
        exact integer), from its centre to the nearest occupied voxel's centre; an occupied voxel gets
        ``-voxel_size * sqrt(d2)`` with ``d2`` to the nearest free voxel's centre. No half-voxel offset: a
        free voxel next to an occupied one holds ``+voxel_size`` and the occupied one ``-voxel_size``, so
        the interpolated zero level lies on the face between them (the surface of the occupied voxels'
        cubes). A value is the centre-to-centre distance ``d``; the distance from the voxel's centre to
        the other side's cubes lies in ``[d - sqrt(3) / 2 * voxel_size, d - voxel_size / 2]``.

        Degenerate grids (values stay finite): with no occupied voxel, a voxel holds ``+voxel_size * s``,
        with every voxel occupied ``-voxel_size * s``, ``s`` the voxel steps from it to the nearest position
        just outside the grid (``min(i + 1, X - i, j + 1, Y - j, k + 1, Z - k)``): as if the grid were
        surrounded by occupied (free) space.

        Separable passes (1-d distances along z, then Felzenszwalb & Huttenlocher's lower envelope of
        parabolas along y and x, with exact integer comparisons): linear in voxels.

        Args:
            occupied: ``(X, Y, Z)`` bool (every size at least 1, each at most 2**20, at most 2**27 voxels).
            voxel_size: metres (> 0, finite). origin: the centre of voxel ``(0, 0, 0)``.
            dtype: the values' dtype, float32 or float64.

        Raises:
            TypeError: ``occupied`` not a bool tensor, a bad ``dtype``. ValueError: bad shape or sizes, a bad
            ``voxel_size`` or ``origin``.

        Example:
            >>> occupied = torch.zeros(5, 1, 1, dtype=torch.bool)
            >>> occupied[2] = True
            >>> DistanceGrid.from_occupancy(occupied, 0.5).values.flatten()
            tensor([ 1.0000,  0.5000, -0.5000,  0.5000,  1.0000])
        """
        h = positive(voxel_size, "voxel_size")
        where = point3(origin, "origin")
        values = _occupancy_op.call(occupied=occupied, voxel_size=h, dtype=dtype)
        return cls._made(values, h, where)

    @classmethod
    def from_points(
        cls,
        points: torch.Tensor,
        voxel_size: float,
        *,
        bounds: Any = None,
        dtype: torch.dtype | None = None,
    ) -> DistanceGrid:
        """An unsigned distance grid from surface samples (a cloud has no inside).

        The voxel whose centre is nearest a point (``round((p - origin) / voxel_size)``, halves rounded up)
        holds it: such voxels are the surface (value 0); every other voxel gets ``voxel_size * sqrt(d2)``,
        ``d2`` the exact squared distance in voxel units to the nearest surface voxel's centre. Points
        outside the grid mark nothing. With no surface voxel, the voxel steps to just outside the grid, as
        :meth:`from_occupancy`.

        Args:
            points: ``(N, 3)`` float32 / float64 (half types computed in float32), finite.
            voxel_size: metres (> 0, finite).
            bounds: ``((x0, y0, z0), (x1, y1, z1))``: ``origin = (x0, y0, z0)``, voxel centres up to at least
                ``(x1, y1, z1)`` (``ceil((x1 - x0) / voxel_size) + 1`` voxels along x, ...). None: the
                points' bounding box (the host reads it: one device-to-host copy; needs ``N > 0``).
            dtype: the values' dtype (float32 or float64); None: the points' compute dtype.

        Raises:
            TypeError: non-float ``points``. ValueError: bad shape, NaN / inf, empty ``points`` without
            ``bounds``, bad ``bounds`` or ``voxel_size``, a grid beyond the size limits.
        """
        checks.check_float(points, "points")
        if points.dim() != 2 or points.shape[1] != 3:
            raise ValueError(f"points must have shape (N, 3); got {tuple(points.shape)}")
        h = positive(voxel_size, "voxel_size")
        if bounds is None:
            if points.shape[0] == 0:
                raise ValueError("points is empty: give bounds=((x0, y0, z0), (x1, y1, z1)) for its grid")
            lo_hi = torch.stack((points.amin(0), points.amax(0))).double().cpu()
            if not bool(torch.isfinite(lo_hi).all()):
                raise ValueError("points must be finite; found NaN or inf")
            lo, hi = lo_hi.tolist()
        else:
            lo, hi = parse_bounds(bounds)
        dims = grid_dims(lo, hi, h, "bounds")
        compute = _warp.compute_dtype(points.dtype)
        out = compute if dtype is None else dtype
        values = _points_op.call(
            points=_warp.to_compute(points), dims=list(dims), origin=list(lo), voxel_size=h, dtype=out
        )
        return cls._made(values, h, lo)

    @classmethod
    def from_mesh(
        cls,
        mesh: Any,
        voxel_size: float,
        *,
        padding: float | None = None,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> DistanceGrid:
        """A mesh's signed distance sampled at voxel centres (:func:`warpgeo.signed_distance` of a
        :class:`warpgeo.MeshWorld` of the mesh): a mesh turned into a fast, approximate entry.

        The grid spans the mesh's bounding box grown by ``padding`` on every side (``origin`` its low
        corner). Accuracy (for a closed mesh): the signed distance ``f`` is 1-Lipschitz, and the trilinear
        interpolant is a convex combination ``sum w_c f(c)`` of the 8 corners ``c`` of a cell, so ``|I(p) -
        f(p)| <= sum w_c |c - p| <= sqrt(sum w_c |c - p|**2)`` (Jensen) ``= voxel_size * sqrt(sum_axes t(1 -
        t)) <= sqrt(3) / 2 * voxel_size`` (``t`` the point's fractions in the cell): every query inside the box
        is within ``0.87 * voxel_size`` of the exact distance (plus the float rounding of the samples), so
        its sign is right wherever the exact distance exceeds that.

        Args:
            mesh: a ``trimesh.Trimesh``, a ``(vertices, faces)`` pair or a path (what :class:`MeshWorld` takes).
            voxel_size: metres (> 0, finite). padding: metres (>= 0); None: ``2 * voxel_size``.
            device: where the grid (and the world used to sample it) lives. dtype: float32 or float64.

        Raises:
            TypeError / ValueError: a bad mesh, ``voxel_size``, ``padding`` or ``dtype``; a grid beyond the
            size limits.
        """
        h = positive(voxel_size, "voxel_size")
        pad = MESH_PADDING_VOXELS * h if padding is None else non_negative(padding, "padding")
        check_dtype(dtype)
        vertices = mesh_vertices(mesh)
        lo = (vertices.min(axis=0) - pad).tolist()
        hi = (vertices.max(axis=0) + pad).tolist()
        dims = grid_dims(lo, hi, h, "voxel_size")
        world = MeshWorld([mesh], device=device)
        axes = [
            torch.arange(n, dtype=torch.float64, device=world.device) * h + o
            for n, o in zip(dims, lo, strict=True)
        ]
        values = torch.empty(dims, dtype=dtype, device=world.device)
        flat = values.view(-1)
        per_x = dims[1] * dims[2]
        step = max(1, _MESH_CHUNK // per_x)
        for x0 in range(0, dims[0], step):
            xs = axes[0][x0 : x0 + step]
            centres = torch.stack(torch.meshgrid(xs, axes[1], axes[2], indexing="ij"), dim=-1).reshape(-1, 3)
            flat[x0 * per_x : x0 * per_x + centres.shape[0]] = signed_distance(centres.to(dtype), world)
        return cls(values, h, origin=lo)


# --------------------------------------------------------------------------------------------------------
# depth fusion
# --------------------------------------------------------------------------------------------------------


class DepthFusion:
    """Depth frames fused into a truncated signed distance (TSDF) grid, then a signed :class:`DistanceGrid`.

    The volume is a dense grid over ``bounds`` (voxel centres from ``(x0, y0, z0)`` up to at least ``(x1, y1,
    z1)``), a float32 TSDF (the mean projective distance ``D - z`` to the surface in units of ``truncation``,
    in ``[-1, 1]``; 1 where never observed) and a float32 weight (the number of readings) per voxel, in
    ``tsdf`` and ``weight`` ``(X, Y, Z)``.

    Args:
        bounds: ``((x0, y0, z0), (x1, y1, z1))`` in metres, world frame.
        voxel_size: metres (> 0, finite).
        truncation: metres (> 0); None: ``4 * voxel_size``.
        device: where the volume lives (the frames are moved there).

    Example:
        >>> fusion = DepthFusion(((-1, -1, 0), (1, 1, 2)), 0.02)
        >>> fusion.integrate(depth, intrinsics, [0, 0, 0, 1, 0, 0, 0])  # doctest: +SKIP
        >>> grid = fusion.distance_grid()  # doctest: +SKIP
    """

    def __init__(
        self,
        bounds: Any,
        voxel_size: float,
        *,
        truncation: float | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.voxel_size = positive(voxel_size, "voxel_size")
        lo, hi = parse_bounds(bounds)
        self.origin = tuple(lo)
        self.truncation = (
            TRUNCATION_VOXELS * self.voxel_size if truncation is None else positive(truncation, "truncation")
        )
        dims = grid_dims(lo, hi, self.voxel_size, "bounds")
        self.device = torch.device(device)
        checks.check_device("tsdf", tsdf=torch.empty(0, device=self.device))
        self.tsdf = torch.ones(dims, dtype=torch.float32, device=self.device)
        self.weight = torch.zeros(dims, dtype=torch.float32, device=self.device)

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.tsdf.shape)  # type: ignore[return-value]

    def integrate(
        self, depth: Any, intrinsics: Any, camera_pose: Any, *, max_range: float | None = None
    ) -> None:
        """Fuse one frame or a batch: two launches for the batch (the blocks each frame reaches are marked,
        then each voxel of a marked block is projected into the frames that marked it, in order).

        Args:
            depth: ``(H, W)`` or ``(B, H, W)`` z-depth in metres (along the optical axis). 0, negative, NaN,
                inf and readings beyond ``max_range`` are no reading.
            intrinsics: ``(3, 3)`` or ``(B, 3, 3)`` pinhole matrices ``[[fx, s, cx], [0, fy, cy], [0, 0, 1]]``
                (pixel ``(u, v)`` = column, row; pixel centres at integer coordinates).
            camera_pose: ``(7,)`` or ``(B, 7)`` world-from-camera ``[x, y, z, qw, qx, qy, qz]``, OpenCV axes
                (+z forward, +x right, +y down).
            max_range: metres (> 0); None: no limit.

        A voxel whose nearest pixel holds a reading ``D`` within the truncation of the voxel's depth ``z``
        in the camera (``|D - z| <= truncation``: the band around the surface) takes ``(D - z) /
        truncation`` into its running mean, its weight + 1; voxels farther in front (free space) or behind
        (occluded) are left alone, as in Open3D's ``VoxelBlockGrid`` (whose blocks exist only near
        surfaces). Only blocks of 4**3 voxels that a reading's band reaches are visited (a pass over tiles
        of the frames marks them). Frames one by one give the same volume as the batch (same arithmetic,
        same order).

        Raises:
            TypeError: non-numeric arrays. ValueError: bad shapes; intrinsics not ``[[fx, s, cx], [0, fy,
            cy], [0, 0, 1]]`` with finite entries and ``fx, fy > 0``; a pose not finite or whose quaternion
            is not a unit one (norm within 1e-3 of 1).
        """
        depth_t = as_float32(depth, "depth", self.device)
        if depth_t.dim() == 2:
            depth_t = depth_t.unsqueeze(0)
        if depth_t.dim() != 3:
            raise ValueError(f"depth must have shape (H, W) or (B, H, W); got {tuple(depth_t.shape)}")
        batch = depth_t.shape[0]
        k = as_float32(intrinsics, "intrinsics", self.device)
        if k.shape == (3, 3):
            k = k.expand(batch, 3, 3)
        pose = as_float32(camera_pose, "camera_pose", self.device)
        if pose.shape == (7,):
            pose = pose.expand(batch, 7)
        reach = math.inf if max_range is None else positive(max_range, "max_range")
        _integrate_op.call(
            tsdf=self.tsdf,
            weight=self.weight,
            depth=depth_t.contiguous(),
            intrinsics=k.contiguous(),
            camera_pose=pose.contiguous(),
            origin=list(self.origin),
            voxel_size=self.voxel_size,
            truncation=self.truncation,
            max_range=reach,
        )

    def distance_grid(self, *, dtype: torch.dtype = torch.float32) -> DistanceGrid:
        """The fused scene as a signed :class:`DistanceGrid` (rebuilt from the TSDF: call again after more
        frames).

        Occupied: observed voxels behind the surface (``weight > 0`` and ``tsdf < 0``: the truncation band
        behind it); free: the others, in front of the surface or never observed (unobserved space, the
        inside of a solid deeper than the truncation included, counts as free). Values: the signed
        distance transform of that occupancy with the surface halfway between an occupied voxel and a free
        one: ``+-voxel_size * (sqrt(d2) - 1/2)`` (``d2`` as in :meth:`DistanceGrid.from_occupancy`), and,
        for a voxel next to the other side (``d2 == 1``), its own TSDF distance ``tsdf * truncation``
        clamped to ``[0, voxel_size]`` (free) or ``[-voxel_size, 0]`` (occupied): the zero crossing at
        sub-voxel precision. Nothing observed behind a surface: positive everywhere (see from_occupancy's
        degenerate grids, with the half-voxel offset).
        """
        values = _fused_op.call(
            tsdf=self.tsdf,
            weight=self.weight,
            voxel_size=self.voxel_size,
            truncation=self.truncation,
            dtype=dtype,
        )
        return DistanceGrid._made(values, self.voxel_size, self.origin)


# --------------------------------------------------------------------------------------------------------
# the ops: query (differentiable w.r.t. points), the builders, fusion
# --------------------------------------------------------------------------------------------------------


def _check_query(points: torch.Tensor, values: torch.Tensor, voxel_size: float, origin: list[float]) -> None:
    checks.check_float(points, "points")
    checks.check_shape(points, "points", (None, 3))
    check_values_tensor(values, "values")
    check_grid_args(voxel_size, origin)
    checks.check_device("points", points=points, values=values)


def _query_impl(
    points: torch.Tensor, values: torch.Tensor, voxel_size: float, origin: list[float]
) -> tuple[torch.Tensor, torch.Tensor]:
    """points (N, 3), values (X, Y, Z) -> distance (N,), gradient (N, 3) in points' dtype."""
    if checks.checking_values(points.device) and points.numel() and not bool(torch.isfinite(points).all()):
        raise ValueError("points must be finite; found NaN or inf")
    compute = _warp.compute_dtype(points.dtype)
    n = points.shape[0]
    distance = torch.empty(n, dtype=compute, device=points.device)
    gradient = torch.empty(n, 3, dtype=compute, device=points.device)
    _launch.launch_rows(
        kernels.QUERY[_warp.KEY[compute]].grid_query,
        n,
        device=points.device,
        work_per_row=_QUERY_WORK,
        points=points.to(compute).contiguous(),
        values=values.to(compute).contiguous().view(-1),
        dims=tuple(values.shape),
        voxel_size=voxel_size,
        origin=tuple(origin),
        distance=distance,
        gradient=gradient,
    )
    return distance.to(points.dtype), gradient.to(points.dtype)


#: A query's work per point in launch_rows' units (a CPU launch is split across threads above ~16k points).
_QUERY_WORK = 16


def _query_fake(points, values, voxel_size, origin):
    return points.new_empty(points.shape[0]), points.new_empty(points.shape[0], 3)


def _setup_query(ctx, inputs, output) -> None:
    ctx.set_materialize_grads(False)
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(output[1])


def _backward_query(ctx, grad_distance, _grad_gradient):
    if grad_distance is None or not ctx.needs_input_grad[0]:
        return _query_op.grads()
    (gradient,) = ctx.saved_tensors
    return _query_op.grads(points=_warp.scale_rows(grad_distance, gradient))


_query_op = Op(
    "warpgeo::distance_grid_query",
    check=_check_query,
    impl=_query_impl,
    fake=_query_fake,
    setup=_setup_query,
    backward=_backward_query,
)


#: Lines of a transform pass per CPU thread: consecutive lines share cache lines, and the envelope's scratch
#: is per thread (a few MB, where a thread per line -- CUDA's choice -- needs one row per line).
_CPU_LINES_PER_THREAD = 64


def _edt(
    occupied: torch.Tensor,
    signed: bool,
    voxel_size: float,
    offset: float,
    tsdf: torch.Tensor | None,
    truncation: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The distance transform of ``occupied`` ``(X, Y, Z)`` uint8 (1 = occupied) into new ``(X, Y, Z)``
    values of ``dtype``: signed, or unsigned (the distance to the occupied voxels); ``offset`` and ``tsdf``
    as ``kernels.edt_last`` takes them. Per channel three launches (z, y, x) over one squared-distance grid
    rewritten in place, each a thread per line (CUDA) or per ``_CPU_LINES_PER_THREAD`` lines (CPU)."""
    x, y, z = occupied.shape
    device = occupied.device
    fits32 = (x - 1) ** 2 + (y - 1) ** 2 + (z - 1) ** 2 < 2**31 - 1
    table = kernels.EDT["int32" if fits32 else "int64", _warp.KEY[dtype]]
    f = torch.empty(x, y, z, dtype=torch.int32 if fits32 else torch.int64, device=device)
    values = torch.empty(x, y, z, dtype=dtype, device=device)
    per = 1 if _warp.cuda_algorithms(device) else _CPU_LINES_PER_THREAD
    threads_y = -(-(x * z) // per)
    threads_x = -(-(y * z) // per)
    scratch = max(threads_y * y, threads_x * x)  # one buffer, viewed (threads, n) by each pass
    v = torch.empty(scratch, dtype=torch.int32, device=device)
    g = torch.empty(scratch, dtype=torch.int64, device=device)
    no_tsdf = torch.empty(0, 0, 0, dtype=torch.float32, device=device)
    stream = _warp.warp_stream(device)
    for channel in (0, 1) if signed else (0,):
        _launch.launch_rows(
            table.edt_first,
            x * y,
            device=device,
            work_per_row=z,
            occupied=occupied,
            f=f,
            channel=channel,
            stream=stream,
        )
        _launch.launch_rows(  # along y: the (X, Z, Y) view
            table.edt_pass,
            threads_y,
            device=device,
            work_per_row=y * per,
            f=f.permute(0, 2, 1),
            v=v[: threads_y * y].view(threads_y, y),
            g=g[: threads_y * y].view(threads_y, y),
            lines_per_thread=per,
            stream=stream,
        )
        _launch.launch_rows(  # along x: the (Y, Z, X) views
            table.edt_last,
            threads_x,
            device=device,
            work_per_row=x * per,
            f=f.permute(1, 2, 0),
            occupied=occupied.permute(1, 2, 0),
            tsdf=no_tsdf if tsdf is None else tsdf.permute(1, 2, 0),
            values=values.permute(1, 2, 0),
            v=v[: threads_x * x].view(threads_x, x),
            g=g[: threads_x * x].view(threads_x, x),
            channel=channel,
            is_signed=int(signed),
            lines_per_thread=per,
            voxel_size=voxel_size,
            offset=offset,
            truncation=truncation,
            stream=stream,
        )
    return values


def _check_occupancy(occupied: torch.Tensor, voxel_size: float, dtype: torch.dtype) -> None:
    if not isinstance(occupied, torch.Tensor) or occupied.dtype != torch.bool:
        got = occupied.dtype if isinstance(occupied, torch.Tensor) else type(occupied).__name__
        raise TypeError(f"occupied must be a bool tensor; got {got}")
    if occupied.dim() != 3:
        raise ValueError(f"occupied must have shape (X, Y, Z); got {tuple(occupied.shape)}")
    check_dims(tuple(occupied.shape), "occupied")
    check_grid_args(voxel_size, [0.0, 0.0, 0.0])
    check_dtype(dtype)
    checks.check_device("occupied", occupied=occupied)


def _occupancy_impl(occupied: torch.Tensor, voxel_size: float, dtype: torch.dtype) -> torch.Tensor:
    """occupied (X, Y, Z) bool -> the signed distance transform (X, Y, Z) of ``dtype``."""
    return _edt(occupied.contiguous().view(torch.uint8), True, voxel_size, 0.0, None, 0.0, dtype)


def _occupancy_fake(occupied, voxel_size, dtype):
    return torch.empty(occupied.shape, dtype=dtype, device=occupied.device)


_occupancy_op = Op(
    "warpgeo::distance_grid_from_occupancy",
    check=_check_occupancy,
    impl=_occupancy_impl,
    fake=_occupancy_fake,
)


def _check_points(
    points: torch.Tensor, dims: list[int], origin: list[float], voxel_size: float, dtype: torch.dtype
) -> None:
    checks.check_float(points, "points")
    if points.dtype not in GRID_DTYPES:
        raise TypeError(f"points must be float32 or float64 here; got {points.dtype}")
    checks.check_shape(points, "points", (None, 3))
    if len(dims) != 3:
        raise ValueError(f"dims must be 3 ints; got {dims!r}")
    for d in dims:
        checks.check_int(d, "dims", minimum=1)
    check_dims(tuple(dims), "dims")
    check_grid_args(voxel_size, origin)
    check_dtype(dtype)
    checks.check_device("points", points=points)


def _points_impl(
    points: torch.Tensor, dims: list[int], origin: list[float], voxel_size: float, dtype: torch.dtype
) -> torch.Tensor:
    """points (N, 3) -> unsigned distance to the voxels holding points, (X, Y, Z) = dims, of ``dtype``."""
    if checks.checking_values(points.device) and points.numel() and not bool(torch.isfinite(points).all()):
        raise ValueError("points must be finite; found NaN or inf")
    occupied = zeros_u8(tuple(dims), points.device)
    _launch.launch_rows(
        kernels.MARK[_warp.KEY[points.dtype]].mark_points,
        points.shape[0],
        device=points.device,
        points=points.contiguous(),
        origin=tuple(origin),
        voxel_size=voxel_size,
        occupied=occupied,
    )
    return _edt(occupied, False, voxel_size, 0.0, None, 0.0, dtype)


def _points_fake(points, dims, origin, voxel_size, dtype):
    return torch.empty(dims, dtype=dtype, device=points.device)


_points_op = Op(
    "warpgeo::distance_grid_from_points", check=_check_points, impl=_points_impl, fake=_points_fake
)


def _check_volume(tsdf: torch.Tensor, weight: torch.Tensor) -> None:
    for name, t in (("tsdf", tsdf), ("weight", weight)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 tensor; got {getattr(t, 'dtype', type(t).__name__)}")
        if t.dim() != 3:
            raise ValueError(f"{name} must have shape (X, Y, Z); got {tuple(t.shape)}")
    check_dims(tuple(tsdf.shape), "tsdf")
    if weight.shape != tsdf.shape:
        raise ValueError(f"weight must have the shape of tsdf {tuple(tsdf.shape)}; got {tuple(weight.shape)}")
    checks.check_device("tsdf", tsdf=tsdf, weight=weight)


def _check_integrate(
    tsdf: torch.Tensor,
    weight: torch.Tensor,
    depth: torch.Tensor,
    intrinsics: torch.Tensor,
    camera_pose: torch.Tensor,
    origin: list[float],
    voxel_size: float,
    truncation: float,
    max_range: float,
) -> None:
    _check_volume(tsdf, weight)
    for name, t in (("depth", depth), ("intrinsics", intrinsics), ("camera_pose", camera_pose)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 tensor; got {getattr(t, 'dtype', type(t).__name__)}")
    if depth.dim() != 3:
        raise ValueError(f"depth must have shape (B, H, W); got {tuple(depth.shape)}")
    batch = depth.shape[0]
    checks.check_shape(intrinsics, "intrinsics", (batch, 3, 3))
    checks.check_shape(camera_pose, "camera_pose", (batch, 7))
    check_grid_args(voxel_size, origin)
    if not isinstance(truncation, float) or not (math.isfinite(truncation) and truncation > 0):
        raise ValueError(f"truncation must be a positive finite float; got {truncation!r}")
    if not isinstance(max_range, float) or not max_range > 0:
        raise ValueError(f"max_range must be a positive float; got {max_range!r}")
    checks.check_device("tsdf", tsdf=tsdf, depth=depth, intrinsics=intrinsics, camera_pose=camera_pose)


def _integrate_impl(
    tsdf: torch.Tensor,
    weight: torch.Tensor,
    depth: torch.Tensor,
    intrinsics: torch.Tensor,
    camera_pose: torch.Tensor,
    origin: list[float],
    voxel_size: float,
    truncation: float,
    max_range: float,
) -> None:
    """Fuse (B, H, W) depth frames into ``tsdf`` / ``weight`` (X, Y, Z) in place (one launch)."""
    if checks.checking_values(tsdf.device):
        _check_cameras(intrinsics, camera_pose)
    batch, height, width = depth.shape
    blocks = [-(-n // _BLOCK) for n in tsdf.shape]
    active = zeros_u8((batch, *blocks), tsdf.device)
    table = kernels.FUSION["float32"]
    stream = _warp.warp_stream(tsdf.device)
    cameras = {"depth": depth, "intrinsics": intrinsics, "pose": camera_pose, "active": active}
    scalars = {
        "origin": tuple(origin),
        "voxel_size": voxel_size,
        "truncation": truncation,
        "max_range": max_range,
    }
    tiles = -(-height // _TILE) * -(-width // _TILE)
    _launch.launch_rows(
        table.mark_blocks,
        batch * tiles,
        device=tsdf.device,
        work_per_row=_SPLIT_WORK * _TILE * _TILE,
        tile=_TILE,
        dims=tuple(tsdf.shape),
        stream=stream,
        **cameras,
        **scalars,
    )
    # the CPU visits the marked blocks only (a thread per block costs ~1 ms for a 201^3 grid's 130k, most
    # of them unmarked); CUDA runs a thread per block, an unmarked one returning at once (no host read)
    listed = _launch.empty(torch.int32, tsdf.device)
    rows = math.prod(blocks)
    if not _warp.cuda_algorithms(tsdf.device):
        marked = active.numpy().reshape(batch, -1).any(axis=0) if batch > 1 else active.numpy().reshape(-1)
        listed = torch.from_numpy(np.flatnonzero(marked).astype(np.int32))
        rows = listed.shape[0]
    _launch.launch_rows(
        table.fuse_blocks,
        rows,
        device=tsdf.device,
        blocks=listed,
        work_per_row=_SPLIT_WORK * _BLOCK**3 * batch,
        tsdf=tsdf,
        weight=weight,
        stream=stream,
        **cameras,
        **scalars,
    )


#: Pixels per side of a tile of ``mark_blocks`` (a thread per tile: its readings' depth range).
_TILE = 8
#: Work per pixel of a tile (its reads, the boxes it marks) and per voxel of a block (a projection) in
#: launch_rows' units: a 640x480 frame is split among threads, in ranges that even out
#: (at 1 per pixel the marking stayed on one thread: 1.3 ms of a 4.4 ms call).
_SPLIT_WORK = 4
#: Voxels per side of a block of ``fuse_blocks``.
_BLOCK = int(kernels.BLOCK)


def _integrate_fake(tsdf, weight, depth, intrinsics, camera_pose, origin, voxel_size, truncation, max_range):
    return None


def _check_cameras(intrinsics: torch.Tensor, camera_pose: torch.Tensor) -> None:
    """Value checks of the cameras (one device-to-host copy of the small arrays, checked in numpy)."""
    host = torch.cat((intrinsics.reshape(-1), camera_pose.reshape(-1))).double().cpu().numpy()
    k = host[: intrinsics.numel()].reshape(-1, 3, 3)
    pose = host[intrinsics.numel() :].reshape(-1, 7)
    finite = np.isfinite(k).all(axis=(1, 2)) & (k[:, 0, 0] > 0) & (k[:, 1, 1] > 0)
    pinhole = (k[:, 1, 0] == 0) & (k[:, 2, 0] == 0) & (k[:, 2, 1] == 0) & (k[:, 2, 2] == 1)
    if not finite.all():
        b = int(np.flatnonzero(~finite)[0])
        raise ValueError(f"intrinsics[{b}] must be finite with focal lengths fx, fy > 0; got {k[b].tolist()}")
    if not pinhole.all():
        b = int(np.flatnonzero(~pinhole)[0])
        raise ValueError(
            f"intrinsics[{b}] must be a pinhole matrix [[fx, s, cx], [0, fy, cy], [0, 0, 1]]; got {k[b].tolist()}"
        )
    if not np.isfinite(pose).all():
        raise ValueError("camera_pose must be finite; found NaN or inf")
    norm = np.linalg.norm(pose[:, 3:], axis=1)
    bad = np.flatnonzero(np.abs(norm - 1.0) > QUAT_NORM_TOL)
    if len(bad):
        b = int(bad[0])
        raise ValueError(
            f"camera_pose[{b}] must hold a unit quaternion [qw, qx, qy, qz] (norm within {QUAT_NORM_TOL} of 1); "
            f"got norm {float(norm[b]):.6g}"
        )


_integrate_op = Op(
    "warpgeo::depth_fusion_integrate",
    check=_check_integrate,
    impl=_integrate_impl,
    fake=_integrate_fake,
    mutates_args=("tsdf", "weight"),
)


def _check_fused(
    tsdf: torch.Tensor, weight: torch.Tensor, voxel_size: float, truncation: float, dtype: torch.dtype
) -> None:
    _check_volume(tsdf, weight)
    check_grid_args(voxel_size, [0.0, 0.0, 0.0])
    if not isinstance(truncation, float) or not (math.isfinite(truncation) and truncation > 0):
        raise ValueError(f"truncation must be a positive finite float; got {truncation!r}")
    check_dtype(dtype)


def _fused_impl(
    tsdf: torch.Tensor, weight: torch.Tensor, voxel_size: float, truncation: float, dtype: torch.dtype
) -> torch.Tensor:
    """The TSDF volume -> signed distances (X, Y, Z) of ``dtype`` (see DepthFusion.distance_grid)."""
    occupied = torch.empty(tsdf.shape, dtype=torch.uint8, device=tsdf.device)
    _launch.launch(
        kernels.FUSION["float32"].tsdf_occupancy,
        tsdf.shape,
        device=tsdf.device,
        tsdf=tsdf,
        weight=weight,
        occupied=occupied,
    )
    return _edt(occupied, True, voxel_size, 0.5, tsdf, truncation, dtype)


def _fused_fake(tsdf, weight, voxel_size, truncation, dtype):
    return torch.empty(tsdf.shape, dtype=dtype, device=tsdf.device)


_fused_op = Op("warpgeo::depth_fusion_distance", check=_check_fused, impl=_fused_impl, fake=_fused_fake)
