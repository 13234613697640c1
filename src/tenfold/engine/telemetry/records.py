"""What the telemetry recorder writes: one `OperandRecord` per operand per sampled step, and its config.

For each sampled step, every converted layer and each of its six GEMM operands (the table in
`tenfold.engine.operands`), `OperandStats` holds

* ``amax``: the operand's absolute maximum (before any Hadamard rotation);
* ``scale_hist``: the histogram of the scales chosen for its blocks: E8M0 exponents (MX), E4M3 block
  scale values (NVFP4), or log2 of the fp32 decode scale (FP8 per tensor, row or block), with their
  min and max (the ``scale_inv`` min/max of Transformer Engine's `LogFp8TensorStats`);
* ``clip_frac``: the fraction of elements saturated: |x · enc| above the element format's largest
  magnitude before rounding (they are clamped to it; e.g. the OCP FLOOR scale rule puts a block's
  scaled amax in [448, 512) for E4M3: OCP Microscaling Formats (MX) v1.0 spec §6.3,
  https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf);
* ``underflow_frac``: the fraction of elements that are non-zero but quantize to ±0. Values are
  compared, not code bytes, so a negative element that rounds to −0 (code 0x80 in FP8, 0x8 in FP4)
  counts: the bug fixed in NVIDIA/TransformerEngine PR #2107 was comparing codes with 0x00;
* ``sqnr_db``: 10 log10(|v|² / |v − Q(v)|²) (None when exact);
* ``blocks_clipped_frac``: the fraction of scale blocks with at least one clipped element (a per-block
  view users asked Transformer Engine for, NVIDIA/TransformerEngine issue #2801).

The records are plain data; `recorder.py` computes them and `writers.py` writes them, and both import
this module (neither imports the other's types back).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tenfold.engine.recipes import RECIPE_NAMES

DEFAULT_EVERY = 100


@dataclass(frozen=True, kw_only=True)
class OperandStats:
    """Quantization statistics of one 2-D GEMM operand under one scheme (see the module docstring).

    Fields:
        scheme: scheme name.
        numel: elements of the operand (padding excluded).
        amax: absolute maximum of the operand.
        clip_frac: fraction of elements saturated to the element format's max.
        underflow_frac: fraction of elements that are non-zero and quantize to ±0.
        zero_frac: fraction of elements that are exactly zero before quantization.
        sqnr_db: signal-to-quantization-noise ratio in dB; None when the quantization is exact.
        scale_kind: what `scale_hist` counts: e8m0_exponent | e4m3_value | log2_scale_inv.
        scale_hist: (value, count) pairs, ascending, one count per scale block.
        scale_min, scale_max: smallest and largest first-level block scale (fp32 value: the E8M0 or
            E4M3 scale itself; for FP8 the decode scale 1/scale).
        blocks: number of scale blocks.
        blocks_clipped_frac: fraction of blocks with at least one clipped element.
    """

    scheme: str
    numel: int
    amax: float
    clip_frac: float
    underflow_frac: float
    zero_frac: float
    sqnr_db: float | None
    scale_kind: str
    scale_hist: tuple[tuple[float, int], ...]
    scale_min: float
    scale_max: float
    blocks: int
    blocks_clipped_frac: float


@dataclass(frozen=True, kw_only=True)
class TelemetryConfig:
    """How a `Recorder` samples.

    Fields:
        every: record on steps where step % every == 0 (the first step is always sampled).
        what_if: recipe names whose statistics are also computed for every operand (training unchanged).
        high_precision_layers: also record what-if figures for linear layers left in high precision
            (the LM head, NVIDIA's BF16 tail), which have no actual quantization to report.
        jsonl: write `telemetry.jsonl` in the output folder.
        tensorboard: write TensorBoard event files under `tb/` in the output folder.
        keep: also keep every record in `Recorder.records` (memory grows with the run; off for long runs).
        exact_sr: measure stochastically rounded operands (NVFP4 gradients) with the very noise training
            drew. Off by default: regenerating the counter-based noise is most of a sample's cost, so
            such operands are measured under round-to-nearest, the same scales, and the expected SR
            result (SR is unbiased; its underflow is probabilistic rather than a flush).
    """

    every: int = DEFAULT_EVERY
    what_if: tuple[str, ...] = ()
    high_precision_layers: bool = True
    jsonl: bool = True
    tensorboard: bool = True
    keep: bool = True
    exact_sr: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"every must be an int >= 1, got {self.every!r}")
        if isinstance(self.what_if, str):
            raise ValueError(f"what_if must be a tuple of recipe names, got the string {self.what_if!r}")
        object.__setattr__(self, "what_if", tuple(self.what_if))
        bad = [n for n in self.what_if if n not in RECIPE_NAMES]
        if bad:
            raise ValueError(f"unknown what-if recipe(s) {', '.join(bad)}; valid: {', '.join(RECIPE_NAMES)}")


@dataclass(frozen=True, kw_only=True)
class OperandRecord:
    """One operand's statistics at one step (a JSONL line).

    Fields:
        step: training step.
        layer: qualified module name.
        gemm: fprop | dgrad | wgrad; side: a | b; tensor: x | w | dy.
        recipe: the recipe the numbers describe (the layer's own, or a what-if recipe).
        what_if: True for what-if figures (not what training used).
        stats: the statistics.
    """

    step: int
    layer: str
    gemm: str
    side: str
    tensor: str
    recipe: str
    what_if: bool
    stats: OperandStats

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k != "stats"}
        st = asdict(self.stats)
        st["scale_hist"] = [list(p) for p in self.stats.scale_hist]
        return {**d, **st}
