"""Sphere-mesh collision cost: warpgeo spheres/s against Open3D's RaycastingScene signed distance.

    python benchmarks/bench_sdf.py                      # CPU, 100k spheres x 4 posed meshes
    python benchmarks/bench_sdf.py --sign-method normal
    python benchmarks/bench_sdf.py --device cuda --spheres 1000000
    python benchmarks/bench_sdf.py --quick              # 10k spheres, 3 runs

The scene is the four posed obstacles of ``tests/test_sdf.py`` (table top, box, sphere, torus). Spheres
(radius 1-5 cm, activation distance 2 cm) are drawn uniformly in the scene box, or clustered near the
surfaces (surface samples plus 3 cm Gaussian noise). For each set it prints spheres/s of
``sphere_mesh_cost`` (forward, and forward + backward), of ``signed_distance``, and Open3D's
``RaycastingScene.compute_signed_distance`` points/s on the same centres when open3d is installed
(``pip install open3d``; on Debian it needs ``apt-get install libusb-1.0-0``), with ratios to warpgeo.

It also counts missed collisions: spheres that a full query says collide (union signed distance of the
centre below r + eta, with no search bound) but whose cost is 0 — with and without ``max_distance`` —
and checks warpgeo's distances against Open3D's where it is available.

Two threads: torch's OpenMP workers spin for a while after each parallel torch op (the value check's sum, the
backward's product) and take a core from warpgeo's launch threads; ``OMP_WAIT_POLICY=PASSIVE`` (set before
Python starts) puts them to sleep at once. The header prints the setting, and the load average: on a shared
machine a split launch's ranges take their CPU time but not their wall time.

Per core (``torch.set_num_threads(1)``, Open3D ``nthreads=1``), it also times the *cuRobo-semantics* mode
(``benchmarks/_curobo_like.py``): the same cost from one closest-point query per sphere and mesh bounded
by cuRobo's default ``max_dist`` of 0.1 — which misses every centre deeper inside a mesh than that — as the
speed-of-light reference for the exact cost, and point-cloud-utils' ``signed_distance_to_mesh`` (fast
winding numbers, on the posed meshes concatenated) when it is installed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import add_size_arguments, fill_sizes, import_peer, print_header, report, timeit
from test_sdf import SCENE_POSES, quat_matrix, scene_meshes

import warpgeo

_ETA = 0.02


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument("--spheres", type=int, default=None, help="default 100k; 10k with --quick")
    parser.add_argument("--repeat", type=int, default=None, help="timed runs (default 7; 3 with --quick)")
    parser.add_argument("--sign-method", default="ray", choices=["ray", "winding", "normal", "unsigned"])
    args = parser.parse_args(argv)
    fill_sizes(args, spheres=(100_000, 10_000), repeat=(7, 3))
    device = torch.device(args.device)
    print_header(device, f"{args.spheres} spheres x 4 posed meshes, sign_method={args.sign_method}")

    o3d = import_peer("open3d", "open3d", " (on the CPU)")
    pcu = import_peer("point_cloud_utils", "point-cloud-utils", " (on the CPU)")
    if hasattr(os, "getloadavg"):
        print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    # torch's OpenMP workers spin for a while after each parallel op (libgomp's default) and then compete for the
    # cores with warpgeo's launch threads: passive, they sleep at once (set before Python starts)
    print(
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset: OpenMP workers spin after each op)')}"
    )

    meshes = scene_meshes()
    world = warpgeo.MeshWorld(meshes, poses=SCENE_POSES, device=device, sign_method=args.sign_method)
    posed = [_posed_vertices(m, p) for m, p in zip(meshes, SCENE_POSES, strict=True)]
    scene = _open3d_scene(o3d, posed, meshes) if o3d is not None else None

    gen = np.random.default_rng(0)
    for name, centres in (
        ("uniform", _uniform(gen, posed, args.spheres)),
        ("near surfaces", _near(gen, posed, meshes, args.spheres)),
    ):
        radii = gen.uniform(0.01, 0.05, size=(len(centres), 1))
        spheres = torch.from_numpy(np.concatenate([centres, radii], axis=1).astype(np.float32)).to(device)
        bench_set(name, spheres, world, scene, args, device)
        if device.type == "cpu":
            bench_per_core(name, spheres, world, scene, pcu, posed, meshes, args)


def bench_set(name: str, spheres: torch.Tensor, world, scene, args, device) -> None:
    n = spheres.shape[0]
    points = spheres[:, :3].contiguous()
    leaf = spheres.clone().requires_grad_(True)

    def forward():
        return warpgeo.sphere_mesh_cost(spheres, world, activation_distance=_ETA)

    def forward_backward():
        leaf.grad = None
        warpgeo.sphere_mesh_cost(leaf, world, activation_distance=_ETA).sum().backward()

    def distance():
        return warpgeo.signed_distance(points, world)

    rows = [
        ("warpgeo cost fwd+bwd", timeit(forward_backward, device, repeat=args.repeat)),
        ("warpgeo cost fwd", timeit(forward, device, repeat=args.repeat)),
        ("warpgeo signed_distance", timeit(distance, device, repeat=args.repeat)),
    ]
    if scene is not None:
        import open3d as o3d

        query = o3d.core.Tensor(points.cpu().numpy())
        rows.append(
            (
                "open3d compute_signed_distance",
                timeit(lambda: scene.compute_signed_distance(query), "cpu", repeat=args.repeat),
            )
        )
    report(f"{name}: {n} spheres", rows, "warpgeo cost fwd+bwd")
    print("  throughput: " + ", ".join(f"{label} {n / t / 1e3:,.0f}k/s" for label, t in rows))

    # missed collisions against a full query (no search bound) of the union signed distance
    d_full = distance().double().cpu()
    radius = spheres[:, 3].double().cpu()
    colliding = d_full < radius + _ETA
    for hint in (None, 0.0, 0.5):
        cost = warpgeo.sphere_mesh_cost(spheres, world, activation_distance=_ETA, max_distance=hint).cpu()
        missed = int((colliding & (cost == 0)).sum())
        spurious = int((~colliding & (cost > 0)).sum())
        print(
            f"  max_distance={hint}: {int(colliding.sum())} colliding, {missed} missed, {spurious} spurious"
        )
    if scene is not None:
        import open3d as o3d

        theirs = (
            scene.compute_signed_distance(o3d.core.Tensor(points.cpu().numpy())).numpy().astype(np.float64)
        )
        diff = np.abs(d_full.numpy() - theirs)
        sign = np.sign(d_full.numpy()) != np.sign(theirs)
        print(f"  vs open3d: max |d difference| {diff.max():.2e}, sign disagreements {int(sign.sum())}")


_CUROBO_MAX_DIST = 0.1  # cuRobo v1's default


def bench_per_core(name, spheres, world, scene, pcu, posed, meshes, args) -> None:
    """One thread each: warpgeo's exact cost against the cuRobo-semantics mode, Open3D and pcu."""
    import _curobo_like
    import warp as wp

    n = spheres.shape[0]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        leaf = spheres.clone().requires_grad_(True)

        def exact():
            leaf.grad = None
            warpgeo.sphere_mesh_cost(leaf, world, activation_distance=_ETA).sum().backward()

        from warpgeo.world import WORLD_FIELDS

        fields = dict(zip(WORLD_FIELDS, world.kernel_args(torch.float32).world, strict=True))
        ids = wp.array(fields["mesh_ids"][0].cpu().numpy().view(np.uint64), dtype=wp.uint64, device="cpu")
        xfs = wp.array(fields["inv_poses"][0].cpu().numpy(), dtype=wp.transform)
        wsph = wp.array(spheres.cpu().numpy(), dtype=wp.vec4, device="cpu")
        cost = wp.zeros(n, dtype=float, device="cpu")
        grad = wp.zeros(n, dtype=wp.vec4, device="cpu")
        normal = int(args.sign_method == "normal")

        def curobo_like():
            wp.launch(
                _curobo_like.bounded_cost,
                n,
                inputs=[wsph, ids, xfs, _CUROBO_MAX_DIST, _ETA, normal, cost, grad],
                device="cpu",
            )
            # the backward of a cost whose gradient the forward wrote: one multiply, as warpgeo's
            torch.from_numpy(grad.numpy()).mul_(1.0)

        points = spheres[:, :3].contiguous()
        rows = [
            ("warpgeo exact cost fwd+bwd", timeit(exact, "cpu", repeat=args.repeat)),
            (
                f"cuRobo-semantics (max_dist {_CUROBO_MAX_DIST})",
                timeit(curobo_like, "cpu", repeat=args.repeat),
            ),
            (
                "warpgeo signed_distance",
                timeit(lambda: warpgeo.signed_distance(points, world), "cpu", repeat=args.repeat),
            ),
        ]
        if scene is not None:
            import open3d as o3d

            query = o3d.core.Tensor(points.cpu().numpy())
            rows.append(
                (
                    "open3d compute_signed_distance",
                    timeit(
                        lambda: scene.compute_signed_distance(query, nthreads=1), "cpu", repeat=args.repeat
                    ),
                )
            )
        if pcu is not None:
            verts = np.concatenate(posed).astype(np.float64)
            offsets = np.cumsum([0] + [len(v) for v in posed[:-1]])
            faces = np.concatenate([m.faces + o for m, o in zip(meshes, offsets, strict=True)]).astype(
                np.int64
            )
            pts64 = points.double().cpu().numpy()
            rows.append(
                (
                    "pcu signed_distance_to_mesh",
                    timeit(
                        lambda: pcu.signed_distance_to_mesh(pts64, verts, faces), "cpu", repeat=args.repeat
                    ),
                )
            )
        report(f"{name}: {n} spheres, one thread each", rows, "warpgeo exact cost fwd+bwd")
        print("  throughput: " + ", ".join(f"{label} {n / t / 1e3:,.0f}k/s" for label, t in rows))
        curobo_like()
        d_full = warpgeo.signed_distance(points, world).double().cpu()
        colliding = d_full < spheres[:, 3].double().cpu() + _ETA
        missed = int((colliding & (torch.from_numpy(cost.numpy()) == 0)).sum())
        print(f"  cuRobo-semantics misses {missed} of {int(colliding.sum())} colliding spheres (deep inside)")
    finally:
        torch.set_num_threads(threads)


