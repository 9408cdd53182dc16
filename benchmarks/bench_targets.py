"""The GPU targets of record, each beside its peer in the same run (issue 23's list).

    python benchmarks/bench_targets.py --device cuda          # full sizes (seconds on an H100)
    python benchmarks/bench_targets.py --quick                # small sizes on the CPU: the flow only

Rows (full sizes; ``--quick`` shrinks every size):

* sphere cost, 1M spheres x 4 posed meshes (the scene of ``bench_sdf.py``), forward and forward+backward;
* swept cost, H=32 poses, sweep_steps=4, the same spheres (B=1, H=32, N=1M/32), forward+backward;
* gather (B=8, C=64, N=16384, M=4096) forward and forward+backward beside ``torch.gather`` (its backward
  is torch's scatter-add);
* signed distance of the 1M sphere centres (forward);
* a captured sphere-cost iteration (forward+backward, 16k spheres) replayed with ``torch.cuda.CUDAGraph``:
  CPU time per ``replay()`` call (the host cost an optimiser's loop pays) and GPU time per replay.

``--json PATH`` writes the figures as a flat ``{key: number}`` (gpu_check's results JSON): at full sizes
issue 36's ``cost_1m_x4_fwd_bwd_ms``, ``swept_h32_s4_fwd_bwd_ms``, ``signed_distance_1m_ms`` (value checks
off), ``replay_host_us`` (CUDA only); ``--quick`` writes the same figures under keys naming its sizes
(``cost_8192_x4_fwd_bwd_ms``, ...), never under the full sizes' keys.

GPU times are CUDA-event medians; CPU times are wall medians (``_common.device_time``). FPS has its own script
(``bench_fps.py --device cuda --batch 1 8``, with torch-fps and a plain-torch loop).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import add_size_arguments, device_time, print_header, size_key, write_figures
from test_sdf import SCENE_POSES, scene_meshes

import warpgeo

_ETA = 0.02


def gpu_time(fn, device: torch.device, repeat: int) -> float:
    """Median seconds of ``fn()``: CUDA events on CUDA, wall time on the CPU."""
    return device_time(fn, device, repeat=repeat)


def row(label: str, seconds: float, target_ms: float | None = None, peer: float | None = None) -> None:
    text = f"  {label:<52} {seconds * 1e3:10.3f} ms"
    if peer is not None:
        text += f"   {seconds / peer:5.2f}x peer"
    if target_ms is not None:
        text += f"   target <= {target_ms:g} ms: {'met' if seconds * 1e3 <= target_ms else 'MISSED'}"
    print(text, flush=True)


def scene_spheres(n: int, device: torch.device) -> torch.Tensor:
    gen = np.random.default_rng(0)
    centres = gen.uniform([-0.6, -0.6, -0.1], [0.6, 0.6, 0.6], size=(n, 3))
    radii = gen.uniform(0.01, 0.05, size=(n, 1))
    return torch.from_numpy(np.concatenate([centres, radii], axis=1).astype(np.float32)).to(device)


def bench_costs(world, device, n: int, horizon: int, repeat: int, full: bool, figures: dict) -> None:
    spheres = scene_spheres(n, device)
    leaf = spheres.clone().requires_grad_(True)

    def forward():
        return warpgeo.sphere_mesh_cost(spheres, world, activation_distance=_ETA)

    def forward_backward():
        leaf.grad = None
        warpgeo.sphere_mesh_cost(leaf, world, activation_distance=_ETA).sum().backward()

    traj = spheres[: (n // horizon) * horizon].view(1, horizon, n // horizon, 4)
    traj_leaf = traj.clone().requires_grad_(True)

    def swept_forward_backward():
        traj_leaf.grad = None
        warpgeo.swept_sphere_mesh_cost(
            traj_leaf, world, sweep_steps=4, activation_distance=_ETA
        ).sum().backward()

    points = spheres[:, :3].contiguous()

    def distance():
        return warpgeo.signed_distance(points, world)

    size = size_key(n=n)[1:]  # "1m" at full size
    swept = f"swept_h{horizon}_s4" + ("" if full else f"_{size}")
    print(f"\nsphere cost, {n} spheres x 4 posed meshes (uniform in the scene box)")
    for checks in (True, False):
        with warpgeo.value_checks(checks):
            label = f" (value checks {'on' if checks else 'off'})"
            suffix = "_checks_on" if checks else ""
            t = gpu_time(forward, device, repeat)
            row("cost forward" + label, t)
            figures[f"cost_{size}_x4_fwd{suffix}_ms"] = t * 1e3
            t = gpu_time(forward_backward, device, repeat)
            row("cost forward+backward" + label, t, 2.0 if full else None)
            figures[f"cost_{size}_x4_fwd_bwd{suffix}_ms"] = t * 1e3
    print(f"\nswept cost, H={horizon}, sweep_steps=4, {n // horizon} spheres per pose")
    for checks in (True, False):
        with warpgeo.value_checks(checks):
            label = f" (value checks {'on' if checks else 'off'})"
            t = gpu_time(swept_forward_backward, device, repeat)
            row("swept forward+backward" + label, t, 8.0 if full else None)
            figures[f"{swept}_fwd_bwd{'_checks_on' if checks else ''}_ms"] = t * 1e3
    print(f"\nsigned distance, {n} points (the sphere centres) x 4 posed meshes")
    for checks in (True, False):
        with warpgeo.value_checks(checks):
            label = f" (value checks {'on' if checks else 'off'})"
            t = gpu_time(distance, device, repeat)
            row("signed_distance forward" + label, t, 2.0 if full else None)
            figures[f"signed_distance_{size}{'_checks_on' if checks else ''}_ms"] = t * 1e3


def bench_gather(device, b: int, c: int, n: int, m: int, repeat: int, figures: dict) -> None:
    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(b, c, n, generator=gen).to(device)
    idx = torch.randint(0, n, (b, m), generator=gen).to(device)
    leaf = feats.clone().requires_grad_(True)
    grad = torch.randn(b, c, m, generator=gen).to(device)
    expanded = idx[:, None, :].expand(b, c, m)

    def ours():
        return warpgeo.gather_points(feats, idx)

    def theirs():
        return torch.gather(feats, 2, expanded)

    def ours_both():
        leaf.grad = None
        warpgeo.gather_points(leaf, idx).backward(grad)

    def theirs_both():
        leaf.grad = None
        torch.gather(leaf, 2, expanded).backward(grad)

    torch.testing.assert_close(ours(), theirs())
    print(f"\ngather, B={b} C={c} N={n} M={m} float32 (ratio: warpgeo / torch.gather, target <= 1.0)")
    size = size_key(b=b, c=c, n=n, m=m)
    for name, fn, peer in (("forward", ours, theirs), ("forward+backward", ours_both, theirs_both)):
        what = "fwd" if name == "forward" else "fwd_bwd"
        t_theirs = gpu_time(peer, device, repeat)
        figures[f"torch_gather_{size}_{what}_ms"] = t_theirs * 1e3
        for checks in (True, False):
            with warpgeo.value_checks(checks):
                label = f"warpgeo gather_points {name} (value checks {'on' if checks else 'off'})"
                t = gpu_time(fn, device, repeat)
                row(label, t, peer=t_theirs)
                figures[f"gather_{size}_{what}{'_checks_on' if checks else ''}_ms"] = t * 1e3
        row(f"torch.gather {name}", t_theirs)
        if device.type == "cuda":  # the kernels alone: both captured, replayed (no host work)
            ours_graph, theirs_graph = captured(fn, device), captured(peer, device)
            t_theirs = gpu_time(theirs_graph.replay, device, repeat)
            t = gpu_time(ours_graph.replay, device, repeat)
            row(f"warpgeo gather_points {name}, CUDA graph", t, peer=t_theirs)
            row(f"torch.gather {name}, CUDA graph", t_theirs)
            figures[f"gather_{size}_{what}_graph_ms"] = t * 1e3
            figures[f"torch_gather_{size}_{what}_graph_ms"] = t_theirs * 1e3


def captured(fn, device) -> torch.cuda.CUDAGraph:
    """``fn`` captured in a CUDA graph after a warm-up on a side stream (torch's documented pattern)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def bench_replay(world, device, n: int, replays: int, figures: dict) -> None:
    if device.type != "cuda":
        print("\ncaptured replay: CUDA only (skipped on the CPU)")
        return
    static = scene_spheres(n, device).requires_grad_(True)

    def step():
        cost = warpgeo.sphere_mesh_cost(static, world, activation_distance=_ETA)
        (grad,) = torch.autograd.grad(cost.sum(), static)
        return grad

    graph = captured(step, device)
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    cpu = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(replays):
            graph.replay()
        cpu.append((time.perf_counter() - start) / replays)
        torch.cuda.synchronize()
    gpu = gpu_time(graph.replay, device, 20)
    print(f"\ncaptured sphere-cost iteration (forward+backward, {n} spheres), {replays} replays x 5")
    row("CPU time per replay() call", statistics.median(cpu), 0.020)
    row("GPU time per replay", gpu)
    figures["replay_host_us"] = statistics.median(cpu) * 1e6
    figures["replay_gpu_us"] = gpu * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument("--json", default=None, help="write the figures to this JSON file (flat)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    full = not args.quick
    print_header(device, "issue-23 targets" + ("" if full else " (quick sizes: no targets apply)"))
    world = warpgeo.MeshWorld(scene_meshes(), poses=SCENE_POSES, device=device)
    repeat = 20 if full else 3
    figures: dict[str, float] = {}
    bench_costs(world, device, 1_000_000 if full else 8_192, 32, repeat, full, figures)
    if full:
        bench_gather(device, 8, 64, 16384, 4096, repeat, figures)
    else:
        bench_gather(device, 2, 16, 4096, 1024, repeat, figures)
    bench_replay(world, device, 16_384, 1000 if full else 10, figures)
    write_figures(args.json, {key: round(value, 4) for key, value in figures.items()})


if __name__ == "__main__":
    main()
