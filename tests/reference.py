"""Naive, readable reference implementations the fast ops are compared with (numpy / torch, float64)."""

from __future__ import annotations

import numpy as np


def fps_reference(points, num_samples: int, start: int = 0):
    """Greedy farthest point sampling of one cloud ``points`` (N, 3), in float64.

    Returns (indices, distances): a list of K ints (every point at most once, then -1 when K > N) and the
    distance of each pick to the points picked before it (inf first, nan for padding). Ties: lowest index.
    """
    p = np.asarray(points, dtype=np.float64)
    n = len(p)
    if n == 0:
        return [-1] * num_samples, [float("nan")] * num_samples
    chosen = [start]
    dists = [np.inf]
    nearest = np.full(n, np.inf)  # squared distance to the chosen set
    taken = np.zeros(n, dtype=bool)
    taken[start] = True
    while len(chosen) < min(num_samples, n):
        last = p[chosen[-1]]
        nearest = np.minimum(nearest, ((p - last) ** 2).sum(axis=1))
        candidates = np.where(taken, -1.0, nearest)
        best = int(np.argmax(candidates))  # argmax returns the first (lowest) index among ties
        chosen.append(best)
        dists.append(float(np.sqrt(candidates[best])))
        taken[best] = True
    pad = num_samples - len(chosen)
    return chosen + [-1] * pad, dists + [float("nan")] * pad


def collision_cost_reference(d, r, eta: float, weight: float = 1.0):
    """cuRobo's smooth sphere cost of DESIGN.md §3 for signed distances ``d`` and radii ``r`` (numpy)."""
    phi = np.asarray(r, dtype=np.float64) + eta - np.asarray(d, dtype=np.float64)
    if eta == 0.0:
        return weight * np.maximum(phi, 0.0)
    cost = np.where(phi <= 0.0, 0.0, np.where(phi <= eta, phi**2 / (2.0 * eta), phi - eta / 2.0))
    return weight * cost


def box_sdf_reference(points, half_extents):
    """Closed-form signed distance (negative inside) to an axis-aligned box centred at the origin."""
    q = np.abs(np.asarray(points, dtype=np.float64)) - np.asarray(half_extents, dtype=np.float64)
    outside = np.linalg.norm(np.maximum(q, 0.0), axis=-1)
    inside = np.minimum(q.max(axis=-1), 0.0)
    return outside + inside


def triangle_distance_reference(points, vertices, faces):
    """Unsigned distance from each point (P, 3) to a triangle mesh, by brute force over all faces.

    Closest point on a triangle by projecting onto its plane when the projection falls inside, otherwise
    the nearest of the three edge segments; float64 throughout. Memory is O(P * F).
    """
    p = np.asarray(points, dtype=np.float64)[:, None, :]
    tri = np.asarray(vertices, dtype=np.float64)[np.asarray(faces)]
    a, b, c = tri[None, :, 0], tri[None, :, 1], tri[None, :, 2]
    n = np.cross(b - a, c - a)
    n = n / np.linalg.norm(n, axis=-1, keepdims=True)
    plane = np.einsum("pfk,pfk->pf", p - a, np.broadcast_to(n, (p.shape[0], *n.shape[1:])))
    proj = p - plane[..., None] * n

    def inside_edge(u, v):
        return np.einsum("pfk,pfk->pf", np.cross(v - u, proj - u), np.broadcast_to(n, proj.shape)) >= 0.0

    in_face = inside_edge(a, b) & inside_edge(b, c) & inside_edge(c, a)

    def segment(u, v):
        t = np.clip(
            np.einsum("pfk,pfk->pf", p - u, np.broadcast_to(v - u, proj.shape)) / ((v - u) ** 2).sum(-1), 0, 1
        )
        return np.linalg.norm(p - (u + t[..., None] * (v - u)), axis=-1)

    edge = np.minimum(np.minimum(segment(a, b), segment(b, c)), segment(c, a))
    dist = np.where(in_face, np.abs(plane), edge)
    return dist.min(axis=1)


def gather_reference(features, idx):
    """Point gather by plain loops, in float64: ``features`` (B, C, N), ``idx`` (B, M) or (B, M, K) ints.

    Returns ``out`` (B, C, *idx.shape[1:]) with ``out[b, c, m(, k)] = features[b, c, idx[b, m(, k)]]`` and
    0 where the index is -1.
    """
    f = np.asarray(features, dtype=np.float64)
    ix = np.asarray(idx).reshape(len(idx), -1)
    out = np.zeros((f.shape[0], f.shape[1], ix.shape[1]))
    for b in range(f.shape[0]):
        for c in range(f.shape[1]):
            for l, n in enumerate(ix[b]):
                if n != -1:
                    out[b, c, l] = f[b, c, n]
    return out.reshape(f.shape[0], f.shape[1], *np.shape(idx)[1:])


