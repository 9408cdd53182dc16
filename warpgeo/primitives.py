"""Analytic primitives: world entries of :class:`~warpgeo.MeshWorld` with exact closed-form signed distances.

A primitive sits in a world beside meshes (``MeshWorld([warpgeo.Sphere(0.1), table_mesh])``) and is posed,
enabled, costed and differentiated like one, in every SDF op; its distance is computed in closed form (no
mesh, no BVH query). Each is centred at the origin of its own frame (the pose moves it):

* :class:`Cuboid` ``(dims)``: a box of full side lengths ``dims = (x, y, z)``;
* :class:`Sphere` ``(radius)``;
* :class:`Capsule` ``(radius, length)``: the points within ``radius`` of the segment of length ``length``
  along z (from ``-length / 2`` to ``length / 2``);
* :class:`Cylinder` ``(radius, height)``: along z, from ``-height / 2`` to ``height / 2``, flat caps.

A primitive is always signed (negative inside) whatever the world's ``sign_method`` says: sign methods are
for meshes. Its dimensions are stored in float32, as a mesh's vertices are (about 1e-7 relative); the
distance is then computed in float64 from them. Importing this module does no work (plain Python).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from . import _constants

__all__ = ["PRIMITIVES", "Capsule", "Cuboid", "Cylinder", "Primitive", "Sphere"]

#: The smallest size a primitive may have: float32's smallest normal number (its sizes are stored in float32).
MIN_SIZE = 2.0**-126
#: The largest coordinate of a primitive's box: as for mesh vertices, where Warp's float32 queries can square
#: distances (``warpgeo._world.loading._COORDINATE_LIMIT``).
MAX_SIZE = 2.0**60


def _length(value: Any, name: str) -> float:
    """``value`` as a positive finite float, or a TypeError / ValueError naming ``name``."""
    if hasattr(value, "shape") and hasattr(value, "dtype") and tuple(value.shape) in ((), (1,)):
        kind = str(value.dtype)
        if "complex" in kind or kind == "bool" or kind.endswith(".bool"):
            raise TypeError(f"{name} must be a real number; got {kind} {value!r:.60}")
        if getattr(value, "device", None) is not None and str(value.device) == "meta":
            raise ValueError(f"{name} is a meta tensor (it holds no value)")
        value = value.reshape(()).item() if hasattr(value, "item") else value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r:.60}")
    try:
        number = float(value)
    except OverflowError:  # an int or Fraction beyond float's range
        size = abs(int(value)).bit_length()  # not str(): ints beyond 4300 digits refuse it
        sign = "-" if value < 0 else ""
        raise ValueError(f"{name} must lie in [2**-126, 2**60]; got about {sign}2**{size}") from None
    if not math.isfinite(number) or number <= 0.0:
        raise ValueError(f"{name} must be finite and > 0; got {number!r}")
    if number < MIN_SIZE or number > MAX_SIZE:
        raise ValueError(
            f"{name} must lie in [2**-126, 2**60] (sizes are stored in float32, and distances squared in "
            f"Warp's float32 queries); got {number!r}"
        )
    return number


class Primitive:
    """Base of the analytic primitives: a world entry with a closed-form signed distance."""

    __slots__ = ()

    #: its ``slot_kind`` in a world, on which the kernels dispatch (``warpgeo._constants.KIND_*``)
    _kind: int = 0

    def half_extents(self) -> tuple[float, float, float]:
        """Half the side lengths of the primitive's box (centred at its origin), as Python floats: in float32,
        its ``prim_size`` in a world, from which the kernels read its sizes (``warpgeo._constants.KIND_*``)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Cuboid(Primitive):
    """A box of full side lengths ``dims = (x, y, z)`` (each finite, > 0), centred at its origin.

    Args:
        dims: three side lengths; any array-like (list, tuple, NumPy array, tensor).

    Raises:
        TypeError: non-numeric, complex or bool side lengths.
        ValueError: not three of them, or one not finite, <= 0, or beyond ``[2**-126, 2**60]``.

    Example:
        >>> warpgeo.Cuboid([0.4, 0.2, 1.0])
        Cuboid(dims=(0.4, 0.2, 1.0))
    """

    dims: tuple[float, float, float]
    _kind = _constants.KIND_CUBOID

    def __post_init__(self) -> None:
        dims = self.dims
        if hasattr(dims, "tolist") and callable(dims.tolist):
            if hasattr(dims, "dtype") and "complex" in str(dims.dtype):
                raise TypeError(f"dims must be real numbers; got {dims.dtype}")
            if getattr(dims, "device", None) is not None and str(dims.device) == "meta":
                raise ValueError("dims is a meta tensor (it holds no values)")
            dims = dims.tolist()
        if isinstance(dims, (str, bytes)) or not hasattr(dims, "__len__") or not hasattr(dims, "__iter__"):
            raise TypeError(f"dims must be three side lengths (x, y, z); got {type(dims).__name__}")
        if len(dims) != 3:
            raise ValueError(f"dims must hold three side lengths (x, y, z); got {len(dims)}: {dims!r:.60}")
        object.__setattr__(self, "dims", tuple(_length(d, f"dims[{k}]") for k, d in enumerate(dims)))

    def half_extents(self) -> tuple[float, float, float]:
        x, y, z = self.dims
        return (x / 2, y / 2, z / 2)


