"""Farthest point sampling: warpgeo against torch-fps, a plain-torch loop, fpsample and a numpy reference.

    python benchmarks/bench_fps.py                        # CPU, B=1, N=100k, K=4096
    python benchmarks/bench_fps.py --device cuda --batch 1 8
    python benchmarks/bench_fps.py --quick                # B=1, N=10k, K=512: seconds

Prints the median time of each implementation and its ratio to warpgeo. Peers on the device of the run:

* ``torch-fps`` (``pip install torch-fps``; Triton kernels on CUDA, a C++ kernel on the CPU that is
  compiled on first use, which takes minutes once);
* the plain-torch loop people write when they have nothing else: K steps of a distance update and an
  arg-max over the batch, on the device (timed once: it is slow).

fpsample (``pip install fpsample``) and the numpy reference run on the CPU, one cloud at a time; they are
skipped on CUDA unless --peers-on-cpu. A peer that is not installed is skipped with a line saying so.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import add_size_arguments, fill_sizes, import_peer, print_header, report, sync, timeit
from reference import fps_reference

import warpgeo


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--points", type=int, default=None, help="N (default 100k; 10k with --quick)")
    parser.add_argument("--samples", type=int, default=None, help="K (default 4096; 512 with --quick)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs (default 3; 2 with --quick)")
    parser.add_argument("--peers-on-cpu", action="store_true", help="also time the CPU peers for a CUDA run")
    parser.add_argument("--no-numpy", action="store_true", help="skip the (slow) numpy reference")
    parser.add_argument("--no-torch-loop", action="store_true", help="skip the (slow) plain-torch loop")
    args = parser.parse_args(argv)
    fill_sizes(args, points=(100_000, 10_000), samples=(4096, 512), repeat=(3, 2))
    device = torch.device(args.device)
    print_header(device, f"N={args.points}, K={args.samples}")

    peers = {
        "torch_fps": import_peer("torch_fps", "torch-fps"),
        "fpsample": import_peer("fpsample", "fpsample", " (on the CPU)"),
    }

    for batch in args.batch:
        bench_batch(batch, args, device, peers)


def torch_fps_loop(points: torch.Tensor, k: int) -> torch.Tensor:
    """Plain-torch FPS from index 0, what users write: K steps of a distance update and an arg-max."""
    batch, n, _ = points.shape
    rows = torch.arange(batch, device=points.device)
    chosen = torch.empty(batch, k, dtype=torch.int64, device=points.device)
    mindist = torch.full((batch, n), torch.inf, dtype=points.dtype, device=points.device)
    current = torch.zeros(batch, dtype=torch.int64, device=points.device)
    for step in range(k):
        chosen[:, step] = current
        d = (points - points[rows, current][:, None]).square().sum(dim=-1)
        mindist = torch.minimum(mindist, d)
        current = mindist.argmax(dim=1)
    return chosen


def _agreement(name: str, theirs: torch.Tensor, ours: torch.Tensor) -> None:
    same = torch.equal(theirs.cpu(), ours.cpu())
    where = (
        "" if same else f" (first difference at step {int((theirs.cpu() != ours.cpu()).any(0).nonzero()[0])})"
    )
    print(f"  {name} picks the same indices as warpgeo: {same}{where}")


def bench_batch(batch: int, args: argparse.Namespace, device: torch.device, peers: dict) -> None:
    gen = torch.Generator().manual_seed(0)
    points = torch.rand(batch, args.points, 3, generator=gen).to(device)
    clouds = [c.numpy() for c in points.cpu()]
    k = args.samples
    rows = [
        (
            "warpgeo",
            timeit(lambda: warpgeo.farthest_point_sampling(points, k), device, repeat=args.repeat),
        )
    ]
    ours_t = warpgeo.farthest_point_sampling(points, k)
    ours = ours_t.cpu().numpy()
    print(f"\nB={batch}:")
    torch_fps = peers.get("torch_fps")
    if torch_fps is not None:
        mask = torch.ones(batch, args.points, dtype=torch.bool, device=device)
        start = torch.zeros(batch, dtype=torch.int64, device=device)

        def run_torch_fps():
            return torch_fps.farthest_point_sampling(points, mask, k, start_idx=start, random_start=False)

        _agreement("torch-fps", run_torch_fps(), ours_t)
        rows.append(("torch-fps", timeit(run_torch_fps, device, repeat=args.repeat)))
    if not args.no_torch_loop:
        # one timed run, which also gives the indices to compare (the loop is slow on the CPU)
        sync(device)
        start = time.perf_counter()
        looped = torch_fps_loop(points, k)
        sync(device)
        seconds = time.perf_counter() - start
        _agreement("plain-torch loop", looped, ours_t)
        if device.type == "cuda":  # that run was the warm-up
            seconds = timeit(lambda: torch_fps_loop(points, k), device, repeat=1, warmup=0)
        rows.append(("plain-torch loop", seconds))
    fpsample = peers.get("fpsample")
    cpu_peers = device.type == "cpu" or args.peers_on_cpu
    if fpsample is not None and cpu_peers:
        vanilla = [fpsample.fps_sampling(c, k, start_idx=0) for c in clouds]
        same = all(np.array_equal(np.asarray(v), o) for v, o in zip(vanilla, ours, strict=True))
        print(f"  fpsample vanilla picks the same indices as warpgeo: {same}")
        rows.append(
            (
                "fpsample.fps_sampling",
                timeit(
                    lambda: [fpsample.fps_sampling(c, k, start_idx=0) for c in clouds],
                    "cpu",
                    repeat=args.repeat,
                ),
            )
        )
        rows.append(
            (
                "fpsample.bucket_fps_kdline (h=7)",
                timeit(
                    lambda: [fpsample.bucket_fps_kdline_sampling(c, k, h=7, start_idx=0) for c in clouds],
                    "cpu",
                    repeat=args.repeat,
                ),
            )
        )
    if not args.no_numpy and cpu_peers:
        rows.append(
            (
                "numpy reference",
                timeit(lambda: [fps_reference(c, k) for c in clouds], "cpu", repeat=1, warmup=0),
            )
        )
    report(f"farthest point sampling, B={batch}, N={args.points}, K={k} ({device})", rows, "warpgeo")


if __name__ == "__main__":
    main()
