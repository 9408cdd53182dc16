"""Per-call sphere cost, forward + backward, beside cuRobo's own ``SdfMeshWarpPy`` in the same run.

A trajectory optimiser calls the collision cost every iteration on a few spheres: what a call costs in
Python and launches decides its speed, not the kernel. This times, call by call in alternating rounds:

* warpgeo: ``sphere_mesh_cost(spheres, world).sum().backward()``;
* cuRobo: ``SdfMeshWarpPy.apply(...)`` (its v0.7 Warp mesh cost, ``curobo/geom/sdf/warp_primitives.py``)
  with the buffers cuRobo's world collision allocates once and reuses, then ``.sum().backward()``;

on the same meshes (a box and an icosphere, identity poses), ``--spheres`` spheres (default 16), one CPU
thread (``torch.set_num_threads(1)``), value checks on (warpgeo's default). cuRobo is not a pip package
for the CPU: point ``--curobo-src`` at the folder holding its ``warp_primitives.py`` and
``warp_sdf_fns.py`` (a checkout of https://github.com/NVlabs/curobo at v0.7.x, ``src/curobo/geom/sdf``).
Nothing of cuRobo is copied here; its two files are imported from that folder. On the CPU cuRobo's
launch asks torch for a CUDA stream (``wp.stream_from_torch``): its module gets a ``wp`` whose
``stream_from_torch`` answers None for a CPU device; nothing else is changed.

    python benchmarks/bench_curobo_call.py --curobo-src ~/curobo/src/curobo/geom/sdf
    python benchmarks/bench_curobo_call.py --device cuda --curobo-src ...   # CPU time per call on a GPU

On CUDA a call's time is its host time with one device synchronisation per call (what an optimiser loop
that reads its cost back pays).
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
from _common import print_header

import warpgeo

_ROUNDS = 7


def _load_curobo(src: Path):
    """cuRobo's ``warp_primitives`` module, imported from ``src`` with a stub of ``curobo.util.warp``."""
    import warp as wp

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


def _curobo_case(curobo, meshes: list[trimesh.Trimesh], spheres: torch.Tensor, device: torch.device):
    """A closure running cuRobo's Function forward + backward, with its world buffers built once."""
    import warp as wp

    wp.init()
    wdev = wp.device_from_torch(device)
    keep = [
        wp.Mesh(
            points=wp.array(m.vertices.astype("float32"), dtype=wp.vec3, device=wdev),
            indices=wp.array(m.faces.astype("int32").ravel(), dtype=wp.int32, device=wdev),
        )
        for m in meshes
    ]
    d = {"device": device}
    mesh_idx = torch.tensor([[m.id for m in keep]], dtype=torch.int64, **d)
    inv_pose = torch.tensor([[[0, 0, 0, 1, 0, 0, 0, 0]] * len(meshes)], dtype=torch.float32, **d)
    enable = torch.ones(1, len(meshes), dtype=torch.uint8, **d)
    n_env_mesh = torch.tensor([len(meshes)], dtype=torch.int32, **d)
    b, h, n, _ = spheres.shape
    out_cost = torch.zeros(b, h, n, **d)
    out_grad = torch.zeros(b, h, n, 4, **d)
    sparsity = torch.zeros(b, h, n, dtype=torch.uint8, **d)
    weight = torch.ones(1, **d)
    eta = torch.zeros(1, **d)
    max_dist = torch.tensor([0.1], **d)

    def run():
        cost = curobo.SdfMeshWarpPy.apply(
            spheres,
            out_cost,
            out_grad,
            sparsity,
            weight,
            eta,
            mesh_idx,
            inv_pose,
            enable,
            n_env_mesh,
            max_dist,
            None,
            True,
            False,
        )
        cost.sum().backward()

    run.keep = keep  # the meshes live as long as the closure
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curobo-src", type=Path, default=None, help="folder of cuRobo's warp_primitives.py")
    parser.add_argument("--spheres", type=int, default=16)
    parser.add_argument("--calls", type=int, default=300, help="timed calls per case and round")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--quick", action="store_true", help="50 calls per round")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    calls = 50 if args.quick else args.calls
    torch.set_num_threads(1)
    print_header(
        device, extra=f"one torch thread; {args.spheres} spheres x 2 meshes, fwd+bwd, value checks on"
    )

    meshes = [trimesh.creation.box((0.4, 0.4, 0.4)), trimesh.creation.icosphere(3, 0.3)]
    meshes[1].apply_translation((0.6, 0.0, 0.0))
    world = warpgeo.MeshWorld(meshes, device=device)
    torch.manual_seed(0)
    centres = torch.rand(1, 1, args.spheres, 3) * 1.2 - 0.3
    radii = torch.full((1, 1, args.spheres, 1), 0.05)
    spheres = torch.cat((centres, radii), -1).to(device).requires_grad_(True)

    def warpgeo_call():
        warpgeo.sphere_mesh_cost(spheres, world).sum().backward()

    cases = {"warpgeo sphere_mesh_cost": warpgeo_call}
    if args.curobo_src is not None:
        cases["cuRobo SdfMeshWarpPy"] = _curobo_case(_load_curobo(args.curobo_src), meshes, spheres, device)
    else:
        print("cuRobo: not timed (give --curobo-src, see --help)")
    medians = _rounds(cases, calls, device)
    base = statistics.median(medians["warpgeo sphere_mesh_cost"])
    for name, values in medians.items():
        mid = statistics.median(values)
        print(
            f"{name:28s} {mid:8.1f} µs per call (rounds {min(values):.0f}-{max(values):.0f})   "
            f"{mid / base:.2f}x warpgeo's time"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
