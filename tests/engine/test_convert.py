"""convert(): what is swapped, what stays high precision and why; QuantLinear as a drop-in layer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tenfold.engine import ConversionPolicy, QuantConv1D, QuantLinear, convert, recipe


class Conv1D(nn.Module):
    """The shape of Hugging Face's GPT-2 Conv1D (weight (in, out), y = x·W + b), defined locally."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = nn.Parameter(torch.randn(nf) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], self.nf)


class Tiny(nn.Module):
    def __init__(self, n_blocks: int = 4, d: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"up": nn.Linear(d, 2 * d), "down": nn.Linear(2 * d, d)}) for _ in range(n_blocks)
        )
        self.odd = nn.Linear(d, 40)  # 40 is not a whole number of 32-element MX blocks
        self.lm_head = nn.Linear(d, 16)


def decisions(report):
    return {d.name: (d.converted, d.reason) for d in report.layers}


def test_default_policy_keeps_the_lm_head_and_misfit_shapes():
    m = Tiny()
    report = convert(m, "mxfp8")
    d = decisions(report)
    assert report.n_blocks == 4 and report.hp_blocks == ()
    assert all(d[f"blocks.{i}.{k}"][0] for i in range(4) for k in ("up", "down"))
    assert not d["lm_head"][0] and "excluded" in d["lm_head"][1]
    assert not d["odd"][0] and "out_features=40" in d["odd"][1] and "32" in d["odd"][1]
    assert isinstance(m.blocks[0]["up"], QuantLinear) and isinstance(m.lm_head, nn.Linear)
    assert len(report.converted) == 8 and len(report.kept) == 2
    assert "kept odd" in report.summary()
    assert report.to_dict()["converted"] == 8


def test_nvfp4_keeps_its_high_precision_tail_and_policy_overrides_it():
    m = Tiny(n_blocks=8)
    report = convert(m, "nvfp4")
    assert report.hp_blocks == (7,)  # ceil(0.125 * 8) = 1 trailing block
    assert not isinstance(m.blocks[7]["up"], QuantLinear) and isinstance(m.blocks[6]["up"], QuantLinear)
    m = Tiny(n_blocks=8)
    report = convert(m, "nvfp4", policy=ConversionPolicy(hp_first_blocks=2, hp_last_blocks=3))
    assert report.hp_blocks == (0, 1, 5, 6, 7)
    kept = decisions(report)
    assert "first blocks" in kept["blocks.1.up"][1] and "last blocks" in kept["blocks.6.up"][1]
    m = Tiny(n_blocks=8)
    assert convert(m, "nvfp4_no_hp_layers").hp_blocks == ()


def test_include_exclude_and_block_fit_switch():
    m = Tiny()
    report = convert(m, "mxfp8", policy=ConversionPolicy(include=(r"\.up$",), exclude=()))
    d = decisions(report)
    assert (
        d["blocks.0.up"][0] and not d["blocks.0.down"][0] and d["lm_head"][1] == "matches no include pattern"
    )
    m = Tiny()
    report = convert(m, "mxfp8", policy=ConversionPolicy(require_block_fit=False, exclude=()))
    assert len(report.kept) == 0


def test_bf16_converts_nothing_and_2d_weights_check_both_dims():
    m = Tiny()
    assert len(convert(m, "bf16").converted) == 0
    m = nn.Sequential(nn.Linear(128, 64))  # 64 out-features: not whole 128x128 weight blocks
    d = decisions(convert(m, "fp8_block"))
    assert not d["0"][0] and "128" in d["0"][1]


def test_converted_model_shares_parameters_and_still_trains():
    m = Tiny()
    params = {id(p) for p in m.parameters()}
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    convert(m, "nvfp4")
    assert {id(p) for p in m.parameters()} == params
    x = torch.randn(32, 64)
    before = m.blocks[0]["up"].weight.detach().clone()
    h = m.blocks[0]["down"](torch.relu(m.blocks[0]["up"](x)))
    h.square().mean().backward()
    opt.step()
    assert not torch.equal(before, m.blocks[0]["up"].weight)


def test_seeds_are_distinct_per_module():
    m = Tiny()
    convert(m, "nvfp4", policy=ConversionPolicy(hp_last_blocks=0))
    seeds = [int(q.sr_seed) for q in m.modules() if isinstance(q, QuantLinear)]
    assert len(set(seeds)) == len(seeds) == 8


