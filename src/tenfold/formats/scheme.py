"""Quantization schemes: a frozen description of how a tensor becomes element codes and scales.

A scheme names an element format, how scales are shared (the block), how a scale is chosen and how
elements are rounded. Schemes are built by name through one registry (`scheme(name, **options)`); the
names are a public contract (see `SCHEME_NAMES`).

Families:

* ``mx``: OCP MX v1.0 (https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf),
  1x32 blocks along `axis`, E8M0 scale (mxfp8_e4m3, mxfp8_e5m2, mxfp6_*, mxfp4, mxint8); mxfp8_e4m3_2d has
  one E8M0 scale per 32x32 tile of the last two dims, so a matrix and its transpose share codes (Transformer
  Engine v2.19 `MXFP8BlockScaling(enable_2d_quantization=True)`, NVIDIA/TransformerEngine pull request 2634).
* ``nvfp4``: E2M1 elements, E4M3 scale per 1x16 (or 16x16) block, fp32 per-tensor scale; the algorithm of
  Transformer Engine's transformer_engine/pytorch/custom_recipes/reference_nvfp4.py (commit d0067d0).
* ``tensor``: FP8 with one fp32 scale; current scaling or delayed scaling from an amax history.
* ``row``: FP8 with one fp32 scale per row (the whole of `axis`), torchao's "axiswise".
* ``block``: FP8 with an fp32 scale per 1x128 tile (along `axis`) or per 128x128 block (last two dims),
  DeepSeek-V3 (arXiv 2412.19437 §3.3, https://arxiv.org/abs/2412.19437) and TE `Float8BlockScaling`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

from tenfold.formats.e8m0 import NonFinite, ScaleMode
from tenfold.formats.elements import E2M1, E2M3, E3M2, E4M3, E5M2, INT8, ElementFormat
from tenfold.formats.rounding import Rounding

# Transformer Engine's fixed sign vector for the 16x16 random Hadamard transform
# (`get_wgrad_sign_vector` in transformer_engine/pytorch/custom_recipes/reference_nvfp4.py).
TE_HADAMARD_SIGNS: tuple[int, ...] = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)
HADAMARD_SIZE = 16
# block error measures of NVFP4 "Four Over Six" (TE `nvfp4_4over6_err_mode`: MAE | MSE)
FOUR_OVER_SIX_ERRORS: tuple[str, ...] = ("mae", "mse")


class Family(StrEnum):
    MX = "mx"
    NVFP4 = "nvfp4"
    TENSOR = "tensor"
    ROW = "row"
    BLOCK = "block"


class Scaling(StrEnum):
    """Per-tensor FP8 scaling: from this tensor's amax, or from an amax history (TE DelayedScaling)."""

    CURRENT = "current"
    DELAYED = "delayed"


