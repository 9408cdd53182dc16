"""``warpgeo warmup``: every kernel module compiled into Warp's kernel cache ahead of time.

Warp compiles a module the first time it is launched on a device (seconds on a CPU, most of it Clang) and
keeps the result in its kernel cache (``wp.config.kernel_cache_dir``), where every later process finds it.
A Docker image, a CI job or a cluster node runs ``warpgeo warmup [--device cpu|cuda[:N]]`` once, and its
first op call then compiles nothing. Nothing here is on an op's path.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from collections.abc import Callable
from typing import Any

from warpgeo import _launch, _warp


def kernel_modules() -> list[tuple[Any, Any, str]]:
    """``(table, key, Warp module name)`` for every module of every kernel table of ``warpgeo._kernels``
    (the kernel files found with pkgutil and imported; each table's kernels created now)."""
    _warp.warp()
    import warpgeo._kernels
    from warpgeo._kernels._table import TABLES

    for info in pkgutil.iter_modules(warpgeo._kernels.__path__, prefix="warpgeo._kernels."):
        importlib.import_module(info.name)
    return [(table, key, name) for table in TABLES for key, name in table.modules()]


def warmup_plan(cuda: bool) -> list[tuple[Any, str, bool]]:
    """``(table, Warp module name, on the host)`` of every module a warmup of a CUDA device (``cuda``) or of the
    CPU loads: the CPU's are every table's but the CUDA-only ones; a CUDA device's are every table's, and also
    on the host those a CUDA world launches there (``host_too``)."""
    plan = []
    for table, _key, name in kernel_modules():
        if cuda or not table.cuda_only:
            plan.append((table, name, False))
        if cuda and table.host_too:
            plan.append((table, name, True))
    return plan


def warmup(device: str = "cpu", *, quiet: bool = False, only: Callable[[str], bool] | None = None) -> int:
    """Compile every kernel module warpgeo launches on ``device`` into Warp's kernel cache (a module
    already there is only loaded). Returns the number of modules. A progress bar on stderr unless
    ``quiet``; ``only``: the modules (by Warp module name) to warm, None: all."""
    import torch

    torch_device = torch.device(device)
    wdev = _warp.warp_device(torch_device)  # ValueError for a device warpgeo does not run on
    wp = _warp.warp()
    modules = [m for m in warmup_plan(wdev.is_cuda) if only is None or only(m[1])]
    from tqdm import tqdm

    start = time.perf_counter()
    bar = tqdm(modules, desc=f"warpgeo warmup ({wdev})", unit="module", disable=quiet, file=sys.stderr)
    for table, name, on_host in bar:
        bar.set_postfix_str(name.removeprefix("warpgeo._kernels."), refresh=False)
        target = wp.get_device("cpu") if on_host else wdev
        # the block size the launches run (on the CPU 1, whatever the table declares): the same module hash
        wp.get_module(name).load(target, _launch.launch_block_dim(target, table.block_dim))
    if not quiet:
        print(
            f"warpgeo: {len(modules)} kernel modules ready for {wdev} in {time.perf_counter() - start:.1f} s "
            f"(Warp's kernel cache: {wp.config.kernel_cache_dir})",
            file=sys.stderr,
        )
    return len(modules)
