"""Robot self-collision: warpgeo.self_collision_cost against plain torch on the same sphere pairs.

    python3 benchmarks/bench_self_collision.py                 # CPU: 100k configurations x 60 spheres
    python3 benchmarks/bench_self_collision.py --quick         # 10k configurations, one timed run each
    python3 benchmarks/bench_self_collision.py --device cuda --json $OUT/self_collision.json

The robot: 60 spheres on 7 links (8-9 spheres along each link of a random 3-D chain per configuration, radii
4-6 cm), every pair of spheres on two different links checked: 1,542 pairs (the issue's "~1,600"). Timed:
forward + backward of ``cost.sum()`` w.r.t. the spheres (float32), reduction "max" (cuRobo's) and "sum".
Peers, in the same run:

* ``torch, pairs gathered``: what a user writes: the centres of both spheres of every pair gathered,
  ``(B, P, 3)`` each, their difference, ``norm``, the radii, clamp, max / sum (about 60 bytes per
  configuration and pair, forward and backward: 9 GB at 100k x 1,542);
* ``torch, cdist``: ``torch.cdist`` of all centres ``(B, S, S)``, the pairs picked out of it.

Each (implementation, reduction) runs in a fresh process of its own, so that its memory is its own: on the
CPU the peak resident set of one forward + backward less the resident set before it (inputs made, kernels
loaded; Linux's peak is reset through ``/proc/self/clear_refs``), on CUDA ``torch.cuda.max_memory_allocated``
less the memory allocated before. Times are medians of ``--repeat`` runs (the first full-size run included:
the warm-up is a call on 64 configurations); ratios are to warpgeo. A torch peer whose peak, measured at a
16th of the batch and scaled, would not fit in the memory available (with a margin) is skipped, its
estimate printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch
from _common import add_size_arguments, fill_sizes, print_header, sync

import warpgeo

#: The arm: spheres, links, link length (m), radii (m).
SPHERES = 60
LINKS = 7
LINK_LENGTH = 0.12
RADII = (0.04, 0.06)
IMPLEMENTATIONS = ("warpgeo", "torch, pairs gathered", "torch, cdist")
REDUCTIONS = ("max", "sum")
#: A peer runs only where its estimated peak times this stays below the memory available.
_MEMORY_MARGIN = 1.5


def sphere_links() -> torch.Tensor:
    """(S,) int64: 60 spheres on 7 links, 8 or 9 per link."""
    return torch.tensor([k * LINKS // SPHERES for k in range(SPHERES)])


def make_inputs(
    batch: int, *, device, dtype=torch.float32, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(spheres (B, 60, 4), pairs (P, 2))``: each configuration a random 3-D chain of 7 links, its spheres
    spread along each link."""
    gen = torch.Generator().manual_seed(seed)
    links = sphere_links()
    directions = torch.randn(batch, LINKS, 3, generator=gen)
    directions /= directions.norm(dim=-1, keepdim=True)
    ends = torch.cumsum(LINK_LENGTH * directions, dim=1)
    starts = ends - LINK_LENGTH * directions
    counts = torch.bincount(links)
    first = torch.cumsum(counts, 0) - counts
    along = (torch.arange(SPHERES) - first[links] + 0.5) / counts[links] * LINK_LENGTH  # (S,)
    centres = starts[:, links] + along[None, :, None] * directions[:, links]
    radii = RADII[0] + (RADII[1] - RADII[0]) * torch.rand(batch, SPHERES, 1, generator=gen)
    spheres = torch.cat([centres, radii], dim=-1).to(device=device, dtype=dtype)
    return spheres, warpgeo.collision_pairs(links).to(device)


def torch_pairs_cost(spheres: torch.Tensor, pairs: torch.Tensor, reduction: str) -> torch.Tensor:
    """The plain-torch self-collision cost: both spheres of every pair gathered, ``norm`` of the difference."""
    i, j = pairs[:, 0], pairs[:, 1]
    ci, cj = spheres[:, i, :3], spheres[:, j, :3]  # (B, P, 3) each
    ri, rj = spheres[:, i, 3], spheres[:, j, 3]  # (B, P) each
    pen = (ri + rj) - (ci - cj).norm(dim=-1)
    pen = torch.where((ri >= 0) & (rj >= 0), pen, 0.0).clamp_min(0.0)
    return pen.amax(-1) if reduction == "max" else pen.sum(-1)


def torch_cdist_cost(spheres: torch.Tensor, pairs: torch.Tensor, reduction: str) -> torch.Tensor:
    """The same through ``torch.cdist`` of all centres (B, S, S), the pairs picked out of it."""
    i, j = pairs[:, 0], pairs[:, 1]
    dist = torch.cdist(spheres[..., :3], spheres[..., :3])  # (B, S, S)
    r = spheres[..., 3]
    pen = (r[:, i] + r[:, j]) - dist[:, i, j]
    pen = torch.where((r[:, i] >= 0) & (r[:, j] >= 0), pen, 0.0).clamp_min(0.0)
    return pen.amax(-1) if reduction == "max" else pen.sum(-1)


def warpgeo_cost(spheres: torch.Tensor, pairs: torch.Tensor, reduction: str) -> torch.Tensor:
    return warpgeo.self_collision_cost(spheres, pairs, reduction=reduction)


COSTS = {"warpgeo": warpgeo_cost, "torch, pairs gathered": torch_pairs_cost, "torch, cdist": torch_cdist_cost}
#: Each implementation's name in the ``--json`` figures.
_KEYS = {"warpgeo": "warpgeo", "torch, pairs gathered": "torch_pairs", "torch, cdist": "torch_cdist"}


