"""Grouped expert GEMMs (serving/grouped_gemm.py): token-tile padding and the per-tile fixed cost, each
checked on its own and against aiconfigurator-core's measured TensorRT-LLM MoE layers where installed."""

import pytest

from tenfold.perf.serving import grouped_gemm as gg
from tenfold.perf.specs.hardware import load_hardware

MIXTRAL = dict(hidden=4096, inter=14336, topk=2, experts=8)  # 8 large experts, top-2
QWEN3_30B = dict(hidden=2048, inter=768, topk=8, experts=128)  # 128 small experts, top-8


def _touched(tokens: float, topk: int, experts: int) -> float:
    return experts * (1.0 - (1.0 - topk / experts) ** tokens)


def _per_flop(shape: dict, tokens: float, **kw) -> float:
    """Model seconds per useful FLOP of one GPU's grouped GEMMs (no EP, no expert TP)."""
    pairs = tokens * shape["topk"]
    t = gg.grouped_gemm_seconds(
        pairs,
        _touched(tokens, shape["topk"], shape["experts"]),
        hidden=shape["hidden"],
        width=shape["inter"],
        gated=True,
        rate=1e15,
        **kw,
    )
    return float(t) / (2.0 * pairs * 3 * shape["hidden"] * shape["inter"])


def test_padding_costs_small_experts_more_than_large_ones():
    """Same token count: Qwen3-30B-A3B's experts get 64 rows each (tile 64-128, ~44 % padding),
    Mixtral's 256 (a few whole 128-row tiles, ~25 % at most); without padding both are 1.0."""
    tokens = 1024.0
    q = gg.padded_rows(tokens * 8, _touched(tokens, 8, 128)) / (tokens * 8)
    m = gg.padded_rows(tokens * 2, _touched(tokens, 2, 8)) / (tokens * 2)
    assert q > 1.35 and m < 1.26 and q > m + 0.15
    big = gg.padded_rows(16384.0 * 2, _touched(16384.0, 2, 8)) / (16384.0 * 2)
    assert big < 1.02  # thousands of rows per expert: padding vanishes


def test_token_tile_shrinks_with_the_rows_per_expert():
    """TensorRT-LLM sizes the token tile to the next power of two of the rows per expert (at least 8):
    one token per expert costs an 8-row tile, not a 128-row one."""
    rows = gg.padded_rows(128.0, 128.0)  # 128 experts touched once each
    assert rows == pytest.approx(128 * gg.TILE_MIN)
    assert rows < 128 * gg.TILE_M / 4


def test_per_tile_cost_slows_short_reductions():
    """At equal rows per expert (no padding difference), Qwen3-30B-A3B's K = 2048 / 768 GEMMs run
    slower per FLOP than Mixtral's K = 4096 / 14336 ones; with no per-tile cost they would match."""
    q = _per_flop(QWEN3_30B, 16 * 4096.0)  # 4096 rows per expert, like Mixtral below
    m = _per_flop(MIXTRAL, 16384.0)
    assert q / m > 1.3
    q0 = _per_flop(QWEN3_30B, 16 * 4096.0, k_overhead=0.0)
    m0 = _per_flop(MIXTRAL, 16384.0, k_overhead=0.0)
    assert q0 / m0 == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(("gpu", "fmt"), [("h100-sxm", "fp8"), ("h100-sxm", "bf16"), ("b200", "fp8")])
def test_small_experts_per_flop_cost_matches_the_measured_tables(gpu, fmt):
    """aiconfigurator-core's measured fused-MoE layers (TensorRT-LLM, one H100, 16384 tokens, balanced
    routing): Qwen3-30B-A3B spends 1.75x (H100 BF16), 2.55x (H100 FP8), 3.6x (B200 FP8) as long per FLOP
    as Mixtral-8x7B (its layer also carries
    more permute/activation traffic per FLOP); the tiling model gives 1.56x. It must give a clear part
    of that ratio (a constant efficiency gives 1.0), and not more than all of it."""
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")
    from tenfold.perf.measured import serving

    measured = []
    for shape in (QWEN3_30B, MIXTRAL):
        s = serving.moe_seconds(gpu, fmt, tokens=16384, moe_tp=1, moe_ep=1, **shape)
        assert s is not None
        measured.append(s / (2.0 * 16384 * shape["topk"] * 3 * shape["hidden"] * shape["inter"]))
    ratio_measured = measured[0] / measured[1]
    ratio_model = _per_flop(QWEN3_30B, 16384.0) / _per_flop(MIXTRAL, 16384.0)
    assert 1.3 < ratio_model <= ratio_measured * 1.05, (ratio_model, ratio_measured)


def test_per_tile_cost_is_a_time_spread_over_the_sms():
    """The fixed cost is a time per tile, so it weighs in proportion to each SM's FLOP/s: an H20 (78 SMs,
    296 dense FP8 TFLOP/s) loses about a sixth as much reduction length to it as an H100 SXM (132 SMs,
    1979); hardware without an SM count falls back to the H100-like constant."""
    h100, h20 = load_hardware("h100-sxm"), load_hardware("h20")
    k_h100 = gg.tile_k_overhead(h100.peak("fp8") * 0.6, h100.sm_count)
    k_h20 = gg.tile_k_overhead(h20.peak("fp8") * 0.6, h20.sm_count)
    assert k_h100 == pytest.approx(gg.K_TILE_OVERHEAD, rel=0.15)
    assert k_h20 / k_h100 == pytest.approx((296 / 78) / (1979 / 132), rel=0.05)
    assert gg.tile_k_overhead(1e15, None) == gg.K_TILE_OVERHEAD
