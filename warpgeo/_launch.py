"""Launching Warp kernels from torch, on Warp's public API only (DESIGN "Foundation").

:func:`launch`, :func:`launch_rows` (row kernels; on the CPU split across threads) and :func:`launch_blocks`
(the one splitter for launches too large for Warp) bind arguments by the kernel's own parameter names,
wrap tensors zero-copy (``wp.from_torch``) as the array type each parameter declares, and replay Warp's
recorded ``Launch`` objects (``wp.launch(..., record_cmd=True)``), setting only what changed. Every launch
ends in :func:`run` (tests watch it). :func:`struct` builds a ``@wp.struct`` (a world's arrays as one
kernel argument) from tensors.

The optional accelerator :mod:`warpgeo._fast_launch` (re-points a moved tensor's descriptor) is the only
code that relies on an undocumented detail of Warp, gated and checked; it imports nothing from here.
"""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from warpgeo import _fast_launch, _threads
from warpgeo._constants import INT32_LIMIT, MAX_LAUNCH_ROWS
from warpgeo._warp import cuda_algorithms, dense_below, warp, warp_device, warp_stream

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
    tensor parameter is reset after the launch and set again at the next. The exception: a launcher
    constant (:func:`constant`, an op's shared empty placeholder, alive for good) is held, and passes by
    identity alone. A struct is held by weak reference (an identical object is never set twice; a new one
    at a reused address is).
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

    def run(self, dims: tuple[int, ...], args: dict[str, Any], device: torch.device, stream: Any) -> None:
        names = self.names
        if len(args) != len(names):
            _check_names(self.kernel, names, args)
        cmd = self.cmd
        keys, ptrs, descs, last = self.keys, self.ptrs, self.descs, self.last
        for i, name in enumerate(names):
            value = args[name]  # KeyError: a missing argument (checked above)
            kind = type(value)
            if kind is torch.Tensor:
                if value is last[i]:  # the launcher constant this parameter holds: never changes
                    continue
                ptr = value.data_ptr()
                key = (value.shape, value.stride(), value.dtype)
                if key == keys[i]:
                    if ptr == ptrs[i]:
                        continue
                    desc = descs[i]
                    _fast_launch.repoint(desc, ptr)  # keys are kept between calls only where it is on
                    cmd.set_param_at_index_from_ctype(i, desc)
                    ptrs[i] = ptr
                else:
                    self._set_tensor(i, name, value)
                    keys[i] = key
                    ptrs[i] = ptr
                last[i] = value if _CONSTANTS.get(id(value)) is value else None
            elif kind in _SCALARS:
                held = last[i]
                if kind is not type(held) or value != held:
                    cmd.set_param_at_index(i, value)
                    last[i] = value
            elif isinstance(value, torch.Tensor):  # a subclass (fake, functional): never launched
                raise TypeError(f"internal error: {self.kernel.key}({name}=...) got a {kind.__name__}")
            else:  # a struct (or a Warp vector): by weak reference where it can be
                held = last[i]
                if not (isinstance(held, weakref.ref) and held() is value):
                    cmd.set_param_at_index(i, value)
                    try:
                        last[i] = weakref.ref(value)
                    except TypeError:
                        last[i] = None
        if dims != self.dims:
            cmd.set_dim(dims)  # Warp validates the grid
            self.dims = dims
        if self.cuda:
            cmd.launch(stream if stream is not None else warp_stream(device))
        else:
            cmd.launch(None)
        if not self.fast:
            for i in range(len(names)):  # the public path's descriptors hold their tensors: let them go
                if keys[i] is not None:
                    cmd.set_param_at_index(i, None)
                    keys[i] = ptrs[i] = descs[i] = last[i] = None

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

#: ``id -> tensor`` of the launcher constants (:func:`constant`), kept alive for good.
_CONSTANTS: dict[int, torch.Tensor] = {}


def constant(t: torch.Tensor) -> torch.Tensor:
    """Register ``t`` as a launcher constant and return it: a tensor an op shares between its calls and
    never hands out, writes, resizes or frees (the empty placeholder of an argument left at its default).
    A launch that held it last time takes it again by identity alone, without reading its pointer, shape
    and strides (~0.35 µs a tensor on the CPU; a scan-path chamfer launch passes 13 of them)."""
    _CONSTANTS[id(t)] = t
    return t


def empty(dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """The empty placeholder of ``dtype`` on ``device`` (an optional argument left at its default: shape
    ``(0,)``), one per (dtype, device) for the whole process, registered as a launcher :func:`constant`.
    Never written, resized or handed out."""
    return _empty(dtype, torch.device(device))


@functools.cache
def _empty(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return constant(torch.empty(0, dtype=dtype, device=device))


def _check_names(kernel: Any, names: Sequence[str], args: dict[str, Any]) -> None:
    if set(args) != set(names):
        missing = [n for n in names if n not in args]
        unexpected = [n for n in args if n not in names]
        raise TypeError(
            f"internal error: launch of {kernel.key}: missing arguments {missing}, unexpected {unexpected}"
        )


#: Per calling thread (``threading.local``): one :class:`_Recorded` per kernel, device and block size.
_THREAD = threading.local()
#: The argument of :func:`launch`, :func:`launch_rows` and :func:`launch_blocks` that is not the kernel's:
#: Warp's handle to torch's current stream on the device (``_warp.warp_stream(device)``, ``None`` on the CPU),
#: for an op that looks it up once per call and launches several kernels; left out, each launch looks it up.
STREAM = "stream"
#: Held over a kernel's first launch from each thread: recording it (Warp loads, and on first use compiles,
#: its module on that path) and running it once. One lock per Warp module (:func:`first_launch_lock`): without
#: it a thread could enter a module that another thread was still loading (several threads' first calls at
#: once crashed: SIGSEGV at the kernel's entry), while different modules load side by side, as Warp's own
#: ``wp.force_load(max_workers=...)`` loads them (a world's background table build compiling its modules
#: does not hold up the caller's first query). Taken once per kernel, device, block size and thread; later
#: launches take no lock.
_FIRST_LAUNCH: dict[Any, _threads.ForkSafeLock] = {}
_FIRST_LAUNCH_MADE = _threads.ForkSafeLock()


def first_launch_lock(kernel: Any) -> _threads.ForkSafeLock:
    """The lock held over the first launches of ``kernel``'s Warp module (see :data:`_FIRST_LAUNCH`)."""
    module = kernel.module
    lock = _FIRST_LAUNCH.get(module)
    if lock is None:
        with _FIRST_LAUNCH_MADE:
            lock = _FIRST_LAUNCH.setdefault(module, _threads.ForkSafeLock(reentrant=True))
    return lock


def run(kernel: Any, dims: tuple[int, ...], device: torch.device, block_dim: int | None, args: dict) -> None:
    """Every launch of :func:`launch` and :func:`launch_rows` ends here (one place for tests and benchmarks to
    watch). ``args`` may hold :data:`STREAM` besides the kernel's arguments (taken out here)."""
    stream = args.pop(STREAM, None)
    try:
        recorded = _THREAD.recorded
    except AttributeError:
        recorded = _THREAD.recorded = {}
    key = (kernel, device, block_dim)
    slot = recorded.get(key)
    if slot is not None:
        slot.run(dims, args, device, stream)
        return
    with first_launch_lock(kernel):
        slot = _Recorded(kernel, dims, device, block_dim, args)
        slot.run(dims, args, device, stream)
    recorded[key] = slot


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
    ValueError naming the argument. A launch with an empty grid is skipped. ``stream`` (:data:`STREAM`, not a
    kernel argument) may pass the device's current stream looked up by the caller (``_warp.warp_stream``).

    ``tiled=True`` appends a trailing block dimension of ``block_dim`` threads (as ``wp.launch_tiled``); on
    the CPU Warp runs such a block as one thread unless ``wp.config.enable_cpu_blocks`` is set, so tiled
    kernels must be correct for any block size.
    """
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if 0 in dims:
        return
    if tiled:
        if device.type == "cpu" and not warp().config.enable_cpu_blocks:
            block_dim = 1  # without Warp's CPU blocks a CPU tile launch runs each lane as a block of its own
        dims = (*dims, block_dim)
    run(kernel, dims, device, block_dim, args)


#: Below this much work (in the units of ``work_per_row``) a CPU launch is not split among threads: handing a
#: launch to another thread costs ~0.1 ms.
_MIN_SPLIT_WORK = 1 << 18
#: Ranges of rows per worker of a split CPU launch (taken one at a time, so that uneven rows balance out).
_RANGES_PER_WORKER = 4
#: The parameter through which :func:`launch_rows` tells a kernel the first row of its launch.
ROW_START = "row_start"


def launch_rows(
    kernel: Any,
    rows: int,
    *,
    device: torch.device,
    work_per_row: int = 1,
    between: Callable[[], None] | None = None,
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

    ``between``: a work that may have to stop midway (a world's background table build, which stops once its
    world is gone): launches of at most :data:`BETWEEN_ROWS` rows, ``between()`` before each (it raises to
    stop), handed out in turn to the calling thread and one more at the lowest priority.
    """
    if rows >= INT32_LIMIT:
        raise ValueError(f"internal error: {rows} rows in one launch of {kernel.key} (limit 2**31 - 1)")
    if ROW_START in args:
        raise TypeError(f"internal error: launch_rows of {kernel.key} fills {ROW_START} itself")
    if rows <= 0:
        return
    if between is not None:
        _launch_between(kernel, rows, device, between, args)
        return
    work = rows * work_per_row
    workers = 1
    if work >= _MIN_SPLIT_WORK and not cuda_algorithms(device):
        workers = min(torch.get_num_threads(), rows, work // _MIN_SPLIT_WORK)
    if workers <= 1:
        args[ROW_START] = 0
        run(kernel, (rows,), device, None, args)
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

    pool = _threads.pool("warpgeo", os.cpu_count() or 1)
    jobs = [pool.submit(work_through) for _ in range(workers)]
    for job in jobs:
        job.result()


#: Rows per launch of a :func:`launch_rows` with ``between`` (a background build checks between them that its
#: world still lives).
BETWEEN_ROWS = 1 << 16


def _launch_between(
    kernel: Any, rows: int, device: torch.device, between: Callable[[], None], args: dict
) -> None:
    """:func:`launch_rows`' ``between`` path: chunks of at most :data:`BETWEEN_ROWS` rows (fewer on two
    threads: about an eighth of the rows, at least 256), ``between()`` before each, on this thread and, where
    torch runs two threads or more, one of the lowest priority."""
    helper = _threads.pool("warpgeo-tables", 1, low_priority=True) if torch.get_num_threads() >= 2 else None
    chunk = BETWEEN_ROWS if helper is None else min(BETWEEN_ROWS, max(256, -(-rows // 8)))
    chunks = iter(range(0, rows, chunk))
    lock = threading.Lock()

    def work_through() -> None:
        while True:
            with lock:
                start = next(chunks, None)
            if start is None:
                return
            between()
            launch(kernel, min(chunk, rows - start), device=device, row_start=start, **args)

    job = None if helper is None or rows <= chunk else helper.submit(work_through)
    try:
        work_through()
    finally:
        if job is not None:
            job.result()


def _load(kernel: Any, device: torch.device, block_dim: int | None = None) -> None:
    """Load (compile on first use) ``kernel``'s Warp module for ``device`` as its launches run it."""
    wdev = warp_device(device)
    with first_launch_lock(kernel):
        kernel.module.load(wdev, launch_block_dim(wdev, block_dim))


def launch_block_dim(wdev: Any, block_dim: int | None) -> int | None:
    """The block size Warp runs a launch asking for ``block_dim`` with on the Warp device ``wdev``, and so
    the one its module is loaded (compiled, cached) for: on the CPU 1, unless Warp's CPU blocks are on
    (``wp.config.enable_cpu_blocks``) and ``block_dim`` is more; on CUDA ``block_dim`` (None: the module's own,
    or Warp's default). What ``warpgeo warmup`` loads, so that a first call finds its module in the cache."""
    if wdev.is_cpu:
        cpu_blocks = block_dim is not None and block_dim > 1 and warp().config.enable_cpu_blocks
        return block_dim if cpu_blocks else 1
    return block_dim


#: An empty mapping of tensors (no per-batch tensors).
_NO_TENSORS: dict[str, torch.Tensor] = {}


def _within_limits(tensors: Iterable[torch.Tensor]) -> bool:
    """True when no tensor has a dimension or a byte stride reaching ``INT32_LIMIT`` (counting size-1
    dimensions too: stricter than the splitter's own test, and as cheap as :func:`dense_below`): one launch
    takes them as they are. The usual call whose tensors are not dense (an index broadcast along C by
    ``expand``) is decided by this, not by the splitter's analysis."""
    for t in tensors:
        if t.dim() and (max(t.shape) >= INT32_LIMIT or max(t.stride()) * t.element_size() >= INT32_LIMIT):
            return False
    return True


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
    if rows <= MAX_LAUNCH_ROWS and (
        (dense_below(sliced.values()) and dense_below(per_batch.values()))
        or (_within_limits(sliced.values()) and _within_limits(per_batch.values()))
    ):
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

    def run_block(count_grid: tuple[int, ...], blocked: dict, batch: dict) -> None:
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
        run_block(grid, sliced, per_batch)
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
            run_block((b1 - b0, *grid[1:]), *block(slice(b0, b1), slice(None)))
        return
    if last == 0:
        step = MAX_LAUNCH_ROWS
        for b0 in range(0, batch_size, step):
            b1 = min(b0 + step, batch_size)
            blocked = {k: t[b0:b1] if t.numel() > 0 else t for k, t in sliced.items()}
            batch = {k: t[b0:b1] if t.numel() > 0 else t for k, t in per_batch.items()}
            if not fits([*blocked.values(), *batch.values()]):
                raise ValueError(f"{what} of shape {grid}: a row spans >= 2**31 bytes (int32 byte strides)")
            run_block((b1 - b0,), blocked, batch)
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
            run_block((1, *grid[1:last], l1 - l0), blocked, batch)


# --------------------------------------------------------------------------------------------------------
# Warp structs built from tensors (a world's arrays as one kernel argument)
# --------------------------------------------------------------------------------------------------------

#: Struct instances by (type, every field's data pointer, shape, strides, dtype, device / value). An
#: instance's arrays hold raw pointers, not the tensors (``_unowned``): its content is a function of its key
#: alone, so a cached instance is right for any tensors with that key, and the cache pins no memory.
_STRUCTS: collections.OrderedDict = collections.OrderedDict()
#: Entries kept (oldest first out).
_MAX_STRUCTS = 64
_STRUCTS_LOCK = _threads.ForkSafeLock()


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