@dataclass(frozen=True, kw_only=True)
class Scheme:
    """How to quantize a tensor. Build with `scheme(name, **options)` rather than directly.

    Fields:
        name: registry name this scheme was built from.
        family: which scale-sharing family (see module docstring).
        element: element format of the codes.
        block: (rows, cols) of the tile sharing one scale, in the working layout (blocked axis last).
            (1, k) blocks run along `axis`; (r, c) with r > 1 tile the last two dims. 0 means "whole
            extent": (1, 0) is a row, (0, 0) the whole tensor.
        axis: the axis blocks run along (1-D blocks and rows); must be -1 for 2-D blocks.
        scale_mode: E8M0 exponent rule for MX schemes (floor | rceil | ceil | even).
        rounding: element rounding (nearest = RNE | away | stochastic).
        seed: stochastic-rounding seed; same seed and offset give the same bits.
        nonfinite: what an Inf input does to the scales, every family (nan | satfinite; see `NonFinite`).
        hadamard: apply the 16-point random Hadamard transform along `axis` before quantizing.
        hadamard_signs: the sign vector S of H = S*H16/4 (default: TE's).
        scaling: tensor family: current or delayed scaling.
        pow2_scales: FP8 families: round the scale down to a power of two (TE/torchao option).
        margin: FP8 families: scale = (fmax / amax) / 2^margin (TE DelayedScaling.margin).
        amax_epsilon: FP8 families: amax is raised to at least this before computing the scale.
        min_block_scale: NVFP4: lower clamp of the E4M3 block scale (0 = TE; 2^-6 = torchao).
        four_over_six: NVFP4: "Four Over Six" block scaling (Cook et al., arXiv 2512.02010,
            https://arxiv.org/abs/2512.02010; TE 2.15+ `nvfp4_4over6`): each block is quantized with its max
            mapped to 6 and to 4, and the candidate with the lower error is kept; the error is "mae" or
            "mse" (TE `nvfp4_4over6_err_mode`); None = plain NVFP4. See `tenfold.formats.four_over_six`.
        four_over_six_e4m3_max: the E4M3 bound in the 4over6 global scale, 256 (TE default,
            `nvfp4_4over6_e4m3_use_256`: headroom for the map-to-4 block scale, 1.5x the map-to-6 one)
            or 448.
        row_scaled: NVFP4 1x16: one fp32 amax (second-level scale) per row of the working layout
            (the whole blocked axis) instead of one per tensor (TE 2.15+ `row_scaled_activation`).
    """

    name: str
    family: Family
    element: ElementFormat
    block: tuple[int, int]
    axis: int = -1
    scale_mode: ScaleMode = ScaleMode.FLOOR
    rounding: Rounding = Rounding.NEAREST
    seed: int = 0
    nonfinite: NonFinite = NonFinite.NAN
    hadamard: bool = False
    hadamard_signs: tuple[int, ...] = TE_HADAMARD_SIGNS
    scaling: Scaling = Scaling.CURRENT
    pow2_scales: bool = False
    margin: int = 0
    amax_epsilon: float = 0.0
    min_block_scale: float = 0.0
    four_over_six: str | None = None
    four_over_six_e4m3_max: int = 256
    row_scaled: bool = False

    def __post_init__(self) -> None:
        for fld, enum in (
            ("scale_mode", ScaleMode),
            ("rounding", Rounding),
            ("nonfinite", NonFinite),
            ("scaling", Scaling),
            ("family", Family),
        ):
            value = getattr(self, fld)
            if not isinstance(value, enum):
                try:
                    object.__setattr__(self, fld, enum(value))
                except ValueError:
                    valid = ", ".join(m.value for m in enum)
                    raise ValueError(f"{self.name}: {fld}={value!r} is not one of: {valid}") from None
        rows, cols = self.block
        if rows < 0 or cols < 0:
            raise ValueError(f"{self.name}: block {self.block} must be non-negative")
        if self.is_2d and self.axis != -1:
            raise ValueError(
                f"{self.name}: 2-D blocks tile the last two dims; axis must be -1, got {self.axis}"
            )
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"{self.name}: seed must be a non-negative int, got {self.seed!r}")
        if len(self.hadamard_signs) != HADAMARD_SIZE or any(s not in (1, -1) for s in self.hadamard_signs):
            raise ValueError(f"{self.name}: hadamard_signs must be {HADAMARD_SIZE} values of +-1")
        if self.hadamard and (self.family not in (Family.MX, Family.NVFP4) or self.is_2d):
            raise ValueError(
                f"{self.name}: the Hadamard transform applies to 1-D block schemes (mx, nvfp4) only; "
                "TE rotates the 1x16 wgrad operands, never 2-D weight blocks"
            )
        if self.margin < 0 or self.amax_epsilon < 0 or self.min_block_scale < 0:
            raise ValueError(f"{self.name}: margin, amax_epsilon and min_block_scale must be >= 0")
        if self.scaling == Scaling.DELAYED and self.family != Family.TENSOR:
            raise ValueError(f"{self.name}: delayed scaling applies to per-tensor FP8 schemes only")
        self._check_nvfp4_options()

    def _check_nvfp4_options(self) -> None:
        """4over6 and row scaling: NVFP4 only, with the restrictions TE's quantizers enforce
        (transformer_engine/pytorch/quantization.py and custom_recipes/reference_nvfp4.py, TE 2.15+)."""
        if self.four_over_six is not None:
            if self.four_over_six not in FOUR_OVER_SIX_ERRORS:
                raise ValueError(
                    f"{self.name}: four_over_six={self.four_over_six!r} is not one of: None, "
                    + ", ".join(FOUR_OVER_SIX_ERRORS)
                )
            if self.family != Family.NVFP4:
                raise ValueError(f"{self.name}: four_over_six applies to NVFP4 schemes only")
            if self.rounding == Rounding.STOCHASTIC:
                raise ValueError(
                    f"{self.name}: four_over_six does not combine with stochastic rounding "
                    "(TE raises too: 4over6 is for weights and activations, never gradients)"
                )
            if self.hadamard:
                raise ValueError(
                    f"{self.name}: four_over_six does not combine with the Hadamard transform "
                    "(TE 4over6 does not support RHT)"
                )
            if self.min_block_scale:
                raise ValueError(f"{self.name}: four_over_six does not combine with min_block_scale")
        if self.four_over_six_e4m3_max not in (256, 448):
            raise ValueError(
                f"{self.name}: four_over_six_e4m3_max={self.four_over_six_e4m3_max!r} is not one of: 256, 448"
            )
        if self.row_scaled and (self.family != Family.NVFP4 or self.is_2d):
            raise ValueError(f"{self.name}: row_scaled applies to 1x16 NVFP4 schemes only (as in TE)")

    @property
    def is_2d(self) -> bool:
        """True when one scale covers a tile of several rows (16x16, 128x128)."""
        return self.block[0] > 1

    @property
    def block_numel(self) -> int:
        """Elements per scale for fixed-size blocks (0 for rows and whole tensors)."""
        return self.block[0] * self.block[1] if self.block[1] else 0

    def bits_per_element(self, numel_per_scale: int | None = None) -> float:
        """Storage bits per element including scales (e.g. NVFP4 4.5, MXFP4 4.25, MXFP8 8.25)."""
        n = self.block_numel or numel_per_scale
        scale_bits = 8 if self.family in (Family.MX, Family.NVFP4) else 32
        return self.element.bits + (scale_bits / n if n else 0.0)

    def with_options(self, **options: Any) -> Scheme:
        """A copy with some options changed (validated like `scheme`)."""
        _check_options(self.name, options)
        return replace(self, **options)


