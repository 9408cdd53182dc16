"""Building a MeshWorld: build + first query against Open3D's RaycastingScene and a bare ``wp.Mesh``.

    python benchmarks/bench_world.py                    # CPU, 1k to 1.3M faces, 1 to 256 environments
    python benchmarks/bench_world.py --quick            # up to 82k faces and 16 environments, 1 run each
    python benchmarks/bench_world.py --max-faces 400000 --device cuda

Meshes (each at about 1k, 5k, 20k, 80k, 330k and 1.3M faces): an icosphere (closed and convex: every table
of the build, the plane tree included), a noisy height field (an open scanned-like surface: BVH only), a
torus (closed, not convex: the pseudo-normal tables and the signed grid). For each, the median wall time of

* ``warpgeo``: ``MeshWorld([(vertices, faces)])`` and the first ``signed_distance`` of 1,000 points drawn in
  the mesh's box (grown by 10 %), the result on the host;
* ``open3d``: ``RaycastingScene.add_triangles`` and the first ``compute_signed_distance`` of the same points
  (``pip install open3d``; on Debian it needs ``apt-get install libusb-1.0-0``; skipped when missing);
* ``wp.Mesh``: the bare Warp mesh (its BVH) warpgeo builds too, from NumPy arrays,

with ratios (``x open3d`` <= 1: warpgeo builds and answers first). Kernels are compiled beforehand (a first
build and query of a small mesh, untimed): Warp's kernel cache, as after ``warpgeo warmup``.

Environments: ``MeshWorld.from_envs`` of 1 to 256 environments of 10 primitive-sized meshes (4 boxes, 2
icospheres, 2 cylinders, a capsule and a torus; 12 to 640 faces), each environment holding the same 10
mesh objects at its own poses ("shared": a mesh that recurs is built once) or its own copies scaled apart
("distinct": every mesh built), then ``set_poses`` and ``set_enabled`` of the whole world per call.

Distinct objects at RL scale (``--rl-envs``, 256 and 1,024 by default): every environment holds 10 objects of
its own, none equal to another: trimesh icospheres, cylinders, capsules, tori, annuli and cones of 0.5k-4k
faces, each scaled per axis by 0.05-0.3, posed in a unit cube. Timed: ``MeshWorld.from_envs`` + the first
``sphere_mesh_cost`` of 1,000 spheres per environment (``(E, 1000, 4)``, ``env_index`` = the environment), the
result on the host; against Open3D: one ``RaycastingScene`` per environment (its meshes' vertices posed) + the
first ``compute_signed_distance`` of the same 1,000 centres in each. ``--rl-tables``: one more run, until every
table of the world is in (``wait_tables``; the background build of these fan-shaped meshes takes minutes).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import trimesh

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_size_arguments, import_peer, print_header, report, sync, timeit

import warpgeo
from warpgeo import _warp

#: The icosphere subdivisions of each size (20 * 4**s faces); the other meshes are made to about as many.
_SUBDIVISIONS = (3, 4, 5, 6, 7, 8)
_QUERY_POINTS = 1000


def icosphere(subdivisions: int) -> tuple[np.ndarray, np.ndarray]:
    mesh = trimesh.creation.icosphere(subdivisions=subdivisions, radius=0.5)
    return np.asarray(mesh.vertices), np.asarray(mesh.faces)


def height_field(faces: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """An open, scanned-like surface: an n x n grid of heights (smooth hills plus noise), 2 (n - 1)**2 faces."""
    n = max(2, round((faces / 2) ** 0.5) + 1)
    gen = np.random.default_rng(seed)
    x, y = np.meshgrid(np.linspace(0.0, 1.0, n), np.linspace(0.0, 1.0, n), indexing="ij")
    z = 0.1 * np.sin(6 * x) * np.cos(5 * y) + 0.002 * gen.standard_normal((n, n))
    vertices = np.stack([x, y, z], axis=-1).reshape(-1, 3)
    corner = (np.arange(n - 1)[:, None] * n + np.arange(n - 1)[None, :]).reshape(-1)
    quads = np.stack([corner, corner + n, corner + n + 1, corner + 1], axis=1)
    faces = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    return vertices, faces


def torus(faces: int) -> tuple[np.ndarray, np.ndarray]:
    minor = max(8, round((faces / 4) ** 0.5))
    mesh = trimesh.creation.torus(
        major_radius=0.5, minor_radius=0.15, major_sections=2 * minor, minor_sections=minor
    )
    return np.asarray(mesh.vertices), np.asarray(mesh.faces)


def query_points(vertices: np.ndarray, seed: int = 1) -> np.ndarray:
    lo, hi = vertices.min(axis=0), vertices.max(axis=0)
    pad = 0.05 * (hi - lo)
    gen = np.random.default_rng(seed)
    return gen.uniform(lo - pad, hi + pad, size=(_QUERY_POINTS, 3)).astype(np.float32)


def warpgeo_build_and_query(vertices, faces, points: torch.Tensor, device) -> float:
    world = warpgeo.MeshWorld([(vertices, faces)], device=device)
    return float(warpgeo.signed_distance(points, world).sum().item())


def time_warpgeo(vertices, faces, points: torch.Tensor, device, repeat: int) -> tuple[float, float]:
    """Median seconds of (build + first query, build + all tables in). After each run the world's background
    tables are waited for (untimed for the first figure), so that no run's background work overlaps the next
    timing, of warpgeo or of a peer."""
    first, full = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        world = warpgeo.MeshWorld([(vertices, faces)], device=device)
        float(warpgeo.signed_distance(points, world).sum().item())
        sync(device)
        first.append(time.perf_counter() - start)
        world.wait_tables()
        full.append(time.perf_counter() - start)
    return statistics.median(first), statistics.median(full)


def open3d_build_and_query(o3d, vertices32, faces32, points32) -> float:
    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(o3d.core.Tensor(vertices32), o3d.core.Tensor(faces32))
    return float(scene.compute_signed_distance(o3d.core.Tensor(points32)).numpy().sum())


def bare_warp_mesh(vertices32, faces32, device) -> None:
    wp = _warp.warp()
    wdev = _warp.warp_device(device)
    mesh = wp.Mesh(
        points=wp.array(vertices32, dtype=wp.vec3, device=wdev),
        indices=wp.array(faces32.reshape(-1), dtype=wp.int32, device=wdev),
    )
    wp.synchronize_device(wdev)
    del mesh


def bench_meshes(args, o3d, device) -> None:
    kinds = {
        "icosphere": icosphere,
        "height field (open)": lambda s: height_field(20 * 4**s),
        "torus": lambda s: torus(20 * 4**s),
    }
    # compile every kernel a build and a first query launch (untimed)
    for make in kinds.values():
        v, f = make(2)
        warpgeo_build_and_query(v, f, torch.from_numpy(query_points(v)).to(device), device)
    summary = []
    for name, make in kinds.items():
        for s in _SUBDIVISIONS:
            if 20 * 4**s <= args.max_faces:
                vertices, faces = make(s)
                summary.append((name, len(faces), bench_one(name, vertices, faces, args, o3d, device)))
    print(
        "\nsummary (seconds; ratio warpgeo / open3d, warpgeo / wp.Mesh; build + every table, background included)"
    )
    for name, faces, times in summary:
        mine = times["warpgeo build + first query"]
        theirs = times.get("open3d build + first query")
        o3d_ratio = f"{mine / theirs:6.2f}x open3d" if theirs else "  (no open3d)"
        print(
            f"  {name:<22} {faces:>10,} faces  warpgeo {mine:8.3f} s  {o3d_ratio}  "
            f"{mine / times['bare wp.Mesh']:6.2f}x wp.Mesh  (tables in: {times['warpgeo, + background tables in']:.3f} s)"
        )


def bench_one(name: str, vertices: np.ndarray, faces: np.ndarray, args, o3d, device) -> dict[str, float]:
    """Time one mesh's build + first query (warpgeo, Open3D) and its bare wp.Mesh; print the table."""
    v32, f32 = vertices.astype(np.float32), faces.astype(np.int32)
    points32 = query_points(vertices)
    points = torch.from_numpy(points32).to(device)
    repeat = args.repeat if len(faces) < 1_000_000 else max(1, args.repeat - 1)
    first, full = time_warpgeo(vertices, faces, points, device, repeat)
    rows = [("warpgeo build + first query", first), ("warpgeo, + background tables in", full)]
    if o3d is not None:
        f32u = f32.astype(np.uint32)
        rows.append(
            (
                "open3d build + first query",
                timeit(
                    lambda: open3d_build_and_query(o3d, v32, f32u, points32), "cpu", repeat=repeat, warmup=0
                ),
            )
        )
    rows.append(
        ("bare wp.Mesh", timeit(lambda: bare_warp_mesh(v32, f32, device), device, repeat=repeat, warmup=0))
    )
    report(f"{name}: {len(faces):,} faces", rows, "warpgeo build + first query")
    return dict(rows)


