"""Per-call sphere cost, forward + backward, beside cuRobo's own ``SdfMeshWarpPy`` in the same run.

A trajectory optimiser calls the collision cost every iteration on a few spheres: what a call costs in
Python and launches decides its speed, not the kernel. This times, call by call in alternating rounds:

* warpgeo: ``sphere_mesh_cost(spheres, world).sum().backward()``, value checks off and on;
* cuRobo: ``SdfMeshWarpPy.apply(...)`` (its v0.7 Warp mesh cost, ``curobo/geom/sdf/warp_primitives.py``)
  with the buffers cuRobo's world collision allocates once and reuses, then ``.sum().backward()``;
* the swept cost: ``swept_sphere_mesh_cost`` beside cuRobo's ``SweptSdfMeshWarpPy`` (``--horizon`` poses,
  ``sweep_steps=4``);

on the same meshes (a box and an icosphere, identity poses), ``--spheres`` spheres (default 16), one CPU
thread (``torch.set_num_threads(1)``). On CUDA also: each call captured in a CUDA graph and replayed
(CUDA-event µs per replay: the kernels without the host), and ``--kernel-spheres`` spheres (default 1M on
CUDA) in one call of each (CUDA-event ms, fwd+bwd: the kernels on the same scene).

**cuRobo's files** are NVIDIA-licensed: never committed here, imported from an untracked, git-ignored folder,
by default ``.peers/curobo`` (any folder holding ``warp_primitives.py`` and ``warp_sdf_fns.py`` below it;
``--curobo-src`` names another). A session with the ``fetch`` tool brings them (v0.7.8, the last v0.7)::

    fetch github:NVlabs/curobo           # -> /work/.mirror/NVlabs+curobo/repo (a bare git directory)
    mkdir -p .peers/curobo && for f in warp_primitives.py warp_sdf_fns.py; do
        git --git-dir=/work/.mirror/NVlabs+curobo/repo show v0.7.8:src/curobo/geom/sdf/$f > .peers/curobo/$f
    done

and the device tool's ``carry`` takes ``.peers/curobo`` to the GPU machine. ``warp_primitives.py`` imports
``torch``, ``warp``, ``curobo.util.warp.warp_support_sdf_struct`` (whose real module imports curobo.types and
curobo.util.logger: replaced here by a stub answering True, Warp >= 1.0) and ``.warp_sdf_fns`` (Warp only);
the loader registers empty ``curobo``, ``curobo.util``, ``curobo.geom``, ``curobo.geom.sdf`` packages and that
stub, nothing else. cuRobo's launch passes ``stream=wp.stream_from_torch(device)`` and no device: on the CPU
its module gets a ``wp`` whose ``stream_from_torch`` answers None (Warp then launches on its default
device, the CPU on a machine without CUDA); on CUDA nothing is changed. Tried on the CPU with v0.7.8's
files (both Functions run; the costs are printed beside warpgeo's).

Where the files are absent, the peer is ``_curobo_like.BoundedCost`` (cuRobo's semantics in a kernel of
ours, said so in the output): its figures are ``curobo_like_*`` and the ``curobo_*`` keys are absent.

    python benchmarks/bench_curobo_call.py                                  # .peers/curobo when present
    python benchmarks/bench_curobo_call.py --curobo-src /tmp/curobo --quick
    python benchmarks/bench_curobo_call.py --device cuda --json $OUT/curobo.json

A call's time is its wall time with one device synchronisation per call (what an optimiser loop that reads
its cost back pays). ``--json PATH`` writes flat figures: ``curobo_call_us``, ``warpgeo_call_us`` (checks
off), ``warpgeo_call_checks_on_us``, ``curobo_call_ratio`` (cuRobo / warpgeo: > 1 is warpgeo faster),
``curobo_swept_call_us``, ``warpgeo_swept_call_us``, ``curobo_swept_call_ratio``; on CUDA ``*_graph_us`` and
``curobo_kernel_<size>_fwd_bwd_ms`` / ``warpgeo_kernel_<size>_fwd_bwd_ms``.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
import types
from pathlib import Path

import torch
import trimesh
from _common import device_time, print_header, size_key, write_figures

import warpgeo

_ROUNDS = 7
_ROOT = Path(__file__).resolve().parents[1]
#: where a session puts cuRobo's files (git-ignored, carried to the GPU machine)
DEFAULT_SRC = _ROOT / ".peers" / "curobo"
_MAX_DIST = 0.1
_SWEEP_STEPS = 4


def find_curobo(src: Path | None) -> Path | None:
    """The folder holding cuRobo's ``warp_primitives.py`` under ``src`` (itself or below), or None."""
    if src is None or not src.exists():
        return None
    if (src / "warp_primitives.py").exists():
        return src
    found = sorted(src.rglob("warp_primitives.py"))
    return found[0].parent if found else None


