"""The one place that knows both torch and Warp.

Everything that crosses the torch <-> Warp boundary goes through here:

* lazy initialisation of Warp (importing :mod:`warpgeo` does no work);
* torch device -> Warp device (``cuda:1`` stays ``cuda:1``) and torch's *current* CUDA stream;
* the dtype table (which floating dtypes an op accepts and in which precision it computes);
* zero-copy wrapping of tensors as Warp arrays, with ``(..., 3)`` tensors viewed as ``vec3`` arrays;
* :func:`launch`, the single launch helper every op uses.

Kernels (``warpgeo._kernels``) import Warp only; op modules import torch and this module.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

#: Floating dtypes accepted for points, spheres and features.
FLOAT_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: Integer dtypes accepted for index inputs (outputs are always int64).
INDEX_DTYPES: tuple[torch.dtype, ...] = (torch.int32, torch.int64)

_HALF_DTYPES = (torch.float16, torch.bfloat16)


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


@functools.cache
def warp() -> Any:
    """Import and initialise Warp once, on first use, and return the ``warp`` module.

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
            sys.stderr.write("".join(s for s in lines if "load the NVIDIA CUDA driver" not in s))
    return wp


# --------------------------------------------------------------------------------------------------------
# devices and streams
# --------------------------------------------------------------------------------------------------------


def warp_device(device: torch.device | str) -> Any:
    """The Warp device for a torch device: ``cpu`` -> ``"cpu"``, ``cuda[:i]`` -> ``"cuda:i"``.

    A bare ``cuda`` resolves to torch's current CUDA device, as torch itself does.

    Raises:
        ValueError: for device types Warp cannot run on (``mps``, ``meta``, ...).
    """
    wp = warp()
    device = torch.device(device)
    if device.type == "cpu":
        return wp.get_device("cpu")
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return wp.get_device(f"cuda:{index}")
    raise ValueError(f"warpgeo runs on 'cpu' and 'cuda' devices; got a tensor on {str(device)!r}")


def warp_stream(device: torch.device | str) -> Any:
    """Warp's handle to torch's current stream on ``device`` (``None`` on the CPU)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return warp().stream_from_torch(torch.cuda.current_stream(device))


# --------------------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------------------


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision a kernel runs in for inputs of ``dtype``: float64 stays, the rest use float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def check_float(t: torch.Tensor, name: str) -> None:
    """Raise TypeError unless ``t`` is a tensor of one of :data:`FLOAT_DTYPES`."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must have dtype {_dtype_names(FLOAT_DTYPES)}; got {t.dtype}")


def check_index(t: torch.Tensor, name: str) -> None:
    """Raise TypeError unless ``t`` is an int32 or int64 tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    if t.dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must have dtype {_dtype_names(INDEX_DTYPES)}; got {t.dtype}")


def check_same_device(reference: str, tensors: dict[str, torch.Tensor | None]) -> torch.device:
    """Raise ValueError unless every tensor lives on the device of ``tensors[reference]``; return it."""
    device = tensors[reference].device  # type: ignore[union-attr]
    for name, t in tensors.items():
        if t is not None and t.device != device:
            raise ValueError(f"{name} must be on the same device as {reference} ({device}); got {t.device}")
    return device


def to_compute(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor in the kernel precision of ``t``: no copy when it already is one.

    Half types are widened to float32 here, once, so kernels exist in two precisions only.
    """
    return t.to(compute_dtype(t.dtype)).contiguous()


# --------------------------------------------------------------------------------------------------------
# tensors <-> Warp arrays, and the launch helper
# --------------------------------------------------------------------------------------------------------


def as_warp(t: torch.Tensor, dtype: Any = None) -> Any:
    """Wrap a contiguous tensor as a Warp array without copying.

    With a vector ``dtype`` (``wp.vec3``, ``wp.vec3d``, ...), the trailing tensor dimension becomes the
    vector: a ``(B, N, 3)`` float32 tensor is a ``(B, N)`` ``vec3`` array over the same memory.

    Raises:
        ValueError: if ``t`` is not contiguous (a strided view would be read wrongly by the kernel).
    """
    if not t.is_contiguous():
        raise ValueError(f"internal error: tensor of shape {tuple(t.shape)} must be contiguous for Warp")
    return warp().from_torch(t, dtype=dtype, requires_grad=False)


