"""Example: farthest point sampling of a mesh surface, and how well it covers the surface.

Shows ``warpgeo.farthest_point_sampling`` with ``return_distances=True`` and ``warpgeo.gather_points``.
A mesh (a torus by default, or any file trimesh can read via ``--mesh``) is sampled densely with trimesh;
FPS then picks K points. The *coverage radius* of K picks is the farthest any surface sample is from its
nearest pick. The distance FPS reports for its k-th pick (to the picks before it) is exactly the coverage
radius of the first k picks, since FPS always picks the worst-covered point next: one FPS call gives the
whole radius-vs-K curve. Random subsets are scored by brute force for comparison. The script prints the
table and saves a picture (needs the ``demo`` extra): FPS samples, random samples, coverage radius vs K.

    python3 examples/point_sampling.py                           # ~5 s on 2 CPU cores
    python3 examples/point_sampling.py --num-surface 200000 --max-k 8192 --device cuda
    python3 examples/point_sampling.py --mesh examples/data/torus.obj
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import trimesh

import warpgeo
from warpgeo import demos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device"
    )
    parser.add_argument(
        "--mesh",
        default=None,
        help="mesh file to sample, as it is (its own frame and size; default: a torus)",
    )
    parser.add_argument(
        "--num-surface", type=int, default=20000, help="dense surface samples (default: 20000)"
    )
    parser.add_argument("--max-k", type=int, default=1024, help="largest K (default: 1024)")
    parser.add_argument("--show-k", type=int, default=256, help="K in the scatter plots (default: 256)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds the surface samples and the random subsets (default: 0)"
    )
    parser.add_argument("--quick", action="store_true", help="smallest settings (for tests)")
    parser.add_argument(
        "--out",
        default="point_sampling.png",
        help="output picture (default: point_sampling.png, in the current folder)",
    )
    args = parser.parse_args(argv)
    if args.quick:  # smaller sizes; flags given explicitly still win
        parser.set_defaults(num_surface=3000, max_k=128, show_k=64)
        args = parser.parse_args(argv)
    if not 1 <= args.show_k <= args.max_k < args.num_surface:
        parser.error("need 1 <= --show-k <= --max-k < --num-surface")
    device = demos.require_device(args.device, "point_sampling.py")  # one line if it is not here
    demos.require_matplotlib("point_sampling.py")

    t0 = time.perf_counter()
    mesh = demos.sampling_mesh()
    if args.mesh:
        try:
            mesh = trimesh.load(args.mesh, force="mesh")
        except Exception as exc:  # trimesh raises many kinds for a file it cannot read: one line
            parser.error(f"--mesh: cannot read {args.mesh!r} ({exc})")
        if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
            parser.error(f"--mesh: {args.mesh!r} holds no triangle mesh")
    dense_np, _ = trimesh.sample.sample_surface(mesh, args.num_surface, seed=args.seed)
    dense = torch.tensor(dense_np, dtype=torch.float32, device=device)  # (N, 3)

    # K_max + 1 picks: the distance of pick k (0-based) is the coverage radius of picks 0..k-1.
    idx, dist = warpgeo.farthest_point_sampling(dense, args.max_k + 1, return_distances=True)  # (K+1,) x2
    fps_curve = dist[1:]  # fps_curve[k - 1]: coverage radius of the first k picks
    # gather_points takes features (B, C, N): here the coordinates are the C = 3 feature channels.
    fps_points = warpgeo.gather_points(dense.T[None], idx[None, : args.show_k])[0].T  # (show_k, 3)

    order = torch.randperm(args.num_surface, generator=torch.Generator().manual_seed(args.seed))
    order = order.to(dense.device)
    ks = demos.sampling_ks(args.max_k)
    random_radius = []
    print(f"{'K':>6}  {'FPS radius':>10}  {'random radius':>13}  {'random / FPS':>12}")
    for k in ks:
        fps_r = fps_curve[k - 1].item()
        random_radius.append(demos.coverage_radius(dense, dense[order[:k]]))
        print(f"{k:6d}  {fps_r:10.4f}  {random_radius[-1]:13.4f}  {random_radius[-1] / fps_r:12.2f}")

    result = demos.PointSamplingResult(
        dense=dense_np,
        fps_points=fps_points.cpu().numpy(),
        random_points=dense[order[: args.show_k]].cpu().numpy(),
        fps_curve=fps_curve.double().cpu().numpy(),
        ks=ks,
        random_radius=random_radius,
        name=os.path.basename(args.mesh) if args.mesh else "a torus",
    )
    path = demos.plot_point_sampling(result, args.out)
    ratio = random_radius[-1] / fps_curve[ks[-1] - 1].item()
    print(f"K = {ks[-1]}: random sampling leaves gaps {ratio:.2f}x as wide as FPS")
    print(f"saved {path}  ({time.perf_counter() - t0:.1f} s on {device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
