"""The one place that knows both torch and Warp.

Everything that crosses the torch <-> Warp boundary goes through here:

* lazy initialisation of Warp and of the kernel modules (:func:`kernels`; importing :mod:`warpgeo` does
  no work);
* torch device -> Warp device (``cuda:1`` stays ``cuda:1``) and torch's *current* CUDA stream;
* the dtype table (which floating dtypes an op accepts, in which precision it computes, and the kernel
  overload for a dtype: :func:`overload`);
* the value-check switch (:func:`value_checks`, :func:`set_value_checks`, :func:`checking_values`);
* :func:`launch` and :func:`launch_rows`, the launch helpers every op uses. They bind arguments by the
  kernel's own parameter names and wrap tensors zero-copy as the array type each parameter declares.

Kernels (``warpgeo._kernels``) import Warp only; op modules import torch and this module.

Adding an op: see CONTRIBUTING.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import importlib
import itertools
import os
import struct
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from warpgeo import _aot, _compile

#: Floating dtypes accepted for points, spheres and features.
FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: Integer dtypes accepted for index inputs (outputs are always int64).
INDEX_DTYPES: tuple[torch.dtype, ...] = (torch.int32, torch.int64)
#: Warp arrays hold int32 shapes and int32 *byte* strides: no dimension and no stride may reach this.
INT32_LIMIT = 2**31
#: Points (of one cloud / feature row) the kernels can index: point indices are int32.
MAX_POINTS = INT32_LIMIT - 1


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


@functools.cache
def warp() -> Any:
    """Import and initialise Warp once, on first use, and return the ``warp`` module (see :func:`_init_warp`;
    the garbage collector is paused meanwhile, see :func:`_no_gc`)."""
    with _no_gc():
        wp = _init_warp()
    _compile.install()  # a process's first module compiles without waiting for Warp's header
    return wp


def _init_warp() -> Any:
    """Import and initialise Warp.

    Warp's per-module "load" messages are silenced, and so is its "Could not find or load the NVIDIA CUDA
    driver" warning on a machine without the driver, unless the user initialised Warp before us (then
    their settings stand) or ``WARPGEO_VERBOSE=1`` is set.
    """
    import warp as wp
    from warp._src import context

    if context.runtime is not None or os.environ.get("WARPGEO_VERBOSE", "0") not in ("", "0"):
        wp.init()
        return wp
    wp.config.log_level = wp.LOG_WARNING

    import ctypes
    import sys
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


def overload(table: dict[str, Any], dtype: torch.dtype) -> Any:
    """The kernel overload of ``table`` for a tensor of ``dtype``.

    Kernel modules (which know no torch) key their overload tables by dtype name: ``"float32"``,
    ``"float64"``, ``"int16"``, ... This is the one place that maps a torch dtype to that key.
    """
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return table[name]


#: torch dtype -> the name kernel modules key their overload tables by (``str(dtype)`` costs a call)
_DTYPE_NAMES: dict[torch.dtype, str] = {}


def to_compute(t: torch.Tensor) -> torch.Tensor:
    """``t`` in its kernel precision (:func:`compute_dtype`) with a dense last dimension (what a Warp vector
    array of its rows needs); other strides are kept. No copy when it already is both."""
    compute = compute_dtype(t.dtype)
    if t.dtype != compute:
        t = t.to(compute)
    if t.dim() > 0 and t.stride(-1) != 1 and t.shape[-1] > 1:
        t = t.contiguous()
    return t


def dense_below(tensors: Iterable[torch.Tensor], limit: int = INT32_LIMIT) -> bool:
    """True when every tensor is contiguous and smaller than ``limit`` bytes: then none has a dimension or a
    byte stride reaching ``limit`` (one Warp launch can take them all as they are) — a cheap test that spares
    the usual call the analysis of how to split a launch."""
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


def grads(names: Sequence[str], **given: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """A backward's return value: the gradient of each input in ``names`` order, ``None`` where not given."""
    return tuple(given.get(name) for name in names)


