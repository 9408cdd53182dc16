"""Where a small call's time goes on the host: per op, at a tiny size, what one eager call costs and does.

For each op (FPS, gather fwd and fwd+bwd, kNN, ball query, chamfer fwd and fwd+bwd, sphere cost fwd+bwd,
signed distance) this prints:

* the eager host time per call, value checks on and off (median of ``--calls`` calls, each timed alone;
  on CUDA the host time of the call, not the kernel's: the device is synchronised between batches of calls,
  outside the clock);
* per call, the Warp launches (every launch ends in ``warpgeo._launch.run``) and the torch ops (a
  ``TorchDispatchMode`` counter; views, which allocate nothing and launch nothing, counted apart), checks
  off; ``work`` = non-view torch ops + launches, the figure of issue 34's budgets; and the lookups of torch's
  current CUDA stream (``torch.cuda.current_stream``: 10-20 µs each on a slow host; one per call at most);
* ``sys.gettrace()`` / ``sys.getprofile()`` (a debugger's or profiler's hook slows every Python line);
* cProfile's top functions (by own time) over ``--calls`` calls of each op, checks off;
* on CUDA, a ``torch.profiler`` trace of ``--trace-calls`` calls: the CUDA runtime / driver API calls per op
  call (``cudaLaunchKernel``, ``cuLaunchKernel``, ``cudaStreamSynchronize``, ``cudaMemcpyAsync``,
  ``cuStreamGetCaptureInfo``, ...): a sync or a transfer per call shows here.

    python benchmarks/bench_host.py --device cpu
    python benchmarks/bench_host.py --device cpu --cuda-algorithms   # CUDA's path, on CPU tensors
    python benchmarks/bench_host.py --device cuda --json $OUT/host.json --details $OUT/host-details.json

No trimesh: the world is a box given as (vertices, faces) arrays.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable

import torch
from _common import print_header
from torch.utils._python_dispatch import TorchDispatchMode

import warpgeo
from warpgeo import _launch

#: API calls of the CUDA trace shown as columns (any other seen is listed after the table).
_API_COLUMNS = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaStreamSynchronize",
    "cudaMemcpyAsync",
    "cuStreamGetCaptureInfo",
)


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside it: ``ops`` (every one, by name) and ``views`` (those returning
    a view of an input: an alias that is not written)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.views: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if is_view(func):
            self.views[name] += 1
        else:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def is_view(func) -> bool:
    """Whether an aten op returns a view of an input (an alias not written: ``view``, ``expand``, ``slice``)."""
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


class LaunchCounter:
    """Counts the Warp launches (by kernel) made inside it: ``_launch.run`` is wrapped meanwhile."""

    def __enter__(self) -> LaunchCounter:
        self.kernels: collections.Counter = collections.Counter()
        self._real = _launch.run

        def counted(kernel, *args):
            self.kernels[kernel.key] += 1
            return self._real(kernel, *args)

        _launch.run = counted
        return self

    def __exit__(self, *exc) -> None:
        _launch.run = self._real


def box_world(device: torch.device) -> warpgeo.MeshWorld:
    """A unit box as (vertices, faces) arrays (no trimesh needed)."""
    corners = [[x, y, z] for x in (-0.5, 0.5) for y in (-0.5, 0.5) for z in (-0.5, 0.5)]
    faces = [[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1]]
    faces += [[2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]]
    return warpgeo.MeshWorld([(torch.tensor(corners), torch.tensor(faces))], device=device)


def cases(device: torch.device) -> dict[str, Callable[[], object]]:
    """One tiny call of each op (what a PointNet++ layer or an optimiser step makes at small sizes)."""
    g = torch.Generator().manual_seed(0)
    points = torch.rand(1, 256, 3, generator=g).to(device)
    queries = points[:, :64].contiguous()
    features = torch.rand(1, 8, 64, generator=g).to(device)
    features_grad = features.clone().requires_grad_()
    idx = torch.randint(0, 64, (1, 16), generator=g).to(device)
    x = torch.rand(1, 64, 3, generator=g).to(device)
    y = torch.rand(1, 64, 3, generator=g).to(device)
    x_grad = x.clone().requires_grad_()
    world = box_world(device)
    spheres = torch.rand(1, 64, 4, generator=g) * torch.tensor([2.0, 2.0, 2.0, 0.1])
    spheres[..., :3] -= 1.0
    spheres = spheres.to(device).requires_grad_()
    probes = (torch.rand(1, 64, 3, generator=g) * 2.0 - 1.0).to(device)

    def fwd_bwd(fn, leaf):
        def call():
            leaf.grad = None
            fn().sum().backward()

        return call

    return {
        "fps (N=256, K=16)": lambda: warpgeo.farthest_point_sampling(points, 16),
        "gather fwd (C=8, N=64, M=16)": lambda: warpgeo.gather_points(features, idx),
        "gather fwd+bwd": fwd_bwd(lambda: warpgeo.gather_points(features_grad, idx), features_grad),
        "knn (M=64, N=256, k=8)": lambda: warpgeo.knn(queries, points, 8),
        "ball_query (r=0.2, k=16)": lambda: warpgeo.ball_query(queries, points, 0.2, 16),
        "chamfer fwd (N=M=64)": lambda: warpgeo.chamfer_distance(x, y),
        "chamfer fwd+bwd": fwd_bwd(lambda: warpgeo.chamfer_distance(x_grad, y).loss, x_grad),
        "sphere cost fwd+bwd (64)": fwd_bwd(lambda: warpgeo.sphere_mesh_cost(spheres, world), spheres),
        "signed_distance (64)": lambda: warpgeo.signed_distance(probes, world),
    }


def host_us(fn: Callable[[], object], device: torch.device, calls: int) -> float:
    """Median host time of one call in µs; on CUDA the device is synchronised every 50 calls, off the clock
    (so the queue never backs up into the host time)."""
    for _ in range(20):
        fn()
    times = []
    for i in range(calls):
        if device.type == "cuda" and i % 50 == 0:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return statistics.median(times) * 1e6


def counts(fn: Callable[[], object]) -> dict:
    """Launches, torch ops and current-stream lookups of one call (after a warm-up call), value checks off."""
    fn()
    lookups = []
    real_current_stream = torch.cuda.current_stream

    def counted_current_stream(*args, **kwargs):
        lookups.append(1)
        return real_current_stream(*args, **kwargs)

    torch.cuda.current_stream = counted_current_stream
    try:
        with LaunchCounter() as launches, OpCounter() as ops:
            fn()
    finally:
        torch.cuda.current_stream = real_current_stream
    ops_n, views_n, launch_n = sum(ops.ops.values()), sum(ops.views.values()), sum(launches.kernels.values())
    return {
        "launches": launch_n,
        "torch_ops": ops_n,
        "views": views_n,
        "work": ops_n + launch_n,
        "stream_lookups": len(lookups),
        "ops": dict(ops.ops),
        "view_ops": dict(ops.views),
        "kernels": dict(launches.kernels),
    }


def profile_top(fn: Callable[[], object], calls: int, top: int) -> list[dict]:
    """cProfile's ``top`` functions by own time over ``calls`` calls: µs per op call, own and cumulative."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (filename, line, name), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        rows.append(
            {
                "function": f"{filename.rsplit('/', 2)[-1] if '/' in filename else filename}:{line}({name})",
                "calls_per_call": nc / calls,
                "own_us": tt / calls * 1e6,
                "cum_us": ct / calls * 1e6,
            }
        )
    rows.sort(key=lambda r: -r["own_us"])
    return rows[:top]


