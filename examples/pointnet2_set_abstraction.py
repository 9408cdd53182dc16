"""Example: a PointNet++ set-abstraction network trained with warpgeo's FPS, kNN / ball query and gather.

Shows a PointNet++-style set-abstraction (SA) layer built on ``warpgeo.farthest_point_sampling``,
``warpgeo.knn`` / ``warpgeo.ball_query`` and ``warpgeo.gather_points``, trained on a toy task: tell five
trimesh primitives (box, sphere, cylinder, cone, torus) apart from 128 surface samples, randomly turned
about z and scaled. One SA layer is

1. FPS: M centres of the N points (indices; no gradient flows through *where* to sample);
2. grouping: the K nearest neighbours of each centre (``warpgeo.knn``), or with ``--grouping ball`` the
   first K points within a radius (``warpgeo.ball_query``, a short row padded with its first hit, as
   PointNet++ does); indices ``(B, M, K)``, no ``(B, M, N)`` distance matrix;
3. ``gather_points(features (B, C, N), idx (B, M, K))`` -> grouped features ``(B, C, M, K)``
   (differentiable: its backward scatter-adds into the features of the previous layer);
4. a shared MLP as 1x1 ``Conv2d`` over the M x K grid, with ``GroupNorm`` (per-sample statistics: stable at
   small batches, and the same under DDP — see ddp_training.py);
5. max-pool over the K neighbours (or, with ``--aggregate attention``, a Point-Transformer-style
   softmax-weighted sum ``einsum('bcmk,bcmk->bcm', weights, values)``).

After two SA layers a 1x1 ``Conv1d`` over the (B, C, M) list of centres and a global max-pool feed a
linear classifier. ``--compile`` runs the model under ``torch.compile`` (warpgeo's ops are registered
custom ops, so the graph has no breaks). The script prints the loss, the test accuracy, and saves a
picture (needs the ``demo`` extra): one cloud with its FPS centres and one neighbourhood, and the loss curve.

    python3 examples/pointnet2_set_abstraction.py                # ~20 s on 2 CPU cores (+ kernel compile, first run)
    python3 examples/pointnet2_set_abstraction.py --compile      # + 1-2 min of inductor compilation on a CPU
    python3 examples/pointnet2_set_abstraction.py --steps 2000 --num-points 1024 --batch-size 32 --device cuda
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

import warpgeo
from warpgeo import demos

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CLASSES = ("box", "sphere", "cylinder", "cone", "torus")


# --------------------------------------------------------------------------------------------------------
# data: surface samples of trimesh primitives
# --------------------------------------------------------------------------------------------------------


def _primitives():
    import trimesh

    return [
        trimesh.creation.box(extents=(1.4, 1.0, 0.6)),
        trimesh.creation.icosphere(subdivisions=3, radius=0.8),
        trimesh.creation.cylinder(radius=0.5, height=1.4, sections=48),
        trimesh.creation.cone(radius=0.7, height=1.4, sections=48),
        trimesh.creation.torus(major_radius=0.7, minor_radius=0.25),
    ]


def make_dataset(num_clouds: int, num_points: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``num_clouds`` clouds ``(S, num_points, 3)`` float32 and their labels ``(S,)`` int64.

    Each cloud is an area-uniform surface sample of a random primitive, turned by a random angle about z,
    scaled by 0.7-1.3 and jittered by 1 %; classes are balanced.
    """
    import trimesh

    rng = np.random.default_rng(seed)
    meshes = _primitives()
    labels = np.arange(num_clouds) % len(meshes)
    rng.shuffle(labels)
    clouds = np.empty((num_clouds, num_points, 3), dtype=np.float32)
    for i, label in enumerate(labels):
        points, _ = trimesh.sample.sample_surface(meshes[label], num_points, seed=rng)
        rotation = trimesh.transformations.rotation_matrix(rng.uniform(0, 2 * math.pi), (0, 0, 1))[:3, :3]
        points = points @ rotation.T * rng.uniform(0.7, 1.3) + rng.normal(0.0, 0.01, points.shape)
        clouds[i] = points
    return torch.from_numpy(clouds), torch.from_numpy(labels.astype(np.int64))


# --------------------------------------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------------------------------------


