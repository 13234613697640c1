"""FP8 with fp32 scales: per tensor (current and delayed), row-wise, and DeepSeek-V3 blocks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from tenfold.formats import AmaxHistory, fake_quantize, quantize, scheme

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_utils import tensor_to_scale


def data(shape=(96, 200), seed=0, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * torch.exp2(
        torch.randint(-6, 6, (shape[0], 1), generator=g).float()
    )
    return x.to(dtype)


def torchao_cast(x: torch.Tensor, scale: torch.Tensor, dtype=torch.float8_e4m3fn) -> torch.Tensor:
    fmax = torch.finfo(dtype).max
    return torch.clamp(x.float() * scale, -fmax, fmax).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "name,fp8", [("fp8_e4m3_tensor", torch.float8_e4m3fn), ("fp8_e5m2_tensor", torch.float8_e5m2)]
)
def test_tensorwise_bit_exact_to_torchao(name, fp8, dtype):
    """torchao scale = fp32(max / fp64(amax)); an fp32 division rounds the same way (53 >= 2*24 + 2)."""
    x = data(dtype=dtype)
    scale = tensor_to_scale(x, fp8)
    q = quantize(x, scheme(name))
    assert torch.equal(1 / q.scales, scale)  # we store scale_inv = 1 / scale, exactly invertible here
    assert torch.equal(q.codes.view(torch.uint8), torchao_cast(x, scale, fp8).view(torch.uint8))


def test_rowwise_bit_exact_to_torchao_axiswise_pow2():
    x = data()
    scale = tensor_to_scale(
        x, torch.float8_e4m3fn, scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=-1,
        round_scales_to_power_of_2=True,
    )  # fmt: skip
    q = quantize(x, scheme("fp8_e4m3_row"))
    assert torch.equal(q.scales, 1 / scale)
    assert torch.equal(q.codes.view(torch.uint8), torchao_cast(x, scale).view(torch.uint8))
    # along axis 0: one scale per column
    q0 = quantize(x, scheme("fp8_e4m3_row", axis=0))
    assert q0.scales.shape == (200, 1)
    assert torch.equal(q0.dequantize(), quantize(x.T.contiguous(), scheme("fp8_e4m3_row")).dequantize().T)


def block_reference(x: np.ndarray, br: int, bc: int, pow2: bool = True) -> np.ndarray:
    """Plain loop over tiles: scale = 448 / amax (pow2: rounded down), x * scale -> e4m3 -> * 1/scale."""
    import ml_dtypes

    m, n = x.shape
    out = np.zeros_like(x)
    for i in range(0, m, br):
        for j in range(0, n, bc):
            t = x[i : i + br, j : j + bc]
            amax = np.float32(np.abs(t).max())
            scale = np.float32(1.0) if amax == 0 else np.float32(448.0) / amax
            if pow2:
                scale = np.float32(2.0 ** np.floor(np.log2(scale)))
            q = np.clip(t * scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
            out[i : i + br, j : j + bc] = q * (np.float32(1.0) / scale)
    return out


@pytest.mark.parametrize(
    "name,tile", [("fp8_e4m3_block1x128", (1, 128)), ("fp8_e4m3_block128x128", (128, 128))]
)
def test_deepseek_blocks_against_a_plain_loop(name, tile):
    x = data((300, 400))
    x[:128, :128] = 0  # an all-zero block: scale 1 (TE rule)
    ours = fake_quantize(x, scheme(name), backend="reference").numpy()
    ref = block_reference(x.numpy(), *tile)
    np.testing.assert_array_equal(ours, ref)
    q = quantize(x, scheme(name))
    expected_scales = (300, 4) if tile == (1, 128) else (3, 4)
    assert q.scales.shape == expected_scales


def test_scale_rule_edge_cases():
    x = torch.zeros(4, 8)
    assert quantize(x, scheme("fp8_e4m3_tensor")).scales.item() == 1.0  # zero amax -> scale 1
    x = torch.full((4, 8), 2.0**-140)  # subnormal amax: 448 / amax overflows -> FLT_MAX
    q = quantize(x, scheme("fp8_e4m3_tensor"))
    assert q.scales.item() == (torch.tensor(1.0) / torch.finfo(torch.float32).max).item()
    x = torch.ones(8)
    x[0] = float("inf")
    assert quantize(x, scheme("fp8_e4m3_tensor")).scales.item() == 1.0  # Inf amax -> scale 1, TE
    x[0] = float("nan")
    assert torch.isnan(fake_quantize(x, scheme("fp8_e4m3_tensor"))).all()  # NaN propagates
    s = scheme("fp8_e4m3_tensor", margin=2)
    assert quantize(torch.tensor([448.0, 1.0]), s).scales.item() == 4.0
    s = scheme("fp8_e4m3_tensor", pow2_scales=True)
    assert quantize(torch.tensor([300.0]), s).scales.item() == 1.0  # 448/300 = 1.49 -> 1


def test_delayed_scaling_history_semantics():
    s = scheme("fp8_e4m3_tensor", scaling="delayed")
    h = AmaxHistory(length=3, algo="max")
    xs = [
        torch.tensor([1.0, 2.0]),
        torch.tensor([8.0, 1.0]),
        torch.tensor([4.0]),
        torch.tensor([2.0]),
        torch.tensor([1.0]),
    ]
    scales = []
    for x in xs:
        scales.append(h.scale.item())
        q = quantize(x, s, state=h)
        assert q.scales.item() == (1 / h.scale).item()
        h.update()
    # step 0 uses the initial scale 1; each later step uses 448 / max(amax over the last 3 steps)
    assert scales == [1.0, 448 / 2, 448 / 8, 448 / 8, 448 / 8]
    h2 = AmaxHistory(length=3, algo="most_recent")
    recent = []
    for x in xs:
        recent.append(h2.scale.item())
        quantize(x, s, state=h2)
        h2.update()
    assert recent == [1.0, 448 / 2, 448 / 8, 448 / 4, 448 / 2]
    with pytest.raises(ValueError, match="AmaxHistory"):
        quantize(xs[0], s)


def test_delayed_scaling_state_round_trip_continues_bit_identically():
    s = scheme("fp8_e4m3_tensor", scaling="delayed")
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(64, generator=g) * (1 + i) for i in range(10)]
    a = AmaxHistory(length=4, margin=1)
    out_a = []
    for i, x in enumerate(xs):
        if i == 5:
            saved = a.state_dict()
        out_a.append(fake_quantize(x, s, state=a))
        a.update()
    b = AmaxHistory(length=4, margin=1)
    b.load_state_dict(saved)
    out_b = []
    for x in xs[5:]:
        out_b.append(fake_quantize(x, s, state=b))
        b.update()
    for u, v in zip(out_a[5:], out_b, strict=True):
        assert torch.equal(u, v)
    with pytest.raises(ValueError, match="length"):
        AmaxHistory(length=8).load_state_dict(saved)


def test_amax_history_validation():
    with pytest.raises(ValueError, match="most_recent"):
        AmaxHistory(algo="mean")
    with pytest.raises(ValueError, match="length"):
        AmaxHistory(length=0)
