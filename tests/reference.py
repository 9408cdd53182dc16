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
