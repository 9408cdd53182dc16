"""Point-feature gather: warpgeo.gather_points against torch.gather on the same (B, C, N) layout.

    python benchmarks/bench_gather.py                       # CPU, B=8, C=64, N=16384, M=4096; K=1 and 32
    python benchmarks/bench_gather.py --device cuda --dtype float16
    python benchmarks/bench_gather.py --quick               # B=2, C=16, N=4096, M=1024; K=1 and 8

torch.gather runs on ``features`` (B, C, N) with the index expanded (a view) to (B, C, M*K), so both read
and write the same layout; its backward is torch's scatter_add. Times are medians with warm-up excluded;
ratios are to torch.gather (>1: slower). Forward and forward+backward (random upstream gradient) are timed,
the latter for warpgeo's default and deterministic backward.
"""

from __future__ import annotations

import argparse

import torch
from _common import add_size_arguments, fill_sizes, print_header, report, timeit

import warpgeo


def make_inputs(batch, channels, points, samples, group, *, dtype, device, seed=0):
    """features (B, C, N), idx (B, M) (group 1) or (B, M, K) int64, and an upstream gradient for the output."""
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, channels, points, generator=gen).to(device=device, dtype=dtype)
    shape = (batch, samples) if group == 1 else (batch, samples, group)
    idx = torch.randint(0, points, shape, generator=gen).to(device)
    grad = torch.randn(batch, channels, *shape[1:], generator=gen).to(device=device, dtype=dtype)
    return features.requires_grad_(), idx, grad


def bench(args, group: int, device: torch.device, dtype: torch.dtype) -> None:
    b, c, n, m = args.batch, args.channels, args.points, args.samples
    features, idx, grad = make_inputs(b, c, n, m, group, dtype=dtype, device=device)
    flat = idx.reshape(b, 1, -1).expand(b, c, -1)

    def torch_forward():
        return torch.gather(features, 2, flat)

    def warpgeo_forward(deterministic=False):
        return warpgeo.gather_points(features, idx, deterministic=deterministic)

    def both(forward, **kwargs):
        def run():
            out = forward(**kwargs)
            out.backward(grad.reshape(out.shape))
            features.grad = None

        return run

    # the peers must agree before their times mean anything
    ours = warpgeo_forward()
    torch.testing.assert_close(ours.reshape(b, c, -1), torch_forward(), rtol=0, atol=0)
    ours.backward(grad)
    mine, features.grad = features.grad, None
    torch_forward().backward(grad.reshape(b, c, -1))
    torch.testing.assert_close(mine, features.grad)
    features.grad = None

    layout = f"idx ({b}, {m})" if group == 1 else f"idx ({b}, {m}, {group})"
    shape = f"B={b}, C={c}, N={n}, {layout}, {str(dtype).replace('torch.', '')}"
    with torch.no_grad():
        rows = [
            ("warpgeo.gather_points", timeit(warpgeo_forward, device, repeat=args.repeat)),
            ("torch.gather", timeit(torch_forward, device, repeat=args.repeat)),
        ]
    report(f"forward, {shape}", rows, "torch.gather")
    rows = [
        ("warpgeo.gather_points", timeit(both(warpgeo_forward), device, repeat=args.repeat)),
        (
            "warpgeo (deterministic=True)",
            timeit(both(warpgeo_forward, deterministic=True), device, repeat=args.repeat),
        ),
        ("torch.gather", timeit(both(torch_forward), device, repeat=args.repeat)),
    ]
    report(f"forward + backward, {shape}", rows, "torch.gather")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument("--dtype", default="float32", choices=["float16", "bfloat16", "float32", "float64"])
    parser.add_argument("--batch", type=int, default=None, help="B (default 8; 2 with --quick)")
    parser.add_argument("--channels", type=int, default=None, help="C (default 64; 16 with --quick)")
    parser.add_argument("--points", type=int, default=None, help="N (default 16384; 4096 with --quick)")
    parser.add_argument("--samples", type=int, default=None, help="M (default 4096; 1024 with --quick)")
    parser.add_argument(
        "--group",
        type=int,
        nargs="+",
        default=None,
        help="K; 1 means idx (B, M) (default 1 32; 1 8 with --quick)",
    )
    parser.add_argument("--repeat", type=int, default=None, help="timed runs (default 7; 3 with --quick)")
    args = parser.parse_args(argv)
    fill_sizes(
        args,
        batch=(8, 2),
        channels=(64, 16),
        points=(16384, 4096),
        samples=(4096, 1024),
        group=([1, 32], [1, 8]),
        repeat=(7, 3),
    )
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    print_header(device)
    print(f"peer torch.gather (torch {torch.__version__})")
    for group in args.group:
        bench(args, group, device, dtype)


if __name__ == "__main__":
    main()
