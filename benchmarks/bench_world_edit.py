"""Editing a world in place (``MeshWorld(capacity=...)``, ``add``, ``remove``) against rebuilding it.

    python benchmarks/bench_world_edit.py                # CPU
    python benchmarks/bench_world_edit.py --device cuda

Worlds of one environment holding 32 cuboids, 8 spheres and a 1,280-face mesh (an icosphere), built with room
for more (``capacity={"cuboid": 64, "mesh": 2}``). Timed (median of rounds, after a warm-up):

* ``add`` of a cuboid (goal <= 0.1 ms), and its ``remove``, per entry: 64 adds then 64 removes a round;
* ``add`` of a 20k-face mesh (an icosphere, 20,480 faces; goal <= its BVH build) and its ``remove``, against
  ``wp.Mesh`` built from the same arrays with the same (default) constructor (the BVH alone); and the same
  ``add`` made to run its per-face checks and slot rows on a helper thread beside the BVH build, and made
  to run them after it on one thread (``add`` itself picks by the machine's load,
  ``warpgeo._threads.core_to_spare``), all in turns, each round in another order;
* rebuilding the world with the cuboid, or with the mesh (what a world without capacity has to do).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import trimesh

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_size_arguments, print_header, sync, timeit

import warpgeo
from warpgeo import _threads, _warp


def _scene():
    rng = np.random.default_rng(0)
    entries = {f"box{i}": warpgeo.Cuboid(rng.uniform(0.05, 0.3, 3)) for i in range(32)}
    entries.update({f"ball{i}": warpgeo.Sphere(float(rng.uniform(0.05, 0.2))) for i in range(8)})
    entries["bowl"] = trimesh.creation.icosphere(subdivisions=3, radius=0.3)
    poses = {name: [*rng.uniform(-1, 1, 3), 1.0, 0.0, 0.0, 0.0] for name in entries}
    return entries, poses


@contextlib.contextmanager
def _helper(beside: bool):
    """``add`` with its helper thread (``beside``: the per-face checks and the slot's rows beside the BVH
    build, as where a core is likely free) or without (after it, on the calling thread, as where none is),
    whatever the machine's load (``warpgeo._threads.core_to_spare``)."""
    real = getattr(_threads, "core_to_spare", None)  # None: a warpgeo from before the helper (one way only)
    _threads.core_to_spare = lambda: beside
    try:
        yield
    finally:
        if real is None:
            del _threads.core_to_spare
        else:
            _threads.core_to_spare = real


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    args = parser.parse_args()
    device = torch.device(args.device)
    rounds = 3 if args.quick else 7
    print_header(device)
    entries, poses = _scene()
    world = warpgeo.MeshWorld(entries, poses=poses, device=device, capacity={"cuboid": 64, "mesh": 2})
    spheres = torch.rand(1, 1000, 4, device=device) * 0.1
    warpgeo.sphere_mesh_cost(spheres, world)  # kernels compiled, untimed
    box = warpgeo.Cuboid([0.1, 0.2, 0.3])
    pose = [0.5, 0.5, 0.5, 1.0, 0.0, 0.0, 0.0]
    adds, removes = [], []
    for r in range(rounds + 1):
        sync(device)
        start = time.perf_counter()
        slots = [world.add(box, pose=pose) for _ in range(64)]
        sync(device)
        middle = time.perf_counter()
        for m in slots:
            world.remove(m)
        sync(device)
        if r:  # the first round warms up
            adds.append((middle - start) / 64)
            removes.append((time.perf_counter() - middle) / 64)
    add_box, remove_box = statistics.median(adds), statistics.median(removes)

    ball = trimesh.creation.icosphere(subdivisions=5, radius=0.4)
    vertices, faces = np.asarray(ball.vertices), np.asarray(ball.faces)
    wp = _warp.warp()
    wdev = _warp.warp_device(device)

    def bvh():
        points = wp.array(vertices.astype(np.float32), dtype=wp.vec3, device=wdev)
        indices = wp.array(faces.astype(np.int32).reshape(-1), dtype=wp.int32, device=wdev)
        return wp.Mesh(points=points, indices=indices)

    def timed_bvh():
        sync(device)
        start = time.perf_counter()
        built = bvh()
        sync(device)
        took = time.perf_counter() - start
        del built  # let go untimed, as an added mesh is (by its remove)
        return took, 0.0

    def timed_add(beside=None):
        with contextlib.nullcontext() if beside is None else _helper(beside):
            sync(device)
            start = time.perf_counter()
            m = world.add((vertices, faces), pose=pose)
            sync(device)
            end = time.perf_counter()
            world.remove(m)
            sync(device)
        return end - start, time.perf_counter() - end

    # the BVH alone and the adds in turns, each round in another order (a change of the machine's load, or
    # what one leaves behind for the next, reaches all alike)
    cases = {
        "bvh": timed_bvh,
        "add": timed_add,
        "helped": lambda: timed_add(True),
        "alone": lambda: timed_add(False),
    }
    times = {name: [] for name in cases}
    removes = []
    names = list(cases)
    for r in range(4 * rounds + 1):
        for name in names[r % 4 :] + names[: r % 4]:
            took, removed = cases[name]()
            if r:  # the first round warms up
                times[name].append(took)
                if name == "add":
                    removes.append(removed)
    bvh_time, add_mesh, add_helped, add_alone = (statistics.median(times[name]) for name in names)
    remove_mesh = statistics.median(removes)

    def rebuild(extra):
        built = warpgeo.MeshWorld({**entries, "extra": extra}, poses=poses, device=device)
        sync(device)
        return built

    rebuild_box = timeit(lambda: rebuild(box), device, repeat=rounds)
    rebuild_mesh = timeit(lambda: rebuild((vertices, faces)), device, repeat=rounds)
    print(f"world: 32 cuboids, 8 spheres, a 1,280-face mesh; capacity {world.capacity}")
    print(f"add cuboid             {add_box * 1e3:8.3f} ms   (goal <= 0.1 ms)")
    print(f"remove cuboid          {remove_box * 1e3:8.3f} ms")
    print(f"rebuild with a cuboid  {rebuild_box * 1e3:8.3f} ms   ({rebuild_box / add_box:6.1f}x add)")
    print(f"add 20,480-face mesh   {add_mesh * 1e3:8.3f} ms   (goal <= its BVH build)")
    print(f"  its BVH (wp.Mesh)    {bvh_time * 1e3:8.3f} ms   (add / BVH {add_mesh / bvh_time:5.2f})")
    chooser = getattr(_threads, "core_to_spare", None)
    spare = (
        "no helper in this warpgeo"
        if chooser is None
        else "a core to spare"
        if chooser()
        else "no core to spare"
    )
    print(
        f"  with a helper        {add_helped * 1e3:8.3f} ms   ({add_helped / bvh_time:5.2f}: checks beside the BVH)"
    )
    print(
        f"  on one thread        {add_alone * 1e3:8.3f} ms   ({add_alone / bvh_time:5.2f}: checks after it)"
    )
    print(f"  (add picks by the load: {spare} now, load average {os.getloadavg()[0]:.2f})")
    print(f"remove that mesh       {remove_mesh * 1e3:8.3f} ms")
    print(f"rebuild with the mesh  {rebuild_mesh * 1e3:8.3f} ms   ({rebuild_mesh / add_mesh:6.1f}x add)")


if __name__ == "__main__":
    main()
