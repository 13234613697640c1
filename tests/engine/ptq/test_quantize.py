"""quantize_for_inference: stored weights bit-exact to tenfold.formats and to independent oracles, the
forward pass with and without activation quantization, byte accounting, layer choice, bad inputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from tenfold.engine import (
    PTQ_SCHEMES,
    ConversionPolicy,
    InferenceLinear,
    convert,
    quantize_for_inference,
)
from tenfold.formats import fake_quantize, quantize, scheme

from ...formats.te_nvfp4_reference import quantize_nvfp4

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_utils import tensor_to_scale
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.kernels import unpack_uint4
    from torchao.prototype.mx_formats.mx_tensor import to_mx


class Tiny(nn.Module):
    """Two blocks of (up, down) linears and an LM head, names as in the reference GPT."""

    def __init__(self, d: int = 64, f: int = 128, vocab: int = 96, bias: bool = True) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"up": nn.Linear(d, f, bias=bias), "down": nn.Linear(f, d, bias=bias)})
            for _ in range(2)
        )
        self.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for b in self.blocks:
            x = x + b["down"](torch.relu(b["up"](x)))
        return self.lm_head(self.norm(x))


def tiny(seed: int = 0, **kw) -> Tiny:
    torch.manual_seed(seed)
    m = Tiny(**kw)
    with torch.no_grad():
        for p in m.parameters():
            if p.ndim == 2:  # weights with a few outliers and per-row magnitudes over several octaves
                p.normal_(0, 0.05).mul_(torch.exp2(torch.randint(-3, 4, (p.shape[0], 1)).float()))
                p.view(-1)[::97] *= 20
    return m


# --- the stored weights ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", PTQ_SCHEMES)
def test_stored_weights_are_tenfold_quantize_bit_for_bit(name):
    m = tiny()
    w = m.blocks[0]["up"].weight.detach().clone()
    quantize_for_inference(m, name)
    layer = m.blocks[0]["up"]
    assert isinstance(layer, InferenceLinear)
    q = quantize(w, scheme(name))
    assert torch.equal(layer.weight_codes, q.codes)
    assert torch.equal(layer.weight_scales, q.scales)
    assert (layer.weight_amax is None) == (q.amax is None)
    if q.amax is not None:
        assert torch.equal(layer.weight_amax, q.amax)
    assert torch.equal(layer.dequantized_weight(), fake_quantize(w, scheme(name)))


def _stored(name: str) -> tuple[torch.Tensor, InferenceLinear]:
    m = tiny(seed=3)
    w = m.blocks[1]["down"].weight.detach().clone()
    quantize_for_inference(m, name, activations=False)
    return w, m.blocks[1]["down"]


@pytest.mark.parametrize(
    "name,elem", [("mxfp8_e4m3", torch.float8_e4m3fn), ("mxfp4", torch.float4_e2m1fn_x2)]
)
def test_mx_weights_match_torchao_to_mx(name, elem):
    w, layer = _stored(name)
    scale, data = to_mx(w, elem, 32, ScaleCalculationMode.FLOOR)
    if name == "mxfp4":
        data = unpack_uint4(data)
    assert torch.equal(layer.weight_scales.view(torch.uint8), scale.view(torch.uint8))
    assert torch.equal(layer.qweight.element_codes().to(torch.uint8), data.view(torch.uint8))


def test_nvfp4_weights_match_the_te_reference():
    w, layer = _stored("nvfp4")
    codes, scales, amax = quantize_nvfp4(w.numpy(), (1, 16))
    assert layer.weight_amax.item() == amax
    assert np.array_equal(layer.weight_scales.view(torch.uint8).numpy(), scales)
    assert np.array_equal(layer.qweight.element_codes().numpy(), codes)


def test_fp8_weights_match_torchao_scales_and_casts():
    fmax = torch.finfo(torch.float8_e4m3fn).max
    w, layer = _stored("fp8_e4m3_tensor")
    s = tensor_to_scale(w, torch.float8_e4m3fn)
    assert torch.equal(1 / layer.weight_scales, s)
    cast = torch.clamp(w * s, -fmax, fmax).to(torch.float8_e4m3fn)
    assert torch.equal(layer.weight_codes.view(torch.uint8), cast.view(torch.uint8))
    w, layer = _stored("fp8_e4m3_row")
    s = tensor_to_scale(
        w, torch.float8_e4m3fn, scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=-1,
        round_scales_to_power_of_2=True,
    )  # fmt: skip
    assert torch.equal(layer.weight_scales, 1 / s)
    cast = torch.clamp(w * s, -fmax, fmax).to(torch.float8_e4m3fn)
    assert torch.equal(layer.weight_codes.view(torch.uint8), cast.view(torch.uint8))


def test_state_dict_holds_codes_not_float_weights():
    m = tiny()
    quantize_for_inference(m, "nvfp4")
    sd = m.state_dict()
    assert "blocks.0.up.weight" not in sd
    assert sd["blocks.0.up.weight_codes"].dtype == torch.uint8
    assert sd["blocks.0.up.weight_codes"].shape == (128, 32)  # two E2M1 codes per byte
    assert sd["blocks.0.up.weight_scales"].shape == (128, 4)
    assert "lm_head.weight" in sd  # kept


# --- the forward pass ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PTQ_SCHEMES)
def test_forward_weight_only_and_weight_plus_activation(name):
    torch.manual_seed(1)
    lin = nn.Linear(64, 48)
    x = torch.randn(3, 5, 64) * 3
    w, b = lin.weight.detach().clone(), lin.bias.detach().clone()
    wq = fake_quantize(w, scheme(name))
    wo = nn.Sequential(lin)
    rep = quantize_for_inference(wo, name, activations=False)
    assert rep.activations is None and rep.mode == "weight-only"
    y_w = wo(x)
    assert torch.equal(y_w, (x.reshape(-1, 64) @ wq.t() + b).reshape(3, 5, 48))
    wa = nn.Sequential(nn.Linear(64, 48))
    wa[0].load_state_dict({"weight": w, "bias": b})
    rep = quantize_for_inference(wa, name, activations=True)
    assert rep.activations == name and rep.mode == "weight+activation"
    y_wa = wa(x)
    xq = fake_quantize(x.reshape(-1, 64), scheme(name))
    assert torch.equal(y_wa, (xq @ wq.t() + b).reshape(3, 5, 48))
    assert not torch.equal(y_wa, y_w)  # the activations really are quantized
    assert torch.equal(wa(x), y_wa)  # no state carried between calls


def test_activation_scales_are_per_call_and_per_block():
    """MX: one scale per 32 inputs of one token, so a token's output does not depend on its batch."""
    torch.manual_seed(2)
    m = nn.Sequential(nn.Linear(64, 32))
    quantize_for_inference(m, "mxfp4")
    x = torch.randn(8, 64)
    big = torch.cat([x, 1000 * torch.randn(1, 64)])
    assert torch.equal(m(big)[:8], m(x))


