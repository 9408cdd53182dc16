"""Timing helpers shared by the benchmark scripts: warm-up excluded, device synchronised, peers in one run."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable

import torch


def device_name(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads)"


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


def report(title: str, rows: list[tuple[str, float]], baseline: str) -> None:
    """Print one table: each peer's time and its ratio to ``baseline`` (>1: slower than the baseline)."""
    base = dict(rows)[baseline]
    print(f"\n{title}")
    print(f"  {'implementation':<34} {'time (ms)':>12} {'x ' + baseline:>16}")
    for name, seconds in rows:
        print(f"  {name:<34} {seconds * 1e3:>12.2f} {seconds / base:>16.2f}")