def call(op: Any, function: Any, impl: Any, names: Sequence[str], needs_grad: bool, **args: Any) -> Any:
    """Run a warpgeo op on ``args`` (given by name; ``names`` is the op's input order) the cheapest way.

    Under ``torch.compile`` (and ``torch.export``) this is the registered custom ``op``: one opaque node with
    its fake and autograd registrations. In eager mode the custom-op dispatcher costs more than a small
    launch, so the op's implementation ``impl`` runs directly: through ``function`` (the op's autograd
    Function, whose forward runs ``impl`` and then the op's registered setup_context, and whose backward is
    the op's registered backward) when a gradient may be needed, or bare when not (``needs_grad`` False).
    The Functions are old-style (``forward(ctx, *inputs)``): a new-style one binds its arguments through
    ``inspect`` on every call, which costs more than a small launch.
    """
    ordered = tuple(args[name] for name in names)
    if not _plain_eager(ordered):
        return op(*ordered)
    if needs_grad:
        return function.apply(*ordered)
    return impl(*ordered)


def pick(op: Any, impl: Any, *tensors: Any) -> Any:
    """For a backward that calls another op: the registered ``op`` when a graph of the backward is being
    built (double backward, ``torch.compile``), else its bare implementation ``impl`` (the eager fast path)."""
    if torch.is_grad_enabled() or not _plain_eager(tensors):
        return op
    return impl


def _plain_eager(values: Sequence[Any]) -> bool:
    """True unless something traces these values: torch.compile / export, or tensor subclasses (fake or
    functional tensors under AOT autograd, ...), which must see the registered custom op."""
    if torch.compiler.is_compiling():
        return False
    return all(type(v) is torch.Tensor for v in values if isinstance(v, torch.Tensor))


# --------------------------------------------------------------------------------------------------------
# launching: arguments bound by name, tensors wrapped zero-copy
# --------------------------------------------------------------------------------------------------------

_TORCH_SCALAR = {
    "float16": torch.float16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint64": torch.int64,  # mesh ids travel as int64 tensors
}