def small_meshes(scale: float = 1.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Ten primitive-sized meshes: 4 boxes, 2 icospheres, 2 cylinders, a capsule, a torus."""
    meshes = [trimesh.creation.box(extents=np.array([0.2, 0.3, 0.1]) * (1 + 0.1 * k)) for k in range(4)]
    meshes += [trimesh.creation.icosphere(subdivisions=2, radius=0.1 * (1 + 0.2 * k)) for k in range(2)]
    meshes += [trimesh.creation.cylinder(0.05 * (1 + k), 0.3, sections=32) for k in range(2)]
    meshes.append(trimesh.creation.capsule(height=0.2, radius=0.05))
    meshes.append(trimesh.creation.torus(0.2, 0.05, major_sections=32, minor_sections=10))
    return [(np.asarray(m.vertices) * scale, np.asarray(m.faces)) for m in meshes]


def random_poses(gen: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    q = gen.standard_normal((*shape, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    return np.concatenate([gen.uniform(-2.0, 2.0, (*shape, 3)), q], axis=-1)


def bench_envs(args, device) -> None:
    gen = np.random.default_rng(0)
    shared = small_meshes()
    warpgeo.MeshWorld.from_envs([shared], device=device)  # compile (untimed)
    points = torch.from_numpy(gen.uniform(-2.0, 2.0, (_QUERY_POINTS, 3)).astype(np.float32)).to(device)
    print("\nfrom_envs: E environments x 10 meshes; build (+ first query of 1,000 points, env 0)")
    print(f"  {'environments':>12} {'meshes':>8} {'shared (s)':>12} {'distinct (s)':>14}")
    for envs in args.envs:
        poses = random_poses(gen, (envs, 10))
        start = time.perf_counter()
        world = warpgeo.MeshWorld.from_envs([shared] * envs, poses=poses, device=device)
        warpgeo.signed_distance(points, world).sum().item()
        sync(device)
        shared_s = time.perf_counter() - start
        distinct_s = float("nan")
        if envs <= args.max_distinct_envs:
            copies = [small_meshes(1.0 + 0.001 * e) for e in range(envs)]
            start = time.perf_counter()
            world_d = warpgeo.MeshWorld.from_envs(copies, poses=poses, device=device)
            warpgeo.signed_distance(points, world_d).sum().item()
            sync(device)
            distinct_s = time.perf_counter() - start
        print(f"  {envs:>12} {10 * envs:>8} {shared_s:>12.3f} {distinct_s:>14.3f}")
    per_call = [
        ("set_poses", timeit(lambda: world.set_poses(poses), device, repeat=args.repeat * 10)),
        (
            "set_enabled",
            timeit(
                lambda: world.set_enabled(np.ones((envs, 10), dtype=bool)), device, repeat=args.repeat * 10
            ),
        ),
    ]
    report(f"per call, {envs} environments x 10 meshes (numpy input)", per_call, "set_poses")


def rl_object(gen: np.random.Generator) -> trimesh.Trimesh:
    """One random object of 0.5k-4k faces (closed; an icosphere, cylinder, capsule, torus, annulus or cone),
    scaled per axis by 0.05-0.3."""
    kind = int(gen.integers(6))
    if kind == 0:
        mesh = trimesh.creation.icosphere(subdivisions=3, radius=1.0)  # 1,280 faces
    elif kind == 1:
        mesh = trimesh.creation.cylinder(1.0, 2.0, sections=int(gen.integers(125, 1001)))  # 4 s faces
    elif kind == 2:
        count = int(gen.integers(16, 45))
        mesh = trimesh.creation.capsule(height=1.0, radius=0.5, count=[count, count])  # ~2 c**2 faces
    elif kind == 3:
        minor = int(gen.integers(12, 33))
        mesh = trimesh.creation.torus(1.0, 0.4, major_sections=2 * minor, minor_sections=minor)  # 4 m**2
    elif kind == 4:
        mesh = trimesh.creation.annulus(0.5, 1.0, 1.0, sections=int(gen.integers(63, 501)))  # 8 s faces
    else:
        mesh = trimesh.creation.cone(1.0, 2.0, sections=int(gen.integers(250, 2001)))  # 2 s faces
    scale = gen.uniform(0.05, 0.3, 3) / np.abs(np.asarray(mesh.vertices)).max()
    return trimesh.Trimesh(np.asarray(mesh.vertices) * scale, np.asarray(mesh.faces), process=False)


def _rotation(q: np.ndarray) -> np.ndarray:
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def rl_scenes(envs: int, seed: int = 0) -> tuple[list, np.ndarray, np.ndarray]:
    """``(meshes (E lists of 10), poses (E, 10, 7), spheres (E, 1000, 4) float32 of radius 0.02)``."""
    gen = np.random.default_rng(seed)
    meshes = [[rl_object(gen) for _ in range(10)] for _ in range(envs)]
    poses = random_poses(gen, (envs, 10))
    poses[..., :3] *= 0.25  # in a unit cube
    centres = gen.uniform(-0.6, 0.6, (envs, _QUERY_POINTS, 3))
    spheres = np.concatenate([centres, np.full((envs, _QUERY_POINTS, 1), 0.02)], axis=-1)
    return meshes, poses, spheres.astype(np.float32)


def warpgeo_rl(meshes, poses, spheres: torch.Tensor, env_index: torch.Tensor, device, tables: bool) -> tuple:
    """Seconds of (from_envs + first cost query, + every table in (``tables``; else NaN)). Without
    ``tables`` the world is dropped at once, and its background build (which stops) is waited for, untimed,
    so that it overlaps no later timing."""
    start = time.perf_counter()
    world = warpgeo.MeshWorld.from_envs(meshes, poses=poses, device=device)
    warpgeo.sphere_mesh_cost(spheres, world, env_index=env_index).sum().item()
    sync(device)
    first = time.perf_counter() - start
    if tables:
        world.wait_tables()
        sync(device)
        return first, time.perf_counter() - start
    # the background build's future (not its Later, which holds the world's build token)
    future = None if world._later is None else world._later.future
    del world
    gc.collect()
    if future is not None:
        future.exception()  # cancelled at its next step
    return first, float("nan")


def open3d_rl(o3d, posed: list, centres: np.ndarray) -> float:
    start = time.perf_counter()
    total = 0.0
    for e, env in enumerate(posed):
        scene = o3d.t.geometry.RaycastingScene()
        for vertices, faces in env:
            scene.add_triangles(o3d.core.Tensor(vertices), o3d.core.Tensor(faces))
        total += float(scene.compute_signed_distance(o3d.core.Tensor(centres[e])).numpy().sum())
    return time.perf_counter() - start


def bench_rl(args, o3d, device) -> None:
    print(
        f"\ndistinct objects: E environments x 10 objects of 0.5k-4k faces, each its own (build + first cost "
        f"query of {args.rl_points:,} spheres per environment; warpgeo and open3d alternate, medians)"
    )
    small, small_poses, small_spheres = rl_scenes(2, seed=99)  # compile (untimed)
    warpgeo_rl(small, small_poses, torch.from_numpy(small_spheres).to(device),
               torch.arange(2, device=device), device, tables=True)  # fmt: skip
    for envs in args.rl_envs:
        meshes, poses, spheres = rl_scenes(envs)
        spheres = np.ascontiguousarray(spheres[:, : args.rl_points])
        faces = sum(len(m.faces) for env in meshes for m in env)
        spheres_t = torch.from_numpy(spheres).to(device)
        env_index = torch.arange(envs, device=device)
        posed = [
            [
                (
                    (np.asarray(m.vertices) @ _rotation(p[3:]).T + p[:3]).astype(np.float32),
                    np.asarray(m.faces, dtype=np.uint32),
                )
                for m, p in zip(env, env_poses, strict=True)
            ]
            for env, env_poses in zip(meshes, poses, strict=True)
        ]
        centres = np.ascontiguousarray(spheres[..., :3])
        mine, theirs = [], []
        for _ in range(args.rl_repeat):
            mine.append(warpgeo_rl(meshes, poses, spheres_t, env_index, device, tables=False)[0])
            if o3d is not None:
                theirs.append(open3d_rl(o3d, posed, centres))
        first = statistics.median(mine)
        line = f"  {envs:>6} envs {10 * envs:>7} objects {faces:>10,} faces  warpgeo {first:7.3f} s"
        if theirs:
            peer = statistics.median(theirs)
            line += f"  open3d {peer:7.3f} s  {first / peer:6.2f}x open3d"
        if args.rl_tables:
            full = warpgeo_rl(meshes, poses, spheres_t, env_index, device, tables=True)[1]
            line += f"  (tables in: {full:.3f} s, one run)"
        print(line, flush=True)
        if args.rl_phases:
            print("    " + rl_phases(meshes, poses, device), flush=True)


#: The steps of a world build that :func:`rl_phases` times, ``name: (module, label)`` (module attributes of
#: ``warpgeo._world`` / ``warpgeo._threads``, looked up by name at each call: wrapping them times every call)
_PHASES = {
    "_build_meshes": ("warpgeo._world.meshes", "BVHs + face checks"),
    "faces_meet": ("warpgeo._world.meshes", "closed-mesh check"),
    "_in_chunks": (
        "warpgeo._threads",
        "runs of meshes on threads (BVHs, edge pairs, closed meshes' tables: inside the others)",
    ),
    "_grids": ("warpgeo._world.tables", "grids"),
    "build_tables": ("warpgeo._world.tables", "tables, all"),
    "prepare": ("warpgeo._world.prepare", "prepare, all"),
}


def rl_phases(meshes, poses, device) -> str:
    """One more ``from_envs`` of ``meshes`` with every table built at once (no background build), each step
    of :data:`_PHASES` timed (wall seconds, the device synchronised around each): where a world's build goes,
    on CUDA (whose tables are always built at once) and on the CPU (where, from 32k faces, the closed meshes'
    tables are built side by side with the closed-mesh check and the grids: their times overlap)."""
    import importlib

    from warpgeo._world import prepare as _prepare

    spent = dict.fromkeys(_PHASES, 0.0)
    homes = {name: importlib.import_module(module) for name, (module, _) in _PHASES.items()}
    saved = {name: getattr(homes[name], name) for name in _PHASES}
    limit = _prepare.BACKGROUND_FACES

    def timed(name, fn):
        def run(*args, **kwargs):
            sync(device)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sync(device)
                spent[name] += time.perf_counter() - start

        return run

    try:
        for name, fn in saved.items():
            setattr(homes[name], name, timed(name, fn))
        _prepare.BACKGROUND_FACES = 1 << 62
        start = time.perf_counter()
        warpgeo.MeshWorld.from_envs(meshes, poses=poses, device=device)
        sync(device)
        total = time.perf_counter() - start
    finally:
        for name, fn in saved.items():
            setattr(homes[name], name, fn)
        _prepare.BACKGROUND_FACES = limit
    parts = ", ".join(f"{label} {spent[name]:.2f} s" for name, (_, label) in _PHASES.items())
    return f"every table at once: from_envs {total:.2f} s; {parts}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument(
        "--max-faces", type=int, default=None, help="largest mesh (default 1.4M; 100k --quick)"
    )
    parser.add_argument("--repeat", type=int, default=None, help="timed runs per size (default 3; 1 --quick)")
    parser.add_argument(
        "--envs", type=int, nargs="*", default=None, help="environment counts (1 4 16 64 256)"
    )
    parser.add_argument(
        "--max-distinct-envs",
        type=int,
        default=16,
        help="largest E of the 'distinct' column (every mesh built)",
    )
    parser.add_argument(
        "--rl-envs", type=int, nargs="*", default=None, help="distinct-object environments (256 1024)"
    )
    parser.add_argument(
        "--rl-repeat", type=int, default=None, help="timed runs of each (default 3; 1 --quick)"
    )
    parser.add_argument("--rl-points", type=int, default=_QUERY_POINTS, help="spheres per environment (1000)")
    parser.add_argument(
        "--rl-tables", action="store_true", help="one more run of each, until every table is in (minutes)"
    )
    parser.add_argument(
        "--rl-phases",
        action="store_true",
        help="one more build of each, every table at once, its steps timed (where a CUDA world's build goes)",
    )
    parser.add_argument(
        "--only", choices=("meshes", "envs", "rl"), nargs="*", default=None, help="cases to run (all)"
    )
    args = parser.parse_args(argv)
    if args.rl_envs is None:
        args.rl_envs = [16] if args.quick else [256, 1024]
    if args.rl_repeat is None:
        args.rl_repeat = 1 if args.quick else 3
    if args.only is None:
        args.only = ["meshes", "envs", "rl"]
    if args.max_faces is None:
        args.max_faces = 100_000 if args.quick else 1_400_000
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.envs is None:
        args.envs = [1, 4, 16] if args.quick else [1, 4, 16, 64, 256]
    device = torch.device(args.device)
    print_header(device, f"{_QUERY_POINTS} query points")
    o3d = import_peer("open3d", "open3d", " (on the CPU)")
    if "meshes" in args.only:
        bench_meshes(args, o3d, device)
    if "envs" in args.only:
        bench_envs(args, device)
    if "rl" in args.only:
        bench_rl(args, o3d, device)


if __name__ == "__main__":
    main()
