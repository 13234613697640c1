"""The recorder's figures against ones computed directly (by hand, or from the reference quantizer)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from tenfold.engine import convert, recipe
from tenfold.engine.operands import OPERAND_AXIS
from tenfold.engine.quant import operand, padded_shape, reference_operand
from tenfold.engine.telemetry.recorder import (
    Recorder,
    TelemetryConfig,
    operand_parts,
    operand_stats,
)
from tenfold.formats import quantize, scheme
from tenfold.jsonl import read_jsonl


def test_known_mxfp4_block_by_hand() -> None:
    # one block of 32: amax 7 -> OCP FLOOR exponent floor(log2 7) - emax(E2M1)=2 - 2 = 0, scale 1;
    # 7 saturates to 6, 0.2 (< 0.25, half the smallest subnormal 0.5) flushes to 0, 0.3 -> 0.5, 1 exact
    x = torch.zeros(1, 32)
    x[0, :4] = torch.tensor([7.0, 0.2, 0.3, 1.0])
    st = operand_stats(x, scheme("mxfp4"), 1)
    assert st.amax == 7.0
    assert st.clip_frac == 1 / 32
    assert st.underflow_frac == 1 / 32
    assert st.zero_frac == 28 / 32
    assert st.scale_kind == "e8m0_exponent"
    assert st.scale_hist == ((0.0, 1),)
    assert st.blocks == 1 and st.blocks_clipped_frac == 1.0
    signal = 7.0**2 + 0.2**2 + 0.3**2 + 1.0**2
    noise = 1.0**2 + 0.2**2 + 0.2**2
    assert st.sqnr_db == pytest.approx(10 * math.log10(signal / noise), rel=1e-6)


def test_negative_underflow_counts() -> None:
    # -0.2 rounds to -0 (code 0x8): a value comparison still counts it (TE PR#2107 compared code bytes)
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 1] = 4.0, -0.2
    st = operand_stats(x, scheme("mxfp4"), 1)
    assert st.underflow_frac == 1 / 32


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp4", "nvfp4", "fp8_e4m3_tensor", "fp8_e4m3_row"])
@pytest.mark.parametrize("axis", [0, 1])
def test_stats_match_reference_quantizer(name: str, axis: int) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 96, generator=g) * torch.logspace(-4, 1, 96)  # wide range: some underflow
    s = scheme(name)
    st = operand_stats(x, s, axis)
    deq = reference_operand(x, s, axis).double()
    xd = x.double()
    assert st.amax == float(x.abs().max())
    assert st.numel == x.numel()
    assert st.underflow_frac == float(((x != 0) & (deq == 0)).double().mean())
    direct = 10 * math.log10(float(xd.pow(2).sum()) / float((xd - deq).pow(2).sum()))
    assert st.sqnr_db == pytest.approx(direct, rel=1e-9)
    # scale histogram: the reference quantizer's own scales
    sa = s.with_options(axis=0) if axis == 0 and name != "fp8_e4m3_tensor" else s
    q = quantize(x, sa)
    sc = q.scales.to(torch.float32).reshape(-1)
    if s.family.value == "nvfp4":
        want = torch.unique(sc, return_counts=True)
    else:
        want = torch.unique(torch.floor(torch.log2(sc)), return_counts=True)
    assert st.scale_hist == tuple(zip(want[0].tolist(), want[1].tolist(), strict=True))
    assert st.blocks == sc.numel()
    if s.family.value == "mx":  # power-of-two scales: |x| / scale is exact, so clipping is direct
        per_el = sc.reshape(q.scales.shape).repeat_interleave(32, dim=-1)
        xs = x if axis == 1 else x.t()
        assert st.clip_frac == float((xs.abs() / per_el > s.element.max).double().mean())


@pytest.mark.parametrize("rname", ["nvfp4", "mxfp8", "fp8_current"])
def test_parts_are_the_gemm_bits(rname: str) -> None:
    """The decoded operand from `operand_parts` is bit-identical to the engine's (Hadamard, SR offsets)."""
    r = recipe(rname)
    x = torch.randn(48, 64)
    for (gemm, side), axis in OPERAND_AXIS.items():
        s = r.operand(gemm, side)
        if s is None:
            continue
        _, _, _, deq = operand_parts(x, s, axis, offset=5 << 32)
        want = operand(x, s, axis, offset=5 << 32, backend="eager")
        rows, cols = padded_shape(*x.shape, s, axis)  # the blocked view reshapes the zero-padded operand
        got = deq.reshape(rows, cols)[: x.shape[0], : x.shape[1]]
        assert torch.equal(got, want), (gemm, side)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 64), nn.Linear(64, 32))