def _posed_vertices(mesh, pose) -> np.ndarray:
    return mesh.vertices @ quat_matrix(pose[3:]).T + np.asarray(pose[:3])


def _uniform(gen, posed, n) -> np.ndarray:
    allv = np.concatenate(posed)
    lo, hi = allv.min(axis=0) - 0.1, allv.max(axis=0) + 0.1
    return gen.uniform(lo, hi, size=(n, 3))


def _near(gen, posed, meshes, n) -> np.ndarray:
    import trimesh

    per = [n // len(meshes) + (i < n % len(meshes)) for i in range(len(meshes))]
    samples = [
        trimesh.sample.sample_surface(
            trimesh.Trimesh(v, m.faces, process=False), k, seed=int(gen.integers(1 << 31))
        )[0]
        for v, m, k in zip(posed, meshes, per, strict=True)
    ]
    centres = np.concatenate(samples)
    return centres + gen.normal(scale=0.03, size=centres.shape)


def _open3d_scene(o3d, posed, meshes):
    scene = o3d.t.geometry.RaycastingScene()
    for v, m in zip(posed, meshes, strict=True):
        scene.add_triangles(o3d.core.Tensor(v.astype(np.float32)), o3d.core.Tensor(m.faces.astype(np.uint32)))
    return scene


if __name__ == "__main__":
    main()