def cuda_api(fn: Callable[[], object], device: torch.device, calls: int) -> dict[str, float]:
    """CUDA runtime / driver API calls per op call, from a ``torch.profiler`` trace of ``calls`` calls."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize(device)
    found: collections.Counter = collections.Counter()
    for event in prof.events():
        name = event.name
        if name.startswith(("cuda", "cu")) and not name.startswith("cudaDeviceSynchronize"):
            found[name] += 1
    return {name: n / calls for name, n in sorted(found.items())}


def figure_key(name: str) -> str:
    """An op's row name as a figure key: ``"chamfer fwd+bwd"`` -> ``"chamfer_fwd_bwd"``."""
    words = name.split(" (")[0].replace("+", " ").split()
    return "_".join(words)


def flat_figures(results: dict) -> dict[str, float]:
    """``{host_<op>_<figure>: number}``: µs per call (checks on / off), launches, torch ops, views, work, and
    on CUDA each API call per op call; ``host_trace_hook`` / ``host_profile_hook``: 1 where one is set."""
    flat: dict[str, float] = {
        "host_trace_hook": float(results["hooks"]["gettrace"] != "None"),
        "host_profile_hook": float(results["hooks"]["getprofile"] != "None"),
    }
    for name, entry in results["ops"].items():
        key = f"host_{figure_key(name)}"
        flat[f"{key}_us_checks_on"] = round(entry["host_us_checks_on"], 2)
        flat[f"{key}_us_checks_off"] = round(entry["host_us_checks_off"], 2)
        for figure in ("launches", "torch_ops", "views", "work", "stream_lookups"):
            flat[f"{key}_{figure}"] = entry[figure]
        for api, per_call in entry.get("cuda_api_per_call", {}).items():
            flat[f"{key}_{api}_per_call"] = round(per_call, 3)
    return flat


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--calls", type=int, default=2000, help="timed / profiled calls per op (default 2000)"
    )
    parser.add_argument("--trace-calls", type=int, default=100, help="calls in the CUDA trace (default 100)")
    parser.add_argument("--top", type=int, default=15, help="cProfile rows per op (default 15)")
    parser.add_argument("--quick", action="store_true", help="200 calls (a smoke run; gpu_check passes it)")
    parser.add_argument(
        "--json",
        type=str,
        default=None,
        help="write the figures as a flat {name: number} JSON (gpu_check's results JSON: host_<op>_...)",
    )
    parser.add_argument(
        "--details", type=str, default=None, help="write everything (op lists, cProfile rows) to this JSON"
    )
    parser.add_argument(
        "--cuda-algorithms",
        action="store_true",
        help="on the CPU: run CUDA's algorithms on CPU tensors (warpgeo._warp.PATHS.cuda_on_cpu), as the tests do",
    )
    args = parser.parse_args(argv)
    if args.cuda_algorithms:
        from warpgeo import _warp

        _warp.PATHS.cuda_on_cpu = True
        _warp.warp().config.enable_cpu_blocks = (
            True  # the block kernels with real lanes, as the tests run them
        )
    if args.quick:
        args.calls = min(args.calls, 200)
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    print_header(device, f"median of {args.calls} calls per op")
    hooks = {"gettrace": repr(sys.gettrace()), "getprofile": repr(sys.getprofile())}
    print(f"sys.gettrace() = {hooks['gettrace']}, sys.getprofile() = {hooks['getprofile']}")
    print(f"torch.get_num_threads() = {torch.get_num_threads()}, Python {sys.version.split()[0]}")
    results: dict = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "hooks": hooks,
        "calls": args.calls,
        "cuda_algorithms": bool(args.cuda_algorithms or device.type == "cuda"),
        "ops": {},
    }
    ops = cases(device)
    header = (
        f"{'op':30s} {'µs on':>8s} {'µs off':>8s} {'launch':>6s} {'torch':>6s} {'views':>6s} {'work':>5s}"
    )
    if device.type == "cuda":
        header += "".join(f" {c[:12]:>12s}" for c in _API_COLUMNS)
    print(header)
    for name, fn in ops.items():
        entry: dict = {}
        with warpgeo.value_checks(True):
            entry["host_us_checks_on"] = host_us(fn, device, args.calls)
        with warpgeo.value_checks(False):
            entry["host_us_checks_off"] = host_us(fn, device, args.calls)
            entry.update(counts(fn))
            entry["profile"] = profile_top(fn, args.calls, args.top)
            if device.type == "cuda":
                entry["cuda_api_per_call"] = cuda_api(fn, device, args.trace_calls)
        results["ops"][name] = entry
        line = (
            f"{name:30s} {entry['host_us_checks_on']:8.1f} {entry['host_us_checks_off']:8.1f} "
            f"{entry['launches']:6d} {entry['torch_ops']:6d} {entry['views']:6d} {entry['work']:5d}"
        )
        if device.type == "cuda":
            api = entry["cuda_api_per_call"]
            line += "".join(f" {api.get(c, 0.0):12.2f}" for c in _API_COLUMNS)
        print(line, flush=True)
    print("\nper op, checks off: torch ops and kernels of one call")
    for name, entry in results["ops"].items():
        ops_text = ", ".join(f"{k.removeprefix('aten.')} x{v}" for k, v in sorted(entry["ops"].items()))
        views = ", ".join(f"{k.removeprefix('aten.')} x{v}" for k, v in sorted(entry["view_ops"].items()))
        kernels = ", ".join(f"{k} x{v}" for k, v in sorted(entry["kernels"].items()))
        print(
            f"  {name}\n    ops: {ops_text or '-'}\n    views: {views or '-'}\n    kernels: {kernels or '-'}"
            f"\n    current-stream lookups: {entry['stream_lookups']}"
        )
        if device.type == "cuda":
            others = {k: v for k, v in entry["cuda_api_per_call"].items() if k not in _API_COLUMNS}
            print(
                "    other CUDA API per call: "
                + (", ".join(f"{k} {v:.2f}" for k, v in others.items()) or "-")
            )
    print(
        f"\ncProfile, checks off, top {args.top} by own time (µs per op call: own / cumulative, calls per call)"
    )
    for name, entry in results["ops"].items():
        print(f"  {name}")
        for row in entry["profile"]:
            print(
                f"    {row['own_us']:8.2f} {row['cum_us']:8.2f} {row['calls_per_call']:6.1f}  {row['function']}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(flat_figures(results), f, indent=1)
        print(f"\nwrote {args.json}")
    if args.details:
        with open(args.details, "w") as f:
            json.dump(results, f, indent=1)
        print(f"wrote {args.details}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
