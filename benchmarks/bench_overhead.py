"""Per-call overhead of warpgeo's ops on tiny inputs, beside a tiny torch op, and first-call latency.

A trajectory optimiser or an IK loop calls the collision cost thousands of times a second, and PointNet++
calls FPS and a gather per layer: on small inputs what counts is the Python / dispatcher / launch cost per
call, not the kernel. For each op this times forward + backward (FPS: forward; its indices are not
differentiable) on 64 points or spheres, and a tiny torch op (``(x * 2).sum().backward()`` on a (64, 4)
tensor) in the same run, in alternating rounds; the overhead is the median over the rounds of each round's
difference of medians (its lowest and highest round beside it). Value checks (one device-to-host read per
call) are timed on and off. Then, in fresh processes with a warm Warp kernel cache, the latency of
each op's first call beyond ``import torch`` (``--cold`` also with an empty cache: Warp compiles then).

    python benchmarks/bench_overhead.py                 # CPU
    python benchmarks/bench_overhead.py --device cuda   # CPU-side cost of a launch on CUDA
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

import torch
import trimesh
from _common import add_size_arguments, print_header

import warpgeo

#: the goal of the op-template issue: forward + backward overhead beyond a tiny torch op
GOAL_US = 60.0


def _paired_medians_us(
    fn: Callable[[], object], tiny: Callable[[], object], calls: int, device: torch.device
) -> tuple[float, float, float, tuple[float, float]]:
    """``fn`` beside ``tiny``, each timed call by call in a loop of its own (as a training or optimisation
    loop calls it), in ``_ROUNDS`` alternating rounds so that both see the same machine. Returns, in µs, the
    median call of ``fn`` and of ``tiny`` over all rounds, and the overhead: the median over the rounds of
    each round's difference of medians, with the lowest and highest round (this VM's speed drifts by up to
    2x within minutes: a difference within a round is steadier than one between pooled medians). CUDA: per
    call of a batch of 10 calls, synchronised once."""
    per_round = max(1, calls // _ROUNDS)
    batch = 10 if device.type == "cuda" else 1
    pooled: dict[Callable[[], object], list[float]] = {fn: [], tiny: []}
    differences = []
    for _ in range(_ROUNDS):
        medians = {}
        for f in (fn, tiny):
            for _ in range(max(10, per_round // 10)):  # warm-up: the loop's caches
                f()
            times = []
            for _ in range(max(1, per_round // batch)):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                for _ in range(batch):
                    f()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                times.append((time.perf_counter() - start) / batch)
            pooled[f] += times
            medians[f] = statistics.median(times)
        differences.append((medians[fn] - medians[tiny]) * 1e6)
    return (
        statistics.median(pooled[fn]) * 1e6,
        statistics.median(pooled[tiny]) * 1e6,
        statistics.median(differences),
        (min(differences), max(differences)),
    )


#: Alternating rounds of each case and the tiny torch op.
_ROUNDS = 10


def _cases(device: torch.device) -> dict[str, Callable[[], object]]:
    gen = torch.Generator().manual_seed(0)
    points = torch.rand(1, 64, 3, generator=gen).to(device)
    features = torch.rand(1, 8, 64, generator=gen).to(device).requires_grad_()
    idx = torch.randint(0, 64, (1, 16), generator=gen).to(device)
    world = warpgeo.MeshWorld([trimesh.creation.box((1.0, 1.0, 1.0))], device=device)
    spheres = torch.rand(1, 64, 4, generator=gen) * torch.tensor([2.0, 2.0, 2.0, 0.1])
    spheres[..., :3] -= 1.0  # in and around the box: some collide
    spheres = spheres.to(device).requires_grad_()
    return {
        "farthest_point_sampling (fwd)": lambda: warpgeo.farthest_point_sampling(points, 8),
        "gather_points (fwd+bwd)": lambda: warpgeo.gather_points(features, idx).sum().backward(),
        "sphere_mesh_cost (fwd+bwd)": lambda: warpgeo.sphere_mesh_cost(spheres, world).sum().backward(),
    }


def _floor_case(device: torch.device) -> Callable[[], object]:
    """The floor of a gather's forward + backward from Python: a bare autograd Function launching the same
    two Warp kernels through warpgeo's launcher, with no checks, no template, no dispatch (CPU only: the
    row kernels). What the op template adds is the gather row minus this one."""
    from warpgeo import _launch
    from warpgeo._constants import GATHER_CHANNELS_PER_ROW as block
    from warpgeo._kernels import gather as gather_kernels

    rows = gather_kernels.ROWS["int64", "single"]  # int64 indices, float32 features
    gather_kernel, scatter_kernel = rows.gather_rows, rows.scatter_add_rows

    class Bare(torch.autograd.Function):
        @staticmethod
        def forward(ctx, features, idx):
            b, c, n = features.shape
            out = torch.empty(b, c, idx.shape[1])
            args = {"features": features.view(torch.int32), "idx": idx, "out": out.view(torch.int32)}
            _launch.run(gather_kernel, (b * -(-c // block),), device, None, {**args, "row_start": 0})
            ctx.save_for_backward(idx)
            ctx.num_points = n
            return out

        @staticmethod
        def backward(ctx, grad):
            (idx,) = ctx.saved_tensors
            b, c, _ = grad.shape
            out = torch.empty(b, c, ctx.num_points)
            args = {"grad_out": grad.contiguous(), "idx": idx, "grad_features": out, "row_start": 0}
            _launch.run(scatter_kernel, (b * c,), device, None, args)
            return out, None

    gen = torch.Generator().manual_seed(0)
    features = torch.rand(1, 8, 64, generator=gen).requires_grad_()
    idx = torch.randint(0, 64, (1, 16), generator=gen)
    return lambda: Bare.apply(features, idx).sum().backward()


_FIRST_CALL = {
    "farthest_point_sampling": "warpgeo.farthest_point_sampling(torch.rand(64, 3, device=d), 8)",
    "gather_points": (
        "warpgeo.gather_points(torch.rand(1, 8, 64, device=d, requires_grad=True), "
        "torch.zeros(1, 16, dtype=torch.long, device=d)).sum().backward()"
    ),
    # a world of one box, as (vertices, faces) arrays (a cuboid: computed in closed form, no grid to build)
    "sphere_mesh_cost, box": (
        "v = torch.tensor([[x, y, z] for x in (-.5, .5) for y in (-.5, .5) for z in (-.5, .5)]); "
        "f = torch.tensor([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1], [2, 3, 7], "
        "[2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]]); w = warpgeo.MeshWorld([(v, f)], device=d); "
        "warpgeo.sphere_mesh_cost(torch.rand(64, 4, device=d, requires_grad=True), w).sum().backward()"
    ),
    # a box and a mesh (issue 50's case): the world's build (on the CPU its tables on a background thread)
    # and the general mesh kernel, whose module is larger than a world of cuboids compiles (trimesh is
    # imported before the clock starts)
    "sphere_mesh_cost, box + icosphere": (
        "w = warpgeo.MeshWorld([trimesh.creation.box(), trimesh.creation.icosphere(subdivisions=3)], device=d); "
        "warpgeo.sphere_mesh_cost(torch.rand(64, 4, device=d, requires_grad=True), w).sum().backward()"
    ),
    # 1024 points: the grid search (the kernels a point-cloud network's first layer launches), not the scan
    # of small clouds
    "knn": (
        "warpgeo.knn(torch.rand(1, 64, 3, device=d, requires_grad=True), torch.rand(1, 1024, 3, device=d), 8)"
        ".dists.sum().backward()"
    ),
    "ball_query": "warpgeo.ball_query(torch.rand(1, 64, 3, device=d), torch.rand(1, 1024, 3, device=d), 0.2, 16)",
}


#: A one-line Warp kernel, compiled and launched through warpgeo's Warp (the floor of a first call: Warp's
#: import and the build of a process's first module).
_FLOOR = """
from warpgeo import _launch, _warp
wp = _warp.warp()

