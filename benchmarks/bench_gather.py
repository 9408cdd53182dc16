"""Point-feature gather: warpgeo.gather_points against torch.gather on the same (B, C, N) layout.

    python benchmarks/bench_gather.py                       # CPU, B=8, C=64, N=16384, M=4096; K=1 and 32
    python benchmarks/bench_gather.py --device cuda --dtype float16
    python benchmarks/bench_gather.py --quick               # B=2, C=16, N=4096, M=1024; K=1 and 8

torch.gather runs on ``features`` (B, C, N) with the index expanded (a view) to (B, C, M*K), so both read
and write the same layout; its backward is torch's scatter_add. The peers are timed in turn, one call each
per round (a shared machine's load falls on all of them alike), warm-up excluded; times are medians over
the rounds, ratios are to torch.gather (>1: slower), and the load average is printed with each table.
Forward and forward+backward (random upstream gradient) are timed, the latter for warpgeo's default and
deterministic backward; the forward also with value checks off.

``--json PATH`` writes flat figures, µs per eager call (wall medians, the device synchronised after each
call: on CUDA the host time plus the few µs of the kernel): ``gather_fwd_eager_host_us`` (value checks off),
``gather_fwd_eager_checks_on_host_us``, ``torch_gather_fwd_eager_host_us`` and ``..._fwd_bwd_eager_...``
at the default sizes (issue 36's keys); other sizes, dtypes or groups put them in the key
(``gather_b2_c16_n4096_m1024_k8_fwd_eager_host_us``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from _common import add_size_arguments, fill_sizes, print_header, report, size_key, sync, write_figures

import warpgeo


def make_inputs(batch, channels, points, samples, group, *, dtype, device, seed=0, index_dtype=torch.int64):
    """features (B, C, N), idx (B, M) (group 1) or (B, M, K), and an upstream gradient for the output."""
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, channels, points, generator=gen).to(device=device, dtype=dtype)
    shape = (batch, samples) if group == 1 else (batch, samples, group)
    idx = torch.randint(0, points, shape, generator=gen).to(device=device, dtype=index_dtype)
    grad = torch.randn(batch, channels, *shape[1:], generator=gen).to(device=device, dtype=dtype)
    return features.requires_grad_(), idx, grad


def in_turn(fns: dict, device, repeat: int, warmup: int = 1) -> list[tuple[str, float]]:
    """``[(name, median seconds)]``: each round calls every function once, in turn."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    sync(device)
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return [(name, statistics.median(t)) for name, t in times.items()]


def load() -> str:
    return "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())


def figure_prefix(args, group: int, dtype: torch.dtype) -> str:
    """``gather`` at issue 36's sizes (B=8, C=64, N=16384, M=4096, float32, int64, K=1), else with them."""
    sizes = (args.batch, args.channels, args.points, args.samples)
    if (
        sizes == (8, 64, 16384, 4096)
        and dtype == torch.float32
        and args.index_dtype == "int64"
        and group == 1
    ):
        return "gather"
    b, c, n, m = sizes
    key = "gather_" + size_key(b=b, c=c, n=n, m=m) + ("" if group == 1 else f"_k{group}")
    if dtype != torch.float32:
        key += "_" + str(dtype).replace("torch.", "")
    return key + ("_int32" if args.index_dtype == "int32" else "")


def bench(args, group: int, device: torch.device, dtype: torch.dtype, figures: dict) -> None:
    b, c, n, m = args.batch, args.channels, args.points, args.samples
    index_dtype = getattr(torch, args.index_dtype)
    features, idx, grad = make_inputs(b, c, n, m, group, dtype=dtype, device=device, index_dtype=index_dtype)
    flat = idx.reshape(b, 1, -1).expand(b, c, -1).to(torch.int64)  # torch.gather takes int64 only

    def torch_forward():
        return torch.gather(features, 2, flat)

    def warpgeo_forward(deterministic=False):
        return warpgeo.gather_points(features, idx, deterministic=deterministic)

    def warpgeo_forward_unchecked():
        with warpgeo.value_checks(False):
            return warpgeo.gather_points(features, idx)

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
    shape = f"B={b}, C={c}, N={n}, {layout} {args.index_dtype}, {str(dtype).replace('torch.', '')}"
    before = load()
    with torch.no_grad():
        rows = in_turn(
            {
                "warpgeo.gather_points": warpgeo_forward,
                "warpgeo (value checks off)": warpgeo_forward_unchecked,
                "torch.gather": torch_forward,
            },
            device,
            args.repeat,
        )
    report(f"forward, {shape}; {before}, after: {load()}", rows, "torch.gather")
    key = figure_prefix(args, group, dtype)
    times = dict(rows)
    figures[f"{key}_fwd_eager_host_us"] = times["warpgeo (value checks off)"] * 1e6
    figures[f"{key}_fwd_eager_checks_on_host_us"] = times["warpgeo.gather_points"] * 1e6
    figures[f"torch_{key}_fwd_eager_host_us"] = times["torch.gather"] * 1e6
    before = load()
    rows = in_turn(
        {
            "warpgeo.gather_points": both(warpgeo_forward),
            "warpgeo (deterministic=True)": both(warpgeo_forward, deterministic=True),
            "torch.gather": both(torch_forward),
        },
        device,
        args.repeat,
    )
    report(f"forward + backward, {shape}; {before}, after: {load()}", rows, "torch.gather")
    times = dict(rows)
    figures[f"{key}_fwd_bwd_eager_checks_on_host_us"] = times["warpgeo.gather_points"] * 1e6
    figures[f"torch_{key}_fwd_bwd_eager_host_us"] = times["torch.gather"] * 1e6


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
    parser.add_argument("--index-dtype", default="int64", choices=["int64", "int32"], help="dtype of idx")
    parser.add_argument("--repeat", type=int, default=None, help="timed rounds (default 9; 3 with --quick)")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file (flat, µs)")
    args = parser.parse_args(argv)
    fill_sizes(
        args,
        batch=(8, 2),
        channels=(64, 16),
        points=(16384, 4096),
        samples=(4096, 1024),
        group=([1, 32], [1, 8]),
        repeat=(9, 3),
    )
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    print_header(device)
    print(f"peer torch.gather (torch {torch.__version__})")
    figures: dict[str, float] = {}
    for group in args.group:
        bench(args, group, device, dtype, figures)
    write_figures(args.json, {key: round(value, 2) for key, value in figures.items()})


if __name__ == "__main__":
    main()
