"""Warp itself, seen from torch: lazy initialisation, devices and streams, dtypes, algorithms by device.

* :func:`warp` imports and initialises Warp on first use (importing :mod:`warpgeo` does no work), with
  Warp's driver warning filtered on a machine without CUDA;
* torch device -> Warp device (``cuda:1`` stays ``cuda:1``) and torch's *current* CUDA stream;
* the dtype table (which floating dtypes an op accepts, in which precision it computes);
* :func:`cuda_algorithms`: which algorithms an op takes on a device (tests run CUDA's on CPU tensors);
* small torch helpers that keep the CPU's cores for the launches (:func:`sum64`, :func:`scale_rows`).

Launching is :mod:`warpgeo._launch`; argument and value checks are :mod:`warpgeo.checks`.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch

from warpgeo import _threads
from warpgeo._constants import INT32_LIMIT

#: Floating dtypes accepted for points, spheres and features.
FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: Integer dtypes accepted for index inputs (outputs are always int64).
INDEX_DTYPES: tuple[torch.dtype, ...] = (torch.int32, torch.int64)


def dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


_WARP: Any = None
_WARP_LOCK = _threads.ForkSafeLock()


def warp() -> Any:
    """Import and initialise Warp once, on first use, and return the ``warp`` module (see :func:`_init_warp`;
    the garbage collector is paused meanwhile, see :func:`no_gc`). Safe from several threads at once: one
    initialises (its stderr redirection is process-wide), the others wait for it."""
    global _WARP
    if _WARP is not None:
        return _WARP
    with _WARP_LOCK:
        if _WARP is None:
            with no_gc():
                _WARP = _init_warp()
    return _WARP


#: ``wp.config.log_level`` as Warp sets it (``warp.LOG_INFO``): another value is the user's choice.
_WARP_DEFAULT_LOG_LEVEL = 20


def _init_warp() -> Any:
    """Import and initialise Warp.

    Warp's per-module "load" messages are silenced, and so is its "Could not find or load the NVIDIA CUDA
    driver" warning on a machine without the driver, unless the user chose a log level of their own (then
    it stands) or ``WARPGEO_VERBOSE=1`` is set.
    """
    # Was Warp imported before warpgeo imported it (the user's own ``import warp``)? warpgeo._kernels
    # recorded it when an op module first imported it; a first call that comes before any op module (the
    # warmup) reads it now, before the import below.
    kernels = sys.modules.get("warpgeo._kernels")
    user_imported = kernels.WARP_IMPORTED_BY_USER if kernels is not None else "warp" in sys.modules
    import warp as wp

    if (
        os.environ.get("WARPGEO_VERBOSE", "0") not in ("", "0")
        or wp.config.log_level != _WARP_DEFAULT_LOG_LEVEL
    ):
        wp.init()
        return wp
    wp.config.log_level = wp.LOG_WARNING
    if user_imported:  # Warp may be initialised already: its driver message is out, or was silenced
        wp.init()
        return wp

    import ctypes
    import tempfile

    # Warp's native init dlopens the CUDA driver exactly so and, failing, fprintf's its warning to the C
    # stderr (warp/native/cuda_util.cpp, init_cuda_driver); no Warp setting turns that off. Only where the
    # driver does not load, fd 2 goes to a temporary file for the length of wp.init() and every other line
    # written meanwhile is passed on afterwards.
    driver = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so", "libcuda.so.1")
    has_driver = sys.platform == "darwin"  # macOS builds of Warp have no CUDA, hence no warning
    for name in driver:
        try:
            ctypes.CDLL(name)
            has_driver = True
            break
        except OSError:
            pass
    try:
        saved = None if has_driver else os.dup(2)
    except OSError:  # no stderr to filter
        saved = None
    if saved is None:
        wp.init()
        return wp
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        os.dup2(captured.fileno(), 2)
        try:
            wp.init()
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        lines = captured.read().decode(errors="replace").splitlines(keepends=True)
    rest = "".join(line for line in lines if "Could not find or load the NVIDIA CUDA driver" not in line)
    if rest:
        sys.stderr.write(rest)
    return wp


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: importing Warp and defining kernels allocates enough objects to
    trigger full collections (~0.15 s each in a process holding torch) that find nothing to free."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# --------------------------------------------------------------------------------------------------------
# which algorithms a device takes
# --------------------------------------------------------------------------------------------------------


class _Paths:
    """Which algorithms the ops take: CUDA's on a CUDA device (block and element kernels, torch sorts, one
    launch of one row per thread), the CPU's on the CPU (row kernels split among threads, counting sorts,
    several rows per thread). The tests set :attr:`cuda_on_cpu` to run CUDA's choices on CPU tensors
    (``tests/test_cuda_paths.py``); nothing public depends on it."""

    cuda_on_cpu = False


PATHS = _Paths()


def cuda_algorithms(device: torch.device) -> bool:
    """Whether an op on ``device`` takes its CUDA algorithms (see :class:`_Paths`)."""
    return device.type == "cuda" or PATHS.cuda_on_cpu


# --------------------------------------------------------------------------------------------------------
# devices and streams
# --------------------------------------------------------------------------------------------------------

_WARP_DEVICES: dict[torch.device, Any] = {}


def warp_device(device: torch.device | str) -> Any:
    """The Warp device for a torch device: ``cpu`` -> ``"cpu"``, ``cuda[:i]`` -> ``"cuda:i"``.

    A bare ``cuda`` resolves to torch's current CUDA device, as torch itself does.

    Raises:
        ValueError: for device types Warp cannot run on (``mps``, ``meta``, ...).
    """
    device = torch.device(device)
    found = _WARP_DEVICES.get(device)
    if found is not None:
        return found
    wp = warp()
    if device.type == "cpu":
        found = wp.get_device("cpu")
    elif device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(device)!r} was asked for, but torch sees no CUDA device")
        index = device.index if device.index is not None else torch.cuda.current_device()
        found = wp.get_device(f"cuda:{index}")
    else:
        raise ValueError(f"warpgeo runs on 'cpu' and 'cuda' devices; got a tensor on {str(device)!r}")
    if device.type == "cpu" or device.index is not None:  # a bare "cuda" follows the current device
        _WARP_DEVICES[device] = found
    return found


_WARP_STREAMS: dict[tuple[int, int], Any] = {}


def warp_stream(device: torch.device | str) -> Any:
    """Warp's handle to torch's current stream on ``device`` (``None`` on the CPU).

    An op with several launches looks it up once per call and hands it to each (``stream=`` of
    :func:`warpgeo._launch.launch`): on a slow host torch's lookup costs 10-20 µs."""
    if type(device) is not torch.device:
        device = torch.device(device)
    if device.type != "cuda":
        return None
    index = device.index
    # by index: torch resolves a torch.device argument to one first (half the lookup's cost)
    stream = torch.cuda.current_stream(index if index is not None else torch.cuda.current_device())
    key = (stream.device_index, stream.cuda_stream)
    found = _WARP_STREAMS.get(key)
    if found is None:
        found = warp().stream_from_torch(stream)
        _WARP_STREAMS[key] = found
    return found