def _steps(m: nn.Module, rec: Recorder | None, n: int) -> list[float]:
    losses = []
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(32, 64, generator=g) for _ in range(n)]
    for step, x in enumerate(xs):
        if rec is not None:
            rec.begin_step(step)
        loss = m(x).square().mean()
        loss.backward()
        if rec is not None:
            rec.end_step()
        with torch.no_grad():
            for p in m.parameters():
                p -= 0.01 * p.grad
                p.grad = None
        losses.append(loss.item())
    return losses


def test_recorder_samples_every_n_and_does_not_change_training(tmp_path) -> None:
    base = _model()
    convert(base, "nvfp4")
    want = _steps(base, None, 5)
    m = _model()
    convert(m, "nvfp4")
    with Recorder(tmp_path, every=2, what_if=("mxfp8", "fp8_current")) as rec:
        names = rec.attach(m)
        assert _steps(m, rec, 5) == want  # bit-identical losses: recording and what-ifs are read-only
        with torch.no_grad():
            m(torch.randn(4, 64))  # an evaluation pass is never recorded
    assert sorted({r.step for r in rec.records}) == [0, 2, 4]
    # per sampled step: every quantized layer x 6 operand slots x (own recipe + 2 what-ifs)
    assert len(rec.records) == 3 * len(names) * 6 * 3
    own = [r for r in rec.records if not r.what_if]
    assert {r.recipe for r in own} == {"nvfp4"}
    assert {(r.gemm, r.tensor) for r in own} == {
        ("fprop", "x"),
        ("fprop", "w"),
        ("dgrad", "dy"),
        ("dgrad", "w"),
        ("wgrad", "dy"),
        ("wgrad", "x"),
    }
    lines = read_jsonl(tmp_path / "telemetry.jsonl")
    assert len(lines) == len(rec.records)
    first = json.loads(json.dumps(rec.records[0].to_dict() | {"schema": 1}))
    assert lines[0]["schema"] == 1 and lines[0] == first
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tb").iterdir())


def test_recorded_x_and_dy_are_the_layer_operands() -> None:
    m = _model()
    convert(m, "mxfp8")
    seen: dict[str, torch.Tensor] = {}
    m[2].register_forward_hook(lambda mod, inp, out: seen.__setitem__("x", inp[0].detach()))
    m[2].register_full_backward_hook(lambda mod, gi, go: seen.__setitem__("dy", go[0].detach()))
    rec = Recorder(None, every=1)
    rec.attach(m)
    _steps(m, rec, 1)
    by = {(r.layer, r.gemm, r.side): r.stats for r in rec.records}
    plan = m[2].plan
    assert by[("2", "fprop", "a")] == operand_stats(seen["x"], plan.fprop_a, 1)
    assert by[("2", "wgrad", "a")] == operand_stats(seen["dy"], plan.wgrad_a, 0)
    assert by[("2", "dgrad", "a")] == operand_stats(seen["dy"], plan.dgrad_a, 1)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="every"):
        TelemetryConfig(every=0)
    with pytest.raises(ValueError, match="nope"):
        TelemetryConfig(what_if=("nope",))
