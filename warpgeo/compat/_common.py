"""Helpers shared by the compat modules: error-message shapes, and padded kNN / FPS over any point
dimension (warpgeo's ops up to 3-D, plain torch beyond) that the pytorch3d, torch_cluster and knn_cuda
adapters all map onto."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import warpgeo


def shape_of(t) -> str:
    """How an argument is shown in an error message: a tensor's shape, else its type."""
    return str(tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__


def positive_int(value, name: str) -> int:
    """``value`` as an int > 0: an int, or an integer tensor of one element (the CUDA extensions' callers pass
    either). TypeError / ValueError naming ``name`` otherwise."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int; got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive; got {value}")
    return value


def pad3(t: torch.Tensor) -> torch.Tensor:
    """``(..., D)`` with D <= 3 -> ``(..., 3)``, zeros appended (distances are unchanged)."""
    if t.shape[-1] == 3:
        return t
    return F.pad(t, (0, 3 - t.shape[-1]))


def valid_mask(lengths: torch.Tensor | None, batch: int, size: int, device: torch.device) -> torch.Tensor:
    """``(B, size)`` bool: the entries below each cloud's length."""
    if lengths is None:
        return torch.ones(batch, size, dtype=torch.bool, device=device)
    return torch.arange(size, device=device)[None, :] < lengths.to(device)[:, None]


def padded_knn(queries, points, k, query_lengths=None, point_lengths=None, norm=2):
    """``(dists, idx)`` ``(B, M, k)``: the k nearest valid points of each valid query, nearest first, ties to
    the lowest index, ``-1`` / ``inf`` padding; ``dists`` Euclidean (L2) or L1, differentiable.

    Points of dimension <= 3 and ``norm=2`` run on :func:`warpgeo.knn`; otherwise plain torch (``cdist``
    from coordinate differences, a stable sort)."""
    if norm == 2 and queries.shape[-1] <= 3:
        found = warpgeo.knn(
            pad3(queries), pad3(points), k, query_lengths=query_lengths, point_lengths=point_lengths
        )
        return found.dists, found.idx
    batch, m, n = queries.shape[0], queries.shape[1], points.shape[1]
    device = queries.device
    if n == 0 or m == 0:
        return (
            queries.new_full((batch, m, k), float("inf")),
            torch.full((batch, m, k), -1, dtype=torch.int64, device=device),
        )
    d = torch.cdist(queries, points, p=float(norm), compute_mode="donot_use_mm_for_euclid_dist")
    point_ok = valid_mask(point_lengths, batch, n, device)[:, None, :]
    d = torch.where(point_ok, d, float("inf"))
    order = torch.sort(d.detach(), dim=-1, stable=True).indices[..., :k]
    dists = torch.gather(d, 2, order)
    ok = torch.isfinite(dists.detach()) & valid_mask(query_lengths, batch, m, device)[..., None]
    idx = torch.where(ok, order, -1)
    dists = torch.where(ok, dists, float("inf"))
    if dists.shape[-1] < k:  # fewer points than k
        extra = k - dists.shape[-1]
        dists = F.pad(dists, (0, extra), value=float("inf"))
        idx = F.pad(idx, (0, extra), value=-1)
    return dists, idx


def padded_fps(points, num_samples, lengths=None, random_start=False):
    """int64 ``(B, max K)``: greedy farthest point sampling of each cloud (``num_samples`` an int or an int64
    ``(B,)`` tensor), ``-1`` padding; :func:`warpgeo.farthest_point_sampling` for dimensions <= 3, plain
    torch beyond (the same greedy order: squared distances, ties to the lowest index)."""
    if points.shape[-1] <= 3:
        return warpgeo.farthest_point_sampling(
            pad3(points), num_samples, lengths=lengths, random_start=random_start
        )
    batch, n = points.shape[0], points.shape[1]
    device = points.device
    ks = torch.as_tensor(num_samples, device=device).expand(batch).tolist()
    lens = [n] * batch if lengths is None else lengths.tolist()
    out = torch.full((batch, max(ks, default=0)), -1, dtype=torch.int64, device=device)
    for b in range(batch):
        count = min(ks[b], lens[b])
        if count == 0:
            continue
        cloud = points[b, : lens[b]].detach().double()
        start = int(torch.randint(lens[b], ())) if random_start else 0
        nearest = torch.full((lens[b],), float("inf"), dtype=torch.float64, device=device)
        chosen = [start]
        for _ in range(1, count):
            nearest = torch.minimum(nearest, (cloud - cloud[chosen[-1]]).square().sum(-1))
            chosen.append(int(torch.argmax(nearest)))  # argmax returns the first maximum
        out[b, :count] = torch.tensor(chosen, device=device)
    return out
