"""Farthest point sampling: warpgeo against torch-fps, a plain-torch loop, fpsample and a numpy reference.

    python benchmarks/bench_fps.py                        # CPU, B=1, N=100k, K=4096
    python benchmarks/bench_fps.py --device cuda --batch 1 8
    python benchmarks/bench_fps.py --quick                # B=1, N=10k, K=512: seconds
    python benchmarks/bench_fps.py --device cuda --cases 1x100000x4096 8x100000x4096 32x8192x512 \
        --designs --no-numpy --no-torch-loop --json $OUT/fps.json      # what gpu_check runs on a GPU

``--designs`` times each of warpgeo's CUDA designs, forced (``warpgeo.fps._FORCED_DESIGN``), in the same
run: ``strip`` (one block per cloud, its distances in the lanes' registers; clouds of at most 8192 points, the
many-small-clouds case ``32x8192x512`` of issue 49, where torch-fps is the peer to beat; ``strip held``: its
variant with the coordinates in registers too), ``block`` (one block
per cloud, the cloud read from memory each step), ``steps`` (a group of blocks per cloud, a launch per step; also
replayed from a CUDA graph), ``persistent`` (the same steps in one launch, a group barrier between two), and
the design the size chooses (``auto``); each one's indices are checked against auto's. On the CPU it runs
CUDA's algorithms on CPU tensors (a smoke test of the flow: Warp's CPU blocks, not a timing). ``--json``
writes the figures (CUDA-event medians in ms on CUDA): ``fps_b{B}_n{N}_k{K}_ms`` (auto),
``fps_b{B}_n{N}_k{K}_{design}_ms``, ``torch_fps_b{B}_n{N}_k{K}_ms`` and ``..._designs_agree``.

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
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
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
    parser.add_argument(
        "--cases",
        type=_case,
        nargs="+",
        default=None,
        help="BxNxK sizes (instead of --batch/--points/--samples)",
    )
    parser.add_argument("--repeat", type=int, default=None, help="timed runs (default 3; 2 with --quick)")
    parser.add_argument("--peers-on-cpu", action="store_true", help="also time the CPU peers for a CUDA run")
    parser.add_argument("--no-numpy", action="store_true", help="skip the (slow) numpy reference")
    parser.add_argument("--no-torch-loop", action="store_true", help="skip the (slow) plain-torch loop")
    parser.add_argument("--no-cold-start", action="store_true", help="skip the cold-start figure (CPU)")
    parser.add_argument("--designs", action="store_true", help="A/B of warpgeo's CUDA designs, forced")
    parser.add_argument("--json", type=str, default=None, help="write the figures to this JSON file")
    args = parser.parse_args(argv)
    fill_sizes(args, points=(100_000, 10_000), samples=(4096, 512), repeat=(3, 2))
    device = torch.device(args.device)
    cases = args.cases or [(batch, args.points, args.samples) for batch in args.batch]
    shown = ", ".join(f"B={b} N={n} K={k}" for b, n, k in cases)
    print_header(device, shown)

    peers = {
        "torch_fps": import_peer("torch_fps", "torch-fps"),
        "fpsample": import_peer("fpsample", "fpsample", " (on the CPU)"),
    }

    if device.type == "cpu" and not args.no_cold_start:
        cold_start()
    figures: dict[str, float | bool] = {}
    for batch, n, k in cases:
        figures.update(bench_batch(batch, n, k, args, device, peers))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
        print(f"\nwrote {args.json}")


def _case(text: str) -> tuple[int, int, int]:
    try:
        b, n, k = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected BxNxK, e.g. 1x100000x4096; got {text!r}") from None
    return b, n, k


#: fpsample's functions (every one it has), as the rows they are reported under. The vanilla one is the
#: exact greedy order; the bucket ones are QuickFPS (the same order up to float32 ties); the NPDU ones update
#: only a window of nearest points (approximate).
FPSAMPLE_VARIANTS = {
    "fpsample.fps_sampling": ("fps_sampling", {}),
    "fpsample.bucket_fps_kdline (h=7)": ("bucket_fps_kdline_sampling", {"h": 7}),
    "fpsample.bucket_fps_kdline (h=9)": ("bucket_fps_kdline_sampling", {"h": 9}),
    "fpsample.bucket_fps_kdtree": ("bucket_fps_kdtree_sampling", {}),
    "fpsample.fps_npdu_kdtree (approx.)": ("fps_npdu_kdtree_sampling", {}),
}


def round_robin(fns: dict, device: torch.device, *, repeat: int) -> dict[str, float]:
    """Median wall time of each function, timed in turn (one run of each per round) after one warm-up."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(repeat):
        for name, fn in fns.items():
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


