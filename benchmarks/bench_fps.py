"""Farthest point sampling: warpgeo against fpsample (vanilla and bucket/QuickFPS) and a numpy reference.

    python benchmarks/bench_fps.py                        # CPU, B=1, N=100k, K=4096
    python benchmarks/bench_fps.py --device cuda --batch 1 8

Prints the median time of each implementation and its ratio to warpgeo. fpsample (``pip install fpsample``)
and the numpy reference run on the CPU, one cloud at a time; they are skipped on CUDA unless --peers-on-cpu.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import device_name, report, timeit
from reference import fps_reference

import warpgeo


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, nargs="+", default=[1])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--peers-on-cpu", action="store_true", help="also time the CPU peers for a CUDA run")
    parser.add_argument("--no-numpy", action="store_true", help="skip the (slow) numpy reference")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print(f"device: {device_name(device)}; N={args.points}, K={args.samples}")

    try:
        import fpsample
    except ImportError:
        fpsample = None
        print("fpsample is not installed (pip install fpsample): its rows are skipped")

    for batch in args.batch:
        bench_batch(batch, args, device, fpsample)


def bench_batch(batch: int, args: argparse.Namespace, device: torch.device, fpsample) -> None:
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
    ours = warpgeo.farthest_point_sampling(points, k).cpu().numpy()
    cpu_peers = device.type == "cpu" or args.peers_on_cpu
    if fpsample is not None and cpu_peers:
        vanilla = [fpsample.fps_sampling(c, k, start_idx=0) for c in clouds]
        same = all(np.array_equal(np.asarray(v), o) for v, o in zip(vanilla, ours, strict=True))
        print(f"B={batch}: fpsample vanilla picks the same indices as warpgeo: {same}")
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
