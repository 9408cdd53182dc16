"""Distance grids: the signed EDT against SciPy, depth-frame fusion against Open3D's TSDF (same run, ratios).

    python benchmarks/bench_distance_grid.py            # 256^3 EDT; a 640x480 frame into a 2 m cube at 1 cm
    python benchmarks/bench_distance_grid.py --quick    # 96^3; a 320x240 frame at 2 cm
    python benchmarks/bench_distance_grid.py --device cuda

* Signed EDT: ``DistanceGrid.from_occupancy`` of an ``N^3`` occupancy (spheres and boxes) against SciPy's
  ``ndimage.distance_transform_edt``, its two calls (outside and inside) and the signed combination: the same
  result (the test suite checks it). Goal (issue 46): <= 0.7x SciPy's time.
* Fusion: one depth frame of an analytic scene (a floor, a wall and spheres, ray cast here) integrated into a
  2 m cube at 1 cm (201^3 voxels, truncation 4 voxels) by ``DepthFusion.integrate``, against Open3D's
  ``t.geometry.VoxelBlockGrid`` on the CPU (``integrate`` alone, and with the ``compute_unique_block_coordinates``
  + hash-map activation it needs first). Goal: <= 1.0x. The ESDF update after it (``distance_grid()``) is
  reported too. Times: medians after warm-up; ratios are warpgeo / peer (< 1: warpgeo faster).
* Query: ``DistanceGrid.query`` of 1M points in a 128^3 grid, forward and forward + backward, against SciPy's
  ``ndimage.map_coordinates(order=1)`` (the same trilinear values, no gradient).
* World (``--part world``): ``sphere_mesh_cost`` of 100k spheres against a 327,680-face torus as a mesh entry
  (its tables built: ``wait_tables``) and as a ``DistanceGrid.from_mesh`` entry at 1 cm, spheres/s of each.
  Goal (issue 46): the grid >= 3x the mesh's spheres/s. Then 1M spheres (CUDA; the run's count on the CPU)
  against 4 posed copies of that grid, forward + backward (goal on an H100 / H200: <= 0.5 ms).

``--json PATH`` writes ``{key: ms}``: ``edt_n256_ms``, ``scipy_edt_n256_ms``, ``fuse_640x480_ms``,
``esdf_201_ms``, ``open3d_integrate_ms``, ``open3d_touch_integrate_ms``, ``query_1m_fwd_ms``,
``query_1m_fwd_bwd_ms``, ``scipy_map_coordinates_1m_ms``, ``world_mesh_cost_ms``, ``world_grid_cost_ms``,
``world_4grids_fwd_bwd_ms`` (sizes as run).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from _common import (
    add_size_arguments,
    device_time,
    fill_sizes,
    import_peer,
    print_header,
    timeit,
    write_figures,
)

from warpgeo.distance_grid import DepthFusion, DistanceGrid


def occupancy(n: int, seed: int = 0) -> torch.Tensor:
    """Random spheres and boxes in an ``n^3`` grid (about 10% occupied)."""
    rng = np.random.default_rng(seed)
    axes = np.arange(n, dtype=np.float32)
    x, y, z = np.meshgrid(axes, axes, axes, indexing="ij", sparse=True)
    occ = np.zeros((n, n, n), dtype=bool)
    for _ in range(12):
        c = rng.random(3) * n
        r = (0.05 + 0.08 * rng.random()) * n
        occ |= (x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2 < r * r
        lo = rng.random(3) * n
        hi = lo + (0.05 + 0.1 * rng.random(3)) * n
        occ |= (x >= lo[0]) & (x < hi[0]) & (y >= lo[1]) & (y < hi[1]) & (z >= lo[2]) & (z < hi[2])
    return torch.from_numpy(occ)


def depth_frame(height: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """z-depth of a floor (z = -0.9), a wall (y = 0.9) and three spheres, seen from (0, -0.9, 0.3) looking
    along +y and down; returns ``(depth (H, W) float32, K (3, 3), pose [x, y, z, qw, qx, qy, qz])``."""
    f = 0.82 * width
    k = np.array([[f, 0, (width - 1) / 2], [0, f, (height - 1) / 2], [0, 0, 1.0]])
    eye = np.array([0.0, -0.9, 0.3])
    fwd = np.array([0.0, 1.0, -0.45])
    fwd /= np.linalg.norm(fwd)
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    rot = np.stack((right, down, fwd), 1)
    u, v = np.meshgrid(np.arange(width), np.arange(height))
    d = np.stack(((u - k[0, 2]) / f, (v - k[1, 2]) / f, np.ones(u.shape)), -1) @ rot.T
    t = np.full(u.shape, np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        for axis, level in ((2, -0.9), (1, 0.9)):
            hit = (level - eye[axis]) / d[..., axis]
            t = np.where((hit > 0) & np.isfinite(hit), np.minimum(t, hit), t)
        for c, r in (((0.3, 0.2, -0.5), 0.3), ((-0.4, 0.4, -0.2), 0.25), ((0.0, 0.0, 0.3), 0.15)):
            oc = eye - np.array(c)
            b = (d * oc).sum(-1)
            a = (d * d).sum(-1)
            disc = b * b - a * ((oc * oc).sum() - r * r)
            hit = (-b - np.sqrt(np.maximum(disc, 0))) / a
            t = np.where((disc >= 0) & (hit > 0), np.minimum(t, hit), t)
    depth = np.where(np.isfinite(t) & (t < 3.0), t, 0.0).astype(np.float32)
    w = np.sqrt(max(0.0, 1 + np.trace(rot))) / 2
    quat = np.array(
        [
            w,
            (rot[2, 1] - rot[1, 2]) / (4 * w),
            (rot[0, 2] - rot[2, 0]) / (4 * w),
            (rot[1, 0] - rot[0, 1]) / (4 * w),
        ]
    )
    return depth, k, np.concatenate((eye, quat))


FIGURES: dict[str, float | None] = {}


def bench_edt(n: int, device: str, repeat: int) -> None:
    import scipy
    from scipy import ndimage

    occ = occupancy(n)
    occ_np = occ.numpy()
    occ_dev = occ.to(device)
    print(f"\nsigned EDT of a {n}^3 occupancy ({occ_np.mean():.1%} occupied), scipy {scipy.__version__}")

    def ours():
        DistanceGrid.from_occupancy(occ_dev, 0.01)

    def scipy_signed():
        outside = ndimage.distance_transform_edt(~occ_np)
        inside = ndimage.distance_transform_edt(occ_np)
        np.subtract(outside, inside, out=outside)
        outside *= 0.01

    t_ours = timeit(ours, device, repeat=repeat)
    t_scipy = timeit(scipy_signed, "cpu", repeat=repeat)
    print(f"  warpgeo from_occupancy        {t_ours * 1e3:10.1f} ms")
    print(f"  scipy edt (outside + inside)  {t_scipy * 1e3:10.1f} ms")
    print(f"  ratio warpgeo / scipy         {t_ours / t_scipy:10.2f}   (goal <= 0.7)")
    FIGURES[f"edt_n{n}_ms"] = t_ours * 1e3
    FIGURES[f"scipy_edt_n{n}_ms"] = t_scipy * 1e3


def bench_fusion(size: float, voxel: float, height: int, width: int, device: str, repeat: int) -> None:
    depth, k, pose = depth_frame(height, width)
    trunc_voxels = 4.0
    half = size / 2
    fusion = DepthFusion(
        ((-half, -half, -half), (half, half, half)), voxel, truncation=trunc_voxels * voxel, device=device
    )
    print(
        f"\nfusion of one {width}x{height} frame ({(depth > 0).mean():.0%} valid) into a {size} m cube at "
        f"{voxel * 100:g} cm ({'x'.join(map(str, fusion.shape))} voxels), truncation {trunc_voxels:g} voxels"
    )
    depth_t = torch.from_numpy(depth).to(device)
    k_t = torch.from_numpy(k).float().to(device)
    pose_t = torch.from_numpy(pose).float().to(device)

    def ours():
        fusion.integrate(depth_t, k_t, pose_t)

    t_ours = timeit(ours, device, repeat=repeat)
    t_esdf = timeit(fusion.distance_grid, device, repeat=max(1, repeat // 2))
    print(f"  warpgeo integrate                    {t_ours * 1e3:10.1f} ms")
    print(f"  warpgeo distance_grid (ESDF update)  {t_esdf * 1e3:10.1f} ms")
    FIGURES[f"fuse_{width}x{height}_ms"] = t_ours * 1e3
    FIGURES[f"esdf_{fusion.shape[0]}_ms"] = t_esdf * 1e3
    o3d = import_peer("open3d", "open3d")
    if o3d is None:
        return
    o3c = o3d.core
    cpu = o3c.Device("CPU:0")
    rot = np.array(_rotation(pose[3:]))
    extrinsic = np.eye(4)
    extrinsic[:3, :3] = rot.T
    extrinsic[:3, 3] = -rot.T @ pose[:3]
    intrinsic_t = o3c.Tensor(k, o3c.float64)
    extrinsic_t = o3c.Tensor(extrinsic, o3c.float64)
    image = o3d.t.geometry.Image(o3c.Tensor(depth))
    blocks = int(np.ceil(size / (voxel * 16))) ** 3
    vbg = o3d.t.geometry.VoxelBlockGrid(
        ("tsdf", "weight"), (o3c.float32, o3c.float32), ((1), (1)), voxel, 16, blocks, cpu
    )
    kwargs = {"depth_scale": 1.0, "depth_max": 3.0, "trunc_voxel_multiplier": trunc_voxels}
    coords = vbg.compute_unique_block_coordinates(image, intrinsic_t, extrinsic_t, **kwargs)

    def o3d_integrate():
        vbg.integrate(coords, image, intrinsic_t, extrinsic_t, **kwargs)

    def o3d_touch_integrate():
        c = vbg.compute_unique_block_coordinates(image, intrinsic_t, extrinsic_t, **kwargs)
        vbg.integrate(c, image, intrinsic_t, extrinsic_t, **kwargs)

    t_o3d = timeit(o3d_integrate, "cpu", repeat=repeat)
    t_o3d_all = timeit(o3d_touch_integrate, "cpu", repeat=repeat)
    print(
        f"  open3d VoxelBlockGrid.integrate      {t_o3d * 1e3:10.1f} ms  ({coords.shape[0]} blocks of 16^3)"
    )
    print(f"  open3d block coordinates + integrate {t_o3d_all * 1e3:10.1f} ms")
    print(f"  ratio warpgeo / open3d integrate     {t_ours / t_o3d:10.2f}   (goal <= 1.0)")
    print(f"  ratio warpgeo / open3d both steps    {t_ours / t_o3d_all:10.2f}")
    FIGURES["open3d_integrate_ms"] = t_o3d * 1e3
    FIGURES["open3d_touch_integrate_ms"] = t_o3d_all * 1e3


def bench_query(points: int, n: int, device: str, repeat: int) -> None:
    from scipy import ndimage

    gen = torch.Generator().manual_seed(0)
    values = torch.randn(n, n, n, generator=gen)
    grid = DistanceGrid(values.to(device), 0.01)
    pts = (torch.rand(points, 3, generator=gen) * (n - 1) * 0.01).to(device)
    pts_grad = pts.clone().requires_grad_(True)
    print(f"\nquery of {points} points in a {n}^3 grid (float32)")

    def fwd():
        grid.query(pts)

    def fwd_bwd():
        grid.query(pts_grad).distance.sum().backward()

    coords = (pts.cpu().numpy() / 0.01).T
    vals = values.numpy()
    t_fwd = timeit(fwd, device, repeat=repeat)
    t_bwd = timeit(fwd_bwd, device, repeat=repeat)
    t_scipy = timeit(lambda: ndimage.map_coordinates(vals, coords, order=1), "cpu", repeat=repeat)
    print(f"  warpgeo query                  {t_fwd * 1e3:10.1f} ms")
    print(f"  warpgeo query + backward       {t_bwd * 1e3:10.1f} ms")
    print(f"  scipy map_coordinates(order=1) {t_scipy * 1e3:10.1f} ms  (values only)")
    print(f"  ratio warpgeo query / scipy    {t_fwd / t_scipy:10.2f}")
    key = "1m" if points == 1_000_000 else str(points)
    FIGURES[f"query_{key}_fwd_ms"] = t_fwd * 1e3
    FIGURES[f"query_{key}_fwd_bwd_ms"] = t_bwd * 1e3
    FIGURES[f"scipy_map_coordinates_{key}_ms"] = t_scipy * 1e3


def bench_world_grid(spheres: int, voxel: float, device: str, repeat: int) -> None:
    """Sphere cost against a 327,680-face torus as a mesh entry and as a DistanceGrid entry made from it."""
    import trimesh

    import warpgeo

    mesh = trimesh.creation.torus(major_radius=0.3, minor_radius=0.1, major_sections=640, minor_sections=256)
    print(f"\nsphere cost, {spheres} spheres (r 1-5 cm, eta 2 cm): a {len(mesh.faces)}-face torus as a mesh")
    print(f"entry vs a DistanceGrid.from_mesh entry at {voxel * 100:g} cm (float32, forward)")
    mesh_world = warpgeo.MeshWorld([mesh], device=device)
    mesh_world.wait_tables()
    start = time.perf_counter()
    grid = DistanceGrid.from_mesh(mesh, voxel, device=device)
    built = time.perf_counter() - start
    grid_world = warpgeo.MeshWorld([grid], device=device)
    gen = torch.Generator().manual_seed(0)
    lo = torch.tensor([-0.45, -0.45, -0.15])
    centres = lo + torch.rand(spheres, 3, generator=gen) * torch.tensor([0.9, 0.9, 0.3])
    radii = 0.01 + 0.04 * torch.rand(spheres, 1, generator=gen)
    balls = torch.cat([centres, radii], -1).to(device)
    with warpgeo.value_checks(False):
        t_mesh = timeit(
            lambda: warpgeo.sphere_mesh_cost(balls, mesh_world, activation_distance=0.02),
            device,
            repeat=repeat,
        )
        t_grid = timeit(
            lambda: warpgeo.sphere_mesh_cost(balls, grid_world, activation_distance=0.02),
            device,
            repeat=repeat,
        )
    print(f"  grid {tuple(grid.shape)} built from the mesh in {built:.2f} s")
    print(f"  mesh entry   {t_mesh * 1e3:10.2f} ms  {spheres / t_mesh / 1e6:8.2f} M spheres/s")
    print(f"  grid entry   {t_grid * 1e3:10.2f} ms  {spheres / t_grid / 1e6:8.2f} M spheres/s")
    print(f"  speed-up grid / mesh (goal >= 3x)  {t_mesh / t_grid:6.1f}x")
    FIGURES["world_mesh_cost_ms"] = t_mesh * 1e3
    FIGURES["world_grid_cost_ms"] = t_grid * 1e3

    # issue 46's GPU bar: 1M spheres x 4 grid entries, forward + backward (<= 0.5 ms on an H100 / H200)
    many = 1_000_000 if str(device).startswith("cuda") else spheres
    poses = [[0.9 * (k % 2), 0.9 * (k // 2), 0.0, 1.0, 0.0, 0.0, 0.0] for k in range(4)]
    four = warpgeo.MeshWorld([grid] * 4, poses=poses, device=device)
    centres = torch.rand(many, 3, generator=gen) * torch.tensor([1.8, 1.8, 0.3]) - torch.tensor(
        [0.45, 0.45, 0.15]
    )
    leaf = (
        torch.cat([centres, 0.01 + 0.04 * torch.rand(many, 1, generator=gen)], -1).to(device).requires_grad_()
    )

    def fwd_bwd():
        leaf.grad = None
        warpgeo.sphere_mesh_cost(leaf, four, activation_distance=0.02).sum().backward()

    with warpgeo.value_checks(False):
        t_four = device_time(fwd_bwd, device, repeat=repeat)
    print(f"  {many} spheres x 4 grid entries, fwd+bwd: {t_four * 1e3:.3f} ms (GPU goal: <= 0.5 ms at 1M)")
    FIGURES["world_4grids_fwd_bwd_ms"] = t_four * 1e3


def _rotation(q: np.ndarray) -> list[list[float]]:
    w, x, y, z = q / np.linalg.norm(q)
    return [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_size_arguments(parser)
    parser.add_argument("--n", type=int, default=None, help="EDT grid size per axis")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--json", default=None, help="write the figures (ms) to this file")
    parser.add_argument(
        "--part", choices=("all", "edt", "fusion", "query", "world"), default="all", help="run one part only"
    )
    args = parser.parse_args()
    fill_sizes(args, n=(256, 96), repeat=(3, 2))
    print_header(args.device)
    if args.part in ("all", "edt"):
        bench_edt(args.n, args.device, args.repeat)
    if args.part in ("all", "fusion"):
        if args.quick:
            bench_fusion(2.0, 0.02, 240, 320, args.device, args.repeat)
        else:
            bench_fusion(2.0, 0.01, 480, 640, args.device, args.repeat)
    if args.part in ("all", "query"):
        bench_query(100_000 if args.quick else 1_000_000, 128, args.device, args.repeat)
    if args.part in ("all", "world"):
        bench_world_grid(10_000 if args.quick else 100_000, 0.01, args.device, args.repeat)
    write_figures(args.json, FIGURES)


if __name__ == "__main__":
    main()
