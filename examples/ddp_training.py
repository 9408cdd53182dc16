"""Example: DistributedDataParallel training with warpgeo ops, on 2 CPU processes (gloo).

Shows that warpgeo's ops work under ``torch.nn.parallel.DistributedDataParallel``: the PointNet++
classifier of ``pointnet2_set_abstraction.py`` (FPS + ``gather_points`` + shared MLPs with GroupNorm) is
trained by ``--world-size`` processes started with ``torch.multiprocessing.spawn``, each on its shard of
every global batch, gradients all-reduced by DDP over the gloo backend (CPU; NCCL would do on GPUs).

First, rank 0 checks that DDP's averaged gradient of one global batch equals the gradient a single
process computes on the whole batch (same initial weights) — it does, to float32 round-off, because
GroupNorm's statistics are per sample (BatchNorm's would differ between 1 and 2 processes). Then the
processes train together; rank 0 prints the loss (averaged over ranks) and saves the loss curve (needs
the ``demo`` extra).

    python3 examples/ddp_training.py                       # 2 processes, ~15 s on 2 CPU cores
    python3 examples/ddp_training.py --steps 500 --world-size 4
    torchrun is not needed: the script spawns its own processes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

# examples/ is not a package: the model lives next to this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pointnet2_set_abstraction import PointNet2Classifier, make_dataset

from warpgeo import demos


def _global_batches(num_train: int, batch_size: int, steps: int, seed: int) -> list[torch.Tensor]:
    """The same sequence of global batches on every rank (same seed)."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randperm(num_train, generator=generator)[:batch_size] for _ in range(steps)]


def _check_gradients(model: nn.Module, ddp: DistributedDataParallel, x, y, rank: int, world: int) -> float:
    """Max |DDP gradient - single-process gradient| over all parameters, for one global batch."""
    shard = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
    ddp.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(ddp(x[shard]), y[shard]).backward()  # DDP averages over ranks
    ddp_grads = [p.grad.detach().clone() for p in model.parameters()]
    ddp.zero_grad(set_to_none=True)

    # The single-process reference: the same weights, the whole batch, no DDP.
    reference = PointNet2Classifier(x.shape[1])
    reference.load_state_dict(model.state_dict())
    nn.functional.cross_entropy(reference(x), y).backward()
    return max(
        float((a - p.grad).abs().max()) for a, p in zip(ddp_grads, reference.parameters(), strict=True)
    )


def worker(rank: int, args: argparse.Namespace, rendezvous: str) -> None:
    torch.set_num_threads(1)  # one core per process
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=args.world_size)
    try:
        torch.manual_seed(args.seed)  # same initial weights everywhere (DDP also broadcasts rank 0's)
        train_x, train_y = make_dataset(args.num_train, args.num_points, seed=args.seed)
        model = PointNet2Classifier(args.num_points)
        ddp = DistributedDataParallel(model)
        batches = _global_batches(args.num_train, args.batch_size, args.steps, args.seed)

        diff = _check_gradients(model, ddp, train_x[batches[0]], train_y[batches[0]], rank, args.world_size)
        if rank == 0:
            verdict = "agree" if diff < 1e-4 else "DIFFER"
            print(
                f"gradient check: max |DDP - single process| = {diff:.2e}  -> gradients {verdict}", flush=True
            )

        optimiser = torch.optim.Adam(model.parameters(), lr=args.lr)
        losses = []
        t0 = time.perf_counter()
        for step, batch in enumerate(batches):
            shard = batch[rank * len(batch) // args.world_size : (rank + 1) * len(batch) // args.world_size]
            loss = nn.functional.cross_entropy(ddp(train_x[shard]), train_y[shard])
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss)
            losses.append(float(mean_loss) / args.world_size)
            if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
                print(f"step {step:4d}  loss {losses[-1]:.4f}", flush=True)
        if rank == 0:
            window = max(1, min(10, args.steps // 4))
            first, last = float(np.mean(losses[:window])), float(np.mean(losses[-window:]))
            print(f"mean loss of the first {window} steps {first:.4f}, of the last {window} steps {last:.4f}")
            print(
                f"{args.world_size} processes, {(time.perf_counter() - t0) / args.steps * 1e3:.0f} ms per step"
            )
            _plot(args.out, losses, args.world_size, diff)
            print(f"saved {args.out}", flush=True)
        # every rank done before the group is torn down: a rank that tore gloo down while rank 0 was still
        # plotting was once aborted ("terminate called without an active exception") on a loaded machine
        dist.barrier()
        if rank == 0 and diff >= 1e-4:
            raise SystemExit(1)
    finally:
        dist.destroy_process_group()


def _plot(path: str, losses: list[float], world: int, diff: float) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(losses, color="C0", label="loss of each global batch")
    ax.set_xlabel("step (one global batch, split over the processes)")
    ax.set_ylabel("cross-entropy (mean over processes)")
    ax.set_title(
        f"PointNet++ (warpgeo FPS + gather) trained by DistributedDataParallel, gloo, {world} CPU processes\n"
        f"gradient check: max |DDP gradient − 1-process gradient of the same batch| = {diff:.1e}\n"
        "(0 up to float32 round-off: DDP's averaged gradient is the whole batch's gradient)",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="only cpu: gloo on CPU tensors (default: cpu)")
    parser.add_argument("--world-size", type=int, default=2, help="processes (default: 2)")
    parser.add_argument("--steps", type=int, default=60, help="training steps (default: 60)")
    parser.add_argument("--batch-size", type=int, default=16, help="global batch, split over the processes")
    parser.add_argument("--num-points", type=int, default=128, help="points per cloud (default: 128)")
    parser.add_argument("--num-train", type=int, default=320, help="training clouds (default: 320)")
    parser.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (default: 1e-3)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the data and the model (default: 0)")
    parser.add_argument("--quick", action="store_true", help="smallest settings (for tests)")
    parser.add_argument(
        "--out",
        default="ddp_training.png",
        help="output picture (default: ddp_training.png, in the current folder)",
    )
    args = parser.parse_args(argv)
    if args.device != "cpu":  # one line and exit code 2, as the warpgeo command
        print(
            f"ddp_training.py: error: --device {args.device}: this example runs DDP over gloo on the CPU; "
            "use --device cpu",
            file=sys.stderr,
        )
        return 2
    if args.quick:  # smaller sizes; flags given explicitly still win
        parser.set_defaults(steps=40, num_points=64, num_train=64, batch_size=8)
        args = parser.parse_args(argv)
    if args.batch_size % args.world_size:
        parser.error(f"--batch-size {args.batch_size} must be a multiple of --world-size {args.world_size}")
    demos.require_matplotlib("ddp_training.py")

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(args, os.path.join(tmp, "rendezvous")), nprocs=args.world_size, join=True)
    print(f"done in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