class _Param:
    """How one kernel parameter is filled from a Python value (written in place into a launch's arguments)."""

    __slots__ = (
        "array_ndim",
        "dtype",
        "fmt",
        "index",
        "is_array",
        "itemsize",
        "name",
        "rank",
        "type",
        "vec",
    )

    def __init__(self, index: int, arg: Any) -> None:
        wp = warp()
        self.index = index
        self.name = arg.label
        self.type = arg.type
        self.is_array = wp.types.is_array(arg.type)
        self.vec = 0
        self.dtype = None
        self.itemsize = 0
        self.array_ndim = 0
        #: the ``struct`` format of a plain scalar parameter (None: an array or a composite such as a vec3)
        self.fmt: struct.Struct | None = None
        if not self.is_array and wp.types.type_is_scalar(arg.type) and hasattr(arg.type, "_type_"):
            fmt = _SCALAR_FORMATS.get(arg.type._type_)
            self.fmt = struct.Struct(fmt) if fmt is not None else None
        if self.is_array:
            element = arg.type.dtype
            self.array_ndim = arg.type.ndim
            if wp.types.type_is_vector(element) or wp.types.type_is_transformation(element):
                self.vec = element._length_
                scalar = element._wp_scalar_type_
            else:
                scalar = element
            self.dtype = _TORCH_SCALAR[scalar.__name__]
            self.itemsize = self.dtype.itemsize
        #: the tensor rank the parameter takes (a vector type adds the trailing dimension)
        self.rank = self.array_ndim + (1 if self.vec else 0)

    def write(self, kernel: Any, value: Any, device: torch.device, buffer: Any, offset: int) -> None:
        """Write ``value`` (a tensor for an array parameter, a number for a scalar one) into ``buffer`` at
        byte ``offset``, checked against what the kernel declares."""
        if not self.is_array:
            if isinstance(value, torch.Tensor):
                raise TypeError(f"internal error: {kernel.key}({self.name}=...) takes a scalar, got a tensor")
            if self.fmt is not None:
                self.fmt.pack_into(buffer, offset, value)
            else:  # a composite (vector) scalar: Warp's own conversion
                from warp._src.context import pack_arg

                packed = pack_arg(kernel, self.type, self.name, value, warp_device(device), False)
                memoryview(buffer).cast("B")[offset : offset + ctypes.sizeof(packed)] = bytes(packed)
            return
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"internal error: {kernel.key}({self.name}=...) takes a tensor, got {type(value).__name__}"
            )
        self.write_array(
            kernel,
            value.data_ptr(),
            value.shape,
            value.stride(),
            value.dtype,
            value.device,
            device,
            buffer,
            offset,
        )

    def write_array(
        self, kernel: Any, ptr: int, shape, strides, dtype, on: torch.device, device, buffer: Any, offset: int
    ) -> None:
        """Write the descriptor of a tensor (its data pointer, shape, strides, dtype and device ``on``)."""
        ndim = self.array_ndim
        if (
            dtype != self.dtype
            or on != device
            or len(shape) != self.rank
            or (self.vec and (shape[-1] != self.vec or (strides[-1] != 1 and shape[-1] > 1)))
        ):
            self._refuse(kernel, shape, strides, dtype, on, device)
        size = self.itemsize
        # a dimension of size 1 is only ever indexed at 0: its stride is never used (so a one-row slice of a
        # tensor with >= 2 GiB rows, how callers split such tensors into launches, is accepted)
        dims = shape[:ndim]
        steps = [st * size if n > 1 else 0 for n, st in zip(dims, strides, strict=False)]
        if ndim and (max(dims) >= INT32_LIMIT or max(steps) >= INT32_LIMIT):
            raise ValueError(
                f"{self.name}: a tensor of shape {tuple(shape)} has a dimension or a row of >= 2**31 "
                "bytes, beyond what one Warp launch can address (int32 strides)"
            )
        pad = _PAD[ndim]
        _ARRAY_LAYOUT.pack_into(buffer, offset, ptr, 0, *dims, *pad, *steps, *pad, ndim, 0)

    def _refuse(self, kernel: Any, shape, strides, dtype, on: torch.device, device: torch.device) -> None:
        if dtype != self.dtype:
            raise TypeError(f"internal error: {kernel.key}({self.name}=...) takes {self.dtype}, got {dtype}")
        if on != device:
            raise ValueError(f"internal error: {kernel.key}({self.name}=...) is on {on}, not {device}")
        expected = (
            f"({self.array_ndim} dims, {self.vec}) with a dense last dimension"
            if self.vec
            else f"{self.array_ndim} dims"
        )
        raise ValueError(
            f"internal error: {kernel.key}({self.name}=...) takes {expected}; got shape {tuple(shape)}, "
            f"strides {strides}"
        )


#: The byte layout of Warp's array descriptor ``warp._src.types.array_t`` (checked against it at first use):
#: data, grad, shape[4], strides[4], ndim, flags, padding.
_ARRAY_LAYOUT = struct.Struct("<QQ4i4iHH4x")
#: The descriptor's first field, the data pointer (all :meth:`_Slot.run` rewrites when only it changed).
_POINTER = struct.Struct("<Q")
#: Zeros filling the four shape / stride slots of a descriptor past an array's dimensions.
_PAD = tuple((0,) * (4 - n) for n in range(5))
#: ``struct`` formats of the plain scalar ctypes Warp packs kernel scalars as.
_SCALAR_FORMATS = {
    ctypes.c_int8: "<b",
    ctypes.c_uint8: "<B",
    ctypes.c_int16: "<h",
    ctypes.c_uint16: "<H",
    ctypes.c_int32: "<i",
    ctypes.c_uint32: "<I",
    ctypes.c_int64: "<q",
    ctypes.c_uint64: "<Q",
    ctypes.c_float: "<f",
    ctypes.c_double: "<d",
}


