"""The working layout: the blocked axis moved last and padded with zeros to whole blocks.

Quantized codes and scales live in this layout. Padding is transparent: zeros never raise a block's
amax, so padded blocks quantize exactly like the unpadded data, and dequantization slices the padding
off and moves the axis back. For 2-D blocks both of the last two dims are padded.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tenfold.formats.scheme import Scheme


def normalize_axis(axis: int, ndim: int, name: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: axis {axis} is out of range for a {ndim}-D tensor")
    return axis % ndim


def to_working(x: torch.Tensor, s: Scheme) -> torch.Tensor:
    """fp32 copy of `x` in the working layout of scheme `s` (see module docstring)."""
    x = x.to(torch.float32)
    rows, cols = s.block
    if s.is_2d:
        if x.ndim < 2:
            raise ValueError(
                f"{s.name}: a 2-D block scheme needs a tensor of at least 2 dims, got {x.ndim}-D"
            )
        pad_r = (-x.shape[-2]) % rows
        pad_c = (-x.shape[-1]) % cols
        return F.pad(x, (0, pad_c, 0, pad_r)) if pad_r or pad_c else x.contiguous()
    if rows == 0:  # whole tensor
        return x.contiguous()
    if x.ndim == 0:
        raise ValueError(f"{s.name}: a block scheme needs at least a 1-D tensor")
    axis = normalize_axis(s.axis, x.ndim, s.name)
    xw = x.movedim(axis, -1)
    if cols:
        pad = (-xw.shape[-1]) % cols
        if pad:
            return F.pad(xw, (0, pad))
    return xw.contiguous()


def from_working(xw: torch.Tensor, s: Scheme, shape: tuple[int, ...]) -> torch.Tensor:
    """Inverse of `to_working` for a tensor of the original `shape` (slices padding, restores the axis)."""
    if s.is_2d:
        return xw[..., : shape[-2], : shape[-1]]
    if s.block[0] == 0:
        return xw
    axis = normalize_axis(s.axis, len(shape), s.name)
    xw = xw[..., : shape[axis]]
    return xw.movedim(-1, axis)


def tiles(xw: torch.Tensor, s: Scheme) -> torch.Tensor:
    """View of the working tensor with each scale's elements gathered on the last axis.

    1-D blocks: (..., nblocks, k). Rows: (..., 1, n). 2-D blocks: (..., R/r, C/c, r*c). Whole tensor:
    (1, numel).
    """
    rows, cols = s.block
    if s.is_2d:
        *lead, r_total, c_total = xw.shape
        t = xw.reshape(*lead, r_total // rows, rows, c_total // cols, cols)
        return t.transpose(-3, -2).reshape(*lead, r_total // rows, c_total // cols, rows * cols)
    if rows == 0:
        return xw.reshape(1, -1)
    if cols == 0:
        return xw.unsqueeze(-2)
    return xw.reshape(*xw.shape[:-1], xw.shape[-1] // cols, cols)


def untile(t: torch.Tensor, s: Scheme, working_shape: tuple[int, ...]) -> torch.Tensor:
    """Inverse of `tiles`: back to the working layout."""
    rows, cols = s.block
    if s.is_2d:
        *lead, nr, nc, _ = t.shape
        t = t.reshape(*lead, nr, nc, rows, cols).transpose(-3, -2)
        return t.reshape(working_shape)
    return t.reshape(working_shape)
