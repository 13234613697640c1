"""Quantization error metrics and a synthetic weight-like test tensor."""

from __future__ import annotations

import math

import torch


def sqnr_db(x: torch.Tensor, xq: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio 10 log10(|x|^2 / |x - xq|^2) in dB (inf when exact)."""
    x = x.to(torch.float64)
    noise = (x - xq.to(torch.float64)).pow(2).sum().item()
    signal = x.pow(2).sum().item()
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def weight_like(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    """A tensor shaped like a trained LLM weight: Student-t(4) entries (heavy tails), per-input-channel
    scales spread over ~2 decades, and a few outlier channels 20x larger, as observed in LLM.int8()
    (Dettmers et al. 2022) and SmoothQuant (Xiao et al. 2023). Scaled to std ~ 1/sqrt(cols)."""
    g = torch.Generator().manual_seed(seed)
    base = _student_t(rows, cols, g)
    channel = torch.exp(torch.randn(cols, generator=g) * 0.75)
    n_out = max(1, cols // 256)
    channel[torch.randperm(cols, generator=g)[:n_out]] *= 20.0
    return (base * channel / math.sqrt(cols)).to(torch.float32)


def _student_t(rows: int, cols: int, g: torch.Generator, dof: float = 4.0) -> torch.Tensor:
    z = torch.randn(rows, cols, generator=g)
    chi2 = torch.randn(int(dof), rows, cols, generator=g).pow(2).sum(0)
    return z / torch.sqrt(chi2 / dof)