@functools.cache
def _params(kernel: Any) -> dict[str, _Param]:
    warp()
    from warp._src.types import array_t  # the descriptor Warp itself packs a wp.array into

    if ctypes.sizeof(array_t) != _ARRAY_LAYOUT.size or array_t.ndim.offset != 48:
        raise RuntimeError("this Warp version's array descriptor layout is not the one warpgeo packs")
    if kernel.is_generic:
        raise TypeError(f"internal error: launch an overload of the generic kernel {kernel.key}")
    return {arg.label: _Param(i, arg) for i, arg in enumerate(kernel.adj.args)}


class _Slot:
    """A kernel's launch on one device, at one block size, from one thread: Warp's recorded launch
    (``wp.Launch``) whose argument memory every call rewrites in place.

    On the CPU (one thread per block) the kernel's compiled entry point is called directly with one
    arguments struct laid out as Warp lays it out (``warp._src.context.invoke`` builds the same struct anew
    on every launch); on CUDA the recorded launch's own argument objects are rewritten and it is replayed
    on torch's current stream.
    """

    __slots__ = ("args", "args_ref", "cmd", "dims", "entry", "keys", "params", "ptrs", "targets")

    def __init__(self, kernel: Any, device: torch.device, block_dim: int | None) -> None:
        wdev = warp_device(device)
        self.params = _params(kernel)
        with _compile.loading():
            _aot.preload(kernel.module, wdev, block_dim)  # the object compiled at install, where it fits
            self.cmd = warp().Launch(kernel, wdev, block_dim=block_dim)  # loads (compiles) the module
        self.dims: tuple[int, ...] | None = None
        packed = self.cmd.params[1:]  # Warp's default argument objects, after the launch bounds
        self.entry = None
        if (
            _DIRECT_CPU_ENTRY
            and wdev.is_cpu
            and self.cmd.block_dim == 1
            and self.cmd.hooks.forward is not None
        ):
            fields = [(p.name, type(packed[p.index])) for p in self.params.values()]
            self.args = type(f"{kernel.key}_args", (ctypes.Structure,), {"_fields_": fields})()
            self.args_ref = ctypes.byref(self.args)
            self.entry = self.cmd.hooks.forward
            layout = type(self.args)
            self.targets = [(p, self.args, getattr(layout, p.name).offset) for p in self.params.values()]
        else:
            self.args = None
            self.args_ref = None
            self.targets = [(p, packed[p.index], 0) for p in self.params.values()]
        #: per target: the data pointer of the tensor it holds, and the rest of what its descriptor depends on
        #: (shape, strides, dtype, device) — or the scalar it holds, with None as the pointer (see :meth:`run`)
        self.ptrs: list[int | None] = [None] * len(self.targets)
        self.keys: list[Any] = [None] * len(self.targets)

    def run(self, kernel: Any, dims: tuple[int, ...], args: dict[str, Any], device: torch.device) -> None:
        params = self.params
        if args.keys() != params.keys():
            missing = [n for n in params if n not in args]
            unexpected = [n for n in args if n not in params]
            raise TypeError(
                f"internal error: launch of {kernel.key}: missing arguments {missing}, unexpected {unexpected}"
            )
        keys = self.keys
        ptrs = self.ptrs
        for i, (param, buffer, offset) in enumerate(self.targets):
            value = args[param.name]
            if param.is_array and type(value) is torch.Tensor:
                # What the descriptor depends on. Mostly nothing changed (a world's tensors come back call after
                # call) or only the pointer (a fresh output of the same shape): then it is all that is written.
                ptr = value.data_ptr()
                key = (value.shape, value.stride(), value.dtype, value.device)
                if key != keys[i]:
                    param.write_array(kernel, ptr, *key, device, buffer, offset)  # checks the key
                    keys[i] = key
                    ptrs[i] = ptr
                elif ptr != ptrs[i]:
                    _POINTER.pack_into(buffer, offset, ptr)
                    ptrs[i] = ptr
            elif param.fmt is not None and type(value) in (int, float):
                if value == keys[i] and type(value) is type(keys[i]):
                    continue
                param.write(kernel, value, device, buffer, offset)
                keys[i] = value
                ptrs[i] = None
            else:
                param.write(kernel, value, device, buffer, offset)
                keys[i] = None
                ptrs[i] = None
        cmd = self.cmd
        if dims != self.dims:
            cmd.set_dim(dims)  # Warp validates the grid
            self.dims = dims
        if self.entry is not None:
            self.entry(ctypes.byref(cmd.bounds), self.args_ref)
        else:
            cmd.launch(warp_stream(device))


