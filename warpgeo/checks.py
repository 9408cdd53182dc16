"""Checks every op shares: the public value-check switch and the argument checks.

Two kinds (DESIGN "Conventions"): *shape checks* read no tensor values and always run; *value checks*
(NaN/inf, index ranges, lengths) read one value back from the device and run only where
:func:`checking_values` says so (on by default; off under :func:`value_checks` ``(False)`` and during CUDA
graph capture). ``warpgeo.value_checks`` / ``warpgeo.set_value_checks`` are this module's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from warpgeo._warp import FLOAT_DTYPES, INDEX_DTYPES, dtype_names

# --------------------------------------------------------------------------------------------------------
# value checks
# --------------------------------------------------------------------------------------------------------

_value_checks_enabled = True


def set_value_checks(enabled: bool) -> None:
    """Turn the value checks of every op on or off, process-wide (see :func:`value_checks`)."""
    global _value_checks_enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool; got {type(enabled).__name__}")
    _value_checks_enabled = enabled


@contextlib.contextmanager
def value_checks(enabled: bool = True) -> Iterator[None]:
    """Context manager: value checks on or off inside the block (process-wide), restored on exit.

    Value checks (NaN/inf, index ranges, lengths, ``env_index``, quaternion norms) read tensor values, one
    device-to-host transfer per call, which stalls the CUDA pipeline and cannot be captured in a CUDA graph.
    With them off an op makes no host read at all; bad values then give garbage-in-garbage-out results, but
    never an out-of-bounds access (every kernel bounds-checks what it reads). Shape, dtype and device checks
    stay on. While the current CUDA stream is capturing, value checks are skipped anyway.

    Example:
        >>> world = warpgeo.MeshWorld([trimesh.creation.box((1, 1, 1))])
        >>> spheres = torch.tensor([[0.4, 0.0, 0.0, 0.2]])
        >>> with warpgeo.value_checks(False):
        ...     cost = warpgeo.sphere_mesh_cost(spheres, world)   # no device-to-host sync
    """
    previous = _value_checks_enabled
    set_value_checks(enabled)
    try:
        yield
    finally:
        set_value_checks(previous)


def checking_values(device: torch.device) -> bool:
    """Should an op on ``device`` run its value checks now? (Off by switch, or during CUDA graph capture.)"""
    if not _value_checks_enabled:
        return False
    return not (device_type(device) == "cuda" and torch.cuda.is_current_stream_capturing())


#: ``torch.device`` -> its ``type``, filled as devices are seen (a few entries): ``device.type`` makes a new
#: string on every read (0.17 µs on the CPU; an op reads it once or twice a call).
_DEVICE_TYPES: dict[torch.device, str] = {}


def device_type(device: torch.device) -> str:
    """``device.type``, read once per device."""
    kind = _DEVICE_TYPES.get(device)
    if kind is None:
        kind = _DEVICE_TYPES[device] = device.type
    return kind


def check_float(t: Any, name: str) -> None:
    """Raise TypeError unless ``t`` is a tensor of one of :data:`FLOAT_DTYPES`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must have dtype {dtype_names(FLOAT_DTYPES)}; got {t.dtype}")


def check_index(t: Any, name: str) -> None:
    """Raise TypeError unless ``t`` is an int32 or int64 tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must have dtype {dtype_names(INDEX_DTYPES)}; got {t.dtype}")


def check_device(reference: str, **tensors: torch.Tensor | None) -> torch.device:
    """Raise ValueError unless every tensor lives on the device of ``tensors[reference]``, a device warpgeo
    runs on (cpu or cuda); return that device."""
    device = tensors[reference].device  # type: ignore[union-attr]
    if device_type(device) not in ("cpu", "cuda"):
        raise ValueError(f"warpgeo runs on 'cpu' and 'cuda' devices; got {reference} on {device}")
    for name, t in tensors.items():
        if t is not None and t.device != device:
            raise ValueError(f"{name} must be on the same device as {reference} ({device}); got {t.device}")
    return device


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
    """``value`` as an int (bool refused), at least ``minimum``; TypeError / ValueError naming ``name``."""
    if isinstance(value, torch.SymInt):  # traced by torch.compile / fake tensors: nothing to read
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")
    return value


def check_shape(t: torch.Tensor, name: str, shape: Sequence[int | None]) -> None:
    """ValueError unless ``t.shape`` matches ``shape`` (``None`` matches any size)."""
    size = t.shape
    if size == shape:  # the usual case: every size given, and they match
        return
    if len(size) == len(shape):
        for s, d in zip(shape, size, strict=True):
            if s is not None and s != d:
                break
        else:
            return
    expected = (
        "(" + ", ".join("*" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
    )
    raise ValueError(f"{name} must have shape {expected}; got {tuple(t.shape)}")


def shown(value: Any) -> str:
    """``value`` for an error message: lists item by item, an int too long to print in full by its size."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if isinstance(value, int) and value.bit_length() > 64:
        return f"<an int of {len(str(abs(value)))} digits>"
    return repr(value)
