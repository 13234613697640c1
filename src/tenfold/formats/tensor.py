"""`QuantizedTensor`: element codes, scales and the metadata needed to get the values back."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tenfold.formats import fp8, mx, nvfp4
from tenfold.formats.blocking import from_working, tiles, untile
from tenfold.formats.hadamard import rotate
from tenfold.formats.scheme import Family, Scheme


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """A tensor quantized by a scheme.

    Fields:
        codes: element codes in the working layout (blocked axis last, padded to whole blocks): torch
            float8 for FP8 elements, uint8 (FP4 packed two per byte, FP6 four per three bytes), int8 for
            MX INT8.
        scales: one scale per tile: float8_e8m0fnu (MX), float8_e4m3fn (NVFP4), fp32 scale_inv (FP8);
            shaped like the tile grid (..., nblocks) or (..., rows/r, cols/c); a 0-d tensor per tensor.
        amax: NVFP4 only: the fp32 amax behind the second-level scale: 0-d per tensor, or (..., 1) with
            one per row of the working layout for row-scaled schemes.
        scheme: the scheme used.
        shape, dtype: the original tensor's shape and dtype (dequantize returns these by default).
        working_shape: shape of the padded working layout (before FP4/FP6 packing).
    """

    codes: torch.Tensor
    scales: torch.Tensor
    amax: torch.Tensor | None
    scheme: Scheme
    shape: tuple[int, ...]
    dtype: torch.dtype
    working_shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Storage bytes of codes and scales (and the NVFP4 tensor scale)."""
        extra = 4 * self.amax.numel() if self.amax is not None else 0
        return (
            self.codes.numel() * self.codes.element_size()
            + self.scales.numel() * self.scales.element_size()
            + extra
        )

    def element_codes(self) -> torch.Tensor:
        """Unpacked integer codes in the working layout (uint8; int8 for MX INT8)."""
        s = self.scheme
        if s.family == Family.MX:
            return mx.load(self.codes, self.scales, s)[0]
        if s.family == Family.NVFP4:
            return nvfp4.load(self.codes)
        return self.codes.view(torch.uint8)

    def dequantize_working(self) -> torch.Tensor:
        """fp32 values in the working layout, still rotated when the scheme uses the Hadamard transform."""
        s = self.scheme
        codes = self.element_codes()
        if s.family == Family.MX:
            vals = mx.dequantize_tiles(tiles(codes, s), self.scales.view(torch.uint8), s)
        elif s.family == Family.NVFP4:
            assert self.amax is not None
            vals = nvfp4.dequantize_tiles(tiles(codes, s), self.scales, self.amax, s)
        else:
            scale_inv = self.scales.reshape(1) if s.family == Family.TENSOR else self.scales
            vals = fp8.dequantize_tiles(tiles(self.codes, s), scale_inv, s)
        return untile(vals, s, self.working_shape)

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The represented values in the original shape, as `dtype` (default: the original dtype)."""
        if self.numel == 0:
            return torch.empty(self.shape, dtype=dtype or self.dtype, device=self.codes.device)
        xw = self.dequantize_working()
        if self.scheme.hadamard:
            xw = rotate(xw, self.scheme.hadamard_signs, inverse=True)
        return from_working(xw, self.scheme, self.shape).to(dtype or self.dtype)
