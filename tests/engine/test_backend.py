"""Backend choice and its reasons; the native `_scaled_mm` path (layouts checked on CPU, numerics on GPU)."""

from __future__ import annotations

import copy

import pytest
import torch

from tenfold.engine import QuantLinear, recipe, select_backend
from tenfold.engine.backend import native_obstacle
from tenfold.engine.native import pairing, swizzle_scales, unsupported_reason
from tenfold.formats import scheme

from ..formats.helpers import same_values


def test_cpu_auto_is_emulated_with_a_reason():
    c = select_backend(recipe("mxfp8"), "cpu")
    assert c.backend == "emulated" and "cpu" in c.reason
    c = select_backend(recipe("bf16"), "cpu")
    assert c.backend == "emulated" and "quantizes nothing" in c.reason
    assert select_backend(recipe("nvfp4"), "cpu", requested="emulated").reason == "emulated backend requested"
    layer = QuantLinear(64, 64, recipe=recipe("mxfp8"))
    assert layer.backend_choice.backend == "emulated" and layer.backend_choice.reason


def test_native_requests_that_cannot_be_honoured_say_why():
    with pytest.raises(ValueError, match="mx GEMMs need a Blackwell GPU"):
        select_backend(recipe("mxfp8"), "cpu", requested="native")
    with pytest.raises(ValueError, match="no native GEMM for fp8_e4m3_block1x128"):
        select_backend(recipe("fp8_block"), "cpu", requested="native")
    with pytest.raises(ValueError, match="unknown backend"):
        select_backend(recipe("mxfp8"), "cpu", requested="fast")


def test_capability_rules():
    e4, e5 = scheme("fp8_e4m3_tensor"), scheme("fp8_e5m2_tensor")
    assert pairing(e4, e5) == "tensorwise" and pairing(e5, e5) is None
    assert pairing(scheme("mxfp8_e4m3"), scheme("mxfp8_e4m3")) == "mx"
    assert pairing(scheme("mxfp6_e2m3"), scheme("mxfp6_e2m3")) is None
    assert pairing(scheme("nvfp4"), scheme("nvfp4_2d")) == "nvfp4"
    assert unsupported_reason(e4, e4, (8, 0)) == "tensorwise GEMMs need SM89+, this GPU is SM80"
    assert unsupported_reason(e4, e4, (9, 0)) is None
    nv = scheme("nvfp4")
    assert "SM100" in unsupported_reason(nv, nv, (9, 0))
    assert "SM100/SM103" in unsupported_reason(nv, nv, (12, 0))
    why = native_obstacle(recipe("nvfp4"), torch.device("cpu"), 64, 64)
    assert why is not None and "Blackwell" in why


def test_auto_on_gpus_of_each_generation(monkeypatch):
    """The decision table, with the capability query replaced (no GPU needed)."""
    from tenfold.engine import backend

    monkeypatch.setattr(backend, "_capability", lambda device: (9, 0))
    c = select_backend(recipe("fp8_current"), "cuda", in_features=256, out_features=256)
    assert c.backend == "native" and "SM90" in c.reason
    c = select_backend(recipe("mxfp8"), "cuda", in_features=256, out_features=256)
    assert c.backend == "emulated" and "mx GEMMs need SM100+" in c.reason
    monkeypatch.setattr(backend, "_capability", lambda device: (10, 0))
    c = select_backend(recipe("mxfp8"), "cuda", in_features=48, out_features=256)
    assert c.backend == "emulated" and "reduction dim 48 is not a multiple of 32" in c.reason
    assert select_backend(recipe("nvfp4"), "cuda", in_features=256, out_features=256).backend == "native"
    c = select_backend(recipe("fp8_block"), "cuda", in_features=256, out_features=256)
    assert c.backend == "emulated" and "no native GEMM" in c.reason


