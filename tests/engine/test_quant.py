"""GEMM operand quantization: the fused fast paths are bit-exact to the formats core's reference."""

from __future__ import annotations

import pytest
import torch

from tenfold.engine import quant
from tenfold.engine.quant import operand, reference_operand
from tenfold.formats import TE_HADAMARD_SIGNS, quantize, scheme
from tenfold.formats.blocking import from_working
from tenfold.formats.elements import E4M3, E5M2
from tenfold.formats.hadamard import rotate
from tenfold.formats.rounding import Rounding, round_to_grid

from ..formats.helpers import same_values

CASES = [
    ("mxfp8_e4m3", {"scale_mode": "rceil"}),
    ("mxfp8_e4m3", {}),
    ("mxfp8_e5m2", {"rounding": "stochastic", "seed": 3}),
    ("mxfp4", {}),
    ("mxfp4", {"hadamard": True}),
    ("mxfp6_e2m3", {"scale_mode": "even"}),
    ("mxint8", {"rounding": "away"}),
    ("nvfp4", {}),
    ("nvfp4", {"rounding": "stochastic", "seed": 4}),
    ("nvfp4", {"hadamard": True, "rounding": "stochastic", "seed": 2}),
    ("nvfp4_2d", {}),
    ("fp8_e4m3_tensor", {}),
    ("fp8_e5m2_tensor", {"rounding": "stochastic", "seed": 1}),
    ("fp8_e4m3_tensor", {"scaling": "delayed"}),
    ("fp8_e4m3_row", {}),
    ("fp8_e4m3_block1x128", {}),
    ("fp8_e4m3_block128x128", {}),
]


def adversarial(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * torch.exp2(
        torch.randint(-10, 10, (rows, 1), generator=g).float()
    )
    x[0, :40] = 0
    x[1, 3] = 1e6
    x[2, 5] = 2.0**-140
    x[:, 7] *= 300.0  # an outlier channel
    return x


def oracle(x: torch.Tensor, name: str, opts: dict, axis: int, scale=None, offset: int = 0) -> torch.Tensor:
    """Written out here from `tenfold.formats.quantize` alone: codes and scales decoded in the
    working layout (rotated when the scheme rotates), moved back to x's layout."""
    s = scheme(name, **opts)
    if axis == 0 and not (s.is_2d or s.family.value == "tensor"):
        s = s.with_options(axis=0)
    state = None
    if s.scaling.value == "delayed":
        from tenfold.formats import AmaxHistory

        state = AmaxHistory(length=1, fp8_max=s.element.max)
        state.scale = scale.reshape(()).clone()
    q = quantize(x, s, state=state, offset=offset)
    return from_working(q.dequantize_working(), s, tuple(x.shape))


@pytest.mark.parametrize(
    "name,opts", CASES, ids=[f"{c[0]}-{'-'.join(map(str, c[1].values()))}" for c in CASES]
)
def test_operand_eager_and_reference_match_the_formats_core(name, opts):
    s = scheme(name, **opts)
    scale = torch.tensor([3.0]) if s.scaling.value == "delayed" else None
    for shape in ((96, 80), (37, 130)):  # the second needs padding along both axes
        x = adversarial(*shape)
        for axis in (0, 1):
            want = oracle(x, name, opts, axis, scale=scale, offset=5)
            got_ref = reference_operand(x, s, axis, scale=scale, offset=5)
            got = operand(x, s, axis, scale=scale, offset=5, backend="eager")
            assert same_values(want, got_ref), (shape, axis)
            assert same_values(want, got), (shape, axis)


@pytest.mark.parametrize(
    "name,opts",
    [CASES[0], CASES[7], CASES[9], CASES[12], CASES[14]],
    ids=["mxfp8", "nvfp4", "nvfp4-sr-rht", "fp8-delayed", "fp8-row"],
)
def test_operand_compiled_matches_the_reference(name, opts):
    s = scheme(name, **opts)
    scale = torch.tensor([0.5]) if s.scaling.value == "delayed" else None
    x = adversarial(300, 272)
    for axis in (0, 1):
        want = reference_operand(x, s, axis, scale=scale, offset=11)
        got = operand(x, s, axis, scale=scale, offset=torch.tensor(11), backend="compiled")
        assert same_values(want, got), axis


def test_bfloat16_operands():
    x = adversarial(64, 96).to(torch.bfloat16)
    s = scheme("nvfp4", hadamard=True)
    for axis in (0, 1):
        assert same_values(reference_operand(x, s, axis), operand(x, s, axis, backend="eager"))


def test_cast_rounding_equals_round_to_grid_for_fp8():
    """The float8-cast rounding of the fast path against the formats core, on every bf16 pattern,
    random fp32 bit patterns, exact ties, subnormals, overflow and non-finite values."""
    g = torch.Generator().manual_seed(1)
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 18,), generator=g, dtype=torch.int64).to(torch.int32)
    every_bf16 = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    for fmt in (E4M3, E5M2):
        grid = torch.tensor(fmt.magnitudes)
        ties = (grid[1:] + grid[:-1]) / 2
        special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), fmt.max * 1.06, 1e38])
        for v in (
            every_bf16,
            bits.view(torch.float32),
            torch.cat([ties, -ties, special]),
            every_bf16 * 2**-12,
        ):
            s = scheme("fp8_e4m3_tensor" if fmt is E4M3 else "fp8_e5m2_tensor")
            assert same_values(round_to_grid(v, fmt, Rounding.NEAREST), quant._round(v, s, None))


def test_rotation_equals_the_formats_transform_along_either_axis():
    x = adversarial(64, 48)
    assert torch.equal(quant._rotate(x, TE_HADAMARD_SIGNS, 1), rotate(x, TE_HADAMARD_SIGNS))
    assert torch.equal(
        quant._rotate(x, TE_HADAMARD_SIGNS, 0), rotate(x.t().contiguous(), TE_HADAMARD_SIGNS).t()
    )


def test_compiled_callers_trace_inline_without_nested_compilation(monkeypatch):
    """Inside an outer torch.compile region the operand is traced into the caller's graph."""

    def refuse(*args, **kwargs):
        raise AssertionError("nested torch.compile from inside a compiled region")

    s = scheme("mxfp8_e4m3", scale_mode="rceil")
    x = adversarial(512, 256)  # large enough that a plain call would compile a kernel of its own
    want = reference_operand(x, s, 0)
    monkeypatch.setattr(quant, "compiled_copy", refuse)
    fn = torch.compile(lambda t: operand(t, s, 0), fullgraph=True)
    assert same_values(want, fn(x))


def test_errors():
    x = torch.randn(8, 32)
    with pytest.raises(ValueError, match="2-D"):
        operand(torch.randn(2, 3, 4), scheme("mxfp4"), 1)
    with pytest.raises(ValueError, match="axis must be 0 or 1"):
        operand(x, scheme("mxfp4"), 2)
    with pytest.raises(ValueError, match="not in the scheme"):
        operand(x, scheme("mxfp4", axis=0), 0)
    with pytest.raises(ValueError, match="delayed scaling needs its scale"):
        operand(x, scheme("fp8_e4m3_tensor", scaling="delayed"), 1)
    with pytest.raises(ValueError, match="unknown quantization backend"):
        operand(x, scheme("mxfp4"), 1, backend="fast")
