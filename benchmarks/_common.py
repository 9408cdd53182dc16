"""Timing helpers shared by the benchmark scripts: warm-up excluded, device synchronised, peers in one run."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def device_name(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads)"


#: import names of the distributions whose versions are printed, where they differ
_MODULE_NAMES = {"warp-lang": "warp", "torch-fps": "torch_fps"}


def version(distribution: str) -> str | None:
    """The version of a PyPI distribution (``"torch-fps"``), or None when it is not there.

    Falls back to the module's ``__version__`` for packages that are importable without being installed
    (a GPU machine that puts them on ``PYTHONPATH``, as ``../shared/gpu/unpack`` does, warpgeo itself).
    """
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        pass
    module = _MODULE_NAMES.get(distribution, distribution.replace("-", "_"))
    if importlib.util.find_spec(module) is None:
        return None
    return getattr(importlib.import_module(module), "__version__", "(version unknown)")


def import_peer(module: str, distribution: str, note: str = "") -> Any:
    """Import a peer's module and print its version, or print why it is skipped and return None."""
    try:
        imported = importlib.import_module(module)
    except ImportError as error:
        installed = version(distribution)
        why = (
            f"is not installed (pip install {distribution})"
            if installed is None
            else f"{installed} does not import ({error})"
        )
        print(f"peer {distribution} {why}: its rows are skipped")
        return None
    print(f"peer {distribution} {version(distribution)}{note}")
    return imported


def print_header(device: torch.device | str, extra: str = "") -> None:
    """The device line every benchmark starts with, and the versions of torch, Warp and warpgeo."""
    line = f"device: {device_name(device)}"
    print(line + (f"; {extra}" if extra else ""))
    names = ("torch", "warp-lang", "warpgeo")
    print("versions: " + ", ".join(f"{name} {version(name) or 'not installed'}" for name in names))


def add_size_arguments(parser: argparse.ArgumentParser) -> None:
    """``--device`` and ``--quick`` (small sizes, fewer repeats: a smoke run that still prints every row)."""
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and few repeats (seconds, not minutes)"
    )


def fill_sizes(args: argparse.Namespace, **sizes: tuple[object, object]) -> None:
    """Set each ``args.<name>`` left at None to its ``(full, quick)`` default for the mode chosen."""
    for name, (full, quick) in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)


def sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timeit(
    fn: Callable[[], object], device: torch.device | str, *, repeat: int = 5, warmup: int = 1
) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeat`` runs, after ``warmup`` untimed runs."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def device_time(
    fn: Callable[[], object], device: torch.device | str, *, repeat: int = 5, warmup: int = 1
) -> float:
    """Median seconds of ``fn()``: CUDA-event times on CUDA (the stream's time from before the call to after
    it), wall times (``timeit``) on the CPU; ``warmup`` untimed calls first."""
    device = torch.device(device)
    if device.type != "cuda":
        return timeit(fn, device, repeat=repeat, warmup=warmup)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def write_figures(path: str | None, figures: dict[str, float | None]) -> None:
    """``--json``: write ``figures`` (flat ``{key: number or None}``) to ``path`` (gpu_check collects them into
    ``<results>.json``). None = not measured (the reason is in the printed output). Nothing when no path."""
    if not path:
        return
    import json

    with open(path, "w") as f:
        json.dump(figures, f, indent=1)
    print(f"\nwrote {path}")


def size_key(**sizes: int) -> str:
    """A figure key's size part: ``size_key(b=8, n=2048)`` -> ``"b8_n2048"`` (1,000,000 is written ``1m``)."""
    return "_".join(f"{name}{'1m' if value == 1_000_000 else value}" for name, value in sizes.items())


def report(title: str, rows: list[tuple[str, float]], baseline: str) -> None:
    """Print one table: each peer's time and its ratio to ``baseline`` (>1: slower than the baseline)."""
    base = dict(rows)[baseline]
    print(f"\n{title}")
    print(f"  {'implementation':<34} {'time (ms)':>12} {'x ' + baseline:>16}")
    for name, seconds in rows:
        print(f"  {name:<34} {seconds * 1e3:>12.2f} {seconds / base:>16.2f}")
