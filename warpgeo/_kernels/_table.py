"""The one form of warpgeo's kernel tables: kernels per key (a precision, ...), each key a Warp module.

A Warp module is Warp's compilation unit and its cache entry. warpgeo's kernel bodies are generic
(``wp.array2d(dtype=Any)``) and instantiated per key, each key alone in a module of its own, created on
first lookup: a process's first call compiles the one module it launches (seconds on a CPU), not every
kernel of a file in every precision, and creating a kernel (Warp hashes its code) costs milliseconds, so
only the one looked up is created.

    FPS_SERIAL = KernelTable(
        f"{__name__}.fps_serial",                       # Warp module: warpgeo._kernels.fps.fps_serial_<key>
        (fps_serial,),                                  # the kernel bodies of the module
        {"float32": {"points": wp.array2d(dtype=wp.vec3f)},
         "float64": {"points": wp.array2d(dtype=wp.vec3d)}},
        options=OPTIONS,
    )
    kernel = FPS_SERIAL["float32"].fps_serial           # created (not compiled) on first lookup

``types[key]`` gives the Warp type of each generic parameter, by name; each body takes those it has.
``funcs`` may instead be a function of the key returning the bodies (variants of one source, e.g. with
``wp.static`` branches). Every table registers itself in :data:`TABLES`: ``warpgeo warmup`` and the code
generation test compile every module of every table. Pure Warp (no torch ops; its lock is fork-safe:
``warpgeo._threads.ForkSafeLock``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import warp as wp

from warpgeo._threads import ForkSafeLock

#: Options of every warpgeo module. ``cuda_output``: Warp's cache holds each CUDA module as a cubin, machine
#: code for the device's architecture, not PTX that the driver compiles again in every new process where
#: its own cache misses (Warp's automatic choice is PTX whenever the driver is newer than Warp's NVRTC; an
#: architecture NVRTC cannot target still gets PTX). The H200 run of 2026-11-26 measured a first sphere-cost
#: call of 4.8 s in a fresh process with a warm Warp cache, against 0.4 s on the CPU.
MODULE_OPTIONS = {"cuda_output": "cubin"}

#: Every table, in the order the kernel files created them (``warpgeo warmup``, tests/test_codegen.py).
TABLES: list[KernelTable] = []


class KernelTable:
    """``table[key]``: a namespace of the kernels of one Warp module, by kernel function name.

    Args:
        name: the Warp module's name less its key, ``f"{__name__}.<name>"`` in a kernel file: the module
            of a key is ``<name>_<key>`` (a tuple key joins its parts with ``_``).
        funcs: the kernel bodies (plain Python functions, not yet ``@wp.kernel``), or a function of the
            key returning them.
        types: ``{key: {parameter name: Warp type}}``: every key the table serves, and the type of each
            generic parameter there.
        options: Warp module options (``{"enable_backward": False, ...}``).
        block_dim: the block size launches use (tile kernels); None: Warp's default for the device.
        max_registers: a cap on the registers per CUDA thread (Warp's ``cuda_max_registers``), or a function of
            the key giving it; None: the compiler's choice. The CPU ignores it.
        cuda_only: only CUDA launches these kernels (a CPU warmup skips them).
        host_too: a CUDA world launches these kernels on the CPU too (a CUDA warmup loads them there).
    """

    def __init__(
        self,
        name: str,
        funcs: Sequence[Callable] | Callable[[Any], Sequence[Callable]],
        types: Mapping[Any, Mapping[str, Any]],
        *,
        options: Mapping[str, Any] | None = None,
        block_dim: int | None = None,
        max_registers: int | Callable[[Any], int | None] | None = None,
        cuda_only: bool = False,
        host_too: bool = False,
    ) -> None:
        self.name = name
        self.funcs = funcs
        self.types = dict(types)
        self.options = dict(options or {})
        self.block_dim = block_dim
        self.max_registers = max_registers
        self.cuda_only = cuda_only
        self.host_too = host_too
        self._built: dict[Any, SimpleNamespace] = {}
        self._lock = ForkSafeLock()
        TABLES.append(self)

    def keys(self) -> list[Any]:
        return list(self.types)

    def module_name(self, key: Any) -> str:
        suffix = "_".join(str(k) for k in key) if isinstance(key, tuple) else str(key)
        return f"{self.name}_{suffix}"

    def __getitem__(self, key: Any) -> SimpleNamespace:
        found = self._built.get(key)
        if found is not None:
            return found
        if key not in self.types:
            raise KeyError(f"internal error: kernel table {self.name!r} has no {key!r} (has {self.keys()})")
        with self._lock:  # two threads' first calls create one set of kernels
            found = self._built.get(key)
            if found is None:
                found = self._build(key)
                self._built[key] = found
        return found

    def _build(self, key: Any) -> SimpleNamespace:
        module = self.module_name(key)
        # the module is built for the block size its launches use (Warp's own build at first launch, and
        # test_codegen's ahead-of-time one, compile the same module)
        options = {
            **MODULE_OPTIONS,
            **self.options,
            **({} if self.block_dim is None else {"block_dim": self.block_dim}),
        }
        if options:
            wp.set_module_options(options, module=module)
        types = self.types[key]
        funcs = self.funcs(key) if callable(self.funcs) else self.funcs
        kernels = {}
        for func in funcs:
            cap = self.max_registers(key) if callable(self.max_registers) else self.max_registers
            extra = {} if cap is None else {"cuda_max_registers": cap}
            kernel = wp.kernel(func, module=module, **extra)
            params = inspect.signature(func).parameters
            generic = {p: t for p, t in types.items() if p in params}
            if generic:
                kernel = wp.overload(kernel, generic)
            kernels[func.__name__] = kernel
        return SimpleNamespace(**kernels)

    def modules(self) -> Iterator[tuple[Any, str]]:
        """``(key, Warp module name)`` of every key, its kernels created now (warmup, codegen test)."""
        for key in self.types:
            self[key]
            yield key, self.module_name(key)
