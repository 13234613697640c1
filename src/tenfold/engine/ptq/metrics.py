"""Agreement metrics for post-training quantization: how closely a quantized model's sentence embeddings
follow the reference model's (cosine per sentence, Spearman rank correlation of pairwise similarities)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def pairwise_cosine(emb: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of every pair i < j of rows of `emb` (N, D), as a vector of N(N-1)/2 in row order."""
    e = F.normalize(emb.to(torch.float64), dim=-1)
    sims = e @ e.t()
    i, j = torch.triu_indices(len(e), len(e), offset=1)
    return sims[i, j]


def rankdata(x: torch.Tensor) -> torch.Tensor:
    """Ranks 1..n of a 1-D tensor, ties given their average rank (scipy.stats.rankdata's 'average')."""
    order = torch.argsort(x, stable=True)
    xs = x[order]
    n = len(x)
    # runs of equal values: the average of positions first..last (1-based) is (first + last) / 2
    new_run = torch.ones(n, dtype=torch.bool)
    new_run[1:] = xs[1:] != xs[:-1]
    run_id = torch.cumsum(new_run, 0) - 1
    pos = torch.arange(1, n + 1, dtype=torch.float64)
    first = torch.zeros(int(run_id[-1]) + 1 if n else 0, dtype=torch.float64).scatter_reduce(
        0, run_id, pos, "amin", include_self=False
    )
    last = torch.zeros_like(first).scatter_reduce(0, run_id, pos, "amax", include_self=False)
    ranks = torch.empty(n, dtype=torch.float64)
    ranks[order] = ((first + last) / 2)[run_id]
    return ranks


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman rank correlation of two 1-D tensors: the Pearson correlation of their average ranks."""
    if a.shape != b.shape or a.ndim != 1 or len(a) < 2:
        raise ValueError(
            f"need two 1-D tensors of the same length >= 2, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    ra, rb = rankdata(a) - (len(a) + 1) / 2, rankdata(b) - (len(b) + 1) / 2
    return float((ra * rb).sum() / torch.sqrt((ra * ra).sum() * (rb * rb).sum()))


@dataclass(frozen=True, kw_only=True)
class EmbeddingAgreement:
    """How closely quantized sentence embeddings follow the reference ones.

    Fields:
        mean_cosine, min_cosine: cosine similarity of each sentence's embedding to its reference.
        spearman: rank correlation of all pairwise similarities, reference vs quantized (does the
            quantized model order sentence pairs by similarity the same way?).
    """

    mean_cosine: float
    min_cosine: float
    spearman: float


def embedding_agreement(reference: torch.Tensor, quantized: torch.Tensor) -> EmbeddingAgreement:
    """Compare (N, D) embeddings of the same N sentences from a reference and a quantized model."""
    if reference.shape != quantized.shape or reference.ndim != 2:
        raise ValueError(
            f"need two (N, D) tensors of one shape, got {tuple(reference.shape)} and {tuple(quantized.shape)}"
        )
    cos = F.cosine_similarity(reference.double(), quantized.double(), dim=-1)
    rho = spearman(pairwise_cosine(reference), pairwise_cosine(quantized))
    return EmbeddingAgreement(mean_cosine=float(cos.mean()), min_cosine=float(cos.min()), spearman=rho)