def test_hugging_face_conv1d_is_converted_keeping_its_weight_layout():
    torch.manual_seed(0)
    m = nn.Sequential(Conv1D(64, 96))
    x = torch.randn(4, 10, 96)
    ref = m(x)
    report = convert(m, "bf16")
    assert report.layers[0].kind == "Conv1D" and not report.layers[0].converted
    report = convert(m, "mxfp8")
    q = m[0]
    assert isinstance(q, QuantConv1D) and q.weight.shape == (96, 64)
    assert (q.in_features, q.out_features) == (96, 64)
    out = m(x)
    assert out.shape == ref.shape and (out - ref).norm() / ref.norm() < 0.05
    out.sum().backward()
    assert q.weight.grad.shape == (96, 64)
    assert set(m.state_dict()) >= {"0.weight", "0.bias"}


def test_quant_linear_is_a_drop_in_linear():
    torch.manual_seed(0)
    lin = nn.Linear(64, 32)
    q = QuantLinear.from_linear(lin, recipe("bf16"))
    x = torch.randn(3, 5, 64)
    assert torch.equal(q(x), lin(x))
    q = QuantLinear.from_linear(lin, recipe("mxfp8"))
    xb = x.to(torch.bfloat16)
    assert q(xb).dtype == torch.bfloat16 and q(x).shape == (3, 5, 32)
    with pytest.raises(ValueError, match="last dim 64"):
        q(torch.randn(2, 63))
    assert "recipe=mxfp8" in repr(q)


def test_policy_validation():
    with pytest.raises(ValueError, match="bad regex"):
        ConversionPolicy(include=("(",))
    with pytest.raises(ValueError, match="tuple of regexes"):
        ConversionPolicy(exclude="lm_head")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group"):
        ConversionPolicy(block_pattern=r"blocks\.\d+")
    with pytest.raises(ValueError, match="hp_first_blocks"):
        ConversionPolicy(hp_first_blocks=-1)
    with pytest.raises(ValueError, match="backend"):
        ConversionPolicy(backend="tpu")
    with pytest.raises(ValueError, match="root module"):
        convert(nn.Linear(64, 64), "mxfp8")


def test_deferred_initialisation_on_the_meta_device():
    """FSDP-style: build on meta, materialise with to_empty(), re-initialise; the backend follows the
    device the layer actually runs on."""
    ref = QuantLinear(64, 32, recipe=recipe("nvfp4"), seed=4)
    lazy = QuantLinear(64, 32, recipe=recipe("nvfp4"), seed=4, device="meta")
    assert "meta" in lazy.backend_choice.reason
    lazy.to_empty(device="cpu")
    lazy.reset_parameters()
    lazy.load_state_dict({"weight": ref.weight.detach(), "bias": ref.bias.detach()}, strict=False)
    x = torch.randn(8, 64)
    assert torch.equal(lazy(x), ref(x)) and "cpu" in lazy.backend_choice.reason
    assert lazy.plan == ref.plan and int(lazy.sr_step) == 0


@pytest.mark.parametrize("name", ["fp8_current", "fp8_delayed", "fp8_rowwise", "nvfp4", "mxfp8"])
@pytest.mark.parametrize("lead", [(0,), (2, 0)])
def test_empty_batch_gives_empty_output_and_zero_weight_grad(name, lead):
    """An MoE expert that receives no tokens: nn.Linear's answer (empty output, zero weight grad)."""
    m = nn.Sequential(nn.Linear(64, 32))
    convert(m, name)
    x = torch.zeros(*lead, 64, requires_grad=True)
    y = m(x)
    assert y.shape == (*lead, 32) and y.dtype == x.dtype
    y.sum().backward()
    assert torch.equal(m[0].weight.grad, torch.zeros(32, 64)) and torch.equal(m[0].bias.grad, torch.zeros(32))


def test_integer_input_raises_like_nn_linear():
    x = torch.ones(2, 64, dtype=torch.int64)
    with pytest.raises(RuntimeError):
        nn.Linear(64, 32)(x)
    m = nn.Sequential(nn.Linear(64, 32))
    convert(m, "mxfp8")
    with pytest.raises(RuntimeError, match="int64"):
        m(x)


def test_converting_twice_says_the_layers_are_already_quantized():
    m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    convert(m, "mxfp8")
    with pytest.warns(UserWarning, match="2 layers were already quantized"):
        again = convert(m, "mxfp8")
    assert again.already_quantized == ("0", "2") and not again.converted
    assert "already quantized" in again.summary() and again.to_dict()["already_quantized"] == ["0", "2"]
