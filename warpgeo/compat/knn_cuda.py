"""``knn_cuda`` (unlimblue/KNN_CUDA) names: ``from knn_cuda import KNN``, as Point-MAE, Point-BERT, PointGPT
and PoinTr import it, backed by :func:`warpgeo.knn`.

::

    from warpgeo.compat.knn_cuda import KNN        # was: from knn_cuda import KNN

    knn = KNN(k=32, transpose_mode=True)
    dist, idx = knn(ref, query)                     # ref (B, N, D), query (B, M, D) -> (B, M, k) each

=================================  ===========================================================================
``KNN(k, transpose_mode=False)``   an ``nn.Module``; ``forward(ref, query)`` -> ``(dist, idx)``
``transpose_mode=True``            ``ref (B, N, D)``, ``query (B, M, D)`` -> ``dist, idx (B, M, k)``
``transpose_mode=False``           ``ref (B, D, N)``, ``query (B, D, M)`` -> ``dist, idx (B, k, M)``
``knn(ref, query, k)``             one cloud, ``ref (D, N)``, ``query (D, M)`` -> ``dist, idx (k, M)``
=================================  ===========================================================================

As the extension: ``dist`` is the Euclidean distance (not squared), float32 (inputs are cast with
``.float()``), ``idx`` int64 (0-based), nearest first; computed under ``torch.no_grad()`` (no gradient).
Points of any dimension: up to 3 on warpgeo's grid search, beyond 3 with plain torch. Differences: the CPU
works too; ties go to the lowest index; ``k`` larger than the reference cloud raises ValueError (the extension
reads past its buffer).
"""

from __future__ import annotations

import torch
from torch import nn

from warpgeo.compat._common import padded_knn, shape_of

__all__ = ["KNN", "knn"]


def _search(ref: torch.Tensor, query: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ref (B, N, D), query (B, M, D) -> float32 Euclidean dist and int64 idx, (B, M, k)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1; got {k!r}")
    if k > ref.shape[1]:
        raise ValueError(f"k={k} is larger than the reference cloud (N={ref.shape[1]} points)")
    with torch.no_grad():
        dist, idx = padded_knn(query.float(), ref.float(), k)
    return dist.float(), idx


def knn(ref: torch.Tensor, query: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One cloud, as ``knn_cuda.knn``: ``ref (D, N)``, ``query (D, M)`` -> ``dist, idx (k, M)``."""
    for name, t in (("ref", ref), ("query", query)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a tensor of shape (D, n); got {shape_of(t)}")
    if ref.shape[0] != query.shape[0]:
        raise ValueError(
            f"ref and query must have the same dimension D; got {tuple(ref.shape)}, {tuple(query.shape)}"
        )
    dist, idx = _search(ref.t()[None], query.t()[None], k)
    return dist[0].t().contiguous(), idx[0].t().contiguous()


class KNN(nn.Module):
    """The k nearest reference points of each query point, as ``knn_cuda.KNN``.

    Args:
        k: neighbours per query.
        transpose_mode: True: points are rows, ``(B, n, D)``, and so are the results, ``(B, M, k)``; False:
            points are columns, ``(B, D, n)``, results ``(B, k, M)``.
    """

    def __init__(self, k: int, transpose_mode: bool = False) -> None:
        super().__init__()
        self.k = k
        self._t = transpose_mode

    def forward(self, ref: torch.Tensor, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(dist, idx)``: float32 Euclidean distances and int64 indices into ``ref``, nearest first."""
        for name, t in (("ref", ref), ("query", query)):
            if not isinstance(t, torch.Tensor) or t.dim() != 3:
                layout = "(B, n, D)" if self._t else "(B, D, n)"
                raise ValueError(f"{name} must be a tensor of shape {layout}; got {shape_of(t)}")
        if ref.shape[0] != query.shape[0]:
            raise ValueError(
                f"ref.shape={tuple(ref.shape)} != query.shape={tuple(query.shape)} (batch sizes)"
            )
        if not self._t:
            ref, query = ref.transpose(1, 2), query.transpose(1, 2)
        if ref.shape[2] != query.shape[2]:
            raise ValueError(
                f"ref and query must have the same point dimension; got {tuple(ref.shape)} and {tuple(query.shape)}"
            )
        dist, idx = _search(ref, query, self.k)
        if not self._t:
            dist, idx = dist.transpose(1, 2).contiguous(), idx.transpose(1, 2).contiguous()
        return dist, idx
