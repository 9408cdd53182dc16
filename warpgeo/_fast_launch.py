"""Optional accelerator of the launcher: a moved tensor's descriptor is re-pointed, not rebuilt.

Most launches of an op see its inputs unchanged and its outputs freshly allocated: same shape, strides and
dtype as last call, new memory. The public path hands Warp a new descriptor for each such tensor
(``wp.from_torch(..., return_ctype=True)``, ~3-5 µs each: a fifth to a third of a small call). Here the
descriptor the launch already holds gets its data pointer rewritten (~0.3 µs) and is set again through
``Launch.set_param_at_index_from_ctype``.

It relies on two undocumented facts of Warp's array descriptor: it names its data pointer field ``data``,
and it keeps the tensor it was made from alive through its ``_ref`` attribute (dropped here: a launch must
not hold an op's output after the op returns). So it is on only for the Warp versions it was tested with
(:data:`TESTED`), after a check at first use that a re-pointed descriptor is byte for byte the one
``wp.from_torch`` builds for the new tensor and that the reference is where it is expected; otherwise, or
with ``WARPGEO_FAST_LAUNCH=0``, the launcher takes the public path (the test suite runs both).
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

#: Warp versions (prefixes) this module was tested with.
TESTED = ("1.19.",)


@functools.cache
def enabled() -> bool:
    """Whether re-pointing is on in this process (decided once: version, switch, first-use check)."""
    if os.environ.get("WARPGEO_FAST_LAUNCH", "1").strip().lower() in ("0", "false", "off", "no"):
        return False
    import torch

    from warpgeo._warp import warp

    wp = warp()
    if not str(wp.config.version).startswith(TESTED):
        return False
    try:
        a = torch.arange(12, dtype=torch.float32).reshape(4, 3)
        b = torch.zeros(4, 3)
        desc = wp.from_torch(a, dtype=wp.vec3f, requires_grad=False, return_ctype=True)
        field = dict(type(desc)._fields_).get("data")
        if field not in (ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t) or desc.data != a.data_ptr():
            return False
        if getattr(desc, "_ref", None) is not a:
            return False
        release(desc)
        repoint(desc, b.data_ptr())
        fresh = wp.from_torch(b, dtype=wp.vec3f, requires_grad=False, return_ctype=True)
        return bytes(desc) == bytes(fresh)
    except Exception:
        return False


def release(desc: Any) -> Any:
    """``desc`` without the reference to its tensor (and gradient) that ``wp.from_torch`` attached."""
    desc._ref = None
    desc._gradref = None
    return desc


def repoint(desc: Any, ptr: int) -> None:
    """Point the Warp array descriptor ``desc`` at ``ptr`` (same shape, strides and element type)."""
    desc.data = ptr
