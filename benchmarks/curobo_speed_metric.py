"""warpgeo's speed metric against cuRobo's own swept kernel with ``enable_speed_metric``, on one scene.

    python benchmarks/curobo_speed_metric.py --curobo /tmp/curobo_sdf        # default: .peers/curobo

``--curobo``: a directory holding cuRobo's ``warp_primitives.py`` and the kernel file it imports,
``warp_sdf_fns.py`` (cuRobo v0.7.x keeps both in ``src/curobo/geom/sdf/``; v0.7.8 is the last v0.7), e.g.::

    for f in warp_primitives.py warp_sdf_fns.py; do
        git --git-dir=/work/.mirror/NVlabs+curobo/repo show v0.7.8:src/curobo/geom/sdf/$f > /tmp/curobo_sdf/$f
    done

Nothing of cuRobo is in this repository: its two files are loaded from that directory at run time and run
unmodified (its ``SweptSdfMeshWarpPy`` autograd function and its Warp kernel ``get_swept_closest_pt_batch_env``,
here on the CPU). The loader is ``bench_curobo_call.load_curobo`` (its docstring says what it stubs): cuRobo
is not installed here (installing it builds its CUDA extensions), and its package ``__init__`` files import
much of it, so its module is imported under empty ``curobo`` / ``curobo.util`` / ``curobo.geom`` /
``curobo.geom.sdf`` packages with one stub, ``curobo.util.warp.warp_support_sdf_struct`` (True: Warp >= 1.0,
which picks ``warp_sdf_fns``); its ``wp.stream_from_torch`` answers None for the CPU (a CPU build of torch
has no CUDA stream to give).

The scene: two closed meshes (a box and an icosphere, turned and moved: cuRobo sums its cost over them, as
warpgeo does), 4 trajectories of 24 steps of 6 spheres that pass
through and near it (one dwells: interior speeds below cuRobo's 1e-3), ``activation_distance`` 0.05,
``weight`` 3, ``dt`` 0.02, float32. Compared:

1. ``speed_metric`` off, ``sweep_steps=0``: the discrete cost and its gradient (w.r.t. the centres) of every
   sphere, cuRobo's kernel against ``swept_sphere_mesh_cost`` (the same definition).
2. ``speed_metric`` on, ``sweep_steps=0``, the cost: where the definitions agree (the first and last steps,
   unscaled, and every interior step faster than cuRobo's 1e-3) they should be equal; cuRobo leaves slower
   interior steps unscaled, warpgeo scales them (continuously, to 0 at rest).
3. its gradient: cuRobo's is a CHOMP-style functional gradient w.r.t. the centre of step ``h`` alone,
   ``|v| (P g - c P kappa)`` (``g``, ``c``: the unscaled gradient and cost; ``v`` the central-difference
   velocity, ``P = I - v v^T / |v|^2``, ``kappa = a / |v|^2``, ``a`` the central-difference acceleration), not
   the gradient of its cost. That formula evaluated on warpgeo's unscaled cost and gradient (plain torch
   here) is compared with cuRobo's, and warpgeo's exact gradient (autograd of the scaled cost, which also
   reaches steps ``h - 1`` and ``h + 1``) with cuRobo's, to show the size of that difference.
4. a disabled sphere (negative radius) beside interior steps: cuRobo's kernel still takes its centre for the
   central difference of its neighbours; warpgeo takes the one-sided difference with the other neighbour.
5. ``sweep_steps=4``: the swept costs differ by definition (cuRobo sums samples placed by sphere-tracing
   jumps towards the midpoints to both neighbours; warpgeo averages evenly spaced samples over the
   interval to the next step): printed for the record.

Relative differences are ``max |a - b| / max |b|`` over the compared entries (``b`` cuRobo's).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
import trimesh
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_curobo_call import DEFAULT_SRC, find_curobo, load_curobo

import warpgeo

ETA, WEIGHT, DT = 0.05, 3.0, 0.02
B, H, N = 4, 24, 6


def scene(device: torch.device) -> tuple[list[trimesh.Trimesh], list[list[float]], torch.Tensor]:
    """Two closed meshes (a box and an icosphere of 320 faces), their world poses ``[x, y, z, qw, qx, qy, qz]``,
    and ``(B, H, N, 4)`` sphere trajectories: each trajectory a smooth curve through the meshes' region, its
    spheres offset from it; one trajectory slows to a stop in the middle (interior speeds below cuRobo's
    1e-3 threshold)."""
    meshes = [trimesh.creation.box((0.5, 0.3, 0.4)), trimesh.creation.icosphere(subdivisions=2, radius=0.2)]
    axis = np.array([1.0, 2.0, 3.0]) / np.sqrt(14.0)
    poses = [
        [0.1, -0.05, 0.2, float(np.cos(0.3)), *(np.sin(0.3) * axis).tolist()],
        [-0.3, 0.25, -0.1, float(np.cos(-0.5)), *(np.sin(-0.5) * axis).tolist()],
    ]
    g = torch.Generator().manual_seed(0)
    t = torch.linspace(0.0, 1.0, H, dtype=torch.float64)[:, None]
    starts = torch.rand(B, 1, 3, generator=g, dtype=torch.float64) * 1.2 - 0.6
    ends = torch.rand(B, 1, 3, generator=g, dtype=torch.float64) * 1.2 - 0.6
    bend = torch.rand(B, 1, 3, generator=g, dtype=torch.float64) * 0.4 - 0.2
    path = starts + (ends - starts) * t + bend * torch.sin(np.pi * t)  # (B, H, 3)
    # trajectory 1 dwells: steps 10-14 at one point (zero speed), 9 and 15 barely moving
    path[1, 10:15] = path[1, 12]
    path[1, 9] = path[1, 12] + 1e-6
    path[1, 15] = path[1, 12] - 1e-6
    offsets = torch.rand(1, 1, N, 3, generator=g, dtype=torch.float64) * 0.16 - 0.08
    radii = torch.rand(1, 1, N, 1, generator=g, dtype=torch.float64) * 0.06 + 0.02
    centres = path[:, :, None, :] + offsets
    spheres = torch.cat([centres, radii.expand(B, H, N, 1)], dim=-1).to(torch.float32)
    return meshes, poses, spheres.to(device)


def _inverse_pose(pose: list[float]) -> list[float]:
    """``[x, y, z, qw, qx, qy, qz]`` of the inverse rigid transform (plain quaternion algebra)."""
    t = np.array(pose[:3])
    w, v = pose[3], -np.array(pose[4:])  # the conjugate rotates back
    twice = 2.0 * np.cross(v, t)
    back = -(t + w * twice + np.cross(v, twice))
    return [*back.tolist(), w, *v.tolist()]


def curobo_swept(module, meshes, poses, spheres, *, sweep_steps: int, speed_metric: bool):
    """cuRobo's ``SweptSdfMeshWarpPy`` on one environment of ``meshes`` at ``poses``: ``(cost (B, H, N), grad
    (B, H, N, 3))`` (its gradient buffer: what its backward hands to the centres)."""
    device = spheres.device
    warp_meshes = [
        wp.Mesh(
            points=wp.array(np.asarray(m.vertices, np.float32), dtype=wp.vec3, device=str(device)),
            indices=wp.array(np.asarray(m.faces, np.int32).reshape(-1), dtype=wp.int32, device=str(device)),
        )
        for m in meshes
    ]
    count = len(meshes)
    f32 = {"dtype": torch.float32, "device": device}
    query = spheres.detach().clone().requires_grad_(True)
    out_cost = torch.zeros(spheres.shape[:-1], **f32)
    out_grad = torch.zeros(spheres.shape, **f32)
    sparsity = torch.zeros(spheres.shape[:-1], dtype=torch.uint8, device=device)
    # the mesh id's bits in an int64 tensor (Warp reads them as uint64, as cuRobo's world tensors hold them)
    ids = np.array([[m.id for m in warp_meshes]], dtype=np.uint64)
    mesh_idx = torch.from_numpy(ids.view(np.int64)).to(device)
    inverse = torch.tensor([[[*_inverse_pose(p), 0.0] for p in poses]], **f32)  # (x, y, z, qw, qx, qy, qz, 0)
    cost = module.SweptSdfMeshWarpPy.apply(
        query,
        out_cost,
        out_grad,
        sparsity,
        torch.tensor([WEIGHT], **f32),
        torch.tensor([ETA], **f32),
        torch.tensor([DT], **f32),
        mesh_idx,
        inverse,
        torch.ones(1, count, dtype=torch.uint8, device=device),
        torch.tensor([count], dtype=torch.int32, device=device),
        torch.tensor([10.0], **f32),  # max_dist: beyond any sphere of the scene
        sweep_steps,
        speed_metric,
        None,
        False,
    )
    return cost.detach().clone(), out_grad[..., :3].clone()


def warpgeo_swept(world, spheres, *, sweep_steps: int, speed_metric: bool):
    """warpgeo's cost (B, H, N) and its exact gradient w.r.t. the centres (autograd of the summed cost)."""
    leaf = spheres.detach().clone().requires_grad_(True)
    cost = warpgeo.swept_sphere_mesh_cost(
        leaf, world, sweep_steps=sweep_steps, activation_distance=ETA, weight=WEIGHT,
        speed_metric=speed_metric, dt=DT,
    )  # fmt: skip
    (grad,) = torch.autograd.grad(cost.sum(), leaf)
    return cost.detach(), grad[..., :3]