# --------------------------------------------------------------------------------------------------------
# dtypes and argument checks
# --------------------------------------------------------------------------------------------------------


#: The kernel tables' key of a compute dtype (``KernelTable[KEY[dtype]]``): the one map every op uses.
KEY: dict[torch.dtype, str] = {torch.float32: "float32", torch.float64: "float64"}


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision a kernel runs in for inputs of ``dtype``: float64 stays, the rest use float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def to_compute(t: torch.Tensor) -> torch.Tensor:
    """``t`` in its kernel precision (:func:`compute_dtype`) with a dense last dimension (what a Warp vector
    array of its rows needs); other strides are kept. No copy when it already is both."""
    compute = compute_dtype(t.dtype)
    if t.dtype != compute:
        t = t.to(compute)
    if t.dim() > 0 and t.stride(-1) != 1 and t.shape[-1] > 1:
        t = t.contiguous()
    return t


def dense_below(tensors: Iterable[torch.Tensor], limit: int | None = None) -> bool:
    """True when every tensor is contiguous and smaller than ``limit`` bytes: then none has a dimension or a
    byte stride reaching ``limit`` (one Warp launch can take them all as they are) — a cheap test that spares
    the usual call the analysis of how to split a launch. ``limit`` defaults to ``INT32_LIMIT``."""
    if limit is None:
        limit = INT32_LIMIT
    return all(t.is_contiguous() and t.numel() * t.element_size() < limit for t in tensors)


#: The floating dtypes numpy can sum (it has no bfloat16).
_NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)


def _on_the_host(*tensors: torch.Tensor) -> bool:
    """Whether numpy may compute on these tensors in torch's place: plain CPU tensors of a dtype numpy has,
    and nobody watching torch's ops (no ``TorchDispatchMode``: opcheck, fake tensors, a sync checker; not
    under ``torch.compile``)."""
    if torch.compiler.is_compiling() or _in_dispatch_mode():
        return False
    return all(
        type(t) is torch.Tensor and t.device.type == "cpu" and t.dtype in _NUMPY_FLOATS for t in tensors
    )


try:
    from torch.utils._python_dispatch import is_in_torch_dispatch_mode as _in_dispatch_mode
except ImportError:  # a torch without it: assume a mode (torch computes)

    def _in_dispatch_mode() -> bool:
        return True


def sum64(x: torch.Tensor) -> torch.Tensor:
    """``x.sum(dtype=torch.float64)`` (a 0-d tensor on ``x``'s device), the value checks' finite test.

    On the CPU (:func:`_on_the_host`) numpy sums on the calling thread: torch's sum of a large tensor runs
    on torch's OpenMP workers, which (GNU OpenMP's default) keep spinning for milliseconds afterwards and
    take cores from the launch threads that follow it (:func:`launch_rows`)."""
    if _on_the_host(x):
        total = np.add.reduce(x.detach().numpy(), axis=None, dtype=np.float64)
        return torch.tensor(float(total), dtype=torch.float64)
    return x.sum(dtype=torch.float64)


#: torch runs an elementwise op of fewer elements than this on the calling thread (ATen's ``GRAIN_SIZE``):
#: no OpenMP workers left spinning, and no numpy detour needed.
_TORCH_GRAIN = 32768


def scale_rows(weights: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``weights[..., None] * rows`` (a backward's ``grad_output`` times the gradient its kernel wrote).

    On the CPU (:func:`_on_the_host`), where no graph of the backward is recorded (``create_graph``), numpy
    multiplies a large ``rows`` on the calling thread, as :func:`sum64` sums; torch multiplies the rest (a
    small product runs on the calling thread anyway, and torch's call costs less than numpy's detour)."""
    if rows.numel() >= _TORCH_GRAIN and not torch.is_grad_enabled() and _on_the_host(weights, rows):
        return torch.from_numpy(np.multiply(weights.detach().numpy()[..., None], rows.detach().numpy()))
    return weights.unsqueeze(-1) * rows
