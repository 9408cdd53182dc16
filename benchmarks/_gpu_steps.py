"""gpu_check's helpers for running the tests' steps at once: the suite's files in balanced parts, and
several commands under one deadline (``benchmarks/gpu_check.py --jobs``)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def balanced(files: list[str], parts: int) -> list[list[str]]:
    """``files`` in ``parts`` groups of about equal weight, the largest file first into the lightest group (a
    file's weight: its size in bytes, a proxy for its tests and the Warp modules they build); a file stays
    whole (its modules are built once, in one process)."""
    groups: list[list[str]] = [[] for _ in range(parts)]
    weights = [0] * parts
    for name in sorted(files, key=lambda f: (-(ROOT / f).stat().st_size, f)):
        lightest = weights.index(min(weights))
        groups[lightest].append(name)
        weights[lightest] += (ROOT / name).stat().st_size
    return [sorted(group) for group in groups]


def run_together(
    cmds: list[list[str]], budget, *, reserve: float, logs: Path
) -> list[tuple[int | str, str, float]]:
    """Run ``cmds`` at once (each its own process, its output in a log file under ``logs``): ``(rc or
    "timeout", output, seconds)`` of each, in order. All share one deadline, the budget left less
    ``reserve``; a command still running then is killed."""
    timeout = max(1.0, budget.left() - reserve)
    start = time.monotonic()
    running = []
    for i, cmd in enumerate(cmds):
        print(f"\n$ {' '.join(cmd)} &   (time left {timeout:.0f} s)", flush=True)
        log = (logs / f"together-{i}.log").open("w+")
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
        running.append((proc, log))
    ended: list[float | None] = [None] * len(cmds)
    while any(t is None for t in ended) and time.monotonic() - start < timeout:
        for i, (proc, _) in enumerate(running):
            if ended[i] is None and proc.poll() is not None:
                ended[i] = time.monotonic() - start
        time.sleep(0.2)
    results: list[tuple[int | str, str, float]] = []
    for i, (proc, log) in enumerate(running):
        rc: int | str = proc.returncode if ended[i] is not None else "timeout"
        if ended[i] is None:
            proc.kill()
            proc.wait()
        log.seek(0)
        output = log.read()
        log.close()
        seconds = ended[i] if ended[i] is not None else time.monotonic() - start
        print(output, end="" if output.endswith("\n") else "\n", flush=True)
        print(f"-> [{i}] exit {rc} after {seconds:.1f} s", flush=True)
        results.append((rc, output, seconds))
    return results
