"""Number formats as the cost models see them: which peak the block GEMMs run at, how many bytes an
operand takes, and what quantizing it costs in HBM traffic.

This table is the one place that says how many bytes a weight or a KV-cache element takes in each format,
counting its share of the block scales: bf16/fp16 2 B, fp8 1 B (per-tensor scales), fp8_block
1 + 4/16384 B (128x128-block FP32 scales), mxfp8 1 + 1/32 B (8.25 bits), nvfp4 0.5 + 1/16 B (4.5 bits:
E2M1 plus one E4M3 scale per 16), mxfp4 0.5 + 1/32 B (4.25 bits: one E8M0 scale per 32; OCP MX v1.0).
The training model reads it for GEMM operands, the inference model for weights and the KV cache
(`operand_bytes`).

The low precision applies to the transformer blocks' linear layers (QKV, projection, FFN, experts), as in
Transformer Engine / Megatron-Core recipes; attention (flash), softmax, norms, the router, the output head
and the optimizer stay in BF16/FP32 (Transformer Engine's FP8 primer,
https://docs.nvidia.com/deeplearning/transformer-engine/user-guide/examples/fp8_primer.html).

`quant_bytes` is the extra HBM traffic per quantized element, beyond writing a BF16 tensor once:
* fp8 (per-tensor current scaling, TE Float8CurrentScaling; DeepSeek-V3's 1x128 tiles are similar): an amax
  pass (read 2 B), then read 2 B and write 1 B, plus a transposed 1 B copy for the other GEMM orientation:
  6 B. Delayed scaling would save the amax pass.
* mxfp8 (OCP MX, 1x32 E8M0 scales): read 2 B, write row-wise and column-wise copies (1 + 1 B) and 1/32 B of
  scales each way, no global amax: ~4.1 B.
* nvfp4 (E2M1 in 1x16 blocks, E4M3 scales, fp32 tensor scale): amax pass 2 B, read 2 B, two 0.5 B copies,
  scales 2/16 B, and the 16x16 random Hadamard transform on wgrad inputs folded into the same pass: ~5.1 B.
* mxfp4 (E2M1 in 1x32 blocks, E8M0 scales, no tensor scale): read 2 B, two 0.5 B copies and 2/32 B of
  scales, no amax pass: ~3.1 B. (Used for gpt-oss's released expert weights; training in it is rare.)
TE fuses some of these passes into norms and activations; the fitted HBM efficiency absorbs the rest.

Weight-only execution (`as_weight_only`): on a GPU without the format's tensor cores, serving engines can
still keep the weights in it and dequantise them inside a 16-bit GEMM (W4A16 / W8A16): memory traffic and
capacity at the format's bytes, math at the BF16 rate. Marlin-style kernels do the dequantisation in
registers, hidden under the weight stream at small batches (near the ideal 4x over FP16 up to batch
16-32) and under the FP16 tensor-core work at large ones on Ampere (Frantar et al., "MARLIN: Mixed-Precision
Auto-Regressive Parallel Inference on Large Language Models", arXiv 2408.11743). Hopper is different
(`weight_only_mma_fraction`): its warpgroup MMAs (wgmma) are twice as fast per SM as Ampere's mma.sync
while the CUDA cores that unpack E2M1 and apply the E8M0 scales are not, and the unpacked operand has to
pass through registers (or be written back to shared memory) instead of going straight from TMA to the
tensor cores, so at large batches the conversion, not the MMA, sets the pace. NVIDIA's measured
TensorRT-LLM MoE layers on H100 and H200 (aiconfigurator-core's `moe_perf.parquet`, TensorRT-LLM
1.3.0rc20; github.com/ai-dynamo/aiconfigurator) put the W4A16 MXFP4 grouped GEMMs (TRITON backend,
gpt-oss 2880 x 2880 experts, balanced routing, 2,048-16,384 tokens, every EP size) at 113-129 ns per
routed token-expert pair, 386-440 TFLOP/s, where the BF16 CUTLASS grouped GEMMs of the nearest expert
sizes (hidden 2688 x 1856 and 4096 x 1536, 128 experts) sustain 573-748 TFLOP/s on the same GPUs: a
ratio of 0.53-0.77 over the eight pairs, mean 0.65. OpenAI's Hopper MXFP4 kernel has been retuned since
(triton-lang/triton PR 11361: +22-35 % for BF16 x MXFP4 on H100), and a contributor found "bf16 x mxfp4
lags far behind fp8 x fp8" on Hopper (PR 7853). Which engine does this for which format is in
serving/presets.py.

Block-scaled FP8 (`fp8_block`): DeepSeek-V3/R1 ship their weights in FP8 with one FP32 scale per 128 x 128
weight block and one per 1 x 128 activation tile (DeepSeek-V3 technical report, arXiv 2412.19437 §3.3.2;
the checkpoint's config.json `quantization_config`: quant_method "fp8", weight_block_size [128, 128]).
Blackwell applies such scales in the tensor cores (block-scaled MMA); Hopper's FP8 wgmma takes no scales,
so the kernel multiplies each 128-deep partial sum by its two scales and adds it into an FP32 accumulator
on the CUDA cores, every K block of every tile (the report's "promotion to CUDA cores"; DeepGEMM,
github.com/deepseek-ai/DeepGEMM, and TensorRT-LLM's fp8_block_scale grouped GEMM do the same). The
tensor cores wait while the partial sums drain, a roughly fixed time per K block, so the loss is a share
of the MMA time (`block_scale_mma_fraction`). NVIDIA's measured MoE layers (aiconfigurator-core
`moe_perf.parquet`; large compute-bound shapes, hidden 4096-6144, >= 1,024 rows per expert, balanced
routing) put the block-scaled grouped GEMMs at 0.50-0.58 of the fastest per-tensor FP8 grouped GEMM of
the same shape and GPU: H200 0.578 (TensorRT-LLM 1.3.0rc20), 0.578 (SGLang 0.5.14), 0.570 (vLLM 0.24.0);
H100 0.530, 0.499, 0.534 (4 shapes each; the spread across shapes, 0.43-0.69, is wider than across
engines, so one value per architecture, not per engine). Scales cost 4 B per 16,384 weights.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tenfold.perf.specs.hardware import Hardware


@dataclass(frozen=True, kw_only=True)
class Precision:
    """Fields:
    name: the name used in layouts and CSV rows.
    peak_key: the hardware peak the block GEMMs run at (bf16, fp8, fp6, fp4).
    needs_block_scaling: the format needs block-scaled tensor cores (Blackwell, CDNA 4).
    operand_bytes: bytes per GEMM operand element (with its share of scales).
    quant_bytes: extra HBM bytes to quantize one element (see the module docstring); 0 for 16-bit.
    weight_copy_bytes: bytes per parameter that the low-precision weights add to the 2-byte BF16 weights.
        FP8 and MXFP8 recipes keep FP8 primary weights (Megatron `--fp8-param-gather`): the FP8 copy and its
        transpose (or row/column-wise MX copies) replace the BF16 weights, so they add only the scales;
        NVFP4 recipes keep BF16 weights plus the 4-bit copies.
    bits_class: "16", "8" or "4": the calibration's efficiency class.
    weight_only: stored in this format but multiplied in BF16 (see `as_weight_only`): peak_key "bf16",
        bits_class "16", operand_bytes still the format's.
    software_block_scales: per-block scales applied inside the GEMM main loop, by the CUDA cores where
        the tensor cores cannot (fp8_block on Hopper; `block_scale_mma_fraction`).
    training_gemm_factor: share of its bits class's fitted GEMM rate this format's training GEMMs reach
        (MXFP8 against per-tensor FP8, which share the "8" efficiency; `MXFP8_TRAINING_GEMM_FACTOR`).
    """

    name: str
    peak_key: str
    needs_block_scaling: bool
    operand_bytes: float
    quant_bytes: float
    weight_copy_bytes: float
    bits_class: str
    weight_only: bool = False
    software_block_scales: bool = False
    training_gemm_factor: float = 1.0

    @property
    def low(self) -> bool:
        return self.bits_class != "16"


# MXFP8 training against FP8 with per-tensor current scaling: same model, layout, GPU and release. The
# Megatron-Bridge 25.11 table gives both in one row ("FP8-CS (FP8-MX)"): Llama 3 8B on 8 B200 30624 vs
# 29521 tok/s (0.964), on 8 GB200 31508 vs 29789 (0.945), on 8 GB300 37556 vs 36108 (0.961), and
# Llama 3.1 405B on 128 B200 661 vs 624 (0.944). Source: docs/performance-summary-archive.md, section
# "25.11 NeMo Container", in github.com/NVIDIA-NeMo/Megatron-Bridge at commit
# 067f987df03b8355b03192d88d70f1709fedf51a. In every pair MXFP8 is 4-6 % slower. Before this factor the
# model put it 2 % faster: its MXFP8 quantization moves fewer bytes (module docstring) and both formats
# share the fitted "8" efficiency. NVIDIA's measured kernel tables do not show the gap in the GEMM itself
# (aiconfigurator-core's block-scaled FP8 GEMMs on B200-GB300 run as fast as per-tensor ones at training
# shapes), so it lies in what Transformer Engine runs around them (the scale-factor swizzle before each
# GEMM, cuBLASLt's MXFP8 kernels); it is charged to the MXFP8 GEMMs' rate. 0.88 reproduces the three 8B
# pairs under the shipped calibration (tests/perf/training/test_precision_pairs.py holds them within 2 %).
MXFP8_TRAINING_GEMM_FACTOR = 0.88

PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision(
            name="bf16",
            peak_key="bf16",
            needs_block_scaling=False,
            operand_bytes=2.0,
            quant_bytes=0.0,
            weight_copy_bytes=0.0,
            bits_class="16",
        ),
        Precision(
            name="fp16",
            peak_key="fp16",
            needs_block_scaling=False,
            operand_bytes=2.0,
            quant_bytes=0.0,
            weight_copy_bytes=0.0,
            bits_class="16",
        ),
        Precision(
            name="fp8",
            peak_key="fp8",
            needs_block_scaling=False,
            operand_bytes=1.0,
            quant_bytes=6.0,
            weight_copy_bytes=0.0,
            bits_class="8",
        ),
        Precision(
            name="fp8_block",
            peak_key="fp8",
            needs_block_scaling=False,
            operand_bytes=1.0 + 4 / (128 * 128),
            quant_bytes=6.0,
            weight_copy_bytes=4 / (128 * 128),
            bits_class="8",
            software_block_scales=True,
        ),
        Precision(
            name="mxfp8",
            peak_key="fp8",
            needs_block_scaling=True,
            operand_bytes=1.0 + 1 / 32,
            quant_bytes=4.1,
            weight_copy_bytes=2 / 32,
            bits_class="8",
            training_gemm_factor=MXFP8_TRAINING_GEMM_FACTOR,
        ),
        Precision(
            name="nvfp4",
            peak_key="fp4",
            needs_block_scaling=True,
            operand_bytes=0.5 + 1 / 16,
            quant_bytes=5.1,
            weight_copy_bytes=1.0 + 2 / 16,
            bits_class="4",
        ),
        Precision(
            name="mxfp4",
            peak_key="fp4",
            needs_block_scaling=True,
            operand_bytes=0.5 + 1 / 32,
            quant_bytes=3.1,
            weight_copy_bytes=1.0 + 2 / 32,
            bits_class="4",
        ),
    )
}


def get_precision(name: str) -> Precision:
    try:
        return PRECISIONS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown precision {name!r}; known: {', '.join(PRECISIONS)}") from None


def as_weight_only(precision: Precision) -> Precision:
    """`precision` run weight-only: its bytes per weight, BF16 math (module docstring)."""
    if not precision.low:
        return precision
    return replace(
        precision,
        peak_key="bf16",
        needs_block_scaling=False,
        quant_bytes=0.0,
        bits_class="16",
        weight_only=True,
    )


# Share of the 16-bit tensor-core rate a weight-only (mixed-input) GEMM sustains at large batches, by
# architecture (module docstring): Hopper from NVIDIA's measured TensorRT-LLM MoE tables; Ampere per the
# Marlin paper (near FP16 at large batches); architectures absent here have the format's tensor cores.
WEIGHT_ONLY_MMA_FRACTION = {"hopper": 0.65}


def weight_only_mma_fraction(precision: Precision, arch: str) -> float:
    """Factor on the BF16 tensor rate for GEMMs whose weights `precision` runs weight-only on `arch`
    (dequantisation in the main loop; module docstring); 1 for any other GEMM."""
    if not precision.weight_only:
        return 1.0
    return WEIGHT_ONLY_MMA_FRACTION.get(arch, 1.0)


# Share of the per-tensor FP8 tensor rate a block-scaled FP8 GEMM sustains, by architecture, and the
# per-SM FP8 peak (FLOP/s) it was measured at (module docstring: mean of the six newest engine/GPU means,
# H100/H200). Architectures absent here scale blocks in hardware (Blackwell) or have no FP8 at all.
BLOCK_SCALE_MMA_FRACTION = {"hopper": (0.55, 1978.9e12 / 132)}


def block_scale_mma_fraction(precision: Precision, hw: Hardware) -> float:
    """Factor on the FP8 tensor rate for GEMMs in `precision` on `hw`: 1 unless the format's block scales
    are applied on CUDA cores there. The promotion stalls the tensor cores for a roughly fixed time per
    K block, so its share grows with the tensor cores' speed per SM: a part with slower FP8 per SM
    (H20: 296 TFLOP/s on 78 SMs) loses less than H100/H200 (1,979 on 132)."""
    ref = BLOCK_SCALE_MMA_FRACTION.get(hw.arch)
    if not precision.software_block_scales or ref is None or "fp8" not in hw.peak_flops:
        return 1.0
    fraction, per_sm_ref = ref
    per_sm = hw.peak("fp8") / hw.sm_count if hw.sm_count else per_sm_ref
    stall = (1.0 / fraction - 1.0) * per_sm / per_sm_ref
    return 1.0 / (1.0 + stall)


def check_supported(precision: Precision, hw: Hardware) -> str:
    """'' if `hw` can run `precision`, else the reason (used as an infeasibility reason)."""
    if precision.peak_key not in hw.peak_flops:
        return f"{hw.name} has no {precision.peak_key} tensor cores (needed by {precision.name})"
    if precision.needs_block_scaling and precision.name not in hw.block_scaled_formats:
        return f"{hw.name} has no block-scaled {precision.name} tensor cores"
    return ""
