"""The 16-point random Hadamard transform (RHT) of NVIDIA's NVFP4 training recipe.

H = diag(S) . H16 / 4, with H16 the Sylvester Hadamard matrix and S a fixed sign vector (TE's default in
`tenfold.formats.scheme.TE_HADAMARD_SIGNS`). It is applied to consecutive 16-element tiles of the last
axis: x' = x . H (NVIDIA, "Pretraining Large Language Models with NVFP4", arXiv 2509.25149 §4.2,
https://arxiv.org/abs/2509.25149; Transformer Engine's `NVFP4QuantizerRef._apply_rht`, in
transformer_engine/pytorch/custom_recipes/reference_nvfp4.py). H is orthogonal, so
x = x' . H^T, and a GEMM whose two operands are rotated along the reduction axis is unchanged.

Computed in fp32 with a fixed butterfly (four add/subtract stages, then an exact scaling by 1/4) rather
than a BLAS matmul, so the result does not depend on the BLAS library, the thread count or the device.
"""

from __future__ import annotations

import torch

from tenfold.formats.scheme import HADAMARD_SIZE


def hadamard_matrix(signs: tuple[int, ...], device: torch.device | str = "cpu") -> torch.Tensor:
    """diag(signs) . H16 / 4 as an fp32 matrix; entries are +-1/4."""
    h = torch.ones(1, 1, dtype=torch.float32)
    while h.shape[0] < HADAMARD_SIZE:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    s = torch.tensor(signs, dtype=torch.float32).unsqueeze(1)
    return (s * h * 0.25).to(device)


def _walsh_hadamard(t: torch.Tensor) -> torch.Tensor:
    """t . H16 for rows of 16 (Sylvester order), by the radix-2 butterfly."""
    n = HADAMARD_SIZE
    h = 1
    while h < n:
        v = t.reshape(-1, n // (2 * h), 2, h)
        a, b = v[:, :, 0, :], v[:, :, 1, :]
        t = torch.stack([a + b, a - b], dim=2).reshape(-1, n)
        h *= 2
    return t


def rotate(x: torch.Tensor, signs: tuple[int, ...], inverse: bool = False) -> torch.Tensor:
    """Apply H (or, with `inverse`, H^T) to 16-element tiles of the last axis of fp32 `x`."""
    if x.shape[-1] % HADAMARD_SIZE:
        raise ValueError(f"the Hadamard transform needs a last dim divisible by 16, got {x.shape[-1]}")
    s = torch.tensor(signs, dtype=torch.float32, device=x.device)
    t = x.reshape(-1, HADAMARD_SIZE)
    out = _walsh_hadamard(t) * 0.25 * s if inverse else _walsh_hadamard(t * s) * 0.25
    return out.reshape(x.shape)
