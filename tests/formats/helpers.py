"""Comparison helpers for bit-exact tests."""

from __future__ import annotations

import torch


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical except that any NaN equals any NaN (payloads are not part of any contract here)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    na, nb = torch.isnan(a), torch.isnan(b)
    if not torch.equal(na, nb):
        return False
    int_dtype = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[a.dtype]
    return torch.equal(a[~na].view(int_dtype), b[~nb].view(int_dtype))