def functional_gradient(cost: torch.Tensor, grad: torch.Tensor, spheres: torch.Tensor) -> torch.Tensor:
    """cuRobo's speed-metric gradient formula (plain torch, float64) on an unscaled ``cost`` (B, H, N) and its
    gradient (B, H, N, 3): at an interior step with ``|v| > 1e-3`` and a positive cost,
    ``|v| (P g - c P kappa)``; elsewhere ``g``."""
    c = spheres[..., :3].double()
    out = grad.double().clone()
    v = (c[:, 2:] - c[:, :-2]) * (0.5 / DT)
    a = (c[:, :-2] + c[:, 2:] - 2.0 * c[:, 1:-1]) / (DT * DT)
    speed = v.norm(dim=-1, keepdim=True)
    unit = v / speed.clamp_min(1e-300)
    kappa = a / (speed * speed).clamp_min(1e-300)
    g, cost_h = grad.double()[:, 1:-1], cost.double()[:, 1:-1, :, None]

    def project(x: torch.Tensor) -> torch.Tensor:
        return x - unit * (unit * x).sum(-1, keepdim=True)

    scaled = speed * (project(g) - cost_h * project(kappa))
    use = (speed > 1e-3) & (cost_h > 0)
    out[:, 1:-1] = torch.where(use, scaled, g)
    return out


