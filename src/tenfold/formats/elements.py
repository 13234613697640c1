"""Element formats of the OCP MX v1.0 spec and of FP8, described by their bit layout.

Every format is a sign bit, `ebits` exponent bits and `mbits` mantissa bits with IEEE-style subnormals.
Values are emulated in fp32: a value is on a format's grid when it is an integer multiple of the
format's quantum for its binade (see `tenfold.formats.rounding`). MX INT8 is treated as a format with no
exponent bits: a fixed quantum of 2^-6 and magnitudes up to 127/64 (OCP MX v1.0 §5.3.2).

Source for every constant: OCP Microscaling Formats (MX) v1.0 spec, §5 (element formats),
https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf; FP8 E4M3 and
E5M2 are the spec's MXFP8 elements (torch's float8_e4m3fn and float8_e5m2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import torch


@dataclass(frozen=True, kw_only=True)
class ElementFormat:
    """One element (or scale) number format.

    Fields:
        name: short name used in scheme names and messages ("e4m3", "e2m1", ...).
        ebits: exponent bits (0 for MX INT8).
        mbits: mantissa (fraction) bits.
        bias: exponent bias; the smallest normal has exponent 1 - bias.
        max: largest finite magnitude.
        has_inf: whether the format encodes infinities (only E5M2 here).
        has_nan: whether the format encodes NaN (E4M3 and E5M2 here).
        torch_dtype: the torch storage dtype when one exists, else None.
    """

    name: str
    ebits: int
    mbits: int
    bias: int
    max: float
    has_inf: bool = False
    has_nan: bool = False
    torch_dtype: torch.dtype | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.ebits < 0 or self.mbits < 0 or self.ebits + self.mbits > 7:
            raise ValueError(f"{self.name}: ebits={self.ebits}, mbits={self.mbits} do not fit one byte")
        if not self.max > 0:
            raise ValueError(f"{self.name}: max must be positive, got {self.max}")

    @property
    def bits(self) -> int:
        """Total width in bits, sign included: 8 for MX INT8, a two's-complement byte (its 127 magnitudes
        need 7 bits beside the sign; OCP MX v1.0 §5.3.2), 1 + ebits + mbits for the floats."""
        return 8 if self.is_int else 1 + self.ebits + self.mbits

    @property
    def is_int(self) -> bool:
        """True for MX INT8, which has no exponent field."""
        return self.ebits == 0

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal (for INT8: the exponent of the fixed binade, 0)."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest normal: floor(log2(max)); the `emax_elem` of OCP MX §6.3."""
        return math.floor(math.log2(self.max))

    @property
    def min_normal(self) -> float:
        return 2.0**self.emin

    @property
    def min_subnormal(self) -> float:
        """Smallest positive magnitude (for INT8: 2^-6)."""
        return 2.0 ** (self.emin - self.mbits)

    @cached_property
    def magnitudes(self) -> tuple[float, ...]:
        """All non-negative finite magnitudes in code order (code k of the magnitude bits -> value)."""
        out = []
        if self.is_int:
            return tuple(k * 2.0**-self.mbits for k in range(int(self.max * 2**self.mbits) + 1))
        for code in range(2 ** (self.ebits + self.mbits)):
            e_field, m_field = code >> self.mbits, code & ((1 << self.mbits) - 1)
            if e_field == 0:
                value = m_field * 2.0 ** (self.emin - self.mbits)
            else:
                value = (1 + m_field * 2.0**-self.mbits) * 2.0 ** (e_field - self.bias)
            if value > self.max:
                break  # the codes above max are Inf/NaN (E4M3 has only NaN at S.1111.111)
            out.append(value)
        return tuple(out)

    def __repr__(self) -> str:
        return f"ElementFormat({self.name})"


E4M3 = ElementFormat(
    name="e4m3", ebits=4, mbits=3, bias=7, max=448.0, has_nan=True, torch_dtype=torch.float8_e4m3fn
)
E5M2 = ElementFormat(
    name="e5m2",
    ebits=5,
    mbits=2,
    bias=15,
    max=57344.0,
    has_inf=True,
    has_nan=True,
    torch_dtype=torch.float8_e5m2,
)
E3M2 = ElementFormat(name="e3m2", ebits=3, mbits=2, bias=3, max=28.0)
E2M3 = ElementFormat(name="e2m3", ebits=2, mbits=3, bias=1, max=7.5)
E2M1 = ElementFormat(name="e2m1", ebits=2, mbits=1, bias=1, max=6.0)
# MX INT8: two's complement with an implicit scale of 2^-6. We clamp symmetrically to +-127/64 as
# microxcaling does (it never produces -2.0); the spec's -128 code is left unused.
INT8 = ElementFormat(name="int8", ebits=0, mbits=6, bias=1, max=127 / 64)

ELEMENT_FORMATS: dict[str, ElementFormat] = {f.name: f for f in (E4M3, E5M2, E3M2, E2M3, E2M1, INT8)}


def element_format(name: str) -> ElementFormat:
    """Look up an element format by name, with a clear error naming the valid ones."""
    try:
        return ELEMENT_FORMATS[name]
    except KeyError:
        raise ValueError(
            f"unknown element format {name!r}; valid: {', '.join(sorted(ELEMENT_FORMATS))}"
        ) from None
