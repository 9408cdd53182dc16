"""Chamfer distance: warpgeo.chamfer_distance against ``torch.cdist`` + ``min`` (pytorch3d-style brute force).

    python benchmarks/bench_chamfer.py                 # CPU: B=8, N=M=16384; B=8, N=M=2048; B=1, N=M=65536
    python benchmarks/bench_chamfer.py --quick         # B=2, N=M=2048, fewer repeats (seconds)
    python benchmarks/bench_chamfer.py --device cuda

Both clouds uniform in the unit cube, float32, squared L2 distances, loss = mean both ways (the default).
Peers, timed in the same run: ``torch.cdist`` + ``min`` both ways, in chunks of at most 1 GiB of distances
(the whole ``(B, N, M)`` matrix too where it takes at most ``--full-matrix-gib``); scipy's ``cKDTree`` (tree
built and queried both ways, all cores) where installed. Forward + backward is timed for warpgeo and, where
its saved distance matrices fit, for the unchunked torch peer. Peak memory is what a call adds to the process:
on CUDA ``torch.cuda.max_memory_allocated``, on the CPU the peak resident set size of a fresh process. Times are
medians with warm-up (``--warmup`` calls) excluded (warpgeo and torch: CUDA-event times on CUDA, wall times on
the CPU); ratios are to warpgeo (>1: slower than warpgeo).

``--json PATH`` writes flat ``{key: ms}`` figures per case: ``chamfer_b8_n2048_fwd_ms``,
``chamfer_b8_n2048_fwd_bwd_ms``, ``cdist_min_b8_n2048_ms`` (the 1 GiB-chunked peer, issue 36's key),
``cdist_min_whole_b8_n2048_ms`` and ``cdist_min_whole_b8_n2048_fwd_bwd_ms`` where the whole matrix fits
(``_n<N>_m<M>`` where N != M); a peer that did not run has no key.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

import torch
from _common import (
    add_size_arguments,
    device_time,
    fill_sizes,
    import_peer,
    print_header,
    report,
    size_key,
    sync,
    timeit,
    write_figures,
)

import warpgeo

_CHUNK_BYTES = 1 << 30


def make_inputs(batch, n, m, *, device, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, n, 3, generator=gen).to(device=device, dtype=dtype)
    y = torch.rand(batch, m, 3, generator=gen).to(device=device, dtype=dtype)
    return x, y


def torch_chamfer_chunked(x, y):
    """mean_i min_j |x_i - y_j|^2 + mean_j min_i |x_i - y_j|^2 with cdist over row chunks of x."""
    rows = max(1, _CHUNK_BYTES // (4 * y.shape[1] * x.shape[0]))
    best_yx = None
    mins_xy = []
    for s in range(0, x.shape[1], rows):
        d = torch.cdist(x[:, s : s + rows], y).square_()
        mins_xy.append(d.amin(dim=2))
        part = d.amin(dim=1)
        best_yx = part if best_yx is None else torch.minimum(best_yx, part)
    return torch.cat(mins_xy, 1).mean() + best_yx.mean()


def torch_chamfer(x, y):
    d = torch.cdist(x, y).square()
    return d.amin(dim=2).mean() + d.amin(dim=1).mean()


def scipy_chamfer(spatial, xn, yn):
    total = 0.0
    for b in range(len(xn)):
        dxy = spatial.cKDTree(yn[b]).query(xn[b], 1, workers=-1)[0]
        dyx = spatial.cKDTree(xn[b]).query(yn[b], 1, workers=-1)[0]
        total += (dxy**2).mean() + (dyx**2).mean()
    return total / len(xn)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _fwd_bwd(fn, x, y):
    def run():
        xg, yg = x.detach().requires_grad_(True), y.detach().requires_grad_(True)
        fn(xg, yg).backward()

    return run


#: What the memory column measures, by name: a function of the inputs returning the call to measure.
CALLS = {
    "warpgeo.chamfer_distance": lambda x, y: lambda: warpgeo.chamfer_distance(x, y).loss,
    "torch.cdist + min (1 GiB chunks)": lambda x, y: lambda: torch_chamfer_chunked(x, y),
    "torch.cdist + min (whole matrix)": lambda x, y: lambda: torch_chamfer(x, y),
    "warpgeo.chamfer_distance fwd+bwd": lambda x, y: _fwd_bwd(
        lambda a, b: warpgeo.chamfer_distance(a, b).loss, x, y
    ),
    "torch.cdist + min (whole matrix) fwd+bwd": lambda x, y: _fwd_bwd(torch_chamfer, x, y),
}


def peak_memory(name: str, batch: int, n: int, m: int, device) -> int:
    """Bytes one call adds to the process at its peak. CUDA: ``torch.cuda.max_memory_allocated``. CPU: a fresh
    process (no allocator cache left by an earlier call), the call warmed up on small clouds, then the peak
    resident set size during the call (``VmHWM``, reset before it) less the resident size before it."""
    device = torch.device(device)
    if device.type == "cuda":
        call = CALLS[name](*make_inputs(batch, n, m, device=device))
        call()
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        call()
        sync(device)
        return torch.cuda.max_memory_allocated(device) - base
    command = [sys.executable, __file__, "--peak-of", name, "--sizes", f"{batch}:{n}:{m}", "--device", "cpu"]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def _high_water() -> int:
    """The process's peak resident set size (``VmHWM``), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _peak_child(name: str, batch: int, n: int, m: int) -> None:
    CALLS[name](*make_inputs(1, 300, 300, device="cpu"))()  # Warp modules loaded, torch warmed up
    call = CALLS[name](*make_inputs(batch, n, m, device="cpu"))
    try:  # reset the high-water mark to the current size (Linux), so only the call's peak is left
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    base = _rss()
    call()
    print(max(_high_water() - base, 0))