def load_curobo(src: Path):
    """cuRobo's ``warp_primitives`` module, imported from ``src`` with a stub of ``curobo.util.warp``.

    Raises:
        FileNotFoundError: ``src`` lacks ``warp_primitives.py`` or ``warp_sdf_fns.py``.
    """
    import warp as wp

    for name in ("warp_primitives.py", "warp_sdf_fns.py"):
        if not (src / name).exists():
            raise FileNotFoundError(f"--curobo-src {src} has no {name} (cuRobo's src/curobo/geom/sdf)")
    for name in ("curobo", "curobo.util", "curobo.geom", "curobo.geom.sdf"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["curobo.geom.sdf"].__path__ = [str(src)]
    util = types.ModuleType("curobo.util.warp")
    util.warp_support_sdf_struct = lambda wp_module=None: True  # Warp >= 1.0: its current kernels
    sys.modules["curobo.util.warp"] = util
    spec = importlib.util.spec_from_file_location(
        "curobo.geom.sdf.warp_primitives", src / "warp_primitives.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)

    class _Warp(types.ModuleType):  # cuRobo's `wp`, with a CPU answer for stream_from_torch
        def __getattr__(self, name):
            return getattr(wp, name)

        @staticmethod
        def stream_from_torch(device):
            return None if torch.device(device).type == "cpu" else wp.stream_from_torch(device)

    module.wp = _Warp("warp")
    return module


class CuroboWorld:
    """The buffers cuRobo's world collision allocates once (its meshes, poses, enable flags) for ``meshes``."""

    def __init__(self, meshes: list[trimesh.Trimesh], device: torch.device):
        import warp as wp

        wp.init()
        wdev = wp.device_from_torch(device)
        self.meshes = [
            wp.Mesh(
                points=wp.array(m.vertices.astype("float32"), dtype=wp.vec3, device=wdev),
                indices=wp.array(m.faces.astype("int32").ravel(), dtype=wp.int32, device=wdev),
            )
            for m in meshes
        ]
        d = {"device": device}
        self.device = device
        self.mesh_idx = torch.tensor([[m.id for m in self.meshes]], dtype=torch.int64, **d)
        # cuRobo's inverse pose: position, quaternion wxyz, one pad
        self.inv_pose = torch.tensor([[[0, 0, 0, 1, 0, 0, 0, 0]] * len(meshes)], dtype=torch.float32, **d)
        self.enable = torch.ones(1, len(meshes), dtype=torch.uint8, **d)
        self.n_env_mesh = torch.tensor([len(meshes)], dtype=torch.int32, **d)
        self.weight = torch.ones(1, **d)
        self.eta = torch.zeros(1, **d)
        self.max_dist = torch.tensor([_MAX_DIST], **d)
        self.speed_dt = torch.ones(1, **d)


def curobo_cost(curobo, world: CuroboWorld, spheres: torch.Tensor):
    """A closure: cuRobo's ``SdfMeshWarpPy`` forward + backward on ``spheres`` (B, H, N, 4)."""
    b, h, n, _ = spheres.shape
    d = {"device": world.device}
    out_cost, out_grad = torch.zeros(b, h, n, **d), torch.zeros(b, h, n, 4, **d)
    sparsity = torch.zeros(b, h, n, dtype=torch.uint8, **d)
    w = world

    def run():
        cost = curobo.SdfMeshWarpPy.apply(
            spheres, out_cost, out_grad, sparsity, w.weight, w.eta, w.mesh_idx, w.inv_pose, w.enable,
            w.n_env_mesh, w.max_dist, None, True, False,
        )  # fmt: skip
        cost.sum().backward()
        return cost

    return run


def curobo_swept_cost(curobo, world: CuroboWorld, spheres: torch.Tensor):
    """A closure: cuRobo's ``SweptSdfMeshWarpPy`` forward + backward on ``spheres`` (B, H, N, 4)."""
    b, h, n, _ = spheres.shape
    d = {"device": world.device}
    out_cost, out_grad = torch.zeros(b, h, n, **d), torch.zeros(b, h, n, 4, **d)
    sparsity = torch.zeros(b, h, n, dtype=torch.uint8, **d)
    w = world

    def run():
        cost = curobo.SweptSdfMeshWarpPy.apply(
            spheres, out_cost, out_grad, sparsity, w.weight, w.eta, w.speed_dt, w.mesh_idx, w.inv_pose,
            w.enable, w.n_env_mesh, w.max_dist, _SWEEP_STEPS, False, None, True,
        )  # fmt: skip
        cost.sum().backward()
        return cost

    return run


def curobo_like_cost(world: CuroboWorld, spheres: torch.Tensor):
    """A closure: ``_curobo_like.BoundedCost`` forward + backward (the fallback peer, not cuRobo)."""
    import _curobo_like

    ids = world.mesh_idx.view(-1)
    inv = torch.tensor([[0, 0, 0, 0, 0, 0, 1]] * ids.numel(), dtype=torch.float32, device=world.device)
    cost_fn = _curobo_like.BoundedCost(ids, inv, spheres[..., 0].numel(), _MAX_DIST, 0.0)

    def run():
        cost = cost_fn(spheres)
        cost.sum().backward()
        return cost

    return run


def warpgeo_cost(world, spheres: torch.Tensor, checks: bool, swept: bool = False):
    """A closure: warpgeo's cost forward + backward, value checks ``checks``."""

    def run():
        with warpgeo.value_checks(checks):
            if swept:
                cost = warpgeo.swept_sphere_mesh_cost(spheres, world, sweep_steps=_SWEEP_STEPS)
            else:
                cost = warpgeo.sphere_mesh_cost(spheres, world)
            cost.sum().backward()
        return cost

    return run


def _rounds(cases: dict[str, object], calls: int, device: torch.device) -> dict[str, list[float]]:
    """Per case, the median µs per call of each of ``_ROUNDS`` alternating rounds."""
    medians: dict[str, list[float]] = {name: [] for name in cases}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(_ROUNDS):
        for name, fn in cases.items():
            for _ in range(20):
                fn()
            sync()
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                fn()
                sync()
                times.append(time.perf_counter() - start)
            medians[name].append(statistics.median(times) * 1e6)
    return medians


def graph_us(fn, device: torch.device) -> float:
    """CUDA-event µs per replay of ``fn`` captured in a CUDA graph (warm-up on a side stream first)."""
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
    return device_time(graph.replay, device, repeat=50, warmup=5) * 1e6


def make_spheres(shape: tuple[int, ...], device: torch.device, seed: int = 0) -> torch.Tensor:
    """Spheres (``shape`` + (4,)) with centres uniform in the scene's box, radius 0.05, requiring grad."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.rand(*shape, 3, generator=gen) * 1.2 - 0.3
    radii = torch.full((*shape, 1), 0.05)
    return torch.cat((centres, radii), -1).to(device).requires_grad_(True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--curobo-src",
        type=Path,
        default=DEFAULT_SRC,
        help="folder of cuRobo's warp_primitives.py and warp_sdf_fns.py (default .peers/curobo)",
    )
    parser.add_argument("--spheres", type=int, default=16)
    parser.add_argument("--horizon", type=int, default=4, help="poses of the swept case (default 4)")
    parser.add_argument("--calls", type=int, default=300, help="timed calls per case and round")
    parser.add_argument(
        "--kernel-spheres",
        type=int,
        default=None,
        help="spheres of the kernel row (default 1M on CUDA, 4096 with --quick, none on the CPU)",
    )
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--quick", action="store_true", help="50 calls per round")
    parser.add_argument("--json", default=None, help="write the figures to this JSON file (flat)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    calls = 50 if args.quick else args.calls
    if args.kernel_spheres is None:
        args.kernel_spheres = 4096 if args.quick else (1_000_000 if device.type == "cuda" else 0)
    torch.set_num_threads(1)
    print_header(device, extra=f"one torch thread; {args.spheres} spheres x 2 meshes, fwd+bwd")

    meshes = [trimesh.creation.box((0.4, 0.4, 0.4)), trimesh.creation.icosphere(3, 0.3)]
    meshes[1].apply_translation((0.6, 0.0, 0.0))
    world = warpgeo.MeshWorld(meshes, device=device)
    cworld = CuroboWorld(meshes, device)
    spheres = make_spheres((1, 1, args.spheres), device)
    traj = make_spheres((1, args.horizon, args.spheres), device, seed=1)

    src = find_curobo(args.curobo_src)
    curobo = None
    if src is None:
        print(
            f"cuRobo: no warp_primitives.py under {args.curobo_src} (see --help: fetch its v0.7 files): "
            "the peer is _curobo_like.BoundedCost, cuRobo's semantics in our kernel, NOT cuRobo; "
            "the curobo_* figures are absent"
        )
    else:
        curobo = load_curobo(src)
        print(f"cuRobo: SdfMeshWarpPy / SweptSdfMeshWarpPy imported from {src}")
    peer = "cuRobo" if curobo is not None else "curobo_like"

    cases = {
        "warpgeo": warpgeo_cost(world, spheres, False),
        "warpgeo checks on": warpgeo_cost(world, spheres, True),
        peer: curobo_cost(curobo, cworld, spheres) if curobo else curobo_like_cost(cworld, spheres),
        "warpgeo swept": warpgeo_cost(world, traj, False, swept=True),
    }
    if curobo is not None:
        cases["cuRobo swept"] = curobo_swept_cost(curobo, cworld, traj)
    # the peers' costs side by side (semantics differ: cuRobo's query is bounded by max_dist=0.1)
    for name, fn in cases.items():
        print(f"  total cost {name:<20s} {float(fn().detach().sum()):.6f}")
    medians = _rounds(cases, calls, device)
    us = {name: statistics.median(values) for name, values in medians.items()}
    print(f"\nper call, µs (median of {_ROUNDS} rounds of {calls} calls; one sync per call)")
    for name, values in medians.items():
        base = us["warpgeo swept" if "swept" in name else "warpgeo"]
        print(
            f"  {name:<28s} {us[name]:8.1f} µs per call (rounds {min(values):.0f}-{max(values):.0f})   "
            f"{us[name] / base:.2f}x warpgeo's time"
        )

    key = {"warpgeo": "warpgeo", "warpgeo checks on": "warpgeo", peer: peer.lower()}
    figures: dict[str, float] = {
        "warpgeo_call_us": us["warpgeo"],
        "warpgeo_call_checks_on_us": us["warpgeo checks on"],
        f"{key[peer]}_call_us": us[peer],
        f"{key[peer]}_call_ratio": us[peer] / us["warpgeo"],
        "warpgeo_swept_call_us": us["warpgeo swept"],
    }
    if curobo is not None:
        figures["curobo_swept_call_us"] = us["cuRobo swept"]
        figures["curobo_swept_call_ratio"] = us["cuRobo swept"] / us["warpgeo swept"]

    if device.type == "cuda":
        print("\nper call in a CUDA graph (CUDA-event µs per replay: the kernels without the host)")
        for name, fn in cases.items():
            if name == "warpgeo checks on":
                continue
            label = name.lower().replace(" ", "_")
            try:
                t = graph_us(fn, device)
            except Exception as error:  # a peer that cannot be captured: said, not fatal
                print(f"  {name:<28s} not captured: {type(error).__name__}: {error}")
                continue
            figures[f"{label}_graph_us"] = t
            print(f"  {name:<28s} {t:8.1f} µs per replay")

    if args.kernel_spheres:
        n = args.kernel_spheres
        big = make_spheres((1, 1, n), device, seed=2)
        kernel_cases = {
            "warpgeo": warpgeo_cost(world, big, False),
            peer: curobo_cost(curobo, cworld, big) if curobo else curobo_like_cost(cworld, big),
        }
        size = size_key(n=n)[1:]
        print(f"\none call of {n} spheres x 2 meshes, fwd+bwd (the kernels on the same scene)")
        for name, fn in kernel_cases.items():
            t = device_time(fn, device, repeat=10 if device.type == "cuda" else 3)
            figures[f"{key[name]}_kernel_{size}_fwd_bwd_ms"] = t * 1e3
            print(f"  {name:<28s} {t * 1e3:8.3f} ms")
    write_figures(args.json, {name: round(value, 4) for name, value in figures.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