@dataclass(frozen=True)
class Sphere(Primitive):
    """A ball of ``radius`` (finite, > 0) centred at its origin.

    Raises:
        TypeError: a radius that is not a real number.
        ValueError: a radius not finite, <= 0, or beyond ``[2**-126, 2**60]``.

    Example:
        >>> warpgeo.Sphere(0.25)
        Sphere(radius=0.25)
    """

    radius: float
    _kind = _constants.KIND_SPHERE

    def __post_init__(self) -> None:
        object.__setattr__(self, "radius", _length(self.radius, "radius"))

    def half_extents(self) -> tuple[float, float, float]:
        return (self.radius, self.radius, self.radius)


@dataclass(frozen=True)
class Capsule(Primitive):
    """The points within ``radius`` of the segment of ``length`` along z, centred at its origin (from
    ``(0, 0, -length / 2)`` to ``(0, 0, length / 2)``); both finite and > 0.

    Raises:
        TypeError: an argument that is not a real number.
        ValueError: an argument not finite, <= 0, or beyond ``[2**-126, 2**60]``.

    Example:
        >>> warpgeo.Capsule(0.1, 0.5)
        Capsule(radius=0.1, length=0.5)
    """

    radius: float
    length: float
    _kind = _constants.KIND_CAPSULE

    def __post_init__(self) -> None:
        object.__setattr__(self, "radius", _length(self.radius, "radius"))
        object.__setattr__(self, "length", _length(self.length, "length"))
        _length(self.length / 2 + self.radius, "length / 2 + radius")

    def half_extents(self) -> tuple[float, float, float]:
        return (self.radius, self.radius, self.length / 2 + self.radius)


@dataclass(frozen=True)
class Cylinder(Primitive):
    """A solid cylinder of ``radius`` and ``height`` along z with flat caps, centred at its origin (from
    ``z = -height / 2`` to ``height / 2``); both finite and > 0.

    Raises:
        TypeError: an argument that is not a real number.
        ValueError: an argument not finite, <= 0, or beyond ``[2**-126, 2**60]``.

    Example:
        >>> warpgeo.Cylinder(0.1, 0.5)
        Cylinder(radius=0.1, height=0.5)
    """

    radius: float
    height: float
    _kind = _constants.KIND_CYLINDER

    def __post_init__(self) -> None:
        object.__setattr__(self, "radius", _length(self.radius, "radius"))
        object.__setattr__(self, "height", _length(self.height, "height"))

    def half_extents(self) -> tuple[float, float, float]:
        return (self.radius, self.radius, self.height / 2)


#: The primitive classes a world takes as entries.
PRIMITIVES = (Cuboid, Sphere, Capsule, Cylinder)