def _row(name, calls, x, y, args, device, batch, n, m):
    """(time row, memory row) of ``CALLS[calls]``, shown as ``name``."""
    time.sleep(1.0)  # idle workers of the previous row (torch's OpenMP / MKL threads spin) go to sleep
    seconds = device_time(CALLS[calls](x, y), device, repeat=args.repeat, warmup=args.warmup)
    return (name, seconds), (name, peak_memory(calls, batch, n, m, device))


#: the ``--json`` key of each row (before its size and, for fwd+bwd, ``_fwd_bwd``)
_KEYS = {
    "warpgeo.chamfer_distance": "chamfer_{size}_fwd",
    "torch.cdist + min (1 GiB chunks)": "cdist_min_{size}",
    "torch.cdist + min (whole matrix)": "cdist_min_whole_{size}",
}


def bench_case(args, batch, n, m, scipy_spatial, figures: dict) -> None:
    device = torch.device(args.device)
    x, y = make_inputs(batch, n, m, device=device)
    shape = f"B={batch}, N={n}, M={m}"
    full_bytes = 4 * batch * n * m
    limit = args.full_matrix_gib * (1 << 30)
    ours, chunked, whole = (
        "warpgeo.chamfer_distance",
        "torch.cdist + min (1 GiB chunks)",
        "torch.cdist + min (whole matrix)",
    )

    # warpgeo is timed first: on the CPU, torch's OpenMP / MKL workers keep spinning after a large cdist and
    # take cores from the Warp launch threads of whatever runs next (a peer timed first would be flattered)
    expected = warpgeo.chamfer_distance(x, y).loss
    rows, memory = [], []
    for name in (ours, chunked) + ((whole,) if full_bytes <= limit else ()):
        row, mem = _row(name, name, x, y, args, device, batch, n, m)
        rows.append(row)
        memory.append(mem)
        if name == chunked:  # the peers must agree before their times mean anything
            got = torch_chamfer_chunked(x, y)
            torch.testing.assert_close(got, expected, rtol=2e-3, atol=1e-7)  # cdist's |a|^2+|b|^2-2ab
    size = size_key(b=batch, n=n) if n == m else size_key(b=batch, n=n, m=m)
    for name, seconds in rows:
        figures[_KEYS[name].format(size=size) + "_ms"] = seconds * 1e3
    if full_bytes > limit:
        print(f"\n{whole} skipped at {shape}: {full_bytes / 2**30:.1f} GiB of distances")
    if scipy_spatial is not None and device.type == "cpu":
        xn, yn = x.numpy(), y.numpy()
        ref = scipy_chamfer(scipy_spatial, xn, yn)
        assert abs(ref - float(expected)) <= 1e-4 * abs(ref) + 1e-9, (ref, float(expected))
        seconds = timeit(
            lambda: scipy_chamfer(scipy_spatial, xn, yn), device, repeat=args.repeat, warmup=args.warmup
        )
        rows.append(("scipy cKDTree (build + query)", seconds))
    report(f"chamfer forward, {shape}, float32", rows, ours)
    _report_memory(memory)

    rows, memory = [], []
    # autograd keeps cdist's result for its backward: 2 x the matrix at the peak
    names = (ours,) + ((whole,) if 2 * full_bytes <= limit else ())
    for name in names:
        row, mem = _row(name, f"{name} fwd+bwd", x, y, args, device, batch, n, m)
        rows.append(row)
        memory.append(mem)
        key = "chamfer_{size}_fwd_bwd" if name == ours else _KEYS[name] + "_fwd_bwd"
        figures[key.format(size=size) + "_ms"] = row[1] * 1e3
    if 2 * full_bytes > limit:
        print(
            f"\ntorch forward + backward skipped at {shape}: it keeps {full_bytes / 2**30:.1f} GiB of distances"
        )
    report(f"chamfer forward + backward, {shape}, float32", rows, ours)
    _report_memory(memory)