# --------------------------------------------------------------------------------------------------------
# one implementation in a process of its own
# --------------------------------------------------------------------------------------------------------


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset Linux's peak resident set (VmHWM) to the current one; False where it cannot be."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _status_kib("VmHWM") is not None
    except OSError:
        return False


class _Peak:
    """The memory one call adds at its peak: CUDA allocations, or the CPU process's resident set."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __enter__(self) -> _Peak:
        sync(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.before = torch.cuda.memory_allocated(self.device)
        elif _reset_peak():
            self.before = _status_kib("VmRSS") * 1024
        else:  # no reset: the process's peak so far
            self.before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return self

    def __exit__(self, *exc) -> None:
        sync(self.device)
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            hwm = _status_kib("VmHWM")
            peak = (
                hwm * 1024 if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            )
        self.bytes = max(0, peak - self.before)


def _available_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    kib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    kib = int(line.split()[1])
    except OSError:
        return None
    return None if kib is None else kib * 1024


def run_one(name: str, reduction: str, batch: int, device: torch.device, repeat: int) -> dict:
    """Time and measure one implementation: ``{"ms", "peak_bytes", "pairs"}`` or ``{"skipped": why}``."""
    cost = COSTS[name]
    spheres, pairs = make_inputs(batch, device=device)
    leaf = spheres.requires_grad_()

    def step(x: torch.Tensor) -> None:
        cost(x, pairs, reduction).sum().backward()
        leaf.grad = None

    step(leaf[:64])  # kernels loaded, allocator and thread pools warm
    if name != "warpgeo" and batch >= 1024:  # a 16th of the batch first: would the full one fit?
        with _Peak(device) as probe:
            step(leaf[: batch // 16])
        estimate = probe.bytes * 16
        available = _available_bytes(device)
        if available is not None and estimate * _MEMORY_MARGIN > available:
            return {"skipped": f"needs ~{estimate / 2**30:.1f} GiB, {available / 2**30:.1f} GiB available"}
    times = []
    peak = 0
    for k in range(repeat):
        sync(device)
        with _Peak(device) as measured:
            start = time.perf_counter()
            step(leaf)
            sync(device)
            times.append(time.perf_counter() - start)
        if k == 0:
            peak = measured.bytes
    return {"ms": statistics.median(times) * 1e3, "peak_bytes": peak, "pairs": len(pairs)}


# --------------------------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_arguments(parser)
    parser.add_argument(
        "--batch", type=int, default=None, help="configurations (default 100000; quick 10000)"
    )
    parser.add_argument(
        "--repeat", type=int, default=None, help="timed runs per implementation (default 3; quick 1)"
    )
    parser.add_argument("--reductions", nargs="+", default=list(REDUCTIONS), choices=REDUCTIONS)
    parser.add_argument("--json", type=str, default=None, help="write the figures to this JSON file")
    parser.add_argument("--child", nargs=2, metavar=("IMPLEMENTATION", "REDUCTION"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    fill_sizes(args, batch=(100_000, 10_000), repeat=(3, 1))
    device = torch.device(args.device)
    if args.child:  # one measurement, printed as JSON for the parent
        print(json.dumps(run_one(args.child[0], args.child[1], args.batch, device, args.repeat)))
        return 0

    print_header(device, f"torch threads {torch.get_num_threads()}")
    _, pairs = make_inputs(1, device="cpu")
    print(
        f"{args.batch} configurations x {SPHERES} spheres on {LINKS} links, {len(pairs)} pairs (every pair of "
        f"spheres on two different links), float32, forward + backward; each row a fresh process"
    )
    figures: dict[str, float] = {}
    for reduction in args.reductions:
        rows = {}
        for name in IMPLEMENTATIONS:
            command = [sys.executable, os.path.abspath(__file__), "--child", name, reduction]
            command += ["--batch", str(args.batch), "--repeat", str(args.repeat), "--device", args.device]
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                rows[name] = {"skipped": f"failed: {done.stderr.strip().splitlines()[-1:]}"}
                continue
            rows[name] = json.loads(done.stdout.strip().splitlines()[-1])
        base = rows["warpgeo"]
        print(f'\nreduction="{reduction}"')
        print(
            f"  {'implementation':<24} {'fwd+bwd (ms)':>13} {'x warpgeo':>10} {'peak (MiB)':>11} {'x warpgeo':>10}"
        )
        for name, row in rows.items():
            if "skipped" in row:
                print(f"  {name:<24} skipped: {row['skipped']}")
                continue
            slower = row["ms"] / base["ms"] if "ms" in base else float("nan")
            more = row["peak_bytes"] / max(base.get("peak_bytes", 1), 1)
            print(
                f"  {name:<24} {row['ms']:>13.1f} {slower:>10.1f} {row['peak_bytes'] / 2**20:>11.0f} {more:>10.1f}"
            )
            key = f"self_collision_b{args.batch}_{reduction}_{_KEYS[name]}"
            figures[f"{key}_ms"] = round(row["ms"], 3)
            figures[f"{key}_peak_mib"] = round(row["peak_bytes"] / 2**20, 1)
        peer = rows["torch, pairs gathered"]
        if "ms" in peer and "ms" in base:
            faster = peer["ms"] / base["ms"]
            smaller = peer["peak_bytes"] / max(base["peak_bytes"], 1)
            verdict = "met" if faster >= 5 and smaller >= 10 else "NOT met"
            print(
                f"  warpgeo vs torch (pairs gathered): {faster:.1f}x faster, {smaller:.1f}x less peak memory "
                f"(goal >= 5x and >= 10x: {verdict})"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