class SetAbstraction(nn.Module):
    """One PointNet++ set-abstraction layer: FPS -> group -> gather -> shared MLP -> pool over neighbours.

    ``forward(xyz (B, N, 3), features (B, C, N) or None)`` -> ``(new_xyz (B, M, 3), new_features (B, C', M))``.
    """

    def __init__(
        self,
        num_centres: int,
        k: int,
        in_channels: int,
        widths: tuple[int, ...],
        *,
        grouping: str = "knn",
        radius: float = 0.4,
        aggregate: str = "max",
    ):
        super().__init__()
        self.num_centres, self.k, self.grouping, self.radius, self.aggregate = (
            num_centres,
            k,
            grouping,
            radius,
            aggregate,
        )
        layers: list[nn.Module] = []
        channels = in_channels + 3  # neighbour features + their offsets from the centre
        for width in widths:
            layers += [nn.Conv2d(channels, width, 1, bias=False), nn.GroupNorm(4, width), nn.ReLU()]
            channels = width
        self.mlp = nn.Sequential(*layers)
        # Point-Transformer-style vector attention: one logit per channel, neighbour and centre.
        self.attention = nn.Conv2d(channels, channels, 1) if aggregate == "attention" else None
        self.out_channels = channels

    def forward(self, xyz: torch.Tensor, features: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        xyz_t = xyz.transpose(1, 2)  # (B, 3, N): coordinates as 3 feature channels
        centres_idx = warpgeo.farthest_point_sampling(xyz, self.num_centres)  # (B, M) int64
        centres_t = warpgeo.gather_points(xyz_t, centres_idx)  # (B, 3, M)
        centres = centres_t.transpose(1, 2)
        if self.grouping == "ball":
            # the first K points (by index) within the radius, -1 after them; a centre is one of the points,
            # so each row has a first hit, which fills the rest of a short row (PointNet++'s grouping)
            neighbours = warpgeo.ball_query(centres, xyz, self.radius, self.k)  # (B, M, K)
            neighbours = torch.where(neighbours >= 0, neighbours, neighbours[..., :1])
        else:
            neighbours = warpgeo.knn(centres, xyz, self.k).idx  # (B, M, K), nearest first
        grouped = warpgeo.gather_points(xyz_t, neighbours) - centres_t[..., None]  # (B, 3, M, K)
        if features is not None:
            grouped = torch.cat([grouped, warpgeo.gather_points(features, neighbours)], dim=1)
        h = self.mlp(grouped)  # (B, C', M, K)
        if self.attention is None:
            pooled = h.max(dim=-1).values
        else:
            weights = torch.softmax(self.attention(h), dim=-1)
            pooled = torch.einsum("bcmk,bcmk->bcm", weights, h)
        return centres, pooled


class PointNet2Classifier(nn.Module):
    """Two set-abstraction layers, a ``Conv1d`` over the centres, global max-pool, linear head."""

    def __init__(self, num_points: int, num_classes: int = len(CLASSES), *, grouping="knn", aggregate="max"):
        super().__init__()
        m1, m2 = max(num_points // 4, 8), max(num_points // 16, 4)
        self.sa1 = SetAbstraction(
            m1, 16, 0, (16, 16, 32), grouping=grouping, radius=0.35, aggregate=aggregate
        )
        self.sa2 = SetAbstraction(m2, 8, 32, (32, 32, 64), grouping=grouping, radius=0.7, aggregate=aggregate)
        # No normalisation right before the global pool: a per-cloud norm there makes every cloud's pooled
        # feature look alike at the start, and training sits at chance for a long while.
        self.point_mlp = nn.Sequential(nn.Conv1d(64 + 3, 128, 1), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def forward(self, xyz: torch.Tensor) -> torch.Tensor:
        xyz1, f1 = self.sa1(xyz, None)
        xyz2, f2 = self.sa2(xyz1, f1)
        h = self.point_mlp(torch.cat([xyz2.transpose(1, 2), f2], dim=1))  # (B, 128, M2)
        return self.head(h.max(dim=-1).values)


# --------------------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------------------


def accuracy(model: nn.Module, clouds: torch.Tensor, labels: torch.Tensor, batch_size: int) -> float:
    correct = 0
    with torch.no_grad():
        for x, y in zip(clouds.split(batch_size), labels.split(batch_size), strict=True):
            correct += int((model(x).argmax(-1) == y).sum())
    return correct / len(labels)


def plot(
    path: str, cloud: torch.Tensor, label: int, model: PointNet2Classifier, losses: list[float], acc: float
) -> Figure:
    from matplotlib.figure import Figure

    with torch.no_grad():
        sa = model.sa1
        idx = warpgeo.farthest_point_sampling(cloud[None], sa.num_centres)[0]
        centres = cloud[idx]
        if sa.grouping == "ball":
            group = warpgeo.ball_query(centres[None, :1], cloud[None], sa.radius, sa.k)[0, 0]
            group = group[group >= 0]  # -1 pads a short row
            what = f"one group: the first K = {sa.k} points (in index order) within r = {sa.radius}"
        else:
            group = warpgeo.knn(centres[None, :1], cloud[None], sa.k).idx[0, 0]
            what = f"one group: its K = {sa.k} nearest points"
    cloud, centres, group = cloud.cpu().numpy(), centres.cpu().numpy(), group.cpu().numpy()

    fig = Figure(figsize=(11.5, 4.6), layout="constrained")
    fig.suptitle(
        "PointNet++ set abstraction on warpgeo.farthest_point_sampling + warpgeo.gather_points: "
        f"{len(CLASSES)} shape classes from {len(cloud)} surface points",
        fontsize=10.5,
    )
    ax = fig.add_subplot(1, 2, 1, projection="3d")
    ax.scatter(*cloud.T, s=3, c="0.7", depthshade=False, label=f"points (N = {len(cloud)})")
    ax.scatter(*centres.T, s=14, c="C0", depthshade=False, label=f"FPS centres (M = {len(centres)})")
    ax.scatter(
        *cloud[group].T,
        s=18,
        c="C3",
        depthshade=False,
        label=what,
    )
    ax.scatter(*centres[:1].T, s=120, c="k", marker="*", depthshade=False, label="that group's centre")
    ax.set_title(f"a test cloud (class: {CLASSES[label]}) in the first layer", fontsize=10)
    # below the axes: inside, it hides part of the cloud
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, frameon=False)
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_zlabel("z")
    ax.tick_params(labelsize=7)

    ax = fig.add_subplot(1, 2, 2)
    steps = np.arange(len(losses))
    window = max(1, len(losses) // 20)
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    ax.plot(steps, losses, color="0.75", lw=0.8, label="loss")
    ax.plot(steps[window - 1 :], smooth, color="C0", label=f"mean of {window}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_title(f"training loss; test accuracy {acc:.0%} (chance: {1 / len(CLASSES):.0%})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)
    return fig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device"
    )
    parser.add_argument("--steps", type=int, default=150, help="training steps (default: 150)")
    parser.add_argument("--batch-size", type=int, default=16, help="clouds per step (default: 16)")
    parser.add_argument("--num-points", type=int, default=128, help="points per cloud (default: 128)")
    parser.add_argument("--num-train", type=int, default=480, help="training clouds (default: 480)")
    parser.add_argument("--num-test", type=int, default=160, help="test clouds (default: 160)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default: 1e-3)")
    parser.add_argument(
        "--grouping",
        choices=("knn", "ball"),
        default="knn",
        help="neighbours of a centre: its K nearest, or the first K within a radius (default: knn)",
    )
    parser.add_argument(
        "--aggregate",
        choices=("max", "attention"),
        default="max",
        help="pool over the K neighbours: max, or a softmax-weighted sum (default: max)",
    )
    parser.add_argument("--compile", action="store_true", help="run the model under torch.compile")
    parser.add_argument(
        "--compile-backend", default="inductor", help="torch.compile backend (default: inductor)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seeds the data, the model and the order (default: 0)"
    )
    parser.add_argument("--quick", action="store_true", help="smallest settings (for tests)")
    parser.add_argument(
        "--out",
        default="pointnet2_set_abstraction.png",
        help="output picture (default: pointnet2_set_abstraction.png, in the current folder)",
    )
    args = parser.parse_args(argv)
    if args.quick:  # smaller sizes; flags given explicitly still win
        parser.set_defaults(steps=100, lr=2e-3, num_points=128, num_train=240, num_test=40)
        args = parser.parse_args(argv)
    device = demos.require_device(args.device, "pointnet2_set_abstraction.py")  # one line if it is not here
    demos.require_matplotlib("pointnet2_set_abstraction.py")

    t0 = time.perf_counter()
    torch.manual_seed(args.seed)
    train_x, train_y = make_dataset(args.num_train, args.num_points, seed=args.seed)
    test_x, test_y = make_dataset(args.num_test, args.num_points, seed=args.seed + 1)
    train_x, train_y, test_x, test_y = (t.to(device) for t in (train_x, train_y, test_x, test_y))

    model = PointNet2Classifier(args.num_points, grouping=args.grouping, aggregate=args.aggregate).to(device)
    forward = torch.compile(model, fullgraph=True, backend=args.compile_backend) if args.compile else model
    optimiser = torch.optim.Adam(model.parameters(), lr=args.lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, args.steps)
    print(
        f"{len(CLASSES)} classes, {args.num_train} training clouds of {args.num_points} points, "
        f"{sum(p.numel() for p in model.parameters())} parameters, device {device}"
        + (f", torch.compile(backend={args.compile_backend!r})" if args.compile else "")
    )

    generator = torch.Generator().manual_seed(args.seed)
    losses: list[float] = []
    batches_per_epoch = math.ceil(args.num_train / args.batch_size)
    for step in range(args.steps):
        if step % batches_per_epoch == 0:
            order = torch.randperm(args.num_train, generator=generator).to(device)
        batch = order[(step % batches_per_epoch) * args.batch_size :][: args.batch_size]
        loss = nn.functional.cross_entropy(forward(train_x[batch]), train_y[batch])
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        losses.append(loss.item())
        if step % 20 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {losses[-1]:.4f}")

    model.eval()
    acc = accuracy(forward, test_x, test_y, args.batch_size)
    window = max(1, min(10, args.steps // 4))
    first, last = float(np.mean(losses[:window])), float(np.mean(losses[-window:]))
    print(f"mean loss of the first {window} steps {first:.4f}, of the last {window} steps {last:.4f}")
    print(f"test accuracy {acc:.3f} (chance {1 / len(CLASSES):.3f})")
    plot(args.out, test_x[0], int(test_y[0]), model, losses, acc)
    print(f"saved {args.out}  ({time.perf_counter() - t0:.1f} s on {device})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