#: CPU launches call the kernel's compiled entry point with warpgeo's own argument struct; off, they replay
#: the recorded ``wp.Launch`` whose argument objects are rewritten in place, as every CUDA launch does (the
#: tests run that path on the CPU this way).
_DIRECT_CPU_ENTRY = True

#: Per calling thread (``threading.local``): one :class:`_Slot` per kernel, device and block size.
_THREAD = threading.local()


def _slot(kernel: Any, device: torch.device, block_dim: int | None) -> _Slot:
    try:
        slots = _THREAD.slots
    except AttributeError:
        slots = _THREAD.slots = {}
    key = (kernel, device, block_dim)
    slot = slots.get(key)
    if slot is None:
        slot = slots[key] = _Slot(kernel, device, block_dim)
    return slot


def _run(kernel: Any, dims: tuple[int, ...], device: torch.device, block_dim: int | None, args: dict) -> None:
    """Every launch of :func:`launch` and :func:`launch_rows` ends here (one place for tests to watch)."""
    _slot(kernel, device, block_dim).run(kernel, dims, args, device)


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
    tensor for ``wp.array2d(dtype=wp.vec3)``), a Python number for a scalar one. Tensors are passed
    zero-copy with their strides. A missing, unexpected or mistyped argument raises TypeError; a tensor
    whose dimension or byte stride reaches 2**31 raises ValueError naming the argument. A launch with an
    empty grid is skipped.

    ``tiled=True`` appends a trailing block dimension of ``block_dim`` threads (as ``wp.launch_tiled``); on
    the CPU Warp runs such a block as one thread, so tiled kernels must be correct for any block size.
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
    per row); callers split larger work.
    """
    if rows >= INT32_LIMIT:
        raise ValueError(f"internal error: {rows} rows in one launch of {kernel.key} (limit 2**31 - 1)")
    if ROW_START in args:
        raise TypeError(f"internal error: launch_rows of {kernel.key} fills {ROW_START} itself")
    if rows <= 0:
        return
    work = rows * work_per_row
    workers = 1
    if work >= _MIN_SPLIT_WORK and device.type == "cpu":
        workers = min(torch.get_num_threads(), rows, work // _MIN_SPLIT_WORK)
    if workers <= 1:
        args[ROW_START] = 0
        _run(kernel, (rows,), device, None, args)
        return
    # load (compile) the module here, once, so that the side-by-side launches never race to build it: through
    # the calling thread's own launch slot, which loads it as every CPU launch does (block_dim 1; a bare
    # ``module.load`` would build the module's default 256-thread variant, which no CPU launch runs)
    _slot(kernel, device, None)
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


__all__ = [
    "FLOAT_DTYPES",
    "INDEX_DTYPES",
    "check_device",
    "check_float",
    "check_index",
    "check_int",
    "check_shape",
    "checking_values",
    "compute_dtype",
    "dense_below",
    "grads",
    "kernels",
    "launch",
    "launch_rows",
    "overload",
    "set_value_checks",
    "to_compute",
    "value_checks",
    "warp",
    "warp_device",
    "warp_stream",
]