def test_conv1d_layers_are_quantized_like_linear():
    class Conv1D(nn.Module):  # the shape of Hugging Face's GPT-2 Conv1D: weight (in, out)
        def __init__(self, nf: int, nx: int) -> None:
            super().__init__()
            self.nf = nf
            self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
            self.bias = nn.Parameter(torch.randn(nf) * 0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.weight + self.bias

    torch.manual_seed(4)
    m = nn.Sequential(Conv1D(48, 64))
    w, b = m[0].weight.detach().t().contiguous(), m[0].bias.detach().clone()
    x = torch.randn(6, 64)
    rep = quantize_for_inference(m, "nvfp4")
    assert rep.layers[0].kind == "Conv1D" and rep.layers[0].quantized
    ref = fake_quantize(x, scheme("nvfp4")) @ fake_quantize(w, scheme("nvfp4")).t() + b
    assert torch.equal(m(x), ref)


# --- byte accounting -------------------------------------------------------------------------------


def expected_bytes(name: str, rows: int, cols: int) -> int:
    """Storage of an (rows, cols) weight: element codes plus every scale (NVFP4: one E4M3 scale per 16
    plus an fp32 tensor scale; MX: one E8M0 scale per 32, OCP MX v1.0 spec §5)."""
    n = rows * cols
    return {
        "nvfp4": n // 2 + n // 16 + 4,  # E2M1 codes, one E4M3 per 16, one fp32 tensor scale
        "mxfp4": n // 2 + n // 32,  # E2M1 codes, one E8M0 per 32
        "mxfp8_e4m3": n + n // 32,  # E4M3 codes, one E8M0 per 32
        "fp8_e4m3_tensor": n + 4,  # one fp32 scale
        "fp8_e4m3_row": n + 4 * rows,  # one fp32 scale per output row
    }[name]


@pytest.mark.parametrize("name", PTQ_SCHEMES)
def test_byte_accounting_counts_codes_and_scales(name):
    m = tiny()
    before = sum(p.numel() * 4 for p in m.parameters())
    rep = quantize_for_inference(m, name, activations=False)
    shapes = {"up": (128, 64), "down": (64, 128)}
    for layer in rep.layers:
        if layer.name == "lm_head":
            assert not layer.quantized and "excluded" in layer.reason
            assert layer.weight_bytes_after == layer.weight_bytes_before == 96 * 64 * 4
            continue
        rows, cols = shapes[layer.name.rsplit(".", 1)[1]]
        assert layer.quantized and layer.weight_bytes_before == rows * cols * 4
        assert layer.weight_bytes_after == expected_bytes(name, rows, cols)
    q_after = 2 * (expected_bytes(name, 128, 64) + expected_bytes(name, 64, 128))
    assert rep.weight_bytes_before == 4 * 128 * 64 * 4 + 96 * 64 * 4
    assert rep.weight_bytes_after == q_after + 96 * 64 * 4
    assert rep.model_bytes_before == before
    assert rep.model_bytes_after == before - 4 * 128 * 64 * 4 + q_after
    assert rep.to_dict()["weight_bytes_after"] == rep.weight_bytes_after


@pytest.mark.parametrize(
    "name,bits", [("mxfp4", 4.25), ("mxfp8_e4m3", 8.25), ("nvfp4", 4.5 + 32 / (1024 * 512))]
)
def test_bits_per_element_scales_included(name, bits):
    m = nn.Sequential(nn.Linear(512, 1024, bias=False))
    rep = quantize_for_inference(m, name)
    assert rep.bits_per_element == bits  # NVFP4: 4.5 plus its one 32-bit tensor scale


def test_tied_weights_and_misfit_layers_are_kept_with_a_reason():
    m = tiny()
    m.lm_head.weight = m.embed.weight  # tied
    m.blocks[1]["up"] = nn.Linear(64, 40)
    m.blocks[1]["down"] = nn.Linear(40, 64)  # 40 inputs: not whole blocks of 16 or 32
    before = sum(p.numel() * 4 for p in m.parameters())  # parameters() yields the tied one once
    rep = quantize_for_inference(m, "nvfp4", policy=ConversionPolicy(exclude=()))
    by = {d.name: d for d in rep.layers}
    assert not by["lm_head"].quantized and "shared with embed" in by["lm_head"].reason
    assert m.lm_head.weight is m.embed.weight
    assert not by["blocks.1.down"].quantized and "not a multiple" in by["blocks.1.down"].reason
    assert isinstance(m.blocks[1]["down"], nn.Linear)
    assert [d.name for d in rep.quantized] == ["blocks.0.up", "blocks.0.down", "blocks.1.up"]
    assert {k.kind for k in rep.kept_modules} == {"Embedding", "LayerNorm"}
    assert rep.model_bytes_before == before  # tied storage counted once
    assert "kept lm_head" in rep.summary()


def test_policy_picks_layers_and_fp8_has_no_block_constraint():
    m = tiny()
    m.blocks[1]["down"] = nn.Linear(40, 64)
    rep = quantize_for_inference(m, "fp8_e4m3_row", policy=ConversionPolicy(hp_first_blocks=1))
    assert [d.name for d in rep.quantized] == ["blocks.1.up", "blocks.1.down"]  # rows fit any width
    assert "block 0" in rep.layers[0].reason


# --- bad inputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad,match",
    [
        ("nvfp5", "unknown scheme 'nvfp5'"),
        (scheme("fp8_e4m3_tensor", scaling="delayed"), "delayed scaling"),
        (scheme("nvfp4", hadamard=True), "Hadamard"),
        ("nvfp4_2d", "2-D blocks"),
        (scheme("mxfp4", axis=0), "axis=0"),
        (3, "got int"),
    ],
    ids=["unknown", "delayed", "hadamard", "2d", "axis0", "int"],
)
def test_bad_schemes(bad, match):
    with pytest.raises(ValueError, match=match):
        quantize_for_inference(tiny(), bad)


def test_bad_arguments():
    with pytest.raises(ValueError, match="activations must be True or False, got 'yes'"):
        quantize_for_inference(tiny(), "nvfp4", activations="yes")
    with pytest.raises(ValueError, match="quant_backend 'fast'"):
        quantize_for_inference(tiny(), "nvfp4", quant_backend="fast")
    with pytest.raises(ValueError, match="policy must be a ConversionPolicy"):
        quantize_for_inference(tiny(), "nvfp4", policy={"exclude": ()})
    m = tiny()
    convert(m, "mxfp8")
    with pytest.raises(ValueError, match="already quantized"):
        quantize_for_inference(m, "mxfp8_e4m3")
    m = tiny()
    quantize_for_inference(m, "nvfp4")
    with pytest.raises(ValueError, match="already quantized"):
        quantize_for_inference(m, "nvfp4")
    with pytest.raises(ValueError, match="last dim 64, got shape"):
        m.blocks[0]["up"](torch.randn(2, 63))