@wp.kernel
def one(a: wp.array(dtype=float)):
    a[wp.tid()] = 1.0

_launch.launch(one, 1, device=d, a=torch.zeros(1, device=d))
"""


def _first_call_s(ops: list[str], device: torch.device, cache: str | None) -> tuple[float, float, float]:
    """Wall and CPU seconds (all threads) from after ``import torch`` to the end of the first call of each of
    ``ops`` (a name of ``_FIRST_CALL``, or ``"floor"``), one after the other, in a fresh process whose Warp
    kernel cache is ``cache`` (None: the user's); and the whole process's wall seconds, its start (Python,
    ``import torch``) and its exit (which waits for a background build's step under way) included."""
    calls = "\n".join(_FLOOR if op == "floor" else _FIRST_CALL[op] for op in ops)
    code = (
        "import time, torch, trimesh\nt = time.perf_counter(); c = time.process_time()\n"
        f"import warpgeo\nd = torch.device({str(device)!r})\n{calls}\n"
        "torch.cuda.synchronize() if d.type == 'cuda' else None\n"
        "print(time.perf_counter() - t, time.process_time() - c)"
    )
    env = dict(os.environ)
    if cache is not None:
        env["WARP_CACHE_PATH"] = cache
    with tempfile.TemporaryDirectory() as folder:  # a file: Warp reads a kernel's source from its file
        script = os.path.join(folder, "first_call.py")
        with open(script, "w") as f:
            f.write(code)
        start = time.perf_counter()
        out = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, check=True)
        process = time.perf_counter() - start
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu), process