def gather_backward_reference(grad_out, idx, num_points: int):
    """Scatter-add by plain loops, in float64: ``grad_features[b, c, n]`` = sum of ``grad_out`` where idx == n."""
    g = np.asarray(grad_out, dtype=np.float64)
    ix = np.asarray(idx).reshape(len(idx), -1)
    g = g.reshape(g.shape[0], g.shape[1], ix.shape[1])
    grad = np.zeros((g.shape[0], g.shape[1], num_points))
    for b in range(g.shape[0]):
        for c in range(g.shape[1]):
            for l, n in enumerate(ix[b]):
                if n != -1:
                    grad[b, c, n] += g[b, c, l]
    return grad


def knn_reference(queries, points, k: int):
    """k nearest neighbours of one cloud by sorting all distances, in float64.

    ``queries`` (M, 3), ``points`` (N, 3). Returns ``(dists, idx)`` numpy arrays (M, k): Euclidean distances
    nearest first, ties to the lowest index (a stable sort), then ``inf`` / ``-1`` where N < k.
    """
    q = np.asarray(queries, dtype=np.float64)
    p = np.asarray(points, dtype=np.float64)
    dists = np.full((len(q), k), np.inf)
    idx = np.full((len(q), k), -1, dtype=np.int64)
    for m in range(len(q)):
        d = np.sqrt(((p - q[m]) ** 2).sum(axis=1))
        order = np.argsort(d, kind="stable")[:k]
        dists[m, : len(order)] = d[order]
        idx[m, : len(order)] = order
    return dists, idx


def ball_query_reference(queries, points, radius: float, k: int, *, inclusive: bool = True):
    """pointnet2's ball query of one cloud by a loop: the first k indices with distance <= radius (< radius
    when not ``inclusive``), compared as squared distances in float64; -1 padding. Returns (M, k) int64."""
    q = np.asarray(queries, dtype=np.float64)
    p = np.asarray(points, dtype=np.float64)
    out = np.full((len(q), k), -1, dtype=np.int64)
    for m in range(len(q)):
        d2 = ((p - q[m]) ** 2).sum(axis=1)
        hits = np.flatnonzero(d2 <= radius * radius if inclusive else d2 < radius * radius)
        hits = hits[:k]
        out[m, : len(hits)] = hits
    return out


def three_interpolate_reference(features, idx, weight):
    """Weighted gather by loops, in float64: ``out[b, c, m] = sum_k weight[b, m, k] * features[b, c, idx[b, m, k]]``,
    -1 entries contributing nothing. ``features`` (B, C, N), ``idx`` / ``weight`` (B, M, K)."""
    f = np.asarray(features, dtype=np.float64)
    ix = np.asarray(idx)
    w = np.asarray(weight, dtype=np.float64)
    out = np.zeros((f.shape[0], f.shape[1], ix.shape[1]))
    for b in range(ix.shape[0]):
        for m in range(ix.shape[1]):
            for j in range(ix.shape[2]):
                if ix[b, m, j] != -1:
                    out[b, :, m] += w[b, m, j] * f[b, :, ix[b, m, j]]
    return out


def collision_pairs_reference(sphere_links, ignored=()):
    """Sphere pairs ``(i, j)``, ``i < j``, of different links and not an ignored link pair (either order), by
    a double loop in (i, j) order. ``ignored``: ``(a, b)`` link pairs. Returns a list of ``[i, j]``."""
    links = [int(x) for x in sphere_links]
    drop = {(int(a), int(b)) for a, b in ignored} | {(int(b), int(a)) for a, b in ignored}
    return [
        [i, j]
        for i in range(len(links))
        for j in range(i + 1, len(links))
        if links[i] != links[j] and (links[i], links[j]) not in drop
    ]


def self_collision_reference(spheres, pairs, margin=0.0, reduction="max"):
    """Self-collision cost by plain torch ops on the pairs (centres gathered per pair, ``norm``): the
    ``(..., P, 3)`` version a user writes, differentiable by torch's autograd (whose ``norm`` gives a zero
    gradient at coincident centres).

    ``spheres`` (..., S, 4), ``pairs`` (P, 2) ints (``-1`` padding and pairs ``(i, i)`` contribute 0),
    ``margin`` a float or an (S,) tensor added to each radius. Penetration ``(r_i + m_i) + (r_j + m_j) -
    |c_i - c_j|``, 0 where a radius is negative (disabled sphere), clamped at 0; ``reduction`` "max" (0 for
    no pairs), "sum" or None (..., P)."""
    import torch

    pairs = torch.as_tensor(pairs).long().to(spheres.device)
    i, j = pairs[:, 0], pairs[:, 1]
    real = (i >= 0) & (j >= 0) & (i != j)
    i, j = i.clamp_min(0), j.clamp_min(0)
    centres, radii = spheres[..., :3], spheres[..., 3]
    grown = radii + margin
    dist = (centres[..., i, :] - centres[..., j, :]).norm(dim=-1)
    pen = grown[..., i] + grown[..., j] - dist
    enabled = (radii[..., i] >= 0) & (radii[..., j] >= 0) & real
    pen = torch.where(enabled, pen, torch.zeros_like(pen)).clamp_min(0.0)
    if reduction is None:
        return pen
    if reduction == "sum":
        return pen.sum(-1)
    if pen.shape[-1] == 0:
        return pen.sum(-1)
    return pen.amax(-1)