def _kernel_arg_types(kernel: Any) -> list[Any]:
    return [arg.type for arg in kernel.adj.args]


def launch(
    kernel: Any,
    dim: int | Sequence[int],
    args: Sequence[Any],
    *,
    device: torch.device,
    block_dim: int | None = None,
    tiled: bool = False,
) -> None:
    """Launch ``kernel`` on ``device`` (and torch's current stream there) with ``args``.

    Tensors in ``args`` are wrapped zero-copy as the array type the kernel declares for that argument (so a
    ``(B, N, 3)`` tensor passed for a ``wp.array2d(dtype=wp.vec3)`` parameter becomes that array). Other
    values are passed through. A launch with an empty grid is skipped.

    ``tiled=True`` appends a trailing block dimension of ``block_dim`` threads (``wp.launch_tiled``); on the
    CPU Warp runs such a block as one thread, so tiled kernels must be correct for any block size.
    """
    wp = warp()
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if any(d == 0 for d in dims):
        return
    types = _kernel_arg_types(kernel)
    if len(types) != len(args):
        raise TypeError(f"internal error: {kernel.key} takes {len(types)} arguments, got {len(args)}")
    wp_args = []
    for arg, arg_type in zip(args, types, strict=True):
        if isinstance(arg, torch.Tensor):
            wp_args.append(as_warp(arg, getattr(arg_type, "dtype", None)))
        else:
            wp_args.append(arg)
    wdev = warp_device(device)
    stream = warp_stream(device)
    if tiled:
        wp.launch_tiled(
            kernel, dim=list(dims), inputs=wp_args, device=wdev, stream=stream, block_dim=block_dim
        )
    else:
        wp.launch(kernel, dim=dims, inputs=wp_args, device=wdev, stream=stream, block_dim=block_dim)


#: Below this much work (in the units of ``work_per_row``) a CPU launch is not split among threads: handing a
#: launch to another thread costs ~0.1 ms.
_MIN_SPLIT_WORK = 1 << 18


@functools.cache
def _cpu_pool(pid: int) -> ThreadPoolExecutor:
    # Keyed by process id: a forked child (a DataLoader worker, say) inherits the pool object but not its
    # threads, and would wait on it forever.
    return ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="warpgeo")


def launch_rows(
    kernel: Any,
    rows: int,
    args: Sequence[Any],
    *,
    device: torch.device,
    work_per_row: int = 1,
) -> None:
    """Launch ``kernel`` over ``rows`` independent rows; its last parameter is the first row of the launch.

    On CUDA this is one launch of ``rows`` threads with a first row of 0. Warp
    runs a CPU launch on the calling thread, so on the CPU the rows are split into up to
    ``torch.get_num_threads()`` ranges launched side by side from a thread pool (a launch releases the GIL),
    and the op uses the cores a torch op would. Small launches (``rows * work_per_row`` below
    ``_MIN_SPLIT_WORK``) stay on the calling thread. Not for tile kernels: Warp's CPU tile storage is not
    safe for concurrent launches (they crash).
    """
    device = torch.device(device)
    workers = min(torch.get_num_threads(), rows, max(1, rows * work_per_row // _MIN_SPLIT_WORK))
    if device.type != "cpu" or workers <= 1:
        launch(kernel, [rows], [*args, 0], device=device)
        return
    # load (compile) the module here, once, so that the side-by-side launches never race to build it
    kernel.module.load(warp_device(device))
    bounds = [rows * w // workers for w in range(workers + 1)]
    pool = _cpu_pool(os.getpid())
    jobs = [
        pool.submit(launch, kernel, [end - start], [*args, start], device=device)
        for start, end in itertools.pairwise(bounds)
    ]
    for job in jobs:
        job.result()


def is_half(dtype: torch.dtype) -> bool:
    return dtype in _HALF_DTYPES
