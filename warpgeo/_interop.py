"""The one place that knows both torch and Warp, on Warp's public API only (DESIGN "Foundation").

Everything that crosses the torch <-> Warp boundary goes through here:

* lazy initialisation of Warp and of the kernel modules (:func:`kernels`; importing :mod:`warpgeo` does
  no work);
* torch device -> Warp device (``cuda:1`` stays ``cuda:1``) and torch's *current* CUDA stream;
* the dtype table (which floating dtypes an op accepts, in which precision it computes);
* the value-check switch (:func:`value_checks`, :func:`set_value_checks`, :func:`checking_values`);
* :func:`launch`, :func:`launch_rows` and :func:`launch_blocks` (the one splitter for launches too large
  for Warp), the launch helpers every op uses. They bind arguments by the kernel's own parameter names,
  wrap tensors zero-copy (``wp.from_torch``) as the array type each parameter declares, and replay Warp's
  recorded ``Launch`` objects (``wp.launch(..., record_cmd=True)``), setting only what changed;
* :func:`struct`: a ``@wp.struct`` (a world's arrays as one kernel argument) built from tensors.

Kernels (``warpgeo._kernels``) import Warp only; op modules import torch, this module and ``warpgeo._op``.
The optional accelerator :mod:`warpgeo._fast_launch` is the only code that relies on an undocumented detail
of Warp, gated and checked.

Adding an op: see CONTRIBUTING.md.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import importlib
import inspect
import itertools
import math
import os
import sys
import threading
import weakref
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from warpgeo import _fast_launch
from warpgeo._constants import INT32_LIMIT, MAX_LAUNCH_ROWS, MAX_POINTS

#: Floating dtypes accepted for points, spheres and features.
FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: Integer dtypes accepted for index inputs (outputs are always int64).
INDEX_DTYPES: tuple[torch.dtype, ...] = (torch.int32, torch.int64)


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


@functools.cache
def warp() -> Any:
    """Import and initialise Warp once, on first use, and return the ``warp`` module (see :func:`_init_warp`;
    the garbage collector is paused meanwhile, see :func:`_no_gc`)."""
    with _no_gc():
        return _init_warp()


#: ``wp.config.log_level`` as Warp sets it (``warp.LOG_INFO``): another value is the user's choice.
_WARP_DEFAULT_LOG_LEVEL = 20


def _init_warp() -> Any:
    """Import and initialise Warp.

    Warp's per-module "load" messages are silenced, and so is its "Could not find or load the NVIDIA CUDA
    driver" warning on a machine without the driver, unless the user chose a log level of their own (then
    it stands) or ``WARPGEO_VERBOSE=1`` is set.
    """
    user_imported = "warp" in sys.modules
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


@functools.cache
def kernels(name: str) -> Any:
    """The kernel module ``warpgeo._kernels.<name>``, imported (after Warp is initialised) on first use."""
    warp()
    with _no_gc():
        return importlib.import_module(f"warpgeo._kernels.{name}")


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
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
    return not (device.type == "cuda" and torch.cuda.is_current_stream_capturing())


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
    """Warp's handle to torch's current stream on ``device`` (``None`` on the CPU)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    stream = torch.cuda.current_stream(device)
    key = (stream.device_index, stream.cuda_stream)
    found = _WARP_STREAMS.get(key)
    if found is None:
        found = warp().stream_from_torch(stream)
        _WARP_STREAMS[key] = found
    return found


# --------------------------------------------------------------------------------------------------------
# dtypes and argument checks
# --------------------------------------------------------------------------------------------------------


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