def _load() -> str:
    return f"load {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""


def _cold(device: torch.device) -> None:
    """First calls with an empty Warp kernel cache (Warp compiles each module the process launches), and
    with a cache filled by ``warpgeo warmup`` beforehand (how long that takes is printed too)."""
    print(
        "first call beyond `import torch`, wall and CPU s (and the whole process's wall s): empty Warp kernel "
        "cache | after `warpgeo warmup`"
    )
    rows = [(op, [op]) for op in _FIRST_CALL]
    rows += [("all of them, one process", list(_FIRST_CALL)), ("floor: a one-line Warp kernel", ["floor"])]
    with tempfile.TemporaryDirectory() as warmed:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "warpgeo", "warmup", "-q", "--device", str(device)],
            env={**os.environ, "WARP_CACHE_PATH": warmed},
            check=True,
        )
        print(f"  warpgeo warmup into an empty cache: {time.perf_counter() - start:.1f} s  {_load()}")
        for label, ops in rows:
            with tempfile.TemporaryDirectory() as empty:
                cold = _first_call_s(ops, device, empty)
            warm = _first_call_s(ops, device, warmed)
            print(
                f"  {label:34s} {cold[0]:5.2f} {cold[1]:5.2f} ({cold[2]:5.2f}) | "
                f"{warm[0]:5.2f} {warm[1]:5.2f} ({warm[2]:5.2f})  {_load()}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_arguments(parser)
    parser.add_argument(
        "--calls", type=int, default=None, help="timed calls per case (default 500; quick 100)"
    )
    parser.add_argument("--cold", action="store_true", help="also time first calls with an empty Warp cache")
    args = parser.parse_args(argv)
    calls = args.calls or (100 if args.quick else 500)
    device = torch.device(args.device)
    print_header(device, f"{calls} calls per case, median")
    x = torch.rand(64, 4, device=device, requires_grad=True)
    cases = _cases(device)
    print(
        f"{'case':34s} {'checks':>7s} {'op µs':>9s} {'torch µs':>9s} {'overhead µs':>12s} {'rounds':>13s}"
        f"  goal ≤ {GOAL_US:.0f}"
    )

    def row(name: str, checks: str, fn: Callable[[], object], note: str | None = None) -> None:
        # the torch op is timed in rounds alternating with each case: the machine's load drifts
        op, tiny, over, (low, high) = _paired_medians_us(fn, lambda: (x * 2).sum().backward(), calls, device)
        flag = note or ("ok" if over <= GOAL_US else "over")
        spread = f"[{low:.0f}, {high:.0f}]"
        print(f"{name:34s} {checks:>7s} {op:9.1f} {tiny:9.1f} {over:12.1f} {spread:>13s}  {flag}")

    for checks in (True, False):
        with warpgeo.value_checks(checks):
            for name, fn in cases.items():
                row(name, "on" if checks else "off", fn)
    if device.type == "cpu":
        row("floor: bare Function, 2 launches", "-", _floor_case(device), "(gather's kernels, no checks)")
    print("first call in a fresh process, beyond `import torch` (warm Warp kernel cache; goal ≤ 0.5 s):")
    for op in _FIRST_CALL:
        _first_call_s([op], device, None)  # make sure the cache is warm
        wall, cpu, process = _first_call_s([op], device, None)
        print(f"  {op:34s} {wall:6.2f} s wall {cpu:6.2f} s CPU ({process:5.2f} s the process)  {_load()}")
    if args.cold:
        _cold(device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