_COLD_START = """
import time
t0 = time.perf_counter()
import torch, warpgeo
import torch._dynamo  # what torch itself loads on any custom op's first call, timed apart
t1 = time.perf_counter()
warpgeo.farthest_point_sampling(torch.rand(1, 1000, 3), 16)
t2 = time.perf_counter()
warpgeo.farthest_point_sampling(torch.rand(1, 100_000, 3), 256)
t3 = time.perf_counter()
print(f"{t1 - t0:.2f} {t2 - t1:.2f} {t3 - t2:.2f}")
"""


def cold_start() -> None:
    """The first FPS calls of a fresh process whose Warp kernel cache is empty (a new temporary directory)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, WARP_CACHE_PATH=cache)
        run = subprocess.run(
            [sys.executable, "-c", _COLD_START], env=env, capture_output=True, text=True, check=False
        )
    if run.returncode != 0:
        print(f"cold start: the child failed: {run.stderr[-500:]}")
        return
    imports, small, large = (float(x) for x in run.stdout.split())
    print(
        f"cold start (empty Warp kernel cache): first FPS call {small:.2f} s (N=1000, the small-cloud kernel), "
        f"first large call {large:.2f} s (N=100k, the tree kernel), after {imports:.2f} s of imports "
        "(torch, warpgeo, torch._dynamo)"
    )


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


def bench_batch(
    batch: int, n: int, k: int, args: argparse.Namespace, device: torch.device, peers: dict
) -> dict[str, float | bool]:
    """Every row of one size; returns its figures for ``--json`` (ms)."""
    gen = torch.Generator().manual_seed(0)
    points = torch.rand(batch, n, 3, generator=gen).to(device)
    clouds = [c.numpy() for c in points.cpu()]
    name = f"b{batch}_n{n}_k{k}"
    figures: dict[str, float | bool] = {}
    rows = [
        (
            "warpgeo",
            timeit(lambda: warpgeo.farthest_point_sampling(points, k), device, repeat=args.repeat),
        )
    ]
    ours_t = warpgeo.farthest_point_sampling(points, k)
    ours = ours_t.cpu().numpy()
    print(f"\nB={batch}, N={n}, K={k}:")
    if args.designs:
        timed, agree = time_designs(points, k, device, repeat=args.repeat)
        rows[0] = ("warpgeo", timed.pop("auto") / 1e3)
        figures[f"fps_{name}_ms"] = rows[0][1] * 1e3
        for design, ms in timed.items():
            rows.append((f"warpgeo, {design}", ms / 1e3))
            figures[f"fps_{name}_{design.replace(' ', '_')}_ms"] = ms
        figures[f"fps_{name}_designs_agree"] = agree
    else:
        figures[f"fps_{name}_ms"] = rows[0][1] * 1e3
    torch_fps = peers.get("torch_fps")
    if torch_fps is not None:
        mask = torch.ones(batch, n, dtype=torch.bool, device=device)
        start = torch.zeros(batch, dtype=torch.int64, device=device)

        def run_torch_fps():
            return torch_fps.farthest_point_sampling(points, mask, k, start_idx=start, random_start=False)

        _agreement("torch-fps", run_torch_fps(), ours_t)
        seconds = median_ms(run_torch_fps, device, repeat=args.repeat) / 1e3
        rows.append(("torch-fps", seconds))
        figures[f"torch_fps_{name}_ms"] = seconds * 1e3
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
        print(f"  fpsample vanilla (the exact greedy order) picks the same indices as warpgeo: {same}")
        variants = {
            name: functools.partial(getattr(fpsample, function), **kwargs)
            for name, (function, kwargs) in FPSAMPLE_VARIANTS.items()
        }
        # warpgeo again, run in turn with every variant: on a busy machine each gets the same share of it
        timed = round_robin(
            {"warpgeo (in turn with fpsample)": lambda: warpgeo.farthest_point_sampling(points, k)}
            | {
                name: functools.partial(lambda run: [run(c, k, start_idx=0) for c in clouds], run)
                for name, run in variants.items()
            },
            device,
            repeat=args.repeat,
        )
        # warpgeo's row: the run in turn with fpsample (the ratios compare the same share of the machine)
        rows[0] = ("warpgeo", timed.pop("warpgeo (in turn with fpsample)"))
        rows += list(timed.items())
    if not args.no_numpy and cpu_peers:
        rows.append(
            (
                "numpy reference",
                timeit(lambda: [fps_reference(c, k) for c in clouds], "cpu", repeat=1, warmup=0),
            )
        )
    report(f"farthest point sampling, B={batch}, N={n}, K={k} ({device})", rows, "warpgeo")
    return figures


def median_ms(fn, device: torch.device, *, repeat: int, warmup: int = 1) -> float:
    """Median time of ``fn()`` in ms: CUDA events on CUDA (the GPU's time), the wall clock on the CPU."""
    if device.type != "cuda":
        return timeit(fn, device, repeat=repeat, warmup=warmup) * 1e3
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


@contextlib.contextmanager
def forced_design(design: str | None, device: torch.device):
    """warpgeo's FPS on CUDA's algorithms with ``design`` forced (None: chosen by size); on the CPU, CUDA's
    algorithms on CPU tensors (Warp's CPU blocks)."""
    from warpgeo import _warp, fps

    previous = fps._FORCED_DESIGN
    fps._FORCED_DESIGN = design
    on_cpu = device.type == "cpu"
    wp = _warp.warp()
    blocks = wp.config.enable_cpu_blocks
    if on_cpu:
        _warp.PATHS.cuda_on_cpu = True
        wp.config.enable_cpu_blocks = True
    try:
        yield
    finally:
        fps._FORCED_DESIGN = previous
        if on_cpu:
            _warp.PATHS.cuda_on_cpu = False
            wp.config.enable_cpu_blocks = blocks


#: The designs ``--designs`` times (None: the one the size chooses), by row name.
DESIGNS = {
    "auto": None,
    "strip": "strip",
    "strip held": "strip_held",
    "block": "block",
    "steps": "steps",
    "persistent": "persistent",
}


def time_designs(
    points: torch.Tensor, k: int, device: torch.device, *, repeat: int
) -> tuple[dict[str, float], bool]:
    """Each design's median ms (value checks off; ``steps in a CUDA graph``: the per-step launches captured
    once, replayed), and whether every design picked auto's indices."""
    from warpgeo import fps

    timed: dict[str, float] = {}
    agree = True
    auto = None
    with warpgeo.value_checks(False):
        for row, design in DESIGNS.items():
            if design in ("strip", "strip_held") and points.shape[1] > fps._STRIP_MAX_POINTS:
                continue  # a cloud the registers cannot hold: forced, it would run the block design again
            with forced_design(design, device):
                if row == "auto":
                    print(
                        f"  auto takes the {fps._cuda_design(device, points.shape[0], points.shape[1])[0]} design"
                    )
                got = warpgeo.farthest_point_sampling(points, k)
                auto = got if auto is None else auto
                same = torch.equal(got, auto)
                agree = agree and same
                if not same:
                    print(f"  {row} picks other indices than auto: wrong")
                timed[row] = median_ms(
                    lambda: warpgeo.farthest_point_sampling(points, k), device, repeat=repeat
                )
        if device.type == "cuda":
            with forced_design("steps", device):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    captured = warpgeo.farthest_point_sampling(points, k)
                graph.replay()
                agree = agree and torch.equal(captured, auto)
                timed["steps in a CUDA graph"] = median_ms(graph.replay, device, repeat=repeat)
    print(f"  every design picks the same indices: {agree}")
    return timed, agree


if __name__ == "__main__":
    main()