def scale_rows(weights: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``weights[..., None] * rows`` (a backward's ``grad_output`` times the gradient its kernel wrote).

    On the CPU (:func:`_on_the_host`), where no graph of the backward is recorded (``create_graph``),
    numpy multiplies on the calling thread, as :func:`sum64` sums."""
    if not torch.is_grad_enabled() and _on_the_host(weights, rows):
        return torch.from_numpy(np.multiply(weights.detach().numpy()[..., None], rows.detach().numpy()))
    return weights[..., None] * rows


def check_float(t: Any, name: str) -> None:
    """Raise TypeError unless ``t`` is a tensor of one of :data:`FLOAT_DTYPES`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must have dtype {_dtype_names(FLOAT_DTYPES)}; got {t.dtype}")


def check_index(t: Any, name: str) -> None:
    """Raise TypeError unless ``t`` is an int32 or int64 tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must have dtype {_dtype_names(INDEX_DTYPES)}; got {t.dtype}")


def check_device(reference: str, **tensors: torch.Tensor | None) -> torch.device:
    """Raise ValueError unless every tensor lives on the device of ``tensors[reference]``, a device warpgeo
    runs on (cpu or cuda); return that device."""
    device = tensors[reference].device  # type: ignore[union-attr]
    if device.type not in ("cpu", "cuda"):
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
    if t.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape, strict=True)):
        expected = (
            "("
            + ", ".join("*" if s is None else str(s) for s in shape)
            + ("," if len(shape) == 1 else "")
            + ")"
        )
        raise ValueError(f"{name} must have shape {expected}; got {tuple(t.shape)}")


# --------------------------------------------------------------------------------------------------------
# launching: Warp's public API only (wp.launch(record_cmd=True) -> Launch, set_param_*, wp.from_torch)
# --------------------------------------------------------------------------------------------------------


@functools.cache
def _param_names(kernel: Any) -> tuple[str, ...]:
    """A kernel's parameter names, in order: its Python function's signature (an overload shares it)."""
    return tuple(inspect.signature(kernel.func).parameters)


def _candidates(t: torch.Tensor) -> list[Any]:
    """The Warp element types a tensor of this dtype and trailing shape can be viewed as, vector types
    first (they take the trailing dimension), the plain scalar last. Warp picks: it refuses (dtype, ndim)
    any other than the parameter's own."""
    wp = warp()
    scalar = wp.dtype_from_torch(t.dtype)
    found = []
    if t.dim() >= 1:
        n = t.shape[-1]
        if 2 <= n <= 4:
            found.append(wp.types.vector(n, scalar))
        if n == 4:
            found.append(wp.types.quaternion(scalar))
        if n == 7:
            found.append(wp.types.transformation(scalar))
    if t.dim() >= 2 and t.shape[-2:] in ((2, 2), (3, 3), (4, 4)):
        found.append(wp.types.matrix(tuple(t.shape[-2:]), scalar))
    found.append(scalar)
    return found


def _signature(t: torch.Tensor) -> tuple:
    """What decides a tensor's Warp element type: dtype, rank and trailing sizes."""
    return (t.dtype, t.dim(), tuple(t.shape[-2:]))


def check_fits(name: str, t: torch.Tensor) -> None:
    """ValueError unless one Warp launch can address ``t``: every dimension and every byte stride (of a
    dimension larger than 1: a size-1 dimension is only indexed at 0) below 2**31."""
    size = t.element_size()
    if t.numel() * size < INT32_LIMIT and t.is_contiguous():
        return
    for n, st in zip(t.shape, t.stride(), strict=True):
        if n >= INT32_LIMIT or (n > 1 and abs(st) * size >= INT32_LIMIT):
            raise ValueError(
                f"{name}: a tensor of shape {tuple(t.shape)} has a dimension or a row of >= 2**31 bytes, "
                "beyond what one Warp launch can address (int32 strides)"
            )


def _wrap(t: torch.Tensor, dtype: Any, *, ctype: bool) -> Any:
    """``t`` as a Warp array (or its descriptor) of element type ``dtype``, zero-copy, no gradient."""
    return warp().from_torch(t, dtype=dtype, requires_grad=False, return_ctype=ctype)


def _wrap_checked(t: torch.Tensor, accept: Any) -> tuple[Any, Any]:
    """``t`` as the Warp array ``accept(array)`` takes (``accept`` raises when Warp refuses the type):
    (the element type that fitted, the array)."""
    errors = []
    for dtype in _candidates(t):
        try:
            array = _wrap(t, dtype, ctype=False)
            accept(array)
            return dtype, array
        except (RuntimeError, TypeError, ValueError) as error:
            errors.append(str(error))
    raise TypeError("; ".join(errors))


class _Recorded:
    """A kernel's launch on one device, at one block size, from one thread: Warp's recorded ``Launch``.

    Each call sets only what changed: a tensor parameter when its data pointer, shape, strides or dtype
    changed, a scalar or struct when its value did. The first tensor of a given dtype/rank/trailing shape
    per parameter is set through Warp's checked path (a Warp array: Warp refuses a wrong element type or
    rank); later ones of that kind reuse its element type, as a descriptor from ``wp.from_torch`` — or, for a
    tensor that only moved (same shape, strides, dtype), the held descriptor re-pointed
    (:mod:`warpgeo._fast_launch`, where it is on).

    A record holds no tensor after its launch (an op's output is the caller's to free): the accelerator's
    descriptors hold raw pointers only, and on the public path (whose descriptors hold their tensors) every
    tensor parameter is reset after the launch and set again at the next. A struct is held by weak
    reference (an identical object is never set twice; a new one at a reused address is).
    """

    __slots__ = ("cmd", "cuda", "descs", "dims", "fast", "kernel", "keys", "last", "names", "ptrs", "types")

    def __init__(self, kernel: Any, dims: tuple[int, ...], device: torch.device, block_dim: int | None, args):
        wp = warp()
        self.kernel = kernel
        self.names = _param_names(kernel)
        _check_names(kernel, self.names, args)
        # arrays recorded as NULL and scalars as given: every tensor is then set through the checked path
        inputs = [None if isinstance(args[n], torch.Tensor) else args[n] for n in self.names]
        self.cmd = wp.launch(
            kernel, dims, inputs=inputs, device=warp_device(device), block_dim=block_dim, record_cmd=True
        )
        self.cuda = device.type == "cuda"
        self.fast = _fast_launch.enabled()
        self.dims = dims
        count = len(self.names)
        #: per parameter: the scalar / struct it holds, or for a tensor the (shape, strides, dtype) and
        #: data pointer of the one it holds, and the descriptor the launch holds for it
        self.last: list[Any] = [None] * count
        self.keys: list[Any] = [None] * count
        self.ptrs: list[int | None] = [None] * count
        self.descs: list[Any] = [None] * count
        #: per parameter: {tensor signature: Warp element type}
        self.types: list[dict] = [{} for _ in self.names]

    def run(self, dims: tuple[int, ...], args: dict[str, Any], device: torch.device) -> None:
        names = self.names
        if len(args) != len(names):
            _check_names(self.kernel, names, args)
        cmd = self.cmd
        keys, ptrs, descs = self.keys, self.ptrs, self.descs
        for i, name in enumerate(names):
            value = args[name]  # KeyError: a missing argument (checked above)
            if type(value) is torch.Tensor:
                ptr = value.data_ptr()
                key = (value.shape, value.stride(), value.dtype)
                if key == keys[i]:
                    if ptr == ptrs[i]:
                        continue
                    desc = descs[i]
                    _fast_launch.repoint(desc, ptr)  # keys are kept between calls only where it is on
                    cmd.set_param_at_index_from_ctype(i, desc)
                    ptrs[i] = ptr
                    continue
                self._set_tensor(i, name, value)
                keys[i] = key
                ptrs[i] = ptr
            elif isinstance(value, torch.Tensor):  # a subclass (fake, functional): never launched
                raise TypeError(f"internal error: {self.kernel.key}({name}=...) got a {type(value).__name__}")
            elif type(value) in _SCALARS:
                if type(value) is not type(self.last[i]) or value != self.last[i]:
                    cmd.set_param_at_index(i, value)
                    self.last[i] = value
            else:  # a struct (or a Warp vector): by weak reference where it can be
                held = self.last[i]
                if not (isinstance(held, weakref.ref) and held() is value):
                    cmd.set_param_at_index(i, value)
                    try:
                        self.last[i] = weakref.ref(value)
                    except TypeError:
                        self.last[i] = None
        if dims != self.dims:
            cmd.set_dim(dims)  # Warp validates the grid
            self.dims = dims
        cmd.launch(warp_stream(device) if self.cuda else None)
        if not self.fast:
            for i in range(len(names)):  # the public path's descriptors hold their tensors: let them go
                if keys[i] is not None:
                    cmd.set_param_at_index(i, None)
                    keys[i] = ptrs[i] = descs[i] = None

    def _set_tensor(self, i: int, name: str, value: torch.Tensor) -> None:
        """A tensor of a new shape, strides or dtype for parameter ``i``: sizes checked, element type found
        (Warp checks it the first time), a fresh descriptor set."""
        check_fits(name, value)
        sig = _signature(value)
        dtype = self.types[i].get(sig)
        if dtype is None:
            try:
                dtype, _ = _wrap_checked(value, lambda a: self.cmd.set_param_at_index(i, a))
            except TypeError as error:
                raise TypeError(
                    f"internal error: {self.kernel.key}({name}=...): a tensor of shape {tuple(value.shape)} "
                    f"and dtype {value.dtype} fits no parameter type ({error})"
                ) from None
            self.types[i][sig] = dtype
        desc = _wrap(value, dtype, ctype=True)
        if self.fast:
            _fast_launch.release(desc)
        self.descs[i] = desc
        self.cmd.set_param_at_index_from_ctype(i, desc)


#: Plain scalar argument types, compared by value (equal value and type: not set again).
_SCALARS = (int, float, bool)


def _check_names(kernel: Any, names: Sequence[str], args: dict[str, Any]) -> None:
    if set(args) != set(names):
        missing = [n for n in names if n not in args]
        unexpected = [n for n in args if n not in names]
        raise TypeError(
            f"internal error: launch of {kernel.key}: missing arguments {missing}, unexpected {unexpected}"
        )


#: Per calling thread (``threading.local``): one :class:`_Recorded` per kernel, device and block size.
_THREAD = threading.local()


def _run(kernel: Any, dims: tuple[int, ...], device: torch.device, block_dim: int | None, args: dict) -> None:
    """Every launch of :func:`launch` and :func:`launch_rows` ends here (one place for tests to watch)."""
    try:
        recorded = _THREAD.recorded
    except AttributeError:
        recorded = _THREAD.recorded = {}
    key = (kernel, device, block_dim)
    slot = recorded.get(key)
    if slot is None:
        slot = recorded[key] = _Recorded(kernel, dims, device, block_dim, args)
    slot.run(dims, args, device)


def launch(
    kernel: Any,
    dim: int | Sequence[int],
    *,
    device: torch.device,
    block_dim: int | None = None,
    tiled: bool = False,
    **args: Any,
) -> None:
    """Launch ``kernel`` on ``device`` (and torch's current stream there), arguments bound by name.

    Every parameter of the kernel must be given by its own name, no other: a tensor for an array parameter
    (its dtype and rank must match, a vector type takes the trailing dimension: a ``(B, N, 3)`` float32
    tensor for ``wp.array2d(dtype=wp.vec3f)``), a Python number for a scalar one, a struct instance
    (:func:`struct`) for a struct. Tensors are passed zero-copy with their strides. A missing, unexpected or
    mistyped argument raises TypeError; a tensor whose dimension or byte stride reaches 2**31 raises
    ValueError naming the argument. A launch with an empty grid is skipped.

    ``tiled=True`` appends a trailing block dimension of ``block_dim`` threads (as ``wp.launch_tiled``); on
    the CPU Warp runs such a block as one thread unless ``wp.config.enable_cpu_blocks`` is set, so tiled
    kernels must be correct for any block size.
    """
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if 0 in dims:
        return
    if tiled:
        dims = (*dims, block_dim)
    _run(kernel, dims, device, block_dim, args)


#: Below this much work (in the units of ``work_per_row``) a CPU launch is not split among threads: handing a
#: launch to another thread costs ~0.1 ms.
_MIN_SPLIT_WORK = 1 << 18
#: Ranges of rows per worker of a split CPU launch (taken one at a time, so that uneven rows balance out).
_RANGES_PER_WORKER = 4
#: The parameter through which :func:`launch_rows` tells a kernel the first row of its launch.
ROW_START = "row_start"


@functools.cache
def _cpu_pool(pid: int) -> ThreadPoolExecutor:
    # Keyed by process id: a forked child (a DataLoader worker, say) inherits the pool object but not its
    # threads, and would wait on it forever.
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="warpgeo")


def launch_rows(
    kernel: Any,
    rows: int,
    *,
    device: torch.device,
    work_per_row: int = 1,
    **args: Any,
) -> None:
    """Launch ``kernel`` over ``rows`` independent rows; thread ``t`` handles row ``row_start + t``.

    The kernel has a ``row_start`` parameter (filled here; not to be given). On CUDA this is one launch of
    ``rows`` threads from row 0. Warp runs a CPU launch on the calling thread, so on the CPU the rows are
    split into up to ``torch.get_num_threads()`` ranges launched side by side from a thread pool (a launch
    releases the GIL), and the op uses the cores a torch op would. Small launches (``rows * work_per_row``
    below ``_MIN_SPLIT_WORK``) stay on the calling thread. Not for tile kernels: Warp's CPU tile storage is
    not safe for concurrent launches (they crash). ``rows`` must stay below 2**31 (one int32 thread index
    per row); callers split larger work (:func:`launch_blocks`).
    """
    if rows >= INT32_LIMIT:
        raise ValueError(f"internal error: {rows} rows in one launch of {kernel.key} (limit 2**31 - 1)")
    if ROW_START in args:
        raise TypeError(f"internal error: launch_rows of {kernel.key} fills {ROW_START} itself")
    if rows <= 0:
        return
    work = rows * work_per_row
    workers = 1
    if work >= _MIN_SPLIT_WORK and not cuda_algorithms(device):
        workers = min(torch.get_num_threads(), rows, work // _MIN_SPLIT_WORK)
    if workers <= 1:
        args[ROW_START] = 0
        _run(kernel, (rows,), device, None, args)
        return
    # load (compile) the module on this thread first, so that the side-by-side launches never race to build it
    _load(kernel, device)
    # more ranges than workers, handed out one at a time: rows of unequal cost (spheres near or far from
    # the meshes) even out across the workers
    parts = min(rows, work // _MIN_SPLIT_WORK, workers * _RANGES_PER_WORKER)
    bounds = [rows * p // parts for p in range(parts + 1)]
    ranges = iter(itertools.pairwise(bounds))
    lock = threading.Lock()

    def work_through() -> None:
        while True:
            with lock:
                span = next(ranges, None)
            if span is None:
                return
            launch(kernel, span[1] - span[0], device=device, row_start=span[0], **args)

    pool = _cpu_pool(os.getpid())
    jobs = [pool.submit(work_through) for _ in range(workers)]
    for job in jobs:
        job.result()


def _load(kernel: Any, device: torch.device, block_dim: int | None = None) -> None:
    """Load (compile on first use) ``kernel``'s Warp module for ``device`` as its launches run it."""
    wdev = warp_device(device)
    if block_dim is None and wdev.is_cpu:
        block_dim = 1
    kernel.module.load(wdev, block_dim)


#: An empty mapping of tensors (no per-batch tensors).
_NO_TENSORS: dict[str, torch.Tensor] = {}


def launch_blocks(
    kernel: Any,
    grid: Sequence[int],
    *,
    device: torch.device,
    sliced: dict[str, torch.Tensor],
    per_batch: dict[str, torch.Tensor] | None = None,
    rows_per_thread: int = 1,
    work_per_row: int = 1,
    what: str = "input",
    grid_launch: bool = False,
    **whole: Any,
) -> None:
    """The one splitter: launch a kernel over ``grid = (B, ..., L)`` in as few launches as Warp can take.

    The ``sliced`` tensors have ``grid`` as their leading dimensions, the ``per_batch`` ones B (or are empty,
    "default": passed as they are), ``whole`` is passed unchanged. A row kernel (``grid_launch=False``) runs
    through :func:`launch_rows` over the flattened grid, ``ceil(rows / rows_per_thread)`` threads; with
    ``grid_launch=True`` the kernel is launched over the grid itself (:func:`launch`). Kernels derive a
    row's indices from the sliced arrays' shapes, so a block is just views of them.

    One launch when it fits: at most ``MAX_LAUNCH_ROWS`` rows and every sliced / per-batch tensor dense and
    below 2 GiB (the usual case, decided without looking further), or every dimension and byte stride below
    2**31. Otherwise blocks: ranges of B, else one B entry at a time (its size-1 dimension's stride is never
    used) in chunks of L. A middle dimension whose stride reaches 2**31 bytes cannot be split so: ValueError
    naming ``what``.
    """
    per_batch = per_batch or _NO_TENSORS
    rows = math.prod(grid)
    if rows == 0:
        return
    if rows <= MAX_LAUNCH_ROWS and dense_below(sliced.values()) and dense_below(per_batch.values()):
        # the usual case: one launch, nothing to analyse
        if grid_launch:
            launch(kernel, tuple(grid), device=device, **sliced, **per_batch, **whole)
        else:
            launch_rows(
                kernel,
                -(-rows // rows_per_thread),
                device=device,
                work_per_row=work_per_row * rows_per_thread,
                **sliced,
                **per_batch,
                **whole,
            )
        return
    grid = tuple(int(g) for g in grid)

    def run(count_grid: tuple[int, ...], blocked: dict, batch: dict) -> None:
        if grid_launch:
            launch(kernel, count_grid, device=device, **blocked, **batch, **whole)
        else:
            count = math.prod(count_grid)
            launch_rows(
                kernel,
                -(-count // rows_per_thread),
                device=device,
                work_per_row=work_per_row * rows_per_thread,
                **blocked,
                **batch,
                **whole,
            )

    tensors = [*sliced.values(), *per_batch.values()]

    def too_big(dim: int, among: Iterable[torch.Tensor]) -> bool:
        return any(
            t.numel() > 0
            and t.dim() > dim
            and t.shape[dim] > 1
            and (t.shape[dim] >= INT32_LIMIT or abs(t.stride(dim)) * t.element_size() >= INT32_LIMIT)
            for t in among
        )

    def fits(among: Iterable[torch.Tensor]) -> bool:
        among = list(among)
        return not any(too_big(d, among) for d in range(max((t.dim() for t in among), default=0)))

    if rows <= MAX_LAUNCH_ROWS and fits(tensors):
        run(grid, sliced, per_batch)
        return
    last = len(grid) - 1
    for d in range(1, last):
        if too_big(d, sliced.values()):
            raise ValueError(
                f"{what} of shape {grid} + (...): one entry of dimension {d} spans >= 2**31 bytes, beyond "
                "what a Warp launch addresses (int32 byte strides); split it into smaller calls"
            )

    def block(b: slice, tail: slice) -> tuple[dict, dict]:
        index = (b, *[slice(None)] * (last - 1), tail) if last > 0 else (b,)
        blocked = {k: t[index] if t.numel() > 0 else t for k, t in sliced.items()}
        batch = {k: t[b] if t.numel() > 0 else t for k, t in per_batch.items()}
        return blocked, batch

    batch_size, length = grid[0], grid[last]
    per_b = rows // batch_size
    if (
        last > 0
        and not too_big(last, sliced.values())
        and not too_big(0, tensors)
        and per_b <= MAX_LAUNCH_ROWS
    ):
        step = MAX_LAUNCH_ROWS // per_b
        for b0 in range(0, batch_size, step):
            b1 = min(b0 + step, batch_size)
            run((b1 - b0, *grid[1:]), *block(slice(b0, b1), slice(None)))
        return
    if last == 0:
        step = MAX_LAUNCH_ROWS
        for b0 in range(0, batch_size, step):
            b1 = min(b0 + step, batch_size)
            blocked = {k: t[b0:b1] if t.numel() > 0 else t for k, t in sliced.items()}
            batch = {k: t[b0:b1] if t.numel() > 0 else t for k, t in per_batch.items()}
            if not fits([*blocked.values(), *batch.values()]):
                raise ValueError(f"{what} of shape {grid}: a row spans >= 2**31 bytes (int32 byte strides)")
            run((b1 - b0,), blocked, batch)
        return
    inner = per_b // length if length else 0
    # chunks of L; one L entry at a time where a step along L itself is 2 GiB (rows of features)
    step = 1 if too_big(last, sliced.values()) else max(1, MAX_LAUNCH_ROWS // max(inner, 1))
    for b in range(batch_size):
        for l0 in range(0, length, step):
            l1 = min(l0 + step, length)
            blocked, batch = block(slice(b, b + 1), slice(l0, l1))
            if not fits(blocked.values()):
                raise ValueError(
                    f"{what} of shape {grid}: one entry spans >= 2**31 bytes (int32 byte strides)"
                )
            run((1, *grid[1:last], l1 - l0), blocked, batch)


# --------------------------------------------------------------------------------------------------------
# Warp structs built from tensors (a world's arrays as one kernel argument)
# --------------------------------------------------------------------------------------------------------

#: Struct instances by (type, every field's data pointer, shape, strides, dtype, device / value). An
#: instance's arrays hold raw pointers, not the tensors (``_unowned``): its content is a function of its key
#: alone, so a cached instance is right for any tensors with that key, and the cache pins no memory.
_STRUCTS: collections.OrderedDict = collections.OrderedDict()
#: Entries kept (oldest first out).
_MAX_STRUCTS = 64
_STRUCTS_LOCK = threading.Lock()


def struct(struct_type: Any, **fields: Any) -> Any:
    """An instance of the ``@wp.struct`` ``struct_type`` with ``fields`` set: tensors wrapped zero-copy as
    the array type the field declares (Warp refuses a wrong element type or rank: TypeError), other values
    as they are. Every field must be given.

    Cached: the same tensors (data pointers, shapes, strides, dtypes) and values give back the same
    instance, built once (building one wraps every tensor: ~10 µs a field). The instance does not keep its
    tensors alive: the caller passes it to a launch together with the tensors it was built from (the
    op's inputs), which are alive for the launch."""
    key_parts: list[Any] = [struct_type]
    for name, value in fields.items():
        if isinstance(value, torch.Tensor):
            key_parts.append((name, value.data_ptr(), value.shape, value.stride(), value.dtype, value.device))
        else:
            key_parts.append((name, type(value), value))
    key = tuple(key_parts)
    with _STRUCTS_LOCK:
        found = _STRUCTS.get(key)
        if found is not None:
            _STRUCTS.move_to_end(key)
            return found
    instance = struct_type()
    for name, value in fields.items():
        if isinstance(value, torch.Tensor):
            check_fits(name, value)
            try:
                dtype, _ = _wrap_checked(value, lambda a, name=name: setattr(instance, name, a))
            except TypeError as error:
                raise TypeError(
                    f"internal error: {struct_type.__name__}.{name}: a tensor of shape {tuple(value.shape)} and "
                    f"dtype {value.dtype} fits no field type ({error})"
                ) from None
            setattr(instance, name, _unowned(value, dtype))
        else:
            setattr(instance, name, value)
    with _STRUCTS_LOCK:
        _STRUCTS[key] = instance
        while len(_STRUCTS) > _MAX_STRUCTS:
            _STRUCTS.popitem(last=False)
    return instance


def _unowned(t: torch.Tensor, dtype: Any) -> Any:
    """A Warp array over ``t``'s memory (element type ``dtype``, already checked) that does not own or
    reference ``t`` (``wp.array(ptr=...)``)."""
    wp = warp()
    item = t.element_size()
    inner = len(getattr(dtype, "_shape_", ()))
    shape = tuple(t.shape[: t.dim() - inner]) or (1,)
    strides = tuple(st * item for st in t.stride()[: t.dim() - inner]) or (item,)
    return wp.array(
        ptr=t.data_ptr(), dtype=dtype, shape=shape, strides=strides, device=warp_device(t.device), copy=False
    )


__all__ = [
    "FLOAT_DTYPES",
    "INDEX_DTYPES",
    "INT32_LIMIT",
    "MAX_LAUNCH_ROWS",
    "MAX_POINTS",
    "check_device",
    "check_fits",
    "check_float",
    "check_index",
    "check_int",
    "check_shape",
    "checking_values",
    "compute_dtype",
    "cuda_algorithms",
    "dense_below",
    "kernels",
    "launch",
    "launch_blocks",
    "launch_rows",
    "set_value_checks",
    "struct",
    "to_compute",
    "value_checks",
    "warp",
    "warp_device",
    "warp_stream",
]