_OPTION_NAMES = {f.name for f in fields(Scheme)} - {"name", "family", "element", "block"}


def _check_options(name: str, options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - _OPTION_NAMES)
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(unknown)} for scheme {name!r}; "
            f"valid: {', '.join(sorted(_OPTION_NAMES))}"
        )


_REGISTRY: dict[str, Callable[..., Scheme]] = {}


def _register(name: str, **base: Any) -> None:
    def build(**options: Any) -> Scheme:
        return Scheme(name=name, **{**base, **options})

    _REGISTRY[name] = build


_register("mxfp8_e4m3", family=Family.MX, element=E4M3, block=(1, 32))
_register("mxfp8_e5m2", family=Family.MX, element=E5M2, block=(1, 32))
_register("mxfp6_e3m2", family=Family.MX, element=E3M2, block=(1, 32))
_register("mxfp6_e2m3", family=Family.MX, element=E2M3, block=(1, 32))
_register("mxfp4", family=Family.MX, element=E2M1, block=(1, 32))
_register("mxint8", family=Family.MX, element=INT8, block=(1, 32))
_register("nvfp4", family=Family.NVFP4, element=E2M1, block=(1, 16))
_register("nvfp4_2d", family=Family.NVFP4, element=E2M1, block=(16, 16))
_register("fp8_e4m3_tensor", family=Family.TENSOR, element=E4M3, block=(0, 0))
_register("fp8_e5m2_tensor", family=Family.TENSOR, element=E5M2, block=(0, 0))
# torchao's "rowwise" recipe rounds its scales to powers of two; so do TE's FP8 block recipes.
_register("fp8_e4m3_row", family=Family.ROW, element=E4M3, block=(1, 0), pow2_scales=True)
_register("fp8_e4m3_block1x128", family=Family.BLOCK, element=E4M3, block=(1, 128), pow2_scales=True)
_register("fp8_e4m3_block128x128", family=Family.BLOCK, element=E4M3, block=(128, 128), pow2_scales=True)
_register("mxfp8_e4m3_2d", family=Family.MX, element=E4M3, block=(32, 32))

SCHEME_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def scheme(name: str, **options: Any) -> Scheme:
    """Build the named scheme, with options such as scale_mode, rounding, axis, seed, hadamard.

    >>> scheme("mxfp8_e4m3", scale_mode="rceil").scale_mode.value
    'rceil'
    """
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown scheme {name!r}; valid: {', '.join(SCHEME_NAMES)}")
    _check_options(name, options)
    return _REGISTRY[name](**options)
