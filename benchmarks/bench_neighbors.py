"""Neighbour queries: warpgeo.knn (k=16) and warpgeo.ball_query (r=0.1, k=32) against their peers.

    python benchmarks/bench_neighbors.py                    # CPU: B=8, N=16384 -> M=4096; B=1, N=1M -> M=65536
    python benchmarks/bench_neighbors.py --quick            # B=2, N=4096 -> M=1024; B=1, N=65536 -> M=4096
    python benchmarks/bench_neighbors.py --device cuda
    python benchmarks/bench_neighbors.py --device cuda --cases 8x2048x512 8x16384x4096 --json $OUT/nb.json

Points are uniform in the unit cube, the queries are the first M points (FPS output has no order either).
Every implementation answers from scratch each call: warpgeo builds its grid, the KD-trees are built.
Peers: ``torch.cdist`` + ``topk`` (query chunks of at most 1 GiB of distances; skipped where B*M*N > 2**33,
minutes of work), scipy's ``cKDTree`` (all cores), ``pykdtree`` and Open3D's ``KDTreeFlann`` (one query at a
time from Python: slow, shown for completeness); missing peers are skipped with a line. For the ball
query, the tree peers answer "the k nearest within r" (``distance_upper_bound`` / ``search_hybrid``), a
search of the same cost as pointnet2's "first k in index order within r" that warpgeo and the torch peer
return. Times are medians with warm-up excluded (warpgeo and torch: CUDA-event times on CUDA, wall times on
the CPU; the tree peers: wall times); ratios are to warpgeo (>1: slower than warpgeo).

``--json PATH`` writes flat ``{key: ms}`` figures: ``knn_b8_n2048_m512_k16_ms`` (issue 36's small case, the
fixed cost per call), ``torch_knn_...``, ``ball_query_b8_n2048_m512_k32_ms``, ``torch_ball_query_...`` for
each case; a peer that did not run has no key.
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch
from _common import (
    add_size_arguments,
    device_time,
    fill_sizes,
    import_peer,
    print_header,
    report,
    size_key,
    timeit,
    write_figures,
)

import warpgeo

_CHUNK_BYTES = 1 << 30
_TORCH_MAX_WORK = 1 << 33


def make_inputs(batch, points, queries, *, device, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    p = torch.rand(batch, points, 3, generator=gen).to(device=device, dtype=dtype)
    return p[:, :queries].contiguous(), p


def _torch_chunks(q, p):
    rows = max(1, _CHUNK_BYTES // (4 * p.shape[1] * q.shape[0]))
    return [slice(s, s + rows) for s in range(0, q.shape[1], rows)]


def torch_knn(q, p, k):
    out = [torch.cdist(q[:, s], p).topk(k, dim=-1, largest=False) for s in _torch_chunks(q, p)]
    return torch.cat([o.values for o in out], 1), torch.cat([o.indices for o in out], 1)


def torch_ball(q, p, r, k):
    n = p.shape[1]
    outs = []
    for s in _torch_chunks(q, p):
        d = torch.cdist(q[:, s], p)
        key = torch.where(d <= r, torch.arange(n, device=p.device, dtype=torch.int32), n)
        first = key.topk(k, dim=-1, largest=False).values
        outs.append(torch.where(first < n, first, -1))
    return torch.cat(outs, 1)


def bench_case(args, batch, n, m, peers, figures: dict) -> None:
    device = torch.device(args.device)
    q, p = make_inputs(batch, n, m, device=device)
    qn, pn = q.cpu().numpy(), p.cpu().numpy()
    k_knn, r, k_ball = args.k, args.radius, args.ball_k
    shape = f"B={batch}, N={n}, M={m}"

    # the peers must agree before their times mean anything (distances: ties may order differently)
    ours = warpgeo.knn(q, p, k_knn)
    scipy_mod = peers.get("scipy")
    if scipy_mod is not None:
        ref = scipy_mod.spatial.cKDTree(pn[0]).query(qn[0], k_knn, workers=-1)[0]
        np.testing.assert_allclose(ours.dists[0].cpu().numpy(), ref, rtol=1e-5, atol=1e-6)

    work = batch * m * n
    torch_fits = work <= _TORCH_MAX_WORK
    if not torch_fits:
        print(f"\ntorch.cdist + topk skipped at {shape}: B*M*N = 2**{math.log2(work):.1f} (minutes of work)")

    size = size_key(b=batch, n=n, m=m)
    rows = [("warpgeo.knn", device_time(lambda: warpgeo.knn(q, p, k_knn), device, repeat=args.repeat))]
    figures[f"knn_{size}_k{k_knn}_ms"] = rows[-1][1] * 1e3
    if torch_fits:
        # cdist's |a|^2 + |b|^2 - 2ab form is off by ~1e-3 near 0 (a point's distance to itself)
        torch.testing.assert_close(torch_knn(q, p, k_knn)[0], ours.dists, rtol=1e-4, atol=2e-3)
        rows.append(
            ("torch.cdist + topk", device_time(lambda: torch_knn(q, p, k_knn), device, repeat=args.repeat))
        )
        figures[f"torch_knn_{size}_k{k_knn}_ms"] = rows[-1][1] * 1e3
    rows += _tree_rows(peers, qn, pn, k_knn, None, args.repeat, device)
    report(f"kNN k={k_knn}, {shape}, float32", rows, "warpgeo.knn")

    ours_ball = warpgeo.ball_query(q, p, r, k_ball)
    rows = [
        (
            "warpgeo.ball_query",
            device_time(lambda: warpgeo.ball_query(q, p, r, k_ball), device, repeat=args.repeat),
        )
    ]
    figures[f"ball_query_{size}_k{k_ball}_ms"] = rows[-1][1] * 1e3
    if torch_fits:
        agree = (torch_ball(q, p, r, k_ball).long() == ours_ball).float().mean().item()
        assert agree > 0.999, agree  # cdist rounding can flip points right on the sphere
        rows.append(
            (
                "torch.cdist + mask + topk",
                device_time(lambda: torch_ball(q, p, r, k_ball), device, repeat=args.repeat),
            )
        )
        figures[f"torch_ball_query_{size}_k{k_ball}_ms"] = rows[-1][1] * 1e3
    rows += _tree_rows(peers, qn, pn, k_ball, r, args.repeat, device)
    report(f"ball query r={r}, k={k_ball}, {shape}, float32", rows, "warpgeo.ball_query")


def _tree_rows(peers, qn, pn, k, radius, repeat, device):
    """(name, seconds) for each KD-tree peer: build + query of every cloud of the batch."""
    bound = np.inf if radius is None else radius
    rows = []
    scipy_mod = peers.get("scipy")
    if scipy_mod is not None:

        def run_scipy():
            for b in range(len(pn)):
                scipy_mod.spatial.cKDTree(pn[b]).query(qn[b], k, distance_upper_bound=bound, workers=-1)

        rows.append(("scipy cKDTree", timeit(run_scipy, device, repeat=repeat)))
    pykdtree = peers.get("pykdtree")
    if pykdtree is not None:

        def run_pykdtree():
            for b in range(len(pn)):
                pykdtree.KDTree(pn[b]).query(qn[b], k, distance_upper_bound=bound)

        rows.append(("pykdtree", timeit(run_pykdtree, device, repeat=repeat)))
    o3d = peers.get("open3d")
    if o3d is not None:

        def run_open3d():
            for b in range(len(pn)):
                cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pn[b].astype(np.float64)))
                tree = o3d.geometry.KDTreeFlann(cloud)
                for x in qn[b].astype(np.float64):
                    if radius is None:
                        tree.search_knn_vector_3d(x, k)
                    else:
                        tree.search_hybrid_vector_3d(x, radius, k)

        rows.append(("open3d KDTreeFlann", timeit(run_open3d, device, repeat=max(1, repeat // 3))))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument("--k", type=int, default=16, help="kNN neighbours (16)")
    parser.add_argument("--radius", type=float, default=0.1, help="ball radius (0.1)")
    parser.add_argument("--ball-k", type=int, default=32, help="ball query neighbours (32)")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs (default 5; 2 with --quick)")
    parser.add_argument(
        "--cases", type=_case, nargs="+", default=None, help="BxNxM sizes (default: by --quick)"
    )
    parser.add_argument("--json", default=None, help="write the figures to this JSON file (flat, ms)")
    args = parser.parse_args(argv)
    fill_sizes(args, repeat=(5, 2))
    print_header(args.device)
    peers = {
        "scipy": import_peer("scipy.spatial", "scipy"),
        "pykdtree": import_peer("pykdtree.kdtree", "pykdtree"),
        "open3d": import_peer("open3d", "open3d", " (one query per Python call)"),
    }
    if peers["scipy"] is not None:
        import scipy

        peers["scipy"] = scipy
    cases = [(2, 4096, 1024), (1, 65536, 4096)] if args.quick else [(8, 16384, 4096), (1, 1 << 20, 65536)]
    figures: dict[str, float] = {}
    for batch, n, m in args.cases or cases:
        bench_case(args, batch, n, m, peers, figures)
    write_figures(args.json, {key: round(value, 4) for key, value in figures.items()})


def _case(text: str) -> tuple[int, int, int]:
    try:
        b, n, m = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected BxNxM, e.g. 8x2048x512; got {text!r}") from None
    if min(b, n, m) < 1 or m > n:
        raise argparse.ArgumentTypeError(f"expected B, N, M >= 1 and M <= N; got {text!r}")
    return b, n, m


if __name__ == "__main__":
    main()