def test_swizzled_scale_layout_matches_torchao():
    """cuBLAS's 128x4-tile scale layout, against torchao's independent implementation."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.mx_formats.utils import to_blocked

    g = torch.Generator().manual_seed(0)
    for rows, cols in ((128, 4), (300, 7), (64, 33)):
        s = torch.randint(0, 255, (rows, cols), generator=g, dtype=torch.uint8)
        assert torch.equal(swizzle_scales(s), to_blocked(s))
        e8 = s.view(torch.float8_e8m0fnu)
        assert swizzle_scales(e8).dtype == torch.float8_e8m0fnu


@pytest.mark.parametrize("name", ["fp8_current", "fp8_delayed", "fp8_rowwise"])
def test_native_fp8_layouts_on_cpu_match_the_emulation(name):
    """torch has CPU `_scaled_mm` kernels for per-tensor and row-wise FP8, which check the code layouts,
    scale shapes and padding of the native path against the emulated GEMMs."""
    results = []
    for backend in ("emulated", "native"):
        torch.manual_seed(0)
        layer = QuantLinear(96, 48, bias=False, recipe=recipe(name), backend=backend)
        if layer.scale is not None:
            layer.scale.copy_(torch.tensor([40.0, 300.0, 2000.0]))
        x = torch.randn(37, 96, requires_grad=True)  # 37 tokens: not a multiple of 16
        out = layer(x)
        out.backward(torch.randn_like(out))
        results.append((out.detach(), x.grad, layer.weight.grad))
    assert layer.backend_choice.backend == "native"
    for emu, nat in zip(*results, strict=True):
        assert same_values(nat, emu) or sqnr_db(emu, nat) > 120


def sqnr_db(ref: torch.Tensor, x: torch.Tensor) -> float:
    return (10 * torch.log10(ref.square().mean() / (ref - x).square().mean())).item()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fp8_current", "fp8_delayed", "fp8_rowwise", "mxfp8", "mxfp4", "nvfp4"])
def test_native_gemms_on_gpu_match_the_emulation(name):
    """On GPUs with the tensor cores, `auto` picks native and agrees with the bit-exact emulation up to
    the accumulation order and the bf16 output of the block-scaled kernels."""
    dev = torch.device("cuda")
    r = recipe(name)
    choice = select_backend(r, dev, in_features=256, out_features=128)
    if choice.backend != "native":
        pytest.skip(choice.reason)
    results = []
    for backend in ("emulated", "native"):
        torch.manual_seed(0)
        layer = QuantLinear(256, 128, bias=False, recipe=r, backend=backend, device=dev)
        x = torch.randn(200, 256, device=dev, requires_grad=True)
        out = layer(x)
        out.backward(torch.randn_like(out))
        results.append((out.detach(), x.grad, layer.weight.grad))
    for emu, nat in zip(*results, strict=True):
        assert sqnr_db(emu, nat) > 40, name


@pytest.mark.gpu
def test_emulation_is_bit_identical_on_cpu_and_gpu():
    torch.manual_seed(0)
    outs = []
    # one set of inputs and parameters, made on the CPU: CUDA's RNG and linspace give other values
    base = QuantLinear(128, 64, recipe=recipe("nvfp4"), backend="emulated", seed=3)
    base.weight.data.copy_(torch.linspace(-1, 1, 128 * 64).reshape(64, 128))
    x0 = torch.linspace(-3, 3, 96 * 128).reshape(96, 128)
    # a fixed output gradient: one computed from `out` would carry the GEMM's summation-order difference
    dy0 = torch.cos(torch.linspace(-5, 5, 96 * 64)).reshape(96, 64)
    for dev in ("cpu", "cuda"):
        layer = copy.deepcopy(base).to(dev)
        x = x0.to(dev, copy=True).requires_grad_()
        out = layer(x)
        out.backward(dy0.to(dev))
        outs.append([t.cpu() for t in (out.detach(), x.grad, layer.weight.grad)])
    # the quantized operands are identical; fp32 GEMM sums may differ in order on the two devices
    for c, g in zip(*outs, strict=True):
        assert same_values(c, g) or sqnr_db(c, g) > 100