def _report_memory(rows) -> None:
    base = dict(rows)["warpgeo.chamfer_distance"]
    print(f"  {'peak memory added':<34} {'MiB':>12} {'x warpgeo':>16}")
    for name, nbytes in rows:
        ratio = nbytes / base if base > 0 else float("nan")
        print(f"  {name:<34} {nbytes / 2**20:>12.1f} {ratio:>16.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_arguments(parser)
    parser.add_argument("--repeat", type=int, default=None)
    # the first calls at a new size run slower on the CPU (page faults of fresh buffers, thread start-up)
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before each row")
    parser.add_argument(
        "--full-matrix-gib",
        type=float,
        default=4.0,
        help="largest whole (B, N, M) float32 matrix the torch peer may form",
    )
    parser.add_argument("--sizes", default=None, help="B:N:M,... (default: by --quick)")
    parser.add_argument("--peak-of", default=None, help=argparse.SUPPRESS)  # the child of peak_memory()
    parser.add_argument("--json", default=None, help="write the figures to this JSON file (flat, ms)")
    args = parser.parse_args(argv)
    if args.peak_of is not None:
        _peak_child(args.peak_of, *(int(v) for v in args.sizes.split(":")))
        return
    fill_sizes(args, repeat=(5, 2), sizes=("8:16384:16384,8:2048:2048,1:65536:65536", "2:2048:2048"))
    print_header(args.device, f"torch threads {torch.get_num_threads()}")
    scipy_mod = import_peer("scipy", "scipy")
    spatial = None
    if scipy_mod is not None:
        import scipy.spatial as spatial
    figures: dict[str, float] = {}
    for case in args.sizes.split(","):
        batch, n, m = (int(v) for v in case.split(":"))
        bench_case(args, batch, n, m, spatial, figures)
    write_figures(args.json, {key: round(value, 4) for key, value in figures.items()})


if __name__ == "__main__":
    main()