def _diff(name: str, got: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    got, ref = got.double(), ref.double()
    if mask is not None:
        got, ref = got[mask], ref[mask]
    if ref.numel() == 0:
        print(f"  {name:54s} (no entries)")
        return
    err = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    rel = err / scale if scale > 0 else float("nan")
    print(f"  {name:54s} max abs {err:9.3g}   rel {rel:9.3g}   ({ref.numel()} values, max |ref| {scale:.3g})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--curobo", type=Path, default=DEFAULT_SRC, help="directory of warp_primitives.py and warp_sdf_fns.py"
    )
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    if tuple(int(x) for x in wp.config.version.split(".")[:2]) < (1, 0):
        raise SystemExit(f"Warp {wp.config.version}: the stub says Warp >= 1.0 (warp_support_sdf_struct)")
    wp.config.quiet = True
    wp.init()
    src = find_curobo(args.curobo.resolve())
    if src is None:
        raise SystemExit(f"--curobo {args.curobo}: no warp_primitives.py there (see this script's docstring)")
    module = load_curobo(src)
    print(f"cuRobo kernel: {module.get_swept_closest_pt_batch_env.key} from {src}")
    print(f"versions: torch {torch.__version__}, warp {wp.config.version}, device {device}")
    meshes, poses, spheres = scene(device)
    world = warpgeo.MeshWorld(meshes, poses=poses, device=device)
    print(
        f"scene: a box (12 faces) and an icosphere (320 faces), posed; spheres {tuple(spheres.shape)}; "
        f"eta {ETA}, weight {WEIGHT}, dt {DT}"
    )

    print("1. speed metric off, sweep_steps=0 (the same definition)")
    cu_cost, cu_grad = curobo_swept(module, meshes, poses, spheres, sweep_steps=0, speed_metric=False)
    wg_cost, wg_grad = warpgeo_swept(world, spheres, sweep_steps=0, speed_metric=False)
    hit = cu_cost > 0
    print(
        f"  spheres with a cost: cuRobo {int(hit.sum())}, warpgeo {int((wg_cost > 0).sum())} of {hit.numel()}"
    )
    _diff("cost", wg_cost, cu_cost)
    _diff("gradient w.r.t. the centres", wg_grad, cu_grad)

    print("2. speed metric on, sweep_steps=0: the cost")
    cs_cost, cs_grad = curobo_swept(module, meshes, poses, spheres, sweep_steps=0, speed_metric=True)
    ws_cost, ws_grad = warpgeo_swept(world, spheres, sweep_steps=0, speed_metric=True)
    c = spheres[..., :3].double()
    speed = torch.zeros(spheres.shape[:-1], dtype=torch.float64, device=device)
    speed[:, 1:-1] = ((c[:, 2:] - c[:, :-2]) * (0.5 / DT)).norm(dim=-1)
    interior = torch.zeros_like(hit)
    interior[:, 1:-1] = True
    fast = interior & (speed > 1e-3)
    slow = interior & (speed <= 1e-3)
    ends = ~interior
    print(
        f"  interior steps with a cost: {int((fast & hit).sum())} faster than 1e-3, {int((slow & hit).sum())} slower"
    )
    _diff("cost, interior steps faster than 1e-3 (agree)", ws_cost, cs_cost, fast)
    _diff("cost, first and last steps (agree: unscaled)", ws_cost, cs_cost, ends)
    _diff("cost, interior steps slower than 1e-3 (differ)", ws_cost, cs_cost, slow & hit)
    _diff("  cuRobo's there vs the unscaled cost", cs_cost, cu_cost, slow & hit)

    print("3. speed metric on, sweep_steps=0: the gradient w.r.t. the centres")
    formula = functional_gradient(wg_cost / WEIGHT, wg_grad / WEIGHT, spheres) * WEIGHT
    _diff("cuRobo's formula on warpgeo's cost and gradient", formula, cs_grad)
    _diff("warpgeo's exact gradient (differs by design)", ws_grad, cs_grad)

    print("4. speed metric on, sweep_steps=0, a disabled sphere at step 8 of every trajectory")
    holed = spheres.clone()
    holed[:, 8, :, 3] = -1.0
    ch_cost, _ = curobo_swept(module, meshes, poses, holed, sweep_steps=0, speed_metric=True)
    wh_cost, _ = warpgeo_swept(world, holed, sweep_steps=0, speed_metric=True)
    beside = torch.zeros_like(hit)
    beside[:, [7, 9]] = True
    others = interior & ~beside & (speed > 1e-3)
    others[:, 8] = False
    _diff("cost, the other interior steps faster than 1e-3", wh_cost, ch_cost, others)
    _diff("cost, steps 7 and 9 (central vs one-sided: differ)", wh_cost, ch_cost, beside & (ch_cost > 0))

    print("5. speed metric on, sweep_steps=4 (swept costs defined differently: for the record)")
    c4_cost, _ = curobo_swept(module, meshes, poses, spheres, sweep_steps=4, speed_metric=True)
    w4_cost, _ = warpgeo_swept(world, spheres, sweep_steps=4, speed_metric=True)
    _diff("cost", w4_cost, c4_cost)


if __name__ == "__main__":
    main()
