"""Example: farthest point sampling of a mesh surface, and how well it covers the surface.

Shows ``warpgeo.farthest_point_sampling`` with ``return_distances=True`` and ``warpgeo.gather_points``.
A mesh (a torus by default, or any file trimesh can read via ``--mesh``) is sampled densely with trimesh;
FPS then picks K points. The distance FPS reports for its k-th pick is the *coverage radius* of the first
k picks (the farthest any surface sample is from its nearest pick), so one FPS call gives the whole
radius-vs-K curve. Random subsets are scored by brute force for comparison. The script prints the table
and saves a picture: FPS samples, random samples, and coverage radius vs K.

    python examples/point_sampling.py                            # ~7 s on 2 CPU cores
    python examples/point_sampling.py --num-surface 200000 --max-k 8192 --device cuda
    python examples/point_sampling.py --mesh bunny.obj
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from warpgeo import demos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device"
    )
    parser.add_argument("--mesh", default=None, help="mesh file to sample (default: a torus)")
    parser.add_argument(
        "--num-surface", type=int, default=20000, help="dense surface samples (default: 20000)"
    )
    parser.add_argument("--max-k", type=int, default=1024, help="largest K (default: 1024)")
    parser.add_argument("--show-k", type=int, default=256, help="K in the scatter plots (default: 256)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smallest settings (for tests)")
    parser.add_argument("--out", default="point_sampling.png", help="output picture")
    args = parser.parse_args(argv)
    if args.quick:  # smaller sizes; flags given explicitly still win
        parser.set_defaults(num_surface=3000, max_k=128, show_k=64)
        args = parser.parse_args(argv)

    t0 = time.perf_counter()
    result = demos.run_point_sampling(
        mesh=args.mesh,
        num_surface=args.num_surface,
        max_k=args.max_k,
        show_k=args.show_k,
        seed=args.seed,
        device=args.device,
        print_table=True,
    )
    path = demos.plot_point_sampling(result, args.out)
    ratio = result.random_radius[-1] / result.fps_radius[-1]
    print(f"K = {result.ks[-1]}: random sampling leaves gaps {ratio:.2f}x as wide as FPS")
    print(f"saved {path}  ({time.perf_counter() - t0:.1f} s on {args.device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
